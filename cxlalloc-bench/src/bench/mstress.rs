//! mstress (docs/design.md §12.2; in the spirit of mimalloc-bench's `mstress`): each thread keeps a
//! retained set of objects and, every iteration, allocates a batch of mixed sizes into it, frees
//! a random half of it, and moves a share of it into a shared transfer array, freeing whatever
//! object it displaces there — usually one another thread allocated, in another process when
//! the two run in different ones.
//!
//! **Sizes** ([`pick_size`]): 2 to 128 words (16 B – 1 KiB) uniformly; one object in 100 is 16×
//! larger (up to 16 KiB), one in 1000 is 512× larger (up to 512 KiB, cxlalloc's largest class).
//!
//! **Transfer array.** `transfer_slots` words of the control area, each 0 or the handle of an
//! object in transit. A thread puts an object in with one atomic swap and frees what it got out;
//! the object's size travels in its stamp ([`stress::stamped_size`]), which is checked before
//! the free. Every free, own or taken, verifies the stamp first.
//!
//! **Work.** `iterations` iterations in all, split evenly over threads, each of
//! `objects_per_iter` allocations and `objects_per_iter / 8` (at least 1) transfers; all timed.
//! After the stop barrier each thread frees its retained set; after a further barrier the
//! transfer slots are drained, slot `s` by thread `s mod T`. Over the run, allocated == freed.
//!
//! **An op** is one allocation or one free in the timed section (taken objects' frees
//! included). `verified` counts stamps that read back (one per free).
//!
//! Parameters: `iterations` (default 2000), `objects_per_iter` (default 1000), `transfer_slots`
//! (default 1000), `seed` (default the configuration's seed).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::stress::{self, share, Rng, MAX_OBJECT};
use super::{Benchmark, Ctx, Params, Phases, Report};
use crate::allocator::{Allocator, Handles, ThreadAlloc};
use crate::shm::Carver;
use crate::Error;

/// Smallest object: two words, so the stamp's first word (which carries the size) fits.
pub const MIN_OBJECT: usize = 16;

/// One transfer per this many allocations.
pub const TRANSFER_EVERY: usize = 8;

/// One mstress configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mstress {
    /// Threads in the run, over all processes.
    pub threads: usize,
    /// Iterations, over all threads.
    pub iterations: u64,
    /// Allocations per iteration.
    pub objects_per_iter: usize,
    /// Words of the transfer array.
    pub transfer_slots: usize,
    /// Seed of the random streams; `None`: the configuration's seed.
    pub seed: Option<u64>,
}

/// An object size: mostly small, rarely large (see the module documentation).
pub fn pick_size(rng: &mut Rng) -> usize {
    let words = rng.range(2, 128) as usize;
    let scale = if rng.one_in(1000) {
        512
    } else if rng.one_in(100) {
        16
    } else {
        1
    };
    (8 * words * scale).min(MAX_OBJECT)
}

/// This benchmark's control-area words, carved the same way in every process. (No thread
/// ever waits on another outside the phase barriers, so unlike xmalloc and larson it never
/// watches the run's abort word.)
struct Shared<'a> {
    /// The transfer array.
    slots: &'a [AtomicU64],
}

impl Mstress {
    fn carve<'a>(&self, words: &'a [AtomicU64]) -> Result<Shared<'a>, Error> {
        Ok(Shared { slots: Carver::new(words).take(self.transfer_slots)? })
    }
}

impl Benchmark for Mstress {
    fn new(params: &Params, _processes: usize, threads: usize) -> Result<Self, Error> {
        params.only("mstress", &["iterations", "objects_per_iter", "transfer_slots", "seed"])?;
        let iterations = params.u64("iterations", 2000)?;
        let objects_per_iter = params.u64("objects_per_iter", 1000)? as usize;
        let transfer_slots = params.u64("transfer_slots", 1000)? as usize;
        if objects_per_iter == 0 || transfer_slots == 0 || threads == 0 {
            return Err("mstress: objects_per_iter, transfer_slots and threads must be at least 1".into());
        }
        let seed = params.0.contains_key("seed").then(|| params.u64("seed", 0)).transpose()?;
        Ok(Self { threads, iterations, objects_per_iter, transfer_slots, seed })
    }

    fn shared_words(&self) -> usize {
        Carver::words_for(&[self.transfer_slots])
    }

    fn thread<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
    ) -> Result<Report, Error> {
        let shared = self.carve(ctx.shared)?;
        let mut report = Report::default();
        let mut set = Vec::with_capacity(4 * self.objects_per_iter);
        let mut work = Work {
            handles: ctx.handles,
            rng: Rng::new(self.seed.unwrap_or(ctx.seed), ctx.shape.thread as u64),
            report: &mut report,
            transfers: 0,
            taken: 0,
        };
        let result = self.run(ctx, &shared, t, phases, &mut work, &mut set);
        // Whatever happened, give back the retained set (a failed check has already left the
        // suspect object out of it).
        let freed = set.drain(..).try_for_each(|(p, size)| work.free_own(t, p, size));
        let (transfers, taken) = (work.transfers, work.taken);
        result?;
        freed?;
        phases.sync()?;
        let mut work = Work { handles: ctx.handles, rng: Rng::new(0, 0), report: &mut report, transfers: 0, taken: 0 };
        for slot in shared.slots.iter().skip(ctx.shape.thread).step_by(self.threads) {
            // AcqRel as in `transfer` (the barrier above already orders the last deposit
            // before this swap; the pairing stays the same everywhere).
            work.take(t, slot.swap(0, Ordering::AcqRel))?;
        }
        report.extra.insert("transfers".into(), Value::from(transfers));
        report.extra.insert("taken".into(), Value::from(taken));
        Ok(report)
    }
}

impl Mstress {
    /// The timed section.
    fn run<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        shared: &Shared<'_>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
        work: &mut Work<'_>,
        set: &mut Vec<(NonNull<u8>, usize)>,
    ) -> Result<(), Error> {
        let iterations = share(self.iterations, self.threads, ctx.shape.thread);
        let transfers = (self.objects_per_iter / TRANSFER_EVERY).max(1);
        phases.start()?;
        let before = work.report.allocated + work.report.freed;
        for _ in 0..iterations {
            for _ in 0..self.objects_per_iter {
                set.push(work.alloc(t)?);
            }
            // Free a random half: each object with probability 1/2. `swap_remove` brings an
            // unvisited object to `k`, so every object is considered once.
            let mut k = 0;
            while k < set.len() {
                if work.rng.next_u64() & 1 == 0 {
                    let (p, size) = set.swap_remove(k);
                    work.free_own(t, p, size)?;
                } else {
                    k += 1;
                }
            }
            for _ in 0..transfers.min(set.len()) {
                let (p, _) = set.swap_remove(work.rng.below(set.len() as u64) as usize);
                let slot = &shared.slots[work.rng.below(self.transfer_slots as u64) as usize];
                work.transfer(t, p, slot)?;
            }
        }
        work.report.ops = work.report.allocated + work.report.freed - before;
        phases.stop()
    }
}

/// One thread's allocating and freeing.
struct Work<'r> {
    handles: Handles,
    rng: Rng,
    report: &'r mut Report,
    /// Objects put into the transfer array.
    transfers: u64,
    /// Objects taken out of it (and freed) during the timed section.
    taken: u64,
}

impl Work<'_> {
    /// Allocates and stamps an object of a random size.
    fn alloc<T: ThreadAlloc>(&mut self, t: &mut T) -> Result<(NonNull<u8>, usize), Error> {
        let size = pick_size(&mut self.rng);
        let p = t.alloc(size)?;
        self.report.allocated += 1;
        // SAFETY: the block is `size` bytes and ours.
        unsafe { stress::write_stamp(p, self.handles.handle(p), size) };
        Ok((p, size))
    }

    /// Verifies and frees an object of the retained set.
    fn free_own<T: ThreadAlloc>(&mut self, t: &mut T, p: NonNull<u8>, size: usize) -> Result<(), Error> {
        let h = self.handles.handle(p);
        // SAFETY: a live, stamped object of `size` bytes from the retained set.
        if !unsafe { stress::check_stamp(p, h, size) } {
            return Err(stress::corrupt(h, size));
        }
        self.report.verified += 1;
        // SAFETY: allocated with `size`; it left the set, so it is freed exactly once.
        unsafe { t.free(p, size)? };
        self.report.freed += 1;
        Ok(())
    }

    /// Puts object `p` into `slot` and frees the object it displaces.
    fn transfer<T: ThreadAlloc>(&mut self, t: &mut T, p: NonNull<u8>, slot: &AtomicU64) -> Result<(), Error> {
        // AcqRel: the Release publishes `p`'s stamp to whoever takes it; the Acquire sees the
        // stamp of the object taken out, written by the thread that put it in.
        let old = slot.swap(self.handles.handle(p), Ordering::AcqRel);
        self.transfers += 1;
        self.taken += u64::from(old != 0);
        self.take(t, old)
    }

    /// Verifies and frees the object with handle `h` taken from the transfer array (none for 0).
    fn take<T: ThreadAlloc>(&mut self, t: &mut T, h: u64) -> Result<(), Error> {
        let Some(p) = self.handles.block(h) else { return Ok(()) };
        // SAFETY: a live object of at least `MIN_OBJECT` bytes, stamped by its allocator; the
        // swap that took it out of the array makes this thread its only owner.
        unsafe { stress::free_stamped(t, p, h, MIN_OBJECT..=MAX_OBJECT, self.report) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_mostly_small_sometimes_large_and_never_above_the_largest_class() {
        let mut rng = Rng::new(1, 2);
        let sizes: Vec<usize> = (0..200_000).map(|_| pick_size(&mut rng)).collect();
        assert!(sizes.iter().all(|&s| (MIN_OBJECT..=MAX_OBJECT).contains(&s) && s % 8 == 0));
        let small = sizes.iter().filter(|&&s| s <= 1024).count();
        assert!(small > sizes.len() * 97 / 100, "{small}");
        assert!(sizes.iter().any(|&s| s > 64 << 10), "some objects of the large bracket's top");
    }

    #[test]
    fn zero_sizes_and_unknown_parameters_are_refused() {
        assert!(Mstress::new(&Params::of(&[("transfer_slots", 0)]), 1, 2).is_err());
        assert!(Mstress::new(&Params::of(&[("objects_per_iter", 0)]), 1, 2).is_err());
        assert!(Mstress::new(&Params::of(&[("iteration", 5)]), 1, 2).unwrap_err().to_string().contains("iteration"));
        assert_eq!(Mstress::new(&Params::of(&[("seed", 9)]), 1, 2).unwrap().seed, Some(9));
    }
}
