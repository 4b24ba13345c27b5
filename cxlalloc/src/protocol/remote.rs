//! The count-down remote-free counter of a slab (HWcc, one tagged word per slab).
//!
//! When a slab is given a class its counter is set to the class's block count; each remote free
//! subtracts one. A remotely freed block never returns to the owner's bitset, so the counter
//! reaches 0 exactly when every block has been freed remotely, and the freer that takes it from
//! 1 to 0 claims the now-empty slab (T8). A remote freer never needs the SWcc class or count.

use crate::protocol::HwWord;
use crate::sync::Ordering;
use crate::word::{Tag, Tagged};

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
/// else can write the counter meanwhile: an unsized slab's counter is 0 (claimed, fresh or
/// popped), and a decrement at 0 underflows without writing.
pub fn reset(word: &(impl HwWord + ?Sized), blocks: u32, tag: Tag, help: impl Fn(u64)) {
    help(word.load(Ordering::Acquire));
    // Release: a remote freer that later decrements sees the owner's prior descriptor writes.
    word.store(Tagged::new(blocks, tag).pack(), Ordering::Release);
}

/// Reads the counter (the owner's detach-or-disown decision, T4/T5).
pub fn count(word: &(impl HwWord + ?Sized)) -> u32 {
    // Acquire: pairs with the freers' AcqRel decrements.
    Tagged::unpack(word.load(Ordering::Acquire)).payload
}

/// Subtracts one remote free.
pub fn decrement(word: &(impl HwWord + ?Sized), tag: Tag, help: impl Fn(u64)) -> Result<Decrement, Underflow> {
    subtract(word, 1, tag, help)
}

/// Subtracts `k` blocks at once: a batch of remote frees, or the free blocks of a slab its owner
/// abandons (their bits stay set as tombstones, so they can never be counted twice). `Claimed`
/// when this takes the counter to 0; `Underflow` (and no change) when the counter is below `k`.
/// `help(seen)` runs before each CAS attempt with the word about to be overwritten
/// ([`crate::protocol::detectable::help`]).
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
