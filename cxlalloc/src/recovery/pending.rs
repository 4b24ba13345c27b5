//! Recovery of the outer operation a slot's pending word names (see
//! [`crate::persist::redo::PendingRecord`]), after its slab state has been repaired.
//!
//! The test for "did the block leave the free state" is the block itself: a slab block that is
//! neither in its slab's bitset, nor in its owner's cached word, nor marked freed remotely is
//! allocated; a huge block is allocated while its descriptor is Live. A block named by a
//! pending word cannot have been allocated to anyone else meanwhile: until the record is
//! settled it is either still free in this slot's own cache or held by this slot.

use crate::huge::ops::{finish_release, mark_freed, release, HugeThread};
use crate::persist::huge::HugeState;
use crate::persist::redo::{Pending, PendingKind};
use crate::slab::ops::SlabThread;
use crate::sync::Ordering;

/// What resolving the pending word did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingOutcome {
    /// Detectable allocation: the block was taken; its offset is now in the caller's word.
    Stored,
    /// The block never left the free state: nothing to do.
    NotTaken,
    /// Detectable free: the caller's word is clear and the block freed.
    Freed,
    /// The free had already happened (the word is clear).
    AlreadyFreed,
    /// A huge allocation in progress was undone: object, descriptor and range released.
    Undone,
    /// A huge free or reclaim in progress was finished.
    Finished,
}

/// The address of heap offset `off` if it lies in a slab data span. The record's words were
/// written by a process that may have left them corrupt: checked before they become a pointer.
fn in_slab_data(t: &SlabThread<'_>, off: u64) -> Option<*mut u8> {
    let off = usize::try_from(off).ok()?;
    t.mem.bracket_at(off).map(|_| t.mem.block(off).as_ptr())
}

/// Whether the slab block at heap offset `off` is allocated.
fn slab_allocated(t: &SlabThread<'_>, off: u64) -> bool {
    in_slab_data(t, off).is_some_and(|ptr| t.usable_size(ptr).is_ok())
}

/// Whether heap offset `off` is an allocated block start, slab or huge.
fn allocated(t: &SlabThread<'_>, huge: Option<&HugeThread<'_>>, off: u64) -> bool {
    match huge.and_then(|h| h.view.span.contains(off as usize).then(|| h.view.find(off))) {
        Some(found) => found.is_some_and(|b| b.offset == off && b.state == Some(HugeState::Live)),
        None => slab_allocated(t, off),
    }
}

/// Resolves `p`; the caller settles the record after.
pub(crate) fn resolve(t: &SlabThread<'_>, huge: Option<&HugeThread<'_>>, p: Pending) -> PendingOutcome {
    let rec = &t.rec.pending;
    let block = rec.block.load(Ordering::Relaxed);
    let dest = rec.dest.load(Ordering::Relaxed);
    let desc = rec.desc.load(Ordering::Relaxed);
    match p.kind {
        PendingKind::Alloc => {
            if block == 0 || !allocated(t, huge, block) {
                return PendingOutcome::NotTaken;
            }
            if let Some(w) = t.mem.word_at(dest) {
                // Release: the block's contents (none yet) and our metadata precede the word.
                w.store(block, Ordering::Release);
            }
            PendingOutcome::Stored
        }
        PendingKind::Free => {
            if let Some(w) = t.mem.word_at(dest) {
                let _ = w.compare_exchange(block, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
            // Free it only if it is still the allocation the record names (a finished free may
            // have let the block be reallocated since).
            let freed = match huge.filter(|h| h.view.span.contains(block as usize)) {
                Some(h) => {
                    h.view
                        .find(block)
                        .is_some_and(|b| b.offset == block && p.names(b.generation) && b.state == Some(HugeState::Live))
                        && h.free(None, block).is_ok()
                }
                None => in_slab_data(t, block).is_some_and(|ptr| {
                    t.locate(ptr).is_ok_and(|at| p.names(u64::from(at.desc.head.generation.load(Ordering::Relaxed))))
                        && t.free(ptr).is_ok()
                }),
            };
            if freed {
                PendingOutcome::Freed
            } else {
                PendingOutcome::AlreadyFreed
            }
        }
        PendingKind::HugePlace => {
            let Some(h) = huge else { return PendingOutcome::NotTaken };
            if desc == 0 || !slab_allocated(t, desc) {
                return PendingOutcome::NotTaken;
            }
            match h.list().into_iter().find(|b| b.desc == desc) {
                Some(b) => h.discard(desc, &crate::backing::HugeName::of_block(&b)),
                None => {
                    // `slab_allocated` above checked that `desc` is in slab data.
                    if let Some(ptr) = in_slab_data(t, desc) {
                        let _ = t.free(ptr);
                    }
                }
            }
            PendingOutcome::Undone
        }
        PendingKind::HugeFree => {
            let Some(h) = huge else { return PendingOutcome::AlreadyFreed };
            // The free is finished, then the release that follows a free by a thread that is
            // not the block's owner (or the owner's own, which the release leaves Released for
            // the next holder): from Live, from Freed, or from the middle (Releasing).
            match h.view.read(desc).filter(|b| b.offset == block && p.names(b.generation)) {
                Some(b) if b.state == Some(HugeState::Live) && mark_freed(h.view, &b) => {
                    let _ = release(t.mem, h.view, &b);
                    PendingOutcome::Finished
                }
                Some(b) if b.state == Some(HugeState::Freed) => {
                    let _ = release(t.mem, h.view, &b);
                    PendingOutcome::AlreadyFreed
                }
                Some(b) if b.state == Some(HugeState::Releasing) => {
                    let _ = finish_release(t.mem, h.view, &b);
                    PendingOutcome::AlreadyFreed
                }
                _ => PendingOutcome::AlreadyFreed,
            }
        }
        PendingKind::HugeReclaim => {
            let Some(h) = huge else { return PendingOutcome::Finished };
            if slab_allocated(t, desc) {
                if let Some(b) = h.view.read(desc).filter(|b| b.offset == block && p.names(b.generation)) {
                    h.discard(desc, &crate::backing::HugeName::of_block(&b));
                }
            }
            h.end_epoch();
            PendingOutcome::Finished
        }
    }
}
