//! Multi-process tests with real processes (`fork`): offsets exchanged between processes,
//! cross-process remote frees through every slab state, growth seen through the SIGSEGV
//! handler, concurrent creation, dead holders, faults that must still crash, and a fixed-seed
//! stress run (not a benchmark).
//!
//! Each test forks at most a handful of children, each of which opens the heap by name (so it
//! has its own reservation at its own address), reports only through its exit status, and is
//! killed if it runs past [`common::CHILD_DEADLINE`]. Every test ends with the checker run in the
//! surviving process and unlinks its heap.

mod common;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{fill, fork_child, fork_code, pattern, serial, verify, Ctx, HeapName, Pipe, Rng, CHILD_DEADLINE};
use cxlalloc::Bracket;
use cxlalloc::SlabState;
use cxlalloc::{AttachError, Config, FreeError, Heap, Offset, OpenError, Report, ThreadHandle};
use nix::sys::signal::Signal;

/// Root holding the number of offsets [`publish`] wrote.
const COUNT_ROOT: usize = 63;
/// Bytes of a small slab.
const SMALL_SLAB: u64 = 32 << 10;
/// The 1024-byte class: 32 blocks per small slab.
const KIB_BLOCKS: usize = 32;

fn root(heap: &Heap, i: usize) -> &AtomicU64 {
    heap.root(i).expect("root index in range")
}

/// Stores `offsets` in roots `0..n` and `n` in [`COUNT_ROOT`].
fn publish(heap: &Heap, offsets: &[u64]) {
    assert!(offsets.len() < COUNT_ROOT);
    for (i, &o) in offsets.iter().enumerate() {
        root(heap, i).store(o, Ordering::SeqCst);
    }
    root(heap, COUNT_ROOT).store(offsets.len() as u64, Ordering::SeqCst);
}

/// The offsets [`publish`] stored.
fn published(heap: &Heap) -> Vec<u64> {
    let n = root(heap, COUNT_ROOT).load(Ordering::SeqCst) as usize;
    (0..n).map(|i| root(heap, i).load(Ordering::SeqCst)).collect()
}

fn offset(heap: &Heap, p: NonNull<u8>) -> u64 {
    heap.offset_of(p.as_ptr()).expect("pointer in heap").raw()
}

fn ptr(heap: &Heap, off: u64) -> Result<NonNull<u8>, String> {
    heap.pointer::<u8>(Offset::from_raw(off)).ctx("heap.pointer")
}

fn live_blocks(r: &Report) -> u64 {
    Bracket::ALL.iter().map(|&b| r.bracket(b).live_blocks()).sum()
}

/// Small-bracket slab counts as (global, unsized, sized, detached, disowned).
fn small_states(r: &Report) -> [u64; 5] {
    let c = r.bracket(Bracket::Small);
    [SlabState::Global, SlabState::Unsized, SlabState::Sized, SlabState::Detached, SlabState::Disowned]
        .map(|s| c.slabs(s))
}

/// Runs the checker and asserts it is clean; returns the report.
fn assert_clean(heap: &Heap) -> Report {
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    r
}

fn alloc_n(t: &ThreadHandle, size: usize, n: usize) -> Vec<NonNull<u8>> {
    (0..n).map(|_| t.alloc(size).expect("alloc")).collect()
}

/// Opens `name` and attaches: what every child does first.
fn open_attached(name: &str) -> Result<(Heap, ThreadHandle), String> {
    let heap = Heap::open(name).ctx("open")?;
    let t = heap.attach().ctx("attach")?;
    Ok((heap, t))
}

#[test]
fn offsets_name_the_same_bytes_in_every_process() {
    const FROM_PARENT: u64 = 1;
    const FROM_CHILD: u64 = 2;
    const CHILD_OWN: u64 = 3;
    let _serial = serial();
    let name = HeapName::new("offsets");
    let heap = Heap::create(name.as_str(), &Config::with_capacity(64 << 20)).unwrap();
    let t = heap.attach().unwrap();

    // One block of each kind: smallest, odd small sizes, largest small, large classes.
    let sizes = [8usize, 24, 100, 1000, 1024, 4096, 100_000, 524_288];
    let mut published_words = Vec::new();
    let mut blocks = Vec::new();
    for &size in &sizes {
        let p = t.alloc(size).unwrap();
        let off = offset(&heap, p);
        let len = size.next_multiple_of(8);
        // SAFETY: a fresh block of at least `len` bytes.
        unsafe { fill(p.as_ptr(), len, off, FROM_PARENT) };
        published_words.extend([off, len as u64]);
        blocks.push((p, off, len));
    }
    publish(&heap, &published_words);
    let parent_addresses: Vec<usize> = blocks.iter().map(|b| b.0.as_ptr() as usize).collect();

    let mut child = fork_child("reader", || {
        let (heap, t) = open_attached(name.as_str())?;
        let words = published(&heap);
        for (i, pair) in words.chunks(2).enumerate() {
            let (off, len) = (pair[0], pair[1] as usize);
            let p = ptr(&heap, off)?;
            // The parent's reservation is still mapped in this copy of its address space, so
            // ours lies elsewhere: the same offset, a different address, the same bytes.
            ensure!(p.as_ptr() as usize != parent_addresses[i], "block {i} mapped at the parent's address");
            // SAFETY: the parent allocated `len` bytes at `off` and waits for us.
            unsafe { verify(p.as_ptr(), len, off, FROM_PARENT)? };
            // SAFETY: as above; the parent reads these bytes only after we exit.
            unsafe { fill(p.as_ptr(), len, off, FROM_CHILD) };
        }
        let q = t.alloc(777).ctx("alloc")?;
        let off = offset(&heap, q);
        // SAFETY: a fresh 784-byte block.
        unsafe { fill(q.as_ptr(), 784, off, CHILD_OWN) };
        root(&heap, 40).store(off, Ordering::SeqCst);
        Ok(())
    });
    child.succeeds();

    for &(p, off, len) in &blocks {
        // SAFETY: our block; the child has exited.
        unsafe { verify(p.as_ptr(), len, off, FROM_CHILD) }.unwrap();
    }
    let child_off = root(&heap, 40).load(Ordering::SeqCst);
    assert!(blocks.iter().all(|b| b.1 != child_off), "child's block aliases a parent block");
    let q = ptr(&heap, child_off).unwrap();
    // SAFETY: the child allocated and filled 784 bytes there.
    unsafe { verify(q.as_ptr(), 784, child_off, CHILD_OWN) }.unwrap();
    assert_eq!(t.usable_size(q), Ok(784));

    for (p, _, _) in blocks {
        t.free(p).unwrap();
    }
    t.free(q).unwrap();
    let r = assert_clean(&heap);
    assert_eq!(live_blocks(&r), 0, "{r}");
    assert_eq!(heap.stats().counters.remote_frees, 1, "only the child's block is a remote free");
}

#[test]
fn cross_process_remote_frees_disown_a_full_slab_and_the_last_one_claims_it() {
    let _serial = serial();
    let name = HeapName::new("disown");
    // Defaults: small batch 8 slabs, cache_local 8.
    let heap = Heap::create(name.as_str(), &Config::with_capacity(64 << 20)).unwrap();
    let t = heap.attach().unwrap();
    let mut blocks = alloc_n(&t, 1024, KIB_BLOCKS - 1);
    let slab = offset(&heap, blocks[0]) / SMALL_SLAB;
    assert!(blocks.iter().all(|&p| offset(&heap, p) / SMALL_SLAB == slab), "31 blocks of one slab");

    // Another process frees 4 of them before the parent's fill completes. Detectable frees
    // (`free_from`) are counted on the slab's counter, never put in the owner's mailbox
    // (docs/design.md §4.6), so the counter moves while the owner still allocates.
    let early: Vec<u64> = blocks[..4].iter().map(|&p| offset(&heap, p)).collect();
    publish(&heap, &early);
    fork_child("early freer", || {
        let (heap, t) = open_attached(name.as_str())?;
        for i in 0..published(&heap).len() {
            t.free_from(root(&heap, i)).ctx("remote free")?;
        }
        let r = heap.check();
        ensure!(r.is_clean(), "{r}");
        // [global, unsized, sized, detached, disowned]: the parent's slab is still sized.
        ensure!(small_states(&r) == [0, 7, 1, 0, 0], "after early frees: {r}");
        ensure!(live_blocks(&r) == 27, "after early frees: {r}");
        Ok(())
    })
    .succeeds();

    // The parent takes the last block: the counter (28) is below 32, so the slab is disowned.
    let last = t.alloc(1024).unwrap();
    assert_eq!(offset(&heap, last) / SMALL_SLAB, slab);
    blocks.push(last);
    let s = heap.stats();
    assert_eq!((s.counters.disowns, s.counters.detaches, s.counters.remote_frees), (1, 0, 4));
    let r = assert_clean(&heap);
    assert_eq!(small_states(&r), [0, 7, 0, 0, 1], "{r}");
    assert_eq!(live_blocks(&r), 28, "{r}");

    // Another process frees the remaining 28; the last free claims the slab for its slot.
    let rest: Vec<u64> = blocks[4..].iter().map(|&p| offset(&heap, p)).collect();
    publish(&heap, &rest);
    fork_child("claimer", || {
        let (heap, t) = open_attached(name.as_str())?;
        let before = heap.stats().counters.claims;
        for off in published(&heap) {
            t.free(ptr(&heap, off)?).ctx("remote free")?;
        }
        let s = heap.stats();
        ensure!(s.counters.claims == before + 1, "claims {} → {}", before, s.counters.claims);
        let r = heap.check();
        ensure!(r.is_clean(), "{r}");
        // The claimed slab sits on this slot's unsized list next to the parent's 7.
        ensure!(small_states(&r) == [0, 8, 0, 0, 0], "after the claim: {r}");
        ensure!(live_blocks(&r) == 0, "after the claim: {r}");
        Ok(())
        // Dropping `t` returns the claimed slab to the global list.
    })
    .succeeds();

    let r = assert_clean(&heap);
    assert_eq!(small_states(&r), [1, 7, 0, 0, 0], "{r}");
    assert_eq!(live_blocks(&r), 0);
    let c = heap.stats().counters;
    assert!(c.disowns >= 1 && c.claims >= 1, "{c:?}");
    assert_eq!(c.remote_frees, KIB_BLOCKS as u64);
}

#[test]
fn a_slab_filled_without_remote_frees_is_detached_and_a_local_free_reattaches_it() {
    let _serial = serial();
    let name = HeapName::new("detach");
    let heap = Heap::create(name.as_str(), &Config::with_capacity(64 << 20)).unwrap();
    let t = heap.attach().unwrap();
    let blocks = alloc_n(&t, 1024, KIB_BLOCKS);
    assert_eq!(heap.stats().counters.detaches, 1);
    assert_eq!(small_states(&assert_clean(&heap)), [0, 7, 0, 1, 0]);
    publish(&heap, &[offset(&heap, blocks[0])]);

    // Another process sees the detached slab, and its remote free leaves it detached (the owner
    // keeps it; only the counter moves).
    fork_child("observer", || {
        let (heap, t) = open_attached(name.as_str())?;
        let r = heap.check();
        ensure!(r.is_clean() && small_states(&r) == [0, 7, 0, 1, 0], "seen from another process: {r}");
        t.free(ptr(&heap, published(&heap)[0])?).ctx("remote free")?;
        let r = heap.check();
        ensure!(r.is_clean() && small_states(&r) == [0, 7, 0, 1, 0], "after a remote free: {r}");
        ensure!(live_blocks(&r) == 31, "after a remote free: {r}");
        Ok(())
    })
    .succeeds();

    // T6: the owner's local free re-attaches it to its sized list.
    t.free(blocks[1]).unwrap();
    let r = assert_clean(&heap);
    assert_eq!(small_states(&r), [0, 7, 1, 0, 0], "{r}");
    for &p in &blocks[2..] {
        t.free(p).unwrap();
    }
    // One block was freed remotely, so the slab cannot become empty locally: it stays sized
    // with 31 free bits and the 32nd accounted for by its counter.
    let r = assert_clean(&heap);
    assert_eq!(small_states(&r), [0, 7, 1, 0, 0], "{r}");
    assert_eq!(live_blocks(&r), 0, "{r}");
}

#[test]
fn empty_slabs_pushed_to_the_global_list_are_popped_by_another_process() {
    let _serial = serial();
    let name = HeapName::new("global");
    let config = Config { cache_local: 0, ..Config::with_capacity(64 << 20) };
    let heap = Heap::create(name.as_str(), &config).unwrap();

    fork_child("pusher", || {
        let (heap, t) = open_attached(name.as_str())?;
        let blocks = alloc_n(&t, 1024, KIB_BLOCKS);
        for p in blocks {
            t.free(p).ctx("local free")?;
        }
        // The emptied slab and the 7 other bumped ones exceed cache_local = 0.
        let r = heap.check();
        ensure!(r.is_clean() && small_states(&r) == [8, 0, 0, 0, 0], "after local frees: {r}");
        ensure!(heap.stats().counters.global_pushes == 8, "{:?}", heap.stats().counters);
        Ok(())
    })
    .succeeds();
    let r = assert_clean(&heap);
    assert_eq!(small_states(&r), [8, 0, 0, 0, 0], "{r}");
    let length = r.bracket(Bracket::Small).length;
    assert_eq!(length, 8);

    fork_child("popper", || {
        let (heap, t) = open_attached(name.as_str())?;
        let mut blocks = alloc_n(&t, 1024, KIB_BLOCKS);
        blocks.extend(alloc_n(&t, 100, 10));
        let s = heap.stats();
        ensure!(s.counters.global_pops == 2, "two classes, two pops: {:?}", s.counters);
        ensure!(s.counters.slabs_bumped == 8, "the heap must not grow: {:?}", s.counters);
        for p in blocks {
            t.free(p).ctx("local free")?;
        }
        Ok(())
    })
    .succeeds();

    let r = assert_clean(&heap);
    assert_eq!(r.bracket(Bracket::Small).length, length, "length unchanged: {r}");
    assert_eq!(live_blocks(&r), 0);
    let c = heap.stats().counters;
    assert!(c.global_pops >= 1, "{c:?}");
    assert_eq!(c.slabs_bumped, 8, "{c:?}");
}

#[test]
fn a_process_that_frees_everything_and_detaches_leaves_every_empty_slab_global() {
    let _serial = serial();
    let name = HeapName::new("drained");
    let config = Config { cache_local: 0, ..Config::with_capacity(64 << 20) };
    let heap = Heap::create(name.as_str(), &config).unwrap();

    // Partly used slabs of two classes, then everything freed locally and the slot released:
    // with cache_local = 0 no empty slab may stay with the (now unheld) slot.
    fork_child("drainer", || {
        let (_heap, t) = open_attached(name.as_str())?;
        let mut blocks = alloc_n(&t, 100, 10);
        blocks.extend(alloc_n(&t, 3000, 5));
        for p in blocks {
            t.free(p).ctx("local free")?;
        }
        Ok(())
    })
    .succeeds();

    let r = assert_clean(&heap);
    assert_eq!(live_blocks(&r), 0, "{r}");
    assert_eq!(r.leased_slots, 0, "{r}");
    for b in Bracket::ALL {
        let c = r.bracket(b);
        assert_eq!(
            c.slabs(SlabState::Global),
            u64::from(c.length),
            "{} bracket: every slab should be global: {r}",
            b.name()
        );
    }
}

#[test]
fn growth_in_one_process_is_visible_in_another_through_the_fault_handler() {
    const SALT: u64 = 0x6047;
    const TABLE: usize = 512 << 10;
    let _serial = serial();
    let name = HeapName::new("growth");
    // Opened (created) before the growth: this process maps only the initial length (0).
    let heap = Heap::create(name.as_str(), &Config::with_capacity(256 << 20)).unwrap();
    // Leased before the grower attaches, so that its slot is another one and every free below
    // is remote (attaching touches no slab).
    let t = heap.attach().unwrap();

    fork_child("grower", || {
        let (heap, t) = open_attached(name.as_str())?;
        let offsets = t.alloc(TABLE).ctx("offset table")?;
        let lengths = t.alloc(TABLE).ctx("length table")?;
        let (offsets_ptr, lengths_ptr) = (offsets.as_ptr().cast::<u64>(), lengths.as_ptr().cast::<u64>());
        let mut n = 0usize;
        let mut record = |p: NonNull<u8>| -> Result<(), String> {
            let len = t.usable_size(p).ctx("usable_size")?;
            let off = offset(&heap, p);
            // SAFETY: a fresh block of `len` bytes.
            unsafe { fill(p.as_ptr(), len, off, SALT) };
            ensure!(n < TABLE / 8, "table full");
            // SAFETY: n < TABLE / 8 words in each table block.
            unsafe {
                offsets_ptr.add(n).write(off);
                lengths_ptr.add(n).write(len as u64);
            }
            n += 1;
            Ok(())
        };
        let (mut small, mut large) = (0usize, 0usize);
        for size in [512usize, 1000, 1024, 888].into_iter().cycle() {
            if small >= 32 << 20 {
                break;
            }
            record(t.alloc(size).ctx("small alloc")?)?;
            small += size;
        }
        for size in [524_288usize, 300_000, 70_000, 2_000].into_iter().cycle() {
            if large >= 32 << 20 {
                break;
            }
            record(t.alloc(size).ctx("large alloc")?)?;
            large += size;
        }
        root(&heap, 0).store(offset(&heap, offsets), Ordering::SeqCst);
        root(&heap, 1).store(offset(&heap, lengths), Ordering::SeqCst);
        root(&heap, 2).store(n as u64, Ordering::SeqCst);
        Ok(())
    })
    .succeeds();

    // This process never touched the new slabs: every read below first faults in the
    // reservation and is mapped by the handler.
    let n = root(&heap, 2).load(Ordering::SeqCst) as usize;
    let offsets = heap.pointer::<u64>(Offset::from_raw(root(&heap, 0).load(Ordering::SeqCst))).unwrap();
    let lengths = heap.pointer::<u64>(Offset::from_raw(root(&heap, 1).load(Ordering::SeqCst))).unwrap();
    assert!(n > 30_000, "grower recorded only {n} blocks");
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: the grower wrote n words into each table.
        let (off, len) = unsafe { (offsets.as_ptr().add(i).read(), lengths.as_ptr().add(i).read()) };
        let p = ptr(&heap, off).unwrap();
        // SAFETY: the grower allocated and filled `len` bytes at `off`, and has exited.
        unsafe { verify(p.as_ptr(), len as usize, off, SALT) }.unwrap();
        entries.push((p, len as usize));
    }
    let grown = heap.stats().data_bytes;
    assert!(grown >= 64 << 20, "heap grew to only {grown} bytes");

    // Cross-process remote frees of everything, tables last.
    for &(p, len) in &entries {
        assert_eq!(t.usable_size(p), Ok(len));
        t.free(p).unwrap();
    }
    t.free(offsets.cast()).unwrap();
    t.free(lengths.cast()).unwrap();
    let r = assert_clean(&heap);
    assert_eq!(live_blocks(&r), 0, "{r}");
    let c = heap.stats().counters;
    assert_eq!(c.remote_frees, n as u64 + 2, "{c:?}");
    assert!(c.claims >= 1, "fully freed full slabs are claimed: {c:?}");
}

#[test]
fn a_block_freed_by_one_process_is_a_double_free_in_every_other() {
    let _serial = serial();
    let name = HeapName::new("double");
    let heap = Heap::create(name.as_str(), &Config::with_capacity(64 << 20)).unwrap();
    let t = heap.attach().unwrap();
    let blocks = alloc_n(&t, 48, 4);
    let offsets: Vec<u64> = blocks.iter().map(|&p| offset(&heap, p)).collect();
    publish(&heap, &offsets);

    // One process frees blocks 0 and 1 remotely; a second process's frees of them are refused.
    fork_child("first freer", || {
        let (heap, t) = open_attached(name.as_str())?;
        for &off in &published(&heap)[..2] {
            t.free(ptr(&heap, off)?).ctx("first free")?;
        }
        Ok(())
    })
    .succeeds();
    fork_child("second freer", || {
        let (heap, t) = open_attached(name.as_str())?;
        for &off in &published(&heap)[..2] {
            let r = t.free(ptr(&heap, off)?);
            ensure!(r == Err(FreeError::DoubleFree), "second free of {off:#x}: {r:?}");
        }
        Ok(())
    })
    .succeeds();
    // The owner's own free of a block another process freed is refused too.
    assert_eq!(t.free(blocks[0]), Err(FreeError::DoubleFree));
    assert_eq!(heap.stats().counters.remote_frees, 2);
    let r = assert_clean(&heap);
    assert_eq!(live_blocks(&r), 2, "{r}");
    for &p in &blocks[2..] {
        t.free(p).unwrap();
    }
    let r = assert_clean(&heap);
    assert_eq!(live_blocks(&r), 0, "{r}");
}

#[test]
fn an_unlinked_heap_stays_usable_and_growable_by_processes_that_have_it_open() {
    const SALT: u64 = 0x0417;
    let _serial = serial();
    let name = HeapName::new("unlinked");
    let heap = Heap::create(name.as_str(), &Config::with_capacity(64 << 20)).unwrap();
    let (ready, go) = (Pipe::new(), Pipe::new());
    let mut child = fork_child("survivor", || {
        let heap = Heap::open(name.as_str()).ctx("open")?;
        ready.send_u64(1);
        ensure!(go.recv_u64(CHILD_DEADLINE) == Some(2), "no go signal");
        ensure!(matches!(Heap::open(name.as_str()), Err(OpenError::NotFound(_))), "the name should be gone");
        // Grow well past what either process has mapped, through the open files.
        let t = heap.attach().ctx("attach")?;
        let mut blocks = Vec::new();
        for i in 0..2000usize {
            let size = if i % 4 == 0 { 20_000 } else { 1000 };
            let p = t.alloc(size).ctx("alloc")?;
            let off = offset(&heap, p);
            // SAFETY: a fresh block of at least `size` bytes.
            unsafe { fill(p.as_ptr(), size, off, SALT) };
            blocks.push((p, off, size));
        }
        root(&heap, 0).store(offset(&heap, blocks[1].0), Ordering::SeqCst);
        for (p, off, size) in blocks.drain(2..) {
            // SAFETY: filled above.
            unsafe { verify(p.as_ptr(), size, off, SALT)? };
            t.free(p).ctx("free")?;
        }
        let r = heap.check();
        ensure!(r.is_clean() && live_blocks(&r) == 2, "{r}");
        Ok(())
    });
    assert_eq!(ready.recv_u64(CHILD_DEADLINE), Some(1));
    Heap::unlink(name.as_str()).unwrap();
    go.send_u64(2);
    child.succeeds();

    // This process still has the heap open too and sees the child's growth.
    let off = root(&heap, 0).load(Ordering::SeqCst);
    let p = ptr(&heap, off).unwrap();
    // SAFETY: the child filled 1000 bytes there and kept the block.
    unsafe { verify(p.as_ptr(), 1000, off, SALT) }.unwrap();
    let r = assert_clean(&heap);
    assert_eq!(live_blocks(&r), 2, "{r}");
    assert!(r.bracket(Bracket::Large).length > 4, "{r}");
}

/// Forks `configs.len()` children that wait on a barrier, then race `open_or_create(name)` with
/// their config, attach, allocate and free. Returns each child's exit code: 0 success,
/// 3 `Mismatch` naming `thread_slots` with the right values, 1 anything else.
fn race_open_or_create(name: &str, configs: &[Config]) -> Vec<i32> {
    let go = Pipe::new();
    let mut children: Vec<_> = configs
        .iter()
        .enumerate()
        .map(|(k, config)| {
            let go = &go;
            fork_child_code(k, move || {
                let mut b = [0u8];
                ensure!(go.recv(&mut b, CHILD_DEADLINE), "no start signal");
                let heap = match Heap::open_or_create(name, config) {
                    Ok(h) => h,
                    Err(OpenError::Mismatch { field: "thread_slots", found, expected })
                        if expected == u64::from(config.thread_slots) && found != expected =>
                    {
                        return Ok(3)
                    }
                    Err(e) => return Err(format!("open_or_create: {e}")),
                };
                ensure!(heap.config() == *config, "config {:?}", heap.config());
                let t = heap.attach().ctx("attach")?;
                let mut rng = Rng::new(k as u64);
                let mut blocks = Vec::new();
                for _ in 0..2000 {
                    let bound = if rng.below(8) == 0 { 64 << 10 } else { 1024 };
                    let size = 1 + rng.below(bound) as usize;
                    let p = t.alloc(size).ctx("alloc")?;
                    let off = offset(&heap, p);
                    // SAFETY: at least 8 bytes (every class is), exclusively ours.
                    unsafe { p.as_ptr().cast::<u64>().write(pattern(off, k as u64)) };
                    blocks.push((p, off));
                }
                for (p, off) in blocks {
                    // SAFETY: written above.
                    ensure!(unsafe { p.as_ptr().cast::<u64>().read() } == pattern(off, k as u64), "block overwritten");
                    t.free(p).ctx("free")?;
                }
                root(&heap, k).fetch_add(1, Ordering::SeqCst);
                Ok(0)
            })
        })
        .collect();
    go.send(&vec![0u8; configs.len()]);
    children.iter_mut().map(|c| c.exit_code()).collect()
}

/// [`fork_code`] for a closure returning `Result<exit code, message>`.
fn fork_child_code(k: usize, body: impl FnOnce() -> Result<i32, String>) -> common::Child {
    fork_code(&format!("racer {k}"), move || match body() {
        Ok(code) => code,
        Err(e) => {
            common::raw_eprint(&format!("racer {k} (pid {}) failed: {e}\n", std::process::id()));
            common::EXIT_FAILED
        }
    })
}

#[test]
fn processes_racing_to_open_or_create_a_new_heap_all_succeed() {
    let _serial = serial();
    let config = Config { thread_slots: 16, ..Config::with_capacity(256 << 20) };
    for round in 0..3 {
        let name = HeapName::new(&format!("race{round}"));
        let codes =
            race_open_or_create(name.as_str(), &[config.clone(), config.clone(), config.clone(), config.clone()]);
        assert_eq!(codes, [0, 0, 0, 0], "round {round}");
        let heap = Heap::open(name.as_str()).unwrap();
        assert_eq!(heap.config(), config);
        for k in 0..4 {
            assert_eq!(root(&heap, k).load(Ordering::SeqCst), 1, "round {round}: racer {k} did not finish");
        }
        let r = assert_clean(&heap);
        assert_eq!(live_blocks(&r), 0, "{r}");
        assert_eq!(r.leased_slots, 0, "{r}");
    }
}

#[test]
fn processes_racing_with_different_configs_the_loser_gets_a_mismatch_naming_the_field() {
    let _serial = serial();
    let a = Config { thread_slots: 16, ..Config::with_capacity(256 << 20) };
    let b = Config { thread_slots: 32, ..a.clone() };
    for round in 0..3 {
        let name = HeapName::new(&format!("mismatch{round}"));
        let mut codes = race_open_or_create(name.as_str(), &[a.clone(), b.clone()]);
        codes.sort();
        assert_eq!(codes, [0, 3], "round {round}: one creator, one mismatch");
        let heap = Heap::open(name.as_str()).unwrap();
        let other = if heap.config() == a { &b } else { &a };
        match Heap::open_or_create(name.as_str(), other) {
            Err(OpenError::Mismatch { field, .. }) => assert_eq!(field, "thread_slots"),
            r => panic!("expected a mismatch, got {r:?}"),
        }
        let r = assert_clean(&heap);
        assert_eq!(live_blocks(&r), 0, "{r}");
    }
}

/// Forks a child that attaches to `name`, allocates, reports its slot on `ready` and then
/// sleeps until killed.
fn fork_holder(name: &str, ready: &Pipe) -> common::Child {
    fork_child("holder", || {
        let (_heap, t) = open_attached(name)?;
        let _blocks = alloc_n(&t, 64, 10);
        ready.send_u64(u64::from(t.slot()));
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    })
}

#[test]
fn a_killed_holders_slot_is_adopted_by_the_next_attach() {
    let _serial = serial();
    let name = HeapName::new("killed");
    let heap = Heap::create(name.as_str(), &Config { thread_slots: 2, ..Config::with_capacity(64 << 20) }).unwrap();
    let mine = heap.attach().unwrap();
    let ready = Pipe::new();
    let mut child = fork_holder(name.as_str(), &ready);
    let slot = ready.recv_u64(CHILD_DEADLINE).expect("holder never became ready") as u32;
    assert_ne!(slot, mine.slot());
    assert_eq!(heap.dead_slots(), Vec::<u32>::new(), "a live holder is not dead");

    nix::sys::signal::kill(child.pid, Signal::SIGKILL).unwrap();
    assert_eq!(child.killed_by(), Signal::SIGKILL);
    assert_eq!(heap.dead_slots(), vec![slot]);
    let r = assert_clean(&heap);
    assert_eq!(r.leased_slots, 2);
    assert!(r.in_flight.is_empty(), "the holder was idle when killed: {r}");

    let adopted = heap.attach().unwrap();
    assert_eq!(adopted.slot(), slot);
    let report = adopted.recovery().expect("the slot was adopted, not attached free");
    assert_eq!(report.redo, None, "{report}");
    assert!(report.rebuilt.owned > 0, "the holder's slabs are the adopter's now: {report}");
    assert_eq!(heap.attach().map(|t| t.slot()), Err(AttachError::SlotsExhausted { slots: 2, dead: 0 }));
    drop(adopted);
    drop(mine);
    let r = assert_clean(&heap);
    assert_eq!(live_blocks(&r), 10, "the dead holder's 10 blocks stay allocated (it never freed them)");
}

#[test]
fn a_killed_holder_is_dead_before_its_parent_reaps_it() {
    let _serial = serial();
    let name = HeapName::new("zombie");
    let heap = Heap::create(name.as_str(), &Config { thread_slots: 2, ..Config::with_capacity(64 << 20) }).unwrap();
    let ready = Pipe::new();
    let mut child = fork_holder(name.as_str(), &ready);
    let slot = ready.recv_u64(CHILD_DEADLINE).expect("holder never became ready") as u32;
    nix::sys::signal::kill(child.pid, Signal::SIGKILL).unwrap();
    // Wait until the child has died, without reaping it (it stays a zombie).
    let status = nix::sys::wait::waitid(
        nix::sys::wait::Id::Pid(child.pid),
        nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
    )
    .unwrap();
    assert!(matches!(status, nix::sys::wait::WaitStatus::Signaled(_, Signal::SIGKILL, _)), "{status:?}");
    // A zombie has released every mapping and will never touch the heap again.
    let dead = heap.dead_slots();
    assert_eq!(child.killed_by(), Signal::SIGKILL);
    assert_eq!(dead, vec![slot], "holder dead (zombie) but its slot is not reported dead");
    assert_clean(&heap);
}

#[test]
fn a_forked_child_dropping_an_inherited_handle_leaves_the_parents_slot_alone() {
    let _serial = serial();
    let name = HeapName::new("inherited");
    let heap = Heap::create(name.as_str(), &Config::with_capacity(64 << 20)).unwrap();
    let t = heap.attach().unwrap();
    let kept = alloc_n(&t, 64, 100);
    let before = assert_clean(&heap);
    assert_eq!(before.leased_slots, 1);
    let mut inherited = Some(t);
    let inherited_ref = &mut inherited;

    // The child's copy of the handle names the parent's slot; dropping it must neither release
    // that slot nor push the parent's cached empty slabs to the global list.
    fork_child("dropper", || {
        drop(inherited_ref.take());
        let heap = Heap::open(name.as_str()).ctx("open")?;
        let r = heap.check();
        ensure!(r.is_clean() && r.leased_slots == 1, "after the child's drop: {r}");
        ensure!(small_states(&r) == small_states(&before), "after the child's drop: {r}");
        Ok(())
    })
    .succeeds();

    let t = inherited.take().expect("the parent still has its handle");
    let r = assert_clean(&heap);
    assert_eq!(r.leased_slots, 1, "{r}");
    assert_eq!(small_states(&r), small_states(&before), "{r}");
    assert_eq!(heap.stats().counters.global_pushes, 0);
    for p in kept {
        t.free(p).unwrap();
    }
    let more = alloc_n(&t, 64, 100);
    for p in more {
        t.free(p).unwrap();
    }
    drop(t);
    let r = assert_clean(&heap);
    assert_eq!((r.leased_slots, live_blocks(&r)), (0, 0), "{r}");
}

/// Reads a `u64` at `addr` in a way the compiler must emit.
///
/// # Safety
/// Meant to fault: only call in a child that is expected to die.
unsafe fn touch(addr: usize) -> u64 {
    // SAFETY: deliberately not; the caller expects SIGSEGV.
    unsafe { std::ptr::read_volatile(addr as *const u64) }
}

#[test]
fn a_fault_outside_any_heap_still_crashes() {
    let _serial = serial();
    let name = HeapName::new("stray");
    let heap = Heap::create(name.as_str(), &Config::with_capacity(64 << 20)).unwrap();

    // A PROT_NONE page of the child's own, and a near-null address.
    let page = || {
        // SAFETY: a fresh anonymous PROT_NONE mapping, never accessed legitimately.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    };
    for (what, addr) in [("PROT_NONE page", page()), ("address 8", 8)] {
        let mut child = fork_code(what, || {
            // Opening a heap registers it with (and installs) the growth handler.
            let _heap = Heap::open(name.as_str()).expect("open");
            // SAFETY: expected to kill this process.
            let v = unsafe { touch(addr) };
            common::raw_eprint(&format!("read {v:#x} from {addr:#x} and survived\n"));
            0
        });
        assert_eq!(child.killed_by(), Signal::SIGSEGV, "{what}");
    }
    assert_clean(&heap);
}

#[test]
fn a_fault_beyond_the_heap_length_still_crashes() {
    let _serial = serial();
    let name = HeapName::new("beyond");
    let heap = Heap::create(name.as_str(), &Config::with_capacity(256 << 20)).unwrap();
    let mut child = fork_code("beyond", || {
        let (heap, t) = open_attached(name.as_str()).expect("open");
        let p = t.alloc(8).expect("alloc");
        // Inside the small data reservation (256 MiB) but far beyond its length (8 slabs).
        let beyond = p.as_ptr() as usize + (64 << 20);
        let off = heap.offset_of(beyond as *const u8).expect("inside the reservation");
        assert!(heap.pointer::<u64>(off.cast()).is_ok(), "offset checks bound the span, not the length");
        let r = heap.check();
        assert!(r.bracket(Bracket::Small).length < 64, "{r}");
        // SAFETY: expected to kill this process.
        let v = unsafe { touch(beyond) };
        common::raw_eprint(&format!("read {v:#x} beyond the heap length and survived\n"));
        0
    });
    assert_eq!(child.killed_by(), Signal::SIGSEGV);
    let r = assert_clean(&heap);
    assert_eq!(r.leased_slots, 1, "the dead child still holds its slot: {r}");
}

/// A single-producer single-consumer ring of `u64` messages inside one heap block:
/// word 0 = head (consumer), word 8 = tail (producer), words 16.. = slots.
struct Ring<'a> {
    head: &'a AtomicU64,
    tail: &'a AtomicU64,
    slots: &'a [AtomicU64],
}

const RING_BYTES: usize = 8192;
const RING_CAP: u64 = (RING_BYTES / 8 - 16) as u64;

impl<'a> Ring<'a> {
    /// # Safety
    /// `p` is a zeroed block of [`RING_BYTES`] that outlives `'a` and is used only as a ring.
    unsafe fn at(p: NonNull<u8>) -> Self {
        let w = p.as_ptr().cast::<AtomicU64>();
        // SAFETY: inside the block, 8-aligned; AtomicU64 has the layout of u64.
        unsafe { Ring { head: &*w, tail: &*w.add(8), slots: std::slice::from_raw_parts(w.add(16), RING_CAP as usize) } }
    }

    fn push(&self, msg: u64) -> bool {
        // Relaxed: only this producer writes the tail.
        let tail = self.tail.load(Ordering::Relaxed);
        // Acquire: the consumer is done with the slot it released.
        if tail - self.head.load(Ordering::Acquire) >= RING_CAP {
            return false;
        }
        self.slots[(tail % RING_CAP) as usize].store(msg, Ordering::Relaxed);
        // Release: publishes the slot and the block's contents.
        self.tail.store(tail + 1, Ordering::Release);
        true
    }

    fn pop(&self) -> Option<u64> {
        let head = self.head.load(Ordering::Relaxed);
        // Acquire: pairs with the producer's Release.
        if head == self.tail.load(Ordering::Acquire) {
            return None;
        }
        let msg = self.slots[(head % RING_CAP) as usize].load(Ordering::Relaxed);
        self.head.store(head + 1, Ordering::Release);
        Some(msg)
    }
}

const PROCESSES: usize = 4;
const THREADS: usize = 2;
const WORKERS: usize = PROCESSES * THREADS;
const MESSAGES: u64 = 20_000;
const SEED: u64 = 0xc0ffee;
/// Root a failing worker sets to stop the others.
const ABORT_ROOT: usize = 62;

/// Worker `w`: sends [`MESSAGES`] fresh blocks to worker `w + THREADS` (a thread of the next
/// process) and frees the [`MESSAGES`] blocks worker `w - THREADS` sends it; also keeps and frees
/// some blocks of its own. Every message is `offset | size << 40`.
fn worker(heap: &Heap, rings: &[u64], w: usize) -> Result<(), String> {
    let result = exchange(heap, rings, w);
    if result.is_err() {
        // Stop every other worker: a lost sender would leave its consumer waiting forever.
        root(heap, ABORT_ROOT).store(1, Ordering::SeqCst);
    }
    result
}

/// Byte offset of the last whole word of a `size`-byte request (0 for 8..16 bytes).
fn last_word(size: usize) -> usize {
    (size / 8 - 1) * 8
}

/// What the sender writes into the last word (the first word, when they coincide).
fn end_mark(off: u64, size: usize, salt: u64) -> u64 {
    if last_word(size) == 0 {
        pattern(off, salt)
    } else {
        pattern(off + 1, salt)
    }
}

fn exchange(heap: &Heap, rings: &[u64], w: usize) -> Result<(), String> {
    let t = heap.attach().ctx("attach")?;
    // SAFETY: the parent zeroed the ring blocks and frees them only after every child exits.
    let inbox = unsafe { Ring::at(ptr(heap, rings[w])?) };
    // SAFETY: as above.
    let outbox = unsafe { Ring::at(ptr(heap, rings[(w + THREADS) % WORKERS])?) };
    let mut rng = Rng::new(SEED + w as u64);
    let mut kept: Vec<NonNull<u8>> = Vec::new();
    let (mut sent, mut received) = (0u64, 0u64);
    let salt = |sender: usize| SEED ^ sender as u64;
    let sender = (w + WORKERS - THREADS) % WORKERS;
    while sent < MESSAGES || received < MESSAGES {
        ensure!(root(heap, ABORT_ROOT).load(Ordering::Relaxed) == 0, "worker {w}: stopped, another worker failed");
        let mut progressed = false;
        if sent < MESSAGES {
            let size = match rng.below(20) {
                0 => 16_385 + rng.below(128 << 10),
                1..=5 => 1_025 + rng.below(15 << 10),
                _ => 8 + rng.below(1017),
            } as usize;
            let p = t.alloc(size).ctx("alloc")?;
            let off = offset(heap, p);
            let last = last_word(size);
            // SAFETY: a fresh block of at least `size` ≥ 8 bytes.
            unsafe {
                p.as_ptr().cast::<u64>().write(pattern(off, salt(w)));
                p.as_ptr().add(last).cast::<u64>().write(end_mark(off, size, salt(w)));
            }
            if outbox.push(off | (size as u64) << 40) {
                sent += 1;
                progressed = true;
            } else {
                t.free(p).ctx("free of an unsent block")?;
            }
            if rng.below(4) == 0 {
                kept.push(t.alloc(8 + rng.below(2000) as usize).ctx("alloc kept")?);
            }
        }
        if let Some(msg) = inbox.pop() {
            let (off, size) = (msg & ((1 << 40) - 1), (msg >> 40) as usize);
            let p = ptr(heap, off)?;
            let last = last_word(size);
            // SAFETY: the sender allocated `size` bytes there and wrote both words before
            // publishing the message.
            let (first, end) = unsafe { (p.as_ptr().cast::<u64>().read(), p.as_ptr().add(last).cast::<u64>().read()) };
            ensure!(
                first == pattern(off, salt(sender)) && end == end_mark(off, size, salt(sender)),
                "worker {w}: block {off:#x} from worker {sender} overwritten"
            );
            t.free(p).ctx("remote free")?;
            received += 1;
            progressed = true;
        }
        if kept.len() > 64 {
            let i = rng.below(kept.len() as u64) as usize;
            t.free(kept.swap_remove(i)).ctx("free kept")?;
        }
        if !progressed {
            std::thread::yield_now();
        }
    }
    for p in kept {
        t.free(p).ctx("free kept")?;
    }
    Ok(())
}

#[test]
fn many_processes_alloc_and_free_remotely_without_leaks() {
    // A fixed-seed stress run, not a benchmark: nothing here is timed.
    let _serial = serial();
    let name = HeapName::new("stress");
    let config = Config { thread_slots: 64, ..Config::with_capacity(1 << 30) };
    let heap = Heap::create(name.as_str(), &config).unwrap();
    let t = heap.attach().unwrap();
    let ring_blocks: Vec<NonNull<u8>> = (0..WORKERS).map(|_| t.alloc_zeroed(RING_BYTES).unwrap()).collect();
    let rings: Vec<u64> = ring_blocks.iter().map(|&p| offset(&heap, p)).collect();

    let go = Pipe::new();
    let mut children: Vec<_> = (0..PROCESSES)
        .map(|proc| {
            let (go, rings, name) = (&go, &rings, &name);
            fork_child(&format!("stress process {proc}"), move || {
                let mut b = [0u8];
                ensure!(go.recv(&mut b, CHILD_DEADLINE), "no start signal");
                let heap = Heap::open(name.as_str()).ctx("open")?;
                std::thread::scope(|s| {
                    let handles: Vec<_> = (0..THREADS)
                        .map(|k| {
                            s.spawn({
                                let heap = &heap;
                                move || worker(heap, rings, proc * THREADS + k)
                            })
                        })
                        .collect();
                    handles.into_iter().try_for_each(|h| h.join().map_err(|_| "worker panicked".to_string())?)
                })
            })
        })
        .collect();
    go.send(&[0u8; PROCESSES]);
    for c in &mut children {
        c.succeeds();
    }

    for &p in &ring_blocks {
        // SAFETY: a ring block; its producers and consumer have exited.
        let ring = unsafe { Ring::at(p) };
        assert_eq!((ring.head.load(Ordering::SeqCst), ring.tail.load(Ordering::SeqCst)), (MESSAGES, MESSAGES));
        t.free(p).unwrap();
    }
    drop(t);
    let r = assert_clean(&heap);
    for b in Bracket::ALL {
        assert_eq!(r.bracket(b).live_blocks(), 0, "{} bracket leaks: {r}", b.name());
    }
    assert_eq!(r.leased_slots, 0, "{r}");
    let c = heap.stats().counters;
    assert!(c.remote_frees >= WORKERS as u64 * MESSAGES, "{c:?}");
}
