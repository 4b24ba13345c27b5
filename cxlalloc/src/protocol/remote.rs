//! The count-down remote-free counter of a slab (HWcc, one tagged word per slab).
//!
//! When a slab is given a class its counter is set to the class's block count; each remote free
//! subtracts one. A remotely freed block never returns to the owner's bitset, so the counter
//! reaches 0 exactly when every block has been freed remotely, and the freer that takes it from
//! 1 to 0 claims the now-empty slab (T8). A remote freer never needs the SWcc class or count.

use crate::protocol::{detectable, HwWord};
use crate::sync::Ordering;
use crate::word::{Tag, Tagged, VERSION_SPACE};

/// What a remote free did to the counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decrement {
    /// Other blocks are still outstanding (T10).
    Counted,
    /// This was the last block: the caller now owns the slab (T8).
    Claimed,
}

/// The counter was already 0: every block had been freed remotely (a double free).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Underflow;

/// Sets the counter when the owner gives the slab a class (T3). `help` as for [`subtract`]:
/// a plain store overwrites a tagged word too. A load and a store, not a CAS, because nothing
/// else can write the counter meanwhile: no block of an unsized slab is outstanding, so no
/// legitimate remote free can reach it (a claimed or fresh slab's counter is 0, where a
/// decrement underflows without writing; a slab emptied by local frees still holds the count
/// it was sized with, less the frees counted remotely, if a reclaim emptied it).
///
/// Returns whether it wrote. A counter that already holds `blocks` under a recent tag of our
/// own is left as it is: the usual case of a slab emptied by local frees (T7) and sized again
/// for a class with as many blocks, where the store — an mCAS in the no-HWcc model, one per
/// threadtest round — would change only the tag. Sound because:
/// - the tag of a reset is never asked about: recovery of `Op::Size` reads no tag, and every
///   detectable operation draws a version of its own;
/// - the word we keep names us, so there is no other writer to help;
/// - "recent" ([`detectable::REFRESH_PERIOD`] versions): a tag of ours that stayed on a word
///   while our versions wrapped around to it could make a later operation of ours with that
///   version look done to recovery; an older tag is overwritten, as before;
/// - no ordering is lost: a remote freer gets its block from the allocating thread by the
///   program's own synchronization, which already orders the sizing writes before its free.
pub fn reset(word: &(impl HwWord + ?Sized), blocks: u32, tag: Tag, help: impl Fn(u64)) -> bool {
    // Acquire: pairs with the last writer's Release (CAS or store) of the word we may keep.
    let seen = word.load(Ordering::Acquire);
    let old = Tagged::unpack(seen);
    let age = tag.version.wrapping_sub(old.tag.version) & (VERSION_SPACE - 1);
    if old.payload == blocks && old.tag.writer == tag.writer && age < detectable::REFRESH_PERIOD {
        return false;
    }
    help(seen);
    // Release: a remote freer that later decrements sees the owner's prior descriptor writes.
    word.store(Tagged::new(blocks, tag).pack(), Ordering::Release);
    true
}

/// Reads the counter (the owner's detach-or-disown decision, T4/T5).
pub fn count(word: &(impl HwWord + ?Sized)) -> u32 {
    // Acquire: pairs with the freers' AcqRel decrements.
    Tagged::unpack(word.load(Ordering::Acquire)).payload
}

/// Subtracts one remote free. Always inlined, as [`subtract`]: the remote free's only CAS, where
/// a call would build the word's handle and the help closure in memory (36 instructions).
#[inline(always)]
pub fn decrement(word: &(impl HwWord + ?Sized), tag: Tag, help: impl Fn(u64)) -> Result<Decrement, Underflow> {
    subtract(word, 1, tag, help)
}

/// Subtracts `k` blocks at once: a batch of remote frees, or the free blocks of a slab its owner
/// abandons (their bits stay set as tombstones, so they can never be counted twice). `Claimed`
/// when this takes the counter to 0; `Underflow` (and no change) when the counter is below `k`.
/// `help(seen)` runs before each CAS attempt with the word about to be overwritten
/// ([`crate::protocol::detectable::help`]).
#[inline(always)]
pub fn subtract(word: &(impl HwWord + ?Sized), k: u32, tag: Tag, help: impl Fn(u64)) -> Result<Decrement, Underflow> {
    let mut cur = word.load(Ordering::Acquire);
    loop {
        let n = Tagged::unpack(cur).payload;
        if n < k || k == 0 {
            return Err(Underflow);
        }
        help(cur);
        // AcqRel: the claimer (→ 0) must see every earlier freer's writes to the slab's blocks
        // before it reuses them; Release publishes ours.
        match word.compare_exchange_weak(cur, Tagged::new(n - k, tag).pack(), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(if n == k { Decrement::Claimed } else { Decrement::Counted }),
            Err(seen) => cur = seen,
        }
    }
}

/// What the owner does with a slab whose last free block it just allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retire {
    /// No remote free has happened: keep ownership off-list (T4); a local free re-attaches it.
    Detach,
    /// Some blocks were freed remotely: give up ownership (T5); every later free is remote and
    /// the last one claims the slab.
    Disown,
}

/// The T4/T5 decision. Safe without a CAS: the owner still holds the block it just took, so the
/// counter is ≥ 1 and nobody can claim the slab before the decision is written.
pub fn retire(word: &(impl HwWord + ?Sized), blocks: u32) -> Retire {
    if count(word) == blocks {
        Retire::Detach
    } else {
        Retire::Disown
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::AtomicU64;

    #[test]
    fn a_reset_that_would_change_only_our_recent_tag_is_skipped() {
        let word = AtomicU64::new(Tagged::new(64, Tag::new(2, 10)).pack());
        assert!(!reset(&word, 64, Tag::new(2, 11), |_| panic!("nobody to help")));
        assert_eq!(Tagged::unpack(word.load(Ordering::Relaxed)), Tagged::new(64, Tag::new(2, 10)));
    }

    #[test]
    fn a_reset_to_another_count_writes_and_helps() {
        let word = AtomicU64::new(Tagged::new(0, Tag::new(5, 3)).pack());
        let helped = AtomicU64::new(0);
        assert!(reset(&word, 64, Tag::new(2, 11), |seen| helped.store(seen, Ordering::Relaxed)));
        assert_eq!(Tagged::unpack(word.load(Ordering::Relaxed)), Tagged::new(64, Tag::new(2, 11)));
        assert_eq!(helped.load(Ordering::Relaxed), Tagged::new(0, Tag::new(5, 3)).pack());
    }

    #[test]
    fn a_reset_over_another_writers_tag_writes() {
        let word = AtomicU64::new(Tagged::new(64, Tag::new(5, 3)).pack());
        assert!(reset(&word, 64, Tag::new(2, 11), |_| {}));
        assert_eq!(Tagged::unpack(word.load(Ordering::Relaxed)).tag, Tag::new(2, 11));
    }

    #[test]
    fn a_reset_over_an_old_tag_of_ours_writes_across_the_wrap() {
        let v = VERSION_SPACE - 5;
        let word = AtomicU64::new(Tagged::new(64, Tag::new(2, v)).pack());
        // Recent across the wrap: kept.
        assert!(!reset(&word, 64, Tag::new(2, 3), |_| {}));
        // A refresh period old: rewritten with the fresh tag.
        let later = (v + detectable::REFRESH_PERIOD) % VERSION_SPACE;
        assert!(reset(&word, 64, Tag::new(2, later), |_| {}));
        assert_eq!(Tagged::unpack(word.load(Ordering::Relaxed)).tag, Tag::new(2, later));
    }
}
