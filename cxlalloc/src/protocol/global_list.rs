//! The global free list of empty slabs: a Treiber stack whose head is a tagged HWcc word.
//!
//! Links live in the slabs' local descriptors (`next`, slab index + 1). ABA safety: every
//! successful CAS stamps the head with the writer's `{slot, version}` tag, so a head that was
//! popped and pushed back between a reader's load and CAS carries a different tag.
//!
//! Chains (docs/design.md §4.3, "Chains"): a push may carry several slabs already linked through
//! their `next` fields (the pusher's unsized list), and a pop may take the top `n` slabs at
//! once, so that a slab moved between threads costs a fraction of a CAS — an mCAS in the
//! no-HWcc model. Pushing a chain is [`push`] with the chain's first link and a `set_next` that
//! writes its last slab's link. Popping one is [`pop_chain`]: the links it walks are those of
//! slabs on the list when the head was read, and a slab on the list is written by nobody (its
//! owner is 0 and only a popper takes it), so if the tagged head is unchanged at the CAS the
//! walk read the list as it stood (a walk that raced with a pop and a push fails the CAS on
//! the tag and starts over).

use crate::protocol::HwWord;
use crate::sync::Ordering;
use crate::word::{Tag, Tagged};

/// Pushes slab `link` (index + 1). `set_next` writes the slab's `next` link to the current head
/// before each CAS attempt; the CAS publishes it. `help(seen)` runs before each attempt with the
/// word about to be overwritten (the detectable-CAS help step,
/// [`crate::protocol::detectable::help`]).
pub fn push(head: &(impl HwWord + ?Sized), tag: Tag, link: u32, mut set_next: impl FnMut(u32), help: impl Fn(u64)) {
    debug_assert_ne!(link, 0);
    let mut cur = head.load(Ordering::Relaxed);
    loop {
        set_next(Tagged::unpack(cur).payload);
        help(cur);
        // Release: publishes the slab's `next` link and cleared owner to the popper's Acquire.
        match head.compare_exchange_weak(cur, Tagged::new(link, tag).pack(), Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(seen) => cur = seen,
        }
    }
}

/// Pops up to `max` (≥ 1) slabs from the top: `(first link, count)`, the slabs being `first`
/// and the `count − 1` that follow it through their `next` links (unchanged by the pop), or
/// `None` when the list is empty. `next_of` as for [`pop`]; a link that fails to read ends
/// the walk there (the chain stops before it). `announce(first, count)` is called before each
/// CAS attempt. `help` as for [`push`].
pub fn pop_chain<E>(
    head: &(impl HwWord + ?Sized),
    tag: Tag,
    max: u32,
    mut next_of: impl FnMut(u32) -> Result<u32, E>,
    mut announce: impl FnMut(u32, u32),
    help: impl Fn(u64),
) -> Result<Option<(u32, u32)>, E> {
    // Acquire: pairs with the Release CAS of the push that installed this head (and, through
    // the pushes before it, with the writes of every link below it).
    let mut cur = head.load(Ordering::Acquire);
    loop {
        let top = Tagged::unpack(cur).payload;
        if top == 0 {
            return Ok(None);
        }
        // The first link must read (as for `pop`); deeper ones only lengthen the chain.
        let mut next = next_of(top)?;
        let mut count = 1;
        while count < max && next != 0 {
            match next_of(next) {
                Ok(after) => {
                    next = after;
                    count += 1;
                }
                Err(_) => break,
            }
        }
        announce(top, count);
        help(cur);
        // AcqRel as for `pop`.
        match head.compare_exchange_weak(cur, Tagged::new(next, tag).pack(), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(Some((top, count))),
            Err(seen) => cur = seen,
        }
    }
}

/// Pops the top slab, returning its link (index + 1), or `None` when the list is empty.
///
/// `announce(link)` is called before each CAS attempt with the slab about to be taken (the
/// caller logs it in its redo record); `next_of(link)` reads that slab's `next` link, and may
/// fail when the link is corrupt. A stale `next` read is harmless: the CAS then fails on the tag.
/// `help` as for [`push`].
pub fn pop<E>(
    head: &(impl HwWord + ?Sized),
    tag: Tag,
    mut next_of: impl FnMut(u32) -> Result<u32, E>,
    mut announce: impl FnMut(u32),
    help: impl Fn(u64),
) -> Result<Option<u32>, E> {
    // Acquire: pairs with the Release CAS of the push that installed this head.
    let mut cur = head.load(Ordering::Acquire);
    loop {
        let top = Tagged::unpack(cur).payload;
        if top == 0 {
            return Ok(None);
        }
        let next = next_of(top)?;
        announce(top);
        help(cur);
        // AcqRel: Acquire as above for the next iteration's link read; Release so our tag is
        // ordered after the record write that announced it.
        match head.compare_exchange_weak(cur, Tagged::new(next, tag).pack(), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(Some(top)),
            Err(seen) => cur = seen,
        }
    }
}
