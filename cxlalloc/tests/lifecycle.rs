//! Slab life cycle across thread detach: memory a detached thread leaves behind is reclaimed by
//! other threads' frees, so short-lived threads do not strand slabs.

use std::ptr::NonNull;

use cxlalloc::check::SlabState;
use cxlalloc::class::Bracket;
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
