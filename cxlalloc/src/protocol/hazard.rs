//! Hazard entries: how a process announces that it maps a huge allocation, so that the
//! allocation's owner does not reclaim its address range and backing object underneath it.
//!
//! A hazard set is a slice of entry pairs `[key, pages]`: `key` a packed
//! `word::HazardKey` (0 = empty), `pages` the mapped length in pages, which the
//! publishing process needs to unmap the range later without reading the (possibly reclaimed)
//! descriptor. Entries are never moved or swap-removed, so a concurrent scanner cannot miss one
//! by looking at the wrong index while the set is rearranged.
//!
//! The three rules of the huge heap, and the orderings that make them hold:
//! 1. **Publish before map**: [`publish`] (a CAS, then a SeqCst fence) precedes the mapping;
//!    afterwards the publisher re-reads the allocation's status and backs off unless it is
//!    still live.
//! 2. **Remove after unmap**: [`retract`] follows the unmapping.
//! 3. **Reclaim only when freed and hazard-free**: the reclaimer moves the status Freed →
//!    Reclaiming with one CAS and a SeqCst fence ([`begin_reclaim`]), then [`contains`] scans
//!    the sets; it moves the status back to Freed if some set names the block.
//!
//! This is the store-buffering pattern with a fence on each side: in the fences' total order,
//! either the publisher's fence comes first (the scan then sees the entry) or the reclaimer's
//! does (the re-read then sees Reclaiming, not Live): never both "not seen". The reclaimer's
//! own RMW on the status is what makes this hold whoever freed the block. Model-checked in
//! `tests/loom.rs`, which also shows that dropping either fence breaks it.

use crate::sync::{fence, AtomicU64, Ordering};

/// Entries of `set` (pairs of words), as `(index, key word, pages word)`.
fn pairs(set: &[AtomicU64]) -> impl Iterator<Item = (usize, &AtomicU64, &AtomicU64)> {
    set.chunks_exact(2).enumerate().map(|(i, p)| (i, &p[0], &p[1]))
}

/// Publishes `key` (non-zero) for a mapping of `pages` pages in the first empty entry of `set`;
/// returns the entry's index, or `None` when the set is full. Async-signal-safe.
pub fn publish(set: &[AtomicU64], key: u64, pages: u64) -> Option<usize> {
    debug_assert_ne!(key, 0);
    for (i, k, p) in pairs(set) {
        if k.load(Ordering::Relaxed) == 0 && k.compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            // Relaxed: only this process reads `pages`, after reading `key` in program order
            // or through the same thread's retract.
            p.store(pages, Ordering::Relaxed);
            // Rule 1: the caller's re-read of the block's status comes after this fence.
            fence(Ordering::SeqCst);
            return Some(i);
        }
    }
    None
}

/// Rule 3's first half: moves a block's `status` from `freed` to `reclaiming` (so that no
/// second reclaimer and no late publisher can take it for live) and fences; the caller then
/// scans the hazard sets. False if the status was not `freed`.
pub fn begin_reclaim(status: &AtomicU64, freed: u64, reclaiming: u64) -> bool {
    let won = status.compare_exchange(freed, reclaiming, Ordering::Relaxed, Ordering::Relaxed).is_ok();
    if won {
        fence(Ordering::SeqCst);
    }
    won
}

/// Empties entry `index` of `set` (after its range is unmapped). Async-signal-safe.
pub fn retract(set: &[AtomicU64], index: usize) {
    // Checked: an index past the set (or one whose double overflows) empties nothing.
    let Some(first) = index.checked_mul(2) else { return };
    if let Some(p) = set.get(first..first.saturating_add(2)) {
        p[1].store(0, Ordering::Relaxed);
        // Release: the unmapping that preceded this happens before any reuse of the entry.
        p[0].store(0, Ordering::Release);
    }
}

/// Empties every entry of `set` holding `key`; returns how many there were.
pub fn retract_key(set: &[AtomicU64], key: u64) -> usize {
    let mut n = 0;
    for (i, k, _) in pairs(set) {
        if k.load(Ordering::Acquire) == key {
            retract(set, i);
            n += 1;
        }
    }
    n
}

/// Whether some entry of `set` holds `key` (rule 3's scan, after [`begin_reclaim`]).
pub fn contains(set: &[AtomicU64], key: u64) -> bool {
    // Acquire: a retracted entry's unmapping happens before the reclaim that follows.
    pairs(set).any(|(_, k, _)| k.load(Ordering::Acquire) == key)
}

/// The published entries of `set`, as `(index, key, pages)`; entries still being published
/// (pages not written yet) are skipped.
pub fn entries(set: &[AtomicU64]) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
    pairs(set).filter_map(|(i, k, p)| {
        let key = k.load(Ordering::Acquire);
        let pages = p.load(Ordering::Relaxed);
        (key != 0 && pages != 0).then_some((i, key, pages))
    })
}

/// Empties every entry of `set` (its holder is gone, or is giving the set back).
pub fn clear(set: &[AtomicU64]) {
    for (i, k, _) in pairs(set) {
        if k.load(Ordering::Relaxed) != 0 {
            retract(set, i);
        }
    }
}
