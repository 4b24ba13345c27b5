//! Every white-box crash point (`cxlalloc::internal::crash::POINTS`), one at a time: a forked child runs a
//! workload that passes through every logged step, dies by `SIGKILL` at the armed point, and
//! the parent adopts its slots, recovers them and checks that the heap is consistent and that
//! every block the workload held is named exactly once by the application's words — no block
//! lost, none owned twice.
//!
//! Needs `--features crash-points` (see `script/test.sh`).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::{fork_code, serial, HeapName};
use cxlalloc::internal::crash::{self, POINTS};
use cxlalloc::{Coherence, Config, Heap, Offset, ThreadHandle};

/// Words of the application's table (a block every block of the workload is recorded in).
const TABLE_WORDS: usize = 512;

/// Where each phase of the workload records its blocks in the table.
const CLASS_1K: usize = 0; // 96 blocks: 3 slabs of 32
const CLASS_512: usize = 100; // 64 blocks: 1 slab
const CLASS_256: usize = 170; // 1 block
const CLASS_768: usize = 200; // 42 blocks: 1 slab
const HUGE: usize = 250;
const AFTER: usize = 260;
const PLAIN: usize = 270; // PLAIN_BLOCKS blocks freed by plain (not detectable) remote frees
const PLAIN_BLOCKS: usize = 8;
const CHAIN: usize = 300; // 96 blocks of 1 KiB: 3 slabs of the freer's, emptied locally

/// The heap of a run in `coherence`; the reduced models have no huge heap.
fn config(coherence: Coherence) -> Config {
    Config {
        thread_slots: 8,
        small_batch: 1,
        large_batch: 1,
        // Two in the reduced models, so that their pops and pushes move chains of two slabs
        // (docs/design.md §4.3, "Chains"); a chain is never longer than the cache.
        cache_local: if coherence == Coherence::Full { 1 } else { 2 },
        huge_capacity: if coherence == Coherence::Full { 1 << 30 } else { 0 },
        coherence,
        ..Config::with_capacity(64 << 20)
    }
}

/// The crash points the workload reaches in `coherence`: remote frees are batched only in the
/// reduced models, which have no huge heap. Recovery's own points are armed separately.
fn points(coherence: Coherence) -> impl Iterator<Item = &'static str> {
    // The full model counts remote frees one by one and moves slabs to and from the global
    // list one at a time; the limited model has no huge heap (its mailboxes are the full
    // model's, with write-backs: docs/design.md §4.6).
    let unreached: &[&str] = if coherence == Coherence::Full {
        &["RemoteBatch", "PopChain", "PushChain", "SizeMarked", "LocalFreeBitSet"]
    } else {
        &["Huge"]
    };
    POINTS.iter().copied().filter(move |p| !p.starts_with("Recovery") && !unreached.iter().any(|u| p.starts_with(u)))
}

fn try_alloc(t: &ThreadHandle, table: &[AtomicU64], range: std::ops::Range<usize>, size: usize) -> Result<(), String> {
    for i in range {
        t.alloc_into(size, &table[i]).map_err(|e| format!("alloc_into {size} at {i}: {e}"))?;
    }
    Ok(())
}

fn try_free(t: &ThreadHandle, table: &[AtomicU64], range: std::ops::Range<usize>) -> Result<(), String> {
    for i in range {
        t.free_from(&table[i]).map_err(|e| format!("free_from {i}: {e}"))?;
    }
    Ok(())
}

/// Passes through every crash point: allocation by bump and sizing, word takes, retiring
/// (detach and disown), local and remote frees (counted and claiming), reclaiming an empty
/// sized slab, abandoning partly used slabs (counted and claimed back), returning cached words,
/// global pushes and pops, and huge allocations, frees, reclaims into the cache, reuse from
/// it and a release by another thread — all through detectable allocation and free — then
/// plain remote frees: into the owner's mailbox, harvested when it closes it, and counted
/// (batched in the reduced models) once the owner has left.
fn workload(heap: &Heap, table: &[AtomicU64]) -> Result<(), String> {
    let a = heap.attach().map_err(|e| e.to_string())?;
    let b = heap.attach().map_err(|e| e.to_string())?;
    // Three slabs of 1 KiB blocks, each retired (detached) when full.
    try_alloc(&a, table, CLASS_1K..CLASS_1K + 96, 1024)?;
    // Slab 0: 4 local frees (T6 back to the sized list); its other 28 go later.
    try_free(&a, table, CLASS_1K..CLASS_1K + 4)?;
    // Slab 1: all remote; the last free claims it for b (T8).
    try_free(&b, table, CLASS_1K + 32..CLASS_1K + 64)?;
    // b sizes three slabs (the one it claimed among them) and empties them by local frees
    // (T7): three empty slabs overflow its cache, and the trim pushes what is beyond it (in
    // the reduced models, whose cache is two, as one chain of two: docs/design.md §4.3).
    try_alloc(&b, table, CHAIN..CHAIN + 96, 1024)?;
    try_free(&b, table, CHAIN..CHAIN + 96)?;
    // Slab 2: one local free, 31 blocks stay out: abandoned partly used at detach.
    try_free(&a, table, CLASS_1K + 64..CLASS_1K + 65)?;
    // A 512-byte slab emptied by 1 local and 63 remote frees, which the next refill reclaims.
    try_alloc(&a, table, CLASS_512..CLASS_512 + 64, 512)?;
    try_free(&a, table, CLASS_512..CLASS_512 + 1)?;
    try_free(&b, table, CLASS_512 + 1..CLASS_512 + 64)?;
    try_alloc(&a, table, CLASS_256..CLASS_256 + 1, 256)?;
    // A 768-byte slab freed remotely while current, then filled: retired by disowning.
    try_alloc(&a, table, CLASS_768..CLASS_768 + 1, 768)?;
    try_free(&b, table, CLASS_768..CLASS_768 + 1)?;
    try_alloc(&a, table, CLASS_768 + 1..CLASS_768 + 42, 768)?;
    // Slab 0's other blocks, remotely: free == counter, so abandoning it claims it back.
    try_free(&b, table, CLASS_1K + 4..CLASS_1K + 32)?;
    // Detach: cached words go back, sized slabs are abandoned, empty ones pushed global.
    drop(a);
    drop(b);
    let c = heap.attach().map_err(|e| e.to_string())?;
    // A refill with nothing cached pops the global list.
    try_alloc(&c, table, AFTER..AFTER + 1, 1024)?;
    if heap.config().huge_capacity > 0 {
        // A huge block, freed by its owner, which reclaims it at once into its cache; then
        // allocated again from the cache and freed again.
        for _ in 0..2 {
            try_alloc(&c, table, HUGE..HUGE + 1, 1 << 20)?;
            try_free(&c, table, HUGE..HUGE + 1)?;
        }
    }
    // Plain frees by another thread, each forgotten by the application right after it. The
    // first half goes to `c`'s mailbox (its owner is alive), which `c` harvests as it closes it
    // at detach; the second half, freed once `c` has abandoned the slab, is counted (batched
    // in the reduced models, the batch applied when `d` detaches).
    try_alloc(&c, table, PLAIN..PLAIN + PLAIN_BLOCKS, 128)?;
    let d = heap.attach().map_err(|e| e.to_string())?;
    if heap.config().huge_capacity > 0 {
        // Two huge blocks of 2 MiB (the cached one does not fit them). One freed by a thread
        // beside its owner: left mapped and protected for the owner, which reclaims it when it
        // detaches. One freed by that thread once its owner has detached: released (its object
        // removed by the freer), the rest left to a sweep.
        try_alloc(&c, table, HUGE..HUGE + 2, 2 << 20)?;
        try_free(&d, table, HUGE..HUGE + 1)?;
    }
    let plain_free = |word: &AtomicU64| -> Result<(), String> {
        let p = heap
            .pointer(Offset::<u8>::from_raw(word.load(Ordering::Acquire)))
            .map_err(|e| format!("plain block: {e}"))?;
        d.free(p).map_err(|e| format!("plain free: {e}"))?;
        word.store(0, Ordering::Release);
        Ok(())
    };
    table[PLAIN..PLAIN + PLAIN_BLOCKS / 2].iter().try_for_each(plain_free)?;
    drop(c);
    if heap.config().huge_capacity > 0 {
        try_free(&d, table, HUGE + 1..HUGE + 2)?;
    }
    table[PLAIN + PLAIN_BLOCKS / 2..PLAIN + PLAIN_BLOCKS].iter().try_for_each(plain_free)?;
    drop(d);
    Ok(())
}

/// The table: a block of the parent's, found by the children through root 0.
fn table(heap: &Heap) -> &[AtomicU64] {
    let off = heap.root(0).expect("root 0").load(Ordering::Acquire);
    let p = heap.pointer(Offset::<AtomicU64>::from_raw(off)).expect("table offset");
    // SAFETY: the parent allocated TABLE_WORDS words there and frees them only at the end.
    unsafe { std::slice::from_raw_parts(p.as_ptr(), TABLE_WORDS) }
}

/// Forks a child that arms `point` and runs `body`; returns whether it died at the point
/// (false: it finished without reaching it).
fn crash_child(name: &str, point: &str, body: fn(&Heap) -> Result<(), String>) -> bool {
    fork_code(point, || {
        crash::arm(point);
        let heap = match Heap::open(name) {
            Ok(h) => h,
            Err(e) => {
                common::raw_eprint(&format!("open: {e}\n"));
                return common::EXIT_FAILED;
            }
        };
        match body(&heap) {
            Ok(()) => 0,
            Err(e) => {
                common::raw_eprint(&format!("{point}: workload failed: {e}\n"));
                common::EXIT_FAILED
            }
        }
    })
    .killed_at_point(point)
}

fn run_workload(heap: &Heap) -> Result<(), String> {
    workload(heap, table(heap))
}

fn recover_dead(heap: &Heap) -> Result<(), String> {
    heap.recover_dead();
    Ok(())
}

/// After recovery: the heap checks clean, every table word names a distinct allocated block
/// (but a plainly freed one whose word the application had not cleared yet), and freeing them
/// (and the table) leaves no live block.
fn audit(heap: &Heap, owner: &ThreadHandle, point: &str) {
    let reports = heap.recover_dead();
    assert!(heap.dead_slots().is_empty(), "{point}: dead slots left after recovery");
    let r = heap.check();
    assert!(r.is_clean(), "{point}: after recovery {reports:?}\n{r}");
    assert!(r.in_flight.is_empty(), "{point}: records left in flight\n{r}");
    let words = table(heap);
    let mut seen = std::collections::HashSet::new();
    for (i, w) in words.iter().enumerate() {
        let off = w.load(Ordering::Acquire);
        if off == 0 {
            continue;
        }
        assert!(seen.insert(off), "{point}: block {off:#x} named twice (word {i})");
        let p = heap.pointer(Offset::<u8>::from_raw(off)).expect("table names a heap offset");
        if (PLAIN..PLAIN + PLAIN_BLOCKS).contains(&i) && owner.usable_size(p).is_err() {
            continue;
        }
        assert!(owner.usable_size(p).is_ok(), "{point}: word {i} names freed block {off:#x}");
        owner.free_from(w).unwrap_or_else(|e| panic!("{point}: free of word {i}: {e}"));
    }
    heap.sweep_huge();
    let r = heap.check();
    assert!(r.is_clean(), "{point}: after freeing the table's blocks\n{r}");
    assert_eq!(r.live_blocks(), 1, "{point}: blocks leaked (beyond the table itself): {reports:?}\n{r}");
}

fn fresh_heap(point: &str, coherence: Coherence) -> (HeapName, Heap, ThreadHandle) {
    let name = HeapName::new(&format!("crash-{}", point.replace(['/', '+'], "-")));
    let heap = Heap::create(name.as_str(), &config(coherence)).unwrap();
    let owner = heap.attach().unwrap();
    let table = owner.alloc_zeroed(TABLE_WORDS * 8).unwrap();
    heap.root(0).unwrap().store(heap.offset_of(table.as_ptr()).unwrap().raw(), Ordering::Release);
    (name, heap, owner)
}

fn finish(heap: Heap, owner: ThreadHandle) {
    let table = heap.root(0).unwrap().load(Ordering::Acquire);
    owner.free(heap.pointer(Offset::<u8>::from_raw(table)).unwrap()).unwrap();
    drop(owner);
    heap.sweep_huge();
    let r = heap.check();
    // Nothing freed is left half-way (a release or reclaim cut short is finished by recovery)
    // and nothing stays cached once every thread has detached.
    assert_eq!((r.live_blocks(), r.huge.freed, r.huge.cached), (0, 0, 0), "{r}");
}

#[test]
fn the_workload_runs_to_the_end_without_a_crash() {
    let _serial = serial();
    for coherence in [Coherence::Full, Coherence::Limited] {
        let (name, heap, owner) = fresh_heap("none", coherence);
        assert!(!crash_child(name.as_str(), "Nowhere", run_workload), "{coherence:?}: died without a point armed");
        audit(&heap, &owner, "none");
        finish(heap, owner);
    }
}

/// Kills the workload once at each point it reaches in `coherence` and audits the recovery.
fn every_point_is_recovered(coherence: Coherence) {
    let mut unreached = Vec::new();
    for point in points(coherence) {
        let (name, heap, owner) = fresh_heap(point, coherence);
        if !crash_child(name.as_str(), point, run_workload) {
            unreached.push(point);
        }
        audit(&heap, &owner, point);
        finish(heap, owner);
    }
    assert!(unreached.is_empty(), "{coherence:?}: the workload never reached {unreached:?}");
}

#[test]
fn every_crash_point_is_recovered_with_nothing_lost() {
    let _serial = serial();
    every_point_is_recovered(Coherence::Full);
}

/// Limited coherence batches remote frees in the freer's record; its adopter (on the same
/// host, whose caches it shares) applies what was counted.
#[test]
fn every_crash_point_of_the_limited_model_is_recovered_with_nothing_lost() {
    let _serial = serial();
    every_point_is_recovered(Coherence::Limited);
}

#[test]
fn later_hits_of_every_crash_point_are_recovered_with_nothing_lost() {
    let _serial = serial();
    let mut reached = 0;
    for skip in [1, 5, 30] {
        for point in points(Coherence::Full) {
            let spec = format!("{point}@{skip}");
            let (name, heap, owner) = fresh_heap(&format!("{point}-{skip}"), Coherence::Full);
            reached += usize::from(crash_child(name.as_str(), &spec, run_workload));
            audit(&heap, &owner, &spec);
            finish(heap, owner);
        }
    }
    assert!(reached > POINTS.len(), "only {reached} later hits reached");
}

#[test]
fn a_slot_whose_adopter_died_during_recovery_is_recovered_again() {
    let _serial = serial();
    for point in ["RecoveryResolved", "RecoveryRebuilt"] {
        for first in ["Logged/RemoteFree", "SizeCounted", "HugeLinked"] {
            let (name, heap, owner) = fresh_heap(point, Coherence::Full);
            assert!(crash_child(name.as_str(), first, run_workload), "{first} not reached");
            assert!(crash_child(name.as_str(), point, recover_dead), "{point} not reached after {first}");
            audit(&heap, &owner, &format!("{first} then {point}"));
            finish(heap, owner);
        }
    }
}

fn free_from_root_1(heap: &Heap) -> Result<(), String> {
    let t = heap.attach().map_err(|e| e.to_string())?;
    let word = heap.root(1).ok_or("no root 1")?;
    t.free_from(word).map_err(|e| e.to_string())?;
    Ok(())
}

/// A detectable free's record names its block's allocation by the slab's generation (a
/// remote detectable free is always counted, never left in a mailbox, so its block comes back
/// only through a new sizing of its slab). A thread dies once its remote free of the first
/// block of another slot's full slab is done (`FreeDone`); another thread frees the rest,
/// which claims the slab (T8) and gives it to the global list, where the next refill of the
/// same class sizes it again (same offsets, same size, the next generation) and hands that
/// block out again. Recovery of the dead slot must not redo the free on the new allocation.
#[test]
fn a_detectable_free_is_not_redone_on_the_block_of_a_later_sizing_of_its_slab() {
    let _serial = serial();
    for coherence in [Coherence::Full, Coherence::Limited] {
        let (name, heap, owner) = fresh_heap("resized-FreeDone", coherence);
        // A fresh slab of the 1 KiB class, filled by a thread that stays attached while the
        // child frees (so that the child's free is remote).
        let filler = heap.attach().unwrap();
        let blocks: Vec<_> = (0..32).map(|_| filler.alloc(1024).unwrap()).collect();
        let slab = blocks[0].as_ptr() as usize >> 15;
        assert!(blocks.iter().all(|p| p.as_ptr() as usize >> 15 == slab), "{coherence:?}: not one slab");
        let x = blocks[0];
        heap.root(1).unwrap().store(heap.offset_of(x.as_ptr()).unwrap().raw(), Ordering::Release);
        assert!(crash_child(name.as_str(), "FreeDone", free_from_root_1), "{coherence:?}: FreeDone not reached");
        // The rest are freed from a third slot once the filler is gone (its mailbox closed:
        // counted in every model); the freer's detach applies its batch (reduced models), whose
        // last free claims the slab, and pushes the slab to the global list.
        let freer = heap.attach().unwrap();
        drop(filler);
        for &p in &blocks[1..] {
            freer.free(p).unwrap_or_else(|e| panic!("{coherence:?}: remote free: {e}"));
        }
        drop(freer);
        let again = owner.alloc(1024).unwrap();
        assert_eq!(again, x, "{coherence:?}: the claimed slab was not sized again with the block first");
        // SAFETY: a live 1 KiB block of ours.
        unsafe { (x.as_ptr() as *mut u64).write(0x5a5a) };
        let reports = heap.recover_dead();
        assert!(heap.dead_slots().is_empty(), "{coherence:?}: dead slots left: {reports:?}");
        assert!(owner.usable_size(x).is_ok(), "{coherence:?}: recovery freed the block's new allocation");
        // SAFETY: as above.
        assert_eq!(unsafe { (x.as_ptr() as *const u64).read() }, 0x5a5a, "{coherence:?}: its bytes changed");
        let more: Vec<_> = (0..64).map(|_| owner.alloc(1024).unwrap()).collect();
        assert!(!more.contains(&x), "{coherence:?}: the block was handed out twice");
        for p in more.into_iter().chain([x]) {
            owner.free(p).unwrap_or_else(|e| panic!("{coherence:?}: free: {e}"));
        }
        let r = heap.check();
        assert!(r.is_clean(), "{coherence:?}: {reports:?}\n{r}");
        finish(heap, owner);
    }
}

/// The child's part of the next test: fills slab A (32 blocks of 1 KiB) and sizes slab B with a
/// 33rd block, recording all of them in the table; frees every block of A locally but 1 and 5,
/// then dies freeing block 5 between its bit and its mark (`LocalFreeBitSet`).
fn free_block_5_unmarked(heap: &Heap) -> Result<(), String> {
    let t = heap.attach().map_err(|e| e.to_string())?;
    let table = table(heap);
    try_alloc(&t, table, 0..33, 1024)?;
    for i in (0..32).filter(|&i| i != 1 && i != 5) {
        try_free(&t, table, i..i + 1)?;
    }
    crash::arm("LocalFreeBitSet");
    let p = heap.pointer(Offset::<u8>::from_raw(table[5].load(Ordering::Acquire))).map_err(|e| e.to_string())?;
    t.free(p).map_err(|e| e.to_string())?;
    Ok(())
}

/// Limited model (docs/design.md §4.1, "Marks kept at re-sizing"): a crash between a local
/// free's bit and its mark leaves a free block without the mark; recovery must keep its slab
/// from skipping the marks at its next sizing. The adopter frees the last outstanding block
/// (T7), sizes the slab again for the same class, and a remote free of the unmarked block —
/// never handed out in the new sizing — must be refused.
#[test]
fn a_free_block_left_unmarked_by_a_crash_is_marked_at_its_slabs_next_sizing() {
    let _serial = serial();
    let (name, heap, owner) = fresh_heap("unmarked-LocalFreeBitSet", Coherence::Limited);
    let died = fork_code("LocalFreeBitSet", || match free_block_5_unmarked(&Heap::open(name.as_str()).unwrap()) {
        Ok(()) => 0,
        Err(e) => {
            common::raw_eprint(&format!("workload failed: {e}\n"));
            common::EXIT_FAILED
        }
    })
    .killed_at_point("LocalFreeBitSet");
    assert!(died, "LocalFreeBitSet not reached");
    let words = table(&heap);
    let block = |i: usize| heap.pointer(Offset::<u8>::from_raw(words[i].load(Ordering::Acquire))).unwrap();
    let (x, y, b0) = (block(5), block(1), block(32));
    let dead = heap.dead_slots();
    assert_eq!(dead.len(), 1, "one dead slot");
    let (adopter, _) = heap.adopt(dead[0]).unwrap();
    // Slab A entirely free: T7. B (current, one block out) is filled; the next allocation
    // sizes A again for the same class and takes its block 0.
    adopter.free(y).unwrap();
    let fill: Vec<_> = (0..31).map(|_| adopter.alloc(1024).unwrap()).collect();
    let again = adopter.alloc(1024).unwrap();
    // Block 0 of A (its word cleared by its free), just before block 1: a fresh slab hands
    // out its blocks in order.
    assert_eq!(again.as_ptr().wrapping_add(1024), y.as_ptr(), "slab A was not the one sized again");
    assert_eq!(x.as_ptr(), y.as_ptr().wrapping_add(4 * 1024), "blocks 1 and 5 of one slab");
    let other = heap.attach().unwrap();
    assert!(other.free(x).is_err(), "a remote free of a block never handed out in this sizing was taken");
    for p in fill.into_iter().chain([again, b0]) {
        adopter.free(p).unwrap();
    }
    for w in &words[..33] {
        w.store(0, Ordering::Release);
    }
    drop(other);
    drop(adopter);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    finish(heap, owner);
}

/// The harvest's clear of a returned block's word (docs/design.md §4.6) is the last write to
/// the block: a harvested block that empties its slab sends the slab to the global list (T7,
/// T9; no cache here), where another thread may size it and hand the same block out before the
/// harvester goes on. Paused at `HarvestReturned`, right after the return, while the freer
/// takes the slab and writes its new block, the harvester must leave those bytes alone (it
/// used to read the word again there and clear it, over the new owner's first word).
#[test]
fn a_harvest_writes_nothing_to_its_block_once_the_slab_may_have_moved_on() {
    const SIZE: usize = 1024;
    const PER_SLAB: usize = 32;
    const NEW: u64 = 0x5eed_0000_0000_0001;
    let _g = serial();
    let name = HeapName::new("harvest-late-write");
    // One slab per bump, and no cache of empty slabs: an emptied slab goes straight to the
    // global list, alone.
    let cfg =
        Config { thread_slots: 4, huge_capacity: 0, cache_local: 0, small_batch: 1, ..Config::with_capacity(64 << 20) };
    let heap = Heap::create(name.as_str(), &cfg).unwrap();
    let (owner, freer) = (heap.attach().unwrap(), heap.attach().unwrap());
    // One slab of the owner's, full: block 0 goes to the freer, the rest come back locally.
    let blocks: Vec<_> = (0..PER_SLAB).map(|_| owner.alloc(SIZE).unwrap()).collect();
    for p in &blocks[1..] {
        owner.free(*p).unwrap();
    }
    let x = blocks[0];
    // A remote free: into the owner's mailbox.
    freer.free(x).unwrap();
    crash::pause_at("HarvestReturned");
    let (owner, other, y, paused) = std::thread::scope(|s| {
        // The owner's first block of another class refills, and the refill harvests.
        let t = s.spawn(move || {
            let p = owner.alloc(64).unwrap();
            (owner, p.as_ptr() as usize)
        });
        let start = std::time::Instant::now();
        while !crash::paused() && !t.is_finished() && start.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let paused = crash::paused();
        // The owner has returned x, emptying its slab, which went to the global list: the
        // freer's refill takes it, sizes it and hands x out again.
        let y = freer.alloc(SIZE).unwrap();
        if y == x {
            // SAFETY: a live block of SIZE bytes, ours.
            unsafe { (y.as_ptr() as *mut u64).write_volatile(NEW) };
        }
        // Checked after the join (a panic here would leave the owner paused for ever).
        crash::resume();
        let (owner, other) = t.join().unwrap();
        (owner, other, y, paused)
    });
    assert!(paused, "the harvest never reached HarvestReturned");
    assert_eq!(y, x, "the freer's refill took the emptied slab and its first block");
    // SAFETY: still the freer's live block.
    let first = unsafe { (x.as_ptr() as *const u64).read_volatile() };
    assert_eq!(first, NEW, "the harvest wrote over the first word of a block of the slab's next sizing");
    freer.free(x).unwrap();
    owner.free(std::ptr::NonNull::new(other as *mut u8).unwrap()).unwrap();
    drop((owner, freer));
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.live_blocks(), 0, "{r}");
}
