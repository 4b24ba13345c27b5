//! Every free of a live block succeeds, and no block is handed out while it is live
//! (docs/design.md §4.5–§4.6): the shape of the KV store's values, whose frees are mostly made
//! by a thread other than the allocating one. Threads allocate blocks of the KV store's size mix
//! (keys, nodes, values up to 300 KiB), write every block, and swap them into a shared table;
//! the block a swap takes out is checked byte by byte and freed by the thread that took it —
//! a remote free (a mailbox push, a counted free, a batch) when another thread made it, a
//! local free otherwise. A free of a block that was live must answer `Ok` (a `DoubleFree`
//! there is a false answer of the allocator), and an allocation must never return a block that
//! is live (tracked in a bitmap outside the heap).
//!
//! Shapes: more threads than this machine has cores, in one process and in two processes,
//! under full and limited coherence. Not a benchmark: nothing here asserts time. Each test
//! runs a bounded number of operations (a few seconds on a loaded 2-core machine);
//! `CXLALLOC_REMOTE_ONCE_SECS=N` repeats each test's rounds for about N seconds instead, for a
//! soak.

mod common;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{fork_child, pattern, serial, HeapName, Rng};
use cxlalloc::{Coherence, Config, Heap, Offset, ThreadHandle};

/// Heap capacity: the live set is the table's blocks (at most `CELLS`, a few MiB).
const CAPACITY: u64 = 256 << 20;
/// Shared table cells: the blocks in flight between threads.
const CELLS: usize = 1024;
/// Operations per thread per round.
const OPS: usize = 40_000;
/// Words of a block written and checked: the first `HEAD_WORDS` and the last one (a 300 KiB
/// value filled in full would make the test a memory-bandwidth test).
const HEAD_WORDS: usize = 32;

fn config(coherence: Coherence) -> Config {
    Config { thread_slots: 64, huge_capacity: 0, coherence, ..Config::with_capacity(CAPACITY) }
}

/// Seconds of soak asked for by `CXLALLOC_REMOTE_ONCE_SECS` (0: one round).
fn soak_secs() -> u64 {
    std::env::var("CXLALLOC_REMOTE_ONCE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The bookkeeping every thread and process shares: an anonymous shared mapping made before
/// any fork (the same address in every process, outside the heap under test). The table's
/// cells hold heap offsets (0 = empty); the bitmap has one bit per 8 heap bytes (both brackets
/// and the metadata before them: 4 × `CAPACITY` is ample), set while the block starting there is
/// live.
struct Book {
    words: &'static [AtomicU64],
}

impl Book {
    const BITMAP_WORDS: usize = (4 * CAPACITY / 8 / 64) as usize;

    fn new() -> Book {
        let n = CELLS + Self::BITMAP_WORDS;
        let len = n * 8;
        // SAFETY: a fresh anonymous shared mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap of the test's bookkeeping");
        // SAFETY: `len` bytes of zeroed, 8-aligned memory that stays mapped for the rest of the
        // process (leaked on purpose: children inherit it).
        Book { words: unsafe { std::slice::from_raw_parts(p as *const AtomicU64, n) } }
    }

    fn cell(&self, i: usize) -> &AtomicU64 {
        &self.words[i % CELLS]
    }

    /// The bitmap word and bit of the block at heap offset `off`.
    fn bit(&self, off: u64) -> Result<(&AtomicU64, u64), String> {
        let granule = (off / 8) as usize;
        let w = self.words.get(CELLS + granule / 64).ok_or_else(|| format!("offset {off:#x} beyond the bitmap"))?;
        Ok((w, 1 << (granule % 64)))
    }

    /// Records the block at `off` live; an error if it already was (handed out twice).
    fn take(&self, off: u64, who: &str) -> Result<(), String> {
        let (w, bit) = self.bit(off)?;
        // SeqCst: the bitmap is the test's own truth; no need to be clever.
        if w.fetch_or(bit, Ordering::SeqCst) & bit != 0 {
            return Err(format!("{who}: the allocator handed out block {off:#x} while it was live"));
        }
        Ok(())
    }

    /// Records the block at `off` no longer live, just before its free (after the free, the
    /// allocator may hand it to another thread at once).
    fn give(&self, off: u64, who: &str) -> Result<(), String> {
        let (w, bit) = self.bit(off)?;
        if w.fetch_and(!bit, Ordering::SeqCst) & bit == 0 {
            return Err(format!("{who}: block {off:#x} taken from the table was not live"));
        }
        Ok(())
    }
}

/// A size from the KV store's mix (docs/design.md §12.2): keys (10–250 B), nodes (40 B),
/// values of a heavy-tailed size (8 B header + body, mostly 16 B–8 KiB, one in 128 up to
/// 300 KiB).
fn kv_size(rng: &mut Rng) -> usize {
    match rng.below(8) {
        0 | 1 => 10 + rng.below(241) as usize,
        2 => 40,
        _ if rng.below(128) == 0 => (16 << 10) + rng.below(284 << 10) as usize,
        _ => {
            let top = 16usize << rng.below(10);
            8 + top / 2 + rng.below(top as u64 / 2) as usize
        }
    }
}

/// Word 0 of a block: its size and a salt unique to this allocation; the other words written
/// are [`pattern`]s of their offset and that word.
fn fill(p: NonNull<u8>, size: usize, off: u64, salt: u64) {
    let w = p.as_ptr() as *mut u64;
    let words = size / 8;
    // SAFETY: a block of at least `size` ≥ 8 bytes, 8-aligned, that the caller owns.
    unsafe { w.write_volatile((size as u64) << 40 | salt) };
    for i in (1..words.min(HEAD_WORDS)).chain((words > HEAD_WORDS).then_some(words - 1)) {
        // SAFETY: word `i < size / 8` lies in the block.
        unsafe { w.add(i).write_volatile(pattern(off + i as u64 * 8, salt)) };
    }
}

/// Checks a block written by [`fill`] and returns its size.
fn intact(p: NonNull<u8>, off: u64, who: &str) -> Result<usize, String> {
    let w = p.as_ptr() as *const u64;
    // SAFETY: a live block of at least 8 bytes (the smallest class), 8-aligned.
    let head = unsafe { w.read_volatile() };
    let (size, salt) = ((head >> 40) as usize, head & ((1 << 40) - 1));
    if !(10..=(300 << 10) + (16 << 10)).contains(&size) {
        return Err(format!("{who}: block {off:#x}: word 0 is {head:#x} (not a size this test wrote)"));
    }
    let words = size / 8;
    for i in (1..words.min(HEAD_WORDS)).chain((words > HEAD_WORDS).then_some(words - 1)) {
        // SAFETY: word `i < size / 8` lies in the block of `size` bytes.
        let got = unsafe { w.add(i).read_volatile() };
        if got != pattern(off + i as u64 * 8, salt) {
            return Err(format!(
                "{who}: block {off:#x} of {size} B: word {i} is {got:#x} (overwritten: handed out twice?)"
            ));
        }
    }
    Ok(size)
}

fn at(heap: &Heap, off: u64) -> Result<NonNull<u8>, String> {
    heap.pointer::<u8>(Offset::from_raw(off)).map_err(|e| format!("pointer {off:#x}: {e}"))
}

/// Checks and frees the block at `off`, taken out of the table by this thread: the free must
/// succeed.
fn retire(heap: &Heap, h: &ThreadHandle, book: &Book, off: u64, who: &str) -> Result<(), String> {
    let p = at(heap, off)?;
    intact(p, off, who)?;
    book.give(off, who)?;
    h.free(p)
        .map_err(|e| format!("{who}: free of live block {off:#x} refused: {e} (stats {:?})", heap.stats().counters))
}

/// One thread's round: `OPS` operations, each an allocation swapped into a random cell (the
/// block taken out, if any, is checked and freed), with one in 8 blocks freed at once by its
/// own thread and one in 16 swaps taking a block out without putting one in.
fn worker(heap: &Heap, book: &Book, who: &str, seed: u64) -> Result<(), String> {
    let h = heap.attach().map_err(|e| format!("{who}: attach: {e}"))?;
    let mut rng = Rng::new(seed);
    for n in 0..OPS as u64 {
        let i = rng.below(CELLS as u64) as usize;
        if rng.below(16) == 0 {
            let old = book.cell(i).swap(0, Ordering::AcqRel);
            if old != 0 {
                retire(heap, &h, book, old, who)?;
            }
            continue;
        }
        let size = kv_size(&mut rng);
        let p = h.alloc(size).map_err(|e| format!("{who}: alloc {size}: {e}"))?;
        let off = heap.offset_of(p.as_ptr()).map_err(|e| e.to_string())?.raw();
        book.take(off, who)?;
        fill(p, size, off, (seed << 24 ^ n) & ((1 << 40) - 1));
        if rng.below(8) == 0 {
            retire(heap, &h, book, off, who)?;
            continue;
        }
        // AcqRel: publishes our bytes to the taker; acquires the bytes of the block we take.
        let old = book.cell(i).swap(off, Ordering::AcqRel);
        if old != 0 {
            retire(heap, &h, book, old, who)?;
        }
    }
    Ok(())
}

/// Empties the table (every block in it freed by this thread, most remotely) and checks the
/// heap: clean, nothing live.
fn drain_and_check(heap: &Heap, book: &Book) {
    let h = heap.attach().unwrap();
    for i in 0..CELLS {
        let old = book.cell(i).swap(0, Ordering::AcqRel);
        if old != 0 {
            retire(heap, &h, book, old, "drain").unwrap();
        }
    }
    drop(h);
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.live_blocks(), 0, "{report}");
    // The shape did what it is for: remote frees, and blocks coming back through mailboxes.
    let counters = heap.stats().counters;
    assert!(counters.remote_frees > 0 && counters.harvested > 0, "{counters:?}");
}

/// `threads` threads in this process, each attached for its round, rounds repeated for the soak.
fn threads_free_each_others_blocks(coherence: Coherence, threads: usize) {
    let _g = serial();
    let name = HeapName::new(&format!("once-{}", coherence.name()));
    let heap = Heap::create(name.as_str(), &config(coherence)).unwrap();
    let book = Book::new();
    let start = Instant::now();
    let mut round = 0u64;
    loop {
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let (heap, book) = (&heap, &book);
                    s.spawn(move || worker(heap, book, &format!("thread {t} round {round}"), round * 64 + t as u64 + 1))
                })
                .collect();
            for w in workers {
                w.join().expect("worker panicked").unwrap();
            }
        });
        round += 1;
        if start.elapsed() >= Duration::from_secs(soak_secs()) {
            break;
        }
    }
    // What a soak covered (shown with --nocapture).
    eprintln!(
        "{}: {round} rounds, {} operations, {:?}",
        coherence.name(),
        round as usize * threads * OPS,
        start.elapsed()
    );
    drain_and_check(&heap, &book);
}

#[test]
fn every_free_of_a_live_block_succeeds_with_eight_threads_under_full_coherence() {
    threads_free_each_others_blocks(Coherence::Full, 8);
}

#[test]
fn every_free_of_a_live_block_succeeds_with_eight_threads_under_limited_coherence() {
    threads_free_each_others_blocks(Coherence::Limited, 8);
}

/// Two processes of `threads` threads each share the table; the parent drains it.
fn processes_free_each_others_blocks(coherence: Coherence, threads: usize) {
    let _g = serial();
    let name = HeapName::new(&format!("once-procs-{}", coherence.name()));
    let heap = Heap::create(name.as_str(), &config(coherence)).unwrap();
    let book = Book::new();
    let start = Instant::now();
    let mut round = 0u64;
    loop {
        let children: Vec<_> = (0..2u64)
            .map(|p| {
                let (n, book) = (name.as_str().to_string(), &book);
                fork_child("worker process", move || {
                    let heap = Heap::open(&n).map_err(|e| e.to_string())?;
                    std::thread::scope(|s| {
                        let workers: Vec<_> = (0..threads as u64)
                            .map(|t| {
                                let heap = &heap;
                                s.spawn(move || {
                                    let who = format!("process {p} thread {t} round {round}");
                                    worker(heap, book, &who, round << 16 | p << 8 | t | 1 << 32)
                                })
                            })
                            .collect();
                        workers.into_iter().try_for_each(|w| w.join().map_err(|_| "worker panicked".to_string())?)
                    })
                })
            })
            .collect();
        for mut c in children {
            c.succeeds();
        }
        round += 1;
        if start.elapsed() >= Duration::from_secs(soak_secs()) {
            break;
        }
    }
    eprintln!(
        "{} (2 processes): {round} rounds, {} operations, {:?}",
        coherence.name(),
        round as usize * 2 * threads * OPS,
        start.elapsed()
    );
    drain_and_check(&heap, &book);
}

#[test]
fn every_free_of_a_live_block_succeeds_across_two_processes_of_four_threads() {
    processes_free_each_others_blocks(Coherence::Full, 4);
}

#[test]
fn every_free_of_a_live_block_succeeds_across_two_limited_processes_of_four_threads() {
    processes_free_each_others_blocks(Coherence::Limited, 4);
}
