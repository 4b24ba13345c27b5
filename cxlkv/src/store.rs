//! The table's operations (docs/design.md §16): opening or creating the table in a heap, and a
//! worker's reads, writes, epoch-based reclamation and crash recovery.
//!
//! # The write protocol
//!
//! A bucket word holds the offset of the bucket's current [`Array`] of item offsets. Arrays and
//! items are immutable once published, so a write never edits shared data in place: it builds
//! a new item (if it stores one) and a new array (the old one's items, less the replaced item
//! and up to [`MAX_DROPPED`] dead ones, plus the new item) and CASes the bucket word from the
//! old array to the new. The CAS is the write's linearization point: before it nothing is
//! visible, after it everything is. The old array and the dropped items are then retired on
//! the worker's ring and freed once no reader can hold them (the epoch protocol of §16.2).
//!
//! # Crash tolerance
//!
//! Every step that a dead worker may leave half done is in its [`Record`]: the new blocks are
//! allocated with `alloc_into` into the record's staged words (so cxlalloc's recovery of the
//! dead thread slot leaves each word either 0 with the block free or holding the block), the
//! log names the bucket, the old array and the dropped items before the CAS, and retired
//! blocks are freed with `free_from` out of the ring entry (so a free is never lost or
//! doubled). Whether the CAS happened is told by the new array: it is in the bucket, or a later
//! writer set its `seen` word before CASing it out ([`Worker::recover`]).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use cxlalloc::{Coherence, Config, Heap, ThreadHandle};

use crate::crash::{self, Point};
use crate::error::StoreError;
use crate::layout::{
    array_size, hash_key, item_size, mix64, state, Array, Item, ItemRef, Mem, Record, Stat, Table, ITEM_HEADER, MAGIC,
    MAX_BUCKET, MAX_DROPPED, MAX_KEY, MAX_WORKERS, RING, ROOT, STATS,
};
use crate::{detect, epoch};

/// Retirements between two tries to advance the epoch.
const ADVANCE_EVERY: u32 = 32;

/// Writes between two sums of the table's byte usage (the memory limit is checked against a
/// sum at most this many writes per worker old).
const USAGE_EVERY: u32 = 16;

/// Items an eviction samples; the least recently read (or a dead one) goes.
const EVICT_SAMPLE: usize = 5;

/// Most buckets an eviction scans for its sample.
const EVICT_SCAN: usize = 4096;

/// A table opened in this process.
#[derive(Debug)]
pub struct Store {
    mem: Mem,
    table: NonNull<Table>,
    buckets: NonNull<AtomicU64>,
    mask: usize,
}

// SAFETY: the pointers name heap memory that `mem` keeps mapped; all of it is accessed through
// atomics or is immutable, so sharing the store between threads is sound.
unsafe impl Send for Store {}
// SAFETY: as for Send.
unsafe impl Sync for Store {}

/// How a write changes the key's item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to write.
    Keep,
    /// Remove the item.
    Remove,
    /// Store a new item with these flags and expiry (absolute, 0 = never) and this body.
    Put {
        /// The client's flags.
        flags: u32,
        /// Unix expiry time.
        exptime: u64,
        /// How the value is made.
        body: Body,
    },
}

/// The value of a new item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// The request's data.
    New,
    /// The old value, then the request's data.
    Append,
    /// The request's data, then the old value.
    Prepend,
    /// A number, in decimal.
    Number(u64),
}

/// Unix time, seconds.
pub fn now() -> u64 {
    now_ms() / 1000
}

/// Unix time, milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Store {
    /// Opens the table in heap `name` (in `/dev/shm`), creating the heap and the table (with
    /// `2^buckets_log2` buckets) when absent.
    pub fn open_or_create(name: &str, buckets_log2: u32) -> Result<Self, StoreError> {
        let heap = Heap::open_or_create(name, &Config::default())?;
        Self::on_heap(heap, buckets_log2)
    }

    /// Opens the table of `heap`, creating it when the heap has none.
    pub fn on_heap(heap: Heap, buckets_log2: u32) -> Result<Self, StoreError> {
        let coherence = heap.config().coherence;
        if coherence != Coherence::Full {
            return Err(StoreError::Coherence(format!("{coherence:?}")));
        }
        if !(4..=30).contains(&buckets_log2) {
            return Err(StoreError::Buckets(buckets_log2));
        }
        let root = heap.root(ROOT).ok_or(StoreError::NotATable { root: ROOT, magic: 0 })?;
        // Acquire: pairs with the Release of the CAS that published the table.
        let mut off = root.load(Ordering::Acquire);
        if off == 0 {
            off = create(&heap, buckets_log2)?;
        }
        let mem = Mem::new(heap);
        let table: &Table = mem.at(off, "table")?;
        if table.magic != MAGIC {
            return Err(StoreError::NotATable { root: ROOT, magic: table.magic });
        }
        let n = 1usize << table.buckets_log2.min(30);
        let words = mem.bytes(table.buckets, 8 * n, "bucket words")?;
        let buckets = NonNull::from(words).cast::<AtomicU64>();
        for &r in &table.records {
            mem.at::<Record>(r, "worker record")?;
        }
        let table = NonNull::from(table);
        Ok(Self { mem, table, buckets, mask: n - 1 })
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        self.mem.heap()
    }

    /// The table header.
    pub fn table(&self) -> &Table {
        // SAFETY: checked at open; the heap stays mapped while `self.mem` lives.
        unsafe { self.table.as_ref() }
    }

    fn buckets(&self) -> &[AtomicU64] {
        // SAFETY: `mask + 1` words checked at open; mapped while `self.mem` lives.
        unsafe { std::slice::from_raw_parts(self.buckets.as_ptr(), self.mask + 1) }
    }

    /// Worker `k`'s record.
    pub fn record(&self, k: usize) -> Result<&Record, StoreError> {
        let off = *self.table().records.get(k).ok_or(StoreError::WorkerIndex(k))?;
        self.mem.at(off, "worker record")
    }

    /// Statistic `s` of worker `k` (0 for an index out of range).
    pub fn worker_stat(&self, k: usize, s: Stat) -> i64 {
        // Relaxed: a statistic; a stale count is fine.
        self.record(k).map_or(0, |r| r.stats[s as usize].load(Ordering::Relaxed) as i64)
    }

    /// Statistic `s` summed over the worker records.
    pub fn stat(&self, s: Stat) -> i64 {
        (0..MAX_WORKERS)
            .filter_map(|k| self.record(k).ok())
            // Relaxed: a statistic; a stale count is fine.
            .map(|r| r.stats[s as usize].load(Ordering::Relaxed) as i64)
            .sum()
    }

    /// Sets the memory limit (0 = none).
    pub fn set_memory_limit(&self, bytes: u64) {
        // Relaxed: writers read it before each store; a stale limit for a moment is harmless.
        self.table().memory_limit.store(bytes, Ordering::Relaxed);
    }

    /// Counts a worker restart.
    pub fn count_restart(&self) {
        // Relaxed: a statistic.
        self.table().restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// Walks every bucket: (items, live items, arrays, bytes of items and arrays), for `stats`
    /// and the tests (a read-only walk, valid while no worker writes).
    pub fn census(&self) -> Result<(u64, u64, u64, u64), StoreError> {
        let (now, gen) = (now(), self.table().flush_gen.load(Ordering::Relaxed));
        let (mut items, mut live, mut arrays, mut bytes) = (0, 0, 0, 0);
        for b in self.buckets() {
            // Acquire: the array was published by a Release CAS.
            let a = b.load(Ordering::Acquire);
            if a == 0 {
                continue;
            }
            let (_, offs) = self.mem.array(a)?;
            arrays += 1;
            bytes += array_size(offs.len()) as u64;
            for o in offs {
                let it = self.mem.item(o.load(Ordering::Relaxed))?;
                items += 1;
                live += u64::from(!it.dead(now, gen));
                bytes += it.size() as u64;
            }
        }
        Ok((items, live, arrays, bytes))
    }
}

impl Store {
    /// Retired blocks not yet freed, over every worker's ring.
    pub fn retired_pending(&self) -> u64 {
        let mut n = 0;
        for k in 0..MAX_WORKERS {
            let Ok(r) = self.record(k) else { continue };
            // Relaxed: a count for `stats`, exact only while no worker writes.
            let (head, tail) = (r.head.load(Ordering::Relaxed), r.tail.load(Ordering::Relaxed));
            for i in head..tail.min(head + RING as u64) {
                n += u64::from(r.ring[i as usize % RING].off.load(Ordering::Relaxed) != 0);
            }
        }
        n
    }

    /// Blocks the table owns: its header, bucket words and records, every array and item, and
    /// every retired block not yet freed. With no write in flight and no other user of the
    /// heap this is the heap checker's live block count: a difference is a leak.
    pub fn owned_blocks(&self) -> Result<u64, StoreError> {
        let (items, _, arrays, _) = self.census()?;
        Ok(2 + MAX_WORKERS as u64 + items + arrays + self.retired_pending())
    }
}

/// Allocates and publishes a fresh table in `heap`; returns its offset (another process's, if
/// it won the race).
fn create(heap: &Heap, buckets_log2: u32) -> Result<u64, StoreError> {
    let thread = heap.attach()?;
    let base = heap.base_address() as u64;
    let zeroed = |size: usize| -> Result<u64, StoreError> { Ok(thread.alloc_zeroed(size)?.as_ptr() as u64 - base) };
    let table = thread.alloc_zeroed(std::mem::size_of::<Table>())?;
    let buckets = zeroed(8 << buckets_log2)?;
    let mut records = [0u64; MAX_WORKERS];
    for r in &mut records {
        *r = zeroed(std::mem::size_of::<Record>())?;
    }
    // SAFETY: a fresh zeroed block of the table's size, 8-aligned; private until the CAS below.
    unsafe {
        let t = table.cast::<Table>().as_ptr();
        (*t).magic = MAGIC;
        (*t).buckets_log2 = u64::from(buckets_log2);
        (*t).buckets = buckets;
        (*t).records = records;
    }
    let off = table.as_ptr() as u64 - base;
    // Release (inside the root CAS): publishes the table's contents.
    match heap.root_compare_exchange(ROOT, 0, off) {
        Some(Ok(_)) => Ok(off),
        Some(Err(winner)) => {
            // Another process created the table first: ours was never published.
            for p in [off, buckets].into_iter().chain(records) {
                thread
                    .free(NonNull::new((base + p) as *mut u8).ok_or(StoreError::Corrupt { what: "table", off: p })?)?;
            }
            Ok(winner)
        }
        None => Err(StoreError::NotATable { root: ROOT, magic: 0 }),
    }
}

/// The outcome of a storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Stored.
    Stored,
    /// Not stored (add of a present key, replace/append/prepend of an absent one).
    NotStored,
    /// `cas` with a stale unique.
    Exists,
    /// `cas` of an absent key.
    NotFound,
}

/// Which storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `set`.
    Set,
    /// `add`.
    Add,
    /// `replace`.
    Replace,
    /// `append`.
    Append,
    /// `prepend`.
    Prepend,
    /// `cas` with this unique.
    Cas(u64),
}

/// What a worker's start repaired (docs/design.md §16.3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The previous holder's thread slot was adopted (it died holding it).
    pub adopted_slot: bool,
    /// The previous holder died inside a write that it had published: recovery finished it.
    pub finished_write: bool,
    /// The previous holder died inside a write it had not published: recovery undid it.
    pub undid_write: bool,
    /// Never-published blocks freed out of the staged words.
    pub freed_staged: u32,
}

/// A worker: one thread's lease on the heap and on worker index `k` of the table.
#[derive(Debug)]
pub struct Worker<'s> {
    store: &'s Store,
    thread: ThreadHandle,
    k: usize,
    rec: &'s Record,
    since_advance: u32,
    since_usage: u32,
    usage: i64,
    rng: u64,
    /// Unix time in milliseconds at the last [`Worker::tick`] (item access times).
    ms: u64,
    /// Scratch for [`Worker::commit`]'s kept item offsets, reused so that a write allocates
    /// no process memory (only its heap blocks).
    keep: Vec<u64>,
}

impl<'s> Worker<'s> {
    /// Takes worker index `k`: adopts the thread slot its previous holder died with (or leases
    /// a fresh one), then finishes or undoes the previous holder's write ([`Worker::recover`]).
    /// The caller guarantees that no live process holds index `k` (the supervisor starts a
    /// replacement only after reaping the previous one).
    pub fn start(store: &'s Store, k: usize) -> Result<(Self, Recovered), StoreError> {
        let rec = store.record(k)?;
        let heap = store.heap();
        let mut adopted = false;
        // Relaxed: written by this index's previous holder, which is dead and reaped.
        let slot = rec.alloc_slot.load(Ordering::Relaxed);
        let thread = match slot.checked_sub(1).map(|s| s as u32) {
            Some(s) if heap.dead_slots().contains(&s) => match heap.adopt(s) {
                Ok((t, _)) => {
                    adopted = true;
                    t
                }
                // Someone (a `cxlalloc recover`) adopted it first: its recovery ran.
                Err(_) => heap.attach()?,
            },
            _ => heap.attach()?,
        };
        rec.alloc_slot.store(u64::from(thread.slot()) + 1, Ordering::Relaxed);
        rec.pid.store(u64::from(std::process::id()), Ordering::Relaxed);
        // The previous holder's connections died with it.
        rec.stats[Stat::CurrConnections as usize].store(0, Ordering::Relaxed);
        let rng = mix64(u64::from(std::process::id()) << 8 | k as u64) | 1;
        let mut w = Self {
            store,
            thread,
            k,
            rec,
            since_advance: 0,
            since_usage: USAGE_EVERY,
            usage: 0,
            rng,
            ms: now_ms(),
            keep: Vec::new(),
        };
        let mut report = w.recover()?;
        report.adopted_slot = adopted;
        Ok((w, report))
    }

    /// The worker index.
    pub fn index(&self) -> usize {
        self.k
    }

    /// The store.
    pub fn store(&self) -> &'s Store {
        self.store
    }

    /// Adds `n` to statistic `s` of this worker.
    #[inline]
    pub fn count(&self, s: Stat, n: i64) {
        // Relaxed: only this worker writes its statistics; readers tolerate stale sums.
        let w = &self.rec.stats[s as usize];
        w.store(w.load(Ordering::Relaxed).wrapping_add(n as u64), Ordering::Relaxed);
    }

    /// Finishes or undoes the write the previous holder of this index was in, from its log
    /// (docs/design.md §16.3), then clears its epoch announcement. Idempotent: a crash inside
    /// recovery leaves a log that recovery handles again.
    pub fn recover(&mut self) -> Result<Recovered, StoreError> {
        let rec = self.rec;
        let mut report = Recovered::default();
        // SeqCst: the log is read after everything the dead writer did (it is dead; any order
        // would do, SeqCst keeps the reasoning simple).
        let mut st = rec.state.load(Ordering::SeqCst);
        if st == state::PREPARED {
            let a = rec.staged_array.load(Ordering::SeqCst);
            let b = rec.bucket.load(Ordering::SeqCst) as usize;
            let bucket =
                self.store.buckets().get(b).ok_or(StoreError::Corrupt { what: "logged bucket", off: b as u64 })?;
            // The new array is still allocated: it is either unpublished (ours) or published
            // and retired by a writer whose epoch tag cannot pass this index's announcement,
            // which stays until the end of recovery.
            let published =
                a != 0 && detect::was_published(bucket, a, &self.store.mem.at::<Array>(a, "staged array")?.seen);
            st = if published { state::PUBLISHED } else { state::IDLE };
            rec.state.store(st, Ordering::SeqCst);
            if published {
                crash::hit(Point::RecoverMarked);
            }
        }
        if st == state::PUBLISHED {
            if rec.tail.load(Ordering::SeqCst) == rec.tail0.load(Ordering::SeqCst) {
                self.push_retired()?;
            }
            rec.staged_item.store(0, Ordering::SeqCst);
            rec.staged_array.store(0, Ordering::SeqCst);
            rec.state.store(state::IDLE, Ordering::SeqCst);
            report.finished_write = true;
        } else if rec.staged_array.load(Ordering::SeqCst) != 0 || rec.staged_item.load(Ordering::SeqCst) != 0 {
            report.undid_write = true;
        }
        for w in [&rec.staged_item, &rec.staged_array] {
            if w.load(Ordering::SeqCst) != 0 {
                self.thread.free_from(w)?;
                report.freed_staged += 1;
            }
        }
        // SeqCst: the dead holder's announcement goes only after its blocks are settled.
        self.store.table().announce[self.k].word.store(0, Ordering::SeqCst);
        Ok(report)
    }

    // ---- epochs (docs/design.md §16.2) --------------------------------------------------------

    fn pin(&self) {
        let t = self.store.table();
        epoch::pin(&t.epoch.word, &t.announce[self.k].word);
    }

    fn unpin(&self) {
        epoch::unpin(&self.store.table().announce[self.k].word);
    }

    fn try_advance(&self) {
        let t = self.store.table();
        epoch::try_advance(&t.epoch.word, t.announce.iter().map(|a| &a.word));
    }

    /// Frees the retired blocks whose epoch has passed (call unpinned).
    fn reclaim(&mut self) -> Result<(), StoreError> {
        let rec = self.rec;
        if self.since_advance >= ADVANCE_EVERY {
            self.since_advance = 0;
            self.try_advance();
        }
        let global = epoch::current(&self.store.table().epoch.word);
        let tail = rec.tail.load(Ordering::Relaxed);
        let mut head = rec.head.load(Ordering::Relaxed);
        while head < tail {
            let e = &rec.ring[head as usize % RING];
            // Relaxed: the ring is this worker's own.
            if e.off.load(Ordering::Relaxed) != 0 {
                if !epoch::reclaimable(e.epoch.load(Ordering::Relaxed), global) {
                    break;
                }
                let size = e.size.load(Ordering::Relaxed) as i64;
                // Detectable: the entry is cleared before the block is freed, and recovery of
                // this thread slot finishes both, so a crash neither leaks nor doubles it.
                if let Err(err) = self.thread.free_from(&e.off) {
                    // A corrupt entry: leak the block (bounded: one entry) and say so.
                    eprintln!("cxlkv worker {}: retired block not freed: {err}", self.k);
                    e.off.store(0, Ordering::Relaxed);
                }
                self.count(Stat::Bytes, -size);
                crash::hit(Point::Reclaimed);
            }
            head += 1;
            rec.head.store(head, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Makes room on the ring for one write's retirements (call unpinned): reclaims, and while
    /// the ring is full (a reader holds the epoch back), advances and waits.
    fn ring_room(&mut self) -> Result<(), StoreError> {
        let need = (MAX_DROPPED + 2) as u64;
        let mut spins = 0u32;
        loop {
            // Saturating: a corrupt pair must not panic (the head never passes the tail).
            let used = self.rec.tail.load(Ordering::Relaxed).saturating_sub(self.rec.head.load(Ordering::Relaxed));
            if used + need <= RING as u64 {
                return Ok(());
            }
            self.since_advance = ADVANCE_EVERY;
            self.reclaim()?;
            spins += 1;
            if spins > 4 {
                // A pinned reader (or a dead worker not yet replaced) holds the epoch.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }

    /// Pushes the logged old array and dropped items onto the ring, tagged with the epoch read
    /// now (after the CAS that unlinked them), and moves the tail past them in one store.
    fn push_retired(&mut self) -> Result<(), StoreError> {
        let rec = self.rec;
        let tag = epoch::tag(&self.store.table().epoch.word);
        let tail0 = rec.tail0.load(Ordering::Relaxed);
        let mut t = tail0;
        let mut put = |off: u64, size: usize| {
            let e = &rec.ring[t as usize % RING];
            // Relaxed: the entry becomes part of the ring with the tail store below.
            e.off.store(off, Ordering::Relaxed);
            e.epoch.store(tag, Ordering::Relaxed);
            e.size.store(size as u64, Ordering::Relaxed);
            t += 1;
        };
        let old = rec.old.load(Ordering::Relaxed);
        if old != 0 {
            let (_, items) = self.store.mem.array(old)?;
            put(old, array_size(items.len()));
        }
        let n = (rec.dropped_len.load(Ordering::Relaxed) as usize).min(MAX_DROPPED + 1);
        for i in 0..n {
            put(rec.dropped[i].load(Ordering::Relaxed), rec.dropped_size[i].load(Ordering::Relaxed) as usize);
        }
        self.since_advance += (t - tail0) as u32;
        // SeqCst: the one store that makes the retirements part of the ring, ordered after the
        // entries (recovery compares the tail with `tail0`).
        rec.tail.store(t, Ordering::SeqCst);
        Ok(())
    }

    // ---- reads ----------------------------------------------------------------------------------

    /// Looks `key` up; on a hit calls `found` with the live item while it is protected.
    pub fn get<R>(&mut self, key: &[u8], found: impl FnOnce(ItemRef<'_>) -> R) -> Result<Option<R>, StoreError> {
        let now = self.tick();
        let hash = hash_key(key);
        self.count(Stat::CmdGet, 1);
        self.pin();
        let r = self.find(hash, key, now).map(|(_, _, it)| {
            it.map(|it| {
                // Relaxed: an eviction hint.
                if it.item.atime.load(Ordering::Relaxed) != self.ms {
                    it.item.atime.store(self.ms, Ordering::Relaxed);
                }
                found(it)
            })
        });
        self.unpin();
        match &r {
            Ok(Some(_)) => self.count(Stat::GetHits, 1),
            Ok(None) => self.count(Stat::GetMisses, 1),
            Err(_) => {}
        }
        r
    }

    /// Sets `key`'s expiry (absolute, 0 = never) if it is live; returns whether it was.
    pub fn touch(&mut self, key: &[u8], exptime: u64) -> Result<bool, StoreError> {
        let now = self.tick();
        let hash = hash_key(key);
        self.count(Stat::CmdTouch, 1);
        self.pin();
        let r = self.find(hash, key, now).map(|(_, _, it)| {
            it.map(|it| {
                // Relaxed: the expiry is the one mutable field of an item; a racing read sees
                // the old or the new value, either being a valid order of the two commands.
                it.item.exptime.store(exptime, Ordering::Relaxed);
                it.item.atime.store(self.ms, Ordering::Relaxed);
            })
            .is_some()
        });
        self.unpin();
        let hit = r?;
        self.count(if hit { Stat::TouchHits } else { Stat::TouchMisses }, 1);
        Ok(hit)
    }

    /// The bucket index, its current array, and the live item holding `key`. Call pinned.
    fn find(&self, hash: u64, key: &[u8], now: u64) -> Result<(usize, u64, Option<ItemRef<'s>>), StoreError> {
        let b = hash as usize & self.store.mask;
        // Acquire: pairs with the Release of the CAS that published the array and its items.
        let a = self.store.buckets()[b].load(Ordering::Acquire);
        let gen = self.store.table().flush_gen.load(Ordering::Relaxed);
        let (_, items) = self.store.mem.array(a)?;
        for o in items {
            let it = self.store.mem.item(o.load(Ordering::Relaxed))?;
            if it.item.hash == hash && it.key == key && !it.dead(now, gen) {
                return Ok((b, a, Some(it)));
            }
        }
        Ok((b, a, None))
    }

    /// The time now, applying a delayed `flush_all` whose moment has come.
    fn tick(&mut self) -> u64 {
        self.ms = now_ms();
        let now = self.ms / 1000;
        let t = self.store.table();
        // Relaxed load: a delayed flush applied a moment late is still applied before any item
        // made after this read (the generation bump below precedes this worker's next write).
        let at = t.flush_at.load(Ordering::Relaxed);
        if at != 0 && now >= at && t.flush_at.compare_exchange(at, 0, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            t.flush_gen.fetch_add(1, Ordering::SeqCst);
        }
        now
    }

    /// `flush_all`: every item now (or, with a delay, at `now + delay`) is gone.
    pub fn flush_all(&mut self, delay: u64) {
        let t = self.store.table();
        self.count(Stat::CmdFlush, 1);
        if delay == 0 {
            // SeqCst: an item made after this returns carries the new generation.
            t.flush_at.store(0, Ordering::SeqCst);
            t.flush_gen.fetch_add(1, Ordering::SeqCst);
        } else {
            t.flush_at.store(now() + delay, Ordering::SeqCst);
        }
    }

    // ---- writes ---------------------------------------------------------------------------------

    /// A storage command: stores `data` under `key` with `flags` and `exptime` (absolute, 0 =
    /// never) as `mode` says.
    pub fn store_item(
        &mut self,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exptime: u64,
        data: &[u8],
    ) -> Result<Stored, StoreError> {
        self.count(Stat::CmdSet, 1);
        let put = |body| Plan::Put { flags, exptime, body };
        let r = self.write(key, data, |cur| match (mode, cur) {
            (Mode::Set, _) | (Mode::Add, None) | (Mode::Replace, Some(_)) => (put(Body::New), Stored::Stored),
            (Mode::Add, Some(_)) | (Mode::Replace | Mode::Append | Mode::Prepend, None) => {
                (Plan::Keep, Stored::NotStored)
            }
            (Mode::Append | Mode::Prepend, Some(it)) => {
                let body = if mode == Mode::Append { Body::Append } else { Body::Prepend };
                let exp = it.item.exptime.load(Ordering::Relaxed);
                (Plan::Put { flags: it.item.flags, exptime: exp, body }, Stored::Stored)
            }
            (Mode::Cas(_), None) => (Plan::Keep, Stored::NotFound),
            (Mode::Cas(u), Some(it)) if it.item.cas != u => (Plan::Keep, Stored::Exists),
            (Mode::Cas(_), Some(_)) => (put(Body::New), Stored::Stored),
        })?;
        match (mode, r) {
            (Mode::Cas(_), Stored::Stored) => self.count(Stat::CasHits, 1),
            (Mode::Cas(_), Stored::Exists) => self.count(Stat::CasBadval, 1),
            (Mode::Cas(_), Stored::NotFound) => self.count(Stat::CasMisses, 1),
            _ => {}
        }
        if r == Stored::Stored {
            self.count(Stat::TotalItems, 1);
        }
        Ok(r)
    }

    /// `delete`: returns whether `key` was live.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        let hit = self.write(key, &[], |cur| if cur.is_some() { (Plan::Remove, true) } else { (Plan::Keep, false) })?;
        self.count(if hit { Stat::DeleteHits } else { Stat::DeleteMisses }, 1);
        Ok(hit)
    }

    /// `incr` (or `decr`, saturating at 0) by `delta`: `Ok(None)` for an absent key,
    /// `Ok(Some(Err(())))` for a value that is not a number, else the new value.
    #[allow(clippy::type_complexity)]
    pub fn incr(&mut self, key: &[u8], delta: u64, incr: bool) -> Result<Option<Result<u64, ()>>, StoreError> {
        let r = self.write(key, &[], |cur| {
            let Some(it) = cur else { return (Plan::Keep, None) };
            let Some(v) = parse_number(it.data) else { return (Plan::Keep, Some(Err(()))) };
            let n = if incr { v.wrapping_add(delta) } else { v.saturating_sub(delta) };
            let exp = it.item.exptime.load(Ordering::Relaxed);
            (Plan::Put { flags: it.item.flags, exptime: exp, body: Body::Number(n) }, Some(Ok(n)))
        })?;
        let s = match (incr, r.is_some()) {
            (true, true) => Stat::IncrHits,
            (true, false) => Stat::IncrMisses,
            (false, true) => Stat::DecrHits,
            (false, false) => Stat::DecrMisses,
        };
        self.count(s, 1);
        Ok(r)
    }

    /// One write to `key`'s bucket: `decide` sees the live item (or none) and says what to do;
    /// retried from a fresh read when a racing write changed the bucket.
    fn write<R>(
        &mut self,
        key: &[u8],
        data: &[u8],
        mut decide: impl FnMut(Option<ItemRef<'_>>) -> (Plan, R),
    ) -> Result<R, StoreError> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(StoreError::Corrupt { what: "key length", off: key.len() as u64 });
        }
        let hash = hash_key(key);
        loop {
            let now = self.tick();
            self.ring_room()?;
            self.pin();
            let r = self.try_write(hash, key, data, now, &mut decide);
            self.unpin();
            let step = self.reclaim().and(r);
            match step {
                Ok(Some(r)) => return Ok(r),
                Ok(None) => continue,
                Err(StoreError::OutOfMemory) => {
                    if !self.evict(now)? {
                        return Err(StoreError::OutOfMemory);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt of [`Worker::write`], pinned: `Ok(None)` when the CAS lost a race.
    fn try_write<R>(
        &mut self,
        hash: u64,
        key: &[u8],
        data: &[u8],
        now: u64,
        decide: &mut impl FnMut(Option<ItemRef<'_>>) -> (Plan, R),
    ) -> Result<Option<R>, StoreError> {
        let (b, old, cur) = self.find(hash, key, now)?;
        let (plan, result) = decide(cur);
        let new_len = match plan {
            Plan::Keep => return Ok(Some(result)),
            Plan::Remove => None,
            Plan::Put { body, .. } => Some(body_len(body, data, cur)),
        };
        if let Some(n) = new_len {
            if n > crate::layout::MAX_VALUE {
                return Err(StoreError::TooLarge(n));
            }
            self.check_limit(item_size(key.len(), n))?;
        }
        self.commit(b, old, cur.map(|c| c.off), now, |w| match plan {
            Plan::Put { flags, exptime, body } => w.make_item(hash, key, flags, exptime, body, data, cur).map(Some),
            _ => Ok(None),
        })
        .map(|done| done.then_some(result))
    }

    /// Builds and publishes bucket `b`'s new array: `old`'s items less `drop` (and dead ones,
    /// up to [`MAX_DROPPED`]), plus the item `make` allocates into the staged word. Returns
    /// whether the CAS won. Call pinned, with ring room.
    fn commit(
        &mut self,
        b: usize,
        old: u64,
        drop: Option<u64>,
        now: u64,
        make: impl FnOnce(&mut Self) -> Result<Option<(u64, usize)>, StoreError>,
    ) -> Result<bool, StoreError> {
        let store = self.store;
        let gen = store.table().flush_gen.load(Ordering::Relaxed);
        let (old_arr, items) = store.mem.array(old)?;
        let mut keep = std::mem::take(&mut self.keep);
        keep.clear();
        let mut dropped = [(0u64, 0usize); MAX_DROPPED + 1];
        let mut n_dropped = 0;
        for o in items {
            let off = o.load(Ordering::Relaxed);
            let it = store.mem.item(off)?;
            let gone = Some(off) == drop || (n_dropped < MAX_DROPPED && it.dead(now, gen));
            if gone && n_dropped <= MAX_DROPPED {
                dropped[n_dropped] = (off, it.size());
                n_dropped += 1;
            } else {
                keep.push(off);
            }
        }
        let dropped = &dropped[..n_dropped];
        let r = self.publish_array(b, old, old_arr, &mut keep, dropped, drop.is_some(), make);
        self.keep = keep;
        r
    }

    /// The rest of [`Worker::commit`], with the kept items in `keep` and the dropped ones
    /// (and their sizes) in `dropped`.
    #[allow(clippy::too_many_arguments)]
    fn publish_array(
        &mut self,
        b: usize,
        old: u64,
        old_arr: Option<&Array>,
        keep: &mut Vec<u64>,
        dropped: &[(u64, usize)],
        replaced: bool,
        make: impl FnOnce(&mut Self) -> Result<Option<(u64, usize)>, StoreError>,
    ) -> Result<bool, StoreError> {
        let store = self.store;
        let rec = self.rec;
        let new_item = make(self)?;
        if let Some((i, _)) = new_item {
            keep.push(i);
        }
        if keep.len() > MAX_BUCKET {
            self.abandon()?;
            return Err(StoreError::BucketFull);
        }
        // The new array, detectably allocated; `seen` cleared before it can be published.
        let asize = array_size(keep.len());
        let a = match self.thread.alloc_into(asize, &rec.staged_array) {
            Ok(p) => p,
            Err(e) => {
                self.abandon()?;
                return Err(e.into());
            }
        };
        // SAFETY: a fresh private block of `asize` bytes, 8-aligned (≥ 16 bytes).
        unsafe {
            let h = a.cast::<Array>().as_ptr();
            std::ptr::write(h, Array { seen: AtomicU64::new(0), len: keep.len() as u64 });
            let dst = a.as_ptr().add(std::mem::size_of::<Array>()).cast::<u64>();
            std::ptr::copy_nonoverlapping(keep.as_ptr(), dst, keep.len());
        }
        let a = store.mem.offset(a);
        crash::hit(Point::Staged);
        // The log, then PREPARED (SeqCst: the log is complete before the state says so).
        rec.bucket.store(b as u64, Ordering::Relaxed);
        rec.old.store(old, Ordering::Relaxed);
        rec.tail0.store(rec.tail.load(Ordering::Relaxed), Ordering::Relaxed);
        for (i, &(off, size)) in dropped.iter().enumerate() {
            rec.dropped[i].store(off, Ordering::Relaxed);
            rec.dropped_size[i].store(size as u64, Ordering::Relaxed);
        }
        rec.dropped_len.store(dropped.len() as u64, Ordering::Relaxed);
        rec.state.store(state::PREPARED, Ordering::SeqCst);
        crash::hit(Point::Prepared);
        // Marks `old` seen, then CASes (SeqCst: Release publishes the array and item; the
        // reclamation proof of §16.2 orders it against pins).
        let won = detect::publish(&store.buckets()[b], old, old_arr.map(|o| &o.seen), a);
        if !won {
            rec.state.store(state::IDLE, Ordering::SeqCst);
            crash::hit(Point::Failed);
            self.abandon()?;
            return Ok(false);
        }
        crash::hit(Point::Swapped);
        rec.state.store(state::PUBLISHED, Ordering::SeqCst);
        crash::hit(Point::Published);
        self.push_retired()?;
        crash::hit(Point::Pushed);
        rec.staged_item.store(0, Ordering::SeqCst);
        rec.staged_array.store(0, Ordering::SeqCst);
        rec.state.store(state::IDLE, Ordering::SeqCst);
        // Accounting (drifts by at most one write's blocks when a worker dies here).
        let added = new_item.map_or(0, |(_, s)| s);
        self.count(Stat::CurrItems, i64::from(new_item.is_some()) - dropped.len() as i64);
        self.count(Stat::Reclaimed, dropped.len() as i64 - i64::from(replaced));
        let bytes = (added + asize) as i64;
        self.count(Stat::Bytes, bytes);
        self.usage += bytes;
        Ok(true)
    }

    /// Frees the never-published staged blocks (the log says idle).
    fn abandon(&mut self) -> Result<(), StoreError> {
        for w in [&self.rec.staged_item, &self.rec.staged_array] {
            if w.load(Ordering::Relaxed) != 0 {
                self.thread.free_from(w)?;
            }
        }
        Ok(())
    }

    /// Allocates (into the staged word) and fills a new item; returns its offset and size.
    #[allow(clippy::too_many_arguments)]
    fn make_item(
        &mut self,
        hash: u64,
        key: &[u8],
        flags: u32,
        exptime: u64,
        body: Body,
        data: &[u8],
        cur: Option<ItemRef<'_>>,
    ) -> Result<(u64, usize), StoreError> {
        let mut num = [0u8; 20];
        let (first, second): (&[u8], &[u8]) = match (body, cur) {
            (Body::New, _) => (data, &[]),
            (Body::Append, Some(c)) => (c.data, data),
            (Body::Prepend, Some(c)) => (data, c.data),
            // Padded with spaces to the old length, as memcached rewrites a number in place.
            (Body::Number(n), c) => (format_number(n, &mut num), &SPACES[..pad(n, c)]),
            (Body::Append | Body::Prepend, None) => (data, &[]),
        };
        let len = first.len() + second.len();
        let size = item_size(key.len(), len);
        let p = self.thread.alloc_into(size, &self.rec.staged_item)?;
        let seq = self.rec.cas_seq.load(Ordering::Relaxed) + 1;
        self.rec.cas_seq.store(seq, Ordering::Relaxed);
        let gen = self.store.table().flush_gen.load(Ordering::Relaxed);
        let header = Item {
            cas: seq << 6 | self.k as u64,
            hash,
            exptime: AtomicU64::new(exptime),
            atime: AtomicU64::new(self.ms),
            flags,
            key_len: key.len() as u32,
            data_len: len as u32,
            flush_gen: gen as u32,
        };
        // SAFETY: a fresh private block of `size` bytes, 8-aligned (≥ 48 bytes); the three
        // copies fill it exactly and do not overlap their sources (heap blocks already
        // published, or the request buffer).
        unsafe {
            std::ptr::write(p.cast::<Item>().as_ptr(), header);
            let mut dst = p.as_ptr().add(ITEM_HEADER);
            for part in [key, first, second] {
                std::ptr::copy_nonoverlapping(part.as_ptr(), dst, part.len());
                dst = dst.add(part.len());
            }
        }
        Ok((self.store.mem.offset(p), size))
    }

    /// Refuses a store of `size` bytes while the table is over its limit (the caller evicts).
    fn check_limit(&mut self, size: usize) -> Result<(), StoreError> {
        // Relaxed: the limit changes only at server start.
        let limit = self.store.table().memory_limit.load(Ordering::Relaxed);
        if limit == 0 {
            return Ok(());
        }
        if size as u64 > limit {
            return Err(StoreError::TooLarge(size));
        }
        self.since_usage += 1;
        if self.since_usage >= USAGE_EVERY {
            self.since_usage = 0;
            self.usage = self.store.stat(Stat::Bytes);
        }
        if self.usage + size as i64 > limit as i64 {
            return Err(StoreError::OutOfMemory);
        }
        Ok(())
    }

    /// Evicts one item: among [`EVICT_SAMPLE`] items of consecutive buckets from a random one,
    /// a dead one or else the least recently read (sampled LRU). Returns whether anything went.
    fn evict(&mut self, now: u64) -> Result<bool, StoreError> {
        self.usage = self.store.stat(Stat::Bytes);
        let gen = self.store.table().flush_gen.load(Ordering::Relaxed);
        for _ in 0..64 {
            self.ring_room()?;
            self.pin();
            let mut victim: Option<(usize, u64, u64, u64)> = None; // bucket, array, item, atime
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let start = self.rng as usize;
            let r = (|| {
                // From a random bucket on, until EVICT_SAMPLE items are seen (a sparse table
                // has mostly empty buckets: sampling buckets would evict at random).
                let mut seen = 0;
                for i in 0..EVICT_SCAN.min(self.store.mask + 1) {
                    if seen >= EVICT_SAMPLE {
                        break;
                    }
                    let b = start.wrapping_add(i) & self.store.mask;
                    let a = self.store.buckets()[b].load(Ordering::Acquire);
                    let (_, items) = self.store.mem.array(a)?;
                    seen += items.len();
                    for o in items {
                        let it = self.store.mem.item(o.load(Ordering::Relaxed))?;
                        let age = if it.dead(now, gen) { 0 } else { it.item.atime.load(Ordering::Relaxed) + 1 };
                        if victim.is_none_or(|v| age < v.3) {
                            victim = Some((b, a, it.off, age));
                        }
                    }
                }
                match victim {
                    Some((b, a, off, _)) => self.commit(b, a, Some(off), now, |_| Ok(None)),
                    None => Ok(false),
                }
            })();
            self.unpin();
            self.reclaim()?;
            if r? {
                self.count(Stat::Evictions, 1);
                self.usage = self.store.stat(Stat::Bytes);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Frees what the epoch allows and gives the thread slot back (clean shutdown). Retired
    /// blocks still held stay on the ring for the next holder of this index.
    pub fn finish(mut self) -> Result<(), StoreError> {
        self.since_advance = ADVANCE_EVERY;
        self.reclaim()
    }
}

/// The body length of a new item.
fn body_len(body: Body, data: &[u8], cur: Option<ItemRef<'_>>) -> usize {
    match body {
        Body::New => data.len(),
        Body::Append | Body::Prepend => data.len() + cur.map_or(0, |c| c.data.len()),
        Body::Number(n) => format_number(n, &mut [0; 20]).len() + pad(n, cur),
    }
}

/// Spaces a rewritten number gets after it: up to the old value's length (at most 20, the
/// longest number: a longer old value is replaced by a new, unpadded one, as in memcached).
fn pad(n: u64, cur: Option<ItemRef<'_>>) -> usize {
    let len = format_number(n, &mut [0; 20]).len();
    cur.map_or(0, |c| c.data.len()).saturating_sub(len).min(SPACES.len())
}

const SPACES: [u8; 20] = [b' '; 20];

/// `n` in decimal, in `buf`.
pub(crate) fn format_number(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// A stored value read as a number for incr/decr, as memcached reads it (`strtoull`): optional
/// leading whitespace, decimal digits that fit 64 bits, then the end or whitespace (anything
/// after that is ignored; memcached pads a shrunk number with spaces).
fn parse_number(data: &[u8]) -> Option<u64> {
    let start = data.iter().take_while(|c| c.is_ascii_whitespace()).count();
    let data = &data[start..];
    let digits = data.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || data.get(digits).is_some_and(|c| !c.is_ascii_whitespace()) {
        return None;
    }
    std::str::from_utf8(&data[..digits]).ok()?.parse().ok()
}

/// Stats that only need the statistics array (the rest come from the table).
pub const STAT_NAMES: [(Stat, &str); STATS] = [
    (Stat::CmdGet, "cmd_get"),
    (Stat::CmdSet, "cmd_set"),
    (Stat::CmdTouch, "cmd_touch"),
    (Stat::CmdFlush, "cmd_flush"),
    (Stat::GetHits, "get_hits"),
    (Stat::GetMisses, "get_misses"),
    (Stat::DeleteHits, "delete_hits"),
    (Stat::DeleteMisses, "delete_misses"),
    (Stat::IncrHits, "incr_hits"),
    (Stat::IncrMisses, "incr_misses"),
    (Stat::DecrHits, "decr_hits"),
    (Stat::DecrMisses, "decr_misses"),
    (Stat::CasHits, "cas_hits"),
    (Stat::CasMisses, "cas_misses"),
    (Stat::CasBadval, "cas_badval"),
    (Stat::TouchHits, "touch_hits"),
    (Stat::TouchMisses, "touch_misses"),
    (Stat::TotalItems, "total_items"),
    (Stat::CurrItems, "curr_items"),
    (Stat::Bytes, "bytes"),
    (Stat::Evictions, "evictions"),
    (Stat::Reclaimed, "reclaimed"),
    (Stat::CurrConnections, "curr_connections"),
    (Stat::TotalConnections, "total_connections"),
];
