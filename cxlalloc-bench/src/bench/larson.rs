//! larson (docs/design.md §12.2; after Larson and Krishnan's server simulation): each thread works on an
//! array of `slots` live blocks of random sizes in `min_size..=max_size`, replacing random slots
//! (free the old block, allocate a new one), and after every round hands its whole array to the
//! next thread and takes over its predecessor's — so most frees are of blocks another thread
//! allocated, in another process when the two run in different ones.
//!
//! **Arrays and hand-over.** There are as many arrays as threads, in the control area: one word
//! per slot holding the block's handle. In round `r` thread `i` works on array `(i − r) mod T`;
//! when it finishes the round it stores `r + 1` in that array's round word, and the next round's
//! holder (thread `i + 1`) waits until the word reads `r + 1`. A thread waits only on its
//! predecessor's previous round, so the waits cannot form a cycle (following them backwards
//! lowers the round each step, down to round 0, which waits for nobody): no deadlock, and no
//! barrier inside the timed section. A block's size travels in its stamp
//! ([`stress::stamped_size`]), checked on every free.
//!
//! **Work.** Before the start barrier each thread fills array `i` (untimed). The timed section is
//! `rounds` rounds (each ends in a hand-over) of together `ops` replacements, split evenly over
//! threads and then rounds. After the stop barrier each thread frees the array it holds then.
//! Over the run, allocated == freed.
//!
//! **An op** is one replacement: one free plus one allocation, timed. `verified` counts blocks
//! whose stamp read back before being freed (every free).
//!
//! Parameters: `slots` (default 1000), `min_size` (default 16, at least 8: the stamp carries the
//! size), `max_size` (default 1024, at most 512 KiB), `ops` (default 4 000 000), `rounds`
//! (default 20). The random streams come from the configuration's seed.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::stress::{self, share, Backoff, Rng, MAX_OBJECT};
use super::{Benchmark, Ctx, Params, Phases, Report};
use crate::allocator::{Allocator, Handles, ThreadAlloc};
use crate::shm::Carver;
use crate::Error;

/// Words per round word: each on its own cache line, so one hand-over does not disturb the
/// others' polling.
const LINE: usize = 8;

/// One larson configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Larson {
    /// Threads in the run, over all processes (= arrays).
    pub threads: usize,
    /// Blocks per array.
    pub slots: usize,
    /// Smallest block, bytes.
    pub min_size: usize,
    /// Largest block, bytes.
    pub max_size: usize,
    /// Timed replacements, over all threads.
    pub ops: u64,
    /// Rounds, each ending in a hand-over.
    pub rounds: u64,
}

/// This benchmark's control-area words, carved the same way in every process.
struct Shared<'a> {
    /// The run's abort word ([`Phases::abort_word`]); ends every wait.
    abort: &'a AtomicU64,
    /// Array `a`'s round word at `LINE * a`: the rounds finished on it.
    rounds: &'a [AtomicU64],
    /// Array `a`'s slots at `slots * a ..`.
    arrays: &'a [AtomicU64],
}

impl Larson {
    fn layout(&self) -> [usize; 2] {
        [LINE * self.threads, self.slots * self.threads]
    }

    fn carve<'a>(&self, words: &'a [AtomicU64], abort: &'a AtomicU64) -> Result<Shared<'a>, Error> {
        let [r, s] = self.layout();
        let mut c = Carver::new(words);
        Ok(Shared { abort, rounds: c.take(r)?, arrays: c.take(s)? })
    }

    /// The array thread `thread` works on in round `round` (round `rounds` = the one it frees).
    pub fn array_of(&self, thread: usize, round: u64) -> usize {
        let t = self.threads as u64;
        ((thread as u64 + t - round % t) % t) as usize
    }
}

impl Benchmark for Larson {
    fn new(params: &Params, _processes: usize, threads: usize) -> Result<Self, Error> {
        params.only("larson", &["slots", "min_size", "max_size", "ops", "rounds"])?;
        let slots = params.u64("slots", 1000)? as usize;
        let min_size = params.u64("min_size", 16)? as usize;
        let max_size = params.u64("max_size", 1024)? as usize;
        let ops = params.u64("ops", 4_000_000)?;
        let rounds = params.u64("rounds", 20)?;
        if slots == 0 || rounds == 0 || threads == 0 {
            return Err("larson: slots, rounds and threads must be at least 1".into());
        }
        if !(8 <= min_size && min_size <= max_size && max_size <= MAX_OBJECT) {
            return Err(
                format!("larson: need 8 <= min_size <= max_size <= {MAX_OBJECT}, got {min_size}..={max_size}").into()
            );
        }
        Ok(Self { threads, slots, min_size, max_size, ops, rounds })
    }

    fn shared_words(&self) -> usize {
        Carver::words_for(&self.layout())
    }

    fn thread<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
    ) -> Result<Report, Error> {
        let shared = self.carve(ctx.shared, phases.abort_word())?;
        self.run(ctx, &shared, t, phases)
    }
}

impl Larson {
    fn run<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        shared: &Shared<'_>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
    ) -> Result<Report, Error> {
        let i = ctx.shape.thread;
        let mut rng = Rng::new(ctx.seed, i as u64);
        let mut report = Report::default();
        let mut work = Work { larson: self, handles: ctx.handles, rng: &mut rng, report: &mut report };
        let own = self.slots_of(shared, i);
        for slot in own {
            work.refill(t, slot)?;
        }
        let mut backoff = Backoff::new(shared.abort);
        let mut waits = 0u64;
        phases.start()?;
        let mine = share(self.ops, self.threads, i);
        for round in 0..self.rounds {
            let a = self.array_of(i, round);
            waits += u64::from(self.take_over(shared, a, round, &mut backoff)?);
            for _ in 0..share(mine, self.rounds as usize, round as usize) {
                let slot = &self.slots_of(shared, a)[work.rng.below(self.slots as u64) as usize];
                work.release(t, slot)?;
                work.refill(t, slot)?;
            }
            // Release: hands the slot words and the blocks' stamps to the next holder; pairs
            // with the Acquire in `take_over`.
            shared.rounds[LINE * a].store(round + 1, Ordering::Release);
        }
        phases.stop()?;
        let last = self.array_of(i, self.rounds);
        self.take_over(shared, last, self.rounds, &mut backoff)?;
        for slot in self.slots_of(shared, last) {
            work.release(t, slot)?;
        }
        report.ops = mine;
        report.extra.insert("waits".into(), Value::from(waits));
        Ok(report)
    }

    fn slots_of<'a>(&self, shared: &Shared<'a>, array: usize) -> &'a [AtomicU64] {
        &shared.arrays[self.slots * array..self.slots * (array + 1)]
    }

    /// Waits until array `a` has finished `round` rounds (round 0 needs nobody); returns
    /// whether it had to wait.
    fn take_over(&self, shared: &Shared<'_>, a: usize, round: u64, backoff: &mut Backoff<'_>) -> Result<bool, Error> {
        backoff.reset();
        // Acquire: pairs with the Release of the previous holder's last round.
        while shared.rounds[LINE * a].load(Ordering::Acquire) < round {
            backoff.snooze()?;
        }
        Ok(backoff.waited())
    }
}

/// One thread's replacing of blocks.
struct Work<'r, 'l> {
    larson: &'l Larson,
    handles: Handles,
    rng: &'r mut Rng,
    report: &'r mut Report,
}

impl Work<'_, '_> {
    /// Verifies and frees the block in `slot` (if any) and empties the slot.
    fn release<T: ThreadAlloc>(&mut self, t: &mut T, slot: &AtomicU64) -> Result<(), Error> {
        // Relaxed: only the array's current holder touches its slots; the round words order
        // hand-overs.
        let h = slot.swap(0, Ordering::Relaxed);
        let Some(p) = self.handles.block(h) else { return Ok(()) };
        let sizes = self.larson.min_size..=self.larson.max_size;
        // SAFETY: a live block of at least `min_size >= 8` bytes, stamped when allocated by
        // whichever thread filled this slot; the slot was emptied above, so we alone own it.
        unsafe { stress::free_stamped(t, p, h, sizes, self.report) }
    }

    /// Allocates a block of a random size into the empty `slot`, stamped.
    fn refill<T: ThreadAlloc>(&mut self, t: &mut T, slot: &AtomicU64) -> Result<(), Error> {
        let size = self.rng.range(self.larson.min_size as u64, self.larson.max_size as u64) as usize;
        let p = t.alloc(size)?;
        self.report.allocated += 1;
        let h = self.handles.handle(p);
        // SAFETY: the block is `size` bytes and ours until it leaves the slot.
        unsafe { stress::write_stamp(p, h, size) };
        // Relaxed: as in `release`.
        slot.store(h, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_every_array_has_exactly_one_holder_and_passes_to_the_next_thread() {
        let l = Larson::new(&Params::of(&[("rounds", 7)]), 1, 5).unwrap();
        for round in 0..=7 {
            let mut held: Vec<usize> = (0..5).map(|i| l.array_of(i, round)).collect();
            held.sort_unstable();
            assert_eq!(held, [0, 1, 2, 3, 4]);
            for i in 0..5 {
                assert_eq!(l.array_of((i + 1) % 5, round + 1), l.array_of(i, round), "thread i+1 takes i's array");
            }
        }
    }

    #[test]
    fn bad_sizes_and_unknown_parameters_are_refused() {
        assert!(Larson::new(&Params::of(&[("min_size", 4)]), 1, 2).is_err());
        assert!(Larson::new(&Params::of(&[("min_size", 64), ("max_size", 32)]), 1, 2).is_err());
        assert!(Larson::new(&Params::of(&[("max_size", 1 << 20)]), 1, 2).is_err());
        assert!(Larson::new(&Params::of(&[("rounds", 0)]), 1, 2).is_err());
        assert!(Larson::new(&Params::of(&[("slot", 10)]), 1, 2).unwrap_err().to_string().contains("slot"));
    }
}
