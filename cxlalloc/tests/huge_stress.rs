//! Huge blocks shared by many threads of many processes (docs/design.md §7.4): two forked
//! processes of eight threads each (more threads than this machine has cores), every thread
//! allocating and freeing its own huge blocks while it reads and checks, byte by byte, the
//! blocks the other process publishes through roots.
//!
//! Each thread owns a mailbox: two roots, the offset of its published block (0 = none) and a
//! count of readers inside it. A reader counts itself in, reads the offset, checks the block and
//! counts itself out; the owner retires a block by swapping the offset to 0 and waiting for the
//! count to reach 0 before it frees it, so every block a reader reads is live throughout.
//!
//! A block holds its salt and usable size in its first two words and a window of random words
//! chosen by the salt after that, so a reader knows what every byte must be. A reader fails on
//! any wrong word, on a `usable_size` other than the one the owner got, and (the whole process)
//! on a fault the heap does not handle.
//!
//! The test runs for [`DEFAULT_SECS`]; `CXLALLOC_SOAK_SECS=N` makes it a soak of `N` seconds.
//! `CXLALLOC_STRESS_VERBOSE=1` prints the rounds each process finished.
#![cfg(not(miri))]

mod common;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{fork_child, pattern, serial, Ctx, HeapName, Rng};
use cxlalloc::{Config, Heap, Offset, ThreadHandle};

const KIB: usize = 1 << 10;
/// Processes sharing the heap.
const PROCESSES: usize = 2;
/// Threads per process.
const THREADS: usize = 8;
/// Seconds the test runs without `CXLALLOC_SOAK_SECS`.
const DEFAULT_SECS: u64 = 3;

/// The root holding thread `w`'s published block (heap offset, 0 = none).
fn block_root(w: usize) -> usize {
    2 * w
}

/// The root counting the readers inside thread `w`'s published block.
fn pins_root(w: usize) -> usize {
    2 * w + 1
}

fn run_secs() -> u64 {
    std::env::var("CXLALLOC_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SECS)
}

/// A huge size from 512 KiB + 1 to 2 MiB.
fn huge_size(rng: &mut Rng) -> usize {
    512 * KIB + 1 + rng.below((3 * 512 * KIB) as u64) as usize
}

fn root(heap: &Heap, i: usize) -> Result<&AtomicU64, String> {
    heap.root(i).ok_or_else(|| format!("no root {i}"))
}

/// Words of [`noise`]: enough for a 2 MiB block starting anywhere in its first half.
const NOISE_WORDS: usize = 1 << 19;

/// Random words, the same in every process: a block's contents are a window of them chosen by
/// its salt, so blocks differ from each other (and from zeros) everywhere, and are written
/// and compared with `memcpy`/`memcmp` speed even in a debug build.
fn noise() -> &'static [u64] {
    static NOISE: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    NOISE.get_or_init(|| (0..NOISE_WORDS as u64).map(|i| pattern(i, 0x006e_6f69_7365)).collect())
}

/// The words a block of salt `salt` holds from its third word on.
fn expected(salt: u64, words: usize) -> &'static [u64] {
    let start = (pattern(salt, 1) as usize) % (NOISE_WORDS / 2);
    &noise()[start..start + words]
}

/// Allocates a block of `size` bytes and fills every word of it: salt, usable size, then
/// [`expected`].
fn alloc_filled(heap: &Heap, t: &ThreadHandle, size: usize, salt: u64) -> Result<(NonNull<u8>, u64), String> {
    let p = t.alloc(size).ctx("alloc")?;
    let len = t.usable_size(p).ctx("usable_size of a fresh block")?;
    let off = heap.offset_of(p.as_ptr()).ctx("offset_of")?.raw();
    let words = p.as_ptr().cast::<u64>();
    let body = expected(salt, len / 8 - 2);
    // SAFETY: our fresh block of `len` bytes (a multiple of the page), 8-aligned; the body is
    // `len / 8 - 2` words after the first two.
    unsafe {
        words.write_volatile(salt);
        words.add(1).write_volatile(len as u64);
        std::ptr::copy_nonoverlapping(body.as_ptr(), words.add(2), body.len());
    }
    Ok((p, off))
}

/// Checks every byte of the live block at heap offset `off` and its usable size.
fn check_block(heap: &Heap, t: &ThreadHandle, off: u64) -> Result<(), String> {
    let p = heap.pointer(Offset::<u8>::from_raw(off)).ctx("pointer")?;
    let words = p.as_ptr().cast::<u64>();
    // SAFETY: the block is live while we are counted in its mailbox, and at least two words.
    let (salt, len) = unsafe { (words.read_volatile(), words.add(1).read_volatile() as usize) };
    let usable = t.usable_size(p);
    if usable != Ok(len) {
        return Err(format!("block {off:#x}: usable_size {usable:?}, its owner got {len} (salt {salt:#x})"));
    }
    let want = expected(salt, len / 8 - 2);
    // SAFETY: the block is live, `len` bytes long (its usable size, just confirmed); the
    // slice covers its words after the first two.
    let got = unsafe { std::slice::from_raw_parts(words.add(2), want.len()) };
    if got != want {
        let wrong = got.iter().zip(want).filter(|(g, w)| g != w).count();
        let zeros = got.iter().filter(|&&g| g == 0).count();
        let first = got.iter().zip(want).position(|(g, w)| g != w).unwrap_or(0) + 2;
        return Err(format!(
            "block {off:#x} ({len} bytes, salt {salt:#x}): {wrong} words wrong from word {first}, {zeros} zero"
        ));
    }
    Ok(())
}

/// Reads the block in thread `w`'s mailbox, if any, counted in as a reader.
fn read_mailbox(heap: &Heap, t: &ThreadHandle, w: usize) -> Result<(), String> {
    let pins = root(heap, pins_root(w))?;
    pins.fetch_add(1, Ordering::SeqCst);
    let off = root(heap, block_root(w))?.load(Ordering::SeqCst);
    let checked = if off == 0 { Ok(()) } else { check_block(heap, t, off) };
    pins.fetch_sub(1, Ordering::SeqCst);
    checked
}

/// Empties thread `w`'s mailbox and frees its block once no reader is inside it.
fn retire(heap: &Heap, t: &ThreadHandle, w: usize) -> Result<(), String> {
    let off = root(heap, block_root(w))?.swap(0, Ordering::SeqCst);
    let pins = root(heap, pins_root(w))?;
    let since = Instant::now();
    while pins.load(Ordering::SeqCst) != 0 {
        if since.elapsed() > Duration::from_secs(10) {
            return Err(format!("readers of mailbox {w} never left it (a reader process died?)"));
        }
        std::thread::yield_now();
    }
    if off != 0 {
        t.free(heap.pointer(Offset::<u8>::from_raw(off)).ctx("pointer")?).ctx("free")?;
    }
    Ok(())
}

/// One thread: publishes a fresh block each round, allocates and frees a private one, and
/// reads one block of the other process.
fn worker(heap: &Heap, process: usize, me: usize, until: Instant) -> Result<u64, String> {
    let t = heap.attach().ctx("attach")?;
    let w = process * THREADS + me;
    let mut rng = Rng::new(0x5eed ^ (w as u64) << 20);
    let other = (1 - process) * THREADS;
    let mut rounds = 0u64;
    while Instant::now() < until {
        retire(heap, &t, w)?;
        let salt = ((w as u64) << 40) | rounds;
        let (_, off) = alloc_filled(heap, &t, huge_size(&mut rng), salt)?;
        root(heap, block_root(w))?.store(off, Ordering::SeqCst);
        let (private, _) = alloc_filled(heap, &t, huge_size(&mut rng), !salt)?;
        read_mailbox(heap, &t, other + rng.below(THREADS as u64) as usize)?;
        t.free(private).ctx("free private")?;
        read_mailbox(heap, &t, other + rng.below(THREADS as u64) as usize)?;
        rounds += 1;
    }
    retire(heap, &t, w)?;
    Ok(rounds)
}

/// One thread of the producer/consumer shape: even threads publish fresh blocks in their own
/// mailbox whenever it is empty; odd threads take the block out of their even neighbour's
/// mailbox, check it and free it — a free by a thread beside the owner, in the owner's process
/// (docs/design.md §7.6) — while the other process reads the mailboxes. A producer retires
/// what is left in its mailbox at the end.
fn pair_worker(heap: &Heap, process: usize, me: usize, until: Instant) -> Result<u64, String> {
    let t = heap.attach().ctx("attach")?;
    let w = process * THREADS + me;
    let mut rng = Rng::new(0x9a1e ^ (w as u64) << 20);
    let other = (1 - process) * THREADS;
    let mut rounds = 0u64;
    while Instant::now() < until {
        if me % 2 == 0 {
            let mailbox = root(heap, block_root(w))?;
            if mailbox.load(Ordering::SeqCst) == 0 {
                let salt = ((w as u64) << 40) | rounds;
                let (_, off) = alloc_filled(heap, &t, huge_size(&mut rng), salt)?;
                mailbox.store(off, Ordering::SeqCst);
                rounds += 1;
            } else {
                std::thread::yield_now();
            }
        } else if root(heap, block_root(w - 1))?.load(Ordering::SeqCst) != 0 {
            // Check it as a reader would, then take it out and free it.
            read_mailbox(heap, &t, w - 1)?;
            retire(heap, &t, w - 1)?;
            rounds += 1;
        }
        read_mailbox(heap, &t, other + rng.below(THREADS as u64) as usize)?;
    }
    if me % 2 == 0 {
        retire(heap, &t, w)?;
    }
    Ok(rounds)
}

/// One process: opens the heap and runs [`THREADS`] workers until `until`.
fn process(name: &str, process: usize, until: Instant) -> Result<(), String> {
    run_process(name, process, until, worker)
}

type Worker = fn(&Heap, usize, usize, Instant) -> Result<u64, String>;

fn run_process(name: &str, process: usize, until: Instant, worker: Worker) -> Result<(), String> {
    let heap = Heap::open(name).ctx("open")?;
    let results: Vec<Result<u64, String>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|me| {
                s.spawn({
                    let heap = &heap;
                    move || worker(heap, process, me, until)
                })
            })
            .collect();
        threads.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into()))).collect()
    });
    let mut rounds = 0;
    for r in results {
        rounds += r?;
    }
    if std::env::var_os("CXLALLOC_STRESS_VERBOSE").is_some() {
        common::raw_eprint(&format!("process {process}: {rounds} rounds\n"));
    }
    if rounds == 0 {
        return Err("no worker finished a round".into());
    }
    Ok(())
}

#[test]
fn sixteen_threads_of_two_processes_churning_and_reading_huge_blocks_see_only_right_bytes() {
    stress("huge-stress", process);
}

#[test]
fn consumers_freeing_their_producers_blocks_beside_them_while_another_process_reads_see_only_right_bytes() {
    stress("huge-pairs", |name, p, until| run_process(name, p, until, pair_worker));
}

fn stress(name: &str, process: fn(&str, usize, Instant) -> Result<(), String>) {
    let _serial = serial();
    let name = HeapName::new(name);
    let config = Config { huge_capacity: 64 << 30, thread_slots: 64, ..Config::with_capacity(64 << 20) };
    let heap = Heap::create(name.as_str(), &config).unwrap();
    for r in 0..2 * PROCESSES * THREADS {
        heap.root(r).unwrap().store(0, Ordering::SeqCst);
    }
    let secs = run_secs();
    let until = Instant::now() + Duration::from_secs(secs);
    let mut children: Vec<_> =
        (0..PROCESSES).map(|p| fork_child(&format!("process {p}"), || process(name.as_str(), p, until))).collect();
    for c in &mut children {
        match c.wait(Duration::from_secs(secs + 30)) {
            nix::sys::wait::WaitStatus::Exited(_, 0) => {}
            other => panic!("a process of the stress failed: {other:?} (its stderr above says why)"),
        }
    }
}
