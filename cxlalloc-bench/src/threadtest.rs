//! threadtest (DESIGN §12.2): each thread runs rounds of "allocate `objects` blocks of `size`
//! bytes, write the first `min(size, 64)` bytes of each, free them all".
//!
//! Every thread first runs untimed warm-up rounds (so every allocator is measured with its
//! per-thread caches populated and its memory already faulted in), then waits on a barrier,
//! times its own rounds, and waits on a second barrier before it releases its allocator handle,
//! so no thread's teardown overlaps another's timed work. Throughput is Σ over threads of
//! `pairs_t / time_t`, where a pair is one allocation plus its free.

use std::ptr::NonNull;
use std::sync::Barrier;
use std::time::Instant;

use crate::allocator::{Allocator, ThreadAlloc};
use crate::Error;

/// Bytes written into each block: the first `min(size, TOUCH)`.
pub const TOUCH: usize = 64;

/// One threadtest configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Bytes per block.
    pub size: usize,
    /// Blocks allocated (then freed) per round.
    pub objects: usize,
    /// Timed rounds per thread.
    pub rounds: usize,
    /// Threads.
    pub threads: usize,
    /// Untimed rounds per thread before the start barrier.
    pub warmup_rounds: usize,
}

impl Params {
    /// The published shape: 1000 objects per round up to 1 KiB, 64 above; `total_pairs`
    /// allocate/free pairs split evenly over `threads` (total work fixed across thread counts).
    pub fn fixed_total(size: usize, threads: usize, total_pairs: u64) -> Self {
        let objects = if size <= 1024 { 1000 } else { 64 };
        let per_thread = total_pairs / threads.max(1) as u64;
        let rounds = (per_thread / objects as u64).max(1) as usize;
        Self { size, objects, rounds, threads: threads.max(1), warmup_rounds: 1 }
    }

    /// Allocate/free pairs each thread times.
    pub fn pairs_per_thread(&self) -> u64 {
        (self.objects * self.rounds) as u64
    }
}

/// What one thread measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThreadTime {
    /// Allocate/free pairs completed.
    pub pairs: u64,
    /// Seconds between leaving the start barrier and finishing the last round.
    pub secs: f64,
}

/// What one run of a configuration measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// One entry per thread.
    pub threads: Vec<ThreadTime>,
}

impl Outcome {
    /// Million allocate/free pairs per second: Σ over threads of pairs / seconds.
    pub fn mops(&self) -> f64 {
        self.threads.iter().map(|t| t.pairs as f64 / t.secs.max(1e-9)).sum::<f64>() / 1e6
    }
}

/// Runs `p` once on `alloc`. Fails if any thread's handle or any operation fails; a failing
/// thread still passes both barriers, so the others never wait for it forever.
pub fn run<A: Allocator>(alloc: &A, p: &Params) -> Result<Outcome, Error> {
    let barrier = Barrier::new(p.threads);
    let results: Vec<Result<ThreadTime, Error>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..p.threads).map(|_| s.spawn(|| thread_main(alloc, p, &barrier))).collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err("benchmark thread panicked".into()))).collect()
    });
    Ok(Outcome { threads: results.into_iter().collect::<Result<_, _>>()? })
}

fn thread_main<A: Allocator>(alloc: &A, p: &Params, barrier: &Barrier) -> Result<ThreadTime, Error> {
    let mut ptrs = Vec::with_capacity(p.objects);
    let mut handle = alloc.thread();
    if let Ok(t) = &mut handle {
        for _ in 0..p.warmup_rounds {
            if let Err(e) = round(t, p, &mut ptrs) {
                handle = Err(e);
                break;
            }
        }
    }
    barrier.wait();
    let timed = handle.as_mut().map_err(|e| e.to_string()).and_then(|t| {
        let start = Instant::now();
        for _ in 0..p.rounds {
            round(t, p, &mut ptrs).map_err(|e| e.to_string())?;
        }
        Ok(ThreadTime { pairs: p.pairs_per_thread(), secs: start.elapsed().as_secs_f64() })
    });
    barrier.wait();
    drop(handle);
    Ok(timed?)
}

/// One round; on failure, frees what it had allocated before returning the error.
#[inline]
fn round<T: ThreadAlloc>(t: &mut T, p: &Params, ptrs: &mut Vec<NonNull<u8>>) -> Result<(), Error> {
    let touch = p.size.min(TOUCH);
    let mut failed = None;
    for _ in 0..p.objects {
        match t.alloc(p.size) {
            Ok(ptr) => {
                // SAFETY: the block is at least `size >= touch` bytes and ours until freed.
                unsafe { write_prefix(ptr, touch) };
                // The write must happen: the optimizer may otherwise drop stores to memory that
                // is freed right after.
                ptrs.push(std::hint::black_box(ptr));
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    for ptr in ptrs.drain(..) {
        // SAFETY: allocated above by this handle with `p.size`, freed exactly once here.
        if let Err(e) = unsafe { t.free(ptr, p.size) } {
            failed.get_or_insert(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Writes the first `n` bytes of a block with words that vary by address. (A constant byte would
/// let the compiler turn the loop into a `memset` call, which costs more than the allocation
/// itself for an 8-byte block and would dilute every allocator's numbers alike.)
///
/// # Safety
///
/// `ptr` is valid for writes of `n` bytes.
#[inline(always)]
unsafe fn write_prefix(ptr: NonNull<u8>, n: usize) {
    let p = ptr.as_ptr();
    let tag = p as u64;
    for i in 0..n / 8 {
        // SAFETY: word `i` lies within the first `n` bytes; unaligned writes are allowed.
        unsafe { p.add(8 * i).cast::<u64>().write_unaligned(tag ^ i as u64) };
    }
    for i in n / 8 * 8..n {
        // SAFETY: byte `i < n`.
        unsafe { p.add(i).write(i as u8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{Cxl, Global};
    use cxlalloc::{Config, Heap};

    #[test]
    fn fixed_total_splits_work_over_threads() {
        let one = Params::fixed_total(8, 1, 1_000_000);
        let two = Params::fixed_total(8, 2, 1_000_000);
        assert_eq!((one.objects, one.rounds), (1000, 1000));
        assert_eq!((two.objects, two.rounds), (1000, 500));
        assert_eq!(Params::fixed_total(65536, 1, 6400).objects, 64);
        assert_eq!(Params::fixed_total(65536, 2, 10).rounds, 1, "at least one round");
    }

    #[test]
    fn every_thread_reports_its_pairs() {
        let p = Params { size: 64, objects: 100, rounds: 3, threads: 2, warmup_rounds: 1 };
        for out in [
            run(&Global::system(), &p).unwrap(),
            run(&Global::mimalloc(), &p).unwrap(),
            run(&Cxl::new(Heap::anonymous(&Config::with_capacity(64 << 20)).unwrap(), "cxl"), &p).unwrap(),
        ] {
            assert_eq!(out.threads.len(), 2);
            assert!(out.threads.iter().all(|t| t.pairs == 300 && t.secs > 0.0));
            assert!(out.mops() > 0.0);
        }
    }

    #[test]
    fn threadtest_leaves_the_cxlalloc_heap_consistent_and_empty() {
        let heap = Heap::anonymous(&Config::with_capacity(64 << 20)).unwrap();
        let cxl = Cxl::new(heap.clone(), "cxl");
        for size in [8, 1024, 65536] {
            run(&cxl, &Params { size, objects: 64, rounds: 5, threads: 2, warmup_rounds: 1 }).unwrap();
        }
        let report = heap.check();
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.brackets.iter().map(|b| b.live_blocks()).sum::<u64>(), 0, "{report}");
    }

    #[test]
    fn an_allocation_failure_is_reported_not_hung() {
        // 2 MiB of large-bracket capacity cannot hold 64 blocks of 64 KiB (4 MiB) per thread.
        let cfg = Config { large_capacity: 2 << 20, ..Config::with_capacity(64 << 20) };
        let cxl = Cxl::new(Heap::anonymous(&cfg).unwrap(), "cxl");
        let p = Params { size: 65536, objects: 64, rounds: 1, threads: 2, warmup_rounds: 0 };
        assert!(run(&cxl, &p).is_err());
    }
}
