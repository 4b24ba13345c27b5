//! The huge heap as one process sees it: plain data and raw pointers into the mapped heap, so
//! that the signal handler can use it (no allocation, no locks, no panics), plus the system
//! calls that map and unmap huge ranges and the hazard sets this heap instance holds.
//!
//! The claim array and the hazard-set leases are HWcc words (claims region); descriptors
//! (small-heap blocks), list heads (owned records) and hazard entries (hazard region) are SWcc.

use nix::errno::Errno;

use crate::backing::HugeName;
use crate::class::Bracket;
use crate::layout::{Layout, RegionId, Span, HAZARDS_PER_SET, HAZARD_SET_BYTES, HUGE_SLOT_SHIFT};
use crate::map;
use crate::persist::huge::{HugeBlock, HugeDescriptor, HugeState};
use crate::persist::record::{HugeRecord, ThreadRecord};
use crate::persist::shared::SharedHeader;
use crate::protocol::{hazard, lease};
use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};
use crate::word::{HazardKey, HugeStatus, Tagged};

/// Makes the descriptor at a heap offset readable in this process; false if it cannot.
pub(crate) type Touch<'a> = &'a dyn Fn(u64) -> bool;

/// This process's id as the fork check knows it ([`current_pid`]); 0 until the first view.
static PID: AtomicU32 = AtomicU32::new(0);

/// Registers, once per process, the `pthread_atfork` child handler that keeps [`PID`] right
/// across `fork`, then records the id. The handler goes first: a fork between the two leaves a
/// child whose handler stored its own id (the storing thread is not in the child).
fn watch_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function that only calls getpid and stores an atomic
        // (async-signal-safe, as a child handler of a multithreaded process must be).
        let registered = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) } == 0;
        if registered {
            PID.store(getpid(), Ordering::Relaxed);
        }
    });
}

/// The `pthread_atfork` child handler: the child's own id, so that views of named heaps opened
/// by the parent refuse huge calls in it (docs/design.md §7.5).
extern "C" fn forked_child() {
    PID.store(getpid(), Ordering::Relaxed);
}

/// The `getpid` system call (counted per thread in unit tests). Async-signal-safe.
fn getpid() -> u32 {
    #[cfg(test)]
    GETPID_CALLS.with(|n| n.set(n.get() + 1));
    // SAFETY: getpid has no preconditions and cannot fail.
    (unsafe { libc::getpid() }) as u32
}

/// The calling process's id without a system call: kept by the fork handler, so the fork
/// check of every huge call costs a load instead of a `getpid` (docs/design.md §7.5). Falls
/// back to `getpid` when the handler could not be registered. A child made without the C
/// library's `fork` (a raw `clone`, `_Fork`) runs no handler and must not use a `Heap` it
/// inherited. Async-signal-safe.
pub(crate) fn current_pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => getpid(),
        pid => pid,
    }
}

#[cfg(test)]
thread_local! {
    /// Calls of [`HugeView::maps_object`] (each a `mincore`) made by this thread: the unit
    /// tests of the reuse path count them.
    pub(crate) static RESIDENCY_ASKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// `getpid` calls made by this thread through [`getpid`].
    pub(crate) static GETPID_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Longest descriptor list a walk follows: a cycle (a corrupt list, or a walk racing with the
/// owner's unlink) ends there.
pub(crate) const MAX_WALK: usize = 1 << 16;
/// Walks retried, spinning, after the owner changed the list under them.
const SPIN_RETRIES: usize = 1 << 10;
/// Walks retried after that, yielding the CPU before each (an owner preempted in the middle of
/// an unlink, with more threads than cores, holds the epoch odd for a whole time slice), before
/// a lookup gives up as [`Lookup::Unsure`].
const YIELD_RETRIES: usize = 1 << 14;
/// Live mappings a publish evicts at most, one at a time, before it gives up: an eviction can
/// lose its entry to another thread's publish (more threads than free entries).
const EVICT_TRIES: usize = 8;

/// The answer of a lookup on a descriptor list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The descriptor that covers the offset.
    Found(HugeBlock),
    /// No descriptor covers it.
    Absent,
    /// The owner kept changing the list (or died inside a change): no consistent walk.
    Unsure,
}

impl Lookup {
    /// The block found, if any.
    pub(crate) fn block(self) -> Option<HugeBlock> {
        match self {
            Lookup::Found(b) => Some(b),
            Lookup::Absent | Lookup::Unsure => None,
        }
    }
}

/// Where a hazard entry of this process lies: set and index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    set: u32,
    index: usize,
}

/// Where everything of the huge heap lies in this process. Built once at open; `Copy` so the
/// signal handler's [`crate::mem::LazyMap`] can hold it by value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HugeView {
    /// Reservation base.
    pub base: usize,
    /// The huge span (offsets).
    pub span: Span,
    /// Granule of huge offsets and lengths: the system page size, or a heap device's mapping
    /// alignment if larger (a DAX device maps only whole 2 MiB units).
    pub page: usize,
    claims: *const AtomicU64,
    records: usize,
    record_stride: usize,
    slots: u32,
    /// Small-bracket data span: descriptors must lie in it, below the small heap's length.
    small: Span,
    small_length: *const AtomicU64,
    small_slab_shift: u32,
    leases: *const AtomicU64,
    hazards: usize,
    sets: u32,
    /// Which hazard sets this heap instance leased (one bit per set), owned by the `HeapMem`.
    mine: *const AtomicU64,
    /// Packed [`crate::word::Holder`] of this process.
    pub holder: u64,
    /// This process's id: a forked child must open the heap itself (its hazards are its own).
    pub pid: u32,
    /// Directory to open backing objects in, or -1 (anonymous heap, or a heap device).
    dir_fd: i32,
    /// A heap device (docs/design.md §2.4): its descriptor, or -1 (blocks have objects of their
    /// own); a block at heap offset `o` is the device's bytes at `device_offset + o - span.offset`.
    device_fd: i32,
    /// Device offset of the huge span's first byte (when `device_fd` is one).
    device_offset: u64,
}

impl HugeView {
    /// The view of the heap laid out as `layout` and reserved at `base` in this process. The
    /// heap must stay mapped, and `mine` (one bit per hazard set, then one word for the
    /// eviction hand and one for the unmap count; zeroed) alive, for as long as the view is
    /// used.
    pub(crate) fn new(
        layout: &Layout,
        base: usize,
        page: usize,
        mine: *const AtomicU64,
        holder: u64,
        dir_fd: i32,
        device: Option<(i32, u64)>,
    ) -> Self {
        let shared = base + layout.shared_header;
        watch_forks();
        Self {
            base,
            span: layout.huge,
            page,
            claims: (base + layout.claims) as *const AtomicU64,
            records: base + layout.region(RegionId::Owned).offset,
            record_stride: std::mem::size_of::<ThreadRecord>(),
            slots: layout.slots,
            small: layout.bracket(Bracket::Small).data,
            // The small bracket's globals come first, and its length word first in them.
            small_length: (shared + std::mem::offset_of!(SharedHeader, brackets)) as *const AtomicU64,
            small_slab_shift: Bracket::Small.slab_shift(),
            leases: (base + layout.hazard_leases) as *const AtomicU64,
            hazards: base + layout.region(RegionId::Hazard).offset,
            sets: layout.hazard_sets,
            mine,
            holder,
            pid: crate::word::Holder::unpack(holder).map_or(0, |h| h.pid),
            dir_fd,
            device_fd: device.map_or(-1, |(fd, _)| fd),
            device_offset: device.map_or(0, |(_, at)| at),
        }
    }

    /// Whether blocks have named backing objects, which any process maps by name (a heap in a
    /// directory), rather than private memory (an anonymous heap).
    pub(crate) fn named_objects(&self) -> bool {
        self.dir_fd >= 0
    }

    /// Whether the calling process may run huge operations through this view: it opened the
    /// heap, or the heap is anonymous (neither a directory nor a device) (async-signal-safe). An anonymous heap is private memory,
    /// so a forked child holds a copy-on-write copy of all of it — mappings, hazard sets, leases
    /// and lists — that no other process sees: that copy is the child's own (docs/design.md §7.5).
    /// No system call: the process id comes from [`current_pid`].
    pub(crate) fn in_own_process(&self) -> bool {
        (self.dir_fd < 0 && self.device_fd < 0) || current_pid() == self.pid
    }

    /// Number of huge slots.
    pub(crate) fn slot_count(&self) -> usize {
        self.span.size >> HUGE_SLOT_SHIFT
    }

    /// Claim word of huge slot `i` (0 = free, else the claiming thread slot + 1).
    pub(crate) fn claim(&self, i: usize) -> Option<&AtomicU64> {
        // SAFETY: the claim array has `slot_count` words in the shared region, mapped for the
        // life of the heap (the view's contract), 8-aligned.
        (i < self.slot_count()).then(|| unsafe { &*self.claims.add(i) })
    }

    /// The huge slot holding heap offset `off`.
    pub(crate) fn slot_of(&self, off: u64) -> Option<usize> {
        let rel = (off as usize).wrapping_sub(self.span.offset);
        (rel < self.span.size).then_some(rel >> HUGE_SLOT_SHIFT)
    }

    /// The thread slot that claimed the huge slot holding `off`.
    pub(crate) fn owner_of(&self, off: u64) -> Option<u32> {
        let word = self.claim(self.slot_of(off)?)?.load(Ordering::Acquire);
        let owner = u32::try_from(word).ok()?.checked_sub(1)?;
        (owner < self.slots).then_some(owner)
    }

    /// The huge part of thread slot `slot`'s record.
    pub(crate) fn record(&self, slot: u32) -> Option<&HugeRecord> {
        let r = self.records + slot as usize * self.record_stride;
        // SAFETY: records are mapped whole for the life of the heap; slot < slots keeps the
        // address inside the owned region; ThreadRecord is 64-aligned and all atomics.
        (slot < self.slots).then(|| unsafe { &(*(r as *const ThreadRecord)).huge })
    }

    /// The descriptor at heap offset `off`, if `off` can hold one: a 64-byte-aligned block of
    /// small-heap data below the small heap's current length (which every process can map, so
    /// reading it faults at worst into the small heap's handler: the nested fault).
    pub(crate) fn descriptor(&self, off: u64) -> Option<&HugeDescriptor> {
        let rel = (off as usize).wrapping_sub(self.small.offset);
        if rel >= self.small.size || rel % 64 != 0 {
            return None;
        }
        // SAFETY: the length word lives in the mapped shared region, 8-aligned.
        let len = Tagged::unpack(unsafe { &*self.small_length }.load(Ordering::Acquire)).payload;
        if (rel >> self.small_slab_shift) as u64 >= u64::from(len) {
            return None;
        }
        // SAFETY: checked above: inside small data below the length, 64-aligned; the memory is
        // mapped or mapped on fault; HugeDescriptor is all atomics, valid for any bit pattern.
        Some(unsafe { &*((self.base + off as usize) as *const HugeDescriptor) })
    }

    /// A snapshot of the descriptor at `off`.
    pub(crate) fn read(&self, off: u64) -> Option<HugeBlock> {
        let d = self.descriptor(off)?;
        // Acquire: pairs with the CASes on the status (free, reclaim) of other processes.
        let status = HugeStatus::unpack(d.status.load(Ordering::Acquire));
        Some(HugeBlock {
            desc: off,
            offset: d.offset.load(Ordering::Relaxed),
            size: d.size.load(Ordering::Relaxed),
            generation: status.generation,
            state: HugeState::from_bits(status.state),
            next: d.next.load(Ordering::Acquire),
            object: d.object.load(Ordering::Relaxed),
        })
    }

    /// The descriptors of the list starting at `head`, in order: `Ok` for each, then `Err(link)`
    /// if the list ends at a link that cannot be a descriptor (or that `touch` cannot make
    /// readable). At most [`MAX_WALK`] items, so a cycle ends too. Async-signal-safe.
    pub(crate) fn chain<'s>(
        &'s self,
        head: u64,
        touch: Touch<'s>,
    ) -> impl Iterator<Item = Result<HugeBlock, u64>> + 's {
        let mut at = head;
        std::iter::from_fn(move || {
            if at == 0 {
                return None;
            }
            let link = std::mem::take(&mut at);
            match self.descriptor(link).filter(|_| touch(link)).and_then(|_| self.read(link)) {
                Some(b) => {
                    at = b.next;
                    Some(Ok(b))
                }
                None => Some(Err(link)),
            }
        })
        .take(MAX_WALK)
    }

    /// The descriptor on `slot`'s list whose allocation contains `off`, read consistently with
    /// the owner's unlinks; `None` if no descriptor covers it. Async-signal-safe.
    pub(crate) fn find_in(&self, slot: u32, off: u64) -> Option<HugeBlock> {
        self.find_in_touching(slot, off, &|_| true).block()
    }

    fn find_in_touching(&self, slot: u32, off: u64, touch: Touch<'_>) -> Lookup {
        let Some(rec) = self.record(slot) else { return Lookup::Absent };
        // A seqlock reader of the list's epoch: a walk during which the owner unlinked (and
        // freed) a descriptor may have read garbage, so it is retried.
        for attempt in 0..SPIN_RETRIES + YIELD_RETRIES {
            if attempt >= SPIN_RETRIES {
                // SAFETY: sched_yield has no preconditions (a system call, async-signal-safe in
                // effect: it touches no user-space state).
                unsafe { libc::sched_yield() };
            }
            let e1 = rec.epoch.load(Ordering::Acquire);
            if e1 % 2 == 0 {
                let found = self
                    .chain(rec.head.load(Ordering::Acquire), touch)
                    .map_while(Result::ok)
                    .find(|b| b.contains(off) && b.state.is_some());
                // Acquire: the walk's loads happen before the re-read of the epoch.
                fence(Ordering::Acquire);
                if rec.epoch.load(Ordering::Relaxed) == e1 {
                    return found.map_or(Lookup::Absent, Lookup::Found);
                }
            }
            std::hint::spin_loop();
        }
        Lookup::Unsure
    }

    /// The descriptors on `slot`'s list, read consistently with the owner's unlinks (as
    /// [`HugeView::find_in`] reads them); `None` if the owner kept changing the list. Not for
    /// the signal handler (it allocates).
    pub(crate) fn snapshot(&self, slot: u32) -> Option<Vec<HugeBlock>> {
        let rec = self.record(slot)?;
        for _ in 0..SPIN_RETRIES {
            let e1 = rec.epoch.load(Ordering::Acquire);
            if e1 % 2 == 0 {
                let blocks: Vec<HugeBlock> =
                    self.chain(rec.head.load(Ordering::Acquire), &|_| true).map_while(Result::ok).collect();
                // Acquire: the walk's loads happen before the re-read of the epoch.
                fence(Ordering::Acquire);
                if rec.epoch.load(Ordering::Relaxed) == e1 {
                    return Some(blocks);
                }
            }
            std::thread::yield_now();
        }
        None
    }

    /// The descriptor of the allocation containing heap offset `off`, found through the claim
    /// array. Async-signal-safe.
    pub(crate) fn find(&self, off: u64) -> Option<HugeBlock> {
        self.lookup(off).block()
    }

    /// Like [`HugeView::find`], telling "no such block" from "could not tell".
    pub(crate) fn lookup(&self, off: u64) -> Lookup {
        self.find_touching(off, &|_| true)
    }

    fn find_touching(&self, off: u64, touch: Touch<'_>) -> Lookup {
        match self.owner_of(off) {
            Some(owner) => self.find_in_touching(owner, off, touch),
            None => Lookup::Absent,
        }
    }

    /// Whether the block named by hazard key `key` is no longer live (freed, reclaimed, or
    /// its range reused): its mappings are stale. False when the owner's list could not be read
    /// consistently: a stale mapping kept a while longer only delays a reclaim.
    fn is_stale_touching(&self, key: HazardKey, touch: Touch<'_>) -> bool {
        match self.find_touching(key.offset, touch) {
            Lookup::Found(b) => {
                HazardKey::new(b.offset, b.generation) != key
                    || b.offset != key.offset
                    || b.state != Some(HugeState::Live)
            }
            Lookup::Absent => true,
            Lookup::Unsure => false,
        }
    }

    /// Hazard set `s` (pairs of words).
    pub(crate) fn set(&self, s: u32) -> &[AtomicU64] {
        let s = s.min(self.sets.saturating_sub(1));
        let p = self.hazards + s as usize * HAZARD_SET_BYTES;
        // SAFETY: the hazard region holds `sets` sets of HAZARD_SET_BYTES, mapped for the life
        // of the heap, 8-aligned; the index is clamped to the set count (which is ≥ 1).
        unsafe { std::slice::from_raw_parts(p as *const AtomicU64, 2 * HAZARDS_PER_SET) }
    }

    /// The lease word of hazard set `s` (packed holder, 0 = free).
    pub(crate) fn lease(&self, s: u32) -> &AtomicU64 {
        let s = s.min(self.sets.saturating_sub(1));
        // SAFETY: the leases are `sets` words in the mapped shared region; index clamped.
        unsafe { &*self.leases.add(s as usize) }
    }

    /// Number of hazard sets.
    pub(crate) fn sets(&self) -> u32 {
        self.sets
    }

    fn mine_word(&self, s: u32) -> &AtomicU64 {
        // SAFETY: the bitmap has sets.div_ceil(64) words, owned by the HeapMem that outlives
        // the view; s < sets at every caller.
        unsafe { &*self.mine.add(s as usize / 64) }
    }

    /// Whether this heap instance leased hazard set `s`.
    pub(crate) fn is_mine(&self, s: u32) -> bool {
        s < self.sets && self.mine_word(s).load(Ordering::Relaxed) & (1 << (s % 64)) != 0
    }

    /// The hazard sets this instance leased.
    pub(crate) fn my_sets(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.sets).filter(|&s| self.is_mine(s))
    }

    /// Publishes a hazard for `key` (a mapping of `pages` pages) in one of this instance's
    /// sets: a Pending entry, which the caller alone then [`HugeView::confirm`]s once it has
    /// mapped the block, or [`HugeView::retract_entry`]s. When the sets are full it makes room,
    /// cheapest first (docs/design.md §7.4): it drops this process's stale entries, then leases
    /// a new set, then (a heap with named objects) evicts the mapping of some live block, which
    /// the next touch maps again on fault. `EAGAIN` only when none of that frees an entry (every
    /// set leased elsewhere, and every entry of ours Pending or Dropping: other threads are in
    /// the middle of mapping or unmapping). `touch` as in [`HugeView::handle_fault`].
    /// Async-signal-safe.
    pub(crate) fn publish(&self, key: HazardKey, pages: u64, touch: Touch<'_>) -> Result<Entry, Errno> {
        let word = key.pack();
        if let Some(e) = self.publish_in_mine(word, pages) {
            return Ok(e);
        }
        // Full: stale entries go first, so that a process that only reads (and so never runs
        // `maintain`) recycles its entries instead of leasing set after set.
        if self.drop_stale_touching(touch, &|_| false, &|_| false, &mut |_| {}) > 0 {
            if let Some(e) = self.publish_in_mine(word, pages) {
                return Ok(e);
            }
        }
        if let Some(e) = self.publish_in_new_set(word, pages) {
            return Ok(e);
        }
        // Every entry we could have names a live block this process maps. Unmapping one of
        // them is safe where the block can be mapped again by name (the fault handler does it
        // at the next touch); an anonymous heap's private mappings hold the only copy.
        if self.dir_fd >= 0 {
            for _ in 0..EVICT_TRIES {
                if !self.evict_one() {
                    break;
                }
                if let Some(e) = self.publish_in_mine(word, pages) {
                    return Ok(e);
                }
            }
        }
        Err(Errno::EAGAIN)
    }

    /// Leases a free set and publishes in it, if this process may take one more: it leaves
    /// other processes at least as many free sets as it holds (a process holding `k` sets
    /// leases another only while more than `k` are free), so that a process mapping many live
    /// blocks evicts its own mappings rather than starve the next process of sets. An
    /// anonymous heap has one process and cannot evict: it takes every set.
    fn publish_in_new_set(&self, word: u64, pages: u64) -> Option<Entry> {
        if self.holder == 0 {
            // This process has no host entry (docs/design.md §8.6): no lease it could name.
            return None;
        }
        if self.dir_fd >= 0 {
            let held = self.my_sets().count();
            // Relaxed: a count for the policy only; the claim below is the synchronizing step.
            let free = (0..self.sets).filter(|&s| self.lease(s).load(Ordering::Relaxed) == 0).count();
            if held > 0 && free <= held {
                return None;
            }
        }
        for set in 0..self.sets {
            let l = self.lease(set);
            // The lease, like the entry, precedes publish's fence: a reclaimer that reads the
            // set unleased after its own fence is one whose reclaim this publisher will see.
            if l.load(Ordering::Relaxed) == 0 && lease::try_claim(l, self.holder) {
                self.mine_word(set).fetch_or(1 << (set % 64), Ordering::Relaxed);
                return hazard::publish(self.set(set), word, pages).map(|index| Entry { set, index });
            }
        }
        None
    }

    fn publish_in_mine(&self, word: u64, pages: u64) -> Option<Entry> {
        self.my_sets().find_map(|set| hazard::publish(self.set(set), word, pages).map(|index| Entry { set, index }))
    }

    /// Evicts one Installed entry of this process, live block or not, going round the sets
    /// from a process-wide hand so that repeated evictions spread over the entries: claims it
    /// (Dropping), maps its range `PROT_NONE`, retracts it. Sound by the invariant of
    /// docs/design.md §7.4: the thread owns an entry naming the block while it unmaps, so the
    /// range cannot have been reused. False if no entry could be claimed. Async-signal-safe.
    fn evict_one(&self) -> bool {
        let total = self.sets as u64 * HAZARDS_PER_SET as u64;
        // Relaxed: the hand only spreads evictions; any value is correct.
        let start = self.hand().fetch_add(1, Ordering::Relaxed);
        for step in 0..total {
            let at = (start + step) % total;
            let (set, index) = ((at / HAZARDS_PER_SET as u64) as u32, (at % HAZARDS_PER_SET as u64) as usize);
            if !self.is_mine(set) {
                continue;
            }
            let s = self.set(set);
            let Some(word) = s.get(2 * index).map(|k| k.load(Ordering::Relaxed)).filter(|&w| w != 0) else {
                continue;
            };
            let Some(pages) = hazard::claim(s, index, word) else { continue };
            if let Some(key) = HazardKey::unpack(word) {
                let _ = self.unmap(key.offset, pages as usize * self.page);
            }
            hazard::retract(s, index);
            self.hand().store(at + 1, Ordering::Relaxed);
            return true;
        }
        false
    }

    fn hand(&self) -> &AtomicU64 {
        // SAFETY: the word after the bitmap's sets.div_ceil(64) words, allocated with it by the
        // HeapMem that outlives the view (HugeView::new's contract).
        unsafe { &*self.mine.add(self.sets.div_ceil(64) as usize) }
    }

    /// Marks the caller's Pending entry Installed: the block is mapped. Async-signal-safe.
    pub(crate) fn confirm(&self, e: Entry) {
        hazard::confirm(self.set(e.set), e.index);
    }

    /// Empties the caller's own entry (Pending, or Dropping after its unmap). Async-signal-safe.
    pub(crate) fn retract_entry(&self, e: Entry) {
        hazard::retract(self.set(e.set), e.index);
    }

    /// Whether one of this instance's hazard sets names `key` (in any state): this process
    /// still maps, or is mapping, that block.
    pub(crate) fn holds(&self, key: HazardKey) -> bool {
        self.my_sets().any(|s| hazard::contains(self.set(s), key.pack()))
    }

    /// Retracts every Installed hazard this instance published for `key`, whose range the
    /// caller has just unmapped while the block was still live (its freer). Async-signal-safe.
    pub(crate) fn retract(&self, key: HazardKey) {
        for s in self.my_sets() {
            hazard::retract_key(self.set(s), key.pack());
        }
    }

    /// Drops this process's mappings (and hazards) of huge blocks that are no longer live, so
    /// their owners can reclaim them: each Installed entry of a stale block is claimed by one
    /// thread, which unmaps its range before it retracts it (docs/design.md §7.4). Returns how
    /// many this call dropped, and hands each dropped block's key to `dropped` (after its
    /// entry is retracted), so that the caller can release the blocks whose last mapping that
    /// was. Async-signal-safe if `dropped` is.
    /// `keep` names the blocks whose ranges stay mapped while their entries go: the caller is
    /// their owner's thread, which reclaims them next (see `ops::drop_stale_mappings`).
    /// `leave` names the blocks whose entries are not judged at all this time: they stay, as
    /// if still live (always safe: an entry only delays a reclaim), for another thread of this
    /// process to drop (see `ops::drop_stale_mappings`).
    pub(crate) fn drop_stale_into(
        &self,
        leave: &dyn Fn(HazardKey) -> bool,
        keep: &dyn Fn(HazardKey) -> bool,
        dropped: &mut dyn FnMut(HazardKey),
    ) -> usize {
        self.drop_stale_touching(&|_| true, leave, keep, dropped)
    }

    fn drop_stale_touching(
        &self,
        touch: Touch<'_>,
        leave: &dyn Fn(HazardKey) -> bool,
        keep: &dyn Fn(HazardKey) -> bool,
        dropped: &mut dyn FnMut(HazardKey),
    ) -> usize {
        // Staleness first: most entries name live blocks, and `leave` may look a block up too.
        let dead =
            |word: u64| HazardKey::unpack(word).is_some_and(|key| self.is_stale_touching(key, touch) && !leave(key));
        let mut keys = [0u64; HAZARDS_PER_SET];
        let mut n = 0;
        for s in self.my_sets() {
            let mut k = 0;
            let unmap = |word: u64, pages: u64| {
                if let Some(key) = HazardKey::unpack(word).filter(|&key| !keep(key)) {
                    let _ = self.unmap(key.offset, pages as usize * self.page);
                }
                if let Some(slot) = keys.get_mut(k) {
                    *slot = word;
                }
                k += 1;
            };
            let m = hazard::drop_stale(self.set(s), dead, unmap);
            // After the retracts: the scan of whoever releases a block must not see our entry.
            keys.iter().take(m.min(HAZARDS_PER_SET)).filter_map(|&w| HazardKey::unpack(w)).for_each(&mut *dropped);
            n += m;
        }
        n
    }

    /// Empties and gives back every hazard set this instance leased (its mappings are gone).
    pub(crate) fn release_sets(&self) {
        for s in 0..self.sets {
            if self.is_mine(s) {
                self.mine_word(s).fetch_and(!(1 << (s % 64)), Ordering::Relaxed);
                self.give_back_set(s, self.holder);
            }
        }
    }

    /// Empties hazard set `s` and releases its lease, if `holder` (packed) still holds it:
    /// this instance giving its sets back, or a reclaimer clearing a dead process's.
    pub(crate) fn give_back_set(&self, s: u32, holder: u64) {
        hazard::clear(self.set(s));
        lease::release(self.lease(s), holder);
    }

    /// Maps `len` bytes of the huge block at `off` from its backing object, opened by name
    /// (`object`: the generation the object is named after). Async-signal-safe.
    pub(crate) fn map_named(&self, off: u64, len: usize, object: u64) -> Result<(), Errno> {
        if self.device_fd >= 0 {
            // A heap device: the block is a range of the device, no object to open.
            return self.map_fd(off, len, self.device_fd);
        }
        if self.dir_fd < 0 {
            return Err(Errno::ENOENT);
        }
        let name = HugeName::new(off, object);
        // SAFETY: openat with a valid directory descriptor and a NUL-terminated name.
        let fd = unsafe { libc::openat(self.dir_fd, name.as_cstr().as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(Errno::last());
        }
        let r = self.map_fd(off, len, fd);
        // SAFETY: fd was opened above and is not used after this; the mapping keeps the object.
        unsafe { libc::close(fd) };
        r
    }

    fn range(&self, off: u64, len: usize) -> Result<*mut u8, Errno> {
        let rel = (off as usize).wrapping_sub(self.span.offset);
        if rel >= self.span.size || len > self.span.size - rel || off as usize % self.page != 0 {
            return Err(Errno::EINVAL);
        }
        Ok((self.base + off as usize) as *mut u8)
    }

    /// Maps `len` bytes of `fd` at huge offset `off`: the block's own object from its start,
    /// or, on a heap device, the device at the block's place in its huge range.
    /// Async-signal-safe.
    pub(crate) fn map_fd(&self, off: u64, len: usize, fd: i32) -> Result<(), Errno> {
        let addr = self.range(off, len)?;
        let at = if self.device_fd >= 0 { self.device_offset as usize + (off as usize - self.span.offset) } else { 0 };
        let len = len.next_multiple_of(self.page);
        // SAFETY: `range` checked that the page-aligned range lies in the huge span of our own
        // reservation; the device offset is the span's (2 MiB-aligned) plus the block's
        // page-aligned place in it.
        unsafe { map::map_shared_fixed(addr, len, fd, at, true) }?;
        // SAFETY: the range just mapped, inside our reservation. After the mapping, which
        // starts a new one without the flag (docs/design.md §7.6).
        unsafe { map::advise_huge_pages(addr, len) };
        Ok(())
    }

    /// Maps private zeroed memory at huge offset `off` (anonymous heaps: one process).
    pub(crate) fn map_private(&self, off: u64, len: usize) -> Result<(), Errno> {
        let addr = self.range(off, len)?;
        let len = len.next_multiple_of(self.page);
        // SAFETY: as in `map_fd`.
        unsafe { map::map_private_fixed(addr, len) }?;
        // SAFETY: as in `map_fd`.
        unsafe { map::advise_huge_pages(addr, len) };
        Ok(())
    }

    /// Faults in `len` bytes at huge offset `off` for writing with one system call (an
    /// optimization: on error the pages fault in one at a time).
    pub(crate) fn populate(&self, off: u64, len: usize) -> Result<(), Errno> {
        let addr = self.range(off, len)?;
        // SAFETY: the range was just mapped by the caller, inside our huge span.
        unsafe { map::populate_write(addr, len.next_multiple_of(self.page)) }
    }

    /// Whether the range at huge offset `off` still maps a backing object in this process,
    /// judged by its first page being resident: a range returned to `PROT_NONE` has no pages.
    /// Only for a range that can map nothing but one object or `PROT_NONE` (a cached block's,
    /// docs/design.md §7.6); "no" when unsure, which costs a needless mapping call, never a
    /// wrong one. Async-signal-safe.
    pub(crate) fn maps_object(&self, off: u64) -> bool {
        #[cfg(test)]
        RESIDENCY_ASKS.with(|n| n.set(n.get() + 1));
        // SAFETY: `range` checked that the page lies in the huge span of our reservation.
        self.range(off, self.page).is_ok_and(|addr| unsafe { map::is_resident(addr, self.page) })
    }

    /// Returns `len` bytes at huge offset `off` to reserved `PROT_NONE` address space in this
    /// process (never a hole: see [`map::map_none_fixed`]). Async-signal-safe.
    pub(crate) fn unmap(&self, off: u64, len: usize) -> Result<(), Errno> {
        let addr = self.range(off, len)?;
        // SAFETY: as in `map_fd`; callers unmap only ranges nothing in this process may use.
        let r = unsafe { map::map_none_fixed(addr, len.next_multiple_of(self.page)) };
        // After the call and before the caller retracts any entry (the unmaps of other threads
        // are seen by whoever sees that retract): a kept mapping recorded at an older count may
        // be gone (docs/design.md §7.6). Counted even on error, which may have unmapped part.
        // SeqCst: pairs with the load of `unmap_count`.
        self.unmaps().fetch_add(1, Ordering::SeqCst);
        r
    }

    /// How many huge ranges this process has returned to `PROT_NONE` through this view (every
    /// unmap of the huge span goes through [`HugeView::unmap`]). A range known to map an
    /// object while the count read before that knowledge still holds maps it now: only an
    /// unmap could have taken it away, and other processes cannot change our mappings
    /// (docs/design.md §7.6). Async-signal-safe.
    pub(crate) fn unmap_count(&self) -> u64 {
        // SeqCst: pairs with the increment in `unmap`.
        self.unmaps().load(Ordering::SeqCst)
    }

    fn unmaps(&self) -> &AtomicU64 {
        // SAFETY: the second word after the bitmap's sets.div_ceil(64) words, allocated with it
        // by the HeapMem that outlives the view (HugeView::new's contract).
        unsafe { &*self.mine.add(self.sets.div_ceil(64) as usize + 1) }
    }

    /// Maps the live huge allocation containing `addr` on a fault, after publishing a hazard
    /// for it; false if `addr` is not in a live huge allocation of this heap (the fault is not
    /// ours). `touch` maps a descriptor's small-heap chunk before it is read, so a descriptor
    /// this process never mapped costs no nested fault. Async-signal-safe: walks descriptors,
    /// CASes hazard words, and makes `openat`/`mmap`/`close` calls.
    pub(crate) fn handle_fault(&self, addr: usize, touch: Touch<'_>) -> bool {
        let off = addr.wrapping_sub(self.base) as u64;
        if self.slot_of(off).is_none() || !self.in_own_process() {
            return false;
        }
        let Some(b) = self.find_touching(off, touch).block().filter(|b| b.state == Some(HugeState::Live)) else {
            return false;
        };
        let key = HazardKey::new(b.offset, b.generation);
        let pages = b.size / self.page as u64;
        // A full table is made room in (stale entries dropped, a live mapping evicted): a
        // process that only reads never runs out of entries (docs/design.md §7.4).
        let Ok(entry) = self.publish(key, pages, touch) else {
            return false;
        };
        // Rule 1's re-read (protocol::hazard): the block must still be live now that the hazard
        // is visible; otherwise its owner may already have reclaimed it. The same allocation:
        // its `next` link may have changed meanwhile (the owner unlinked a neighbour).
        let still = self.find_touching(off, touch).block().is_some_and(|now| now.same_allocation(&b));
        if still && self.map_named(b.offset, b.size as usize, b.object).is_ok() {
            self.confirm(entry);
            return true;
        }
        // Our own entry only: other threads' entries for the block may cover their mappings.
        self.retract_entry(entry);
        false
    }
}
