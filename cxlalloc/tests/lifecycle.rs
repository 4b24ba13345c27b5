//! Slab life cycle across thread detach: memory a detached thread leaves behind is reclaimed by
//! other threads' frees, so short-lived threads do not strand slabs.

use std::ptr::NonNull;

use cxlalloc::Bracket;
use cxlalloc::SlabState;
use cxlalloc::{Config, Heap};

fn sizes() -> impl Iterator<Item = usize> {
    (0..4000).map(|i| [8, 24, 100, 1000, 3000, 70_000][i % 6])
}

#[test]
fn slabs_of_a_detached_thread_are_reclaimed_by_remote_frees() {
    let heap = Heap::anonymous(&Config { cache_local: 0, ..Config::with_capacity(256 << 20) }).unwrap();
    let freer = heap.attach().unwrap();
    let blocks: Vec<NonNull<u8>> = {
        let t = heap.attach().unwrap();
        sizes().map(|s| t.alloc(s).unwrap()).collect()
    };
    for p in blocks {
        freer.free(p).unwrap();
    }
    drop(freer);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    for b in Bracket::ALL {
        let c = r.bracket(b);
        assert_eq!(c.live_blocks(), 0, "{r}");
        assert_eq!(c.slabs(SlabState::Global), u64::from(c.length), "every slab is back on the global list:\n{r}");
    }
}

#[test]
fn short_lived_threads_whose_blocks_are_freed_elsewhere_do_not_grow_the_heap() {
    let heap = Heap::anonymous(&Config::with_capacity(256 << 20)).unwrap();
    let freer = heap.attach().unwrap();
    let mut lengths = Vec::new();
    for _ in 0..30 {
        let blocks: Vec<NonNull<u8>> = {
            let t = heap.attach().unwrap();
            sizes().map(|s| t.alloc(s).unwrap()).collect()
        };
        for p in blocks {
            freer.free(p).unwrap();
        }
        let r = heap.check();
        assert!(r.is_clean(), "{r}");
        lengths.push(Bracket::ALL.map(|b| r.bracket(b).length));
    }
    assert_eq!(lengths[5], lengths[29], "the heap keeps growing: {lengths:?}");
}

#[test]
fn a_block_freed_locally_before_its_slab_was_abandoned_is_still_a_double_free() {
    let heap = Heap::anonymous(&Config::with_capacity(64 << 20)).unwrap();
    let other = heap.attach().unwrap();
    let (freed, live) = {
        let t = heap.attach().unwrap();
        let blocks: Vec<_> = (0..40).map(|_| t.alloc(1024).unwrap()).collect();
        t.free(blocks[3]).unwrap();
        (blocks[3], blocks[4])
    };
    assert_eq!(other.free(freed), Err(cxlalloc::FreeError::DoubleFree));
    other.free(live).unwrap();
    assert!(heap.check().is_clean());
}

#[test]
fn an_empty_slab_stuck_on_a_sized_list_is_reclaimed_before_the_heap_grows() {
    // Paper §3.2.1: a slab whose blocks came back partly by local and partly by remote frees is
    // empty but stays on its class's sized list while that class is not allocated.
    let heap = Heap::anonymous(&Config { small_batch: 1, cache_local: 0, ..Config::with_capacity(64 << 20) }).unwrap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    // 32 blocks of 1 KiB fill slab A (detached); the 33rd starts slab B.
    let a: Vec<_> = (0..32).map(|_| owner.alloc(1024).unwrap()).collect();
    let b = owner.alloc(1024).unwrap();
    owner.free(a[0]).unwrap(); // A back on the sized list
    for &p in &a[1..] {
        other.free(p).unwrap(); // the rest come back remotely: A is empty, still sized
    }
    let before = heap.check();
    assert_eq!(before.bracket(Bracket::Small).slabs(SlabState::Sized), 2, "{before}");
    let length = before.bracket(Bracket::Small).length;
    // Another class needs a fresh slab: it must get A instead of growing the heap.
    let c = owner.alloc(16).unwrap();
    let after = heap.check();
    assert!(after.is_clean(), "{after}");
    assert_eq!(after.bracket(Bracket::Small).length, length, "the heap grew instead:\n{after}");
    owner.free(b).unwrap();
    owner.free(c).unwrap();
}
