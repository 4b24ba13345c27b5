//! Huge allocation, free and reclaim for one thread slot (docs/design.md §7.2).
//!
//! - **Allocate**: round up to pages; first fit in the slot's free ranges, claiming a run of
//!   free huge slots (one CAS each) when none fits; fill a descriptor (a small-heap block) and
//!   link it at the head of the slot's list; publish a hazard; create the backing object and
//!   map it.
//! - **Free** (any thread of any process): find the owner through the claim array and the
//!   descriptor on its list; unmap the range in this process (`PROT_NONE`, never a hole);
//!   retract this process's hazards; CAS the status Live → Freed.
//! - **Reclaim** (the owner, at its next huge operation or detach; or whoever sweeps an unheld
//!   slot): a Freed descriptor that no hazard names loses its backing object, its descriptor and
//!   its range; huge slots left wholly free are unclaimed.
//! - **Stale mappings**: each huge operation first drops this process's mappings of blocks that
//!   are no longer live, so other processes' frees become reclaimable; each stale entry is
//!   claimed by one thread, which unmaps before it retracts (docs/design.md §7.4).

use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use crate::backing::HugeName;
use crate::class::Bracket;
use crate::crash::crash_point;
use crate::error::{AllocError, FreeError};
use crate::huge::space::FreeRanges;
use crate::huge::view::HugeView;
use crate::layout::{HUGE_SLOT, HUGE_SLOT_SHIFT};
use crate::mem::HeapMem;
use crate::persist::huge::{HugeBlock, HugeState};
use crate::persist::record::HugeRecord;
use crate::persist::redo::{Pending, PendingKind};
use crate::protocol::{hazard, lease};
use crate::slab::ops::SlabThread;
use crate::sync::{fence, Ordering};
use crate::word::{HazardKey, Holder};

/// Small class of a descriptor block: 64 bytes (classes are multiples of 8).
const DESCRIPTOR_CLASS: u32 = 64 / 8;
/// Bits of a generation that hold the slot index (thread slots < 4096).
const GENERATION_SLOT_BITS: u32 = 12;

/// One thread slot's huge operations.
pub(crate) struct HugeThread<'a> {
    /// The slot's slab view (its descriptors are small blocks of this slot).
    pub t: &'a SlabThread<'a>,
    /// The heap's huge view in this process.
    pub view: &'a HugeView,
}

impl HugeThread<'_> {
    fn mem(&self) -> &HeapMem {
        self.t.mem
    }

    fn rec(&self) -> &HugeRecord {
        &self.t.rec.huge
    }

    fn me(&self) -> u64 {
        u64::from(self.t.slot) + 1
    }

    fn slot_start(&self, i: usize) -> u64 {
        (self.view.span.offset + (i << HUGE_SLOT_SHIFT)) as u64
    }

    /// The slot's descriptors, newest first. Owner-side: nobody else edits the list, so no
    /// epoch is needed.
    pub(crate) fn list(&self) -> Vec<HugeBlock> {
        self.view.chain(self.rec().head.load(Ordering::Acquire), &|_| true).map_while(Result::ok).collect()
    }

    /// Rebuilds the slot's free ranges: its claimed huge slots minus every range a descriptor
    /// on its list still covers, live or freed (a freed range is reusable only once reclaimed,
    /// which checks the hazards).
    pub(crate) fn rebuild(&self) -> FreeRanges {
        // A holder that died inside an unlink left the epoch odd, which makes every reader
        // retry until it gives up; the list itself is consistent (the unlink is one store).
        if self.rec().epoch.load(Ordering::Relaxed) % 2 == 1 {
            self.end_epoch();
        }
        let mut space = FreeRanges::default();
        for i in 0..self.view.slot_count() {
            if self.view.claim(i).is_some_and(|c| c.load(Ordering::Acquire) == self.me()) {
                space.insert(self.slot_start(i), HUGE_SLOT as u64);
            }
        }
        for b in self.list() {
            space.remove(b.offset, b.size);
        }
        space
    }

    /// Allocates `size` bytes aligned to `align` (a power of two up to one huge slot). With a
    /// `dest` (the heap offset of the caller's word, 0 = none) the allocation ends with the
    /// slot's pending record naming the block for that word, which the caller then stores and
    /// settles (a detectable allocation).
    pub(crate) fn alloc(
        &self,
        space: &mut FreeRanges,
        size: usize,
        align: usize,
        dest: u64,
    ) -> Result<NonNull<u8>, AllocError> {
        if !self.view.in_own_process() {
            return Err(AllocError::ForeignProcess);
        }
        let page = self.view.page as u64;
        let len = (size as u64).checked_next_multiple_of(page).ok_or(AllocError::Overflow)?;
        if align > HUGE_SLOT {
            return Err(AllocError::AlignmentTooLarge { align, max: HUGE_SLOT });
        }
        let align = (align as u64).max(page);
        self.maintain(space);
        let at = match space.take(len, align) {
            Some(at) => at,
            None => {
                self.claim(space, len)?;
                space.take(len, align).ok_or(AllocError::HugeExhausted)?
            }
        };
        self.place(at, len, dest).inspect_err(|_| {
            space.insert(at, len);
            self.release_empty_claims(space);
        })
    }

    /// Claims a run of free huge slots big enough for `len` bytes, one CAS per slot; a run
    /// that loses a race is given back and the search goes on past it.
    fn claim(&self, space: &mut FreeRanges, len: u64) -> Result<(), AllocError> {
        let n = len.div_ceil(HUGE_SLOT as u64) as usize;
        let slots = self.view.slot_count();
        let free = |j: usize| self.view.claim(j).is_some_and(|c| c.load(Ordering::Relaxed) == 0);
        let mut i = 0;
        while i + n <= slots {
            if let Some(busy) = (i..i + n).rev().find(|&j| !free(j)) {
                i = busy + 1;
                continue;
            }
            let won = (i..i + n)
                .take_while(|&j| {
                    self.view.claim(j).is_some_and(|c| {
                        // AcqRel: the claim orders after the previous owner's release of the
                        // slot (and its unmapping), and before our use of the range.
                        c.compare_exchange(0, self.me(), Ordering::AcqRel, Ordering::Relaxed).is_ok()
                    })
                })
                .count();
            if won == n {
                space.insert(self.slot_start(i), (n * HUGE_SLOT) as u64);
                return Ok(());
            }
            for j in i..i + won {
                if let Some(c) = self.view.claim(j) {
                    c.store(0, Ordering::Release);
                }
            }
            i += won + 1;
        }
        Err(AllocError::HugeExhausted)
    }

    /// Gives back the claim of every huge slot the free ranges cover wholly.
    pub(crate) fn release_empty_claims(&self, space: &mut FreeRanges) {
        for i in 0..self.view.slot_count() {
            let start = self.slot_start(i);
            let Some(c) = self.view.claim(i) else { continue };
            if c.load(Ordering::Relaxed) == self.me() && space.covers(start, HUGE_SLOT as u64) {
                space.remove(start, HUGE_SLOT as u64);
                // Release: our last use of the range happens before the next claimer's.
                c.store(0, Ordering::Release);
            }
        }
    }

    /// Fills and links a descriptor for `[at, at + len)`, then creates and maps the block.
    /// Announced as [`PendingKind::HugePlace`] from before the descriptor block is taken, so
    /// that recovery can undo every step.
    fn place(&self, at: u64, len: u64, dest: u64) -> Result<NonNull<u8>, AllocError> {
        let view = self.view;
        let announce = |off: usize| {
            self.t.announce(Pending::new(PendingKind::HugePlace, 0), at, dest, (off - view.base) as u64);
            crash_point!(HugeAnnounced);
        };
        let block = self
            .t
            .alloc_with(Bracket::Small, DESCRIPTOR_CLASS, |off| announce(off + view.base))
            .inspect_err(|_| self.t.settle())?;
        let desc = (block.as_ptr() as usize - view.base) as u64;
        let Some(d) = view.descriptor(desc) else {
            let _ = self.t.free(block.as_ptr());
            self.t.settle();
            return Err(AllocError::Corrupt("descriptor block outside the small heap"));
        };
        let rec = self.rec();
        let n = rec.allocations.load(Ordering::Relaxed);
        rec.allocations.store(n + 1, Ordering::Relaxed);
        let generation = (n << GENERATION_SLOT_BITS) | u64::from(self.t.slot);
        d.offset.store(at, Ordering::Relaxed);
        d.size.store(len, Ordering::Relaxed);
        d.status.store(HugeState::Live.word(generation), Ordering::Relaxed);
        d.next.store(rec.head.load(Ordering::Relaxed), Ordering::Relaxed);
        // Release: the descriptor's fields are visible to whoever reads the new head.
        rec.head.store(desc, Ordering::Release);
        crash_point!(HugeLinked);
        let key = HazardKey::new(at, generation);
        let name = HugeName::new(at, generation);
        let entry = view.publish(key, len / view.page as u64).map_err(|_| AllocError::HazardsExhausted);
        let mapped = entry.and_then(|entry| {
            let commit = self.mem().header.config().commit_on_grow;
            let fd = self.mem().backing().huge_create(&name, len as usize, commit).map_err(AllocError::Backing)?;
            match fd {
                Some(fd) => view.map_fd(at, len as usize, fd.as_raw_fd()),
                None => view.map_private(at, len as usize),
            }
            .map_err(AllocError::Backing)?;
            if commit {
                // The memory is reserved already; entering it in the page tables with one
                // call spares the allocating process a fault per page.
                let _ = view.populate(at, len as usize);
            }
            Ok(entry)
        });
        match mapped {
            Ok(entry) => {
                view.confirm(entry);
                crash_point!(HugeBacked);
                if dest != 0 {
                    // The block is whole: from here recovery hands it to `dest` instead of
                    // undoing it.
                    self.t.announce(Pending::new(PendingKind::Alloc, 0), at, dest, desc);
                } else {
                    self.t.settle();
                }
                Ok(self.mem().block(at as usize))
            }
            Err(e) => {
                let _ = view.unmap(at, len as usize);
                if let Ok(entry) = entry {
                    view.retract_entry(entry);
                }
                self.discard(desc, &name);
                self.t.settle();
                Err(e)
            }
        }
    }

    /// Removes a block's backing object, then takes its descriptor `desc` off the slot's list
    /// (if linked) and frees it, all inside an odd epoch: readers walking the list meanwhile
    /// retry rather than trust a walk through a block being freed. The object goes first: once
    /// it is gone, nobody can map the block again. Idempotent, for recovery: a missing object,
    /// an unlinked or already freed descriptor are skipped.
    pub(crate) fn discard(&self, desc: u64, name: &HugeName) {
        let _ = self.mem().backing().huge_remove(name);
        crash_point!(HugeObjectRemoved);
        let rec = self.rec();
        let e = rec.epoch.load(Ordering::Relaxed) | 1;
        rec.epoch.store(e, Ordering::Relaxed);
        // Release: readers that see the even successor also see it was odd first.
        fence(Ordering::Release);
        let next = self.view.read(desc).map_or(0, |b| b.next);
        if rec.head.load(Ordering::Relaxed) == desc {
            rec.head.store(next, Ordering::Release);
        } else if let Some(prev) = self.list().iter().find(|b| b.next == desc) {
            if let Some(d) = self.view.descriptor(prev.desc) {
                d.next.store(next, Ordering::Release);
            }
        }
        crash_point!(HugeUnlinked);
        let _ = self.t.free(self.mem().block(desc as usize).as_ptr());
        self.end_epoch();
    }

    /// Ends an odd epoch (a no-op on an even one).
    pub(crate) fn end_epoch(&self) {
        let rec = self.rec();
        let e = rec.epoch.load(Ordering::Relaxed);
        // Release: the unlink and the block's free happen before a reader's matching re-read.
        rec.epoch.store((e | 1) + 1, Ordering::Release);
    }

    /// Frees the huge block at heap offset `off`. The owner (a thread of the slot that
    /// allocated it) then reclaims what it can at once.
    ///
    /// A second free is [`FreeError::DoubleFree`] while the block's descriptor says Freed, and
    /// after its owner reclaimed it when the first free was made through this heap instance
    /// (one of its last [`crate::mem::RECENT_HUGE_FREES`] huge frees); otherwise nothing
    /// records the block any more and it is [`FreeError::NotAllocated`].
    pub(crate) fn free(&self, space: Option<&mut FreeRanges>, off: u64) -> Result<(), FreeError> {
        let view = self.view;
        if !view.in_own_process() {
            return Err(FreeError::ForeignProcess);
        }
        // No descriptor covers `off`: the block was never allocated, or it was freed and its
        // owner has reclaimed it already (at once, when the owner freed it). The second is
        // known when this process made the first free.
        let missing = || {
            if self.mem().huge_freed_recently(off) {
                FreeError::DoubleFree
            } else {
                FreeError::NotAllocated
            }
        };
        let owner = view.owner_of(off).ok_or_else(missing)?;
        let b = view.find_in(owner, off).ok_or_else(missing)?;
        if b.offset != off {
            return Err(FreeError::InteriorPointer);
        }
        // Freed but not reclaimed yet: the descriptor itself says so.
        if b.state != Some(HugeState::Live) {
            return Err(FreeError::DoubleFree);
        }
        self.t.announce(Pending::new(PendingKind::HugeFree, b.generation), b.offset, 0, b.desc);
        crash_point!(HugeFreeAnnounced);
        // Rule 2: unmap, then retract; the block stays Live until both are done, so no
        // reclaimer can act on it in between.
        let _ = view.unmap(b.offset, b.size as usize);
        view.retract(HazardKey::new(b.offset, b.generation));
        let freed = mark_freed(view, &b);
        crash_point!(HugeFreeMarked);
        self.t.settle();
        if !freed {
            return Err(FreeError::DoubleFree);
        }
        self.mem().note_huge_freed(off);
        if let Some(space) = space.filter(|_| owner == self.t.slot) {
            self.maintain(space);
        }
        Ok(())
    }

    /// The usable size of the live huge block at `off`.
    pub(crate) fn usable_size(&self, off: u64) -> Result<usize, FreeError> {
        let b = self.view.find(off).ok_or(FreeError::NotAllocated)?;
        if b.offset != off {
            return Err(FreeError::InteriorPointer);
        }
        if b.state != Some(HugeState::Live) {
            return Err(FreeError::NotAllocated);
        }
        Ok(b.size as usize)
    }

    /// Drops this process's stale mappings, reclaims what is reclaimable and unclaims empty
    /// huge slots.
    pub(crate) fn maintain(&self, space: &mut FreeRanges) {
        drop_stale_mappings(self.view);
        for b in self.list() {
            if matches!(b.state, Some(HugeState::Freed | HugeState::Reclaiming)) && self.try_reclaim(&b) {
                self.reclaim_one(&b, space);
            }
        }
        self.release_empty_claims(space);
    }

    /// Rule 3: whether the freed block `b` may be reclaimed now. A block left Reclaiming by a
    /// holder of this slot that died mid-check counts as Freed.
    fn try_reclaim(&self, b: &HugeBlock) -> bool {
        let Some(d) = self.view.descriptor(b.desc) else { return false };
        let freed = HugeState::Freed.word(b.generation);
        let reclaiming = HugeState::Reclaiming.word(b.generation);
        if b.state == Some(HugeState::Reclaiming) {
            d.status.store(freed, Ordering::Relaxed);
        }
        if !hazard::begin_reclaim(&d.status, freed, reclaiming) {
            return false;
        }
        if hazard_anywhere(self.mem(), self.view, HazardKey::new(b.offset, b.generation)) {
            d.status.store(freed, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Reclaims a Freed, hazard-free block: its backing object, its descriptor, its range.
    fn reclaim_one(&self, b: &HugeBlock, space: &mut FreeRanges) {
        self.t.announce(Pending::new(PendingKind::HugeReclaim, b.generation), b.offset, 0, b.desc);
        crash_point!(HugeReclaimAnnounced);
        self.discard(b.desc, &HugeName::new(b.offset, b.generation));
        self.t.settle();
        space.insert(b.offset, b.size);
    }
}

/// The Live → Freed CAS of block `b`'s allocation (its generation is in the status word, so a
/// reused descriptor is never freed by mistake); false if it was not that live allocation.
pub(crate) fn mark_freed(view: &HugeView, b: &HugeBlock) -> bool {
    view.descriptor(b.desc).is_some_and(|d| {
        let (live, freed) = (HugeState::Live.word(b.generation), HugeState::Freed.word(b.generation));
        // Release: this process's unmapping happens before the owner's reclaim.
        d.status.compare_exchange(live, freed, Ordering::Release, Ordering::Relaxed).is_ok()
    })
}

/// Drops this process's mappings (and hazards) of huge blocks that are no longer live, so
/// their owners can reclaim them ([`HugeView::drop_stale`]).
pub(crate) fn drop_stale_mappings(view: &HugeView) {
    view.drop_stale();
}

/// Whether any live process holds a hazard on `key` (after [`hazard::begin_reclaim`]). Sets
/// read as unleased are skipped: a publisher leases its set before its fence (see
/// [`crate::protocol::hazard`]). Sets of dead holders are cleared and given back on the way; a
/// holder on another host counts as alive until that host is declared dead (docs/design.md §8.6).
fn hazard_anywhere(mem: &HeapMem, view: &HugeView, key: HazardKey) -> bool {
    let word = key.pack();
    for s in 0..view.sets() {
        let held = view.lease(s).load(Ordering::Acquire);
        let Some(h) = Holder::unpack(held) else { continue };
        if !hazard::contains(view.set(s), word) {
            continue;
        }
        if mem.holder_alive(h) {
            return true;
        }
        view.give_back_set(s, held);
    }
    false
}

/// Reclaims the freed huge blocks of thread slots nobody holds (their last holder detached
/// before some other process freed or stopped mapping them), leasing each such slot for the
/// moment it takes. Called when a heap closes, after the process gave up its own hazards.
pub(crate) fn sweep_unheld(mem: &HeapMem, view: &HugeView) {
    for slot in mem.used_slots().collect::<Vec<_>>() {
        let rec = mem.record(slot);
        let l = &mem.lease(slot).holder;
        if rec.huge.head.load(Ordering::Acquire) == 0 || l.load(Ordering::Relaxed) != 0 {
            continue;
        }
        if !lease::try_claim(l, view.holder) {
            continue;
        }
        let t = SlabThread::new(mem, slot);
        let h = HugeThread { t: &t, view };
        let mut space = h.rebuild();
        h.maintain(&mut space);
        lease::release(l, view.holder);
    }
}
