//! A slot's mailbox of remotely freed blocks (docs/design.md §4.6): a lock-free stack threaded
//! through the freed blocks themselves, whose head is one tagged HWcc word per slot and
//! bracket.
//!
//! A thread freeing a block of a slab another slot owns pushes the block (its [`BlockId`]) on
//! the owner's mailbox instead of counting it down on the slab's remote counter; the owner
//! takes the whole stack with one CAS when it refills ([`take`]) and returns each block to its
//! bitset as a local free. So a block freed remotely is reusable at the owner's next refill,
//! not only once every block of its slab has been freed.
//!
//! The stack is push-one / take-all: no thread ever pops a single entry, so the Treiber ABA
//! problem (a popper's stale `next`) cannot arise; the tag on the head only serves detectable
//! CAS (docs/design.md §8.2). A detaching owner closes its mailbox ([`CLOSED`]): a pusher
//! that finds it closed counts its free on the slab's counter instead (T10/T8), so no block is
//! stranded in a mailbox nobody will read.
//!
//! ```text
//!  head (HWcc, tagged)          block words (SWcc, first word of each freed block)
//! +-----------+---------+      +----------------+----------+      +----------------+-------+
//! | tag       | id₃ + 1 | ───▶ | mark high half | id₂ + 1  | ───▶ | mark high half | 0     |
//! +-----------+---------+      +----------------+----------+      +----------------+-------+
//! ```

use crate::protocol::HwWord;
use crate::sync::Ordering;
use crate::word::{Tag, Tagged};

/// Head payload of an empty, open mailbox (the zero of a fresh heap: every mailbox starts open).
pub const EMPTY: u32 = 0;
/// Head payload of a closed mailbox: its slot has no holder; pushers count their frees instead.
pub const CLOSED: u32 = u32::MAX;

/// The mailbox was closed: nobody will take a block pushed now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

/// A block's name in a mailbox: its slab and block index within one bracket, packed into the
/// 31 bits a head payload and a block link can carry.
///
/// ```text
///  31   30                           shift  shift-1                 0
/// +----+---------------------------------+---------------------------+
/// | 0  | slab index                      | block index               |
/// +----+---------------------------------+---------------------------+
/// ```
///
/// The payload stored is `id + 1` (0 = end of chain / empty). Bit 31 of a payload is never set,
/// which keeps a link word distinct from a full free mark (whose low half has bit 31 set, see
/// [`Link`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockId {
    /// Slab index in the bracket.
    pub slab: u32,
    /// Block index in the slab.
    pub block: u32,
}

impl BlockId {
    /// The payload of this block when blocks have `shift` bits of index, or `None` when the slab
    /// index does not fit (such a block's free is counted instead).
    #[inline]
    pub fn payload(self, shift: u32) -> Option<u32> {
        let id = (u64::from(self.slab) << shift) | u64::from(self.block);
        (id + 1 < 1 << 31).then_some(id as u32 + 1)
    }

    /// Decodes a non-zero payload.
    #[inline]
    pub fn from_payload(payload: u32, shift: u32) -> Option<Self> {
        let id = payload.checked_sub(1).filter(|&p| p < (1 << 31) - 1)?;
        Some(Self { slab: id >> shift, block: id & ((1 << shift) - 1) })
    }
}

/// The first word of a block waiting in a mailbox: the high half of its slab's free mark (so
/// that a second free of it is seen as a double free) and the payload of the next block.
///
/// ```text
///  63                             32 31  30                          0
/// +---------------------------------+---+-----------------------------+
/// | mark >> 32                      | 0 | next payload (0 = end)      |
/// +---------------------------------+---+-----------------------------+
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// The next block's payload; 0 ends the chain.
    pub next: u32,
}

impl Link {
    /// The word linking to `next` in a slab whose mark is `mark`.
    #[inline]
    pub fn pack(self, mark: u64) -> u64 {
        (mark & !0xffff_ffff) | u64::from(self.next)
    }

    /// The link `word` holds, if it is one (its high half is `mark`'s and its low half a
    /// payload). A full free mark is not a link: its low half has bit 31 set.
    #[inline]
    pub fn unpack(word: u64, mark: u64) -> Option<Self> {
        (word >> 32 == mark >> 32 && (word as u32) < 1 << 31).then_some(Self { next: word as u32 })
    }

    /// Whether `word` says its block was already freed remotely: counted (the full mark) or
    /// waiting in a mailbox (a link).
    #[inline]
    pub fn freed(word: u64, mark: u64) -> bool {
        word >> 32 == mark >> 32
    }
}

/// Pushes the block with payload `id` (≠ [`EMPTY`], [`CLOSED`]). `link(next)` writes the
/// block's link to the current head's payload before each CAS attempt; the CAS publishes it.
/// `help(seen)` runs before each attempt with the word about to be overwritten (the
/// detectable-CAS help step, [`crate::protocol::detectable::help`]). `Err(Closed)`, with nothing
/// written to the head, when the mailbox is closed. Always inlined, as
/// [`crate::protocol::remote::subtract`]: it is the usual remote free's only CAS.
#[inline(always)]
pub fn push(
    head: &(impl HwWord + ?Sized),
    tag: Tag,
    id: u32,
    mut link: impl FnMut(u32),
    help: impl Fn(u64),
) -> Result<(), Closed> {
    debug_assert!(id != EMPTY && id != CLOSED);
    // Relaxed: the CAS below validates what we read.
    let mut cur = head.load(Ordering::Relaxed);
    loop {
        let top = Tagged::unpack(cur).payload;
        if top == CLOSED {
            return Err(Closed);
        }
        link(top);
        help(cur);
        // Release: publishes the block's link (and this freer's earlier writes to the block) to
        // the taker's Acquire in `take`.
        match head.compare_exchange_weak(cur, Tagged::new(id, tag).pack(), Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return Ok(()),
            Err(seen) => cur = seen,
        }
    }
}

/// Takes the whole stack and leaves the head at `to` ([`EMPTY`]: a harvest, or opening a closed
/// mailbox; [`CLOSED`]: closing it). Returns the payload of the first block taken ([`EMPTY`] if
/// none). `announce(chain)` runs before each CAS attempt with the chain about to be taken (the
/// caller records it, so that recovery can walk it if the CAS took effect); `help` as for
/// [`push`]. Writes nothing when the head already is `to` with no block (`None`).
#[inline]
pub fn take(
    head: &(impl HwWord + ?Sized),
    tag: Tag,
    to: u32,
    mut announce: impl FnMut(u32),
    help: impl Fn(u64),
) -> Option<u32> {
    debug_assert!(to == EMPTY || to == CLOSED);
    // Acquire: pairs with the Release CAS of the push that installed this head.
    let mut cur = head.load(Ordering::Acquire);
    loop {
        let top = Tagged::unpack(cur).payload;
        if top == to {
            return None;
        }
        let chain = if top == CLOSED { EMPTY } else { top };
        announce(chain);
        help(cur);
        // AcqRel: Acquire so that the links of the chain taken are those its pushers wrote;
        // Release orders the caller's announcement before our tag.
        match head.compare_exchange_weak(cur, Tagged::new(to, tag).pack(), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(chain),
            Err(seen) => cur = seen,
        }
    }
}

/// Whether the mailbox holds a block (a plain load: the owner's cheap test before a harvest).
#[inline]
pub fn has_blocks(head: &(impl HwWord + ?Sized)) -> bool {
    // Relaxed: a hint; `take` reads the head again with Acquire.
    let top = Tagged::unpack(head.load(Ordering::Relaxed)).payload;
    top != EMPTY && top != CLOSED
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::AtomicU64;

    #[test]
    fn block_ids_round_trip_and_never_reach_bit_31() {
        for (slab, block, shift) in [(0, 0, 12), (5, 4095, 12), ((1 << 19) - 2, 4095, 12), (3, 511, 9)] {
            let id = BlockId { slab, block };
            let p = id.payload(shift).expect("fits");
            assert!(p != EMPTY && p < 1 << 31);
            assert_eq!(BlockId::from_payload(p, shift), Some(id));
        }
        assert_eq!(BlockId { slab: (1 << 19) - 1, block: 4095 }.payload(12), None);
        assert_eq!(BlockId { slab: 1 << 22, block: 0 }.payload(9), None);
    }

    #[test]
    fn a_link_is_freed_but_never_the_full_mark() {
        let mark = 0x4123_4567_8000_0001u64;
        let w = Link { next: 77 }.pack(mark);
        assert_eq!(Link::unpack(w, mark), Some(Link { next: 77 }));
        assert!(Link::freed(w, mark) && Link::freed(mark, mark));
        assert_eq!(Link::unpack(mark, mark), None);
        assert!(!Link::freed(0, mark));
    }

    #[test]
    fn push_then_take_returns_the_stack_and_empties_it() {
        let head = AtomicU64::new(0);
        let mut links = [0u32; 4];
        for id in 1..=3u32 {
            push(&head, Tag::new(1, id), id, |next| links[id as usize] = next, |_| {}).unwrap();
        }
        assert_eq!(links[1..], [0, 1, 2]);
        assert_eq!(take(&head, Tag::new(0, 9), EMPTY, |_| {}, |_| {}), Some(3));
        assert_eq!(take(&head, Tag::new(0, 10), EMPTY, |_| {}, |_| panic!("no write")), None);
    }

    #[test]
    fn a_closed_mailbox_refuses_pushes_until_opened() {
        let head = AtomicU64::new(0);
        push(&head, Tag::new(1, 1), 5, |_| {}, |_| {}).unwrap();
        assert_eq!(take(&head, Tag::new(0, 2), CLOSED, |_| {}, |_| {}), Some(5));
        assert_eq!(push(&head, Tag::new(1, 3), 6, |_| {}, |_| {}), Err(Closed));
        assert!(!has_blocks(&head));
        assert_eq!(take(&head, Tag::new(0, 4), EMPTY, |_| {}, |_| {}), Some(EMPTY));
        push(&head, Tag::new(1, 5), 6, |_| {}, |_| {}).unwrap();
        assert!(has_blocks(&head));
    }
}
