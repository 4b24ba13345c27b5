//! Allocation and free on the slab heaps: the fast paths and transitions T1–T10.
//!
//! Each class has a *current* slab (see [`Current`]): allocation pops the lowest bit of one
//! bitset word cached in the thread's record. Fast-path budget: no system call, no lock, no HWcc
//! access, no atomic read-modify-write.
//! - allocate: class lookup, one load and one store of the cached word, a `tzcnt`, an address
//!   computation (≈ 10 instructions);
//! - local free: locate the block (bounds, slab, descriptor, class, interior check by
//!   multiplication), three double-free checks, the redo record, and three stores to the
//!   owner's own descriptor.
//!
//! Everything else is behind the `#[cold]` entries, each called only after the quick path has
//! answered (docs/design.md §4.5): `alloc_slow` and `free_slow` (whatever the quick paths
//! decline), `word_emptied` (refill the cached word, or retire a full slab: T4/T5),
//! `next_current` (T2/T1/T3), `after_local_free` (T6/T7) and `free_remote` (T10/T8).

use std::ptr::NonNull;

use crate::class::{Bracket, ClassInfo};
use crate::coherence::hwcc::{Hw, McasPort};
use crate::coherence::Site;
use crate::crash::crash_point;
use crate::error::{AllocError, FreeError};
use crate::mem::{HeapMem, QuickGeometry, Slab};
use crate::persist::descriptor::Descriptor;
use crate::persist::record::{Current, CurrentId, Harvest, RemoteBatch, ThreadRecord};
use crate::persist::redo::{ChainArg, Op, Pending, Redo};
use crate::protocol::mailbox::{self, BlockId, Link};
use crate::protocol::{detectable, free_mark, global_list, length, remote};
use crate::sync::{fence, AtomicU64, Ordering};
use crate::word::{Tag, Tagged};

/// A block located from a pointer and validated against its slab's descriptor.
#[derive(Clone, Copy)]
pub(crate) struct Located<'a> {
    /// Bracket of the block.
    pub bracket: Bracket,
    /// Its slab.
    pub slab: Slab,
    /// The slab's descriptor.
    pub desc: Descriptor<'a>,
    /// The slab's class.
    pub class: u32,
    /// Block size of the class.
    pub size: u32,
    /// Blocks per slab of the class.
    pub blocks: u32,
    /// Block index in the slab.
    pub block: u32,
    /// Offset of the block from the heap base.
    pub offset: usize,
}

/// What the quick local free did, or what it leaves to the caller ([`SlabThread::free_or`]): a
/// few registers, not a `Result` written through memory.
#[derive(Clone, Copy)]
enum Quick {
    /// Freed.
    Done,
    /// Another thread's slab: the block located (bracket, slab, class, block index), for the
    /// remote free to take over.
    Remote(Bracket, Slab, u32, u32),
    /// Anything else, every refusal included: the general path, from the
    /// start.
    General,
}

/// A free's answer as the out-of-line entries return it to the inlined quick free
/// ([`SlabThread::free_or`]): the [`FreeError`] packed into two words, which come back in two
/// registers where the 24-byte `Result<(), FreeError>` comes back through memory, so that the
/// caller's copy of the quick free needs no stack slot for it (docs/design.md §4.5). `code` is 0
/// for success, else the error's tag in its low [`FreeAnswer::TAG_BITS`] bits and, for
/// [`FreeError::Corrupt`], the message's length above them; `msg` is the message's address.
#[derive(Clone, Copy)]
struct FreeAnswer {
    code: usize,
    msg: *const u8,
}

impl FreeAnswer {
    const TAG_BITS: u32 = 3;
    const TAG_MASK: usize = (1 << Self::TAG_BITS) - 1;
    /// For a message too long to pack (none of this crate's; a `&'static str` longer than
    /// `usize::MAX >> 3` bytes cannot exist in a 64-bit address space).
    const LONG: &'static str = "heap metadata corrupt";

    #[inline(always)]
    fn of(r: Result<(), FreeError>) -> Self {
        let (tag, msg) = match r {
            Ok(()) => (0, ""),
            Err(FreeError::ForeignPointer) => (1, ""),
            Err(FreeError::InteriorPointer) => (2, ""),
            Err(FreeError::NotAllocated) => (3, ""),
            Err(FreeError::DoubleFree) => (4, ""),
            Err(FreeError::ForeignProcess) => (5, ""),
            Err(FreeError::Corrupt(m)) => (6, if m.len() <= usize::MAX >> Self::TAG_BITS { m } else { Self::LONG }),
        };
        Self { code: tag | msg.len() << Self::TAG_BITS, msg: msg.as_ptr() }
    }

    #[inline(always)]
    fn result(self) -> Result<(), FreeError> {
        Err(match self.code & Self::TAG_MASK {
            0 => return Ok(()),
            1 => FreeError::ForeignPointer,
            2 => FreeError::InteriorPointer,
            3 => FreeError::NotAllocated,
            4 => FreeError::DoubleFree,
            5 => FreeError::ForeignProcess,
            _ => {
                let len = self.code >> Self::TAG_BITS;
                // SAFETY: `code` and `msg` were made by `FreeAnswer::of` from a `&'static str`
                // of this length at this address (tag 6 is made nowhere else): the same bytes,
                // valid UTF-8 for the life of the program.
                FreeError::Corrupt(unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(self.msg, len)) })
            }
        })
    }
}

/// A block the quick frees located ([`SlabThread::locate_quick`]): the fields of [`Located`]
/// that they use, kept in registers.
#[derive(Clone, Copy)]
struct QuickAt<'a> {
    /// The block's slab index: below the bracket's capacity, not checked against the heap's
    /// length (docs/design.md §4.5, "No length test"); [`HeapMem::known_slab`] makes it a
    /// [`Slab`] where a path needs one.
    slab: u32,
    /// The slab's descriptor (this process's copy).
    desc: Descriptor<'a>,
    /// The slab's class (in range).
    class: u32,
    /// Blocks per slab of the class.
    blocks: u32,
    /// Block index in the slab (below `blocks`).
    block: u32,
}

/// One attached thread's view of the slab heaps.
pub(crate) struct SlabThread<'a> {
    /// The mapped heap.
    pub mem: &'a HeapMem,
    /// This thread's slot.
    pub slot: u32,
    /// This slot's record.
    pub rec: &'a ThreadRecord,
    /// The heap's recovery setting, read once: whether to log and help.
    pub recoverable: bool,
    /// The heap's `return_pages` setting, read once: empty slabs going global give their pages
    /// back (docs/design.md §4.7).
    return_pages: bool,
    /// `return_pages` under `commit_on_grow`: a slab popped from the global list is reserved
    /// again (read once, like the others: building the header's `Config` on every pop cost the
    /// refill ~150 instructions, script/icount.sh).
    recommit: bool,
    /// No-HWcc model: this slot's mCAS requester, through which every HWcc CAS goes. Boxed,
    /// like `batch_used`: a field with interior mutability (the requester's lock) would keep
    /// the compiler from treating `&SlabThread` as read-only, and it would then load `mem`,
    /// `rec` and the flags again after every store of an operation (script/icount.sh).
    port: Option<Box<McasPort>>,
    /// Limited and no-HWcc models: remote frees are counted per slab in the record and
    /// subtracted with one CAS (mCAS) per run ([`RemoteBatch`]) instead of one each, which also
    /// spares each free its log write-backs and its read of the slab's head from memory.
    batching: bool,
    /// Limited and no-HWcc models: every free block carries its slab's mark in its first word
    /// (written at sizing and at each local free, cleared when the block is handed out), so
    /// that a remote freer, which cannot see the owner's bitset or cached word, still tells
    /// a free block from an allocated one (docs/design.md §4.1, "Free mark").
    marks_free: bool,
    /// Whether remote frees go to their owners' mailboxes (docs/design.md §4.6): in the full
    /// and limited models (the latter with the `MailboxLink` / `MailboxRead` write-back and
    /// invalidation). Without HWcc each push would be one mCAS (2.3 µs in the paper's device)
    /// against one per batch of counted frees (measured: xmalloc at 0.03× of the batched path),
    /// so the no-HWcc model keeps counting its remote frees in batches.
    mailboxes: bool,
    /// Limited and no-HWcc models: a small request is rounded up to a whole cache line before
    /// its class is chosen (every class is then a multiple of 64 bytes), since two blocks
    /// sharing a line could be written on two hosts and one host's write-back of the line
    /// would put its stale copy of the other block over what the other host wrote
    /// (docs/design.md §9.1, "Slab data").
    pub line_granular: bool,
    /// The owner value (`u64::from(owner)`) that sends a free down the full model's local
    /// path: `me()` in the full model, none (`u64::MAX`) in the reduced models, so that one
    /// compare decides both ownership and model ([`SlabThread::free`]).
    local_owner: u64,
    /// Each bracket's data and descriptor array, copied from `mem` (fixed for the mapping's
    /// life): the quick free locates its block from these without first loading `mem`, one
    /// load off the chain that its checks wait on (docs/design.md §4.5).
    ///
    /// In the reduced models a copy that refuses every pointer ([`QuickGeometry::refusing`]):
    /// the full model's inlined quick free then passes their frees on to their own
    /// (`free_quick_marked`) without testing the model on every free of the full model.
    quick: [QuickGeometry; 2],
    /// Each bracket's geometry as copied from `mem`, in every model: the reduced models' quick
    /// free (`free_quick_marked`) finds its bracket through it.
    geometry: [QuickGeometry; 2],
    /// When each batch entry was last used (this thread's remote-free count then): a free of a
    /// slab no entry of its set names applies the set's least recently used one, and the sweep
    /// applies entries unused for [`STALE_BATCH`] frees. Boxed (see `port`).
    batch_used: Box<[AtomicU64; RemoteBatch::ENTRIES]>,
    /// The next batch entry the sweep looks at ([`SlabThread::sweep_stale_batches`]). Boxed
    /// (see `port`).
    batch_sweep: Box<AtomicU64>,
    /// Bytes of slabs this thread pushed to the global list with their pages since it last
    /// popped one, [`WARM_BYTES`] before its first pop, less one slab per claim (T8) since:
    /// at [`WARM_BYTES`], pushes give their pages back ([`SlabThread::keep_pages`]). This handle's alone, not persistent. Boxed
    /// (see `port`).
    warm_pushed: Box<AtomicU64>,
}

/// How many bytes of slabs a thread may push to the global list with their pages after its
/// last pop before its pushes give their pages back (docs/design.md §4.7): 128 small slabs or
/// 8 large ones. Measured on xmalloc (T = 2, 20 000 containers): 32 small slabs still left 16k
/// page faults a run (mimalloc: 0.6k), 128 none beyond what keeping every page gives (1.4k).
const WARM_BYTES: u64 = 4 << 20;

/// Remote frees of this thread after which a batch entry not used since is applied by the sweep
/// (docs/design.md §4.5, "The batch table"): a partial batch keeps its slab from being claimed,
/// so the 256 entries must not hold slabs whose other blocks another thread freed for longer
/// than this. About 550 xmalloc containers: the consumer's stragglers at the bottom of its
/// LIFO usually come back within it.
const STALE_BATCH: u64 = 1 << 16;

/// Batch entries the sweep looks at each time a free opens a new entry: every entry is looked
/// at once per `ENTRIES / SWEEP_STEP` new entries.
const SWEEP_STEP: u64 = 8;

/// A fresh free-block mark for a slab being sized: unpredictable (salted by the heap secret)
/// and different for every sizing of every slab.
fn new_mark(secret: u64, b: Bracket, slab: Slab, generation: u32) -> u64 {
    let x = secret ^ (u64::from(slab.index()) << 2 | b as u64) ^ (u64::from(generation) << 34);
    let x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // Bit 62 set and 63 clear: the high half, which a block waiting in a mailbox carries too
    // (`mailbox::Link`), matches neither a user-space pointer nor a sign-extended integer. Bit 31
    // set: the full mark is never a mailbox link (whose low half is below 2^31).
    ((x ^ (x >> 31)) & !(1 << 63)) | 1 << 62 | 1 << 31 | 1
}

/// Why a located block failed its range checks (kept out of line: only bad input gets here).
#[cold]
fn bad_block(b: Bracket, block: u32, blocks: u32) -> FreeError {
    if blocks as usize > 64 * b.bitset_words() {
        FreeError::Corrupt("descriptor block count out of range")
    } else if block >= blocks {
        FreeError::NotAllocated
    } else {
        FreeError::Corrupt("descriptor class out of range")
    }
}

/// The heap offset of the first block of bitset word `word` of `slab`.
fn block0(mem: &HeapMem, b: Bracket, slab: Slab, word: u32, info: &ClassInfo) -> u64 {
    mem.data_offset(b, slab, word as usize * 64 * info.size as usize) as u64
}

impl<'a> SlabThread<'a> {
    /// The view of slot `slot` (leased by the caller).
    pub(crate) fn new(mem: &'a HeapMem, slot: u32) -> Self {
        // The window has a requester per thread slot (checked when the heap was opened).
        let port = mem.mcas().and_then(|hub| hub.thread_port(slot).ok()).map(Box::new);
        let batching = mem.coherence != crate::layout::Coherence::Full;
        let batch_used = Box::new(std::array::from_fn(|_| AtomicU64::new(0)));
        let config = mem.header.config();
        Self {
            mem,
            slot,
            rec: mem.record(slot),
            recoverable: mem.recoverable(),
            return_pages: config.return_pages,
            recommit: config.return_pages && config.commit_on_grow,
            port,
            batching,
            mailboxes: mem.coherence != crate::layout::Coherence::NoHwcc,
            marks_free: batching,
            line_granular: batching,
            local_owner: if batching { u64::MAX } else { u64::from(slot) + 1 },
            quick: Bracket::ALL.map(|b| {
                let g = mem.quick_geometry(b);
                if batching {
                    g.refusing()
                } else {
                    g
                }
            }),
            geometry: Bracket::ALL.map(|b| mem.quick_geometry(b)),
            batch_used,
            batch_sweep: Box::new(AtomicU64::new(0)),
            // Full until the first pop: a thread that has taken nothing from the global list is
            // not churning slabs through it.
            warm_pushed: Box::new(AtomicU64::new(WARM_BYTES)),
        }
    }

    /// HWcc word `word` as this thread reaches it (through its mCAS requester when the heap
    /// has no HWcc).
    #[inline]
    pub(crate) fn hw<'w>(&'w self, word: &'w AtomicU64) -> Hw<'w> {
        Hw::new(word, self.port.as_deref())
    }

    /// [`SlabThread::hw`] on a path that knows whether the model is full (`coherent`): there
    /// the heap has no mCAS requester, and the requester test folds away.
    #[inline(always)]
    fn hw_in<'w>(&'w self, word: &'w AtomicU64, coherent: bool) -> Hw<'w> {
        Hw::new(word, if coherent { None } else { self.port.as_deref() })
    }

    /// Writes the redo record before an operation's first store.
    #[inline]
    pub(crate) fn log(&self, r: Redo) {
        if self.recoverable {
            // Relaxed store + Release fence: the record is ordered before every later store of
            // the operation, which is all recovery needs (it reads the record after the writer
            // died).
            self.rec.redo.store(r.pack(), Ordering::Relaxed);
            fence(Ordering::Release);
        }
        crash_point!(Logged, r.op.name(), r.flag);
    }

    /// Clears the redo record after an operation's last store.
    #[inline]
    pub(crate) fn clear_log(&self) {
        #[cfg(feature = "crash-points")]
        if let Some(r) = Redo::unpack(self.rec.redo.load(Ordering::Relaxed)) {
            crash_point!(BeforeClear, r.op.name(), r.flag);
        }
        if self.recoverable {
            fence(Ordering::Release);
            self.rec.redo.store(0, Ordering::Relaxed);
        }
    }

    /// Limited and no-HWcc models: before a descriptor's ownership can move, or another host
    /// reads it, writes `(ptr, len)` of it back and evicts it (so that our next read sees the
    /// next owner's writes).
    #[inline]
    fn publish(&self, site: Site, (p, len): (*const u8, usize)) {
        self.mem.swcc.publish(site, p, len);
    }

    /// Limited and no-HWcc models: writes `(ptr, len)` of a descriptor we keep back to memory.
    #[inline]
    fn persist(&self, site: Site, (p, len): (*const u8, usize)) {
        self.mem.swcc.persist(site, p, len);
    }

    /// Limited and no-HWcc models: before reading `(ptr, len)` of a descriptor that another
    /// host may have written, invalidates our copy.
    #[inline]
    fn refresh(&self, site: Site, (p, len): (*const u8, usize)) {
        self.mem.swcc.refresh(site, p, len);
    }

    /// Starts an outer operation (see [`crate::persist::redo::PendingRecord`]): fields first, then the word that
    /// names them. Nothing when recovery is off.
    pub(crate) fn announce(&self, p: Pending, block: u64, dest: u64, desc: u64) {
        if self.recoverable {
            let r = &self.rec.pending;
            r.block.store(block, Ordering::Relaxed);
            r.dest.store(dest, Ordering::Relaxed);
            r.desc.store(desc, Ordering::Relaxed);
            // Release: the fields are ordered before the word (recovery reads them after it).
            fence(Ordering::Release);
            r.word.store(p.pack(), Ordering::Relaxed);
            // Release: the word is ordered before the operation's stores.
            fence(Ordering::Release);
        }
    }

    /// Names the block of the outer allocation in flight, just before it is taken.
    #[inline]
    pub(crate) fn announce_block(&self, block: u64) {
        if self.recoverable {
            self.rec.pending.block.store(block, Ordering::Relaxed);
            // Release: the name is ordered before the store that takes the block.
            fence(Ordering::Release);
        }
    }

    /// Ends the outer operation in flight.
    pub(crate) fn settle(&self) {
        if self.recoverable {
            fence(Ordering::Release);
            self.rec.pending.word.store(0, Ordering::Relaxed);
        }
    }

    /// The detectable-CAS help step for a CAS by this slot with `tag`: records the version of
    /// the word's last writer before we overwrite it (nothing when recovery is off).
    pub(crate) fn helper(&self, tag: Tag) -> impl Fn(u64) + '_ {
        self.helper_in(tag, false)
    }

    /// [`SlabThread::helper`] on a path that knows whether the model is full ([`SlabThread::hw_in`]).
    #[inline(always)]
    fn helper_in(&self, tag: Tag, coherent: bool) -> impl Fn(u64) + '_ {
        move |seen| {
            if self.recoverable {
                detectable::help(seen, tag, |s| self.mem.help(s).map(|w| self.hw_in(w, coherent)));
            }
        }
    }

    /// Starts a detectable-CAS operation: its fresh version. Every
    /// [`detectable::REFRESH_PERIOD`] versions the slot moves its own help word up to the
    /// version it just finished, so that the entry never falls half the version space behind.
    /// Always inlined (a call cost each remote free 11 instructions, script/icount.sh), the
    /// refresh (once per [`detectable::REFRESH_PERIOD`] versions) out of line.
    #[inline(always)]
    pub(crate) fn next_version(&self) -> u32 {
        let v = self.rec.next_version();
        if self.recoverable && detectable::refreshes_at(v) {
            self.refresh_help(v);
        }
        v
    }

    /// [`SlabThread::next_version`]'s refresh of this slot's help word to `v - 1`.
    #[cold]
    #[inline(never)]
    fn refresh_help(&self, v: u32) {
        if let Some(h) = self.mem.help(self.slot) {
            detectable::refresh(&self.hw(h), v - 1);
        }
    }

    #[inline]
    pub(crate) fn me(&self) -> u32 {
        self.slot + 1
    }

    pub(crate) fn tag(&self, version: u32) -> Tag {
        Tag::new(self.slot, version)
    }

    /// Allocates one block of class `class` (1-based) of bracket `b`.
    #[inline]
    pub(crate) fn alloc(&self, b: Bracket, class: u32) -> Result<NonNull<u8>, AllocError> {
        // As for the free (docs/design.md §4.5): the quick path calls nothing, so none of its
        // values has to survive a call; every call is made after it.
        match self.alloc_quick(b, class) {
            Some(block) => Ok(block),
            None => self.alloc_slow(b, class),
        }
    }

    /// The common allocation: a bit of the cached word that is not its last. The word's last
    /// bit (after which the word is refilled, `word_emptied`), an empty word and a class out of
    /// range are the slow path's, which allocates from the start.
    #[inline(always)]
    pub(crate) fn alloc_quick(&self, b: Bracket, class: u32) -> Option<NonNull<u8>> {
        let info = b.class(class)?;
        let cur = &self.rec.lists(b).current[class as usize - 1];
        let bits = cur.bits.load(Ordering::Relaxed);
        let rest = bits & bits.wrapping_sub(1);
        if rest == 0 {
            return None;
        }
        let offset = cur.block0.load(Ordering::Relaxed) as usize + bits.trailing_zeros() as usize * info.size as usize;
        let block = self.mem.block(offset);
        // The block's first word cleared, as in `alloc_with` (which says why).
        // SAFETY: `block` starts a block (at least 8 bytes, 8-aligned) of our current slab.
        free_mark::clear(unsafe { &*(block.as_ptr() as *const AtomicU64) });
        cur.bits.store(rest, Ordering::Relaxed);
        Some(block)
    }

    /// [`SlabThread::alloc`] when the quick path declines.
    #[cold]
    #[inline(never)]
    pub(crate) fn alloc_slow(&self, b: Bracket, class: u32) -> Result<NonNull<u8>, AllocError> {
        self.alloc_with(b, class, |_| {})
    }

    /// Allocates like [`SlabThread::alloc`], calling `announce(offset)` with the block's heap
    /// offset just before the block leaves the free state (the store that takes it): an outer
    /// record written there names the block whichever side of that store a crash falls.
    #[inline(always)]
    pub(crate) fn alloc_with(
        &self,
        b: Bracket,
        class: u32,
        announce: impl FnOnce(usize),
    ) -> Result<NonNull<u8>, AllocError> {
        let info = b.class(class).ok_or(AllocError::Corrupt("class id out of range"))?;
        let cur = &self.rec.lists(b).current[class as usize - 1];
        let mut bits = cur.bits.load(Ordering::Relaxed);
        if bits == 0 {
            self.next_current(b, class, info, cur)?;
            bits = cur.bits.load(Ordering::Relaxed);
            if bits == 0 {
                return Err(AllocError::Corrupt("refilled word has no free block"));
            }
        }
        let rest = bits & bits.wrapping_sub(1);
        let offset = cur.block0.load(Ordering::Relaxed) as usize + bits.trailing_zeros() as usize * info.size as usize;
        announce(offset);
        let block = self.mem.block(offset);
        // Reduced models: the slab's free mark leaves the block. Cleared before the bit is
        // taken: a crash in between leaves a free block without its mark (a later double free
        // of it goes undetected), never an allocated block with one (whose legitimate free
        // would be refused). The full model's free blocks hold no mark (a harvest clears the
        // link), so there the store is idle; it runs in every model because one store costs
        // less than testing the model (script/icount.sh).
        // SAFETY: `block` starts a block (at least 8 bytes, 8-aligned) of our current slab.
        free_mark::clear(unsafe { &*(block.as_ptr() as *const AtomicU64) });
        cur.bits.store(rest, Ordering::Relaxed);
        if rest == 0 {
            // We still hold the block just taken, which T4/T5 rely on.
            self.word_emptied(b, class, info, cur)?;
        }
        Ok(block)
    }

    /// The cached word ran out: take the current slab's next bitset word, or retire the slab
    /// when its bitset is empty too.
    #[cold]
    #[inline(never)]
    fn word_emptied(&self, b: Bracket, class: u32, info: &ClassInfo, cur: &Current) -> Result<(), AllocError> {
        let slab = self.mem.link(b, cur.slab()).map_err(AllocError::Corrupt)?;
        let Some(slab) = slab else {
            return Err(AllocError::Corrupt("current word without a current slab"));
        };
        let d = self.mem.desc(b, slab);
        if d.lowest_word().is_none() && self.mailboxes && self.mailbox_waiting(b) {
            // Full: blocks freed remotely may be waiting, maybe this slab's own (docs/design.md
            // §4.6). A harvested block of the cached word goes straight back into it.
            self.harvest(b);
            if cur.bits.load(Ordering::Relaxed) != 0 {
                return Ok(());
            }
        }
        match d.lowest_word() {
            Some(w) => self.take_word(b, slab, d, w, info, cur),
            None => self.retire(b, class, info, slab, d, cur),
        }
        Ok(())
    }

    /// Moves bitset word `w` of `slab` into the class's current-slab cache.
    fn take_word(&self, b: Bracket, slab: Slab, d: Descriptor<'_>, w: u32, info: &ClassInfo, cur: &Current) {
        self.log(Redo::new(Op::TakeWord, b, slab.index(), w));
        // The cache is filled before the bitset word is cleared: a crash in between leaves the
        // bits in both places, which recovery resolves from the record; never in neither.
        cur.install(slab.link(), w, block0(self.mem, b, slab, w, info), d.bits[w as usize].load(Ordering::Relaxed));
        d.take_word(w);
        self.clear_log();
    }

    /// Gives the class a new current slab with free blocks: the head of its sized list, or a
    /// freshly sized one (T3), taking an unsized slab by T2 (global pop) or T1 (bump) if needed.
    #[cold]
    #[inline(never)]
    fn next_current(&self, b: Bracket, class: u32, info: &ClassInfo, cur: &Current) -> Result<(), AllocError> {
        // Blocks other threads freed come back first (docs/design.md §4.6): their slabs rejoin
        // the sized lists before a new slab is sized.
        self.harvest(b);
        let lists = self.rec.lists(b);
        let head = &lists.sized[class as usize - 1];
        if let Some(slab) = self.mem.link(b, head.load(Ordering::Relaxed)).map_err(AllocError::Corrupt)? {
            let d = self.mem.desc(b, slab);
            let w = d.lowest_word().ok_or(AllocError::Corrupt("sized slab without a free block"))?;
            self.unlink_sized(b, class, d);
            self.take_word(b, slab, d, w, info, cur);
            return Ok(());
        }
        if lists.unsized_head.load(Ordering::Relaxed) == 0 && !self.reclaim_empty_sized(b) && !self.global_pop(b)? {
            self.bump(b)?;
        }
        let slab = self
            .mem
            .link(b, lists.unsized_head.load(Ordering::Relaxed))
            .map_err(AllocError::Corrupt)?
            .ok_or(AllocError::Corrupt("unsized list empty after refill"))?;
        let d = self.mem.desc(b, slab);
        // T3: Local-unsized → Local-sized[class], as the class's current slab.
        self.log(Redo::new(Op::Size, b, slab.index(), class));
        lists.unsized_head.store(d.head.next.load(Ordering::Relaxed), Ordering::Relaxed);
        lists.unsized_len.store(lists.unsized_len.load(Ordering::Relaxed).saturating_sub(1), Ordering::Relaxed);
        d.head.next.store(0, Ordering::Relaxed);
        d.head.class.store(class, Ordering::Relaxed);
        d.head.size.store(info.size, Ordering::Relaxed);
        d.head.blocks.store(info.blocks, Ordering::Relaxed);
        d.head.recip.store(info.recip, Ordering::Relaxed);
        // The generation changes at every sizing, kept marks or not: it is what a detectable
        // free's recovery (docs/design.md §8.4) and a delayed remote free (`slab_changed`)
        // compare.
        let generation = d.head.generation.load(Ordering::Relaxed).wrapping_add(1);
        d.head.generation.store(generation, Ordering::Relaxed);
        // A slab that lost this very class by T7 with every block back in its bitset carries
        // the mark at every block start, each written (and written back) on this host by the
        // local free or the harvest that returned it (docs/design.md §4.1, "Marks kept at
        // re-sizing"): the sizing keeps that mark and writes no block. Cleared first, so that
        // the slab counts as marked again only once this sizing has marked it.
        let kept = self.marks_free && d.head.marked_class.load(Ordering::Relaxed) == class;
        d.head.marked_class.store(0, Ordering::Relaxed);
        if !kept {
            d.head.mark.store(new_mark(self.mem.header.secret, b, slab, generation), Ordering::Relaxed);
        }
        d.fill(info.blocks);
        if self.marks_free {
            if !kept {
                // Non-owners on other hosts read the marks from memory (fenced by the head
                // line's persist below).
                self.mark_all(b, slab, info, d.head.mark.load(Ordering::Relaxed));
            }
            crash_point!(SizeMarked);
            d.head.marked_class.store(class, Ordering::Relaxed);
        }
        // Remote freers on other hosts locate blocks from the head line: it reaches memory
        // before the first block is handed out.
        self.persist(Site::Sized, d.head_line());
        let version = self.next_version();
        remote::reset(
            &self.hw(self.mem.remote(b, slab)),
            info.blocks,
            self.tag(version),
            self.helper(self.tag(version)),
        );
        crash_point!(SizeCounted);
        self.take_word(b, slab, d, 0, info, cur);
        Ok(())
    }

    /// Slabs a refill inspects for [`SlabThread::reclaim_empty_sized`]: bounds the HWcc loads a
    /// refill may cost.
    const RECLAIM_SCAN: usize = 64;

    /// Paper §3.2.1's pathology: a sized slab whose blocks have all come back — some to the
    /// bitset, the rest by remote frees — is empty, yet sits on its class's list for as long as
    /// that class is not allocated. Before taking a slab from the global list or growing the
    /// heap, a refill looks at up to [`Self::RECLAIM_SCAN`] of this thread's sized slabs and
    /// turns the empty ones unsized (T7). Returns whether it found any.
    ///
    /// Sound without a CAS: `free == counter` means no block is outstanding, so no remote free
    /// can still be counted against the slab (every free is counted before the freer lets go).
    fn reclaim_empty_sized(&self, b: Bracket) -> bool {
        let lists = self.rec.lists(b);
        let mut budget = Self::RECLAIM_SCAN;
        let mut found = false;
        for (ci, head) in lists.sized.iter().enumerate() {
            let mut link = head.load(Ordering::Relaxed);
            while let Ok(Some(slab)) = self.mem.link(b, link) {
                if budget == 0 {
                    return found;
                }
                budget -= 1;
                let d = self.mem.desc(b, slab);
                link = d.head.next.load(Ordering::Relaxed);
                if d.head.free.load(Ordering::Relaxed) == remote::count(&self.hw(self.mem.remote(b, slab))) {
                    self.log(Redo::new(Op::Reclaim, b, slab.index(), ci as u32 + 1));
                    self.unlink_sized(b, ci as u32 + 1, d);
                    self.make_unsized(b, slab, d);
                    self.clear_log();
                    found = true;
                }
            }
        }
        found
    }

    /// T4/T5: the allocation just took the current slab's last free block.
    fn retire(&self, b: Bracket, class: u32, info: &ClassInfo, slab: Slab, d: Descriptor<'_>, cur: &Current) {
        self.log(Redo::new(Op::Retire, b, slab.index(), class));
        cur.install(0, 0, 0, 0);
        match remote::retire(&self.hw(self.mem.remote(b, slab)), info.blocks) {
            remote::Retire::Detach => {
                // T4 keeps the slab ours but on no list, and the remote frees of its blocks may
                // hand it to another host (T8) without a word to us: written back *and
                // evicted* (paper §3.2.2), so that a later read of ours comes from memory and
                // a claimer's writes are never overwritten by a dirty line of ours.
                self.publish(Site::Detached, d.bytes());
                ThreadRecord::bump(&self.rec.counters.detaches);
            }
            remote::Retire::Disown => {
                self.log(Redo::new(Op::Retire, b, slab.index(), class).flagged());
                // Release: the descriptor writes above are ordered before the slab stops being
                // ours; the claimer's AcqRel decrement pairs with it through the counter.
                d.head.owner.store(0, Ordering::Release);
                // T5: written back before we return the block we still hold, whose free may
                // be the one that lets the claimer take the slab.
                self.publish(Site::Disowned, d.bytes());
                ThreadRecord::bump(&self.rec.counters.disowns);
            }
        }
        self.clear_log();
    }

    /// Finds the block `ptr` names and checks that it is an allocated block start. Reads only
    /// the descriptor's first line (class geometry is copied there when the slab is sized).
    /// Always inlined: a remote free locates its block once more, and a call would make it
    /// build the `Located` in memory (script/icount.sh: 65 more instructions per remote free).
    #[inline(always)]
    pub(crate) fn locate(&self, ptr: *const u8) -> Result<Located<'a>, FreeError> {
        let (b, offset, rel) = self.bracket_of(ptr)?;
        if !self.mem.swcc.is_coherent() {
            // The slab may belong to another host: read its head line from memory. Not while
            // we batch frees of it: our uncounted frees keep it from being claimed and re-sized.
            if let Some(slab) = self
                .mem
                .slab(b, (rel >> b.slab_shift()) as u32)
                .filter(|&s| !self.batching || self.batch_of(b, s).is_none())
            {
                self.refresh(Site::Located, self.mem.desc(b, slab).head_line());
            }
        }
        self.locate_in(b, offset, rel)
    }

    /// The bytes from `ptr` to the end of its slab when `ptr` lies in a slab of this heap's
    /// data (always mapped heap memory): a range check that reads no slab's metadata, for the
    /// application's hand-over write-backs and invalidations (docs/design.md §9.1).
    pub(crate) fn slab_room(&self, ptr: *const u8) -> Option<usize> {
        let (b, _, rel) = self.bracket_of(ptr).ok()?;
        let shift = b.slab_shift();
        self.mem.slab(b, (rel >> shift) as u32)?;
        Some((1 << shift) - (rel & ((1 << shift) - 1)))
    }

    /// The bracket whose slab data holds `ptr`, with `ptr`'s heap offset and its offset into
    /// that bracket's data.
    #[inline(always)]
    fn bracket_of(&self, ptr: *const u8) -> Result<(Bracket, usize, usize), FreeError> {
        // Wrapping: a pointer below the base becomes a huge offset that no data span contains.
        let offset = (ptr as usize).wrapping_sub(self.mem.base() as usize);
        let (b, rel) = self.mem.bracket_at(offset).ok_or(FreeError::ForeignPointer)?;
        Ok((b, offset, rel))
    }

    #[inline(always)]
    fn locate_in(&self, b: Bracket, offset: usize, rel: usize) -> Result<Located<'a>, FreeError> {
        let mem = self.mem;
        let shift = b.slab_shift();
        let slab = mem.slab(b, (rel >> shift) as u32).ok_or(FreeError::ForeignPointer)?;
        let desc = mem.desc(b, slab);
        // size is 0 exactly when the slab has no class (zeroed at T7, claim and abandon).
        let size = desc.head.size.load(Ordering::Relaxed);
        if size == 0 {
            return Err(FreeError::NotAllocated);
        }
        let class = desc.head.class.load(Ordering::Relaxed);
        let in_slab = (rel & ((1 << shift) - 1)) as u64;
        let block = ((in_slab * desc.head.recip.load(Ordering::Relaxed)) >> 40) as u32;
        if u64::from(block) * u64::from(size) != in_slab {
            return Err(FreeError::InteriorPointer);
        }
        let blocks = desc.head.blocks.load(Ordering::Relaxed);
        // Metadata a crash or a stray write corrupted must not index out of range later: the
        // block must fit the bitset and the class the class tables.
        if block >= blocks
            || blocks as usize > 64 * b.bitset_words()
            || class.wrapping_sub(1) as usize >= b.class_count()
        {
            return Err(bad_block(b, block, blocks));
        }
        Ok(Located { bracket: b, slab, desc, class, size, blocks, block, offset })
    }

    /// Whether the located block is free: in the owner's bitset, or in the owner's cached word.
    #[inline(always)]
    fn is_free(&self, at: &Located<'_>) -> bool {
        self.is_free_in(at, false)
    }

    /// [`SlabThread::is_free`]; `coherent`: the caller knows the model is full (no check).
    #[inline(always)]
    fn is_free_in(&self, at: &Located<'_>, coherent: bool) -> bool {
        self.is_free_of(at, at.desc.head.owner.load(Ordering::Relaxed), coherent)
    }

    /// [`SlabThread::is_free_in`] with the slab's owner as the caller read it.
    #[inline(always)]
    fn is_free_of(&self, at: &Located<'_>, owner: u32, coherent: bool) -> bool {
        // Without coherence another host's bitset and cached word reach memory only when its
        // slabs change hands, so they name blocks it has allocated since: they would refuse
        // good frees. There every free block carries the slab's mark instead (`marks_free`),
        // which the callers check.
        if !coherent && owner != self.me() && !self.mem.swcc.is_coherent() {
            return false;
        }
        if at.desc.is_free(at.block) {
            return true;
        }
        owner != 0
            && owner <= self.mem.layout.slots
            && self.mem.record(owner - 1).lists(at.bracket).current[at.class as usize - 1]
                .holds_seen_from_afar(at.slab.link(), at.block)
    }

    fn mark_word(&self, at: &Located<'_>) -> &AtomicU64 {
        self.block_word(at.offset)
    }

    /// Frees the block at `ptr`, locally if this thread owns its slab, remotely otherwise.
    ///
    /// Inlined into the caller (docs/design.md §4.5, "Quick local free"): the full model's common
    /// local free — not the slab's first or last free block, checked and stored in a few
    /// registers — returns here without a call, a stack frame or a `Result` written through
    /// memory; so does the full model's hand-over to a remote free of a block it located. Every
    /// other free, and every free that any check refuses, goes to [`SlabThread::free_general`],
    /// which checks again from the start (the quick path writes nothing before it is sure) and
    /// says why.
    ///
    /// `outside` frees a pointer that lies in neither bracket's slab data (a huge block, or a
    /// foreign pointer): called only from the paths that found it so, so that no path keeps
    /// `ptr` live across a call to look at the result afterwards.
    #[inline(always)]
    pub(crate) fn free_or(
        &self,
        ptr: *const u8,
        outside: impl FnOnce() -> Result<(), FreeError>,
    ) -> Result<(), FreeError> {
        // The quick path calls nothing and answers in registers: every call is made here, after
        // it, with nothing live across it but `self` and `ptr`, and through one cold entry for
        // everything but the remote hand-over (a second call site, for the reduced models, made
        // the caller's copy save two more registers on every free of the full model;
        // docs/design.md §4.5).
        match self.free_quick(ptr) {
            Quick::Done => Ok(()),
            Quick::Remote(Bracket::Small, slab, class, block) => {
                self.free_remote_small(slab, class, block, self.offset_of(ptr)).result()
            }
            Quick::Remote(Bracket::Large, slab, class, block) => {
                self.free_remote_large(slab, class, block, self.offset_of(ptr)).result()
            }
            Quick::General => self.free_slow(ptr, outside).result(),
        }
    }

    /// The heap offset of `ptr`.
    #[inline(always)]
    fn offset_of(&self, ptr: *const u8) -> usize {
        (ptr as usize).wrapping_sub(self.mem.base() as usize)
    }

    /// Every free the quick paths leave: pointers outside the slab data (`outside`), and
    /// whatever any check of the quick paths refused, in any model (checked again from the
    /// start: the quick paths wrote nothing).
    #[cold]
    #[inline(never)]
    fn free_slow(&self, ptr: *const u8, outside: impl FnOnce() -> Result<(), FreeError>) -> FreeAnswer {
        FreeAnswer::of(self.free_general(ptr, outside))
    }

    /// Limited and no-HWcc models (docs/design.md §4.5, "The reduced models' quick free, inlined"): the
    /// quick local free of the block at `ptr`, inlined into the caller after the full model's
    /// copy (which their refusing geometry sends every pointer past) and answering in registers
    /// as it does: [`Quick::Done`], [`Quick::Remote`] for a block of another owner (whose
    /// remote free, `free_remote_small` / `free_remote_large`, locates it again from memory in
    /// these models), or [`Quick::General`] for everything else (`free_slow`). The checks of [`SlabThread::free_quick_in`] (the block's mark now
    /// also refuses a block freed locally), then the block takes the slab's mark, written back
    /// unfenced (`FreeMarks`), as in the general local free. A free into a slab with no free
    /// block (which may be Detached and claimed since, §4.3) takes the general path.
    #[inline(always)]
    fn free_quick_marked(&self, ptr: *const u8) -> Quick {
        if let Some(rel) = self.geometry[Bracket::Small as usize].rel(ptr) {
            return self.free_quick_marked_in(Bracket::Small, ptr, rel);
        }
        if let Some(rel) = self.geometry[Bracket::Large as usize].rel(ptr) {
            return self.free_quick_marked_in(Bracket::Large, ptr, rel);
        }
        Quick::General
    }

    /// [`SlabThread::free_quick_marked`] of a pointer `rel` bytes into bracket `b`'s data.
    #[inline(always)]
    fn free_quick_marked_in(&self, b: Bracket, ptr: *const u8, rel: usize) -> Quick {
        let Some(QuickAt { slab, desc: d, class, blocks, block }) = self.locate_quick(b, rel) else {
            return Quick::General;
        };
        if d.head.owner.load(Ordering::Relaxed) != self.me() {
            // Another owner's block: the remote free, once its slab is known to lie below the
            // length (the local path needs no such test: a slab we own lies below it).
            return match self.mem.known_slab(b, slab) {
                Some(slab) => Quick::Remote(b, slab, class, block),
                None => Quick::General,
            };
        }
        // SAFETY: the checks above found `ptr` to be the start of a block (at least 8 bytes,
        // 8-aligned) of a sized slab inside the mapping.
        let word = unsafe { &*(ptr as *const AtomicU64) };
        // Freed before (a mailbox, a counted free or a local one, each marked): the general
        // path reports it. The mark is loaded again where it is stored (the same line as the
        // owner, in L1): kept live from here, it took the caller's copy two more saved
        // registers, which every free of the full model then pushed and popped.
        if Link::freed(word.load(Ordering::Relaxed), d.head.mark.load(Ordering::Relaxed)) {
            return Quick::General;
        }
        let (w, bit) = (block / 64, 1u64 << (block % 64));
        let cur = &self.rec.lists(b).current[class as usize - 1];
        if CurrentId::names(cur.id.load(Ordering::Relaxed), slab + 1, w) {
            // One store to the persistent cache, also the free's log record (as allocating).
            let bits = cur.bits.load(Ordering::Relaxed);
            if bits & bit != 0 {
                return Quick::General;
            }
            cur.bits.store(bits | bit, Ordering::Relaxed);
            self.mark_freed::<true>(word, d.head.mark.load(Ordering::Relaxed));
            return Quick::Done;
        }
        let before = d.head.free.load(Ordering::Relaxed);
        // `block < blocks <= 64 * bitset_words` (checked above): the mask only spares the index
        // its bounds check.
        let bits = &d.bits[w as usize & (b.bitset_words() - 1)];
        let old = bits.load(Ordering::Relaxed);
        // A free that moves the slab between lists (T6, T7) is logged: the general path's. In
        // the reduced models it also takes a full slab that is not our current one (our copy
        // may predate a claim, §4.3): `before == 0` covers that.
        if old & bit != 0 || before == 0 || before + 1 == blocks {
            return Quick::General;
        }
        #[cfg(feature = "validate")]
        if !self.mem.known_slab(b, slab).is_some_and(|slab| self.validate(b, slab, d, blocks).is_ok()) {
            return Quick::General;
        }
        d.put_loaded(w, bits, old, bit, before);
        // After the bit, as the general path marks (a crash in between leaves a free block
        // unmarked, never an allocated one marked).
        self.mark_freed::<true>(word, d.head.mark.load(Ordering::Relaxed));
        Quick::Done
    }

    /// [`SlabThread::free_or`] of a slab block: a pointer outside both brackets' slab data is
    /// refused as [`FreeError::ForeignPointer`].
    #[inline(always)]
    pub(crate) fn free(&self, ptr: *const u8) -> Result<(), FreeError> {
        self.free_or(ptr, || Err(FreeError::ForeignPointer))
    }

    /// [`SlabThread::free_or`] of any pointer, in any model: locates the block and frees it
    /// locally or remotely, or says why it cannot; `outside` frees a pointer in neither
    /// bracket's slab data.
    #[inline(always)]
    fn free_general(&self, ptr: *const u8, outside: impl FnOnce() -> Result<(), FreeError>) -> Result<(), FreeError> {
        // One call per constant bracket, so each copy of the fast path folds its geometry.
        match self.bracket_of(ptr) {
            Ok((Bracket::Small, offset, rel)) => self.free_in(Bracket::Small, ptr, offset, rel),
            Ok((Bracket::Large, offset, rel)) => self.free_in(Bracket::Large, ptr, offset, rel),
            Err(_) => outside(),
        }
    }

    /// Full model: the quick local free of the block at `ptr`, or what to do with it instead.
    /// Checks what [`SlabThread::locate_in`] and the local free check — a sized slab (one the
    /// heap's length never reached has none), the start of a block below the slab's count, a class in range, our own slab, the
    /// block's mark (a mailbox or a counted free), the cached word's bit, the bitset's bit — and
    /// stores only once all have passed.
    #[inline(always)]
    fn free_quick(&self, ptr: *const u8) -> Quick {
        // The reduced models' local frees carry marks and may read memory (§4.3): theirs is
        // their own copy below, which their copy of this geometry sends every pointer to
        // (`refusing`), so this path tests no model flag.
        if let Some(rel) = self.quick[Bracket::Small as usize].rel(ptr) {
            return self.free_quick_in(Bracket::Small, ptr, rel);
        }
        if let Some(rel) = self.quick[Bracket::Large as usize].rel(ptr) {
            return self.free_quick_in(Bracket::Large, ptr, rel);
        }
        // Outside both brackets' data of this copy: a reduced model's block (their copy
        // refuses every pointer), a huge block or a foreign pointer. The reduced models' quick
        // free, inlined here, where the full model's frees of its own blocks never come: they
        // keep their registers and layout (the model tested on every refusal instead cost the
        // full model's local free 8 instructions, script/icount.sh). In the full model its copy
        // of the geometry is this one and refuses the pointer again.
        self.free_quick_marked(ptr)
    }

    /// The quick frees' locate (both models' copies, [`SlabThread::free_quick_in`] and
    /// [`SlabThread::free_quick_marked`]): the block `rel` bytes into bracket `b`'s data (`rel`
    /// from one of this handle's copies of the geometry), when the slab is sized, `rel` starts
    /// a block below the slab's count, and the class is in range: the checks of
    /// [`SlabThread::locate_in`], from the handle's copy of the geometry. `None` sends the free
    /// to the general path, which locates it again and says why.
    ///
    /// No test of the heap's length (docs/design.md §4.5, "No length test"): a slab the length
    /// never reached has an all-zero descriptor, which the interior and class checks refuse
    /// (`tests/bad_input.rs`, `a_pointer_past_the_heap_length_is_refused_by_the_quick_free`);
    /// the general path then answers from the length, as before.
    #[inline(always)]
    fn locate_quick(&self, b: Bracket, rel: usize) -> Option<QuickAt<'a>> {
        let shift = b.slab_shift();
        let slab = (rel >> shift) as u32;
        // SAFETY: `slab` is `rel >> shift` of a `rel` that a copy of this mapping's geometry
        // returned (the callers' `rel`).
        let desc = unsafe { self.mem.desc_quick(&self.quick[b as usize], b, slab) };
        let size = desc.head.size.load(Ordering::Relaxed);
        let in_slab = (rel & ((1 << shift) - 1)) as u64;
        let block = ((in_slab * desc.head.recip.load(Ordering::Relaxed)) >> 40) as u32;
        if u64::from(block) * u64::from(size) != in_slab {
            return None;
        }
        // Loaded after the interior check, not with `size`: fewer values live at once, so the
        // caller's copy fits the caller-saved registers (docs/design.md §4.5).
        let class = desc.head.class.load(Ordering::Relaxed);
        let blocks = desc.head.blocks.load(Ordering::Relaxed);
        // The rest of `locate_in`'s checks. No test of `size == 0` (the slab has no class): an
        // unsized slab makes `block * size` differ from a nonzero `in_slab`, and its first block
        // is refused by its class, zeroed with its size (`make_unsized`, and the claim) and
        // checked here (tests/bad_input.rs, `a_pointer_into_an_empty_slab_is_not_allocated`).
        if block >= blocks
            || blocks as usize > 64 * b.bitset_words()
            || class.wrapping_sub(1) as usize >= b.class_count()
        {
            return None;
        }
        Some(QuickAt { slab, desc, class, blocks, block })
    }

    /// [`SlabThread::free_quick`] of a pointer `rel` bytes into bracket `b`'s data.
    #[inline(always)]
    fn free_quick_in(&self, b: Bracket, ptr: *const u8, rel: usize) -> Quick {
        let Some(QuickAt { slab, desc: d, class, blocks, block }) = self.locate_quick(b, rel) else {
            return Quick::General;
        };
        let owner = d.head.owner.load(Ordering::Relaxed);
        if u64::from(owner) != self.local_owner {
            // Under full coherence the block just located is what a remote free would locate
            // again: hand it over, once its slab is known to lie below the length (the remote
            // free touches its counter and the block; the local path needs no such test: a slab
            // we own lies below it).
            return match self.mem.known_slab(b, slab) {
                Some(slab) => Quick::Remote(b, slab, class, block),
                None => Quick::General,
            };
        }
        // SAFETY: the checks above found `ptr` to be the start of a block (at least 8 bytes,
        // 8-aligned) of a sized slab inside the mapping.
        let word = unsafe { &*(ptr as *const AtomicU64) };
        // Freed before (a mailbox or a counted free): the general path reports it.
        if Link::freed(word.load(Ordering::Relaxed), d.head.mark.load(Ordering::Relaxed)) {
            return Quick::General;
        }
        let (w, bit) = (block / 64, 1u64 << (block % 64));
        let cur = &self.rec.lists(b).current[class as usize - 1];
        // The cached word's identity (slab link and word) without its sequence number.
        if CurrentId::names(cur.id.load(Ordering::Relaxed), slab + 1, w) {
            // One store to the persistent cache, also the free's log record (as allocating).
            let bits = cur.bits.load(Ordering::Relaxed);
            if bits & bit != 0 {
                return Quick::General;
            }
            cur.bits.store(bits | bit, Ordering::Relaxed);
            return Quick::Done;
        }
        let before = d.head.free.load(Ordering::Relaxed);
        // `block < blocks <= 64 * bitset_words` (checked above): the mask only spares the index
        // its bounds check.
        let bits = &d.bits[w as usize & (b.bitset_words() - 1)];
        let old = bits.load(Ordering::Relaxed);
        // A free that moves the slab between lists (T6, T7) is logged: the general path's.
        if old & bit != 0 || before == 0 || before + 1 == blocks {
            return Quick::General;
        }
        #[cfg(feature = "validate")]
        if !self.mem.known_slab(b, slab).is_some_and(|slab| self.validate(b, slab, d, blocks).is_ok()) {
            return Quick::General;
        }
        d.put_loaded(w, bits, old, bit, before);
        Quick::Done
    }

    #[inline(always)]
    fn free_in(&self, b: Bracket, ptr: *const u8, offset: usize, rel: usize) -> Result<(), FreeError> {
        let at = match self.locate_in(b, offset, rel) {
            Ok(at) => at,
            // Our copy of another host's descriptor may be stale: locate again from memory.
            Err(_) if !self.mem.swcc.is_coherent() => return self.free_remote(ptr),
            Err(e) => return Err(e),
        };
        let d = at.desc;
        // Without coherence, "owner == me" in our copy is exact unless the slab is Detached:
        // we evict a descriptor whenever we give its slab up (T4 included) and re-read it
        // whenever we take one, but a Detached slab changes hands (T8) without us, and a copy
        // read while it was Detached still names us. Such a copy says the slab is full.
        //
        // `local_owner` folds the model into this test (docs/design.md §15): it is `me()` only in
        // the full model, and no owner at all in the reduced models, whose local frees (marked)
        // take the branch too. So the full model's local free tests no model flag.
        let owner = d.head.owner.load(Ordering::Relaxed);
        // A located block starts at `ptr`, so its first word is read there, not at the base
        // plus its offset (two loads less).
        // SAFETY: `locate_in` found `ptr` to be the start of a block (at least 8 bytes,
        // 8-aligned) of a sized slab inside the mapping.
        let word = unsafe { &*(ptr as *const AtomicU64) };
        if u64::from(owner) != self.local_owner {
            // Under full coherence the block just located is what a remote free would locate
            // again (no head line to read from memory, no batch to consult): hand it over.
            if self.mem.swcc.is_coherent() {
                return match b {
                    Bracket::Small => self.free_remote_small(at.slab, at.class, at.block, at.offset).result(),
                    Bracket::Large => self.free_remote_large(at.slab, at.class, at.block, at.offset).result(),
                };
            }
            if owner == self.me() {
                return self.free_local_in::<true>(b, at, word, Some((ptr, rel)));
            }
            return self.free_remote(ptr);
        }
        // Full model (`local_owner` matched).
        self.free_local_in::<false>(b, at, word, None)
    }

    /// Limited and no-HWcc models: a free that our copy of the head line sends down the local
    /// path, into a full slab that is not our current one. The slab may be Detached (T4) and
    /// claimed since by the last remote free of its blocks (T8) on another host, which re-sized
    /// it: a copy read while it was Detached (by `usable_size`, the checker, a prefetch) would
    /// still name us as owner. So "owner == me" is answered from memory here. Memory names us
    /// only while the slab is ours, or between a claim and the claimer's sizing (T3 writes its
    /// head line back before handing a block out): then no block of the slab is allocated, the
    /// free is a double free, and the block's mark says so.
    #[cold]
    #[inline(never)]
    fn free_owned_full(&self, b: Bracket, ptr: *const u8, offset: usize, rel: usize) -> Result<(), FreeError> {
        if let Some(slab) = self.mem.slab(b, (rel >> b.slab_shift()) as u32) {
            // The whole descriptor: the bitset lines we may hold are as old as the head line.
            self.refresh(Site::OwnerChecked, self.mem.desc(b, slab).bytes());
        }
        let at = match self.locate_in(b, offset, rel) {
            Ok(at) if at.desc.head.owner.load(Ordering::Relaxed) == self.me() => at,
            _ => return self.free_remote(ptr),
        };
        // Memory names us: no need to look again.
        self.free_local_checked(b, at)
    }

    /// A reduced model's local free of a block whose owner was read from memory.
    #[inline(never)]
    fn free_local_checked(&self, b: Bracket, at: Located<'_>) -> Result<(), FreeError> {
        self.free_local_in::<true>(b, at, self.block_word(at.offset), None)
    }

    /// The local free of block `at` (first word `word`) of a slab our copy of its head line
    /// says is ours. `MARK`: a reduced model (free blocks carry the slab's mark). `recheck`:
    /// where to locate the block again if the slab turns out full and not current in a reduced
    /// model ([`SlabThread::free_owned_full`]; `None`: its owner was already read from memory).
    /// `at` by value: by reference it was stored to the stack ahead of every local free.
    #[inline(always)]
    fn free_local_in<const MARK: bool>(
        &self,
        b: Bracket,
        at: Located<'_>,
        word: &AtomicU64,
        recheck: Option<(*const u8, usize)>,
    ) -> Result<(), FreeError> {
        let at = &at;
        let d = at.desc;
        // A block freed before carries its slab's mark: freed locally (reduced models), counted
        // remotely (never returns to the owner) or waiting in a mailbox (returns at the owner's
        // next harvest).
        let mark = d.head.mark.load(Ordering::Relaxed);
        if Link::freed(word.load(Ordering::Relaxed), mark) {
            return Err(FreeError::DoubleFree);
        }
        let (w, bit) = ((at.block / 64) as usize, 1u64 << (at.block % 64));
        let cur = &self.rec.lists(b).current[at.class as usize - 1];
        let id = cur.id();
        if id.slab == at.slab.link() && id.word == w as u32 {
            // The block belongs to the cached word: freeing it is one store to the persistent
            // cache, which is also its log record (as for allocation).
            let bits = cur.bits.load(Ordering::Relaxed);
            if bits & bit != 0 {
                return Err(FreeError::DoubleFree);
            }
            cur.bits.store(bits | bit, Ordering::Relaxed);
            self.mark_freed::<MARK>(word, mark);
            return Ok(());
        }
        let before = d.head.free.load(Ordering::Relaxed);
        // Reduced models: a full slab that is not our current one may be Detached and claimed
        // since ([`SlabThread::free_owned_full`]). (Checked after the mark and the cached word:
        // a stale copy passes both harmlessly, as the claimer's sizing re-marked every block
        // and its allocations cleared theirs, and the slab is not our current one.)
        if MARK && before == 0 && id.slab != at.slab.link() {
            if let Some((ptr, rel)) = recheck {
                return self.free_owned_full(b, ptr, at.offset, rel);
            }
        }
        if d.bits[w].load(Ordering::Relaxed) & bit != 0 {
            return Err(FreeError::DoubleFree);
        }
        #[cfg(feature = "validate")]
        self.validate(b, at.slab, d, at.blocks).map_err(FreeError::Corrupt)?;
        // Only a free that moves the slab (its first free block: T6; its last: T7) is logged;
        // see `Op::LocalFree` for why the others need no record.
        if before == 0 || before + 1 == at.blocks {
            self.log(Redo::new(Op::LocalFree, b, at.slab.index(), at.block));
            let free = d.put(at.block);
            // Marked while the slab is still ours: T7 may hand it to the global list below,
            // and a mark written after that could land on a block of its next sizing.
            self.mark_freed::<MARK>(word, mark);
            self.after_local_free(b, at.class, at.slab, free == at.blocks);
            self.clear_log();
        } else {
            d.put(at.block);
            self.mark_freed::<MARK>(word, mark);
        }
        Ok(())
    }

    /// Limited and no-HWcc models: a block the owner just freed takes its slab's mark, after
    /// its bit (a crash in between leaves the block free and unmarked: a later double free of
    /// it goes undetected, but no legitimate free is refused) and before the slab can change
    /// hands.
    #[inline(always)]
    fn mark_freed<const MARK: bool>(&self, word: &AtomicU64, mark: u64) {
        if MARK {
            // The bit is set, the mark not yet (recovery must not let the slab's next sizing
            // keep its marks, docs/design.md §4.1).
            crash_point!(LocalFreeBitSet);
            free_mark::set(word, mark);
            // A non-owner on another host reads the mark from memory. Unfenced: whatever tells
            // that host about the block (the application's hand-over, or a protocol step) fences
            // after it.
            self.mem.swcc.persist_line_unfenced(Site::FreeMarks, word as *const AtomicU64 as *const u8);
        }
    }

    /// T3 in the reduced models: writes `mark` into every block of `slab` and writes back
    /// (keeping them, unfenced) the lines holding the marks: one a block, since every block
    /// there is a whole number of lines (docs/design.md §9.1, "Slab data"), so no other line of
    /// the slab is touched. One pass with one dispatch on the flush instructions (a slab of
    /// 64-byte blocks has 512 marks; per-mark offset arithmetic and dispatch cost the refill
    /// ~60 instructions a block, script/icount.sh).
    fn mark_all(&self, b: Bracket, slab: Slab, info: &ClassInfo, mark: u64) {
        let size = info.size as usize;
        debug_assert!(size % crate::coherence::flush::LINE == 0, "reduced-model classes are whole lines");
        let first = self.mem.block(self.mem.data_offset(b, slab, 0)).as_ptr();
        // SAFETY: `slab` is sized to `info` and ours (T3, before any block is handed out): its
        // `blocks` blocks of `size` bytes (a multiple of 8) start at `first`, which is
        // slab-aligned, inside its mapped data.
        unsafe {
            self.mem.swcc.store_and_persist_strided_unfenced(Site::FreeMarks, first, size, info.blocks as usize, mark)
        };
    }

    /// Limited and no-HWcc models: before `slab` (with free blocks) can be taken by another
    /// host, writes its data lines back and evicts them (fenced).
    fn publish_data(&self, b: Bracket, slab: Slab) {
        if self.marks_free {
            let first = self.mem.block(self.mem.data_offset(b, slab, 0)).as_ptr() as *const u8;
            self.mem.swcc.publish(Site::SlabData, first, b.spec().slab_size());
        }
    }

    /// The first byte of block `at`.
    #[inline(always)]
    fn block_bytes(&self, at: &Located<'_>) -> *const u8 {
        self.mem.block(at.offset).as_ptr()
    }

    /// The first word of the block at heap offset `offset` (a block of a sized slab).
    #[inline(always)]
    fn block_word(&self, offset: usize) -> &AtomicU64 {
        let p = self.mem.block(offset);
        // SAFETY: blocks are at least 8 bytes and 8-aligned (class sizes are multiples of 8 and
        // slabs are aligned), inside a mapped slab below the heap length.
        unsafe { &*(p.as_ptr() as *const AtomicU64) }
    }

    /// T6 / T7, unless the slab is its class's current slab (which stays current).
    #[cold]
    #[inline(never)]
    fn after_local_free(&self, b: Bracket, class: u32, slab: Slab, entirely_free: bool) {
        let d = self.mem.desc(b, slab);
        let lists = self.rec.lists(b);
        if lists.current[class as usize - 1].slab() == slab.link() {
            return;
        }
        if entirely_free {
            // T7: back to the unsized list. It was on the sized list iff it had a free block
            // before this one.
            if d.head.free.load(Ordering::Relaxed) > 1 {
                self.unlink_sized(b, class, d);
            }
            // Every block came back to the bitset through this owner, each marked here (reduced
            // models): unless a crash intervened (recovery clears it), its next sizing for this
            // class keeps the marks (docs/design.md §4.1, "Marks kept at re-sizing").
            let marked = d.head.marked_class.load(Ordering::Relaxed) == class;
            self.make_unsized(b, slab, d);
            if marked {
                d.head.marked_class.store(class, Ordering::Relaxed);
            }
            self.trim_cache(b);
        } else {
            // T6: Detached → Local-sized. A local free was never counted remotely, so the slab
            // cannot be claimed while we re-attach it.
            self.link_sized(b, class, slab, d);
        }
    }

    /// T10 / T8: a free of a block in a slab this thread does not own.
    #[cold]
    #[inline(never)]
    fn free_remote(&self, ptr: *const u8) -> Result<(), FreeError> {
        let at = &self.locate(ptr)?;
        if self.is_free(at) {
            return Err(FreeError::DoubleFree);
        }
        if let Some(done) = self.try_mailbox(at, false) {
            return done;
        }
        // Only the batching models hold batches: the full model never branches on them here
        // (scanning the 32 empty entries on every remote free cost it ~770 instructions a free).
        if self.batching {
            // A detectable free (pending record set) stays a free of its own: its recovery
            // decides from the block alone; the batches go first.
            if self.rec.pending.word.load(Ordering::Relaxed) == 0 {
                return self.free_batched(at);
            }
            self.flush_remote_batch();
        }
        self.free_remote_counted(at, false)
    }

    /// [`SlabThread::free_remote_at`] of a small-bracket block.
    #[cold]
    #[inline(never)]
    fn free_remote_small(&self, slab: Slab, class: u32, block: u32, offset: usize) -> FreeAnswer {
        if self.batching {
            // The reduced models' quick free located the block in our copy of the head line,
            // which may be stale (§4.3): the remote free locates it again from memory.
            return FreeAnswer::of(self.free_remote(self.mem.block(offset).as_ptr()));
        }
        FreeAnswer::of(self.free_remote_at(Bracket::Small, slab, class, block, offset))
    }

    /// [`SlabThread::free_remote_at`] of a large-bracket block.
    #[cold]
    #[inline(never)]
    fn free_remote_large(&self, slab: Slab, class: u32, block: u32, offset: usize) -> FreeAnswer {
        if self.batching {
            // As in `free_remote_small`.
            return FreeAnswer::of(self.free_remote(self.mem.block(offset).as_ptr()));
        }
        FreeAnswer::of(self.free_remote_at(Bracket::Large, slab, class, block, offset))
    }

    /// [`SlabThread::free_remote`] in the full model, of a block the caller located: no head
    /// line to read from memory and no batch (script/icount.sh: 30 instructions less than
    /// locating it again). One copy per bracket, so that each folds its geometry (33 less).
    #[inline(always)]
    fn free_remote_at(&self, b: Bracket, slab: Slab, class: u32, block: u32, offset: usize) -> Result<(), FreeError> {
        // In registers: a `Located` passed by reference was stored ahead of every local free
        // (17 instructions each).
        let desc = self.mem.desc(b, slab);
        let (size, blocks) = (desc.head.size.load(Ordering::Relaxed), desc.head.blocks.load(Ordering::Relaxed));
        let at = Located { bracket: b, slab, desc, class, size, blocks, block, offset };
        // Read once for both uses (a relaxed atomic load is not merged by the compiler). An
        // owner that changes meanwhile is the race every push has anyway: a block pushed to a
        // slot that no longer owns its slab is counted at that slot's harvest.
        let owner = desc.head.owner.load(Ordering::Relaxed);
        if self.is_free_of(&at, owner, true) {
            return Err(FreeError::DoubleFree);
        }
        if let Some(done) = self.try_mailbox_of(&at, owner, true) {
            return done;
        }
        self.free_remote_counted(&at, true)
    }

    /// T10 / T8 of the block `at`, not free: marked and counted by one decrement of its
    /// slab's counter. `coherent`: the caller knows the model is full (no write-back).
    #[inline(always)]
    fn free_remote_counted(&self, at: &Located<'_>, coherent: bool) -> Result<(), FreeError> {
        let mark = at.desc.head.mark.load(Ordering::Relaxed);
        let b = at.bracket;
        let version = self.next_version();
        // Logged before the mark: recovery completes the free, mark included.
        if self.recoverable {
            self.rec.remote_block.store(at.block, Ordering::Relaxed);
        }
        self.log(Redo::new(Op::RemoteFree, b, at.slab.index(), version));
        if free_mark::claim(self.mark_word(at), mark, mark).is_err() {
            self.clear_log();
            return Err(FreeError::DoubleFree);
        }
        crash_point!(RemoteFreeMarked);
        self.count_marked(at, version, coherent)
    }

    /// The counting half of a remote free whose block already carries the full mark (the
    /// operation logged as `RemoteFree` with `version`): one decrement of the slab's counter,
    /// T8 if it reaches 0.
    #[inline(always)]
    fn count_marked(&self, at: &Located<'_>, version: u32, coherent: bool) -> Result<(), FreeError> {
        let b = at.bracket;
        // The block's lines (its mark, and what the application wrote here) must not be
        // written back later over the block's next life.
        if !coherent {
            self.mem.swcc.publish(Site::RemoteMark, self.block_bytes(at), at.size as usize);
        }
        let tag = self.tag(version);
        let outcome =
            remote::decrement(&self.hw_in(self.mem.remote(b, at.slab), coherent), tag, self.helper_in(tag, coherent));
        ThreadRecord::bump(&self.rec.counters.remote_frees);
        let result = match outcome {
            Ok(remote::Decrement::Counted) => Ok(()),
            Ok(remote::Decrement::Claimed) => {
                self.claim(b, at.slab, version);
                self.trim_cache(b);
                Ok(())
            }
            Err(remote::Underflow) => Err(FreeError::DoubleFree),
        };
        self.clear_log();
        result
    }

    /// The mailbox route of a remote free of `at` (docs/design.md §4.6): `None` when the free
    /// must be counted instead, because the slab has no live owner to reuse the block, the
    /// free is detectable (its recovery decides from the block alone, which a block reused
    /// after a harvest would mislead), or the block has no mailbox name.
    #[inline(always)]
    fn try_mailbox(&self, at: &Located<'_>, coherent: bool) -> Option<Result<(), FreeError>> {
        self.try_mailbox_of(at, at.desc.head.owner.load(Ordering::Relaxed), coherent)
    }

    /// [`SlabThread::try_mailbox`] with the slab's owner as the caller read it.
    #[inline(always)]
    fn try_mailbox_of(&self, at: &Located<'_>, owner: u32, coherent: bool) -> Option<Result<(), FreeError>> {
        // The full model (`coherent`) always has mailboxes: no flag to test there.
        if !coherent && !self.mailboxes {
            return None;
        }
        if owner == 0 || owner == self.me() || owner > self.mem.layout.slots {
            return None;
        }
        if self.rec.pending.word.load(Ordering::Relaxed) != 0 {
            return None;
        }
        let id = BlockId { slab: at.slab.index(), block: at.block }.payload(at.bracket.block_shift())?;
        let head = self.mem.mailbox(at.bracket, owner - 1)?;
        Some(self.free_to_mailbox(at, owner, id, head, coherent))
    }

    /// T11: pushes the block `at` (mailbox name `id`) on the mailbox `head` of its slab's owner
    /// `owner` (slot + 1). The block's first word becomes a link carrying the mark's high half
    /// (claimed by one CAS, so a second free of it is a double free); the push CAS publishes it.
    /// A closed mailbox (the owner detached meanwhile) turns the free into a counted one.
    /// Always inlined: it is the usual remote free now, folded into each bracket's copy of the
    /// full model's path as the counted free is.
    #[inline(always)]
    fn free_to_mailbox(
        &self,
        at: &Located<'_>,
        owner: u32,
        id: u32,
        head: &AtomicU64,
        coherent: bool,
    ) -> Result<(), FreeError> {
        let mark = at.desc.head.mark.load(Ordering::Relaxed);
        let word = self.mark_word(at);
        let version = self.next_version();
        if self.recoverable {
            self.rec.remote_block.store(at.block, Ordering::Relaxed);
            self.rec.remote_owner.store(owner, Ordering::Relaxed);
        }
        // Logged before the block is claimed: recovery finishes the free either way.
        self.log(Redo::new(Op::MailboxPush, at.bracket, at.slab.index(), version));
        if free_mark::claim(word, Link { next: mailbox::EMPTY }.pack(mark), mark).is_err() {
            self.clear_log();
            return Err(FreeError::DoubleFree);
        }
        crash_point!(MailboxClaimed);
        let tag = self.tag(version);
        // Limited model: the owner reuses the block on its own host. Every line of it we hold
        // (the link, and what the application wrote here) is written back and evicted before
        // the push CAS hands the block over, so that the owner reads the link from memory and
        // no dirty line of ours is written back later over the block's next life. The first
        // attempt writes back the whole block; a retry rewrote only the link's line.
        let mut span = at.size as usize;
        let pushed = mailbox::push(
            &self.hw_in(head, coherent),
            tag,
            id,
            |next| {
                // The block is ours until the CAS succeeds: a plain store of its link.
                word.store(Link { next }.pack(mark), Ordering::Relaxed);
                if !coherent {
                    self.mem.swcc.publish(Site::MailboxLink, self.block_bytes(at), span);
                    span = 8;
                }
            },
            self.helper_in(tag, coherent),
        );
        if pushed.is_ok() {
            ThreadRecord::bump(&self.rec.counters.remote_frees);
            self.clear_log();
            return Ok(());
        }
        self.count_instead(at.bracket, at.slab, at.class, at.block, at.offset, mark, coherent)
    }

    /// A push that found the mailbox closed: nobody will harvest the block. Counted instead, as
    /// a logged remote free of its own. The block by its fields, not a `Located`: a reference
    /// passed out of line made every remote free build one in memory (script/icount.sh).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn count_instead(
        &self,
        b: Bracket,
        slab: Slab,
        class: u32,
        block: u32,
        offset: usize,
        mark: u64,
        coherent: bool,
    ) -> Result<(), FreeError> {
        let desc = self.mem.desc(b, slab);
        let (size, blocks) = (desc.head.size.load(Ordering::Relaxed), desc.head.blocks.load(Ordering::Relaxed));
        let at = &Located { bracket: b, slab, desc, class, size, blocks, block, offset };
        let word = self.mark_word(at);
        let version = self.next_version();
        self.log(Redo::new(Op::RemoteFree, b, slab.index(), version));
        word.store(mark, Ordering::Relaxed);
        self.count_marked(at, version, coherent)
    }

    /// Whether this slot's mailbox of bracket `b` holds blocks (one HWcc load).
    #[inline]
    fn mailbox_waiting(&self, b: Bracket) -> bool {
        self.mem.mailbox(b, self.slot).is_some_and(|head| mailbox::has_blocks(&self.hw(head)))
    }

    /// Takes back the blocks waiting in this slot's mailbox of bracket `b`, if any: the refill's
    /// harvest (docs/design.md §4.6).
    #[cold]
    #[inline(never)]
    pub(crate) fn harvest(&self, b: Bracket) {
        if !self.mailboxes {
            return;
        }
        if self.mailbox_waiting(b) {
            self.take_mailbox(b, mailbox::EMPTY);
        }
    }

    /// Opens this slot's mailboxes (a new holder), taking back anything waiting in them.
    pub(crate) fn open_mailboxes(&self) {
        if !self.mailboxes {
            return;
        }
        for b in Bracket::ALL {
            self.take_mailbox(b, mailbox::EMPTY);
        }
    }

    /// Closes this slot's mailboxes (its holder detaching) and takes back what they held: later
    /// remote frees of its slabs are counted instead.
    pub(crate) fn close_mailboxes(&self) {
        if !self.mailboxes {
            return;
        }
        for b in Bracket::ALL {
            self.take_mailbox(b, mailbox::CLOSED);
        }
    }

    /// Takes the chain of this slot's mailbox of bracket `b`, leaving the head at `to`, and
    /// returns its blocks. Logged (`Op::Harvest`): the chain is named in the record before the
    /// CAS, so a crash after it loses no block.
    fn take_mailbox(&self, b: Bracket, to: u32) {
        let Some(head) = self.mem.mailbox(b, self.slot) else { return };
        let version = self.next_version();
        let redo = Redo::new(Op::Harvest, b, 0, version);
        self.log(if to == mailbox::CLOSED { redo.flagged() } else { redo });
        let tag = self.tag(version);
        let taken = mailbox::take(
            &self.hw(head),
            tag,
            to,
            |chain| {
                let h = (chain != mailbox::EMPTY).then_some(Harvest { bracket: b, cursor: chain });
                self.rec.harvest.store(h.map_or(0, Harvest::pack), Ordering::Relaxed);
            },
            self.helper(tag),
        );
        if taken.is_none() {
            // An earlier attempt may have announced a chain it then failed to take.
            self.rec.harvest.store(0, Ordering::Relaxed);
        }
        // Only where a chain was taken: the case whose recovery must walk it.
        if taken.is_some_and(|chain| chain != mailbox::EMPTY) {
            crash_point!(HarvestTaken);
        }
        self.clear_log();
        self.resume_harvest(false);
    }

    /// Returns the blocks of the harvest in progress (the record's `harvest`), one at a time:
    /// to this slot's bitsets when it owns their slab (a local free, T6/T7 as usual), else
    /// counted on the slab's counter (a push that raced with a disown or abandon of ours).
    /// Resumable at any block: recovery calls it (`resumed`) to finish a dead holder's harvest,
    /// whose first block may have been returned already.
    pub(crate) fn resume_harvest(&self, resumed: bool) {
        let Some(h) = Harvest::unpack(self.rec.harvest.load(Ordering::Relaxed)) else { return };
        let b = h.bracket;
        // Bounded walk: a chain cannot hold more blocks than the heap has; a corrupt or cyclic
        // chain is cut there (its rest leaked, never a hang).
        let mut budget = u64::from(self.mem.refresh_length(b)) * 64 * b.bitset_words() as u64;
        let mut cursor = h.cursor;
        let mut returned = 0u64;
        while cursor != mailbox::EMPTY && budget > 0 {
            budget -= 1;
            let Some(next) = self.return_harvested(b, cursor, resumed && returned == 0) else { break };
            self.rec.harvest.store(
                if next == mailbox::EMPTY { 0 } else { Harvest { bracket: b, cursor: next }.pack() },
                Ordering::Relaxed,
            );
            returned += 1;
            cursor = next;
        }
        // Ends here even if the walk was cut: what is left is unreachable.
        self.rec.harvest.store(0, Ordering::Relaxed);
        // The cleared links' write-backs are complete before anything else we do.
        self.mem.swcc.fence();
        let counter = &self.rec.counters.harvested;
        counter.store(counter.load(Ordering::Relaxed) + returned, Ordering::Relaxed);
    }

    /// Returns the harvested block named `cursor` and gives the payload of the next one, or
    /// `None` when the name or the block's link is corrupt. Idempotent: a block already
    /// returned (a crash before the cursor moved) is recognised and skipped, its successor read
    /// from the record.
    fn return_harvested(&self, b: Bracket, cursor: u32, maybe_returned: bool) -> Option<u32> {
        let id = BlockId::from_payload(cursor, b.block_shift())?;
        let slab = self.mem.slab(b, id.slab)?;
        let d = self.mem.desc(b, slab);
        let owner = d.head.owner.load(Ordering::Relaxed);
        if owner != self.me() {
            // Not ours any more: we published the descriptor when we let it go.
            self.refresh(Site::Located, d.head_line());
        }
        let (size, blocks) = (d.head.size.load(Ordering::Relaxed), d.head.blocks.load(Ordering::Relaxed));
        let class = d.head.class.load(Ordering::Relaxed);
        // The slab keeps its sizing while the block waits: the block is neither free nor
        // counted, so the slab can be neither emptied nor claimed.
        if size == 0 || id.block >= blocks || blocks as usize > 64 * b.bitset_words() || b.class(class).is_none() {
            return None;
        }
        let offset = self.mem.data_offset(b, slab, id.block as usize * size as usize);
        let at = Located { bracket: b, slab, desc: d, class, size, blocks, block: id.block, offset };
        let word = self.mark_word(&at);
        let line = word as *const AtomicU64 as *const u8;
        // Limited model: the pusher wrote the link on its host and wrote it back before its
        // push CAS (`Site::MailboxLink`), which our take's Acquire CAS follows: read it from
        // memory. (Our own copy of the line is clean: we last wrote it when we handed the
        // block out, and the application wrote it back when it handed the block over.)
        self.refresh(Site::MailboxRead, (line, 8));
        let mark = d.head.mark.load(Ordering::Relaxed);
        let raw = word.load(Ordering::Relaxed);
        let next = match Link::unpack(raw, mark) {
            Some(link) => {
                // Kept before the block changes: a crash after that finds the successor here.
                self.rec.harvest_next.store(link.next, Ordering::Relaxed);
                link.next
            }
            None => self.rec.harvest_next.load(Ordering::Relaxed),
        };
        if owner == self.me() {
            let free_word = if self.marks_free { mark } else { 0 };
            // Only the first block of a resumed harvest can have been returned already: every
            // other one was in the chain a moment ago, so neither free nor allocated.
            if maybe_returned && self.is_free_in(&at, true) {
                // Returned before the crash, its link perhaps not yet cleared (a crash between
                // the bit and the clear). Its slab is still ours and sized (checked above), so
                // it has not moved since: the word is still this block's.
                if word.load(Ordering::Relaxed) != free_word {
                    self.clear_returned(word, free_word);
                }
            } else {
                // Neither a link nor returned: not a block of this chain.
                Link::unpack(raw, mark)?;
                // Writes the free word itself, before any list move. Nothing of the block is
                // touched after it: the return may have emptied the slab and sent it to the
                // global list (T7, T9), where another thread can size it and hand this block out
                // at once (docs/design.md §4.6; a second clear here used to land on that
                // block's new bytes).
                self.return_block(&at, word, free_word);
            }
            crash_point!(HarvestReturned);
        } else if raw != mark {
            Link::unpack(raw, mark)?;
            // Counted like any remote free of a slab we do not own (the link becomes the mark).
            let version = self.next_version();
            if self.recoverable {
                self.rec.remote_block.store(at.block, Ordering::Relaxed);
            }
            self.log(Redo::new(Op::RemoteFree, b, slab.index(), version));
            word.store(mark, Ordering::Relaxed);
            let _ = self.count_marked(&at, version, self.mem.swcc.is_coherent());
        }
        crash_point!(HarvestCleared);
        Some(next)
    }

    /// Puts the harvested block `at` (first word `word`) of a slab this slot owns back as free:
    /// into the class's cached word if it belongs to it, else into the bitset with the list
    /// moves of a local free (T6/T7, logged as `LocalFree` when the slab moves). The block's
    /// word becomes `free_word` (its link cleared; the plain mark in the reduced models) after
    /// its bit and *before* the slab can move: T7 may push the slab to the global list (T9),
    /// and a store after that could land on a block of the slab's next sizing, handed out by
    /// another thread meanwhile (as a local free marks before its list move). A block already
    /// free (pushed by a double free that raced the owner's own free) is only given its word:
    /// never counted free twice.
    fn return_block(&self, at: &Located<'_>, word: &AtomicU64, free_word: u64) {
        let (b, d) = (at.bracket, at.desc);
        let (w, bit) = ((at.block / 64) as usize, 1u64 << (at.block % 64));
        let cur = &self.rec.lists(b).current[at.class as usize - 1];
        let id = cur.id();
        if id.slab == at.slab.link() && id.word == w as u32 {
            cur.bits.store(cur.bits.load(Ordering::Relaxed) | bit, Ordering::Relaxed);
            self.clear_returned(word, free_word);
            return;
        }
        if d.bits[w].load(Ordering::Relaxed) & bit != 0 {
            self.clear_returned(word, free_word);
            return;
        }
        let before = d.head.free.load(Ordering::Relaxed);
        if before == 0 || before + 1 == at.blocks {
            self.log(Redo::new(Op::LocalFree, b, at.slab.index(), at.block));
            let free = d.put(at.block);
            self.clear_returned(word, free_word);
            self.after_local_free(b, at.class, at.slab, free == at.blocks);
            self.clear_log();
        } else {
            d.put(at.block);
            self.clear_returned(word, free_word);
        }
    }

    /// A harvested block's word becomes `free_word`: cleared in the full model (a free block
    /// must not look freed there: its next owner's free would be refused); the plain mark in
    /// the reduced models, written back like a local free's (`Site::FreeMarks`: a non-owner on
    /// another host reads it from memory to refuse a second free), fenced at the end of the
    /// walk.
    #[inline(always)]
    fn clear_returned(&self, word: &AtomicU64, free_word: u64) {
        word.store(free_word, Ordering::Relaxed);
        self.mem.swcc.persist_line_unfenced(Site::FreeMarks, word as *const AtomicU64 as *const u8);
    }

    /// A remote free joining this slot's batch of its slab (limited and no-HWcc models). The
    /// slab's entry lives in one set of [`RemoteBatch::WAYS`] entries ([`RemoteBatch::set_of`]);
    /// a full batch, or the set's least recently used entry when every entry of the set names
    /// another slab, is applied first.
    fn free_batched(&self, at: &Located<'_>) -> Result<(), FreeError> {
        let entry = |i: usize| RemoteBatch::unpack(self.rec.remote_batch[i].load(Ordering::Relaxed));
        let mine = |x: &RemoteBatch| x.bracket == at.bracket && x.slab == at.slab.index();
        let set = RemoteBatch::set_of(at.bracket, at.slab.index());
        let ways = set..set + RemoteBatch::WAYS;
        let i = match ways.clone().find(|&i| entry(i).is_some_and(|x| mine(&x))) {
            Some(i) => i,
            None => match ways.clone().find(|&i| entry(i).is_none()) {
                Some(i) => i,
                None => ways.min_by_key(|&i| self.batch_used[i].load(Ordering::Relaxed)).unwrap_or(set),
            },
        };
        let before = match entry(i) {
            Some(x) if mine(&x) && x.count < RemoteBatch::LIMIT => Some(x),
            Some(_) => {
                self.flush_entry(i);
                None
            }
            None => None,
        };
        let count = before.map_or(1, |x| x.count + 1);
        // Counted before the mark: a crash in between frees the block (recovery applies the
        // batch), never leaks it.
        self.set_batch(i, Some(RemoteBatch { bracket: at.bracket, slab: at.slab.index(), count }));
        crash_point!(RemoteBatched);
        let mark = at.desc.head.mark.load(Ordering::Relaxed);
        // Read with the mark, from the same line: a slab sized again for the same class keeps
        // its mark (docs/design.md §4.1, "Marks kept at re-sizing"), never its generation.
        let generation = at.desc.head.generation.load(Ordering::Relaxed);
        if free_mark::claim(self.mark_word(at), mark, mark).is_err() {
            self.set_batch(i, before);
            return Err(FreeError::DoubleFree);
        }
        // The first free of a batch located its block with no uncounted free of ours holding
        // the slab: by now the slab's last free may have claimed it (T8, size zeroed; its pages
        // perhaps given back, the mark gone from the word), and a second free of the block — a
        // double free delayed between its locate and its claim — took the word
        // (tests/hostile_remote.rs saw 1 such block in about 25 rounds). Read the head line
        // again: a slab no longer of this sizing refuses the free, as a locate now would. Later
        // frees of the batch need nothing: our uncounted free keeps the slab from being claimed
        // (docs/design.md §4.5).
        if before.is_none() && self.slab_changed(at, mark, generation) {
            self.set_batch(i, None);
            return Err(FreeError::DoubleFree);
        }
        crash_point!(RemoteBatchMarked);
        // Fenced once per batch, before its subtraction.
        self.mem.swcc.publish_unfenced(Site::RemoteMark, self.block_bytes(at), at.size as usize);
        ThreadRecord::bump(&self.rec.counters.remote_frees);
        // Relaxed: this thread's own bookkeeping.
        self.batch_used[i].store(self.rec.counters.remote_frees.load(Ordering::Relaxed), Ordering::Relaxed);
        // A batch holding every block of its slab can hold no more: applied now (it claims the
        // slab, T8), not left to take an entry until another slab evicts it, and that eviction
        // flush another slab's partial batch early (docs/design.md §15.1).
        if count == at.blocks {
            self.flush_entry(i);
        } else if before.is_none() {
            self.sweep_stale_batches();
        }
        Ok(())
    }

    /// Applies the entries among the next [`SWEEP_STEP`] that no free of this thread has used
    /// for [`STALE_BATCH`] frees: a partial batch of a slab whose other blocks were freed by
    /// other threads (or counted before by an eviction) keeps the slab from being claimed
    /// until it is applied, and with 256 entries an eviction may be long in coming. Called
    /// when a free opens a new entry (about once per slab a thread frees into), so the cost
    /// is a few loads per slab, not per free.
    #[cold]
    #[inline(never)]
    fn sweep_stale_batches(&self) {
        // Relaxed: this thread's own bookkeeping.
        let now = self.rec.counters.remote_frees.load(Ordering::Relaxed);
        let start = self.batch_sweep.load(Ordering::Relaxed);
        self.batch_sweep.store(start.wrapping_add(SWEEP_STEP), Ordering::Relaxed);
        for k in 0..SWEEP_STEP {
            let i = (start.wrapping_add(k) % RemoteBatch::ENTRIES as u64) as usize;
            if self.rec.remote_batch[i].load(Ordering::Relaxed) != 0
                && now.wrapping_sub(self.batch_used[i].load(Ordering::Relaxed)) >= STALE_BATCH
            {
                self.flush_entry(i);
            }
        }
    }

    /// Whether the slab of `at`, located with free mark `mark` in sizing `generation`, has lost
    /// that sizing since: its head line, read from memory, has no class, another mark or
    /// another generation (a sizing that kept the marks changed only the generation).
    #[cold]
    #[inline(never)]
    fn slab_changed(&self, at: &Located<'_>, mark: u64, generation: u32) -> bool {
        self.refresh(Site::Located, at.desc.head_line());
        at.desc.head.size.load(Ordering::Relaxed) == 0
            || at.desc.head.mark.load(Ordering::Relaxed) != mark
            || at.desc.head.generation.load(Ordering::Relaxed) != generation
    }

    /// Writes batch entry `i`. Like the rest of the record it stays in this host's caches: an
    /// adopter runs on this host (see [`crate::coherence`], "Crashes").
    fn set_batch(&self, i: usize, batch: Option<RemoteBatch>) {
        self.rec.remote_batch[i].store(batch.map_or(0, RemoteBatch::pack), Ordering::Relaxed);
    }

    /// Applies every batch of remote frees this slot holds: before any other remote free, at
    /// detach, and in recovery.
    pub(crate) fn flush_remote_batch(&self) {
        for i in 0..RemoteBatch::ENTRIES {
            self.flush_entry(i);
        }
    }

    /// Applies batch entry `i`, if any: one logged subtraction (T10, or T8 when it empties the
    /// slab).
    fn flush_entry(&self, i: usize) {
        let Some(batch) = RemoteBatch::unpack(self.rec.remote_batch[i].load(Ordering::Relaxed)) else { return };
        let b = batch.bracket;
        let Some(slab) = self.mem.slab(b, batch.slab) else {
            self.set_batch(i, None);
            return;
        };
        // The batch's marks reach memory before the subtraction can free its slab.
        self.mem.swcc.fence();
        let version = self.next_version();
        self.log(Redo::new(Op::RemoteFree, b, batch.slab, version));
        self.apply_batch(b, slab, batch.count, version);
        self.clear_log();
    }

    /// The batch entry of `slab`, if this slot holds one.
    pub(crate) fn batch_of(&self, b: Bracket, slab: Slab) -> Option<(usize, RemoteBatch)> {
        let set = RemoteBatch::set_of(b, slab.index());
        (set..set + RemoteBatch::WAYS).find_map(|i| {
            RemoteBatch::unpack(self.rec.remote_batch[i].load(Ordering::Relaxed))
                .filter(|x| x.bracket == b && x.slab == slab.index())
                .map(|x| (i, x))
        })
    }

    /// Subtracts `count` remote frees of `slab` (the operation already logged with `version`)
    /// and clears the batch word; the subtraction that takes the counter to 0 claims the slab.
    pub(crate) fn apply_batch(&self, b: Bracket, slab: Slab, count: u32, version: u32) {
        let tag = self.tag(version);
        let outcome = remote::subtract(&self.hw(self.mem.remote(b, slab)), count, tag, self.helper(tag));
        let claimed = matches!(outcome, Ok(remote::Decrement::Claimed));
        if claimed {
            self.claim(b, slab, version);
        }
        // Emptied before anything else is logged: recovery must not apply it again. (An
        // underflow is a double free the marks missed: the batch is dropped, the counter left
        // as it was.)
        self.batch_applied(b, slab);
        if claimed {
            self.trim_cache(b);
        }
    }

    /// T8: the remote free (or batch) `version` took the counter to 0; every block was freed
    /// remotely and the slab is ours, empty.
    fn claim(&self, b: Bracket, slab: Slab, version: u32) {
        self.log(Redo::new(Op::RemoteFree, b, slab.index(), version).flagged());
        let d = self.mem.desc(b, slab);
        // No invalidation of the descriptor (there was one, `Site::Claimed`; the mutation
        // matrix of tests/noncoherent.rs showed it unobservable, and this is why). Until the
        // slab is sized again we write owner, class, size and links, and read only what we
        // wrote; the sizing (T3) then writes every field and every bitset word, except the
        // generation, which it increments. Our copy of the head line is of the current
        // sizing, generation included: the free that claims was located through a head line
        // read from memory (`Site::Located`; for a batch, at its first free), and the slab
        // cannot be re-sized while a free of ours is uncounted. A copy older than that was
        // evicted then, and one held since a slot changed hands by `Site::SlotDescriptors`.
        d.head.owner.store(self.me(), Ordering::Relaxed);
        self.make_unsized(b, slab, d);
        ThreadRecord::bump(&self.rec.counters.claims);
        // docs/design.md §4.7, "Warm slabs": a claimed slab was another thread's live memory a
        // moment ago, resident already; if it goes on to the global list, keeping its pages
        // only forgoes a decrease, and the thread that made it is likely still allocating (the
        // no-HWcc model recycles every remotely freed slab this way: xmalloc faulted 130 000
        // pages a run in the consumer's punched slabs). So a claim credits one slab's pushes.
        let credited = self.warm_pushed.load(Ordering::Relaxed).saturating_sub(1 << b.slab_shift());
        self.warm_pushed.store(credited, Ordering::Relaxed);
    }

    /// Empties the batch entry of `slab` once its subtraction took effect.
    pub(crate) fn batch_applied(&self, b: Bracket, slab: Slab) {
        if let Some((i, _)) = self.batch_of(b, slab) {
            self.set_batch(i, None);
        }
    }

    /// The usable size of the allocated block at `ptr`.
    pub(crate) fn usable_size(&self, ptr: *const u8) -> Result<usize, FreeError> {
        let at = self.locate(ptr)?;
        let freed_remotely =
            Link::freed(self.mark_word(&at).load(Ordering::Relaxed), at.desc.head.mark.load(Ordering::Relaxed));
        if freed_remotely || self.is_free(&at) {
            return Err(FreeError::NotAllocated);
        }
        Ok(at.size as usize)
    }

    /// Slabs one T2 pop or T9 push moves at most (docs/design.md §4.3, "Chains"): one in the
    /// full model; in the reduced models a pop fills the unsized cache (`cache_local` slabs),
    /// and a push takes the cache down to half, so that a slab passing between threads costs a
    /// fraction of a CAS (an mCAS, 2.3 µs on the paper's device, without HWcc).
    fn chain_max(&self) -> u32 {
        if self.batching {
            self.mem.header.cache_local.clamp(1, ChainArg::MAX_SLABS)
        } else {
            1
        }
    }

    /// T2: pops a slab, or a chain of them ([`SlabThread::chain_max`]), from the global list onto
    /// this thread's unsized list.
    fn global_pop(&self, b: Bracket) -> Result<bool, AllocError> {
        let version = self.next_version();
        let mem = self.mem;
        let popped = global_list::pop_chain(
            &self.hw(&mem.globals(b).global_head),
            self.tag(version),
            self.chain_max(),
            |link| match mem.link(b, link) {
                Ok(Some(s)) => {
                    // docs/design.md §14.3: the pusher wrote `next` on another host; read it from memory.
                    let d = mem.desc(b, s);
                    self.refresh(Site::PopNext, d.head_line());
                    Ok(d.head.next.load(Ordering::Relaxed))
                }
                _ => Err(AllocError::Corrupt("global list link beyond heap length")),
            },
            |link, slabs| self.log(Redo::new(Op::GlobalPop, b, link - 1, ChainArg::new(version, slabs).pack())),
            self.helper(self.tag(version)),
        )
        .inspect_err(|_| self.clear_log())?;
        let Some((first, slabs)) = popped else {
            self.clear_log();
            return Ok(false);
        };
        crash_point!(GlobalPopped);
        // The chain keeps its links while it joins the unsized list in front: its last slab's
        // `next` (the global list's new head) becomes our old unsized head. Recovery finds the
        // chain by walking `slabs` links from the first.
        let lists = self.rec.lists(b);
        let mut link = first;
        for i in 0..slabs {
            let slab = mem
                .link(b, link)
                .map_err(AllocError::Corrupt)
                .and_then(|s| s.ok_or(AllocError::Corrupt("popped null")))
                .inspect_err(|_| self.clear_log())?;
            let d = mem.desc(b, slab);
            // No invalidation of the descriptor here (there was one, `Site::Popped`; the
            // mutation matrix of tests/noncoherent.rs showed it unobservable): the pop read
            // the head line from memory (`Site::PopNext`), and its tagged CAS succeeding proves
            // the slab was not popped and pushed again since. The rest (the bitset) is written
            // whole by the sizing (T3) before anything reads it.
            d.head.owner.store(self.me(), Ordering::Relaxed);
            d.head.prev.store(0, Ordering::Relaxed);
            if i + 1 == slabs {
                d.head.next.store(lists.unsized_head.load(Ordering::Relaxed), Ordering::Relaxed);
            } else {
                link = d.head.next.load(Ordering::Relaxed);
                #[cfg(feature = "crash-points")]
                if i == 0 {
                    crash_point!(PopChainOwned);
                }
            }
        }
        lists.unsized_head.store(first, Ordering::Relaxed);
        lists.unsized_len.store(lists.unsized_len.load(Ordering::Relaxed) + slabs, Ordering::Relaxed);
        let counter = &self.rec.counters.global_pops;
        counter.store(counter.load(Ordering::Relaxed) + u64::from(slabs), Ordering::Relaxed);
        // A thread that takes slabs back is not shrinking: its next pushes keep their pages.
        self.warm_pushed.store(0, Ordering::Relaxed);
        self.clear_log();
        if self.recommit {
            // Their pages were given back at T9: reserved again here, so that a full device is
            // an error now and not a SIGBUS at first touch. Back on the global list if they
            // cannot be (the chain is the front of the unsized list).
            let mut link = first;
            for _ in 0..slabs {
                let Ok(Some(slab)) = mem.link(b, link) else { break };
                if mem.recommit_slab(b, slab).is_err() {
                    let len = lists.unsized_len.load(Ordering::Relaxed);
                    self.release_unsized(b, len.saturating_sub(slabs), false);
                    return Err(AllocError::OutOfMemory(b));
                }
                link = mem.desc(b, slab).head.next.load(Ordering::Relaxed);
            }
        }
        Ok(true)
    }

    /// T1: extends the heap by a batch of slabs onto this thread's unsized list.
    fn bump(&self, b: Bracket) -> Result<(), AllocError> {
        let mem = self.mem;
        let version = self.next_version();
        let batch = mem.header.batch[b as usize];
        let capacity = mem.layout.bracket(b).capacity;
        let commit = mem.header.config().commit_on_grow;
        let range = length::bump(
            &self.hw(&mem.globals(b).length),
            self.tag(version),
            batch,
            capacity,
            |from, to| {
                self.log(Redo::new(Op::Bump, b, from, version));
                if commit {
                    mem.commit(b, from, to).map_err(|_| AllocError::OutOfMemory(b))?;
                }
                Ok(())
            },
            self.helper(self.tag(version)),
        );
        let Ok(Some((from, to))) = range else {
            self.clear_log();
            return range.and(Err(AllocError::OutOfMemory(b)));
        };
        crash_point!(Bumped);
        mem.refresh_length(b);
        // Mapping eagerly only saves this process a fault per chunk: if it fails, the fault
        // handler maps the same chunk on first touch.
        if mem.ensure_mapped(b, to).is_ok() {
            let _ = mem.populate(b, from, to);
        }
        for index in (from..to).rev() {
            let slab = mem.slab(b, index).ok_or(AllocError::Corrupt("bumped slab beyond length"))?;
            let d = mem.desc(b, slab);
            d.head.owner.store(self.me(), Ordering::Relaxed);
            self.push_unsized(b, slab, d);
        }
        let counter = &self.rec.counters.slabs_bumped;
        counter.store(counter.load(Ordering::Relaxed) + u64::from(to - from), Ordering::Relaxed);
        self.clear_log();
        Ok(())
    }

    /// A thread detaching lets go of every class's slabs: each current slab gets its cached
    /// word back, entirely free slabs go to the unsized list (T7), and partly used ones are
    /// abandoned (`abandon`) so that frees from other threads can reclaim them
    /// without anyone ever leasing this slot again.
    pub(crate) fn release_classes(&self, b: Bracket) {
        let lists = self.rec.lists(b);
        for (ci, cur) in lists.current.iter().enumerate() {
            let class = ci as u32 + 1;
            if let Ok(Some(slab)) = self.mem.link(b, cur.slab()) {
                self.return_cached_word(b, slab, cur);
            }
            while let Ok(Some(slab)) = self.mem.link(b, lists.sized[ci].load(Ordering::Relaxed)) {
                let d = self.mem.desc(b, slab);
                self.unlink_sized(b, class, d);
                self.abandon(b, slab, d);
            }
        }
    }

    /// Puts the class's cached bits back into the current slab's bitset and empties the cache;
    /// the slab then goes to the unsized list if entirely free, or is abandoned.
    fn return_cached_word(&self, b: Bracket, slab: Slab, cur: &Current) {
        let d = self.mem.desc(b, slab);
        let w = cur.id().word;
        if w as usize >= d.bits.len() {
            return;
        }
        self.log(Redo::new(Op::TakeWord, b, slab.index(), w).flagged());
        // Bitset first, cache second: a crash in between leaves the bits in both places, which
        // recovery resolves from the flagged record; never in neither.
        let free = d.put_bits(w, cur.bits.load(Ordering::Relaxed));
        cur.install(0, 0, 0, 0);
        self.clear_log();
        if free == d.head.blocks.load(Ordering::Relaxed) {
            self.make_unsized(b, slab, d);
        } else if free > 0 {
            self.abandon(b, slab, d);
        }
    }

    /// Disowns a partly used slab this thread no longer wants (it is on no list): its free
    /// blocks are subtracted from the remote counter in one CAS, as if freed remotely, and their
    /// bits stay set so a later free of one of them is still a detected double free. The last
    /// remote free of an outstanding block then claims the slab (T8); if none is outstanding
    /// the subtraction itself claims it back, and it goes to the unsized list.
    fn abandon(&self, b: Bracket, slab: Slab, d: Descriptor<'_>) {
        let version = self.next_version();
        self.log(Redo::new(Op::Abandon, b, slab.index(), version));
        // Release: disowned before the counter can reach 0, so a claimer never finds us owner.
        d.head.owner.store(0, Ordering::Release);
        // Its blocks (free ones) may be re-sized on another host once the counter reaches 0.
        self.publish_data(b, slab);
        self.publish(Site::Abandoned, d.bytes());
        crash_point!(AbandonDisowned);
        let free = d.head.free.load(Ordering::Relaxed);
        let tag = self.tag(version);
        if let Ok(remote::Decrement::Claimed) =
            remote::subtract(&self.hw(self.mem.remote(b, slab)), free, tag, self.helper(tag))
        {
            self.log(Redo::new(Op::Abandon, b, slab.index(), version).flagged());
            // Ours again, and read since our own write-back above (`Site::Abandoned` evicted
            // it): nobody writes an unowned slab's descriptor.
            d.head.owner.store(self.me(), Ordering::Relaxed);
            self.make_unsized(b, slab, d);
        }
        ThreadRecord::bump(&self.rec.counters.disowns);
        self.clear_log();
    }

    /// T9: returns empty slabs beyond the cache limit to the global list. In the reduced models
    /// an overflowing cache goes down to half the limit in one chain (docs/design.md §4.3,
    /// "Chains"): a thread that claims slab after slab (a consumer whose frees are all remote)
    /// pushes one chain per `cache_local / 2 + 1` slabs instead of one push each.
    fn trim_cache(&self, b: Bracket) {
        let limit = self.mem.header.cache_local;
        if self.rec.lists(b).unsized_len.load(Ordering::Relaxed) > limit {
            let keep = if self.batching { limit / 2 } else { limit };
            self.release_unsized(b, keep, false);
        }
    }

    /// T9 for every cached empty slab (a thread detaching).
    pub(crate) fn drain_unsized(&self, b: Bracket) {
        self.release_unsized(b, 0, true);
    }

    /// Whether the slab this thread is about to push to the global list keeps its pages
    /// (docs/design.md §4.7, "Warm slabs"): not when the thread detaches (`draining`), nor
    /// before its first pop or claim, nor once it has pushed [`WARM_BYTES`] of slabs since it
    /// last popped one (each claim since takes one slab off that count). A thread whose cache
    /// overflows in bursts that it takes back within a few refills (a producer harvesting its
    /// consumer's frees) stays under the bound and faults nothing in again (punching the pages
    /// out at every push cost xmalloc 2.4x its time, 70k page faults in 2.5 M operations); a
    /// thread whose live set shrinks pops nothing, passes it, and every further slab it gives
    /// away gives its pages back.
    fn keep_pages(&self, b: Bracket, draining: bool) -> bool {
        let warm = self.warm_pushed.load(Ordering::Relaxed) + (1 << b.slab_shift());
        if draining || warm > WARM_BYTES {
            return false;
        }
        self.warm_pushed.store(warm, Ordering::Relaxed);
        true
    }

    /// T9 for the slabs of `b`'s unsized list beyond `keep`; `draining`: the thread detaches.
    /// The slabs go in chains of up to [`SlabThread::chain_max`], the front of the unsized list
    /// taken as it is linked, one CAS each.
    fn release_unsized(&self, b: Bracket, keep: u32, draining: bool) {
        let lists = self.rec.lists(b);
        loop {
            let len = lists.unsized_len.load(Ordering::Relaxed);
            if len <= keep {
                return;
            }
            let Ok(Some(first)) = self.mem.link(b, lists.unsized_head.load(Ordering::Relaxed)) else {
                return;
            };
            // The chain: the front of the unsized list, as far as its links hold (a corrupt
            // link ends it, so that the record never names more slabs than the walk took).
            let mut slabs = 1;
            let mut last = first;
            while slabs < (len - keep).min(self.chain_max()) {
                match self.mem.link(b, self.mem.desc(b, last).head.next.load(Ordering::Relaxed)) {
                    Ok(Some(n)) => {
                        last = n;
                        slabs += 1;
                    }
                    _ => break,
                }
            }
            let version = self.next_version();
            self.log(Redo::new(Op::GlobalPush, b, first.index(), ChainArg::new(version, slabs).pack()));
            let rest = self.mem.desc(b, last).head.next.load(Ordering::Relaxed);
            lists.unsized_head.store(rest, Ordering::Relaxed);
            lists.unsized_len.store(len - slabs, Ordering::Relaxed);
            // Each slab of the chain: disowned, its data and descriptor made visible, its pages
            // perhaps given back; the last one's `next` is written by the push below.
            let mut slab = first;
            for i in 0..slabs {
                let d = self.mem.desc(b, slab);
                // The owner must be cleared before the slab is reachable by others (docs/design.md
                // §14.3); the push's Release CAS publishes it.
                d.head.owner.store(0, Ordering::Relaxed);
                // Its pages may be given back below (zeroed, the marks gone) and its next owner
                // may run on another host: its next sizing marks anew.
                d.head.marked_class.store(0, Ordering::Relaxed);
                crash_point!(PushDisowned);
                // Another host may pop and size it: nothing of its data stays dirty here (before
                // its pages are given back, so that no write-back lands after).
                self.publish_data(b, slab);
                if self.return_pages && !self.keep_pages(b, draining) {
                    // Empty and still ours: its pages go back before anyone can pop it
                    // (docs/design.md §4.7). A failure only keeps them.
                    let _ = self.mem.release_slab(b, slab);
                }
                if i + 1 < slabs {
                    // Its `next` (the chain's link) reaches memory now: the push's write-back
                    // covers only the last slab.
                    self.publish(Site::GlobalPush, d.bytes());
                    #[cfg(feature = "crash-points")]
                    if i == 0 {
                        crash_point!(PushChainDisowned);
                    }
                    match self.mem.link(b, d.head.next.load(Ordering::Relaxed)) {
                        Ok(Some(n)) => slab = n,
                        _ => break,
                    }
                }
            }
            let d = self.mem.desc(b, last);
            let tag = self.tag(version);
            global_list::push(
                &self.hw(&self.mem.globals(b).global_head),
                tag,
                first.link(),
                // docs/design.md §14.3: `next` is written before the write-back that precedes publication.
                |next| {
                    d.head.next.store(next, Ordering::Relaxed);
                    self.publish(Site::GlobalPush, d.bytes());
                },
                self.helper(tag),
            );
            let counter = &self.rec.counters.global_pushes;
            counter.store(counter.load(Ordering::Relaxed) + u64::from(slabs), Ordering::Relaxed);
            self.clear_log();
        }
    }

    /// An empty slab of this thread loses its class and joins the unsized list (T7, and the
    /// end of every claim, reclaim and give-back). `size` is zeroed with the class because
    /// `locate` reads "no class" from it.
    fn make_unsized(&self, b: Bracket, slab: Slab, d: Descriptor<'_>) {
        // Unknown marks (a claim, a reclaim: blocks counted remotely were marked on other
        // hosts, this host may hold stale copies); only T7 by a local free keeps them.
        d.head.marked_class.store(0, Ordering::Relaxed);
        d.head.class.store(0, Ordering::Relaxed);
        d.head.size.store(0, Ordering::Relaxed);
        self.push_unsized(b, slab, d);
    }

    pub(crate) fn push_unsized(&self, b: Bracket, slab: Slab, d: Descriptor<'_>) {
        let lists = self.rec.lists(b);
        d.head.prev.store(0, Ordering::Relaxed);
        d.head.next.store(lists.unsized_head.load(Ordering::Relaxed), Ordering::Relaxed);
        lists.unsized_head.store(slab.link(), Ordering::Relaxed);
        lists.unsized_len.store(lists.unsized_len.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    pub(crate) fn link_sized(&self, b: Bracket, class: u32, slab: Slab, d: Descriptor<'_>) {
        let head = &self.rec.lists(b).sized[class as usize - 1];
        let old = head.load(Ordering::Relaxed);
        d.head.prev.store(0, Ordering::Relaxed);
        d.head.next.store(old, Ordering::Relaxed);
        if let Ok(Some(next)) = self.mem.link(b, old) {
            self.mem.desc(b, next).head.prev.store(slab.link(), Ordering::Relaxed);
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
    fn validate(&self, b: Bracket, slab: Slab, d: Descriptor<'_>, blocks: u32) -> Result<(), &'static str> {
        let free = d.head.free.load(Ordering::Relaxed);
        if free != d.count_free() {
            return Err("free count differs from bitset popcount");
        }
        if !d.summary_consistent() {
            return Err("summary word differs from bitset");
        }
        if free > blocks {
            return Err("more free blocks than the class has");
        }
        if free > remote::count(self.mem.remote(b, slab)) {
            return Err("free blocks exceed the remote counter");
        }
        Ok(())
    }
}

/// The remote counter of `slab` (for statistics and the checker).
pub(crate) fn remote_count(mem: &HeapMem, b: Bracket, slab: Slab) -> u32 {
    Tagged::unpack(mem.remote(b, slab).load(Ordering::Acquire)).payload
}

#[cfg(test)]
mod tests {
    use super::FreeAnswer;
    use crate::error::FreeError;

    #[test]
    fn a_free_answer_gives_back_the_result_it_was_made_from() {
        let message = "descriptor class out of range";
        let cases = [
            Ok(()),
            Err(FreeError::ForeignPointer),
            Err(FreeError::InteriorPointer),
            Err(FreeError::NotAllocated),
            Err(FreeError::DoubleFree),
            Err(FreeError::ForeignProcess),
            Err(FreeError::Corrupt(message)),
            Err(FreeError::Corrupt("")),
        ];
        for r in cases {
            assert_eq!(FreeAnswer::of(r).result(), r);
        }
        // The message itself, not an equal copy: the same bytes come back.
        let Err(FreeError::Corrupt(back)) = FreeAnswer::of(Err(FreeError::Corrupt(message))).result() else {
            unreachable!("checked above")
        };
        assert_eq!(back.as_ptr(), message.as_ptr());
    }
}
