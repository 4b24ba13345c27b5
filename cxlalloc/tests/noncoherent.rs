//! The allocator under the non-coherence simulator (docs/design.md §9.3; feature `noncoherent-sim`):
//! each forked child is a simulated host whose records and descriptors live in a private
//! write-back cache, so only what the SWcc protocol writes back reaches the other hosts.
//!
//! Hosts run a seeded random workload against a model of their live blocks: they allocate
//! blocks of every small and large class, fill them with a pattern, hand a random share to the
//! next host (which checks the pattern and frees them remotely: T10/T8 claims across hosts),
//! free others locally, and with no slab cache every empty slab crosses the global list
//! (T9/T2) between hosts. At the end the parent — which reads memory, not any host's cache —
//! runs the checker: clean, and no block live. A host that got a block another host holds
//! finds its pattern overwritten.
//!
//! With one write-back removed from the protocol (`sim::skip`), the same run must fail: that
//! is what shows the simulator can catch a protocol bug.

mod common;

use std::ptr::NonNull;
use std::time::Duration;

use common::{fork_child, pattern, serial, Ctx, Device, HeapName, Pipe, Rng};
use cxlalloc::internal::{sim, Site};
use cxlalloc::Bracket;
use cxlalloc::{Coherence, Config, FreeError, Heap, Offset};

const HOSTS: usize = 3;
const ROUNDS: usize = 60;
const DEADLINE: Duration = Duration::from_secs(5);

fn config(coherence: Coherence) -> Config {
    Config {
        coherence,
        huge_capacity: 0,
        thread_slots: 8,
        cache_local: 0,
        small_batch: 1,
        ..Config::with_capacity(64 << 20)
    }
}

fn size(rng: &mut Rng) -> usize {
    match rng.below(8) {
        0..=4 => 8 + rng.below(1016) as usize,
        5 | 6 => 1025 + rng.below(15 << 10) as usize,
        _ => (16 << 10) + rng.below(200 << 10) as usize,
    }
}

/// Offset of the block's last whole word (its first word too when the block has only one).
fn last_word(size: usize) -> usize {
    (size & !7).max(8) - 8
}

/// Writes the block's pattern (of its heap offset `off`) into its first and last words.
fn fill(p: NonNull<u8>, off: u64, size: usize, salt: u64) {
    // SAFETY: a live block of at least `size` ≥ 8 bytes, 8-aligned.
    unsafe {
        (p.as_ptr().add(last_word(size)) as *mut u64).write(pattern(off, salt ^ 1));
        (p.as_ptr() as *mut u64).write(pattern(off, salt));
    }
}

fn intact(p: NonNull<u8>, off: u64, size: usize, salt: u64) -> bool {
    let last = if last_word(size) == 0 { pattern(off, salt) } else { pattern(off, salt ^ 1) };
    // SAFETY: as for `fill`.
    unsafe {
        (p.as_ptr() as *const u64).read() == pattern(off, salt)
            && (p.as_ptr().add(last_word(size)) as *const u64).read() == last
    }
}

/// Which host's pattern a block holds (a diagnostic for a failed check).
fn whose(p: NonNull<u8>, off: u64, size: usize) -> String {
    // SAFETY: as for `fill`.
    let (first, last) =
        unsafe { ((p.as_ptr() as *const u64).read(), (p.as_ptr().add(last_word(size)) as *const u64).read()) };
    let owner = |w: u64, x: u64| (0..HOSTS).find(|&h| w == pattern(off, (0x51ed + h as u64) ^ x));
    format!(
        "first word from host {:?}, last word from host {:?} ({first:#x}, {last:#x})",
        owner(first, 0),
        owner(last, 1)
    )
}

/// One simulated host: `ROUNDS` rounds of allocate / hand over / free.
fn host(name: &str, me: usize, to_next: &Pipe, from_prev: &Pipe, skip: Option<Site>) -> Result<(), String> {
    sim::enable();
    if let Some(site) = skip {
        sim::skip(site);
    }
    let heap = Heap::open(name).ctx("open")?;
    let t = heap.attach().ctx("attach")?;
    let mut rng = Rng::new(me as u64 * 7919 + 1);
    let mut live: Vec<(NonNull<u8>, u64, usize)> = Vec::new();
    let salt = |h: usize| 0x51ed + h as u64;
    let prev = (me + HOSTS - 1) % HOSTS;
    for round in 0..ROUNDS {
        for _ in 0..8 {
            let n = size(&mut rng);
            let p = t.alloc(n).ctx("alloc")?;
            let off = heap.offset_of(p.as_ptr()).ctx("offset")?.raw();
            fill(p, off, n, salt(me));
            live.push((p, off, n));
        }
        // Hand a random share over; the size travels with the offset.
        let mut batch = Vec::new();
        for _ in 0..rng.below(5) {
            if live.is_empty() {
                break;
            }
            let (_, off, n) = live.swap_remove(rng.below(live.len() as u64) as usize);
            batch.push((off, n as u64));
        }
        to_next.send_u64(batch.len() as u64);
        for (off, n) in batch {
            to_next.send_u64(off);
            to_next.send_u64(n);
        }
        let count = from_prev.recv_u64(DEADLINE).ctx("batch count")?;
        for _ in 0..count {
            let off = from_prev.recv_u64(DEADLINE).ctx("offset")?;
            let n = from_prev.recv_u64(DEADLINE).ctx("size")? as usize;
            let p = heap.pointer(Offset::<u8>::from_raw(off)).ctx("pointer")?;
            ensure!(
                intact(p, off, n, salt(prev)),
                "round {round}: block {off:#x} from host {prev} overwritten: {}",
                whose(p, off, n)
            );
            t.free(p).ctx("remote free")?;
        }
        for _ in 0..rng.below(9) {
            if live.is_empty() {
                break;
            }
            let (p, off, n) = live.swap_remove(rng.below(live.len() as u64) as usize);
            ensure!(
                intact(p, off, n, salt(me)),
                "round {round}: own block {off:#x} ({n} bytes) overwritten: {}",
                whose(p, off, n)
            );
            t.free(p).ctx("local free")?;
        }
    }
    for (p, off, n) in live {
        ensure!(intact(p, off, n, salt(me)), "own block {off:#x} overwritten at the end: {}", whose(p, off, n));
        t.free(p).ctx("final free")?;
    }
    Ok(())
}

/// Runs the hosts on a fresh heap of `model`; `Err` describes how the run went wrong.
fn run(model: Coherence, skip: Option<Site>) -> Result<(), String> {
    let _serial = serial();
    let name = HeapName::new("sim");
    let heap = Heap::create(name.as_str(), &config(model)).ctx("create")?;
    let device = (model == Coherence::NoHwcc).then(|| Device::serve(name.as_str(), Duration::ZERO));
    let pipes: Vec<Pipe> = (0..HOSTS).map(|_| Pipe::new()).collect();
    let mut children: Vec<_> = (0..HOSTS)
        .map(|i| {
            let (name, to_next, from_prev) = (name.as_str(), &pipes[(i + 1) % HOSTS], &pipes[i]);
            fork_child("simulated host", move || host(name, i, to_next, from_prev, skip))
        })
        .collect();
    let failed = children.iter_mut().map(|c| c.exit_code()).filter(|&code| code != 0).count();
    drop(device);
    if failed > 0 {
        return Err(format!("{failed} of {HOSTS} hosts failed"));
    }
    let report = heap.check();
    if !report.is_clean() {
        return Err(format!("checker: {report}"));
    }
    let live: u64 = Bracket::ALL.iter().map(|&b| report.bracket(b).live_blocks()).sum();
    if live != 0 {
        return Err(format!("{live} blocks live after every host freed everything"));
    }
    Ok(())
}

#[test]
fn limited_coherence_hosts_keep_the_heap_consistent() {
    run(Coherence::Limited, None).unwrap();
}

#[test]
fn no_hwcc_hosts_keep_the_heap_consistent() {
    run(Coherence::NoHwcc, None).unwrap();
}

/// T3 without its write-back: the head line of a freshly sized slab stays in its owner's
/// cache, so another host locating one of its blocks reads a slab with no class.
#[test]
fn the_simulator_catches_a_sizing_without_its_write_back() {
    for model in [Coherence::Limited, Coherence::NoHwcc] {
        let r = run(model, Some(Site::Sized));
        assert!(r.is_err(), "{model:?}: a run without the sizing's write-back passed");
        eprintln!("{model:?}: caught: {}", r.unwrap_err());
    }
}

/// A heap of `model` (served by a software mCAS device without HWcc) for scripted hosts.
fn scripted_heap(model: Coherence) -> (HeapName, Heap, Option<Device>) {
    let name = HeapName::new("simscript");
    let heap = Heap::create(name.as_str(), &config(model)).unwrap();
    let device = (model == Coherence::NoHwcc).then(|| Device::serve(name.as_str(), Duration::ZERO));
    (name, heap, device)
}

/// Runs two scripted hosts on `heap` (`a` talks to `b` through `ab`, `b` to `a` through `ba`),
/// then asks the checker, which reads memory: `Err` says what went wrong.
fn two_hosts(
    heap: &Heap,
    name: &str,
    a: impl FnOnce(&str, &Pipe, &Pipe) -> Result<(), String>,
    b: impl FnOnce(&str, &Pipe, &Pipe) -> Result<(), String>,
) -> Result<(), String> {
    let (ab, ba) = (Pipe::new(), Pipe::new());
    let mut ca = fork_child("host a", || {
        sim::enable();
        a(name, &ab, &ba)
    });
    let mut cb = fork_child("host b", || {
        sim::enable();
        b(name, &ba, &ab)
    });
    let (ra, rb) = (ca.exit_code(), cb.exit_code());
    ensure!(ra == 0 && rb == 0, "host a exited {ra}, host b exited {rb}");
    let report = heap.check();
    ensure!(report.is_clean(), "checker: {report}");
    let live: u64 = Bracket::ALL.iter().map(|&b| report.bracket(b).live_blocks()).sum();
    ensure!(live == 0, "{live} blocks live after both hosts freed everything");
    Ok(())
}

fn block_at(heap: &Heap, off: u64) -> Result<NonNull<u8>, String> {
    heap.pointer(Offset::<u8>::from_raw(off)).ctx("pointer")
}

/// Hole 1 of the limited and no-HWcc models: host O fills a slab (T4: Detached) and looks at
/// one of its blocks, which leaves the slab's head line in its cache naming O as owner. Host R
/// frees every block of the slab remotely, claims it (T8) and re-sizes it for a smaller class;
/// then O frees a block of R's. O's copy still says "owner == O": the free must not be taken
/// for a local one, and O's next allocations must not hand out R's live block.
fn old_owner_frees_into_a_claimed_and_resized_slab(model: Coherence) -> Result<(), String> {
    let _serial = serial();
    let (name, heap, _device) = scripted_heap(model);
    let o = |name: &str, to_r: &Pipe, from_r: &Pipe| -> Result<(), String> {
        let heap = Heap::open(name).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        // Fill the first slab of the 1 KiB class (small slabs are 32 KiB, aligned).
        let mut slab = vec![t.alloc(1024).ctx("alloc")?];
        let next = loop {
            let p = t.alloc(1024).ctx("alloc")?;
            if p.as_ptr() as usize >> 15 != slab[0].as_ptr() as usize >> 15 {
                break p;
            }
            slab.push(p);
        };
        // The slab is Detached; reading a block's size caches its head line.
        ensure!(t.usable_size(slab[0]).ctx("usable size")? == 1024, "usable size");
        to_r.send_u64(slab.len() as u64);
        for p in &slab {
            to_r.send_u64(heap.offset_of(p.as_ptr()).ctx("offset")?.raw());
        }
        let y = from_r.recv_u64(DEADLINE).ctx("R's block")?;
        t.free(block_at(&heap, y)?).ctx("free of R's block")?;
        // Two slabs' worth: the stale path would have put the slab back on O's sized list.
        let mut mine = vec![next];
        for _ in 0..2 * slab.len() {
            let p = t.alloc(1024).ctx("alloc")?;
            let off = heap.offset_of(p.as_ptr()).ctx("offset")?.raw();
            ensure!(off + 1024 <= y || off >= y + 512, "O was handed {off:#x}, inside R's live block {y:#x}");
            mine.push(p);
        }
        for p in mine {
            t.free(p).ctx("free")?;
        }
        to_r.send_u64(1);
        Ok(())
    };
    let r = |name: &str, to_o: &Pipe, from_o: &Pipe| -> Result<(), String> {
        let heap = Heap::open(name).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        let n = from_o.recv_u64(DEADLINE).ctx("count")?;
        let mut first = u64::MAX;
        for _ in 0..n {
            let off = from_o.recv_u64(DEADLINE).ctx("offset")?;
            first = first.min(off);
            t.free(block_at(&heap, off)?).ctx("remote free")?;
        }
        // Detaching applies the batch: the last subtraction claims the slab (T8), and the
        // detach gives it to the global list, where the next refill takes it back.
        drop(t);
        let t = heap.attach().ctx("attach")?;
        let y = t.alloc(512).ctx("alloc")?;
        let off = heap.offset_of(y.as_ptr()).ctx("offset")?.raw();
        ensure!(off == first, "R's block {off:#x} is not the claimed slab's first ({first:#x})");
        fill(y, off, 512, 0x5151);
        to_o.send_u64(off);
        // O frees it (remotely: the slab is R's now) and allocates.
        from_o.recv_u64(DEADLINE).ctx("O done")?;
        Ok(())
    };
    two_hosts(&heap, name.as_str(), o, r)
}

/// Runs `scenario` in both reduced models and fails with every model's error.
fn in_both_models(scenario: impl Fn(Coherence) -> Result<(), String>) {
    let errors: Vec<String> = [Coherence::Limited, Coherence::NoHwcc]
        .into_iter()
        .filter_map(|model| scenario(model).err().map(|e| format!("{model:?}: {e}")))
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn a_detached_slab_claimed_by_another_host_is_not_freed_into_by_its_old_owner() {
    in_both_models(old_owner_frees_into_a_claimed_and_resized_slab);
}

/// Hole 2 of the limited and no-HWcc models: a non-owner cannot see the owner's bitset or
/// cached word, yet must refuse a block the owner has freed or never handed out (and so must
/// `usable_size`, `realloc` and `free_from`), without counting it against the slab.
fn non_owner_refuses_blocks_the_owner_holds_free(model: Coherence) -> Result<(), String> {
    let _serial = serial();
    let (name, heap, _device) = scripted_heap(model);
    let o = |name: &str, to_r: &Pipe, from_r: &Pipe| -> Result<(), String> {
        let heap = Heap::open(name).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        let blocks: Vec<_> = (0..4).map(|_| t.alloc(64)).collect::<Result<_, _>>().ctx("alloc")?;
        let offs: Vec<u64> = blocks
            .iter()
            .map(|p| heap.offset_of(p.as_ptr()).map(|o| o.raw()))
            .collect::<Result<_, _>>()
            .ctx("offset")?;
        // Block 1 freed locally (it sits in O's cached word), block 3 still allocated, and the
        // block after it never handed out.
        t.free(blocks[1]).ctx("local free")?;
        for off in [offs[1], offs[3] + 64, offs[3]] {
            to_r.send_u64(off);
        }
        from_r.recv_u64(DEADLINE).ctx("R done")?;
        // Had R's refused frees been counted, the slab's counter would be short and these
        // frees (or the checker) would find it.
        for p in [blocks[0], blocks[2]] {
            t.free(p).ctx("local free")?;
        }
        to_r.send_u64(1);
        Ok(())
    };
    let r = |name: &str, to_o: &Pipe, from_o: &Pipe| -> Result<(), String> {
        let heap = Heap::open(name).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        let freed = block_at(&heap, from_o.recv_u64(DEADLINE).ctx("offset")?)?;
        let never = block_at(&heap, from_o.recv_u64(DEADLINE).ctx("offset")?)?;
        let live = block_at(&heap, from_o.recv_u64(DEADLINE).ctx("offset")?)?;
        for (what, p) in [("freed", freed), ("never allocated", never)] {
            ensure!(t.usable_size(p).is_err(), "usable_size of a {what} block answered Ok");
            ensure!(t.realloc(p, 200).is_err(), "realloc of a {what} block answered Ok");
            let dest = heap.root(0).ctx("root")?;
            dest.store(heap.offset_of(p.as_ptr()).ctx("offset")?.raw(), std::sync::atomic::Ordering::Release);
            ensure!(t.free_from(dest).is_err(), "free_from of a {what} block answered Ok");
            dest.store(0, std::sync::atomic::Ordering::Release);
            let r = t.free(p);
            ensure!(r == Err(FreeError::DoubleFree), "free of a {what} block: {r:?}");
        }
        ensure!(t.usable_size(live).ctx("usable size of a live block")? == 64, "usable size");
        t.free(live).ctx("free of a live block")?;
        // Detaching applies the batch of remote frees.
        drop(t);
        to_o.send_u64(1);
        from_o.recv_u64(DEADLINE).ctx("O done")?;
        Ok(())
    };
    two_hosts(&heap, name.as_str(), o, r)
}

#[test]
fn a_non_owner_refuses_blocks_the_owner_holds_free() {
    in_both_models(non_owner_refuses_blocks_the_owner_holds_free);
}
