//! Remote frees must not strand memory (docs/design.md §4.6): a block freed by a thread that does
//! not own its slab is reusable at the owner's next refill, through the owner's mailbox, not
//! only once every block of the slab has been freed. Full and limited coherence; the no-HWcc
//! model still counts remote frees in batches (§4.6 says why). Not a benchmark: the heap's
//! length (and so its memory) is what is asserted, never time.

mod common;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{fork_child, pattern, serial, HeapName};
use cxlalloc::{Bracket, Coherence, Config, Heap, Offset, ThreadHandle};

const BLOCK: usize = 64;
/// Blocks of 64 B in one 32 KiB slab.
const PER_SLAB: usize = 512;
const SLABS_PER_ROUND: usize = 4;
const ROUNDS: usize = 24;

fn config(coherence: Coherence) -> Config {
    Config { thread_slots: 16, huge_capacity: 0, small_batch: 1, coherence, ..Config::with_capacity(256 << 20) }
}

fn fill(p: NonNull<u8>, salt: u64) {
    let w = p.as_ptr() as *mut u64;
    for i in 0..BLOCK / 8 {
        // SAFETY: a live block of BLOCK bytes, 8-aligned.
        unsafe { w.add(i).write(pattern(i as u64, salt)) };
    }
}

fn intact(p: NonNull<u8>, salt: u64) -> bool {
    let w = p.as_ptr() as *const u64;
    // SAFETY: a live block of BLOCK bytes, 8-aligned.
    (0..BLOCK / 8).all(|i| unsafe { w.add(i).read() } == pattern(i as u64, salt))
}

/// One owner `a` allocates rounds of slabs' worth of blocks, keeps one block in every
/// `PER_SLAB` (a long-lived value pinning its slab), and `b` frees all the others remotely. The
/// small heap must stay a few slabs long: without reuse it grows by `SLABS_PER_ROUND` a round.
fn owner_reuses_remote_frees(coherence: Coherence) {
    let _g = serial();
    let name = HeapName::new(&format!("reuse-{}", coherence.name()));
    let heap = Heap::create(name.as_str(), &config(coherence)).unwrap();
    let a = heap.attach().unwrap();
    let b = heap.attach().unwrap();
    let mut kept: Vec<(NonNull<u8>, u64)> = Vec::new();
    for round in 0..ROUNDS {
        let mut passed = Vec::new();
        for i in 0..SLABS_PER_ROUND * PER_SLAB {
            let p = a.alloc(BLOCK).unwrap();
            let salt = (round * 1_000_000 + i) as u64;
            fill(p, salt);
            if i % PER_SLAB == 0 {
                kept.push((p, salt));
            } else {
                passed.push((p, salt));
            }
        }
        for (p, salt) in passed {
            assert!(intact(p, salt), "round {round}: a block was handed out twice");
            b.free(p).unwrap();
        }
    }
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    {
        let length = report.bracket(Bracket::Small).length as usize;
        // Every round's blocks but the kept ones come back: the kept blocks fill a few slabs.
        let bound = kept.len() / PER_SLAB + 2 * SLABS_PER_ROUND + 2;
        assert!(
            length <= bound,
            "{}: small heap grew to {length} slabs for {} live blocks (bound {bound}); stats {:?}",
            coherence.name(),
            kept.len(),
            heap.stats().counters
        );
        assert!(heap.stats().counters.harvested > 0);
    }
    for &(p, salt) in &kept {
        assert!(intact(p, salt), "a kept block was overwritten");
    }
    for (p, _) in kept {
        b.free(p).unwrap();
    }
    drop(a);
    drop(b);
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.live_blocks(), 0, "{report}");
}

#[test]
fn remote_frees_are_reused_before_their_slab_drains_under_full_coherence() {
    owner_reuses_remote_frees(Coherence::Full);
}

#[test]
fn remote_frees_are_reused_before_their_slab_drains_under_limited_coherence() {
    owner_reuses_remote_frees(Coherence::Limited);
}

#[test]
fn a_block_waiting_in_a_mailbox_cannot_be_freed_again() {
    for coherence in [Coherence::Full, Coherence::Limited] {
        waiting_block_cannot_be_freed_again(coherence);
    }
}

/// A block waiting in its owner's mailbox is freed: freeing it again, remotely or by its owner,
/// is a double free, and the owner's harvest returns it exactly once.
fn waiting_block_cannot_be_freed_again(coherence: Coherence) {
    let _g = serial();
    let name = HeapName::new(&format!("reuse-double-{}", coherence.name()));
    let heap = Heap::create(name.as_str(), &config(coherence)).unwrap();
    let a = heap.attach().unwrap();
    let b = heap.attach().unwrap();
    let p = a.alloc(BLOCK).unwrap();
    let q = a.alloc(BLOCK).unwrap();
    b.free(p).unwrap();
    assert_eq!(b.free(p), Err(cxlalloc::FreeError::DoubleFree));
    assert_eq!(a.free(p), Err(cxlalloc::FreeError::DoubleFree));
    assert!(a.usable_size(p).is_err());
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.live_blocks(), 1, "{r}");
    a.free(q).unwrap();
    drop(b);
    drop(a);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.live_blocks(), 0, "{r}");
}

/// Cells of the shared hand-off table: producers CAS an offset into an empty cell, consumers
/// swap it out.
const CELLS: usize = 256;
const PER_PRODUCER: usize = 6000;
const THREADS: usize = 3;

fn cells(heap: &Heap) -> &[AtomicU64] {
    let off = heap.root(0).unwrap().load(Ordering::Acquire);
    let p = heap.pointer(Offset::<AtomicU64>::from_raw(off)).unwrap();
    // SAFETY: the parent allocated CELLS zeroed words there and frees them only at the end.
    unsafe { std::slice::from_raw_parts(p.as_ptr(), CELLS) }
}

/// A process of `THREADS` threads: producers allocate blocks of mixed sizes, keep one in 64,
/// write a pattern and hand the rest through the shared cells; consumers take blocks (made by
/// the other process), check their bytes and free them remotely.
fn hand_off(name: &str, produce: bool) -> Result<(), String> {
    let heap = Heap::open(name).map_err(|e| e.to_string())?;
    let heap = &heap;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || -> Result<(), String> {
                    let h = heap.attach().map_err(|e| e.to_string())?;
                    let table = cells(heap);
                    if produce {
                        produce_blocks(heap, &h, table, t)
                    } else {
                        consume_blocks(heap, &h, table)
                    }
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().map_err(|_| "worker panicked".to_string())?)
    })
}

fn produce_blocks(heap: &Heap, h: &ThreadHandle, table: &[AtomicU64], t: usize) -> Result<(), String> {
    let mut kept = Vec::new();
    for n in 0..PER_PRODUCER {
        let size = [16, 64, 200, 1024, 3000][n % 5];
        let p = h.alloc(size).map_err(|e| e.to_string())?;
        let off = heap.offset_of(p.as_ptr()).map_err(|e| e.to_string())?.raw();
        // SAFETY: a fresh block of at least `size` ≥ 16 bytes, 8-aligned.
        unsafe { (p.as_ptr() as *mut u64).add(1).write(pattern(off, 7)) };
        if n % 64 == 0 {
            kept.push(p);
            continue;
        }
        let mut i = (n * 31 + t * 7) % CELLS;
        while table[i].compare_exchange(0, off, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            i = (i + 1) % CELLS;
            std::thread::yield_now();
        }
    }
    for p in kept {
        h.free(p).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn consume_blocks(heap: &Heap, h: &ThreadHandle, table: &[AtomicU64]) -> Result<(), String> {
    let done = heap.root(1).unwrap();
    let mut i = 0;
    loop {
        let off = table[i].swap(0, Ordering::AcqRel);
        if off != 0 {
            let p = heap.pointer(Offset::<u8>::from_raw(off)).map_err(|e| e.to_string())?;
            // SAFETY: a block the producer wrote and handed over, at least 16 bytes.
            if unsafe { (p.as_ptr() as *const u64).add(1).read() } != pattern(off, 7) {
                return Err(format!("block {off:#x} corrupted (handed out twice?)"));
            }
            h.free(p).map_err(|e| format!("free {off:#x}: {e}"))?;
        } else if done.load(Ordering::Acquire) == 1 && table.iter().all(|c| c.load(Ordering::Acquire) == 0) {
            return Ok(());
        }
        i = (i + 1) % CELLS;
    }
}

/// Two processes of three threads each (six threads on a two-core machine): one produces, the
/// other frees every block it receives. The heap stays within a bound far below what the
/// produced volume would take if remote frees waited for their slabs to drain.
#[test]
fn processes_freeing_each_others_blocks_keep_the_heap_small() {
    processes_keep_the_heap_small(Coherence::Full);
}

#[test]
fn processes_freeing_each_others_blocks_keep_a_limited_heap_small() {
    processes_keep_the_heap_small(Coherence::Limited);
}

fn processes_keep_the_heap_small(coherence: Coherence) {
    let _g = serial();
    let name = HeapName::new(&format!("reuse-procs-{}", coherence.name()));
    let heap = Heap::create(name.as_str(), &config(coherence)).unwrap();
    let t = heap.attach().unwrap();
    let table = t.alloc_zeroed(CELLS * 8).unwrap();
    heap.root(0).unwrap().store(heap.offset_of(table.as_ptr()).unwrap().raw(), Ordering::Release);
    let n = name.as_str().to_string();
    let mut consumer = fork_child("consumer", move || hand_off(&n, false));
    let n = name.as_str().to_string();
    let mut producer = fork_child("producer", move || hand_off(&n, true));
    producer.succeeds();
    heap.root(1).unwrap().store(1, Ordering::Release);
    consumer.succeeds();
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.live_blocks(), 1, "{report}");
    let stats = heap.stats();
    // Produced: 3 × 6000 blocks of 16–3000 B (≈ 18 MiB). The producers' live set is the
    // cells in flight plus the kept blocks: a few MiB at most.
    let data = stats.data_bytes;
    assert!(data <= 8 << 20, "heap data grew to {data} bytes; {:?}", stats.counters);
    assert!(stats.counters.harvested > 0, "{:?}", stats.counters);
    t.free(table).unwrap();
}

/// Bytes of backing store the heap's data file holds.
fn data_file_bytes(name: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(Heap::path_of(name).unwrap().join("data")).unwrap().blocks() * 512
}

/// A thread that frees everything and detaches returns its empty slabs to the global list; with
/// `return_pages` (the default) their pages go back to the system, without it they stay.
/// Either way a slab popped again serves blocks whose bytes are the new owner's.
fn pages_after_a_drained_thread(return_pages: bool) -> (u64, u64) {
    let _g = serial();
    let name = HeapName::new(&format!("pages-{return_pages}"));
    let config = Config { cache_local: 0, return_pages, ..config(Coherence::Full) };
    let heap = Heap::create(name.as_str(), &config).unwrap();
    let t = heap.attach().unwrap();
    let blocks: Vec<_> = (0..64 * PER_SLAB).map(|i| (t.alloc(BLOCK).unwrap(), i as u64)).collect();
    for &(p, salt) in &blocks {
        fill(p, salt);
    }
    let full = data_file_bytes(name.as_str());
    for (p, _) in blocks {
        t.free(p).unwrap();
    }
    drop(t);
    let drained = data_file_bytes(name.as_str());
    let u = heap.attach().unwrap();
    let again: Vec<_> = (0..4 * PER_SLAB).map(|i| (u.alloc(BLOCK).unwrap(), 7 + i as u64)).collect();
    for &(p, salt) in &again {
        fill(p, salt);
    }
    assert!(again.iter().all(|&(p, salt)| intact(p, salt)));
    assert_eq!(heap.stats().counters.global_pops, 4, "the slabs came from the global list");
    for (p, _) in again {
        u.free(p).unwrap();
    }
    drop(u);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    (full, drained)
}

#[test]
fn empty_slabs_on_the_global_list_give_their_pages_back() {
    let (full, drained) = pages_after_a_drained_thread(true);
    assert!(full >= 64 * (32 << 10), "64 slabs touched, {full} bytes stored");
    assert!(drained < full / 8, "{full} bytes before, {drained} after every slab went global");
}

#[test]
fn without_return_pages_empty_slabs_keep_their_pages() {
    let (full, drained) = pages_after_a_drained_thread(false);
    assert!(drained >= full, "{full} bytes before, {drained} after");
}

/// Frees every block of `blocks` and returns the data file's stored bytes just before and just
/// after (the thread stays attached: its trims push the emptied slabs to the global list).
fn stored_around_freeing(t: &ThreadHandle, name: &str, blocks: Vec<NonNull<u8>>) -> (u64, u64) {
    let before = data_file_bytes(name);
    for p in blocks {
        t.free(p).unwrap();
    }
    (before, data_file_bytes(name))
}

fn alloc_filled(t: &ThreadHandle, slabs: usize) -> Vec<NonNull<u8>> {
    (0..slabs * PER_SLAB)
        .map(|i| {
            let p = t.alloc(BLOCK).unwrap();
            fill(p, i as u64);
            p
        })
        .collect()
}

/// A thread that takes slabs back from the global list (here: every slab it gave away) keeps
/// the pages of the slabs it pushes there again, up to its warm bound: it would fault them in
/// again at its next refills (docs/design.md §4.7).
#[test]
fn a_thread_taking_slabs_back_keeps_the_pages_of_slabs_it_pushes_again() {
    let _g = serial();
    let (name, heap) = warm_heap("warm-pages");
    let t = heap.attach().unwrap();
    // First round: bumped slabs, pushed before any pop, give their pages back.
    let first = alloc_filled(&t, 8);
    let (full, after) = stored_around_freeing(&t, name.as_str(), first);
    assert!(after < full / 2, "{full} bytes before, {after} after the first round");
    // Second round: the same slabs popped again, then pushed again with their pages.
    let second = alloc_filled(&t, 8);
    assert_eq!(heap.stats().counters.global_pops, 8, "the slabs came from the global list");
    let (full, after) = stored_around_freeing(&t, name.as_str(), second);
    assert!(full >= 8 * (32 << 10), "8 slabs touched, {full} bytes stored");
    assert!(after >= full, "{full} bytes before, {after} after the second round");
    drop(t);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

/// A thread that claims slabs by freeing their blocks remotely (T8) keeps the pages of those
/// slabs when it pushes them to the global list, though it never popped one: they were
/// another thread's live memory, and that thread is likely to pop them again (without HWcc,
/// every slab a consumer drains comes back this way; docs/design.md §4.7, "Warm slabs").
#[test]
fn a_thread_claiming_slabs_by_remote_frees_keeps_their_pages_when_it_pushes_them() {
    let _g = serial();
    let (name, heap) = warm_heap("warm-claims");
    let freer = heap.attach().unwrap();
    let owner = heap.attach().unwrap();
    let blocks = alloc_filled(&owner, 8);
    // The owner leaves: its mailbox closes, so the frees below are counted and the last free of
    // each slab claims it for `freer`, which caches nothing and pushes it at once.
    drop(owner);
    let (full, after) = stored_around_freeing(&freer, name.as_str(), blocks);
    assert!(heap.stats().counters.claims >= 8, "{:?}", heap.stats().counters);
    assert_eq!(heap.stats().counters.global_pops, 0, "the freer never popped a slab");
    assert!(full >= 8 * (32 << 10), "8 slabs touched, {full} bytes stored");
    assert!(after >= full, "{full} bytes before, {after} after the claimed slabs went global");
    drop(freer);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

/// A full-model heap that caches no empty slab locally: every emptied slab goes to the global
/// list at once, so page return is seen at each push.
fn warm_heap(tag: &str) -> (HeapName, Heap) {
    let name = HeapName::new(tag);
    let config = Config { cache_local: 0, ..config(Coherence::Full) };
    let heap = Heap::create(name.as_str(), &config).unwrap();
    (name, heap)
}

/// Makes `t` warm: it pops a slab from the global list (two slabs, the current one stays, freed
/// and then taken again).
fn warm_up(t: &ThreadHandle, heap: &Heap, name: &HeapName) {
    for _ in 0..2 {
        let round = alloc_filled(t, 2);
        stored_around_freeing(t, name.as_str(), round);
    }
    assert!(heap.stats().counters.global_pops >= 1);
}

/// Past its warm bound (4 MiB pushed since its last pop) a thread is shrinking, not churning:
/// every further slab it pushes gives its pages back, without waiting for it to detach.
#[test]
fn a_shrinking_thread_gives_pages_back_past_its_warm_bound() {
    let _g = serial();
    let (name, heap) = warm_heap("warm-bound");
    let t = heap.attach().unwrap();
    warm_up(&t, &heap, &name);
    // 192 slabs (6 MiB): 128 pushed keep their pages (4 MiB), the others give them back.
    let many = alloc_filled(&t, 192);
    let (full, after) = stored_around_freeing(&t, name.as_str(), many);
    let slab = 32u64 << 10;
    assert!(full >= 192 * slab, "192 slabs touched, {full} bytes stored");
    assert!(after <= full - 56 * slab, "{full} bytes before, {after} after: ~64 slabs' pages should be gone");
    assert!(after >= full - 72 * slab, "{full} bytes before, {after} after: 128 slabs' pages should stay");
    drop(t);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

/// A warm thread that detaches gives the pages of the slabs it leaves back: nobody is about to
/// take them back from it (docs/design.md §4.7, "Warm slabs").
#[test]
fn a_warm_thread_that_detaches_gives_the_pages_of_its_last_slabs_back() {
    let _g = serial();
    let (name, heap) = warm_heap("warm-detach");
    let t = heap.attach().unwrap();
    warm_up(&t, &heap, &name);
    // Half a slab of each of four more classes, written and freed in place: the slabs stay
    // current (entirely free) until the detach pushes them.
    let slab = 32usize << 10;
    let sizes = [96usize, 160, 224, 480];
    for &size in &sizes {
        let blocks: Vec<_> = (0..slab / size / 2).map(|_| t.alloc(size).unwrap()).collect();
        for &p in &blocks {
            // SAFETY: a live block of at least `size` bytes.
            unsafe { p.as_ptr().write_bytes(0xa5, size) };
        }
        for p in blocks {
            t.free(p).unwrap();
        }
    }
    let before = data_file_bytes(name.as_str());
    drop(t);
    let after = data_file_bytes(name.as_str());
    let written = (sizes.len() * slab / 2) as u64;
    assert!(
        after + written * 3 / 4 <= before,
        "{before} bytes before the detach, {after} after: the four slabs' {written} written bytes should be gone"
    );
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}
