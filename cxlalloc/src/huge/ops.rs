//! Huge allocation, free and reclaim for one thread slot (docs/design.md §7.2).
//!
//! - **Allocate**: round up to pages; first fit in the slot's free ranges, claiming a run of
//!   free huge slots (one CAS each) when none fits; fill a descriptor (a small-heap block) and
//!   link it at the head of the slot's list; publish a hazard; create the backing object and
//!   map it.
//! - **Free** (any thread of any process): find the owner through the claim array and the
//!   descriptor on its list; unmap the range in this process (`PROT_NONE`, never a hole);
//!   retract this process's hazards; CAS the status Live → Freed. The owner then reclaims it at
//!   once; any other thread releases it: if no hazard names it, it removes the backing object
//!   itself (Released), so the memory comes back without waiting for the owner.
//! - **Reclaim** (the owner, at its next huge operation or detach; or whoever sweeps an unheld
//!   slot): a Freed descriptor that no hazard names keeps its object in the slot's cache
//!   (Cached, while the cache has room and the system memory), or loses its backing object,
//!   its descriptor and its range; a Released one loses its descriptor and its range; huge
//!   slots left wholly free are unclaimed.
//! - **Reuse**: an allocation that a cached block fits takes it: a new generation in the same
//!   descriptor, the same object mapped again at the same offset — no new object, no
//!   `fallocate`, no zeroed pages (docs/design.md §7.6).
//! - **Stale mappings**: each huge operation first drops this process's mappings of blocks that
//!   are no longer live, so other processes' frees become reclaimable; each stale entry is
//!   claimed by one thread, which unmaps before it retracts (docs/design.md §7.4).

use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use nix::errno::Errno;

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
/// A transparent huge page (x86-64 and the usual arm64 granule): the boundary on which blocks
/// at least this large are placed.
const HUGE_PAGE: u64 = 2 << 20;
/// Bits of a generation that hold the slot index (thread slots < 4096).
const GENERATION_SLOT_BITS: u32 = 12;

/// Where a huge allocation's memory came from ([`HugeThread::alloc_block`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A new backing object (or, in an anonymous heap, a new private mapping): every byte reads
    /// as zero, for the kernel zeroes the pages it gives (`Backing::huge_create`'s contract).
    New,
    /// A cached object used again: its bytes are what its last user left.
    Reused,
}

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
        let mut space = FreeRanges::new(self.mem().header.huge_cache_bytes);
        for i in 0..self.view.slot_count() {
            if self.view.claim(i).is_some_and(|c| c.load(Ordering::Acquire) == self.me()) {
                space.insert(self.slot_start(i), HUGE_SLOT as u64);
            }
        }
        for b in self.list() {
            space.remove(b.offset, b.size);
            if b.state == Some(HugeState::Cached) {
                space.cache_push(b);
            }
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
        self.alloc_block(space, size, align, dest).map(|(p, _)| p)
    }

    /// [`HugeThread::alloc`], saying also where the block's memory came from: a new object
    /// reads as zeroes (the kernel gave its pages), a reused one holds its last bytes. So
    /// `alloc_zeroed` writes zeroes only into reused blocks (docs/design.md §7.6), instead of
    /// touching, and so entering, every page of a new one.
    pub(crate) fn alloc_block(
        &self,
        space: &mut FreeRanges,
        size: usize,
        align: usize,
        dest: u64,
    ) -> Result<(NonNull<u8>, Origin), AllocError> {
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
        if let Some(c) = space.take_cached(len, align) {
            return self.reuse(space, c, dest).map(|p| (p, Origin::Reused));
        }
        // A block of a huge page or more starts on a huge page boundary, so that its object's
        // pages can be transparent huge pages (the kernel maps one only where the file offset
        // and the address agree modulo 2 MiB, docs/design.md §7.6). Address space only: the
        // gap left before it holds no memory.
        let place_align = if len >= HUGE_PAGE { align.max(HUGE_PAGE) } else { align };
        let at = match space.take(len, place_align) {
            Some(at) => at,
            None => {
                self.claim(space, len)?;
                space.take(len, place_align).ok_or(AllocError::HugeExhausted)?
            }
        };
        // Read before the mapping is made: an unmap after it shows as a larger count.
        let unmaps = self.view.unmap_count();
        let placed = match self.place(at, len, dest) {
            // Out of memory for a new object while the cache holds some: give them back, and
            // try once more.
            Err(AllocError::Backing(Errno::ENOSPC | Errno::ENOMEM)) if space.cached_bytes() > 0 => {
                self.trim_cache(space, 0);
                self.place(at, len, dest)
            }
            other => other,
        };
        placed
            .map(|(p, generation)| {
                space.note_mapped(at, generation, unmaps);
                (p, Origin::New)
            })
            .inspect_err(|_| {
                space.insert(at, len);
                self.release_empty_claims(space);
            })
    }

    /// Allocates the cached block `c` again: a new generation in its descriptor (still on the
    /// list: no unlink), a hazard, and the same object mapped at the same offset. Announced as
    /// [`PendingKind::HugePlace`] on the descriptor, so that recovery discards the block (object
    /// and all) if the allocation does not finish.
    fn reuse(&self, space: &mut FreeRanges, c: HugeBlock, dest: u64) -> Result<NonNull<u8>, AllocError> {
        let view = self.view;
        let Some(d) = view.descriptor(c.desc) else {
            return Err(AllocError::Corrupt("cached huge descriptor outside the small heap"));
        };
        self.t.announce(Pending::new(PendingKind::HugePlace, 0), c.offset, dest, c.desc);
        crash_point!(HugeReuseAnnounced);
        let generation = self.next_generation();
        // Release: pairs with the Acquire of `read`; the offset, size and object it names were
        // written before the descriptor was first linked and have not changed.
        d.status.store(HugeState::Live.word(generation), Ordering::Release);
        crash_point!(HugeReused);
        let key = HazardKey::new(c.offset, generation);
        let entry = view.publish(key, c.size / view.page as u64, &|_| true).map_err(|_| AllocError::HazardsExhausted);
        // This process's mapping of the range is the same object still (kept since this thread
        // freed it or dropped its stale mapping, §7.6), or `PROT_NONE` (a thread of another
        // slot dropped it meanwhile): never another object, for a range is unmapped here
        // before it leaves the cache or becomes free. Only the second needs a mapping call,
        // and then one `MADV_POPULATE_WRITE` enters the object's pages, which are all still
        // there, instead of a fault per page (docs/design.md §7.6). Which of the two is known
        // without asking the kernel when this thread mapped the block at its last allocation
        // and no thread of the process has unmapped a huge range since: every unmap goes
        // through `HugeView::unmap`, which counts it, and other processes cannot touch our
        // mappings. The count is read before the check, so an unmap after it is seen next time.
        let unmaps = view.unmap_count();
        let kept = space.kept_mapping(&c, unmaps);
        let mapped = entry.and_then(|entry| {
            if !kept && !view.maps_object(c.offset) {
                view.map_named(c.offset, c.size as usize, c.object).map_err(AllocError::Backing)?;
                let _ = view.populate(c.offset, c.size as usize);
            }
            Ok(entry)
        });
        match mapped {
            Ok(entry) => {
                view.confirm(entry);
                crash_point!(HugeBacked);
                space.note_mapped(c.offset, generation, unmaps);
                if dest != 0 {
                    self.t.announce(Pending::new(PendingKind::Alloc, 0), c.offset, dest, c.desc);
                } else {
                    self.t.settle();
                }
                Ok(self.mem().block(c.offset as usize))
            }
            Err(e) => {
                let _ = view.unmap(c.offset, c.size as usize);
                if let Ok(entry) = entry {
                    view.retract_entry(entry);
                }
                self.discard(c.desc, &HugeName::of_block(&c));
                self.t.settle();
                space.insert(c.offset, c.size);
                Err(e)
            }
        }
    }

    /// The generation of the slot's next allocation (unique over the heap's life: a counter of
    /// the slot's allocations and the slot's index).
    fn next_generation(&self) -> u64 {
        let rec = self.rec();
        let n = rec.allocations.load(Ordering::Relaxed);
        rec.allocations.store(n + 1, Ordering::Relaxed);
        (n << GENERATION_SLOT_BITS) | u64::from(self.t.slot)
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
        // The claim array is one word per GiB of huge span (1024 by default): reading it at
        // every reclaim was 1.5 µs of a 40 µs 16 MiB threadtest round. A huge slot of ours can
        // turn wholly free only when a range comes back to `space` (docs/design.md §7.6).
        if !space.take_grown() {
            return;
        }
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
    /// that recovery can undo every step. Returns the block and its allocation's generation.
    fn place(&self, at: u64, len: u64, dest: u64) -> Result<(NonNull<u8>, u64), AllocError> {
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
        let generation = self.next_generation();
        d.offset.store(at, Ordering::Relaxed);
        d.size.store(len, Ordering::Relaxed);
        d.object.store(generation, Ordering::Relaxed);
        d.status.store(HugeState::Live.word(generation), Ordering::Relaxed);
        d.next.store(rec.head.load(Ordering::Relaxed), Ordering::Relaxed);
        // Release: the descriptor's fields are visible to whoever reads the new head.
        rec.head.store(desc, Ordering::Release);
        crash_point!(HugeLinked);
        let key = HazardKey::new(at, generation);
        let name = HugeName::new(at, generation);
        let entry = view.publish(key, len / view.page as u64, &|_| true).map_err(|_| AllocError::HazardsExhausted);
        let mapped = entry.and_then(|entry| {
            let commit = self.mem().header.config().commit_on_grow;
            // A named object is reserved by populating it through its advised mapping, not by
            // `fallocate` at creation: a tmpfs mounted `huge=advise` gives huge pages only to
            // faults in a mapping advised `MADV_HUGEPAGE`, never to `fallocate` (no mapping),
            // so reserving first would fill the object with small pages for good (0.5 ms
            // against 7.5 for a new 16 MiB object there, docs/design.md §7.6). A populate that
            // succeeded allocated every page; one that failed (a full tmpfs says EFAULT, a
            // kernel before 5.14 EINVAL) is followed by the `fallocate`, which reserves the
            // pages or fails with ENOSPC before the block is handed out.
            let late = commit && view.named_objects();
            let fd =
                self.mem().backing().huge_create(&name, len as usize, commit && !late).map_err(AllocError::Backing)?;
            match &fd {
                Some(fd) => view.map_fd(at, len as usize, fd.as_raw_fd()),
                None => view.map_private(at, len as usize),
            }
            .map_err(AllocError::Backing)?;
            // Entering the pages in the page tables with one call spares the allocating
            // process a fault per page.
            let populated = commit && view.populate(at, len as usize).is_ok();
            if let Some(fd) = fd.filter(|_| late && !populated) {
                nix::fcntl::fallocate(&fd, nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, len as libc::off_t)
                    .map_err(AllocError::Backing)?;
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
                Ok((self.mem().block(at as usize), generation))
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
        // reclaimer can act on it in between. The one exception: the owner thread keeps its
        // process's mapping of a block whose object it may cache, and unmaps it only when the
        // range goes back to its free space ([`HugeThread::take_back`]); until then the range
        // can only show this very object again (docs/design.md §7.6).
        let owns = space.is_some() && owner == self.t.slot;
        // A thread beside the owner (another slot held by this process) leaves this process's
        // mapping and the hazard entries that cover it: the owner's next huge operation drops
        // them without unmapping ([`drop_stale_mappings`] keeps the mappings of its own blocks)
        // and reclaims the block into its cache, so that it reuses the object and its mapped
        // pages — no new object, no `fallocate`, no zeroing, no fault (docs/design.md §7.6).
        // The entries keep the block from being reclaimed or released until then, also by a
        // second heap instance of this process, whose mappings are its own.
        let beside = !owns && view.named_objects() && view.holder != 0 && {
            // Relaxed: a policy read; the entries, not the lease, protect the mapping.
            self.mem().lease(owner).holder.load(Ordering::Relaxed) == view.holder
        };
        let keeps_mapping = beside || (owns && view.named_objects());
        if !keeps_mapping {
            let _ = view.unmap(b.offset, b.size as usize);
        }
        if !beside {
            view.retract(HazardKey::new(b.offset, b.generation));
        }
        let freed = mark_freed(view, &b);
        crash_point!(HugeFreeMarked);
        if !freed {
            self.t.settle();
            return Err(FreeError::DoubleFree);
        }
        self.mem().note_huge_freed(off);
        match space.filter(|_| owner == self.t.slot) {
            Some(space) => {
                self.t.settle();
                self.maintain(space);
            }
            None => {
                // Another slot's block: give its memory back now if nobody maps it, rather
                // than when its owner next does huge work (docs/design.md §7.6). Still under
                // the HugeFree record, which recovery finishes from wherever this stops. Not
                // beside the owner: our own entries protect it, for the owner to reuse.
                if !beside {
                    let _ = release(self.mem(), view, &b);
                }
                self.t.settle();
            }
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
        // The mappings of our own blocks stay: we reclaim them next, into the cache (the range
        // can show nothing but that object until `take_back` unmaps it) or not.
        let dropped = drop_stale_mappings(self.mem(), self.view, Some(self.t.slot));
        if !dropped.is_empty() {
            release_dropped(self.t, self.view, &dropped);
        }
        self.reclaim_freed(space);
    }

    /// `maintain`'s second half: trims the cache under memory pressure, reclaims the slot's
    /// freed blocks (also those freed since the first half dropped stale entries: a thread
    /// beside us frees at any time), takes back released ones and unclaims empty huge slots.
    pub(crate) fn reclaim_freed(&self, space: &mut FreeRanges) {
        if space.must_trim(free_memory) {
            self.trim_cache(space, 0);
        }
        for b in self.list() {
            match b.state {
                Some(HugeState::Freed | HugeState::Reclaiming) if self.try_reclaim(&b) => self.reclaim_one(&b, space),
                Some(HugeState::Released) => self.take_back(&b, space),
                // Not reclaimable yet (a hazard elsewhere, or another thread releasing it):
                // the mapping this process may have kept (the owner's free, our drop above)
                // must not outlive our hold of the slot, after which a thread of another
                // process may discard the block and reuse its range. While we hold the slot
                // nobody can, so the unmap cannot hit another block's mapping.
                // Unless an entry of ours still names the block: then no process can reclaim or
                // release it, and our next reclaim (or the drop of that entry) deals with the
                // mapping; unmapping it now would make the reuse map and populate it again.
                Some(HugeState::Freed | HugeState::Reclaiming | HugeState::Releasing)
                    if self.view.named_objects() && !self.view.holds(HazardKey::new(b.offset, b.generation)) =>
                {
                    let _ = self.view.unmap(b.offset, b.size as usize);
                }
                _ => {}
            }
        }
        self.release_empty_claims(space);
    }

    /// Discards cached blocks, oldest first, until at most `keep` bytes stay cached: each
    /// loses its object, its descriptor and its range, as a reclaim (and under the same
    /// pending record).
    pub(crate) fn trim_cache(&self, space: &mut FreeRanges, keep: u64) {
        while space.cached_bytes() > keep {
            let Some(c) = space.pop_cached() else { break };
            self.take_back(&c, space);
        }
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
        let key = HazardKey::new(b.offset, b.generation);
        // This process's own entries on the block (its allocation's, left by a freer beside
        // us, §7.6) go only now, under Reclaiming, and keep their mapping for the cache: no
        // releaser can take the block while it is Reclaiming, so the object cannot be removed
        // between our retract and our scan; and a block freed after this operation's drop of
        // stale entries (`maintain`) is still reclaimed now, not found hazarded by our own
        // entry and unmapped (docs/design.md §7.6).
        if self.view.named_objects() && self.view.holds(key) {
            self.view.drop_stale_into(&|k| k != key, &|_| true, &mut |_| {});
        }
        if hazard_anywhere(self.mem(), self.view, key) {
            d.status.store(freed, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Reclaims a Freed, hazard-free block (status Reclaiming, ours): into the cache while it
    /// has room (and the system memory to spare), the object kept; otherwise its backing
    /// object, its descriptor and its range go.
    fn reclaim_one(&self, b: &HugeBlock, space: &mut FreeRanges) {
        // An anonymous heap's blocks are private memory, gone with their mapping: nothing to keep.
        if self.view.named_objects() && space.admits(b.size, free_memory) {
            if let Some(d) = self.view.descriptor(b.desc) {
                // Release: our hazard scan happens before the reuse by whichever thread of
                // this slot reads the state next. A crash before this store leaves
                // Reclaiming, which the next holder takes for Freed; after, the descriptor is
                // found Cached at rebuild.
                d.status.store(HugeState::Cached.word(b.generation), Ordering::Release);
                crash_point!(HugeCached);
                space.cache_push(HugeBlock { state: Some(HugeState::Cached), ..*b });
                return;
            }
        }
        self.take_back(b, space);
    }

    /// Discards a block of ours that no other process maps any more (Reclaiming, Cached or
    /// Released): this process's mapping (which its freer, this thread, may have kept), its
    /// backing object (if still there), its descriptor, its range.
    fn take_back(&self, b: &HugeBlock, space: &mut FreeRanges) {
        space.forget_mapped(b.offset);
        let _ = self.view.unmap(b.offset, b.size as usize);
        self.t.announce(Pending::new(PendingKind::HugeReclaim, b.generation), b.offset, 0, b.desc);
        crash_point!(HugeReclaimAnnounced);
        self.discard(b.desc, &HugeName::of_block(b));
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

/// Releases the freed block `b` of another slot (rule 3 for a thread that is not its owner):
/// Freed → Releasing with one CAS and a SeqCst fence, the hazard scan, then the backing object
/// removed and the status Released; back to Freed if some process still maps it (the owner, a
/// sweep, or a later release takes it then). Nothing if the owner got to it first. The caller
/// has the slot's pending record name the block ([`PendingKind::HugeFree`]), so that recovery
/// finishes a release cut short ([`finish_release`]).
/// Returns whether it released the object.
pub(crate) fn release(mem: &HeapMem, view: &HugeView, b: &HugeBlock) -> bool {
    let Some(d) = view.descriptor(b.desc) else { return false };
    let (freed, releasing) = (HugeState::Freed.word(b.generation), HugeState::Releasing.word(b.generation));
    if !hazard::begin_reclaim(&d.status, freed, releasing) {
        return false;
    }
    crash_point!(HugeReleasing);
    finish_release(mem, view, b)
}

/// The rest of a release, from Releasing (also recovery's, for a thread that died in the
/// middle): scan, remove the object, Released; or back to Freed. Returns whether it released
/// the object.
pub(crate) fn finish_release(mem: &HeapMem, view: &HugeView, b: &HugeBlock) -> bool {
    let Some(d) = view.descriptor(b.desc) else { return false };
    let releasing = HugeState::Releasing.word(b.generation);
    let next = if hazard_anywhere(mem, view, HazardKey::new(b.offset, b.generation)) {
        HugeState::Freed
    } else {
        let _ = mem.backing().huge_remove(&HugeName::of_block(b));
        crash_point!(HugeObjectReleased);
        HugeState::Released
    };
    // Release: the object's removal happens before the owner's discard of the descriptor;
    // a CAS, not a store, so that a status that is no longer ours is left alone.
    let _ = d.status.compare_exchange(releasing, next.word(b.generation), Ordering::Release, Ordering::Relaxed);
    next == HugeState::Released
}

/// Releases every freed block of the slots other than `t`'s that no process maps any more
/// (their owners hold them but have not done huge work since the last mapping went), each
/// under `t`'s pending record as a free's release is; returns how many objects it removed.
/// [`crate::Heap::sweep_huge`]'s part for held slots.
pub(crate) fn release_freed(t: &SlabThread<'_>, view: &HugeView) -> usize {
    let mut n = 0;
    for slot in t.mem.used_slots().filter(|&s| s != t.slot).collect::<Vec<_>>() {
        if t.mem.record(slot).huge.head.load(Ordering::Acquire) == 0 {
            continue;
        }
        for b in view.snapshot(slot).unwrap_or_default() {
            if b.state != Some(HugeState::Freed) {
                continue;
            }
            t.announce(Pending::new(PendingKind::HugeFree, b.generation), b.offset, 0, b.desc);
            n += usize::from(release(t.mem, view, &b));
            t.settle();
        }
    }
    n
}

/// The system's free memory in bytes (`sysinfo`), `None` if it cannot say. Asked by the
/// cache's [`crate::huge::space::Pressure`], which trims when less than twice the cached bytes
/// are free: cached objects are the first memory the huge heap gives back.
fn free_memory() -> Option<u64> {
    // SAFETY: sysinfo writes only the struct it is given.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a sysinfo struct.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return None;
    }
    Some((info.freeram as u64).saturating_mul(u64::from(info.mem_unit.max(1))))
}

/// Drops this process's mappings (and hazards) of huge blocks that are no longer live, so
/// their owners can reclaim them ([`HugeView::drop_stale_into`]); returns the keys of the blocks it
/// dropped. With `owner`, the calling thread's slot, which reclaims next: the entries of that
/// slot's freed blocks stay for the reclaim, which retracts them under Reclaiming and keeps
/// their ranges mapped, to cache with their pages; the slot's other stale entries are
/// retracted with their ranges left mapped (only that slot's thread may do this: it alone moves
/// its blocks on, and unmaps a range before it leaves the cache or becomes free,
/// docs/design.md §7.6). And the entries
/// of blocks owned by the other slots this process holds stay as they are: those blocks were
/// freed beside their owner (§7.6), whose next huge operation drops the entries and caches the
/// blocks with their mappings; dropping them here would release the objects (the caller is not
/// their owner) and make that owner create new ones (xmalloc with two producers in one
/// process made a third of its objects anew). A pass without `owner` (`drop_stale_huge`, the
/// maintenance thread) drops every stale entry.
pub(crate) fn drop_stale_mappings(mem: &HeapMem, view: &HugeView, owner: Option<u32>) -> Vec<HazardKey> {
    let mut keys = Vec::new();
    let keep = |k: HazardKey| view.named_objects() && owner.is_some() && view.owner_of(k.offset) == owner;
    // The owner's own freed blocks: their entries stay for its reclaim, which retracts them
    // under Reclaiming (`HugeThread::try_reclaim`). Retracted here, a block freed by another
    // process could be released by that freer (its scan finding no hazard) between this drop
    // and the reclaim, and the owner would make a new object.
    let reclaimable = |k: HazardKey| {
        view.find(k.offset).is_some_and(|b| {
            HazardKey::new(b.offset, b.generation) == k
                && matches!(b.state, Some(HugeState::Freed | HugeState::Reclaiming | HugeState::Releasing))
        })
    };
    let leave = |k: HazardKey| {
        owner.is_some()
            && view.named_objects()
            && view.holder != 0
            && view.owner_of(k.offset).is_some_and(|o| {
                if Some(o) == owner {
                    return reclaimable(k);
                }
                // Relaxed: a policy read, as at the free that left the entry (`HugeThread::free`);
                // leaving an entry is always safe.
                mem.lease(o).holder.load(Ordering::Relaxed) == view.holder
            })
    };
    view.drop_stale_into(&leave, &keep, &mut |k| keys.push(k));
    keys
}

pub(crate) fn release_dropped(t: &SlabThread<'_>, view: &HugeView, keys: &[HazardKey]) -> usize {
    let mut n = 0;
    for key in keys {
        if view.owner_of(key.offset) == Some(t.slot) {
            continue; // Ours: our own reclaim takes it (into the cache).
        }
        let Some(b) = view.find(key.offset) else { continue };
        if HazardKey::new(b.offset, b.generation) != *key || b.state != Some(HugeState::Freed) {
            continue;
        }
        t.announce(Pending::new(PendingKind::HugeFree, b.generation), b.offset, 0, b.desc);
        n += usize::from(release(t.mem, view, &b));
        t.settle();
    }
    n
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
        // Nobody holds the slot to reuse its cached objects.
        h.trim_cache(&mut space, 0);
        h.release_empty_claims(&mut space);
        lease::release(l, view.holder);
    }
}
