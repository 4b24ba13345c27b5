//! A bounded LIFO of block handles in words of the run's control area, shared by the threads of
//! every worker process.
//!
//! It is transport, not the allocator under test, and is the same for every allocator: a spin
//! lock word guards the length and the slots. A lock keeps it simple and obviously ABA-free
//! across processes; its critical sections are a handful of loads and stores, and waiters back
//! off ([`Backoff`]) so runs with more threads than cores make progress.
//!
//! Layout (all zero = unlocked and empty): word 0 the lock (0 free, 1 held), word 1 the length,
//! words 2.. the slots, bottom first. Invariant while unlocked: `len <= capacity` and slots
//! `0..len` hold the stacked handles (never 0).

use std::sync::atomic::{AtomicU64, Ordering};

use super::stress::Backoff;
use crate::Error;

const LOCK: usize = 0;
const LEN: usize = 1;
const SLOTS: usize = 2;

/// A LIFO of handles over control-area words.
#[derive(Clone, Copy, Debug)]
pub struct Lifo<'a> {
    words: &'a [AtomicU64],
    abort: &'a AtomicU64,
}

/// Holds the LIFO's lock; releases it on drop.
struct Held<'a>(&'a AtomicU64);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Release: publishes the length and slots written under the lock; pairs with the
        // Acquire in `Lifo::lock`.
        self.0.store(0, Ordering::Release);
    }
}

impl<'a> Lifo<'a> {
    /// Words a LIFO of `capacity` handles occupies.
    pub const fn words(capacity: usize) -> usize {
        SLOTS + capacity
    }

    /// The LIFO in `words` (exactly [`Lifo::words`]`(capacity)`, zero before first use); waits
    /// fail once `abort` is raised.
    pub fn new(words: &'a [AtomicU64], abort: &'a AtomicU64) -> Result<Self, Error> {
        if words.len() <= SLOTS {
            return Err("a LIFO needs at least 3 words".into());
        }
        Ok(Self { words, abort })
    }

    /// Handles it holds at most.
    pub fn capacity(&self) -> usize {
        self.words.len() - SLOTS
    }

    /// Handles it holds now (a snapshot).
    pub fn len(&self) -> usize {
        // Relaxed: a snapshot for a caller that only decides whether to try.
        self.words[LEN].load(Ordering::Relaxed) as usize
    }

    /// Whether it is empty now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> Result<Held<'a>, Error> {
        let lock = &self.words[LOCK];
        let mut backoff = Backoff::new(self.abort);
        loop {
            // Acquire: sees what the previous holder wrote; pairs with the Release in `Held::drop`.
            if lock.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return Ok(Held(lock));
            }
            // Wait for the word to look free before retrying the CAS, so waiters do not keep
            // stealing the line from the holder.
            while lock.load(Ordering::Relaxed) != 0 {
                backoff.snooze()?;
            }
        }
    }

    /// Pushes `handle` (not 0); `Ok(false)` when the LIFO is full.
    pub fn try_push(&self, handle: u64) -> Result<bool, Error> {
        if handle == 0 {
            return Err("pushing handle 0 (no block)".into());
        }
        if self.len() >= self.capacity() {
            return Ok(false);
        }
        let _held = self.lock()?;
        // Relaxed loads and stores below: the lock orders them.
        let len = self.words[LEN].load(Ordering::Relaxed) as usize;
        if len >= self.capacity() {
            return Ok(false);
        }
        self.words[SLOTS + len].store(handle, Ordering::Relaxed);
        self.words[LEN].store(len as u64 + 1, Ordering::Relaxed);
        Ok(true)
    }

    /// Pops the newest handle; `Ok(None)` when the LIFO is empty.
    pub fn try_pop(&self) -> Result<Option<u64>, Error> {
        if self.is_empty() {
            return Ok(None);
        }
        let _held = self.lock()?;
        // Relaxed loads and stores below: the lock orders them.
        let len = self.words[LEN].load(Ordering::Relaxed) as usize;
        if len == 0 {
            return Ok(None);
        }
        if len > self.capacity() {
            return Err(
                format!("LIFO length {len} exceeds its capacity {}: control area corrupt", self.capacity()).into()
            );
        }
        let handle = self.words[SLOTS + len - 1].swap(0, Ordering::Relaxed);
        self.words[LEN].store(len as u64 - 1, Ordering::Relaxed);
        Ok(Some(handle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn last_in_is_first_out_and_the_limit_holds() {
        let (w, abort) = (words(Lifo::words(3)), AtomicU64::new(0));
        let q = Lifo::new(&w, &abort).unwrap();
        assert_eq!(q.capacity(), 3);
        for h in [8, 16, 24] {
            assert!(q.try_push(h).unwrap());
        }
        assert!(!q.try_push(32).unwrap(), "full at its capacity");
        let popped: Vec<u64> = std::iter::from_fn(|| q.try_pop().unwrap()).collect();
        assert_eq!(popped, [24, 16, 8]);
        assert!(q.try_push(0).is_err());
    }

    #[test]
    fn concurrent_pushes_and_pops_lose_and_duplicate_nothing() {
        let (w, abort) = (words(Lifo::words(8)), AtomicU64::new(0));
        let q = Lifo::new(&w, &abort).unwrap();
        let per = 2000u64;
        let popped: Vec<Vec<u64>> = std::thread::scope(|s| {
            for p in 0..2u64 {
                s.spawn(move || {
                    for i in 0..per {
                        while !q.try_push(1 + p * per + i).unwrap() {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let takers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(move || {
                        let mut got = Vec::new();
                        while got.len() < per as usize {
                            match q.try_pop().unwrap() {
                                Some(h) => got.push(h),
                                None => std::thread::yield_now(),
                            }
                        }
                        got
                    })
                })
                .collect();
            takers.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = popped.concat();
        all.sort_unstable();
        assert_eq!(all, (1..=2 * per).collect::<Vec<_>>());
    }
}
