//! The structures cxlkv keeps in the heap (docs/design.md §16.1), and the one checked way from
//! an offset to each of them.
//!
//! Every structure here is a block of the heap's slab data (or, for a bucket array or an item
//! above 512 KiB, the huge span), shared by every worker process and read and written with the
//! CPU's atomics: cxlkv needs the HWcc (`full`) coherence model, which it checks at open. Links
//! are heap offsets, never pointers, and every offset read from the heap goes through
//! [`Mem::at`] / [`Mem::bytes`], which refuse one outside the heap's data or misaligned (a word
//! left corrupt becomes an error, never a wild read).

use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU64, Ordering};

use cxlalloc::{Heap, Offset};

use crate::error::StoreError;

/// Most worker slots a table has (a worker index is below this).
pub const MAX_WORKERS: usize = 64;

/// Entries of a worker's retire ring.
pub const RING: usize = 1024;

/// Longest key, bytes (memcached's limit).
pub const MAX_KEY: usize = 250;

/// Largest value, bytes (memcached's default item size limit).
pub const MAX_VALUE: usize = 1 << 20;

/// Most items one bucket array holds before writes to it are refused (a chain this long means
/// a hash flood or a corrupt array; memcached would be slow there too).
pub const MAX_BUCKET: usize = 4096;

/// Items a write drops from its bucket besides the one it replaces (expired or flushed ones,
/// reclaimed on the way).
pub const MAX_DROPPED: usize = 6;

/// The table header's magic word ("cxlkv" and the layout version).
pub const MAGIC: u64 = u64::from_le_bytes(*b"cxlkv\x00\x01\x00");

/// The root the table header's offset is published in.
pub const ROOT: usize = 0;

/// A word alone on its cache line (the epoch and each announcement are written by one
/// writer and read by all: sharing a line would make every pin steal seven other words).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Line {
    /// The word.
    pub word: AtomicU64,
}

/// The table header: created once, by the first `cxlkv` on a heap, and published through root
/// [`ROOT`]. Heap block (slab data, HWcc).
///
/// Accounting: `flush_gen` only grows; an item whose `flush_gen` is below it is dead.
#[repr(C)]
#[derive(Debug)]
pub struct Table {
    // Written by the creator before the root CAS that publishes the table; read-only after.
    /// [`MAGIC`].
    pub magic: u64,
    /// The bucket count's log2.
    pub buckets_log2: u64,
    /// Offset of the bucket words (`2^buckets_log2` of them; each the offset of the bucket's
    /// current [`Array`], 0 = empty).
    pub buckets: u64,
    /// Offsets of the worker records, one per worker index.
    pub records: [u64; MAX_WORKERS],

    // Written by any worker (stores and CAS); a stale read is tolerated (see each).
    /// Bytes the table may use (0 = no limit); the last server to start sets it.
    pub memory_limit: AtomicU64,
    /// Items created with a lower generation are flushed. Bumped by `flush_all`.
    pub flush_gen: AtomicU64,
    /// Unix time at which a delayed `flush_all` takes effect (0 = none pending).
    pub flush_at: AtomicU64,
    /// Worker restarts by the supervisor, over the table's life (reported by `stats`).
    pub restarts: AtomicU64,

    // The reclamation epoch and the announcements (docs/design.md §16.2), a line each.
    /// The global epoch: CAS by any worker.
    pub epoch: Line,
    /// Worker `k`'s announcement: written by worker `k` (or its replacement's recovery).
    pub announce: [Line; MAX_WORKERS],
}

const _: () = assert!(offset_of!(Table, epoch) % 64 == 0 && size_of::<Table>() == 576 + 64 * (MAX_WORKERS + 1));

/// One entry of a retire ring: a block waiting for the epoch to pass `epoch + 2`.
#[repr(C)]
#[derive(Debug)]
pub struct Retired {
    /// The block's offset; cleared by the detectable free that reclaims it (0 = reclaimed).
    pub off: AtomicU64,
    /// Global epoch read after the block was unlinked.
    pub epoch: AtomicU64,
    /// Bytes the block counted for in the table's usage.
    pub size: AtomicU64,
}

/// The states of a worker's operation log ([`Record::state`]); docs/design.md §16.3.
pub mod state {
    /// No write in progress; staged words are never-published blocks (free them).
    pub const IDLE: u64 = 0;
    /// The new array and item are filled and the log names the bucket, old array and dropped
    /// items; the bucket CAS may or may not have happened.
    pub const PREPARED: u64 = 1;
    /// The CAS succeeded; retirements are pushed iff the ring's tail moved from `tail0`.
    pub const PUBLISHED: u64 = 2;
}

/// The per-worker statistics a record counts (`stats` sums them over the workers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Stat {
    /// `get`/`gets` keys looked up.
    CmdGet,
    /// Storage commands.
    CmdSet,
    /// `touch` commands.
    CmdTouch,
    /// `flush_all` commands.
    CmdFlush,
    /// Lookups that found the key.
    GetHits,
    /// Lookups that did not.
    GetMisses,
    /// Successful deletes.
    DeleteHits,
    /// Deletes of absent keys.
    DeleteMisses,
    /// Successful incrs.
    IncrHits,
    /// Incrs of absent keys.
    IncrMisses,
    /// Successful decrs.
    DecrHits,
    /// Decrs of absent keys.
    DecrMisses,
    /// Successful cas.
    CasHits,
    /// Cas of absent keys.
    CasMisses,
    /// Cas with a stale unique.
    CasBadval,
    /// Successful touches.
    TouchHits,
    /// Touches of absent keys.
    TouchMisses,
    /// Items stored (new or replacing).
    TotalItems,
    /// Live items, as a delta this worker contributed (the sum over workers is the count).
    CurrItems,
    /// Bytes of items, bucket arrays and retired blocks, as a delta (summed like `CurrItems`).
    Bytes,
    /// Items evicted for the memory limit.
    Evictions,
    /// Items found expired or flushed and dropped.
    Reclaimed,
    /// Connections open now (this worker's).
    CurrConnections,
    /// Connections accepted.
    TotalConnections,
}

/// Number of [`Stat`]s.
pub const STATS: usize = Stat::TotalConnections as usize + 1;

/// A worker's record: its operation log, its staged blocks, its retire ring, its statistics.
/// Heap block (slab data, HWcc), one per worker index, created with the table.
///
/// Written only by the worker holding index `k` (one process at a time: the supervisor starts
/// a replacement only after reaping the previous holder), or by that replacement's recovery;
/// read by any worker for `stats` (a stale read is tolerated there).
///
/// Invariant (between operations): `state == IDLE`, both staged words 0, and every ring entry
/// in `head..tail` is a retired block or 0.
#[repr(C)]
#[derive(Debug)]
pub struct Record {
    /// [`state`] of the write in progress.
    pub state: AtomicU64,
    /// The bucket index the write CASes.
    pub bucket: AtomicU64,
    /// The bucket's array the write replaces (the CAS's expected value).
    pub old: AtomicU64,
    /// The ring's tail when the write started.
    pub tail0: AtomicU64,
    /// Items the write drops from the bucket (replaced, deleted, expired), `dropped_len` of them.
    pub dropped: [AtomicU64; MAX_DROPPED + 1],
    /// Bytes each dropped item counted for.
    pub dropped_size: [AtomicU64; MAX_DROPPED + 1],
    /// How many of `dropped` are meaningful.
    pub dropped_len: AtomicU64,
    /// The new item, allocated detectably (`alloc_into`): 0, or a block this record owns until
    /// the write is published.
    pub staged_item: AtomicU64,
    /// The new bucket array, allocated detectably like `staged_item`.
    pub staged_array: AtomicU64,
    /// The cxlalloc thread slot the worker holds, plus one (0 = none yet).
    pub alloc_slot: AtomicU64,
    /// Process id of the holder (for `stats` and the tests).
    pub pid: AtomicU64,
    /// Sequence of the worker's item unique ids (cas values).
    pub cas_seq: AtomicU64,
    /// The worker's statistics, indexed by [`Stat`].
    pub stats: [AtomicU64; STATS],
    /// The retire ring's head: entries before it are reclaimed.
    pub head: AtomicU64,
    /// The retire ring's tail: entries before it are pushed.
    pub tail: AtomicU64,
    /// The retire ring.
    pub ring: [Retired; RING],
}

const _: () = assert!(size_of::<Record>() < 64 << 10 && offset_of!(Record, state) == 0);

/// An item: the header below, then the key, then the value. Immutable once published, except
/// `exptime` (touch) and `atime` (reads): both tolerate a stale read.
#[repr(C)]
#[derive(Debug)]
pub struct Item {
    /// The unique id `gets` reports and `cas` compares.
    pub cas: u64,
    /// The key's hash.
    pub hash: u64,
    /// Unix time at which the item expires (0 = never). Any worker may store (touch).
    pub exptime: AtomicU64,
    /// Unix time in milliseconds of the last access, for eviction. Any worker may store.
    pub atime: AtomicU64,
    /// The client's flags.
    pub flags: u32,
    /// Key bytes after the header.
    pub key_len: u32,
    /// Value bytes after the key.
    pub data_len: u32,
    /// The table's `flush_gen` when the item was made.
    pub flush_gen: u32,
}

/// Bytes of an item's header.
pub const ITEM_HEADER: usize = size_of::<Item>();
const _: () = assert!(ITEM_HEADER == 48);

/// Bytes of an item block with this key and value length.
pub fn item_size(key_len: usize, data_len: usize) -> usize {
    ITEM_HEADER + key_len + data_len
}

/// A bucket's array: the header below, then `len` item offsets. Immutable once published,
/// except `seen`.
#[repr(C)]
#[derive(Debug)]
pub struct Array {
    /// Set to 1 by any worker that is about to CAS this array out of its bucket, before the
    /// CAS: proof, for the recovery of the worker that published it, that its CAS succeeded.
    pub seen: AtomicU64,
    /// Item offsets after the header.
    pub len: u64,
}

/// Bytes of an array with `len` items.
pub fn array_size(len: usize) -> usize {
    size_of::<Array>() + 8 * len
}

/// The heap, for checked offset-to-reference conversion.
#[derive(Clone, Debug)]
pub struct Mem {
    heap: Heap,
}

impl Mem {
    /// Checked access to `heap`.
    pub fn new(heap: Heap) -> Self {
        Self { heap }
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// The `T` at `off`, which must lie in the heap's data and be aligned for `T`.
    pub fn at<T>(&self, off: u64, what: &'static str) -> Result<&T, StoreError> {
        let p = self.heap.pointer(Offset::<T>::from_raw(off)).map_err(|_| StoreError::Corrupt { what, off })?;
        // SAFETY: `pointer` checked that `off` names `size_of::<T>()` aligned bytes of the heap's
        // data, which stays mapped while `self.heap` lives (the borrow of `self`). Every `T`
        // here is a repr(C) struct of integers and atomics: any bytes are a valid value.
        Ok(unsafe { p.as_ref() })
    }

    /// `len` bytes at `off`, checked to start and end in the heap's data.
    pub fn bytes(&self, off: u64, len: usize, what: &'static str) -> Result<&[u8], StoreError> {
        if len == 0 {
            return Ok(&[]);
        }
        let corrupt = || StoreError::Corrupt { what, off };
        let start = self.heap.pointer(Offset::<u8>::from_raw(off)).map_err(|_| corrupt())?;
        let last = off.checked_add(len as u64 - 1).ok_or_else(corrupt)?;
        let end = self.heap.pointer(Offset::<u8>::from_raw(last)).map_err(|_| corrupt())?;
        if (end.as_ptr() as usize).wrapping_sub(start.as_ptr() as usize) != len - 1 {
            return Err(corrupt());
        }
        // SAFETY: both ends lie in the heap's mapped data (checked above), which is one
        // contiguous mapping, so the whole range does; it stays mapped while `self` lives.
        Ok(unsafe { std::slice::from_raw_parts(start.as_ptr(), len) })
    }

    /// The offset of `p`, a block of this heap.
    pub fn offset(&self, p: std::ptr::NonNull<u8>) -> u64 {
        p.as_ptr() as u64 - self.heap.base_address() as u64
    }

    /// The item at `off`, with its key and value.
    pub fn item(&self, off: u64) -> Result<ItemRef<'_>, StoreError> {
        let item: &Item = self.at(off, "item")?;
        let (k, d) = (item.key_len as usize, item.data_len as usize);
        if k > MAX_KEY || d > MAX_VALUE {
            return Err(StoreError::Corrupt { what: "item lengths", off });
        }
        let body = self.bytes(off + ITEM_HEADER as u64, k + d, "item body")?;
        Ok(ItemRef { off, item, key: &body[..k], data: &body[k..] })
    }

    /// The item offsets of the array at `off` (0: the empty bucket).
    pub fn array(&self, off: u64) -> Result<(Option<&Array>, &[AtomicU64]), StoreError> {
        if off == 0 {
            return Ok((None, &[]));
        }
        let a: &Array = self.at(off, "bucket array")?;
        let len = a.len as usize;
        if len > MAX_BUCKET + 1 {
            return Err(StoreError::Corrupt { what: "bucket array length", off });
        }
        if len == 0 {
            // An empty array: no items to borrow (an empty `bytes` slice need not be 8-aligned).
            return Ok((Some(a), &[]));
        }
        let raw = self.bytes(off + size_of::<Array>() as u64, 8 * len, "bucket array items")?;
        // SAFETY: `raw` is `8 * len` bytes of heap data at an 8-aligned offset (the array is
        // 8-aligned, its header 16 bytes); AtomicU64 has u64's layout and any bits are valid.
        let items = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<AtomicU64>(), len) };
        Ok((Some(a), items))
    }
}

/// An item and its key and value, borrowed from the heap.
#[derive(Clone, Copy, Debug)]
pub struct ItemRef<'a> {
    /// Its offset.
    pub off: u64,
    /// Its header.
    pub item: &'a Item,
    /// Its key.
    pub key: &'a [u8],
    /// Its value.
    pub data: &'a [u8],
}

impl ItemRef<'_> {
    /// Whether the item is expired at `now` or flushed by generation `flush_gen`.
    pub fn dead(&self, now: u64, flush_gen: u64) -> bool {
        // Relaxed: a touch racing this read may be seen or not; either order is linearizable.
        let exp = self.item.exptime.load(Ordering::Relaxed);
        (exp != 0 && now >= exp) || u64::from(self.item.flush_gen) < flush_gen
    }

    /// Bytes the item counts for.
    pub fn size(&self) -> usize {
        item_size(self.key.len(), self.data.len())
    }
}

/// The hash of a key: 8 bytes at a time through a multiply-rotate, finished by a full
/// avalanche so the bucket (low bits) depends on every byte.
pub fn hash_key(key: &[u8]) -> u64 {
    const M: u64 = 0x9fb2_1c65_1e98_df25;
    let mut h = 0x243f_6a88_85a3_08d3 ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(M).rotate_left(29);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    mix64(h ^ u64::from_le_bytes(tail))
}

/// A 64-bit finalizer (every input bit affects every output bit).
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
