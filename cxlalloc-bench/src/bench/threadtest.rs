//! threadtest (docs/design.md §12.2): each thread runs rounds of "allocate `objects` blocks of `size`
//! bytes, write the first `min(size, 64)` bytes of each, free them all". The total work is fixed
//! across thread counts: `total_pairs` allocate/free pairs split over all threads of all
//! processes. One untimed warm-up round per thread (`warmup_rounds`) runs before the start
//! barrier, so every allocator is timed with its caches populated. An op is one pair.
//!
//! Parameters: `size` (default 8), `objects` (default 1000 up to 1 KiB, 64 above),
//! `total_pairs` (default 8 400 000; the paper used 840 000 000), `warmup_rounds` (default 1).

use std::ptr::NonNull;

use super::{Benchmark, Ctx, Params, Phases, Report};
use crate::allocator::{Allocator, ThreadAlloc};
use crate::Error;

/// Bytes written into each block: the first `min(size, TOUCH)`.
pub const TOUCH: usize = 64;

/// One threadtest configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threadtest {
    /// Bytes per block.
    pub size: usize,
    /// Blocks allocated (then freed) per round.
    pub objects: usize,
    /// Timed rounds per thread.
    pub rounds: usize,
    /// Untimed rounds per thread before the start barrier.
    pub warmup_rounds: usize,
}

impl Benchmark for Threadtest {
    fn new(params: &Params, _processes: usize, threads: usize) -> Result<Self, Error> {
        params.only("threadtest", &["size", "objects", "total_pairs", "warmup_rounds"])?;
        let size = params.u64("size", 8)? as usize;
        if size == 0 {
            return Err("threadtest: size must be at least 1".into());
        }
        let objects = params.u64("objects", if size <= 1024 { 1000 } else { 64 })?.max(1) as usize;
        let total = params.u64("total_pairs", 8_400_000)?;
        let rounds = (total / threads.max(1) as u64 / objects as u64).max(1) as usize;
        let warmup_rounds = params.u64("warmup_rounds", 1)? as usize;
        Ok(Self { size, objects, rounds, warmup_rounds })
    }

    fn thread<A: Allocator>(
        &self,
        _ctx: &Ctx<'_, A>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
    ) -> Result<Report, Error> {
        let mut ptrs = Vec::with_capacity(self.objects);
        let mut report = Report::default();
        for _ in 0..self.warmup_rounds {
            self.round(t, &mut ptrs, &mut report)?;
        }
        phases.start()?;
        for _ in 0..self.rounds {
            self.round(t, &mut ptrs, &mut report)?;
        }
        phases.stop()?;
        report.ops = (self.rounds * self.objects) as u64;
        Ok(report)
    }
}

impl Threadtest {
    /// One round; on failure, frees what it had allocated before returning the error.
    #[inline]
    fn round<T: ThreadAlloc>(&self, t: &mut T, ptrs: &mut Vec<NonNull<u8>>, report: &mut Report) -> Result<(), Error> {
        let touch = self.size.min(TOUCH);
        let mut failed = None;
        for _ in 0..self.objects {
            match t.alloc(self.size) {
                Ok(ptr) => {
                    // SAFETY: the block is at least `size >= touch` bytes and ours until freed.
                    unsafe { write_prefix(ptr, touch) };
                    // The write must happen: the optimizer may otherwise drop stores to memory
                    // that is freed right after.
                    ptrs.push(std::hint::black_box(ptr));
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        report.allocated += ptrs.len() as u64;
        for ptr in ptrs.drain(..) {
            // SAFETY: allocated above by this handle with `self.size`, freed exactly once here.
            match unsafe { t.free(ptr, self.size) } {
                Ok(()) => report.freed += 1,
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

/// Writes the first `n` bytes of a block with words that vary by address. (A constant byte would
/// let the compiler turn the loop into a `memset` call, which costs more than the allocation
/// itself for an 8-byte block and would dilute every allocator's numbers alike.)
///
/// # Safety
///
/// `ptr` is valid for writes of `n` bytes.
#[inline(always)]
pub unsafe fn write_prefix(ptr: NonNull<u8>, n: usize) {
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

    #[test]
    fn total_work_is_split_over_all_threads() {
        let one = Threadtest::new(&Params::of(&[("total_pairs", 1_000_000)]), 1, 1).unwrap();
        let four = Threadtest::new(&Params::of(&[("total_pairs", 1_000_000)]), 2, 4).unwrap();
        assert_eq!(one.rounds * one.objects, 4 * four.rounds * four.objects);
    }

    #[test]
    fn blocks_above_one_kib_use_64_objects_per_round() {
        assert_eq!(Threadtest::new(&Params::of(&[("size", 4096)]), 1, 1).unwrap().objects, 64);
    }
}
