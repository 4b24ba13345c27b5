//! Epoch-based reclamation whose shared state lives in the run's control area, so threads of
//! every worker process take part in one protocol.
//!
//! # Shared words ([`Epochs`])
//!
//! Control area (HWcc in the CXL model: every process reads and writes it with atomics).
//!
//! - `global`: the global epoch. Written only by [`Epochs::try_advance`] (CAS, any process);
//!   read by every pin, retire and reclaim.
//! - `announce[slot]`: one [`Announce`] word per global thread id, each on its own cache line
//!   (pins write it every operation; without the padding, every pin would steal the line
//!   holding seven other threads' words). Written only by the owning thread; read by advancers.
//!
//! # Protocol
//!
//! The epoch step (pin, unpin, advance, when a retired value may go) is `cxlkv::epoch`, with
//! its proof; this module adds where the words live (the control area, one line per thread)
//! and a process-local list of retired values per thread.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;

use cxlkv::epoch;
pub use cxlkv::epoch::Announce;

use crate::Error;

/// Words between two threads' announcement words (one 64-byte line each).
pub const ANNOUNCE_STRIDE: usize = 8;

/// Retirements between two attempts to advance the global epoch.
pub const ADVANCE_EVERY: u32 = 32;

/// The shared state: the global epoch and one announcement per thread.
#[derive(Clone, Copy, Debug)]
pub struct Epochs<'a> {
    global: &'a AtomicU64,
    announce: &'a [AtomicU64],
}

impl<'a> Epochs<'a> {
    /// Control-area words for `threads` threads' announcements.
    pub fn announce_words(threads: usize) -> usize {
        threads * ANNOUNCE_STRIDE
    }

    /// The protocol over `global` and `announce` ([`Epochs::announce_words`] words).
    pub fn new(global: &'a AtomicU64, announce: &'a [AtomicU64]) -> Result<Self, Error> {
        if announce.is_empty() || announce.len() % ANNOUNCE_STRIDE != 0 {
            return Err(format!("ebr: {} announcement words is not a whole number of threads", announce.len()).into());
        }
        Ok(Self { global, announce })
    }

    /// Threads with an announcement word.
    pub fn threads(&self) -> usize {
        self.announce.len() / ANNOUNCE_STRIDE
    }

    fn slot(&self, slot: usize) -> &'a AtomicU64 {
        &self.announce[slot * ANNOUNCE_STRIDE]
    }

    /// The global epoch.
    pub fn current(&self) -> u64 {
        epoch::current(self.global)
    }

    /// Advances the global epoch by one if every pinned thread has announced it; returns
    /// whether the epoch moved (by this call or a racing one).
    pub fn try_advance(&self) -> bool {
        epoch::try_advance(self.global, (0..self.threads()).map(|i| self.slot(i)))
    }
}

/// A value waiting to be freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retired {
    /// The block's handle.
    pub handle: u64,
    /// The size it was allocated with.
    pub size: usize,
    /// Global epoch read after it was unlinked.
    epoch: u64,
}

/// One thread's side of the protocol: its announcement slot and its retired values, oldest
/// first (tags only grow, so the front is always the first to become free).
#[derive(Debug)]
pub struct Participant<'a> {
    epochs: Epochs<'a>,
    slot: usize,
    pinned: bool,
    retired: VecDeque<Retired>,
    since_advance: u32,
}

impl<'a> Participant<'a> {
    /// The participant announcing in slot `slot` (the global thread id).
    pub fn new(epochs: Epochs<'a>, slot: usize) -> Result<Self, Error> {
        if slot >= epochs.threads() {
            return Err(format!("ebr: slot {slot} out of {} announcement slots", epochs.threads()).into());
        }
        Ok(Self { epochs, slot, pinned: false, retired: VecDeque::new(), since_advance: 0 })
    }

    /// Enters an operation: values reachable from now on stay allocated until [`Self::unpin`].
    #[inline]
    pub fn pin(&mut self) {
        debug_assert!(!self.pinned, "pin while pinned");
        epoch::pin(self.epochs.global, self.epochs.slot(self.slot));
        self.pinned = true;
    }

    /// Leaves the operation.
    #[inline]
    pub fn unpin(&mut self) {
        debug_assert!(self.pinned, "unpin while not pinned");
        epoch::unpin(self.epochs.slot(self.slot));
        self.pinned = false;
    }

    /// Whether the thread is inside an operation.
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// Hands over block `handle` of `size` bytes, already unlinked (no new reader can reach
    /// it): it is freed once no thread can still hold it.
    pub fn retire(&mut self, handle: u64, size: usize) {
        debug_assert!(self.pinned, "retire outside an operation");
        // The epoch is read after the unlinking swap (cxlkv::epoch's proof).
        let epoch = epoch::tag(self.epochs.global);
        self.retired.push_back(Retired { handle, size, epoch });
        self.since_advance += 1;
    }

    /// Tries to advance the epoch when enough has been retired since the last try; call it
    /// unpinned (a pinned caller announcing an old epoch would hold its own advance back).
    pub fn maybe_advance(&mut self) {
        if self.since_advance >= ADVANCE_EVERY {
            self.since_advance = 0;
            self.epochs.try_advance();
        }
    }

    /// The oldest retired value no thread can hold any more, removed from the list.
    #[inline]
    pub fn reclaimable(&mut self) -> Option<Retired> {
        let front = self.retired.front()?;
        if epoch::reclaimable(front.epoch, self.epochs.current()) {
            self.retired.pop_front()
        } else {
            None
        }
    }

    /// Values retired and not yet handed back.
    pub fn pending(&self) -> usize {
        self.retired.len()
    }

    /// Every retired value, regardless of epoch: only for tear-down, once no thread of any
    /// process operates on the table any more (after a barrier).
    pub fn drain_all(&mut self) -> impl Iterator<Item = Retired> + '_ {
        self.retired.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn words(threads: usize) -> (AtomicU64, Vec<AtomicU64>) {
        (AtomicU64::new(0), (0..Epochs::announce_words(threads)).map(|_| AtomicU64::new(0)).collect())
    }

    /// Retires blocks `first..first + n` and drives the epoch as hard as a retirer can.
    fn churn(p: &mut Participant<'_>, epochs: &Epochs<'_>, first: u64, n: u64) -> Vec<Retired> {
        let mut freed = Vec::new();
        for h in first..first + n {
            p.pin();
            p.retire(h, 16);
            p.unpin();
            epochs.try_advance();
            p.maybe_advance();
            while let Some(r) = p.reclaimable() {
                freed.push(r);
            }
        }
        freed
    }

    #[test]
    fn announcements_round_trip() {
        for a in [Announce::IDLE, Announce::pinned(0), Announce::pinned(123_456)] {
            assert_eq!(Announce::unpack(a.pack()), a);
        }
        assert_eq!(Announce::IDLE.pack(), 0);
    }

    #[test]
    fn nothing_retired_while_a_reader_is_pinned_is_freed_until_it_unpins() {
        let (global, announce) = words(2);
        let epochs = Epochs::new(&global, &announce).unwrap();
        let mut reader = Participant::new(epochs, 0).unwrap();
        let mut writer = Participant::new(epochs, 1).unwrap();
        // Blocks retired before the reader pinned may go; those retired after must stay.
        let early = churn(&mut writer, &epochs, 0, 10);
        reader.pin();
        let start = epochs.current();
        let during = churn(&mut writer, &epochs, 10, 1000);
        assert!(epochs.current() <= start + 1, "the epoch passed a pinned reader");
        assert!(during.iter().chain(&early).all(|r| r.handle < 10), "freed a block retired while pinned");
        reader.unpin();
        let after = churn(&mut writer, &epochs, 1010, 10);
        let total = early.len() + during.len() + after.len();
        assert!(total > 1000, "retired blocks are freed once the reader leaves ({total} freed)");
    }

    #[test]
    fn concurrent_readers_never_see_a_value_freed_while_they_hold_it() {
        // The writer goes on until plenty has been reclaimed (the epoch only moves when both
        // readers have been scheduled since the last advance, which on a loaded 2-core machine
        // can take a while), at most VALUES swaps or 10 s.
        const VALUES: usize = 400_000;
        const ENOUGH: u64 = 2_000;
        let (global, announce) = words(3);
        let epochs = Epochs::new(&global, &announce).unwrap();
        let freed: Vec<AtomicU64> = (0..VALUES + 1).map(|_| AtomicU64::new(0)).collect();
        let current = AtomicU64::new(0);
        let done = AtomicU64::new(0);
        std::thread::scope(|s| {
            for slot in 1..3 {
                let (freed, current, done) = (&freed, &current, &done);
                s.spawn(move || {
                    let mut p = Participant::new(epochs, slot).unwrap();
                    while done.load(Ordering::SeqCst) == 0 {
                        p.pin();
                        let h = current.load(Ordering::SeqCst) as usize;
                        for _ in 0..20 {
                            assert_eq!(freed[h].load(Ordering::SeqCst), 0, "value {h} freed under a pinned reader");
                            std::hint::spin_loop();
                        }
                        p.unpin();
                    }
                });
            }
            let mut w = Participant::new(epochs, 0).unwrap();
            let mut reclaimed = 0;
            let start = std::time::Instant::now();
            for next in 1..=VALUES as u64 {
                w.pin();
                let old = current.swap(next, Ordering::SeqCst);
                w.retire(old, 8);
                w.unpin();
                w.maybe_advance();
                while let Some(r) = w.reclaimable() {
                    freed[r.handle as usize].store(1, Ordering::SeqCst);
                    reclaimed += 1;
                }
                if reclaimed >= ENOUGH || start.elapsed().as_secs() >= 10 {
                    break;
                }
            }
            done.store(1, Ordering::SeqCst);
            assert!(reclaimed > 0, "the epoch never advanced under readers that come and go");
        });
    }

    #[test]
    fn a_stale_pin_re_announces_the_current_epoch() {
        let (global, announce) = words(1);
        let epochs = Epochs::new(&global, &announce).unwrap();
        global.store(7, Ordering::SeqCst);
        let mut p = Participant::new(epochs, 0).unwrap();
        p.pin();
        assert_eq!(Announce::unpack(announce[0].load(Ordering::SeqCst)), Announce::pinned(7));
        p.unpin();
        assert_eq!(announce[0].load(Ordering::SeqCst), 0);
    }

    #[test]
    fn drain_hands_back_everything_pending() {
        let (global, announce) = words(1);
        let epochs = Epochs::new(&global, &announce).unwrap();
        let mut p = Participant::new(epochs, 0).unwrap();
        p.pin();
        for h in 1..=5 {
            p.retire(8 * h, 24);
        }
        p.unpin();
        assert_eq!(p.pending(), 5);
        assert_eq!(p.drain_all().count(), 5);
        assert_eq!(p.pending(), 0);
    }

    #[test]
    fn a_slot_beyond_the_thread_count_is_refused() {
        let (global, announce) = words(2);
        let epochs = Epochs::new(&global, &announce).unwrap();
        assert!(Participant::new(epochs, 2).is_err());
    }
}
