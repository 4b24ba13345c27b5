//! The free mark in a block's first word (docs/design.md §4.1, "Free mark"): how a thread that
//! does not own a block's slab tells a block already freed from an allocated one.
//!
//! In every model a block freed remotely carries its slab's `mark` (counted) or the mark's high
//! half (waiting in a mailbox, [`crate::protocol::mailbox::Link`]), taken by one CAS
//! ([`claim`]) that fails if the word is marked already: of two frees of one block exactly one
//! wins. In the limited and no-HWcc models, where a remote freer cannot read the owner's bitset
//! or cached word, every block its owner holds free carries the mark too:
//!
//! - the sizing (T3) writes the mark into every block, before the first is handed out;
//! - the owner's local free and the harvest of a mailbox write it ([`set`]) *after* the
//!   block's bit, and before the slab can change hands;
//! - the allocation clears it ([`clear`]) *before* the bit is taken (in every model), so that
//!   a crash in between leaves a free block unmarked (a later double free of it goes
//!   unnoticed), never an allocated block marked (whose legitimate free would be refused).
//!
//! The full model keeps free blocks unmarked and asks the owner's lines instead (a mark written
//! at every local free, and by the sizing into every block, cost threadtest 3–6 % of its
//! operations per CPU-second: docs/design.md §15.1).
//!
//! The stores are `Relaxed`: a block changes hands between threads only through a
//! synchronizing step of the application (the hand-over of a pointer) or of the allocator
//! (a mailbox or counter CAS, a list CAS), each of which orders the mark's store before the
//! other thread's [`claim`]. Only frees ordered one after the other are told apart: the
//! owner's local free is no read-modify-write (docs/design.md §4.5), so an owner's free racing
//! a remote free of the same block is an application error neither sees.

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

/// Limited and no-HWcc models: a free by the slab's owner (or its harvest): the block takes the
/// slab's `mark`, after its bit and before the slab can change hands.
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
