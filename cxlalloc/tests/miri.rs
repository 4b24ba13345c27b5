//! A short, deterministic workout of the allocator's unsafe code for miri
//! (`script/miri.sh`): an anonymous heap, two thread slots, local and remote frees in both
//! brackets, detach, and the checker. It also runs as an ordinary test.

use std::ptr::NonNull;

use cxlalloc::Bracket;
use cxlalloc::{Config, Heap};

#[test]
fn alloc_free_remote_free_and_detach_check_clean() {
    let config = Config {
        small_capacity: 8 << 15,
        large_capacity: 4 << 19,
        thread_slots: 2,
        small_batch: 2,
        cache_local: 1,
        // Miri backs the reservation with one real allocation: no terabyte of huge span.
        huge_capacity: 0,
        ..Config::default()
    };
    let heap = Heap::anonymous(&config).unwrap();
    let a = heap.attach().unwrap();
    let b = heap.attach().unwrap();
    let sizes = [8usize, 24, 100, 1000, 3000, 40_000];
    let mut blocks: Vec<NonNull<u8>> = Vec::new();
    for i in 0..120 {
        let size = sizes[i % sizes.len()];
        let p = a.alloc(size).unwrap();
        unsafe { p.as_ptr().write_bytes(i as u8, size.min(64)) };
        blocks.push(p);
    }
    for (i, p) in blocks.drain(..).enumerate() {
        assert_eq!(unsafe { *p.as_ptr() }, i as u8);
        // Every other block is freed by the other slot: remote frees, claims.
        if i % 2 == 0 {
            a.free(p).unwrap()
        } else {
            b.free(p).unwrap()
        }
    }
    let q = b.alloc(64).unwrap();
    let q = b.realloc(q, 5000).unwrap();
    assert_eq!(a.free(q), Ok(()));
    drop(a);
    drop(b);
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(Bracket::ALL.iter().map(|&b| report.bracket(b).live_blocks()).sum::<u64>(), 0);
}
