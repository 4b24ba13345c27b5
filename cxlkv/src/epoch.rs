//! The epoch step of epoch-based reclamation over words in shared memory (docs/design.md
//! §16.2): pin, unpin, advance. cxlkv's table and the benchmark's KV table
//! (`cxlalloc-bench`'s `kv::ebr`) both run this code; where the words live (a table line each,
//! a strided control area) and what is retired (a ring in the heap, a process-local list) is
//! theirs.
//!
//! # Protocol
//!
//! A thread **pins** around each table operation: it stores `pinned(e)` for the global epoch
//! `e` it read, then re-reads the global epoch and re-announces until the two agree. It
//! **retires** a block after unlinking it, tagging it with the global epoch read after the
//! unlink, and frees it once [`reclaimable`] (the global epoch is at least `tag + 2`). The epoch
//! advances from `g` to `g + 1` only when every pinned thread has announced `g`.
//!
//! Why a retired block is never freed under a pinned reader: every access here is `SeqCst`, so
//! all of them fall in one total order S. A reader `R` that holds block `v` announced `e`,
//! re-read `e`, then loaded the word that led to `v` — so that load precedes the unlinking swap
//! in S, and the retirer's epoch read after the swap returns `r ≥ e`. Freeing needs the epoch
//! to pass `e + 1 → e + 2`; that advancer read the epoch `e + 1` after `R` read `e`, so its read
//! of `R`'s announcement follows `R`'s store in S and sees `pinned(e)` until `R` unpins.
//!
//! The same argument holds with the accesses weaker than `SeqCst` as long as the three
//! store-then-load steps (a pin's announcement then its re-read, an advance's epoch read then
//! its scan, an unlink then the tag's read) each have a `SeqCst` fence in between: the fences
//! are totally ordered, and each case above becomes a fence-to-fence step. The code has both,
//! the `SeqCst` accesses and the fences, because the fences are what the loom models
//! (`tests/loom.rs`) can check: loom treats `SeqCst` accesses as acquire/release (so it finds
//! the store-buffering outcome they forbid) but implements `SeqCst` fences. On x86 a fence is
//! one `mfence`, a few tens of cycles per operation.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// A thread's announcement word.
///
/// ```text
///  63                                                     1   0
/// +--------------------------------------------------------+---+
/// |                    epoch (63 bits)                     | P |
/// +--------------------------------------------------------+---+
/// ```
///
/// `P` = pinned. An unpinned thread's word is 0 (zeroed memory's state), so a thread that
/// never ran, or finished, never holds the epoch back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    /// Whether the thread is inside an operation.
    pub pinned: bool,
    /// The epoch it announced (meaningful only when pinned).
    pub epoch: u64,
}

impl Announce {
    /// Not in an operation.
    pub const IDLE: Announce = Announce { pinned: false, epoch: 0 };

    /// Inside an operation that started in `epoch`.
    pub fn pinned(epoch: u64) -> Self {
        Self { pinned: true, epoch }
    }

    /// The word.
    pub fn pack(self) -> u64 {
        if self.pinned {
            self.epoch << 1 | 1
        } else {
            0
        }
    }

    /// The announcement in `word`.
    pub fn unpack(word: u64) -> Self {
        Self { pinned: word & 1 != 0, epoch: word >> 1 }
    }
}

/// Enters an operation, announcing in `word`: blocks reachable from now on stay allocated until
/// [`unpin`]. Returns the epoch announced.
#[inline]
pub fn pin(global: &AtomicU64, word: &AtomicU64) -> u64 {
    let mut e = global.load(Ordering::SeqCst);
    loop {
        // SeqCst store, then SeqCst re-read: the announcement precedes every later load of this
        // operation in S (on x86 the store is an xchg, the one fence of a pin).
        word.store(Announce::pinned(e).pack(), Ordering::SeqCst);
        // The store-then-load of a pin (see the module docs).
        fence(Ordering::SeqCst);
        let now = global.load(Ordering::SeqCst);
        if now == e {
            return e;
        }
        e = now;
    }
}

/// Leaves the operation announced in `word`.
#[inline]
pub fn unpin(word: &AtomicU64) {
    // SeqCst (hence Release): every read of a block in the operation happens before an
    // advancer that sees this store, hence before the block is freed.
    word.store(Announce::IDLE.pack(), Ordering::SeqCst);
}

/// The global epoch, for [`reclaimable`].
#[inline]
pub fn current(global: &AtomicU64) -> u64 {
    // SeqCst: takes part in the total order the module proof relies on.
    global.load(Ordering::SeqCst)
}

/// The tag of a block unlinked just before (by a swap or CAS that took it out): the global
/// epoch, read after a fence that orders it after the unlink (see the module docs).
#[inline]
pub fn tag(global: &AtomicU64) -> u64 {
    fence(Ordering::SeqCst);
    current(global)
}

/// Advances `global` by one if every pinned announcement in `announcements` is of the current
/// epoch; returns whether the epoch moved (by this call or a racing one). Call it unpinned: a
/// caller announcing an old epoch would hold its own advance back.
pub fn try_advance<'a>(global: &AtomicU64, announcements: impl IntoIterator<Item = &'a AtomicU64>) -> bool {
    let g = current(global);
    // The epoch read, then the scan (see the module docs).
    fence(Ordering::SeqCst);
    for word in announcements {
        // SeqCst: this read follows, in S, every announcement made before the epoch read `g`
        // above (see the module docs).
        let a = Announce::unpack(word.load(Ordering::SeqCst));
        if a.pinned && a.epoch != g {
            return false;
        }
    }
    // A failed CAS means another thread advanced from `g`: the epoch moved all the same.
    let _ = global.compare_exchange(g, g + 1, Ordering::SeqCst, Ordering::SeqCst);
    true
}

/// Whether a block retired with epoch tag `tag` can be freed at global epoch `global` (no
/// pinned thread can still hold it: two advances since).
#[inline]
pub fn reclaimable(tag: u64, global: u64) -> bool {
    tag + 2 <= global
}
