//! The per-thread record in the owned region.

use crate::class::{Bracket, LARGE_CLASSES, SMALL_CLASSES};
use crate::protocol::cached_word;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Heads of one bracket's thread-local slab lists.
///
/// Region: owned (SWcc), inside the holder's [`ThreadRecord`]. Written only by the slot's holder
/// (or by its adopter after the holder died). Lists are intrusive through the local descriptors'
/// `next`/`prev` links; every value is a slab index + 1, 0 = empty.
#[repr(C)]
pub(crate) struct Lists<const N: usize> {
    /// Empty slabs with no class, cached by this thread (Local-unsized).
    pub unsized_head: AtomicU32,
    /// Length of the unsized list (decides T9).
    pub unsized_len: AtomicU32,
    /// One doubly linked list per class of slabs with ≥ 1 free block in their bitset
    /// (Local-sized), LIFO. The class's current slab is not on it.
    pub sized: [AtomicU32; N],
    /// Per class, the slab being allocated from and one word of its free bits.
    pub current: [Current; N],
}

/// A class's current slab and the word of free-block bits taken out of its bitset: allocation
/// pops the lowest bit with one store, and the store is also the allocation's log record (the
/// word is persistent, so a crash loses nothing the word does not name).
///
/// Region: owned (SWcc), written only by the slot holder. Remote freers read it (stale values
/// tolerated) to detect double frees of cached blocks, through the consistent-read protocol of
/// [`cached_word`].
///
/// Invariant: `bits` are free blocks of word `id.word` of slab `id.slab − 1`, cleared from that
/// slab's bitset; `block0` is the heap offset of block `64 · id.word`. `bits == 0` ⇔ no current
/// slab (`id.slab == 0`), except inside an allocation, which refills or retires at once.
#[repr(C)]
pub(crate) struct Current {
    /// Free blocks of the cached word (bit i = block `64 · word + i`).
    pub bits: AtomicU64,
    /// Heap offset of block `64 · word` of the slab.
    pub block0: AtomicU64,
    /// Packed [`CurrentId`]: which slab and word `bits` belong to.
    pub id: AtomicU64,
}

/// Identity of a cached word.
///
/// ```text
///  63              40 39          32 31                               0
/// +------------------+--------------+----------------------------------+
/// | sequence (24 b)  | word (8 b)   | slab index + 1 (32 b)            |
/// +------------------+--------------+----------------------------------+
/// ```
///
/// The sequence number changes at every refill, so a reader can tell two fillings of the same
/// word apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct CurrentId {
    /// Slab index + 1; 0 = no current slab.
    pub slab: u32,
    /// Bitset word.
    pub word: u32,
    /// Refill count (24 bits, wrapping).
    pub seq: u32,
}

impl CurrentId {
    /// Whether raw word `raw` caches word `word` (below 256) of slab link `slab`, whatever its
    /// sequence number: the quick free's test (docs/design.md §4.5), an exclusive or and a shift
    /// that drops the sequence number's 24 bits (and any bits of `word` above the 8 it keeps).
    #[inline(always)]
    pub(crate) fn names(raw: u64, slab: u32, word: u32) -> bool {
        (raw ^ (u64::from(slab) | (u64::from(word) << 32))) << 24 == 0
    }

    /// The raw word.
    #[inline]
    pub(crate) fn pack(self) -> u64 {
        u64::from(self.slab) | (u64::from(self.word & 0xff) << 32) | (u64::from(self.seq & 0xff_ffff) << 40)
    }

    /// Decodes a raw word.
    #[inline]
    pub(crate) fn unpack(raw: u64) -> Self {
        Self { slab: raw as u32, word: ((raw >> 32) & 0xff) as u32, seq: (raw >> 40) as u32 }
    }
}

impl Current {
    /// The current slab's link (index + 1), 0 = none. Holder-side read.
    #[inline]
    pub(crate) fn slab(&self) -> u32 {
        CurrentId::unpack(self.id.load(Ordering::Relaxed)).slab
    }

    /// Any thread: whether block `block` of slab link `slab` is free in this cache, read
    /// consistently while the holder may be refilling
    /// ([`cached_word::read`]). A torn read answers false.
    pub(crate) fn holds_seen_from_afar(&self, slab: u32, block: u32) -> bool {
        cached_word::read(&self.id, &self.bits).is_some_and(|(raw, bits)| {
            let id = CurrentId::unpack(raw);
            id.slab == slab && id.word == block / 64 && bits & (1 << (block % 64)) != 0
        })
    }

    /// Holder only: caches word `word` of slab link `slab` holding `bits`, starting at heap
    /// offset `block0` (`slab == 0` empties the cache).
    #[inline]
    pub(crate) fn install(&self, slab: u32, word: u32, block0: u64, bits: u64) {
        let seq = CurrentId::unpack(self.id.load(Ordering::Relaxed)).seq.wrapping_add(1);
        // block0 is read only by the holder, so it needs no place in the reader protocol.
        self.block0.store(block0, Ordering::Relaxed);
        cached_word::install(&self.id, &self.bits, CurrentId { slab, word, seq }.pack(), bits);
    }

    /// Holder-side read of the cached word's identity.
    #[inline]
    pub(crate) fn id(&self) -> CurrentId {
        CurrentId::unpack(self.id.load(Ordering::Relaxed))
    }
}

/// A run of remote frees of one slab whose counter decrement is deferred (limited and no-HWcc
/// models: one CAS — an mCAS without HWcc — subtracts them all, docs/design.md §15's lever). Each block is marked freed when it joins, so a
/// double free is still seen at once; the subtraction claims the slab when it reaches 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RemoteBatch {
    /// Bracket of the slab.
    pub bracket: Bracket,
    /// Slab index.
    pub slab: u32,
    /// Frees counted (≥ 1).
    pub count: u32,
}

impl RemoteBatch {
    /// Most frees one batch holds before it is applied.
    pub(crate) const LIMIT: u32 = 4096;
    /// Sets of the batch table: a slab's entry lives in one set ([`RemoteBatch::set_of`]).
    pub(crate) const SETS: usize = 64;
    /// Entries of one set; a slab new to a full set evicts the set's least recently used entry.
    pub(crate) const WAYS: usize = 4;
    /// Slabs a slot batches at once (docs/design.md §4.5, "The batch table"): xmalloc's
    /// consumer frees from more than 32 slabs at once, so a scanned array of 32 evicted
    /// (applied early) the batches of 3 100–5 600 of its 16 200 slabs a run; 256, found by a
    /// direct-indexed set of 4, hold them.
    pub(crate) const ENTRIES: usize = Self::SETS * Self::WAYS;
    /// Bytes at the start of a record that hold everything recovery reads (redo, version,
    /// remote block, pending record, batches).
    pub(crate) const RECOVERY_BYTES: usize = 2112;

    /// The first entry of the set that holds slab `slab` of bracket `b`: direct-indexed by the
    /// slab's index, so the slabs a heap grew by in one run (contiguous indices) spread over
    /// every set before two share one; large slabs start half the table over.
    #[inline(always)]
    pub(crate) fn set_of(b: Bracket, slab: u32) -> usize {
        (slab as usize + b as usize * (Self::SETS / 2)) % Self::SETS * Self::WAYS
    }

    /// The record word: count in bits 48..63, bracket in bit 32, slab in bits 0..31.
    pub(crate) fn pack(self) -> u64 {
        u64::from(self.count) << 48 | (self.bracket as u64) << 32 | u64::from(self.slab)
    }

    /// Decodes a record word; `None` for 0 (no batch).
    pub(crate) fn unpack(w: u64) -> Option<Self> {
        let count = (w >> 48) as u32;
        let bracket = if w >> 32 & 1 == 0 { Bracket::Small } else { Bracket::Large };
        (count != 0).then_some(RemoteBatch { bracket, slab: w as u32, count })
    }
}

/// A harvest in progress: the mailbox chain this slot took, from its next unreturned block.
///
/// ```text
///  63          34   33     32   31                              0
/// +--------------+--------+------+--------------------------------+
/// | 0            | active | brkt | cursor payload (0 = done)      |
/// +--------------+--------+------+--------------------------------+
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Harvest {
    /// Bracket of the mailbox taken.
    pub bracket: Bracket,
    /// Payload ([`crate::protocol::mailbox::BlockId`] + 1) of the next block to return.
    pub cursor: u32,
}

impl Harvest {
    /// The record word.
    pub(crate) fn pack(self) -> u64 {
        1 << 33 | (self.bracket as u64) << 32 | u64::from(self.cursor)
    }

    /// Decodes a record word; `None` for 0 (no harvest in progress).
    pub(crate) fn unpack(w: u64) -> Option<Self> {
        let bracket = if w >> 32 & 1 == 0 { Bracket::Small } else { Bracket::Large };
        (w >> 33 & 1 == 1).then_some(Harvest { bracket, cursor: w as u32 })
    }
}

/// Operation counters of one slot. Single writer (the holder), read by `stats` with stale values
/// tolerated. Only slow-path events are counted, so the fast path stays free of them.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Counters {
    /// Frees that took the remote path (T10 + T8, and mailbox pushes): frees of other slots'
    /// blocks, and of this slot's own blocks in slabs it has disowned.
    pub remote_frees: AtomicU64,
    /// Blocks this slot took back from its mailbox (docs/design.md §4.6).
    pub harvested: AtomicU64,
    /// Slabs taken by extending the heap (T1).
    pub slabs_bumped: AtomicU64,
    /// Slabs popped from the global list (T2).
    pub global_pops: AtomicU64,
    /// Slabs pushed to the global list (T9).
    pub global_pushes: AtomicU64,
    /// Slabs claimed by a last remote free (T8).
    pub claims: AtomicU64,
    /// Slabs detached when full (T4).
    pub detaches: AtomicU64,
    /// Slabs disowned when full (T5) or abandoned partly used at detach.
    pub disowns: AtomicU64,
}

/// The slot's huge allocations.
///
/// Region: owned (SWcc). Written only by the slot's holder (or adopter); read by any thread of
/// any process that frees or maps one of the slot's huge blocks (the signal handler included).
#[repr(C)]
pub(crate) struct HugeRecord {
    /// Heap offset of the first [`crate::persist::huge::HugeDescriptor`] of the slot's list
    /// (singly linked, newest first), 0 = none.
    pub head: AtomicU64,
    /// Odd while the holder unlinks a descriptor: a reader that saw it change during its walk
    /// retries, since the walk may have touched a descriptor block being freed.
    pub epoch: AtomicU64,
    /// Huge allocations made under this slot; with the slot index it makes each allocation's
    /// generation unique over the heap's life.
    pub allocations: AtomicU64,
}

/// Everything one thread slot owns.
///
/// Region: owned (SWcc). Written only by the slot's current holder (or adopter); cache-line
/// aligned so that no two slots share a line (no false sharing, and a per-slot flush under
/// limited coherence never touches another slot's data).
///
/// Invariant: every slab on one of these lists, and every current slab, has `owner == slot + 1`
/// in its descriptor; slabs on `sized[c]` and `current[c]` have `class == c + 1`; slabs on
/// `sized[c]` have ≥ 1 free block in their bitset; slabs on the unsized list have class 0.
#[repr(C, align(64))]
pub(crate) struct ThreadRecord {
    /// The redo record ([`crate::persist::redo::Redo`]); 0 when idle.
    pub redo: AtomicU64,
    /// Version of this slot's current detectable-CAS operation; persists across re-attach so
    /// tags never repeat within the version's width.
    pub version: AtomicU32,
    /// The block index of the remote free in flight (written before its redo record), so that
    /// recovery can write the block's free mark when it completes the free.
    pub remote_block: AtomicU32,
    /// The slot + 1 whose mailbox the remote free in flight pushes to (`Op::MailboxPush`),
    /// written with `remote_block`: recovery asks that mailbox's head whether the push
    /// happened.
    pub remote_owner: AtomicU32,
    /// The payload after the harvest cursor's block, written before that block is freed, so
    /// that recovery can move on once it finds the block freed (docs/design.md §4.6).
    pub harvest_next: AtomicU32,
    /// The chain of a mailbox this slot took and is returning to its slabs ([`Harvest`]; 0 =
    /// none). Written before the taking CAS (under `Op::Harvest`) and advanced block by block.
    pub harvest: AtomicU64,
    /// Limited and no-HWcc models: remote frees counted here and not yet subtracted from their
    /// slabs' counters, one slab per entry ([`RemoteBatch`]; 0 = none). Recovery applies what a dead
    /// holder left. Each entry is written back on its own when it changes.
    pub remote_batch: [AtomicU64; RemoteBatch::ENTRIES],
    /// The outer operation in flight ([`crate::persist::redo::PendingRecord`]).
    pub pending: crate::persist::redo::PendingRecord,
    /// Slow-path counters.
    pub counters: Counters,
    /// Small-bracket lists.
    pub small: Lists<SMALL_CLASSES>,
    /// Large-bracket lists.
    pub large: Lists<LARGE_CLASSES>,
    /// Huge allocations.
    pub huge: HugeRecord,
}

const _: () = assert!(std::mem::size_of::<ThreadRecord>() % 64 == 0);
const _: () = assert!(std::mem::offset_of!(ThreadRecord, counters) <= RemoteBatch::RECOVERY_BYTES);

/// A bracket's lists, with the class count erased.
pub(crate) struct ListsRef<'a> {
    /// See [`Lists::unsized_head`].
    pub unsized_head: &'a AtomicU32,
    /// See [`Lists::unsized_len`].
    pub unsized_len: &'a AtomicU32,
    /// See [`Lists::sized`].
    pub sized: &'a [AtomicU32],
    /// See [`Lists::current`].
    pub current: &'a [Current],
}

impl ThreadRecord {
    /// The lists of bracket `b`.
    #[inline]
    pub(crate) fn lists(&self, b: Bracket) -> ListsRef<'_> {
        match b {
            Bracket::Small => ListsRef {
                unsized_head: &self.small.unsized_head,
                unsized_len: &self.small.unsized_len,
                sized: &self.small.sized,
                current: &self.small.current,
            },
            Bracket::Large => ListsRef {
                unsized_head: &self.large.unsized_head,
                unsized_len: &self.large.unsized_len,
                sized: &self.large.sized,
                current: &self.large.current,
            },
        }
    }

    /// Starts a new detectable-CAS operation and returns its version.
    #[inline]
    pub(crate) fn next_version(&self) -> u32 {
        // Relaxed: single writer; the version reaches other threads only inside CAS'd words.
        let v = crate::word::Tag::next_version(self.version.load(Ordering::Relaxed));
        self.version.store(v, Ordering::Relaxed);
        v
    }

    /// Adds one to a counter (single writer, so a load and a store suffice).
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_compares_slab_and_word_but_not_the_sequence_number() {
        for seq in [0, 1, 0xff_ffff] {
            let raw = CurrentId { slab: 7, word: 63, seq }.pack();
            assert!(CurrentId::names(raw, 7, 63));
            assert!(!CurrentId::names(raw, 8, 63));
            assert!(!CurrentId::names(raw, 7, 62));
            assert!(!CurrentId::names(raw, 7 | 1 << 31, 63));
        }
        assert!(!CurrentId::names(CurrentId::default().pack(), 1, 0));
    }
}
