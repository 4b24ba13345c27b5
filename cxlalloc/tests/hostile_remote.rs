//! Hostile shapes for remote frees (docs/design.md §4.6, §8.3): many threads in several real
//! processes (more threads than this machine has cores) free the same blocks at once, free
//! blocks while their owners detach, or are SIGKILLed in the middle of their frees. Each test
//! checks bytes, the checker's verdict and that no block is ever handed out twice. Not a
//! benchmark: nothing here asserts time. Each test runs a few rounds (well under 10 s);
//! `CXLALLOC_HOSTILE_ROUNDS=N` runs N rounds instead, for a soak.

mod common;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{fork_child, pattern, serial, Device, HeapName, Rng};
use cxlalloc::{Bracket, Coherence, Config, FreeError, Heap, Offset, SlabState, ThreadHandle};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::WaitStatus;

/// Child processes per test.
const PROCS: usize = 3;
/// Threads per child process: 12 threads on a 2-core machine.
const THREADS: usize = 4;
/// Block sizes cycled through: both brackets, several classes each.
const SIZES: [usize; 6] = [16, 64, 200, 1024, 3000, 12 << 10];

fn config(coherence: Coherence) -> Config {
    Config { thread_slots: 40, huge_capacity: 0, coherence, ..Config::with_capacity(256 << 20) }
}

/// Rounds a test runs: its default, or `CXLALLOC_HOSTILE_ROUNDS`.
fn rounds(default: usize) -> usize {
    std::env::var("CXLALLOC_HOSTILE_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Bookkeeping shared by the test and every child it forks: an anonymous shared mapping made
/// before the forks, so it sits at the same address in every process and is outside the heap
/// under test.
struct Shared {
    words: &'static [AtomicU64],
}

impl Shared {
    fn new(words: usize) -> Shared {
        let len = words * 8;
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
        let words = unsafe { std::slice::from_raw_parts(p as *const AtomicU64, words) };
        Shared { words }
    }
}

/// Table layout in [`Shared`]: per block its offset, its size and a counter; then a start flag.
struct Table {
    shared: Shared,
    n: usize,
}

impl Table {
    fn new(n: usize) -> Table {
        Table { shared: Shared::new(3 * n + 2), n }
    }
    fn offset(&self, i: usize) -> &AtomicU64 {
        &self.shared.words[i]
    }
    fn size(&self, i: usize) -> &AtomicU64 {
        &self.shared.words[self.n + i]
    }
    fn counter(&self, i: usize) -> &AtomicU64 {
        &self.shared.words[2 * self.n + i]
    }
    /// Set by the test to start every child thread at once.
    fn go(&self) -> &AtomicU64 {
        &self.shared.words[3 * self.n]
    }
    /// Child threads count themselves here once attached.
    fn ready(&self) -> &AtomicU64 {
        &self.shared.words[3 * self.n + 1]
    }
    fn reset(&self) {
        for w in self.shared.words {
            w.store(0, Ordering::SeqCst);
        }
    }
}

fn fill(p: NonNull<u8>, size: usize, off: u64, salt: u64) {
    let w = p.as_ptr() as *mut u64;
    for i in 0..size / 8 {
        // SAFETY: a live block of at least `size` bytes, 8-aligned, that the caller owns.
        unsafe { w.add(i).write_volatile(pattern(off + i as u64 * 8, salt)) };
    }
}

fn intact(p: NonNull<u8>, size: usize, off: u64, salt: u64) -> Result<(), String> {
    let w = p.as_ptr() as *const u64;
    for i in 0..size / 8 {
        // SAFETY: a live block of at least `size` bytes, 8-aligned.
        let got = unsafe { w.add(i).read_volatile() };
        if got != pattern(off + i as u64 * 8, salt) {
            return Err(format!("block {off:#x} of {size} B: word {i} is {got:#x}"));
        }
    }
    Ok(())
}

fn at(heap: &Heap, off: u64) -> Result<NonNull<u8>, String> {
    heap.pointer::<u8>(Offset::from_raw(off)).map_err(|e| format!("pointer {off:#x}: {e}"))
}

/// The heap, and the software mCAS device the no-HWcc model needs (served by the test process).
fn heap_for(name: &HeapName, coherence: Coherence) -> (Heap, Option<Device>) {
    let heap = Heap::create(name.as_str(), &config(coherence)).expect("create");
    let device = (coherence == Coherence::NoHwcc).then(|| Device::serve(name.as_str(), Duration::ZERO));
    (heap, device)
}

/// `owner` allocates `n` blocks of the sizes in [`SIZES`], fills them and records them in `table`.
fn allocate_table(heap: &Heap, owner: &ThreadHandle, table: &Table, salt: u64) -> Vec<NonNull<u8>> {
    (0..table.n)
        .map(|i| {
            let size = SIZES[i % SIZES.len()];
            let p = owner.alloc(size).expect("alloc");
            let off = heap.offset_of(p.as_ptr()).expect("offset").raw();
            fill(p, size, off, salt);
            table.offset(i).store(off, Ordering::SeqCst);
            table.size(i).store(size as u64, Ordering::SeqCst);
            p
        })
        .collect()
}

/// Forks [`PROCS`] children of [`THREADS`] threads each; every thread opens the heap, attaches,
/// waits for the start flag and runs `body(heap, handle, global thread index)`.
fn fork_threads(
    name: &str,
    table: &Table,
    body: impl Fn(&Heap, &ThreadHandle, usize) -> Result<(), String> + Sync + Send + Copy,
) -> Vec<common::Child> {
    (0..PROCS)
        .map(|p| {
            fork_child(&format!("process {p}"), || {
                let heap = Heap::open(name).map_err(|e| format!("open: {e}"))?;
                std::thread::scope(|s| {
                    let threads: Vec<_> = (0..THREADS)
                        .map(|t| {
                            let heap = &heap;
                            s.spawn(move || -> Result<(), String> {
                                let h = heap.attach().map_err(|e| format!("attach: {e}"))?;
                                table.ready().fetch_add(1, Ordering::SeqCst);
                                while table.go().load(Ordering::SeqCst) == 0 {
                                    std::hint::spin_loop();
                                }
                                body(heap, &h, p * THREADS + t)
                            })
                        })
                        .collect();
                    threads.into_iter().try_for_each(|t| t.join().map_err(|_| "thread panicked".to_string())?)
                })
            })
        })
        .collect()
}

/// Waits until every forked thread is attached, then starts them all.
fn start(table: &Table) {
    let deadline = std::time::Instant::now() + common::CHILD_DEADLINE;
    while table.ready().load(Ordering::SeqCst) < (PROCS * THREADS) as u64 {
        assert!(std::time::Instant::now() < deadline, "children never attached");
        std::thread::sleep(Duration::from_millis(1));
    }
    table.go().store(1, Ordering::SeqCst);
}

fn assert_clean_and_empty(heap: &Heap, what: &str) {
    let r = heap.check();
    assert!(r.is_clean(), "{what}: {r}");
    assert_eq!(r.live_blocks(), 0, "{what}: blocks still live\n{r}");
}

/// With no holder left and every block freed, every slab is back on the global list: a slab
/// still disowned has a block that nobody will ever free or harvest (for instance one left in
/// a mailbox its detaching owner did not close).
fn assert_all_global(heap: &Heap, what: &str) {
    let r = heap.check();
    for b in Bracket::ALL {
        let c = r.bracket(b);
        let elsewhere: u64 = SlabState::ALL.iter().filter(|&&s| s != SlabState::Global).map(|&s| c.slabs(s)).sum();
        assert_eq!(elsewhere, 0, "{what}: {b:?} slabs not global with no holder and no live block\n{r}");
    }
}

/// After a race, the owner allocates twice as many blocks as the table had, fills each with
/// its own pattern and checks them all: a block the race freed twice would be handed out twice
/// and one of its two fills would overwrite the other's.
fn reuse_without_overlap(heap: &Heap, owner: &ThreadHandle, n: usize, salt: u64) {
    let blocks: Vec<_> = (0..2 * n)
        .map(|i| {
            let size = SIZES[i % SIZES.len()];
            let p = owner.alloc(size).expect("alloc after the race");
            let off = heap.offset_of(p.as_ptr()).expect("offset").raw();
            fill(p, size, off, salt ^ i as u64);
            (p, size, off)
        })
        .collect();
    for (i, &(p, size, off)) in blocks.iter().enumerate() {
        if let Err(e) = intact(p, size, off, salt ^ i as u64) {
            panic!("a block was handed out twice after the race: {e}");
        }
    }
    for (p, _, _) in blocks {
        owner.free(p).expect("free after the race");
    }
}

/// Every forked thread frees every block of the table (each thread in its own order), while
/// the blocks' owner stays attached: each block's free must succeed exactly once, the others
/// being refused, whichever route (mailbox push, counted free) each free takes.
fn every_block_freed_by_every_thread_is_freed_once(coherence: Coherence) {
    let _g = serial();
    const N: usize = 384;
    let table = Table::new(N);
    // Twenty rounds (about 4 s): the no-HWcc race below showed up once in about 25 rounds.
    for round in 0..rounds(20) {
        let name = HeapName::new(&format!("hostile-twice-{}", coherence.name()));
        let (heap, _device) = heap_for(&name, coherence);
        let owner = heap.attach().expect("attach");
        table.reset();
        let salt = 0x7a1e ^ round as u64;
        allocate_table(&heap, &owner, &table, salt);
        let mut children = fork_threads(name.as_str(), &table, |heap, h, me| {
            let mut rng = Rng::new(me as u64);
            let skew = rng.below(N as u64) as usize;
            for k in 0..N {
                let i = (k * 7 + skew) % N;
                let p = at(heap, table.offset(i).load(Ordering::SeqCst))?;
                match h.free(p) {
                    Ok(()) => {
                        table.counter(i).fetch_add(1, Ordering::SeqCst);
                    }
                    // Refused: a double free, or (no-HWcc) a block whose slab the last counted
                    // free claimed and emptied, so it is no block of a sized slab any more.
                    Err(FreeError::DoubleFree | FreeError::NotAllocated) => {}
                    // The same, met while the claimer zeroes the class and then the size: a
                    // wrong code, a known limit (docs/design.md §4.5), refused all the same.
                    Err(FreeError::Corrupt("descriptor class out of range")) => {}
                    Err(e) => return Err(format!("free of block {i}: {e}")),
                }
            }
            Ok(())
        });
        start(&table);
        for c in &mut children {
            c.succeeds();
        }
        let wins: Vec<u64> = (0..N).map(|i| table.counter(i).load(Ordering::SeqCst)).collect();
        let wrong: Vec<_> = wins.iter().enumerate().filter(|(_, &w)| w != 1).collect();
        assert!(
            wrong.is_empty(),
            "round {round}: {} blocks freed other than once; first (index, frees): {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(8)]
        );
        assert_clean_and_empty(&heap, "after the race");
        reuse_without_overlap(&heap, &owner, N, salt);
        drop(owner);
        assert_clean_and_empty(&heap, "after reuse");
    }
}

#[test]
fn a_block_freed_by_many_threads_of_several_processes_at_once_is_freed_once_under_full_coherence() {
    every_block_freed_by_every_thread_is_freed_once(Coherence::Full);
}

#[test]
fn a_block_freed_by_many_threads_of_several_processes_at_once_is_freed_once_under_limited_coherence() {
    every_block_freed_by_every_thread_is_freed_once(Coherence::Limited);
}

#[test]
fn a_block_freed_by_many_threads_of_several_processes_at_once_is_freed_once_without_hwcc() {
    every_block_freed_by_every_thread_is_freed_once(Coherence::NoHwcc);
}

/// Half the forked threads own blocks and detach at random moments; the other half free those
/// blocks (each exactly once, checking its bytes first) while the owners detach: a free that
/// races its owner's detach must end harvested or counted, never lost (the heap would keep a
/// live block) nor returned twice (a later allocation would overlap).
fn frees_racing_their_owners_detach(coherence: Coherence) {
    let _g = serial();
    /// Blocks each owner thread allocates.
    const PER_OWNER: usize = 64;
    const OWNERS: usize = PROCS * THREADS / 2;
    const N: usize = OWNERS * PER_OWNER;
    let table = Table::new(N);
    for round in 0..rounds(3) {
        let name = HeapName::new(&format!("hostile-detach-{}", coherence.name()));
        let (heap, _device) = heap_for(&name, coherence);
        table.reset();
        let salt = 0xde7a ^ round as u64;
        let table = &table;
        let mut children = fork_threads(name.as_str(), table, move |heap, h, me| {
            // Even threads own, odd ones free: every process has both.
            let (owner, k) = (me % 2 == 0, me / 2);
            let mut rng = Rng::new((round * 1000 + me) as u64);
            if owner {
                for j in 0..PER_OWNER {
                    let i = k * PER_OWNER + j;
                    let size = SIZES[i % SIZES.len()];
                    let p = h.alloc(size).map_err(|e| format!("alloc: {e}"))?;
                    let off = heap.offset_of(p.as_ptr()).map_err(|e| format!("offset: {e}"))?.raw();
                    fill(p, size, off, salt);
                    table.size(i).store(size as u64, Ordering::SeqCst);
                    // Published last: a freer takes the block once it sees its offset.
                    table.offset(i).store(off, Ordering::SeqCst);
                }
                // Detach (the caller drops `h`) in the middle of the freers' run: once a
                // random share of the blocks is freed (some of them wait in our mailbox), the
                // rest are freed while we detach or after.
                let want = 1 + rng.below(PER_OWNER as u64 - 1);
                let freed =
                    || (0..PER_OWNER).map(|j| table.counter(k * PER_OWNER + j).load(Ordering::SeqCst)).sum::<u64>();
                while freed() < want {
                    std::thread::yield_now();
                }
                return Ok(());
            }
            // Freer `k` frees the blocks of owner `k`, then those of owner `k + 1`: two
            // freers per owner, each taking its half.
            for o in [k, (k + 1) % OWNERS] {
                for j in (0..PER_OWNER).filter(|j| (j % 2 == 0) == (o == k)) {
                    let i = o * PER_OWNER + j;
                    let off = loop {
                        match table.offset(i).load(Ordering::SeqCst) {
                            0 => std::thread::yield_now(),
                            off => break off,
                        }
                    };
                    let size = table.size(i).load(Ordering::SeqCst) as usize;
                    let p = at(heap, off)?;
                    intact(p, size, off, salt)?;
                    h.free(p).map_err(|e| format!("free of block {i} ({off:#x}): {e}"))?;
                    table.counter(i).fetch_add(1, Ordering::SeqCst);
                }
            }
            Ok(())
        });
        start(table);
        for c in &mut children {
            c.succeeds();
        }
        assert!((0..N).all(|i| table.counter(i).load(Ordering::SeqCst) == 1), "round {round}: a block was not freed");
        assert_clean_and_empty(&heap, "after frees raced their owners' detach");
        assert_all_global(&heap, "after frees raced their owners' detach");
        let t = heap.attach().expect("attach");
        reuse_without_overlap(&heap, &t, N, salt);
        drop(t);
        assert_clean_and_empty(&heap, "after reuse");
    }
}

#[test]
fn frees_racing_their_owners_detach_leave_no_block_live_or_doubled_under_full_coherence() {
    frees_racing_their_owners_detach(Coherence::Full);
}

#[test]
fn frees_racing_their_owners_detach_leave_no_block_live_or_doubled_under_limited_coherence() {
    frees_racing_their_owners_detach(Coherence::Limited);
}

#[test]
fn frees_racing_their_owners_detach_leave_no_block_live_or_doubled_without_hwcc() {
    frees_racing_their_owners_detach(Coherence::NoHwcc);
}

/// Forked threads free the blocks of an owner in the test process (each its own share,
/// checking the bytes first) and are SIGKILLed, all at once, at a random point of their run:
/// with mailbox pushes, counted frees and (no-HWcc) batches in flight. After `recover_dead`,
/// every block a killed thread had freed is refused a second free, every other block frees
/// (at most one per killed thread may have been completed by recovery), and once all are freed
/// no block is live, none is handed out twice and every slab returns to the global list.
fn killed_remote_freers(coherence: Coherence) {
    let _g = serial();
    const N: usize = 1536;
    let table = Table::new(N);
    for round in 0..rounds(3) {
        let name = HeapName::new(&format!("hostile-kill-{}", coherence.name()));
        let (heap, _device) = heap_for(&name, coherence);
        let owner = heap.attach().expect("attach");
        table.reset();
        let salt = 0xc1a5 ^ round as u64;
        let blocks = allocate_table(&heap, &owner, &table, salt);
        let table = &table;
        let mut children = fork_threads(name.as_str(), table, |heap, h, me| {
            for i in (me..N).step_by(PROCS * THREADS) {
                let off = table.offset(i).load(Ordering::SeqCst);
                let size = table.size(i).load(Ordering::SeqCst) as usize;
                let p = at(heap, off)?;
                intact(p, size, off, salt)?;
                h.free(p).map_err(|e| format!("free of block {i}: {e}"))?;
                table.counter(i).store(1, Ordering::SeqCst);
            }
            Ok(())
        });
        let mut rng = Rng::new(round as u64 ^ (coherence as u64 * 77));
        let target = 1 + rng.below(N as u64 - 1);
        start(table);
        let deadline = std::time::Instant::now() + common::CHILD_DEADLINE;
        while (0..N).map(|i| table.counter(i).load(Ordering::Relaxed)).sum::<u64>() < target {
            assert!(std::time::Instant::now() < deadline, "freers stalled");
            std::hint::spin_loop();
        }
        for c in &children {
            let _ = kill(c.pid, Signal::SIGKILL);
        }
        for c in &mut children {
            match c.wait(common::CHILD_DEADLINE) {
                WaitStatus::Signaled(_, Signal::SIGKILL, _) | WaitStatus::Exited(_, 0) => {}
                other => panic!("a freer ended {other:?} (its stderr above says why)"),
            }
        }
        heap.recover_dead();
        let r = heap.check();
        assert!(r.is_clean(), "round {round}, after recovery: {r}");
        let mut completed_by_recovery = 0;
        for (i, &p) in blocks.iter().enumerate() {
            let freed = table.counter(i).load(Ordering::SeqCst) == 1;
            match (freed, owner.free(p)) {
                (true, Err(FreeError::DoubleFree | FreeError::NotAllocated)) => {}
                (true, other) => panic!("round {round}: second free of block {i}, freed before the kill: {other:?}"),
                (false, Ok(())) => {}
                (false, Err(FreeError::DoubleFree | FreeError::NotAllocated)) => completed_by_recovery += 1,
                (false, Err(e)) => panic!("round {round}: free of block {i}: {e}"),
            }
        }
        assert!(
            completed_by_recovery <= PROCS * THREADS,
            "round {round}: {completed_by_recovery} blocks freed that no killed thread was freeing"
        );
        assert_clean_and_empty(&heap, "after the kill and the owner's frees");
        reuse_without_overlap(&heap, &owner, N, salt);
        drop(owner);
        assert_clean_and_empty(&heap, "after reuse");
        assert_all_global(&heap, "after the kill, recovery and every free");
    }
}

#[test]
fn remote_freers_killed_mid_run_leave_every_block_freed_once_under_full_coherence() {
    killed_remote_freers(Coherence::Full);
}

#[test]
fn remote_freers_killed_mid_run_leave_every_block_freed_once_under_limited_coherence() {
    killed_remote_freers(Coherence::Limited);
}

#[test]
fn remote_freers_killed_mid_run_leave_every_block_freed_once_without_hwcc() {
    killed_remote_freers(Coherence::NoHwcc);
}

/// Huge block sizes: whole pages and not, one and several MiB.
const HUGE_SIZES: [usize; 3] = [1 << 20, (2 << 20) + 4096, (3 << 20) + 123];

/// Huge blocks (docs/design.md §7.6, §10) of an owner thread in the test process are freed or
/// reallocated by the forked threads (each its own share, bytes checked, a second free
/// refused), and a quarter of them by a thread beside the owner in its own process (which
/// leaves the mapping for the owner to reuse the object); meanwhile the owner and that thread
/// allocate, fill, check and free huge blocks of the same sizes (reusing cached objects) and a
/// third thread sweeps. No block may come back holding another's bytes, and at the end none is
/// live.
#[test]
fn huge_blocks_freed_by_other_processes_and_beside_their_owner_while_it_reuses_huge_objects() {
    let _g = serial();
    const N: usize = 48;
    /// Blocks `i` with `i % 4 == BESIDE` are freed by the thread beside the owner.
    const BESIDE: usize = 3;
    let table = Table::new(N);
    for round in 0..rounds(2) {
        let name = HeapName::new("hostile-huge");
        let heap = Heap::create(
            name.as_str(),
            // Every thread places its huge blocks in 1 GiB huge slots of its own (docs/design.md
            // §7.1): room for the 15 threads that allocate here (reserved, not committed).
            &Config { thread_slots: 40, huge_capacity: 32 << 30, ..Config::with_capacity(256 << 20) },
        )
        .expect("create");
        let owner = heap.attach().expect("attach");
        table.reset();
        let salt = 0x4a9e ^ round as u64;
        // Addresses (NonNull is not Send): the thread beside the owner frees some of them.
        let blocks: Vec<usize> = (0..N)
            .map(|i| {
                let size = HUGE_SIZES[i % HUGE_SIZES.len()];
                let p = owner.alloc(size).expect("huge alloc");
                let off = heap.offset_of(p.as_ptr()).expect("offset").raw();
                fill(p, size, off, salt);
                table.offset(i).store(off, Ordering::SeqCst);
                table.size(i).store(size as u64, Ordering::SeqCst);
                p.as_ptr() as usize
            })
            .collect();
        let table = &table;
        let free_once = |h: &ThreadHandle, p: NonNull<u8>, i: usize| -> Result<(), String> {
            h.free(p).map_err(|e| format!("free of huge block {i}: {e}"))?;
            match h.free(p) {
                Err(FreeError::DoubleFree) => {}
                other => return Err(format!("second free of huge block {i}: {other:?}")),
            }
            table.counter(i).store(1, Ordering::SeqCst);
            Ok(())
        };
        let mut children = fork_threads(name.as_str(), table, move |heap, h, me| {
            for i in (me..N).step_by(PROCS * THREADS).filter(|i| i % 4 != BESIDE) {
                let off = table.offset(i).load(Ordering::SeqCst);
                let size = table.size(i).load(Ordering::SeqCst) as usize;
                let p = at(heap, off)?;
                intact(p, size, off, salt)?;
                let p = if i % 2 == 0 {
                    // Moves it (fewer pages) and copies what fits.
                    let q = h.realloc(p, size / 2 + 8192).map_err(|e| format!("realloc of huge block {i}: {e}"))?;
                    intact(q, size / 2, off, salt).map_err(|e| format!("after realloc: {e}"))?;
                    q
                } else {
                    p
                };
                free_once(h, p, i)?;
            }
            Ok(())
        });
        start(table);
        // Set once the children have ended, however they ended: the threads below stop then
        // even if a child failed before freeing its share.
        let stop = std::sync::atomic::AtomicBool::new(false);
        let done = || stop.load(Ordering::SeqCst) || (0..N).all(|i| table.counter(i).load(Ordering::SeqCst) == 1);
        // Allocates, fills, checks and frees huge blocks until every table block is freed.
        let reuse = |h: &ThreadHandle, t: u64| {
            let mut k = 0u64;
            while !done() || k < 8 {
                let size = HUGE_SIZES[(k + t) as usize % HUGE_SIZES.len()];
                let p = h.alloc(size).expect("owner-process huge alloc");
                let off = heap.offset_of(p.as_ptr()).expect("offset").raw();
                fill(p, size, off, salt ^ (t << 32 | k));
                std::thread::yield_now();
                if let Err(e) = intact(p, size, off, salt ^ (t << 32 | k)) {
                    panic!("a reused huge object was written by someone else: {e}");
                }
                h.free(p).expect("owner-process huge free");
                k += 1;
            }
        };
        let blocks = &blocks;
        std::thread::scope(|s| {
            s.spawn(move || reuse(&owner, 0));
            s.spawn(|| {
                let h = heap.attach().expect("attach");
                for (i, &addr) in blocks.iter().enumerate().filter(|(i, _)| i % 4 == BESIDE) {
                    let p = NonNull::new(addr as *mut u8).expect("a block address");
                    let off = table.offset(i).load(Ordering::SeqCst);
                    if let Err(e) = intact(p, table.size(i).load(Ordering::SeqCst) as usize, off, salt)
                        .and_then(|()| free_once(&h, p, i))
                    {
                        panic!("beside the owner: {e}");
                    }
                }
                reuse(&h, 1);
            });
            s.spawn(|| {
                while !done() {
                    heap.sweep_huge();
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
            /// Sets `stop` when dropped, also by a panic of the wait below.
            struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            let _stop = Stop(&stop);
            for c in &mut children {
                c.succeeds();
            }
        });
        heap.sweep_huge();
        assert_clean_and_empty(&heap, "after the huge frees");
    }
}
