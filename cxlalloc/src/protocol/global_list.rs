//! The global free list of empty slabs: a Treiber stack whose head is a tagged HWcc word.
//!
//! Links live in the slabs' local descriptors (`next`, slab index + 1). ABA safety: every
//! successful CAS stamps the head with the writer's `{slot, version}` tag, so a head that was
//! popped and pushed back between a reader's load and CAS carries a different tag.

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
