//! Thread handles: a thread's lease on a slot, under which it allocates and frees.
//!
//! A slot is claimed with one CAS on its lease word (HWcc) and owns a record (SWcc) with the
//! thread's redo record, CAS version and slab lists. Lists survive detach: the next holder of the
//! slot inherits the slabs its predecessor cached.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::class::{class_aligned, class_of, Bracket, LARGE_MAX, SMALL_MAX};
use crate::coherence::Site;
use crate::crash::crash_point;
use crate::error::{AdoptError, AllocError, AttachError, FreeError, HandOverError};
use crate::heap::Heap;
use crate::huge::ops::{HugeThread, Origin};
use crate::huge::space::FreeRanges;
use crate::identity;
use crate::layout::RegionId;
use crate::mem::HeapMem;
use crate::offset::Offset;
use crate::persist::record::ThreadRecord;
use crate::persist::redo::{Pending, PendingKind};
use crate::protocol::{lease, HwWord};
use crate::recovery::{self, RecoveryReport};
use crate::slab::ops::SlabThread;
use crate::sync::{AtomicU64, Ordering};
use crate::word::Holder;

/// A thread's lease on one slot of a heap. Allocation and free go through it. Dropping it
/// returns the thread's empty slabs to the global list, disowns its partly used ones (the last
/// free of their live blocks, by any thread, reclaims them), and releases the slot.
///
/// `Send` but not `Sync`: one thread at a time may use a slot. A handle belongs to the process
/// that attached it: after `fork`, the child must attach its own (using an inherited handle
/// would let two processes write one slot).
pub struct ThreadHandle {
    /// The slab view of this slot, built once at attach so the fast paths find it in place.
    /// Its `'static` references point into the mapping that `heap` keeps alive; they are only
    /// ever lent out for the lifetime of `&self` (see [`ThreadHandle::ops`]).
    ops: SlabThread<'static>,
    heap: Heap,
    holder: u64,
    /// The slot's free huge ranges in this process, rebuilt at the first huge operation.
    huge: RefCell<Option<FreeRanges>>,
    /// What adopting the slot repaired, when this handle adopted it from a dead holder.
    recovered: Option<RecoveryReport>,
    _not_sync: PhantomData<Cell<()>>,
}

impl std::fmt::Debug for ThreadHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadHandle").field("heap", &self.heap.location()).field("slot", &self.ops.slot).finish()
    }
}

/// The largest alignment [`ThreadHandle::alloc_aligned`] serves: one huge slot (1 GiB), the
/// unit the huge heap claims address space in (docs/design.md §7).
pub const MAX_ALIGN: usize = crate::layout::HUGE_SLOT;

/// Why `realloc` failed; the original block is untouched in every case.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum ReallocError {
    /// The old pointer was refused.
    #[error(transparent)]
    Free(#[from] FreeError),
    /// The new block could not be allocated.
    #[error(transparent)]
    Alloc(#[from] AllocError),
}

/// Leases a free slot of `heap` for the calling thread; when every slot is leased, adopts one
/// whose holder died (running its recovery, see [`ThreadHandle::recovery`]).
pub(crate) fn attach(heap: &Heap) -> Result<ThreadHandle, AttachError> {
    let mem = heap.mem();
    served(mem).map_err(AttachError::DeviceUnserved)?;
    let host = mem.register_host().map_err(AttachError::HostsExhausted)?;
    mem.beat();
    let holder = mem.holder_on(host).pack();
    let slots = mem.layout.slots;
    // Lowest free slot first: the slots in use, and so the lease, record and help words every
    // process touches, stay on the fewest pages (each touched HWcc page counts in every
    // process's resident memory).
    for slot in 0..slots {
        let lease = mem.lease(slot);
        let word = mem.hw_process(&lease.holder);
        if lease.holder.load(Ordering::Relaxed) == 0 && lease::try_claim(&word, holder) {
            let h = handle(heap, slot, holder).inspect_err(|_| {
                lease::release(&word, holder);
            })?;
            // The previous holder closed them when it let the slot go (docs/design.md §4.6).
            h.ops().open_mailboxes();
            return Ok(h);
        }
    }
    let dead = dead_slots(heap);
    if mem.recoverable() {
        if let Some((h, _)) = dead.iter().find_map(|&slot| adopt(heap, slot).ok()) {
            return Ok(h);
        }
    }
    Err(AttachError::SlotsExhausted { slots, dead: dead.len() as u32 })
}

/// The handle of `slot`, just leased by `holder`.
fn handle(heap: &Heap, slot: u32, holder: u64) -> Result<ThreadHandle, AttachError> {
    let mem = heap.mem();
    // The record's pages are reserved before first use, so a full device is an error here
    // rather than a SIGBUS on some later allocation.
    let size = std::mem::size_of::<ThreadRecord>();
    mem.commit_region(RegionId::Owned, slot as usize * size, size).map_err(AttachError::OutOfMemory)?;
    mem.lease(slot).tid.store(identity::current_tid(), Ordering::Relaxed);
    // The previous holder may have run on another host: read its record from memory.
    let (record, len) = mem.record_bytes(slot);
    mem.swcc.refresh(Site::SlotTaken, record, len);
    // "owner == me" is read from cached descriptor lines (docs/design.md §9.1): this host may
    // hold copies from before another host held the slot, which name the slot as owner of
    // slabs it has given up since. Every copy goes; the slot's own slabs (Detached ones that
    // its previous holder kept) are read from memory as that holder wrote them back.
    for b in Bracket::ALL {
        mem.refresh_descriptors(b, Site::SlotDescriptors);
    }
    // SAFETY: the HeapMem lives in the Arc that the handle's `heap` field keeps alive for as
    // long as the handle exists, and `ops` lends these references out only for the lifetime of
    // a borrow of the handle.
    let mem: &'static HeapMem = unsafe { &*(mem as *const HeapMem) };
    Ok(ThreadHandle {
        ops: SlabThread::new(mem, slot),
        heap: heap.clone(),
        holder,
        huge: RefCell::new(None),
        recovered: None,
        _not_sync: PhantomData,
    })
}

/// Takes over `slot` from its dead holder and repairs it (docs/design.md §8.3); the handle keeps a
/// copy of the report ([`ThreadHandle::recovery`]).
pub(crate) fn adopt(heap: &Heap, slot: u32) -> Result<(ThreadHandle, RecoveryReport), AdoptError> {
    let mem = heap.mem();
    let slots = mem.layout.slots;
    if slot >= slots {
        return Err(AdoptError::NoSuchSlot { slot, slots });
    }
    if !mem.recoverable() {
        return Err(AdoptError::RecoveryDisabled);
    }
    served(mem).map_err(AdoptError::DeviceUnserved)?;
    let lease = &mem.hw_process(&mem.lease(slot).holder);
    let held = lease.load(Ordering::Acquire);
    let dead = Holder::unpack(held).ok_or(AdoptError::NotHeld(slot))?;
    // Only a holder this process can judge, or one of a host declared dead, is ever adopted
    // (docs/design.md §8.6): a foreign pid names nothing in our /proc.
    if mem.holder_alive(dead) {
        return Err(if mem.hosts().is_local(dead, identity::domain()) {
            AdoptError::HolderAlive { slot, pid: dead.pid }
        } else {
            AdoptError::ForeignHost { slot, pid: dead.pid, host: dead.host }
        });
    }
    let host = mem.register_host().map_err(AdoptError::HostsExhausted)?;
    mem.beat();
    let holder = mem.holder_on(host).pack();
    if !lease::take_over(lease, held, holder) {
        return Err(AdoptError::Raced(slot));
    }
    let mut h = handle(heap, slot, holder).map_err(|e| {
        // Back to the dead holder: the slot stays adoptable rather than stranded on us.
        let _ = lease::take_over(lease, holder, held);
        match e {
            AttachError::OutOfMemory(errno) => AdoptError::OutOfMemory(errno),
            AttachError::SlotsExhausted { .. } => AdoptError::Raced(slot),
            AttachError::DeviceUnserved(w) => AdoptError::DeviceUnserved(w),
            AttachError::HostsExhausted(n) => AdoptError::HostsExhausted(n),
        }
    })?;
    let view = mem.huge().filter(|v| v.in_own_process());
    let report = recovery::recover(&h.ops, view, Some(dead));
    h.ops.open_mailboxes();
    h.recovered = Some(report.clone());
    Ok((h, report))
}

/// No-HWcc model: `Err(window)` when no live mCAS device serves the heap's window (every HWcc
/// CAS would wait for it).
fn served(mem: &HeapMem) -> Result<(), String> {
    mem.mcas().map_or(Ok(()), |hub| hub.served())
}

/// Slots whose holder process is gone (candidates for adoption by recovery): holders of this
/// process's own domain that `/proc` shows dead, and every holder of a host declared dead.
pub(crate) fn dead_slots(heap: &Heap) -> Vec<u32> {
    let mem = heap.mem();
    (0..mem.layout.slots)
        .filter(|&s| Holder::unpack(mem.lease(s).holder.load(Ordering::Acquire)).is_some_and(|h| !mem.holder_alive(h)))
        .collect()
}

impl ThreadHandle {
    /// The slab view, with its references shortened to the borrow of `self`.
    #[inline]
    fn ops(&self) -> &SlabThread<'_> {
        &self.ops
    }

    /// The sizing of the slab holding the slab block at `ptr`, as this thread reads it (from
    /// memory in the reduced models, as a remote free would): `(bracket, slab, generation,
    /// block size)`; `None` outside sized slabs. For the non-coherence simulator's tests.
    #[cfg(feature = "noncoherent-sim")]
    pub(crate) fn sizing_of(&self, ptr: NonNull<u8>) -> Option<(Bracket, u32, u32, u32)> {
        let at = self.ops().locate(ptr.as_ptr()).ok()?;
        Some((at.bracket, at.slab.index(), at.desc.head.generation.load(Ordering::Relaxed), at.size))
    }

    /// The heap this handle allocates from.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// The leased slot's index.
    pub fn slot(&self) -> u32 {
        self.ops.slot
    }

    /// What recovery repaired, if this handle adopted its slot from a dead holder.
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.recovered.as_ref()
    }

    /// Detectable allocation (docs/design.md §8.4): allocates `size` bytes and stores the block's heap
    /// offset into `dest`, an empty (0) word of this heap (in a block, the huge span or a root)
    /// that the application's structure owns. If the process dies at any point, recovery of
    /// this slot either completes the store or leaves the block free: the block is never lost.
    ///
    /// `dest` is checked before it is read or written ([`AllocError::BadDestination`]): it
    /// must be a root, a word of a slab below the heap's length, or a word inside a live huge
    /// block. The block holding it must stay allocated until this returns.
    ///
    /// Until this returns, `dest` belongs to this thread: recovery may write it, so another
    /// thread must not take the offset out of it before then.
    pub fn alloc_into(&self, size: usize, dest: &AtomicU64) -> Result<NonNull<u8>, AllocError> {
        let ops = self.ops();
        let dest_off = self.heap.mem().word_offset(dest).ok_or(AllocError::BadDestination)?;
        if dest.load(Ordering::Acquire) != 0 {
            return Err(AllocError::DestinationInUse);
        }
        let block = match self.class_for(size) {
            Some((b, class)) => {
                ops.announce(Pending::new(PendingKind::Alloc, 0), 0, dest_off, 0);
                ops.alloc_with(b, class, |off| {
                    ops.announce_block(off as u64);
                    crash_point!(AllocAnnounced);
                })
            }
            None if size == 0 => return Err(AllocError::ZeroSize),
            None => self
                .with_huge(|h, space| h.alloc(space, size, 1, dest_off))
                .unwrap_or(Err(AllocError::Unsupported(size))),
        }
        .inspect_err(|_| ops.settle())?;
        crash_point!(AllocTaken);
        // Release: whoever reads the offset from `dest` sees the block's metadata settled.
        dest.store(block.as_ptr() as u64 - self.heap.base_address() as u64, Ordering::Release);
        crash_point!(AllocStored);
        ops.settle();
        Ok(block)
    }

    /// Detectable free (docs/design.md §8.4): clears `dest`, which must hold the heap offset of an
    /// allocated block, then frees the block. If the process dies at any point, recovery of
    /// this slot finishes both. `dest` (checked as for [`ThreadHandle::alloc_into`], else
    /// [`FreeError::ForeignPointer`]) and the block are validated before `dest` is touched: bad
    /// input changes nothing.
    pub fn free_from(&self, dest: &AtomicU64) -> Result<(), FreeError> {
        let ops = self.ops();
        let mem = self.heap.mem();
        let dest_off = mem.word_offset(dest).ok_or(FreeError::ForeignPointer)?;
        let block = dest.load(Ordering::Acquire);
        if block == 0 {
            return Err(FreeError::NotAllocated);
        }
        let ptr = self.heap.pointer(Offset::<u8>::from_raw(block)).map_err(|_| FreeError::ForeignPointer)?;
        self.usable_size(ptr)?;
        let generation = match self.huge_offset(ptr) {
            Some(off) => mem.huge().and_then(|v| v.find(off)).map_or(0, |b| b.generation),
            None => u64::from(ops.locate(ptr.as_ptr())?.desc.head.generation.load(Ordering::Relaxed)),
        };
        ops.announce(Pending::new(PendingKind::Free, generation), block, dest_off, 0);
        crash_point!(FreeAnnounced);
        if dest.compare_exchange(block, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            // Another thread freed through the same word first.
            ops.settle();
            return Err(FreeError::DoubleFree);
        }
        crash_point!(FreeCleared);
        let result = self.free(ptr);
        crash_point!(FreeDone);
        ops.settle();
        result
    }

    /// Allocates `size` bytes (uninitialized; contents are whatever the block last held).
    #[inline(always)]
    pub fn alloc(&self, size: usize) -> Result<NonNull<u8>, AllocError> {
        if size.wrapping_sub(1) < SMALL_MAX {
            // Two inlined arms, so that each folds its class's geometry out of a caller's loop
            // (docs/design.md §4.5): the reduced models' rounded class as a call cost them 36
            // instructions a local allocation, a select between the two classes in one arm cost
            // every model 13 (the model flag is reloaded after each store, so nothing that
            // depends on the class could be hoisted); this way the full model pays 4
            // (script/icount.sh). Always inlined: a caller that did not inline both arms would
            // pay a call in every model.
            //
            // Only the quick path is inlined; whatever it declines (a refill, the word's last
            // bit) goes to the one call below, so that none of the quick path's values has to
            // survive a call (docs/design.md §4.5).
            let class = size.div_ceil(8) as u32;
            let quick = if !self.ops().line_granular {
                self.ops().alloc_quick(Bracket::Small, class)
            } else {
                self.ops().alloc_quick(Bracket::Small, line_class(class))
            };
            if let Some(block) = quick {
                return Ok(block);
            }
        }
        self.alloc_other(size)
    }

    /// The small class of `size` bytes (`1 ..= SMALL_MAX`): its 8-byte class, rounded up to a
    /// whole line's class in the reduced models ([`line_class`]). Written as a select of two
    /// computed classes (not a branch around the rounding) so that a constant size folds it.
    #[inline(always)]
    fn small_class(&self, size: usize) -> u32 {
        let class = size.div_ceil(8) as u32;
        let line = line_class(class);
        if self.ops().line_granular {
            line
        } else {
            class
        }
    }

    /// The class serving `size` bytes in this heap's model (small requests rounded up as in
    /// [`ThreadHandle::small_class`]; large classes are multiples of 256 bytes already).
    #[inline]
    fn class_for(&self, size: usize) -> Option<(Bracket, u32)> {
        if size.wrapping_sub(1) < SMALL_MAX {
            Some((Bracket::Small, self.small_class(size)))
        } else {
            class_of(size)
        }
    }

    /// [`ThreadHandle::alloc`] of a large or huge block, or of a small one that the quick path
    /// declined.
    #[inline(never)]
    fn alloc_other(&self, size: usize) -> Result<NonNull<u8>, AllocError> {
        match self.class_for(size) {
            Some((Bracket::Small, class)) => self.ops().alloc_slow(Bracket::Small, class),
            Some((b, class)) => self.ops().alloc(b, class),
            None if size == 0 => Err(AllocError::ZeroSize),
            None => self.alloc_huge(size, 1),
        }
    }

    /// Runs `f` on this slot's huge heap, with its free ranges (rebuilt on first use); `None`
    /// when the heap has no huge heap.
    fn with_huge<R>(&self, f: impl FnOnce(&HugeThread<'_>, &mut FreeRanges) -> R) -> Option<R> {
        let view = self.heap.mem().huge()?;
        let h = HugeThread { t: self.ops(), view };
        let mut space = self.huge.borrow_mut();
        let space = space.get_or_insert_with(|| h.rebuild());
        Some(f(&h, space))
    }

    /// Releases the freed, unmapped huge blocks of other slots ([`crate::Heap::sweep_huge`]).
    pub(super) fn release_freed_huge(&self) -> usize {
        self.heap.mem().huge().map_or(0, |view| crate::huge::ops::release_freed(self.ops(), view))
    }

    /// Releases the freed blocks named by `keys`, whose mappings this process just dropped.
    pub(super) fn release_huge(&self, keys: &[crate::word::HazardKey]) -> usize {
        self.heap.mem().huge().map_or(0, |view| crate::huge::ops::release_dropped(self.ops(), view, keys))
    }

    #[cold]
    fn alloc_huge(&self, size: usize, align: usize) -> Result<NonNull<u8>, AllocError> {
        self.with_huge(|h, space| h.alloc(space, size, align, 0)).unwrap_or(Err(AllocError::Unsupported(size)))
    }

    /// A zeroed huge block: a new object's pages come zeroed from the kernel, and writing
    /// zeroes over them would only enter each page in this process's page tables (and, without
    /// `commit_on_grow`, allocate it); only a reused object is cleared (docs/design.md §7.6).
    #[cold]
    fn alloc_huge_zeroed(&self, size: usize) -> Result<NonNull<u8>, AllocError> {
        let (p, origin) = self
            .with_huge(|h, space| h.alloc_block(space, size, 1, 0))
            .unwrap_or(Err(AllocError::Unsupported(size)))?;
        if origin == Origin::Reused {
            // SAFETY: the block is at least `size` bytes and exclusively ours.
            unsafe { p.as_ptr().write_bytes(0, size) };
        }
        Ok(p)
    }

    /// The heap offset of `ptr` if it lies in the huge span.
    fn huge_offset(&self, ptr: NonNull<u8>) -> Option<u64> {
        let view = self.heap.mem().huge()?;
        let off = (ptr.as_ptr() as usize).wrapping_sub(view.base);
        view.span.contains(off).then_some(off as u64)
    }

    /// Allocates `size` zeroed bytes.
    pub fn alloc_zeroed(&self, size: usize) -> Result<NonNull<u8>, AllocError> {
        if size != 0 && self.class_for(size).is_none() {
            return self.alloc_huge_zeroed(size);
        }
        let p = self.alloc(size)?;
        // SAFETY: the block is at least `size` bytes and exclusively ours.
        unsafe { p.as_ptr().write_bytes(0, size) };
        Ok(p)
    }

    /// Allocates zeroed memory for `count` elements of `size` bytes (`calloc`).
    pub fn alloc_array_zeroed(&self, count: usize, size: usize) -> Result<NonNull<u8>, AllocError> {
        self.alloc_zeroed(count.checked_mul(size).ok_or(AllocError::Overflow)?)
    }

    /// Allocates `size` bytes aligned to `align` (a power of two, at most [`MAX_ALIGN`]: else
    /// [`AllocError::BadAlignment`] or [`AllocError::AlignmentTooLarge`]). Alignments up to the
    /// slab size come from a class whose every block is aligned; nothing is padded. Larger ones
    /// come from the huge heap.
    pub fn alloc_aligned(&self, size: usize, align: usize) -> Result<NonNull<u8>, AllocError> {
        if !align.is_power_of_two() {
            return Err(AllocError::BadAlignment(align));
        }
        if align > MAX_ALIGN {
            return Err(AllocError::AlignmentTooLarge { align, max: MAX_ALIGN });
        }
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        let line = if self.ops().line_granular { crate::coherence::flush::LINE } else { 1 };
        match class_aligned(size, align.max(line)) {
            Some((b, class)) => self.ops().alloc(b, class),
            None if size > LARGE_MAX || align > Bracket::Large.spec().slab_size() => self.alloc_huge(size, align),
            None => Err(AllocError::BadAlignment(align)),
        }
    }

    /// Frees a block allocated by any thread of any process from this heap. Invalid, interior,
    /// foreign and double frees return an error and leave the heap untouched.
    // Always inlined: the quick local free is meant to run in the caller (docs/design.md §4.5);
    // left to the inliner, the function stopped being inlined once the reduced models' quick
    // free was added behind its call, and the full model's local free cost 23 instructions
    // more (`script/icount.sh`).
    #[inline(always)]
    pub fn free(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        // The huge heap is asked only where the slab heaps say the pointer is not theirs, from
        // inside their free: no path that calls out keeps `ptr` for after the call, so the
        // caller's copy of the quick free saves fewer registers (docs/design.md §4.5).
        self.ops().free_or(ptr.as_ptr(), move || self.free_huge(ptr))
    }

    #[cold]
    fn free_huge(&self, ptr: NonNull<u8>) -> Result<(), FreeError> {
        let off = self.huge_offset(ptr).ok_or(FreeError::ForeignPointer)?;
        self.with_huge(|h, space| h.free(Some(space), off)).unwrap_or(Err(FreeError::ForeignPointer))
    }

    /// The usable size of an allocated block: its class size, or a huge block's length in
    /// whole pages.
    pub fn usable_size(&self, ptr: NonNull<u8>) -> Result<usize, FreeError> {
        match self.ops().usable_size(ptr.as_ptr()) {
            Err(FreeError::ForeignPointer) => {
                let off = self.huge_offset(ptr).ok_or(FreeError::ForeignPointer)?;
                self.with_huge(|h, _| h.usable_size(off)).unwrap_or(Err(FreeError::ForeignPointer))
            }
            r => r,
        }
    }

    /// The application's side of handing `len` bytes at `ptr` to another host in the limited
    /// and no-HWcc models (docs/design.md §9.1, "Slab data"): writes them back to memory
    /// (keeping them cached) and fences, so that a host that then reads them, after a message
    /// or flag the application sends afterwards, sees them. A no-op in the full model.
    /// `ptr` lies in a block of this heap (anywhere in a slab block, or at the start of a huge
    /// block) and the range stays within its slab or huge block; otherwise nothing is flushed
    /// and the error says why.
    pub fn write_back(&self, ptr: NonNull<u8>, len: usize) -> Result<(), HandOverError> {
        self.hand_over_range(ptr, len)?;
        self.heap.mem().swcc.app_write_back(ptr.as_ptr(), len);
        Ok(())
    }

    /// The receiving side of [`ThreadHandle::write_back`]: evicts this host's cached copies of
    /// `len` bytes at `ptr` and fences, so that the reads that follow come from memory, before
    /// reading (or freeing) what another host wrote there. A no-op in the full model. The same
    /// range rules as [`ThreadHandle::write_back`].
    pub fn invalidate(&self, ptr: NonNull<u8>, len: usize) -> Result<(), HandOverError> {
        self.hand_over_range(ptr, len)?;
        self.heap.mem().swcc.app_invalidate(ptr.as_ptr(), len);
        Ok(())
    }

    /// Checks that `len` bytes at `ptr` are heap memory a flush may touch: within one slab
    /// (read from no descriptor, which may be another host's), or within a live huge block
    /// starting at `ptr`.
    fn hand_over_range(&self, ptr: NonNull<u8>, len: usize) -> Result<(), HandOverError> {
        let room = match self.ops().slab_room(ptr.as_ptr()) {
            Some(room) => room,
            None => self.usable_size(ptr).map_err(HandOverError::Block)?,
        };
        if len > room {
            return Err(HandOverError::PastEnd { len, room });
        }
        Ok(())
    }

    /// Resizes a block: returns it unchanged when its class already fits `new_size` (for a
    /// huge block: when `new_size` needs at least half of it), otherwise allocates, copies and
    /// frees the old block, across the slab/huge boundary too. The old pointer is validated
    /// before anything is copied; on error it is untouched.
    pub fn realloc(&self, ptr: NonNull<u8>, new_size: usize) -> Result<NonNull<u8>, ReallocError> {
        let old = self.usable_size(ptr)?;
        if new_size == 0 {
            return Err(AllocError::ZeroSize.into());
        }
        let in_place = match (self.class_for(new_size), self.class_for(old)) {
            (Some(a), Some(b)) => a == b,
            (None, None) => new_size <= old && new_size > old / 2,
            _ => false,
        };
        if in_place {
            return Ok(ptr);
        }
        let new = self.alloc(new_size)?;
        // SAFETY: both blocks are allocated, distinct, and at least min(old, new_size) long.
        unsafe { std::ptr::copy_nonoverlapping(ptr.as_ptr(), new.as_ptr(), old.min(new_size)) };
        if let Err(e) = self.free(ptr) {
            // Only a free racing with ours can get here; give the new block back.
            let _ = self.free(new);
            return Err(e.into());
        }
        Ok(new)
    }
}

impl Drop for ThreadHandle {
    fn drop(&mut self) {
        // A forked child inherits a copy of its parent's handle; only the process that leased
        // the slot may give it back.
        if Holder::unpack(self.holder).map(|h| h.pid) != Some(std::process::id()) {
            return;
        }
        // Huge first: reclaiming frees descriptor blocks into this slot's small slabs. A slot
        // that never held a huge block skips it (and so never touches the claim array).
        let huge_used = self.huge.borrow().is_some() || self.ops.rec.huge.head.load(Ordering::Relaxed) != 0;
        if huge_used {
            self.with_huge(|h, space| {
                h.maintain(space);
                // Nobody holds the slot to reuse its cached objects once we are gone.
                h.trim_cache(space, 0);
                h.release_empty_claims(space);
            });
        }
        let ops = self.ops();
        ops.flush_remote_batch();
        // Closed first: what it held returns to our slabs before they are given up, and later
        // remote frees of them are counted (docs/design.md §4.6).
        ops.close_mailboxes();
        for b in Bracket::ALL {
            ops.release_classes(b);
            ops.drain_unsized(b);
        }
        let mem = self.heap.mem();
        // The next holder may run on another host: our record reaches memory first.
        let (record, len) = mem.record_bytes(self.ops.slot);
        mem.swcc.persist(Site::SlotReleased, record, len);
        lease::release(&mem.hw_process(&mem.lease(self.ops.slot).holder), self.holder);
        mem.beat();
    }
}

/// The small class of whole cache lines holding 8-byte class `class`: a multiple of 8 classes,
/// as the reduced models hand out (docs/design.md §9.1, "Slab data": two blocks sharing a line
/// could be written on two hosts, and one host's write-back of the line would put its stale
/// copy of the other block over what the other host wrote). SMALL_MAX is a multiple of 64, so
/// the rounding stays in range.
#[inline(always)]
const fn line_class(class: u32) -> u32 {
    (class + 7) & !7
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Heap};

    fn heap() -> Heap {
        let config = Config { thread_slots: 4, huge_capacity: 0, ..Config::with_capacity(64 << 20) };
        Heap::anonymous(&config).expect("anonymous heap")
    }

    /// `a`'s blocks but the first, freed by `b` (remote frees to a live owner: they wait in
    /// `a`'s mailbox, docs/design.md §4.6). The kept block pins their slab.
    fn free_remotely(a: &ThreadHandle, b: &ThreadHandle) {
        let blocks: Vec<_> = (0..100).map(|_| a.alloc(64).expect("alloc")).collect();
        for &p in &blocks[1..] {
            b.free(p).expect("remote free");
        }
        let mem = a.heap.mem();
        let waiting = Bracket::ALL
            .iter()
            .any(|&br| mem.mailbox(br, a.ops.slot).is_some_and(crate::protocol::mailbox::has_blocks));
        assert!(waiting, "the remote frees went to the owner's mailbox");
    }

    /// The fault the checker must see: a detach that gives the slot up without closing its
    /// mailboxes (what `Drop` does, less `close_mailboxes`). Nobody will ever harvest what
    /// waits there, and the slabs of those blocks can never drain.
    fn detach_without_closing(h: ThreadHandle) {
        let ops = h.ops();
        ops.flush_remote_batch();
        for b in Bracket::ALL {
            ops.release_classes(b);
            ops.drain_unsized(b);
        }
        let mem = h.heap.mem();
        lease::release(&mem.hw_process(&mem.lease(h.ops.slot).holder), h.holder);
        // The slot is given up; the handle must not give it up again.
        std::mem::forget(h);
    }

    #[test]
    #[cfg_attr(miri, ignore = "forgets a handle on purpose (a detach that skips the close): miri reports it as a leak")]
    fn the_checker_reports_blocks_stranded_in_a_released_slots_mailbox() {
        let heap = heap();
        let a = heap.attach().expect("attach");
        let b = heap.attach().expect("attach");
        free_remotely(&a, &b);
        let before = heap.check();
        assert!(before.is_clean(), "{before}");
        detach_without_closing(a);
        let report = heap.check();
        assert!(
            report.problems.iter().any(|p| p.what.contains("no holder")),
            "blocks stranded in a released slot's mailbox went unreported:\n{report}"
        );
    }

    #[test]
    fn a_detach_with_blocks_in_its_mailbox_leaves_a_clean_heap() {
        let heap = heap();
        let a = heap.attach().expect("attach");
        let b = heap.attach().expect("attach");
        free_remotely(&a, &b);
        drop(a);
        let report = heap.check();
        assert!(report.is_clean(), "{report}");
    }

    /// A named heap with a huge heap (cached objects need named objects), unlinked when the
    /// guard drops.
    struct NamedHeap {
        name: String,
        heap: Heap,
    }

    impl Drop for NamedHeap {
        fn drop(&mut self) {
            let _ = Heap::unlink(&self.name);
        }
    }

    fn named_huge_heap(tag: &str) -> NamedHeap {
        let name = format!("unit-{}-{tag}", std::process::id());
        let _ = Heap::unlink(&name);
        let config = Config { thread_slots: 4, huge_capacity: 16 << 30, ..Config::with_capacity(64 << 20) };
        let heap = Heap::create(&name, &config).expect("create a named heap");
        NamedHeap { name, heap }
    }

    const BLOCK: usize = 4 << 20;

    /// The owner's `maintain`, first half: drops this process's stale huge entries.
    fn drop_stale_as_owner(owner: &ThreadHandle) {
        owner.with_huge(|h, _| crate::huge::ops::drop_stale_mappings(h.t.mem, h.view, Some(h.t.slot)));
    }

    fn state_of(heap: &Heap, off: u64) -> Option<crate::persist::huge::HugeState> {
        heap.mem().huge().and_then(|v| v.find(off)).and_then(|b| b.state)
    }

    /// What every interleaving below must end in: the block `p` (at `off`) cached with its
    /// mapping, and the owner's next allocation of its size handed the same block.
    fn assert_cached_with_mapping_and_reused(
        heap: &Heap,
        owner: &ThreadHandle,
        p: NonNull<u8>,
        off: u64,
    ) -> NonNull<u8> {
        assert_eq!(state_of(heap, off), Some(crate::persist::huge::HugeState::Cached), "the owner caches it");
        let view = heap.mem().huge().expect("huge view");
        assert!(view.maps_object(off), "with its mapping: the reuse maps and populates nothing");
        let q = owner.alloc(BLOCK).expect("huge alloc");
        assert_eq!(q, p, "the cached block is reused");
        q
    }

    // xmalloc's shape, at its unlucky moment: the consumer (a thread of another slot of this
    // process) frees the producer's block while the producer is inside `maintain`, after it
    // dropped the stale entries and before it reclaims. The block must be cached then, with
    // its mapping, not unmapped for the producer's own entry (docs/design.md §7.6).
    #[test]
    #[cfg_attr(miri, ignore = "maps heap files")]
    fn a_block_freed_beside_its_owner_in_the_middle_of_its_maintain_is_cached_with_its_mapping() {
        let named = named_huge_heap("beside-mid-maintain");
        let heap = &named.heap;
        let owner = heap.attach().expect("attach");
        let freer = heap.attach().expect("attach");
        let p = owner.alloc(BLOCK).expect("huge alloc");
        let off = heap.offset_of(p.as_ptr()).expect("offset").raw();
        // SAFETY: our block of BLOCK bytes.
        unsafe { p.as_ptr().write_bytes(0xa5, BLOCK) };
        drop_stale_as_owner(&owner);
        freer.free(p).expect("free beside the owner");
        owner.with_huge(|h, space| h.reclaim_freed(space));
        let q = assert_cached_with_mapping_and_reused(heap, &owner, p, off);
        // SAFETY: our block of BLOCK bytes; a reused object holds its last bytes.
        let bytes = unsafe { std::slice::from_raw_parts(q.as_ptr(), BLOCK) };
        assert!(bytes.iter().all(|&b| b == 0xa5), "the reused object is the same object");
        owner.free(q).expect("free");
    }

    // A freer in another process releases a block (removes its object) when its hazard scan
    // finds no mapping. The owner that still maps the block must not retract its entry before
    // its own reclaim: between the two, the freer's scan would find nothing, remove the object
    // and make the owner create a new one (xmalloc across processes).
    #[test]
    #[cfg_attr(miri, ignore = "maps heap files")]
    fn a_block_freed_elsewhere_is_not_released_while_its_owner_maintains_under_its_mapping() {
        let named = named_huge_heap("release-mid-maintain");
        let heap = &named.heap;
        let owner = heap.attach().expect("attach");
        let p = owner.alloc(BLOCK).expect("huge alloc");
        let off = heap.offset_of(p.as_ptr()).expect("offset").raw();
        let view = heap.mem().huge().expect("huge view");
        let b = view.find(off).expect("descriptor");
        // The freer elsewhere marks the block Freed (its own mapping and entries gone)...
        assert!(crate::huge::ops::mark_freed(view, &b));
        // ...the owner drops its stale entries...
        drop_stale_as_owner(&owner);
        // ...and the freer scans the hazard sets.
        assert!(!crate::huge::ops::release(heap.mem(), view, &b), "released under the owner's mapping");
        assert_eq!(state_of(heap, off), Some(crate::persist::huge::HugeState::Freed));
        owner.with_huge(|h, space| h.reclaim_freed(space));
        let q = assert_cached_with_mapping_and_reused(heap, &owner, p, off);
        owner.free(q).expect("free");
    }

    // The owner's maintain finds its block Releasing (a freer elsewhere is in its hazard scan).
    // While an entry of the owner's process covers the block, the scan cannot succeed and the
    // block comes back Freed: the owner keeps its mapping for the reclaim that follows, rather
    // than unmap it and have the reuse map and populate it again.
    #[test]
    #[cfg_attr(miri, ignore = "maps heap files")]
    fn a_block_being_released_elsewhere_keeps_the_mapping_its_owners_entry_covers() {
        let named = named_huge_heap("releasing-kept");
        let heap = &named.heap;
        let owner = heap.attach().expect("attach");
        let p = owner.alloc(BLOCK).expect("huge alloc");
        let off = heap.offset_of(p.as_ptr()).expect("offset").raw();
        let view = heap.mem().huge().expect("huge view");
        let b = view.find(off).expect("descriptor");
        assert!(crate::huge::ops::mark_freed(view, &b));
        let d = view.descriptor(b.desc).expect("descriptor");
        let (freed, releasing) = (
            crate::persist::huge::HugeState::Freed.word(b.generation),
            crate::persist::huge::HugeState::Releasing.word(b.generation),
        );
        // The freer's release begins...
        assert!(crate::protocol::hazard::begin_reclaim(&d.status, freed, releasing));
        // ...the owner does huge work meanwhile...
        owner.with_huge(|h, space| h.maintain(space));
        assert!(view.maps_object(off), "the owner's mapping kept under its entry");
        // ...and the release finds the owner's entry.
        assert!(!crate::huge::ops::finish_release(heap.mem(), view, &b), "released under the owner's mapping");
        owner.with_huge(|h, space| h.maintain(space));
        let q = assert_cached_with_mapping_and_reused(heap, &owner, p, off);
        owner.free(q).expect("free");
    }

    fn residency_asks() -> u64 {
        crate::huge::view::RESIDENCY_ASKS.with(|n| n.get())
    }

    // threadtest's steady state: one thread frees its block and allocates the same size again,
    // round after round. The block comes back from the cache with the mapping this thread made
    // and nobody in the process unmapped: the reuse asks the kernel nothing (docs/design.md §7.6).
    #[test]
    #[cfg_attr(miri, ignore = "maps heap files")]
    fn a_cached_block_that_no_thread_of_the_process_unmapped_is_reused_without_a_mincore() {
        let named = named_huge_heap("reuse-no-mincore");
        let heap = &named.heap;
        let owner = heap.attach().expect("attach");
        let p = owner.alloc(BLOCK).expect("huge alloc");
        // SAFETY: our block of BLOCK bytes.
        unsafe { p.as_ptr().write_bytes(0x5a, BLOCK) };
        owner.free(p).expect("free");
        let asked = residency_asks();
        for round in 0..4u8 {
            let q = owner.alloc(BLOCK).expect("huge alloc");
            assert_eq!(q, p, "the cached block is reused");
            // SAFETY: our block of BLOCK bytes; a reused object holds its last bytes.
            let bytes = unsafe { std::slice::from_raw_parts_mut(q.as_ptr(), BLOCK) };
            let last = if round == 0 { 0x5a } else { round - 1 };
            assert!(bytes.iter().all(|&b| b == last), "round {round}: the reused object is the same object");
            bytes.fill(round);
            owner.free(q).expect("free");
        }
        assert_eq!(residency_asks() - asked, 0, "a reuse asked the kernel whether the kept mapping is there");
    }

    // Another thread of the process returned the cached block's range to PROT_NONE (a drop of a
    // stale mapping, or an eviction, §7.4) after the owner mapped it: the owner cannot know
    // which range went, so its reuse asks, and maps the object again before handing it out.
    #[test]
    #[cfg_attr(miri, ignore = "maps heap files")]
    fn a_cached_block_whose_range_another_thread_unmapped_is_mapped_again_at_reuse() {
        let named = named_huge_heap("reuse-after-unmap");
        let heap = &named.heap;
        let owner = heap.attach().expect("attach");
        let p = owner.alloc(BLOCK).expect("huge alloc");
        let off = heap.offset_of(p.as_ptr()).expect("offset").raw();
        // SAFETY: our block of BLOCK bytes.
        unsafe { p.as_ptr().write_bytes(0xc3, BLOCK) };
        owner.free(p).expect("free");
        assert_eq!(state_of(heap, off), Some(crate::persist::huge::HugeState::Cached), "cached");
        std::thread::scope(|s| {
            let other = s.spawn(|| heap.mem().huge().map(|v| v.unmap(off, BLOCK)));
            assert_eq!(other.join().expect("the other thread"), Some(Ok(())), "unmapped");
        });
        let view = heap.mem().huge().expect("huge view");
        assert!(!view.maps_object(off), "the other thread's unmap took the mapping");
        let asked = residency_asks();
        let q = owner.alloc(BLOCK).expect("huge alloc");
        assert_eq!(q, p, "the cached block is reused");
        assert_eq!(residency_asks() - asked, 1, "the reuse asked whether the mapping is still there");
        assert!(view.maps_object(off), "the reuse mapped the object again before handing it out");
        // SAFETY: our block of BLOCK bytes; a reused object holds its last bytes.
        let bytes = unsafe { std::slice::from_raw_parts(q.as_ptr(), BLOCK) };
        assert!(bytes.iter().all(|&b| b == 0xc3), "the reused object is the same object");
        owner.free(q).expect("free");
    }

    // The fork check runs at every huge allocation and free (and fault): in the process that
    // opened the heap it reads the id the fork handler keeps, with no system call.
    #[test]
    #[cfg_attr(miri, ignore = "maps heap files")]
    fn the_fork_check_of_huge_calls_makes_no_getpid() {
        let named = named_huge_heap("fork-check");
        let heap = &named.heap;
        let owner = heap.attach().expect("attach");
        let view = heap.mem().huge().expect("huge view");
        let calls = || crate::huge::view::GETPID_CALLS.with(|n| n.get());
        let before = calls();
        for _ in 0..8 {
            assert!(view.in_own_process(), "the opener's own process");
            let p = owner.alloc(BLOCK).expect("huge alloc");
            owner.free(p).expect("free");
        }
        assert_eq!(calls() - before, 0, "the fork check called getpid");
    }
}
