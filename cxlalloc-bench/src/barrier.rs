//! A barrier for threads in several processes, over three words of the run's control area.
//!
//! Waiters spin briefly, then yield, then sleep, so oversubscribed runs (more threads than
//! cores) do not steal the cores of threads still working. Any party may [`Barrier::abort`] the
//! run (a failing thread, or the coordinator when a worker dies): every present and future wait
//! then fails instead of hanging, and so does a wait that outlasts its deadline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::Error;

/// Words a barrier occupies in the control area.
pub const WORDS: usize = 3;

const ARRIVED: usize = 0;
const GENERATION: usize = 1;
const ABORTED: usize = 2;

/// A process-shared barrier for `parties` threads.
#[derive(Clone, Copy, Debug)]
pub struct Barrier<'a> {
    words: &'a [AtomicU64],
    parties: u64,
    timeout: Duration,
}

impl<'a> Barrier<'a> {
    /// The barrier in `words` (at least [`WORDS`], zero-filled before first use) for `parties`
    /// threads; a wait longer than `timeout` fails.
    pub fn new(words: &'a [AtomicU64], parties: usize, timeout: Duration) -> Result<Self, Error> {
        if words.len() < WORDS || parties == 0 {
            return Err("barrier needs 3 words and at least one party".into());
        }
        Ok(Self { words: &words[..WORDS], parties: parties as u64, timeout })
    }

    /// Waits until all parties have arrived.
    pub fn wait(&self) -> Result<(), Error> {
        self.check()?;
        let generation = self.words[GENERATION].load(Ordering::Acquire);
        if self.words[ARRIVED].fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            // Reset before releasing: a party can only arrive at the next barrier after it saw
            // the generation move, which is ordered after this store.
            self.words[ARRIVED].store(0, Ordering::Relaxed);
            self.words[GENERATION].fetch_add(1, Ordering::Release);
            return Ok(());
        }
        let start = Instant::now();
        let mut spins = 0u32;
        while self.words[GENERATION].load(Ordering::Acquire) == generation {
            self.check()?;
            spins += 1;
            if spins < 256 {
                std::hint::spin_loop();
            } else if spins < 4096 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
                if start.elapsed() > self.timeout {
                    self.abort();
                    return Err(format!("barrier wait exceeded {:?}", self.timeout).into());
                }
            }
        }
        Ok(())
    }

    /// Fails every present and future wait.
    pub fn abort(&self) {
        self.words[ABORTED].store(1, Ordering::Release);
    }

    /// The word [`Barrier::abort`] raises (nonzero: aborted), for waits outside the barrier
    /// that must end with the run (see `bench::stress::Backoff`).
    pub fn abort_word(&self) -> &'a AtomicU64 {
        &self.words[ABORTED]
    }

    /// Whether the run was aborted.
    pub fn aborted(&self) -> bool {
        self.words[ABORTED].load(Ordering::Acquire) != 0
    }

    fn check(&self) -> Result<(), Error> {
        if self.aborted() {
            Err("run aborted by another thread or process".into())
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words() -> Vec<AtomicU64> {
        (0..WORDS).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn no_thread_leaves_before_all_arrive_across_many_rounds() {
        let w = words();
        let b = Barrier::new(&w, 3, Duration::from_secs(30)).unwrap();
        let counter = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for round in 1..=200u64 {
                        counter.fetch_add(1, Ordering::SeqCst);
                        b.wait().unwrap();
                        assert!(counter.load(Ordering::SeqCst) >= round * 3);
                        b.wait().unwrap();
                    }
                });
            }
        });
    }

    #[test]
    fn abort_releases_waiters_with_an_error() {
        let w = words();
        let b = Barrier::new(&w, 2, Duration::from_secs(30)).unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| b.wait());
            std::thread::sleep(Duration::from_millis(20));
            b.abort();
            assert!(waiter.join().unwrap().is_err());
        });
        assert!(b.wait().is_err());
    }

    #[test]
    fn a_wait_past_its_deadline_fails() {
        let w = words();
        let b = Barrier::new(&w, 2, Duration::from_millis(50)).unwrap();
        assert!(b.wait().is_err());
        assert!(b.aborted());
    }
}
