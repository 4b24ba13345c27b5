//! The fault handler and closing heaps (docs/design.md §6): a heap closed on one thread while
//! other threads take faults that the handler serves (huge blocks of the same heap, reached
//! through another instance, that this instance has never mapped) neither crashes nor leaves a
//! mapping behind in the closed heap's address range; and the handler leaves `errno` as the
//! interrupted code had it. Fixed seeds and sizes; not a benchmark.
#![cfg(not(miri))]

mod common;

use std::ptr::NonNull;
use std::sync::{Arc, Barrier};

use common::{serial, HeapName};
use cxlalloc::{Config, Heap, Offset};

const MIB: usize = 1 << 20;
const ROUNDS: usize = 60;
const THREADS: usize = 3;
const BLOCKS_PER_THREAD: usize = 6;

fn config() -> Config {
    Config { huge_capacity: 4 << 30, ..Config::with_capacity(64 << 20) }
}

/// One line of `/proc/self/maps`: start, end, and the rest (permissions, path).
fn mappings() -> Vec<(usize, usize, String)> {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap();
    text.lines()
        .filter_map(|line| {
            let (range, rest) = line.split_once(' ')?;
            let (a, b) = range.split_once('-')?;
            Some((usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?, rest.to_string()))
        })
        .collect()
}

/// The end of the run of adjacent mappings that starts at `base`: a heap's whole reservation
/// (its `PROT_NONE` space and the regions mapped into it are contiguous).
fn reservation_end(base: usize) -> usize {
    let maps = mappings();
    let mut end = base;
    while let Some(&(_, e, _)) = maps.iter().find(|&&(s, e, _)| s <= end && end < e) {
        end = e;
    }
    assert!(end > base, "no mapping at the heap's base {base:#x}");
    end
}

/// Touches (reads and writes) the first word of the block at `off` through `heap`.
fn touch(heap: &Heap, off: u64) {
    let p: NonNull<u64> = heap.pointer(Offset::from_raw(off)).unwrap();
    // SAFETY: a live block of ours, at least a page long; this thread alone writes its first
    // word in this round.
    unsafe {
        let v = p.as_ptr().read_volatile();
        p.as_ptr().write_volatile(v + 1);
    }
}

#[test]
fn closing_a_heap_while_other_threads_fault_crashes_nothing_and_leaves_no_mapping() {
    let _serial = serial();
    let name = HeapName::new("close-while-faulting");
    let heap = Heap::create(name.as_str(), &config()).unwrap();
    let t = heap.attach().unwrap();
    for round in 0..ROUNDS {
        // Opened first, so its registry slot comes before the faulting instance's and every
        // handler below passes through it while it closes.
        let closing = Heap::open(name.as_str()).unwrap();
        {
            // Give it huge state to give up at close (a hazard set, a mapping).
            let c = closing.attach().unwrap();
            let p = c.alloc(2 * MIB).unwrap();
            c.free(p).unwrap();
        }
        let faulting = Heap::open(name.as_str()).unwrap();
        // Blocks the faulting instance has never mapped: each first touch is a fault that the
        // handler serves by mapping the block.
        let blocks: Vec<NonNull<u8>> = (0..THREADS * BLOCKS_PER_THREAD).map(|_| t.alloc(MIB).unwrap()).collect();
        let offs: Vec<u64> = blocks.iter().map(|p| heap.offset_of(p.as_ptr()).unwrap().raw()).collect();
        let go = Arc::new(Barrier::new(THREADS + 1));
        let workers: Vec<_> = (0..THREADS)
            .map(|i| {
                let (faulting, go) = (faulting.clone(), go.clone());
                let mine = offs[i * BLOCKS_PER_THREAD..(i + 1) * BLOCKS_PER_THREAD].to_vec();
                std::thread::spawn(move || {
                    go.wait();
                    for off in mine {
                        touch(&faulting, off);
                    }
                })
            })
            .collect();
        let base = closing.base_address();
        let end = reservation_end(base);
        go.wait();
        drop(closing);
        // Reuse the memory the closed instance freed, with a poison pattern in every small size
        // class: a handler still reading its fault-time map would now act on garbage (and
        // crash) instead of on stale but plausible values.
        let poison: Vec<Vec<u8>> = (1..=512).map(|k| vec![0xa5; k * 16]).collect();
        let stray: Vec<_> = mappings().into_iter().filter(|&(s, e, _)| s < end && base < e).collect();
        assert!(
            stray.is_empty(),
            "round {round}: mappings left in the closed heap's range {base:#x}..{end:#x}: {stray:x?}"
        );
        for w in workers {
            w.join().unwrap();
        }
        drop(poison);
        for p in blocks {
            t.free(p).unwrap();
        }
        drop(faulting);
    }
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

#[test]
fn the_fault_handler_leaves_errno_as_it_found_it() {
    let _serial = serial();
    let name = HeapName::new("fault-errno");
    let heap = Heap::create(name.as_str(), &config()).unwrap();
    let t = heap.attach().unwrap();
    let other = Heap::open(name.as_str()).unwrap();
    let p = t.alloc(2 * MIB).unwrap();
    let off = heap.offset_of(p.as_ptr()).unwrap().raw();
    nix::errno::Errno::set_raw(libc::EXDEV);
    // The first touch through `other` faults; the handler opens and maps the block's object.
    touch(&other, off);
    assert_eq!(nix::errno::Errno::last_raw(), libc::EXDEV);
    drop(other);
    t.free(p).unwrap();
}
