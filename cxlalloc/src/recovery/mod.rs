//! Crash recovery (docs/design.md §8.3): a live thread adopts the slot of a dead holder and repairs it
//! while every other thread goes on.
//!
//! Order of repair, each step idempotent so that an adopter that dies mid-way leaves a slot the
//! next adopter repairs the same way:
//! 1. the redo word: finish or undo the one slab operation in flight ([`slab`]);
//! 2. the slot's lists, rebuilt from the descriptors it owns; an odd huge epoch is evened;
//! 3. the pending word: the outer operation (huge allocation or free, detectable allocation or
//!    free), resolved against the now consistent slab state ([`pending`]);
//! 4. the dead process's hazard sets are cleared, so its mappings pin nothing.
//!
//! The adopter then holds the slot: it may keep using it, or drop its handle, which returns the
//! slot's empty slabs to the global list, disowns its partly used ones and releases the slot.

pub(crate) mod pending;
pub(crate) mod slab;

use std::time::{Duration, Instant};

use crate::class::Bracket;
use crate::crash::crash_point;
use crate::huge::ops::HugeThread;
use crate::huge::view::HugeView;
use crate::persist::redo::{Pending, Redo};
use crate::slab::ops::SlabThread;
use crate::sync::Ordering;
use crate::word::Holder;

pub use pending::PendingOutcome;
pub use slab::{Rebuilt, Resolution};

/// What adopting a slot repaired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The slot.
    pub slot: u32,
    /// The dead holder whose lease was taken over (`None`: the slot was re-attached idle).
    pub dead_holder: Option<Holder>,
    /// The slab operation that was in flight, and what recovery did with it.
    pub redo: Option<(Redo, Resolution)>,
    /// The outer operation that was in flight, and what recovery did with it.
    pub pending: Option<(Pending, PendingOutcome)>,
    /// The list rebuild's counts.
    pub rebuilt: Rebuilt,
    /// Hazard sets of the dead process cleared.
    pub hazard_sets_cleared: u32,
    /// Wall time of the repair.
    pub duration: Duration,
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slot {}", self.slot)?;
        if let Some(h) = self.dead_holder {
            write!(f, " (dead pid {})", h.pid)?;
        }
        match self.redo {
            Some((r, how)) => write!(f, ": {:?} on slab {} {how:?}", r.op, r.slab)?,
            None => write!(f, ": no slab operation in flight")?,
        }
        if let Some((p, how)) = self.pending {
            write!(f, "; {:?} {how:?}", p.kind)?;
        }
        write!(
            f,
            "; {} slabs owned, {} recounted, {} caches dropped, {} hazard sets cleared; {:?}",
            self.rebuilt.owned,
            self.rebuilt.recounted,
            self.rebuilt.caches_dropped,
            self.hazard_sets_cleared,
            self.duration
        )
    }
}

/// Repairs slot `t` (leased by the caller, its previous holder `dead` gone).
pub(crate) fn recover(t: &SlabThread<'_>, huge: Option<&HugeView>, dead: Option<Holder>) -> RecoveryReport {
    let started = Instant::now();
    // The dead holder may have run on another host: every descriptor recovery reads, and the
    // record, come from memory. Taking the slot over invalidated both (`Site::SlotTaken`,
    // `Site::SlotDescriptors`), and nothing this thread has done since read another host's
    // lines, so recovery reads nothing through a stale copy.
    let redo = Redo::unpack(t.rec.redo.load(Ordering::Acquire)).map(|r| {
        let how = t.resolve(r);
        t.clear_log();
        (r, how)
    });
    crash_point!(RecoveryResolved);
    let mut rebuilt = Rebuilt::default();
    for b in Bracket::ALL {
        t.rebuild_lists(b, &mut rebuilt);
    }
    // Remote frees the dead holder had counted but not yet subtracted (no-HWcc batching).
    t.flush_remote_batch();
    // The rest of a harvest the dead holder had taken (docs/design.md §4.6): its blocks are on
    // no mailbox any more, only in the record.
    t.resume_harvest(true);
    let huge = huge.map(|view| HugeThread { t, view });
    if let Some(h) = &huge {
        h.end_epoch();
    }
    crash_point!(RecoveryRebuilt);
    let pending = Pending::unpack(t.rec.pending.word.load(Ordering::Acquire)).map(|p| {
        let how = pending::resolve(t, huge.as_ref(), p);
        t.settle();
        (p, how)
    });
    let hazard_sets_cleared = match (huge, dead) {
        (Some(h), Some(dead)) => clear_hazards(h.view, dead),
        _ => 0,
    };
    RecoveryReport {
        slot: t.slot,
        dead_holder: dead,
        redo,
        pending,
        rebuilt,
        hazard_sets_cleared,
        duration: started.elapsed(),
    }
}

/// Gives back every hazard set leased by a process of the hosts `hosts`, all declared dead (its
/// entries cleared first): the sets of processes that held no slot when their host went down.
pub(crate) fn clear_host_hazards(view: &HugeView, hosts: &[u16]) -> u32 {
    let mut cleared = 0;
    for s in 0..view.sets() {
        let held = view.lease(s).load(Ordering::Acquire);
        if Holder::unpack(held).is_some_and(|h| hosts.contains(&h.host)) {
            view.give_back_set(s, held);
            cleared += 1;
        }
    }
    cleared
}

/// Gives back every hazard set leased by `dead` (its entries cleared first).
fn clear_hazards(view: &HugeView, dead: Holder) -> u32 {
    let word = dead.pack();
    let mut cleared = 0;
    for s in 0..view.sets() {
        if view.lease(s).load(Ordering::Acquire) == word {
            view.give_back_set(s, word);
            cleared += 1;
        }
    }
    cleared
}
