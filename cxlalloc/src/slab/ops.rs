//! Allocation and free on the slab heaps: the fast paths and transitions T1–T10.
//!
//! Fast-path budget (local allocate, local free): no system call, no lock, no HWcc access, no
//! atomic read-modify-write. Allocate = class lookup, one load of the sized-list head, two
//! `tzcnt`s and three stores to the owner's own descriptor, plus the redo record. Everything else
//! is behind the `#[cold]` entries [`SlabThread::refill`], [`SlabThread::retire`] and
//! [`SlabThread::free_remote`].

use std::ptr::NonNull;

use crate::class::{Bracket, ClassInfo};
use crate::error::{AllocError, FreeError};
use crate::mem::{HeapMem, Slab};
use crate::protocol::{global_list, length, remote};
use crate::slab::descriptor::Descriptor;
use crate::sync::{fence, AtomicU64, Ordering};
use crate::thread::record::ThreadRecord;
use crate::thread::redo::{Op, Redo};
use crate::word::{Tag, Tagged};

/// A block located from a pointer and validated against its slab's descriptor.
#[derive(Clone, Copy)]
pub struct Located<'a> {
    /// Bracket of the block.
    pub bracket: Bracket,
    /// Its slab.
    pub slab: Slab,
    /// The slab's descriptor.
    pub desc: Descriptor<'a>,
    /// The slab's class.
    pub class: u32,
    /// Class information.
    pub info: &'static ClassInfo,
    /// Block index in the slab.
    pub block: u32,
    /// Offset of the block from the heap base.
    pub offset: usize,
}

/// One attached thread's view of the slab heaps.
pub struct SlabThread<'a> {
    /// The mapped heap.
    pub mem: &'a HeapMem,
    /// This thread's slot.
    pub slot: u32,
    /// This slot's record.
    pub rec: &'a ThreadRecord,
}

/// The value a remote free writes into a block's first word. Salted by the heap secret, the
/// block's offset and the slab's generation: a block freed remotely is never reallocated within
/// its slab's generation, so finding the mark there means the block was already freed.
#[inline]
fn free_mark(secret: u64, offset: usize, generation: u32) -> u64 {
    let x = secret ^ (offset as u64) ^ (u64::from(generation) << 44);
    x.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (x >> 29) ^ 0x5bd1_e995
}

impl<'a> SlabThread<'a> {
    #[inline]
    fn log(&self, r: Redo) {
        // Relaxed store + Release fence: the record is ordered before every later store of the
        // operation, which is all recovery needs (it reads the record after the writer died).
        self.rec.redo.store(r.pack(), Ordering::Relaxed);
        fence(Ordering::Release);
    }

    #[inline]
    fn clear_log(&self) {
        fence(Ordering::Release);
        self.rec.redo.store(0, Ordering::Relaxed);
    }

    #[inline]
    fn me(&self) -> u32 {
        self.slot + 1
    }

    fn tag(&self, version: u32) -> Tag {
        Tag::new(self.slot, version)
    }

    /// Allocates one block of class `class` (1-based) of bracket `b`.
    #[inline]
    pub fn alloc(&self, b: Bracket, class: u32) -> Result<NonNull<u8>, AllocError> {
        let spec = b.spec();
        let info = spec
            .class(class)
            .ok_or(AllocError::Corrupt("class id out of range"))?;
        let head = &self.rec.lists(b).sized[class as usize - 1];
        loop {
            let link = head.load(Ordering::Relaxed);
            if link == 0 {
                self.refill(b, class, info)?;
                continue;
            }
            let slab = self
                .mem
                .link(b, link)
                .map_err(AllocError::Corrupt)?
                .ok_or(AllocError::Corrupt("sized head"))?;
            let d = self.mem.desc(b, slab);
            #[cfg(feature = "validate")]
            self.validate(b, slab, d, info)
                .map_err(AllocError::Corrupt)?;
            let block = d
                .lowest()
                .ok_or(AllocError::Corrupt("sized slab without a free block"))?;
            self.log(Redo::new(Op::Alloc, b, slab.index(), block));
            if d.take(block) == 0 {
                self.retire(b, class, info, slab, d);
            }
            self.clear_log();
            return Ok(self.mem.data(b, slab, block as usize * info.size as usize));
        }
    }

    /// Finds the block `ptr` names and checks that it is an allocated block start.
    #[inline]
    pub fn locate(&self, ptr: *const u8) -> Result<Located<'a>, FreeError> {
        let mem = self.mem;
        let offset = mem.offset_of(ptr).ok_or(FreeError::ForeignPointer)?;
        let b = if mem.layout.bracket(Bracket::Small).data.contains(offset) {
            Bracket::Small
        } else if mem.layout.bracket(Bracket::Large).data.contains(offset) {
            Bracket::Large
        } else {
            return Err(FreeError::ForeignPointer);
        };
        let spec = b.spec();
        let rel = offset - mem.layout.bracket(b).data.offset;
        let slab = mem
            .slab(b, (rel >> spec.slab_shift) as u32)
            .ok_or(FreeError::ForeignPointer)?;
        let desc = mem.desc(b, slab);
        let class = desc.head.class.load(Ordering::Relaxed);
        let info = spec.class(class).ok_or(FreeError::NotAllocated)?;
        let in_slab = (rel & (spec.slab_size() - 1)) as u64;
        let block = ((in_slab * info.recip) >> 40) as u32;
        if u64::from(block) * u64::from(info.size) != in_slab {
            return Err(FreeError::InteriorPointer);
        }
        if block >= info.blocks {
            return Err(FreeError::NotAllocated);
        }
        Ok(Located {
            bracket: b,
            slab,
            desc,
            class,
            info,
            block,
            offset,
        })
    }

    fn mark_word(&self, at: &Located<'_>) -> &AtomicU64 {
        let p = self.mem.data(
            at.bracket,
            at.slab,
            at.block as usize * at.info.size as usize,
        );
        // SAFETY: the block is at least 8 bytes, 8-aligned (class sizes are multiples of 8 and
        // slabs are aligned), inside a mapped slab below the heap length.
        unsafe { &*(p.as_ptr() as *const AtomicU64) }
    }

    fn expected_mark(&self, at: &Located<'_>) -> u64 {
        free_mark(
            self.mem.header.secret,
            at.offset,
            at.desc.head.generation.load(Ordering::Relaxed),
        )
    }

    /// Frees the block at `ptr`, locally if this thread owns its slab, remotely otherwise.
    #[inline]
    pub fn free(&self, ptr: *const u8) -> Result<(), FreeError> {
        let at = self.locate(ptr)?;
        if at.desc.is_free(at.block) {
            return Err(FreeError::DoubleFree);
        }
        if at.desc.head.owner.load(Ordering::Relaxed) == self.me() {
            self.free_local(&at)
        } else {
            self.free_remote(&at)
        }
    }

    #[inline]
    fn free_local(&self, at: &Located<'_>) -> Result<(), FreeError> {
        if self.mark_word(at).load(Ordering::Relaxed) == self.expected_mark(at) {
            return Err(FreeError::DoubleFree);
        }
        let (b, d) = (at.bracket, at.desc);
        #[cfg(feature = "validate")]
        self.validate(b, at.slab, d, at.info)
            .map_err(FreeError::Corrupt)?;
        self.log(Redo::new(Op::LocalFree, b, at.slab.index(), at.block));
        let free = d.put(at.block);
        if free == at.info.blocks {
            self.unsize(b, at.class, at.slab, d, free > 1);
        } else if free == 1 {
            // T6: Detached → Local-sized. A local free was never counted remotely, so the slab
            // cannot be claimed while we re-attach it.
            self.link_sized(b, at.class, at.slab, d);
        }
        self.clear_log();
        Ok(())
    }

    /// T7: a local free left the slab entirely free; it goes back to the unsized list.
    #[cold]
    fn unsize(&self, b: Bracket, class: u32, slab: Slab, d: Descriptor<'_>, linked: bool) {
        if linked {
            self.unlink_sized(b, class, d);
        }
        d.head.class.store(0, Ordering::Relaxed);
        self.push_unsized(b, slab, d);
        self.trim_cache(b);
    }

    /// T10 / T8: a free of a block in a slab this thread does not own.
    #[cold]
    fn free_remote(&self, at: &Located<'_>) -> Result<(), FreeError> {
        let mark = self.expected_mark(at);
        // Relaxed swap: detection only; two concurrent double frees of one block race here and
        // exactly one of them sees the mark.
        if self.mark_word(at).swap(mark, Ordering::Relaxed) == mark {
            return Err(FreeError::DoubleFree);
        }
        let b = at.bracket;
        let version = self.rec.next_version();
        self.log(Redo::new(Op::RemoteFree, b, at.slab.index(), version));
        let outcome = remote::decrement(self.mem.remote(b, at.slab), self.tag(version));
        ThreadRecord::bump(&self.rec.counters.remote_frees);
        let result = match outcome {
            Ok(remote::Decrement::Counted) => Ok(()),
            Ok(remote::Decrement::Claimed) => {
                // T8: every block was freed remotely; the slab is ours, empty.
                self.log(Redo::new(Op::RemoteFree, b, at.slab.index(), version).flagged());
                let d = at.desc;
                d.head.owner.store(self.me(), Ordering::Relaxed);
                d.head.class.store(0, Ordering::Relaxed);
                self.push_unsized(b, at.slab, d);
                ThreadRecord::bump(&self.rec.counters.claims);
                self.trim_cache(b);
                Ok(())
            }
            Err(remote::Underflow) => Err(FreeError::DoubleFree),
        };
        self.clear_log();
        result
    }

    /// The usable size of the allocated block at `ptr`.
    pub fn usable_size(&self, ptr: *const u8) -> Result<usize, FreeError> {
        let at = self.locate(ptr)?;
        if at.desc.is_free(at.block) {
            return Err(FreeError::NotAllocated);
        }
        Ok(at.info.size as usize)
    }

    /// Gives `class` a fresh slab with free blocks: T3 on an unsized slab, taking one first by
    /// T2 (global pop) or T1 (bump) when the unsized list is empty.
    #[cold]
    #[inline(never)]
    fn refill(&self, b: Bracket, class: u32, info: &ClassInfo) -> Result<(), AllocError> {
        let lists = self.rec.lists(b);
        if lists.unsized_head.load(Ordering::Relaxed) == 0 && !self.global_pop(b)? {
            self.bump(b)?;
        }
        let slab = self
            .mem
            .link(b, lists.unsized_head.load(Ordering::Relaxed))
            .map_err(AllocError::Corrupt)?
            .ok_or(AllocError::Corrupt("unsized list empty after refill"))?;
        let d = self.mem.desc(b, slab);
        // T3: Local-unsized → Local-sized[class].
        self.log(Redo::new(Op::Size, b, slab.index(), class));
        lists
            .unsized_head
            .store(d.head.next.load(Ordering::Relaxed), Ordering::Relaxed);
        lists.unsized_len.store(
            lists.unsized_len.load(Ordering::Relaxed).saturating_sub(1),
            Ordering::Relaxed,
        );
        d.head.class.store(class, Ordering::Relaxed);
        d.head.generation.store(
            d.head.generation.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        d.fill(info.blocks);
        let version = self.rec.next_version();
        remote::reset(self.mem.remote(b, slab), info.blocks, self.tag(version));
        self.link_sized(b, class, slab, d);
        self.clear_log();
        Ok(())
    }

    /// T4/T5: the allocation just took the slab's last free block.
    #[cold]
    #[inline(never)]
    fn retire(&self, b: Bracket, class: u32, info: &ClassInfo, slab: Slab, d: Descriptor<'_>) {
        self.log(Redo::new(Op::Retire, b, slab.index(), class));
        self.unlink_sized(b, class, d);
        match remote::retire(self.mem.remote(b, slab), info.blocks) {
            remote::Retire::Detach => ThreadRecord::bump(&self.rec.counters.detaches),
            remote::Retire::Disown => {
                self.log(Redo::new(Op::Retire, b, slab.index(), class).flagged());
                // Release: the descriptor writes above are ordered before the slab stops being
                // ours; the claimer's AcqRel decrement pairs with it through the counter.
                d.head.owner.store(0, Ordering::Release);
                ThreadRecord::bump(&self.rec.counters.disowns);
            }
        }
    }

    /// T2: pops a slab from the global list onto this thread's unsized list.
    fn global_pop(&self, b: Bracket) -> Result<bool, AllocError> {
        let version = self.rec.next_version();
        let mem = self.mem;
        let popped = global_list::pop(
            &mem.globals(b).global_head,
            self.tag(version),
            |link| match mem.link(b, link) {
                Ok(Some(s)) => Ok(mem.desc(b, s).head.next.load(Ordering::Relaxed)),
                _ => Err(AllocError::Corrupt("global list link beyond heap length")),
            },
            |link| self.log(Redo::new(Op::GlobalPop, b, link - 1, version)),
        )?;
        let Some(link) = popped else {
            self.clear_log();
            return Ok(false);
        };
        let slab = mem
            .link(b, link)
            .map_err(AllocError::Corrupt)?
            .ok_or(AllocError::Corrupt("popped null"))?;
        let d = mem.desc(b, slab);
        d.head.owner.store(self.me(), Ordering::Relaxed);
        self.push_unsized(b, slab, d);
        ThreadRecord::bump(&self.rec.counters.global_pops);
        self.clear_log();
        Ok(true)
    }

    /// T1: extends the heap by a batch of slabs onto this thread's unsized list.
    fn bump(&self, b: Bracket) -> Result<(), AllocError> {
        let mem = self.mem;
        let version = self.rec.next_version();
        let batch = mem.header.batch[b as usize];
        let capacity = mem.layout.bracket(b).capacity;
        let commit = mem.header.config().commit_on_grow;
        let range = length::bump(
            &mem.globals(b).length,
            self.tag(version),
            batch,
            capacity,
            |from, to| {
                self.log(Redo::new(Op::Bump, b, from, version));
                if commit {
                    mem.commit(b, from, to)
                        .map_err(|_| AllocError::OutOfMemory(b))?;
                }
                Ok(())
            },
        )?;
        let Some((from, to)) = range else {
            self.clear_log();
            return Err(AllocError::OutOfMemory(b));
        };
        mem.refresh_length(b);
        mem.ensure_mapped(b, to)
            .map_err(|_| AllocError::OutOfMemory(b))?;
        for index in (from..to).rev() {
            let slab = mem
                .slab(b, index)
                .ok_or(AllocError::Corrupt("bumped slab beyond length"))?;
            let d = mem.desc(b, slab);
            d.head.owner.store(self.me(), Ordering::Relaxed);
            self.push_unsized(b, slab, d);
        }
        let counters = &self.rec.counters.slabs_bumped;
        counters.store(
            counters.load(Ordering::Relaxed) + u64::from(to - from),
            Ordering::Relaxed,
        );
        self.clear_log();
        Ok(())
    }

    /// T9: returns empty slabs beyond the cache limit to the global list.
    fn trim_cache(&self, b: Bracket) {
        self.release_unsized(b, self.mem.header.cache_local);
    }

    /// T9 for every cached empty slab (a thread detaching).
    pub fn drain_unsized(&self, b: Bracket) {
        self.release_unsized(b, 0);
    }

    fn release_unsized(&self, b: Bracket, keep: u32) {
        let lists = self.rec.lists(b);
        while lists.unsized_len.load(Ordering::Relaxed) > keep {
            let Ok(Some(slab)) = self.mem.link(b, lists.unsized_head.load(Ordering::Relaxed))
            else {
                return;
            };
            let d = self.mem.desc(b, slab);
            let version = self.rec.next_version();
            self.log(Redo::new(Op::GlobalPush, b, slab.index(), version));
            lists
                .unsized_head
                .store(d.head.next.load(Ordering::Relaxed), Ordering::Relaxed);
            lists.unsized_len.store(
                lists.unsized_len.load(Ordering::Relaxed) - 1,
                Ordering::Relaxed,
            );
            // The owner must be cleared before the slab is reachable by others (§14.3); the
            // push's Release CAS publishes it.
            d.head.owner.store(0, Ordering::Relaxed);
            global_list::push(
                &self.mem.globals(b).global_head,
                self.tag(version),
                slab.link(),
                |next| d.head.next.store(next, Ordering::Relaxed),
            );
            ThreadRecord::bump(&self.rec.counters.global_pushes);
            self.clear_log();
        }
    }

    fn push_unsized(&self, b: Bracket, slab: Slab, d: Descriptor<'_>) {
        let lists = self.rec.lists(b);
        d.head.prev.store(0, Ordering::Relaxed);
        d.head.next.store(
            lists.unsized_head.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        lists.unsized_head.store(slab.link(), Ordering::Relaxed);
        lists.unsized_len.store(
            lists.unsized_len.load(Ordering::Relaxed) + 1,
            Ordering::Relaxed,
        );
    }

    fn link_sized(&self, b: Bracket, class: u32, slab: Slab, d: Descriptor<'_>) {
        let head = &self.rec.lists(b).sized[class as usize - 1];
        let old = head.load(Ordering::Relaxed);
        d.head.prev.store(0, Ordering::Relaxed);
        d.head.next.store(old, Ordering::Relaxed);
        if let Ok(Some(next)) = self.mem.link(b, old) {
            self.mem
                .desc(b, next)
                .head
                .prev
                .store(slab.link(), Ordering::Relaxed);
        }
        head.store(slab.link(), Ordering::Relaxed);
    }

    fn unlink_sized(&self, b: Bracket, class: u32, d: Descriptor<'_>) {
        let prev = d.head.prev.load(Ordering::Relaxed);
        let next = d.head.next.load(Ordering::Relaxed);
        match self.mem.link(b, prev) {
            Ok(Some(p)) => self.mem.desc(b, p).head.next.store(next, Ordering::Relaxed),
            _ => self.rec.lists(b).sized[class as usize - 1].store(next, Ordering::Relaxed),
        }
        if let Ok(Some(n)) = self.mem.link(b, next) {
            self.mem.desc(b, n).head.prev.store(prev, Ordering::Relaxed);
        }
        d.head.prev.store(0, Ordering::Relaxed);
        d.head.next.store(0, Ordering::Relaxed);
    }

    /// The per-operation invariant check of the `validate` feature (O(bitset words)).
    #[cfg(feature = "validate")]
    fn validate(
        &self,
        b: Bracket,
        slab: Slab,
        d: Descriptor<'_>,
        info: &ClassInfo,
    ) -> Result<(), &'static str> {
        let free = d.head.free.load(Ordering::Relaxed);
        if free != d.count_free() {
            return Err("free count differs from bitset popcount");
        }
        if !d.summary_consistent() {
            return Err("summary word differs from bitset");
        }
        if free > info.blocks {
            return Err("more free blocks than the class has");
        }
        if free > remote::count(self.mem.remote(b, slab)) {
            return Err("free blocks exceed the remote counter");
        }
        Ok(())
    }
}

/// The remote counter of `slab` (for statistics and the checker).
pub fn remote_count(mem: &HeapMem, b: Bracket, slab: Slab) -> u32 {
    Tagged::unpack(mem.remote(b, slab).load(Ordering::Acquire)).payload
}
