//! The free mark in a block's first word (docs/design.md §4.1, "Free mark"): how a thread that
//! does not own a block's slab tells a free block from an allocated one without reading any
//! line its owner writes.
//!
//! Invariant, in every coherence model: a block of a sized slab carries its slab's current
//! mark (or, waiting in a mailbox, the mark's high half, [`crate::protocol::mailbox::Link`])
//! in its first word exactly when it is not allocated — free in its owner's bitset or cached
//! word, counted, or waiting — except for the one block of a step a crash cut between its bit
//! and its mark, which recovery marks again (docs/design.md §8.3). Who writes it:
//!
//! - the sizing (T3) writes the mark into every block, before the first is handed out;
//! - the owner's local free and the harvest of a mailbox write it ([`set`]) *after* the
//!   block's bit, and before the slab can change hands;
//! - the allocation clears it ([`clear`]) *before* the bit is taken, so that a crash in
//!   between leaves a free block unmarked, never an allocated block marked (whose legitimate
//!   free would be refused);
//! - a remote free takes it with one CAS ([`claim`]) that fails if the word is marked already:
//!   of two frees of one block, exactly one wins, and a free of a block its owner holds free
//!   is refused.
//!
//! The stores are `Relaxed`: a block changes hands between threads only through a
//! synchronizing step of the application (the hand-over of a pointer) or of the allocator
//! (a mailbox or counter CAS, a list CAS), each of which orders the mark's store before the
//! other thread's [`claim`].

use crate::sync::{AtomicU64, Ordering};

/// The free was refused: the block's word carries the mark (or a mailbox link), so the block
/// is not allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlreadyFree;

/// Whether a block's first word `word` says the block is not allocated in a slab whose mark is
/// `mark`: it carries the mark's high half (the full mark, or a mailbox link).
#[inline(always)]
pub fn is_marked(word: u64, mark: u64) -> bool {
    word >> 32 == mark >> 32
}

/// Allocation: the block's mark leaves it, before its bit is taken.
#[inline(always)]
pub fn clear(word: &AtomicU64) {
    // Relaxed: the block is ours until the application hands it over, which orders this store
    // before the receiver's free.
    word.store(0, Ordering::Relaxed);
}

/// A free by the slab's owner (or its harvest): the block takes the slab's `mark`, after its
/// bit and before the slab can change hands.
#[inline(always)]
pub fn set(word: &AtomicU64, mark: u64) {
    // Relaxed: whatever next shows the block to another thread (the application's hand-over, a
    // list or counter CAS) orders this store before that thread's `claim`.
    word.store(mark, Ordering::Relaxed);
}

/// A free by a thread that may not own the slab: writes `new` (the full mark, or a mailbox
/// link carrying the mark's high half) unless the word is marked already. One CAS, so that of
/// two concurrent frees of one block exactly one wins. Relaxed: detection only; what the free
/// publishes is ordered by its counter or mailbox CAS.
#[inline(always)]
pub fn claim(word: &AtomicU64, new: u64, mark: u64) -> Result<(), AlreadyFree> {
    let mut old = word.load(Ordering::Relaxed);
    loop {
        if is_marked(old, mark) {
            return Err(AlreadyFree);
        }
        match word.compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(()),
            Err(seen) => old = seen,
        }
    }
}
