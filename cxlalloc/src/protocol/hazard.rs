//! Hazard entries: how a process announces that it maps a huge allocation, so that the
//! allocation's owner does not reclaim its address range and backing object underneath it.
//!
//! A hazard set is a slice of entry pairs `[key, pages]`: `key` a packed
//! [`crate::word::HazardKey`] (0 = empty), `pages` the mapped length in pages, which the
//! publishing process needs to unmap the range later without reading the (possibly reclaimed)
//! descriptor. Entries are never moved or swap-removed, so a concurrent scanner cannot miss one
//! by looking at the wrong index while the set is rearranged.
//!
//! The three rules of the huge heap, and the orderings that make them hold:
//! 1. **Publish before map**: [`publish`] (a SeqCst CAS) precedes the mapping; afterwards the
//!    publisher re-reads the allocation's state (SeqCst) and backs off unless it is still live.
//! 2. **Remove after unmap**: [`retract`] follows the unmapping.
//! 3. **Reclaim only when freed and hazard-free**: a reclaimer reads the state Freed (it was
//!    stored SeqCst by the freer), then [`contains`] scans every set with SeqCst loads.
//!
//! In the single total order of SeqCst operations, either the publisher's CAS precedes the
//! reclaimer's scan (which then sees the entry), or the freer's state store precedes the
//! publisher's re-read (which then sees Freed and does not map): never both "not seen".

use crate::sync::{AtomicU64, Ordering};

/// Entries of `set` (pairs of words), as `(index, key word, pages word)`.
fn pairs(set: &[AtomicU64]) -> impl Iterator<Item = (usize, &AtomicU64, &AtomicU64)> {
    set.chunks_exact(2).enumerate().map(|(i, p)| (i, &p[0], &p[1]))
}

/// Publishes `key` (non-zero) for a mapping of `pages` pages in the first empty entry of `set`;
/// returns the entry's index, or `None` when the set is full. Async-signal-safe.
pub fn publish(set: &[AtomicU64], key: u64, pages: u64) -> Option<usize> {
    debug_assert_ne!(key, 0);
    for (i, k, p) in pairs(set) {
        // SeqCst: rule 1 (see the module docs); the entry is the publisher's from here on.
        if k.load(Ordering::Relaxed) == 0 && k.compare_exchange(0, key, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            // Relaxed: only this process reads `pages`, after reading `key` in program order
            // or through the same thread's retract.
            p.store(pages, Ordering::Relaxed);
            return Some(i);
        }
    }
    None
}

/// Empties entry `index` of `set` (after its range is unmapped). Async-signal-safe.
pub fn retract(set: &[AtomicU64], index: usize) {
    if let Some(p) = set.get(2 * index..2 * index + 2) {
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

/// Whether some entry of `set` holds `key` (rule 3's scan).
pub fn contains(set: &[AtomicU64], key: u64) -> bool {
    // SeqCst: rule 3 (see the module docs).
    pairs(set).any(|(_, k, _)| k.load(Ordering::SeqCst) == key)
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
