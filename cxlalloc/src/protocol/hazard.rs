//! Hazard entries: how a process announces that it maps a huge allocation, so that the
//! allocation's owner does not reclaim its address range and backing object underneath it.
//!
//! A hazard set is a slice of entry pairs `[key, pages]`: `key` a packed
//! `word::HazardKey` (0 = empty), `pages` the mapped length in pages, which the
//! publishing process needs to unmap the range later without reading the (possibly reclaimed)
//! descriptor, plus two state bits. Entries are never moved or swap-removed, so a concurrent
//! scanner cannot miss one by looking at the wrong index while the set is rearranged.
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
//!
//! # The mapping protocol of one process (docs/design.md §7.4)
//!
//! The entries of the sets a process leased are also that process's table of installed huge
//! mappings, shared by all its threads (and its fault handler). Each entry moves through
//! `Empty → Pending → Installed → Dropping → Empty`, the state kept in the `pages` word:
//! - **Pending** ([`publish`]): the publisher alone owns the entry; it re-reads the block, maps
//!   it if it is still live, then [`confirm`]s (Installed) — or, if not, [`retract`]s it
//!   without ever having mapped.
//! - **Installed** ([`confirm`]): the range holds this block's mapping. Any thread may take it.
//! - **Dropping** ([`claim`]): exactly one thread won the CAS from Installed. It judges the
//!   block only now ([`drop_stale`]); if the block is no longer live it alone unmaps the range
//!   and then [`retract`]s the entry, otherwise it gives the entry back ([`unclaim`]).
//!
//! **Invariant**: a thread changes the mapping of a block's range only while an entry of that
//! block is published in its process's sets and owned by that thread (Pending: it maps;
//! Dropping: it unmaps), or while the block is live (its allocator maps it, its freer unmaps it).
//! Rule 3 keeps the range from being reused while such an entry exists, and a live block's range
//! is not reused either, so no mapping change can land on a range that another thread has since
//! mapped for a different, live block. A thread that unmapped after another had already
//! retracted the entry (or that retracted an entry it did not own, by index) could: the range
//! could meanwhile have been reclaimed, reused and mapped for a new block, which the late unmap
//! then destroys, or whose hazard the stray retract removes. The model in `tests/loom.rs` (two
//! threads of one process dropping a stale mapping while a third maps the block that reused
//! the range, its owner in another process) checks the protocol, and catches a drop without
//! the claim and a drop that judges the block before claiming its entry.

use crate::sync::{fence, AtomicU64, Ordering};

/// State bit of the `pages` word: published, not yet mapped and confirmed; owned by its
/// publisher.
const PENDING: u64 = 1 << 63;
/// State bit of the `pages` word: claimed by the one thread that unmaps it.
const DROPPING: u64 = 1 << 62;
/// The page count in a `pages` word.
const PAGES: u64 = DROPPING - 1;

/// Entries of `set` (pairs of words), as `(index, key word, pages word)`.
fn pairs(set: &[AtomicU64]) -> impl Iterator<Item = (usize, &AtomicU64, &AtomicU64)> {
    set.chunks_exact(2).enumerate().map(|(i, p)| (i, &p[0], &p[1]))
}

/// Publishes `key` (non-zero) for a mapping of `pages` pages in the first empty entry of `set`,
/// Pending; returns the entry's index, or `None` when the set is full. The caller then either
/// maps and [`confirm`]s, or [`retract`]s. Async-signal-safe.
pub fn publish(set: &[AtomicU64], key: u64, pages: u64) -> Option<usize> {
    debug_assert_ne!(key, 0);
    for (i, k, p) in pairs(set) {
        if k.load(Ordering::Relaxed) == 0 && k.compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            // Relaxed: only this process reads `pages`, and a Pending entry only its publisher.
            p.store((pages & PAGES) | PENDING, Ordering::Relaxed);
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

/// Marks the Pending entry `index` of `set` Installed: its publisher has mapped the block.
/// Async-signal-safe.
pub fn confirm(set: &[AtomicU64], index: usize) {
    if let Some(p) = set.get(2 * index + 1) {
        // Release: the mapping happens before the unmapping of whoever claims the entry.
        p.store(p.load(Ordering::Relaxed) & PAGES, Ordering::Release);
    }
}

/// Takes the Installed entry `index` of `set` if it still holds `key`: one CAS to Dropping, so
/// that one thread at most unmaps its range; that thread then [`retract`]s it, or gives it back
/// with [`unclaim`]. Returns the entry's page count, or `None` if the entry is empty, Pending,
/// already claimed, or holds another key now (retracted and published again since the caller
/// read it). Async-signal-safe.
pub fn claim(set: &[AtomicU64], index: usize, key: u64) -> Option<u64> {
    let (k, p) = (set.get(2 * index)?, set.get(2 * index + 1)?);
    let pw = p.load(Ordering::Relaxed);
    if pw == 0 || pw & (PENDING | DROPPING) != 0 {
        return None;
    }
    // Acquire: the confirming thread's mapping, and what it saw of the block, happen before
    // whatever we decide and do with the entry.
    p.compare_exchange(pw, pw | DROPPING, Ordering::Acquire, Ordering::Relaxed).ok()?;
    // The key cannot change while we own the entry; it may have changed before our CAS (a
    // retract and a new publish with the same page count), and then the entry is not ours.
    if k.load(Ordering::Relaxed) != key {
        unclaim(set, index, pw);
        return None;
    }
    Some(pw & PAGES)
}

/// Gives back entry `index` of `set`, claimed with `pages` pages, as Installed.
/// Async-signal-safe.
pub fn unclaim(set: &[AtomicU64], index: usize, pages: u64) {
    if let Some(p) = set.get(2 * index + 1) {
        // Release: pairs with the next claimer's Acquire, as a confirmation does.
        p.store(pages & PAGES, Ordering::Release);
    }
}

/// Empties entry `index` of `set` (after its range is unmapped), which the caller owns: it
/// published it (Pending) or claimed it (Dropping). Async-signal-safe.
pub fn retract(set: &[AtomicU64], index: usize) {
    // Checked: an index past the set (or one whose double overflows) empties nothing.
    let Some(first) = index.checked_mul(2) else { return };
    if let Some(p) = set.get(first..first.saturating_add(2)) {
        p[1].store(0, Ordering::Relaxed);
        // Release: the unmapping that preceded this happens before any reuse of the entry.
        p[0].store(0, Ordering::Release);
    }
}

/// Empties every Installed entry of `set` holding `key`, whose range the caller has unmapped
/// already (a freer, while the block is still live); returns how many there were. Pending and
/// Dropping entries are their owners' to retract.
pub fn retract_key(set: &[AtomicU64], key: u64) -> usize {
    let mut n = 0;
    for (i, k, _) in pairs(set) {
        if k.load(Ordering::Acquire) == key && claim(set, i, key).is_some() {
            retract(set, i);
            n += 1;
        }
    }
    n
}

/// Drops the Installed entries of `set` whose block `dead` says is no longer live: each is
/// claimed first and judged only then, so that the judgement sees the block at least as live
/// as its publisher saw it when it confirmed (an entry judged before the claim could be a new
/// one by the time of the claim, with the same key and page count: judged on stale data). The
/// claimer of a dead block's entry calls `unmap(key, pages)`, then retracts the entry; a live
/// block's entry is given back. Returns how many this call dropped. Async-signal-safe if `dead`
/// and `unmap` are.
pub fn drop_stale(set: &[AtomicU64], dead: impl Fn(u64) -> bool, mut unmap: impl FnMut(u64, u64)) -> usize {
    let mut n = 0;
    for (i, k, _) in pairs(set) {
        let key = k.load(Ordering::Relaxed);
        if key == 0 {
            continue;
        }
        let Some(pages) = claim(set, i, key) else { continue };
        if dead(key) {
            unmap(key, pages);
            retract(set, i);
            n += 1;
        } else {
            unclaim(set, i, pages);
        }
    }
    n
}

/// Whether some entry of `set` holds `key` (rule 3's scan, after [`begin_reclaim`]).
pub fn contains(set: &[AtomicU64], key: u64) -> bool {
    // Acquire: a retracted entry's unmapping happens before the reclaim that follows.
    pairs(set).any(|(_, k, _)| k.load(Ordering::Acquire) == key)
}

/// The published entries of `set` in any state, as `(index, key, pages)`; entries still being
/// published (pages not written yet) are skipped.
pub fn entries(set: &[AtomicU64]) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
    pairs(set).filter_map(|(i, k, p)| {
        let key = k.load(Ordering::Acquire);
        let pages = p.load(Ordering::Relaxed) & PAGES;
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const KEY: u64 = 0x1_0001;
    const OTHER: u64 = 0x2_0001;

    fn set() -> Vec<AtomicU64> {
        (0..4).map(|_| AtomicU64::new(0)).collect()
    }

    /// Runs [`drop_stale`] with every block dead; returns the keys it unmapped.
    fn drop_all(set: &[AtomicU64]) -> Vec<u64> {
        let mut unmapped = Vec::new();
        drop_stale(set, |_| true, |key, _| unmapped.push(key));
        unmapped
    }

    #[test]
    fn a_pending_entry_is_left_to_its_publisher_even_when_its_block_is_dead() {
        let set = set();
        let i = publish(&set, KEY, 3).unwrap();
        assert_eq!(drop_all(&set), Vec::<u64>::new());
        assert_eq!(retract_key(&set, KEY), 0);
        assert!(contains(&set, KEY));
        confirm(&set, i);
        assert_eq!(drop_all(&set), vec![KEY]);
        assert!(!contains(&set, KEY));
    }

    #[test]
    fn an_installed_entry_is_claimed_by_one_thread_only() {
        let set = set();
        let i = publish(&set, KEY, 3).unwrap();
        confirm(&set, i);
        assert_eq!(claim(&set, i, KEY), Some(3));
        assert_eq!(claim(&set, i, KEY), None);
        assert_eq!(drop_all(&set), Vec::<u64>::new());
        assert_eq!(retract_key(&set, KEY), 0);
        unclaim(&set, i, 3);
        assert_eq!(claim(&set, i, KEY), Some(3));
    }

    #[test]
    fn a_claim_for_a_key_the_entry_no_longer_holds_fails_and_leaves_it_installed() {
        let set = set();
        let i = publish(&set, KEY, 3).unwrap();
        confirm(&set, i);
        retract(&set, i);
        assert_eq!(publish(&set, OTHER, 3), Some(i));
        confirm(&set, i);
        assert_eq!(claim(&set, i, KEY), None);
        assert_eq!(claim(&set, i, OTHER), Some(3));
    }

    #[test]
    fn a_live_block_entry_is_given_back_installed() {
        let set = set();
        let i = publish(&set, KEY, 3).unwrap();
        confirm(&set, i);
        assert_eq!(drop_stale(&set, |_| false, |_, _| panic!("unmapped a live block")), 0);
        assert_eq!(claim(&set, i, KEY), Some(3));
    }
}
