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
use cxlalloc::{Coherence, Config, FreeError, Heap, Offset, ThreadHandle};

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
fn whose(p: NonNull<u8>, off: u64, tagged: usize) -> String {
    let size = tagged & SIZE;
    // SAFETY: as for `fill`.
    let (first, last) =
        unsafe { ((p.as_ptr() as *const u64).read(), (p.as_ptr().add(last_word(size)) as *const u64).read()) };
    let owner = |w: u64, x: u64| (0..HOSTS).find(|&h| w == pattern(off, salt(h, tagged) ^ x));
    format!(
        "first word from host {:?}, last word from host {:?} ({first:#x}, {last:#x})",
        owner(first, 0),
        owner(last, 1)
    )
}

/// Pipes between the hosts of one run: `data[from][to]` carries blocks, `ctl[to]` the
/// control messages of the slot reshuffles and of the end. Each host closes the ends it does
/// not use, and the parent all of them once the hosts are forked, so that a host that fails
/// ends its peers' waits at once (end of file) instead of at the deadline.
struct Net {
    data: Vec<Vec<Pipe>>,
    ctl: Vec<Pipe>,
}

/// Control messages.
const DETACHED: u64 = 1;
const TOKEN: u64 = 2;
const DYING: u64 = 3;
const FINISHED: u64 = 4;
const ADOPTED: u64 = 5;

impl Net {
    fn new(hosts: usize) -> Self {
        Net {
            data: (0..hosts).map(|_| (0..hosts).map(|_| Pipe::new()).collect()).collect(),
            ctl: (0..hosts).map(|_| Pipe::new()).collect(),
        }
    }

    /// In host `me`'s process: closes every end that is not `me`'s.
    fn keep_only(&self, me: usize) {
        let close = |fd: &std::os::fd::OwnedFd| {
            // SAFETY: the fd belongs to this forked child's copy of the parent's pipes, which
            // the child never drops (it `_exit`s), so closing it here closes it once.
            unsafe { libc::close(std::os::fd::AsRawFd::as_raw_fd(fd)) };
        };
        for (from, row) in self.data.iter().enumerate() {
            for (to, pipe) in row.iter().enumerate() {
                if from != me {
                    close(&pipe.write);
                }
                if to != me {
                    close(&pipe.read);
                }
            }
        }
        for (to, pipe) in self.ctl.iter().enumerate() {
            if to != me {
                close(&pipe.read);
            }
        }
    }

    /// Waits for control message `want` on `me`'s pipe, counting the others into `seen`.
    fn wait(&self, me: usize, want: u64, seen: &mut Vec<u64>) -> Result<(), String> {
        if let Some(i) = seen.iter().position(|&m| m == want) {
            seen.swap_remove(i);
            return Ok(());
        }
        loop {
            let m = self.ctl[me].recv_u64(DEADLINE).ctx("control message")?;
            if m == want {
                return Ok(());
            }
            seen.push(m);
        }
    }
}

/// What one simulated host runs.
type HostBody<'a> = Box<dyn FnOnce(&Net) -> Result<(), String> + 'a>;

/// Forks one simulated host per body (body `i` is host `i`, removing `skip` from its
/// protocol), waits for them, then asks the checker, which reads memory: clean, and no block
/// live. `Err` says what went wrong.
fn run_hosts(heap: &Heap, net: Net, skip: Option<Site>, bodies: Vec<HostBody<'_>>) -> Result<(), String> {
    let n = bodies.len();
    let mut children: Vec<_> = bodies
        .into_iter()
        .enumerate()
        .map(|(me, body)| {
            let net = &net;
            fork_child("simulated host", move || {
                net.keep_only(me);
                sim::enable();
                if let Some(site) = skip {
                    sim::skip(site);
                }
                body(net)
            })
        })
        .collect();
    drop(net);
    let failed: Vec<usize> = (0..n).filter(|&i| children[i].exit_code() != 0).collect();
    ensure!(failed.is_empty(), "hosts {failed:?} of {n} failed");
    let report = heap.check();
    ensure!(report.is_clean(), "checker: {report}");
    let live: u64 = Bracket::ALL.iter().map(|&b| report.bracket(b).live_blocks()).sum();
    ensure!(live == 0, "{live} blocks live after every host freed everything");
    Ok(())
}

/// Rounds between two reshuffles of the slots among the hosts.
const CYCLE: usize = 8;

/// What one host has seen of each slab's sizings: a slab's generation grows with every
/// sizing, so a host never sees it go back, nor one sizing with two block sizes. (A slab
/// popped or claimed through a stale copy of its descriptor repeats a generation: the free-
/// block mark repeats, and a detectable free's recovery could free a later sizing's block.)
#[derive(Default)]
struct Sizings(std::collections::HashMap<(Bracket, u32), (u32, u32)>);

impl Sizings {
    fn observe(&mut self, t: &ThreadHandle, p: NonNull<u8>, off: u64) -> Result<(), String> {
        let Some((b, slab, generation, size)) = sim::sizing_of(t, p) else { return Ok(()) };
        if let Some(&(g, s)) = self.0.get(&(b, slab)) {
            ensure!(generation >= g, "{b:?} slab {slab} (block {off:#x}): generation {generation} after {g}");
            ensure!(
                generation > g || size == s,
                "{b:?} slab {slab} (block {off:#x}): generation {g} sized for {s} and {size} bytes"
            );
        }
        self.0.insert((b, slab), (generation, size));
        Ok(())
    }
}

/// The random workload's blocks travel as `(pointer, offset, tagged)`: `tagged` is the
/// requested size in its low half and the allocation's serial number in its high half, so
/// that every allocation's pattern differs from the last one at the same address (the
/// simulator tells a dirty line by its bytes: a store of the bytes a stale line holds already
/// would go unnoticed).
const SIZE: usize = 0xffff_ffff;

fn salt(h: usize, tagged: usize) -> u64 {
    (0x51ed + h as u64) ^ ((tagged >> 32) as u64) << 12
}

/// Frees `p` (a block of `n` bytes at `off` holding `from`'s pattern) for the workload: most
/// often plainly, sometimes as a detectable free through this host's root word. (Not freed
/// twice: another host may have been handed the same address since; the scripted scenarios
/// check refusals.)
fn free_checked(
    heap: &Heap,
    t: &ThreadHandle,
    me: usize,
    rng: &mut Rng,
    block: (NonNull<u8>, u64, usize),
    from: usize,
) -> Result<(), String> {
    let (p, off, tagged) = block;
    let n = tagged & SIZE;
    if from != me {
        // The application's side of receiving a block: drop stale copies before reading it.
        t.invalidate(p, n).ctx("invalidate a received block")?;
    }
    ensure!(
        intact(p, off, n, salt(from, tagged)),
        "block {off:#x} ({n} bytes) from host {from} overwritten: {}",
        whose(p, off, tagged)
    );
    if from != me {
        // The receiver uses the block before freeing it: its last line is dirty here when
        // the free starts, as an application's would be.
        // SAFETY: a live block of at least `n` ≥ 8 bytes, 8-aligned, ours until freed.
        unsafe { (p.as_ptr().add(last_word(n)) as *mut u64).write(pattern(off, salt(me, tagged) ^ 2)) };
    }
    if rng.below(4) == 0 {
        let root = heap.root(me).ctx("root")?;
        root.store(off, std::sync::atomic::Ordering::Release);
        t.free_from(root).ctx("detectable free")?;
        ensure!(root.load(std::sync::atomic::Ordering::Acquire) == 0, "free_from left its word set");
    } else {
        t.free(p).ctx(&format!("free of block {off:#x} ({n} bytes) from host {from} in host {me}"))?;
    }
    Ok(())
}

/// Releases this host's slot and takes one again, in a rotating order among the hosts, so
/// that slots (their records, lists and slabs) move between hosts.
fn reshuffle(heap: &Heap, me: usize, cycle: usize, net: &Net, seen: &mut Vec<u64>) -> Result<ThreadHandle, String> {
    for other in (0..HOSTS).filter(|&h| h != me) {
        net.ctl[other].send_u64(DETACHED);
    }
    for _ in 1..HOSTS {
        net.wait(me, DETACHED, seen)?;
    }
    let first = cycle % HOSTS;
    if me != first {
        net.wait(me, TOKEN, seen)?;
    }
    let t = heap.attach().ctx("attach")?;
    if (me + 1) % HOSTS != first {
        net.ctl[(me + 1) % HOSTS].send_u64(TOKEN);
    }
    Ok(t)
}

/// One simulated host of the random workload: `ROUNDS` rounds of allocate / hand over / free,
/// with a reshuffle of the slots every `CYCLE` rounds; host 0 then goes down holding its slot
/// (after the platform's flush) and host 2 adopts it.
fn host(name: &str, me: usize, net: &Net) -> Result<(), String> {
    let heap = Heap::open(name).ctx("open")?;
    let mut t = heap.attach().ctx("attach")?;
    let mut rng = Rng::new(me as u64 * 7919 + 1);
    let mut live: Vec<(NonNull<u8>, u64, usize)> = Vec::new();
    let mut seen = Vec::new();
    let mut sizings = Sizings::default();
    let others: Vec<usize> = (0..HOSTS).filter(|&h| h != me).collect();
    for round in 0..ROUNDS {
        if round > 0 && round % CYCLE == 0 {
            drop(t);
            t = reshuffle(&heap, me, round / CYCLE, net, &mut seen)?;
        }
        for i in 0..8 {
            let n = size(&mut rng);
            // One detectable allocation a round, through this host's root word.
            let p = if i == 0 {
                let root = heap.root(me).ctx("root")?;
                let p = t.alloc_into(n, root).ctx("alloc_into")?;
                root.store(0, std::sync::atomic::Ordering::Release);
                p
            } else {
                t.alloc(n).ctx("alloc")?
            };
            let off = heap.offset_of(p.as_ptr()).ctx("offset")?.raw();
            sizings.observe(&t, p, off).map_err(|e| format!("round {round}: {e}"))?;
            // Sometimes looked at: that reads the slab's head line into this host's cache.
            if rng.below(2) == 0 {
                ensure!(t.usable_size(p).ctx("usable size")? >= n, "usable size of {off:#x} below {n}");
            }
            let tagged = n | (round * 8 + i + 1) << 32;
            fill(p, off, n, salt(me, tagged));
            live.push((p, off, tagged));
        }
        // Hand a random share to every other host; the size travels with the offset.
        for &to in &others {
            let k = rng.below(4).min(live.len() as u64);
            net.data[me][to].send_u64(k);
            for _ in 0..k {
                let (p, off, n) = live.swap_remove(rng.below(live.len() as u64) as usize);
                // The application's side of a hand-over: what it wrote reaches memory first.
                t.write_back(p, n & SIZE).ctx("write back a block handed over")?;
                net.data[me][to].send_u64(off);
                net.data[me][to].send_u64(n as u64);
            }
        }
        for &from in &others {
            let k = net.data[from][me].recv_u64(DEADLINE).ctx("batch count")?;
            for _ in 0..k {
                let off = net.data[from][me].recv_u64(DEADLINE).ctx("offset")?;
                let n = net.data[from][me].recv_u64(DEADLINE).ctx("size")? as usize;
                let p = heap.pointer(Offset::<u8>::from_raw(off)).ctx("pointer")?;
                sizings.observe(&t, p, off).map_err(|e| format!("round {round}: {e}"))?;
                free_checked(&heap, &t, me, &mut rng, (p, off, n), from).map_err(|e| format!("round {round}: {e}"))?;
            }
        }
        for _ in 0..rng.below(9) {
            if live.is_empty() {
                break;
            }
            let block = live.swap_remove(rng.below(live.len() as u64) as usize);
            free_checked(&heap, &t, me, &mut rng, block, me).map_err(|e| format!("round {round}: {e}"))?;
        }
    }
    match me {
        0 => {
            // Goes down holding its slot: its blocks to host 1, its dirty lines to memory.
            net.data[0][1].send_u64(live.len() as u64);
            for &(_, off, n) in &live {
                net.data[0][1].send_u64(off);
                net.data[0][1].send_u64(n as u64);
            }
            sim::global_flush(&heap);
            net.ctl[2].send_u64(DYING);
            std::mem::forget(t);
            // SAFETY: ends this process at once, as a crash would; nothing is left to run.
            unsafe { libc::_exit(0) }
        }
        1 => {
            // After host 2 adopted host 0's slot, so that host 2 then caches stale copies.
            net.wait(me, ADOPTED, &mut seen)?;
            let k = net.data[0][1].recv_u64(DEADLINE).ctx("last batch")?;
            for _ in 0..k {
                let off = net.data[0][1].recv_u64(DEADLINE).ctx("offset")?;
                let n = net.data[0][1].recv_u64(DEADLINE).ctx("size")? as usize;
                let p = heap.pointer(Offset::<u8>::from_raw(off)).ctx("pointer")?;
                free_checked(&heap, &t, me, &mut rng, (p, off, n), 0)?;
            }
        }
        _ => {}
    }
    for block in std::mem::take(&mut live) {
        free_checked(&heap, &t, me, &mut rng, block, me)?;
    }
    drop(t);
    if me == 1 {
        net.ctl[2].send_u64(FINISHED);
    }
    if me == 2 {
        // Adopts the dead host's slot: recovery reads its record and descriptors, of which
        // this host may cache stale copies (it held that slot before).
        net.wait(me, DYING, &mut seen)?;
        let start = std::time::Instant::now();
        let dead = loop {
            let dead = heap.dead_slots();
            if !dead.is_empty() {
                break dead;
            }
            ensure!(start.elapsed() < DEADLINE, "host 0's slot never showed up dead");
            std::thread::sleep(Duration::from_millis(1));
        };
        for slot in dead {
            let (adopted, _report) = heap.adopt(slot).ctx("adopt")?;
            drop(adopted);
        }
        net.ctl[1].send_u64(ADOPTED);
        // Every other host is done: the checker, run here, must read memory too (recovery
        // cached every descriptor here, and host 1 has changed many since).
        net.wait(me, FINISHED, &mut seen)?;
        let report = heap.check();
        ensure!(report.is_clean(), "checker on host 2: {report}");
        let live: u64 = Bracket::ALL.iter().map(|&b| report.bracket(b).live_blocks()).sum();
        ensure!(live == 0, "checker on host 2: {live} blocks live after every host freed everything");
    }
    Ok(())
}

/// Runs the random workload's hosts on a fresh heap of `model`.
fn run_random(model: Coherence, skip: Option<Site>) -> Result<(), String> {
    let _serial = serial();
    let name = HeapName::new("sim");
    let heap = Heap::create(name.as_str(), &config(model)).ctx("create")?;
    let _device = (model == Coherence::NoHwcc).then(|| Device::serve(name.as_str(), Duration::ZERO));
    let bodies: Vec<HostBody<'_>> = (0..HOSTS)
        .map(|me| {
            let name = name.as_str();
            Box::new(move |net: &Net| host(name, me, net)) as HostBody<'_>
        })
        .collect();
    run_hosts(&heap, Net::new(HOSTS), skip, bodies)
}

/// The whole workload: the random run and the scripted scenarios; the first failure.
fn run(model: Coherence, skip: Option<Site>) -> Result<(), String> {
    run_random(model, skip).map_err(|e| format!("random run: {e}"))?;
    for how in [Handoff::STALE_COPY, Handoff::DETACHED, Handoff::DISOWNED] {
        old_owner_frees_into_a_claimed_and_resized_slab(model, skip, how).map_err(|e| format!("{}: {e}", how.name))?;
    }
    non_owner_refuses_blocks_the_owner_holds_free(model, skip).map_err(|e| format!("non-owner frees: {e}"))?;
    non_owner_refuses_blocks_of_a_slab_sized_again_with_its_marks(model, skip).map_err(|e| format!("kept marks: {e}"))
}

#[test]
fn limited_coherence_hosts_keep_the_heap_consistent() {
    run(Coherence::Limited, None).unwrap();
}

#[test]
fn no_hwcc_hosts_keep_the_heap_consistent() {
    run(Coherence::NoHwcc, None).unwrap();
}

/// A heap of `model` (served by a software mCAS device without HWcc) for scripted hosts.
fn scripted_heap(model: Coherence) -> (HeapName, Heap, Option<Device>) {
    let name = HeapName::new("simscript");
    let heap = Heap::create(name.as_str(), &config(model)).unwrap();
    let device = (model == Coherence::NoHwcc).then(|| Device::serve(name.as_str(), Duration::ZERO));
    (name, heap, device)
}

/// Runs two scripted hosts on `heap`: `a` sends to `b` on `data[0][1]` and `b` to `a` on
/// `data[1][0]`.
fn two_hosts(
    heap: &Heap,
    name: &str,
    skip: Option<Site>,
    a: impl FnOnce(&str, &Pipe, &Pipe) -> Result<(), String>,
    b: impl FnOnce(&str, &Pipe, &Pipe) -> Result<(), String>,
) -> Result<(), String> {
    run_hosts(
        heap,
        Net::new(2),
        skip,
        vec![
            Box::new(move |net: &Net| a(name, &net.data[0][1], &net.data[1][0])),
            Box::new(move |net: &Net| b(name, &net.data[1][0], &net.data[0][1])),
        ],
    )
}

fn block_at(heap: &Heap, off: u64) -> Result<NonNull<u8>, String> {
    heap.pointer(Offset::<u8>::from_raw(off)).ctx("pointer")
}

/// How the T4/T5 → T8 handoff scenario runs.
#[derive(Clone, Copy)]
struct Handoff {
    /// For messages.
    name: &'static str,
    /// O reads a block's size once the slab is full, which caches the slab's head line.
    look: bool,
    /// A remote free is counted before O fills the slab: T5 (Disowned) instead of T4.
    disown: bool,
    /// Which of R's blocks (of the new sizing) O frees.
    y: u64,
}

impl Handoff {
    /// Hole 1: O's cached copy of a Detached slab's head line, clean but stale.
    const STALE_COPY: Handoff = Handoff { name: "T4→T8 with a stale copy", look: true, disown: false, y: 0 };
    /// O's copy of a Detached slab written back at T4 (or left dirty, without `Detached`).
    const DETACHED: Handoff = Handoff { name: "T4→T8", look: false, disown: false, y: 1 };
    /// O's copy of a Disowned slab written back at T5 (or left dirty, without `Disowned`).
    const DISOWNED: Handoff = Handoff { name: "T5→T8", look: false, disown: true, y: 1 };
}

/// The T4/T5 → T8 handoff while the old owner still frees: host O fills a slab of the 1 KiB
/// class; host R frees every block of it remotely, claims it (T8) and re-sizes it for the
/// 512-byte class; then O frees R's block `y`. Whatever O's cache holds of the slab, the free
/// must go to R's slab, and O's next allocations must not hand out R's live block. (Hole 1,
/// with `look`: O's copy of the Detached slab's head line still says "owner == O".)
fn old_owner_frees_into_a_claimed_and_resized_slab(
    model: Coherence,
    skip: Option<Site>,
    how: Handoff,
) -> Result<(), String> {
    let _serial = serial();
    let (name, heap, _device) = scripted_heap(model);
    let o = |name: &str, to_r: &Pipe, from_r: &Pipe| -> Result<(), String> {
        let heap = Heap::open(name).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        // Fill the first slab of the 1 KiB class (small slabs are 32 KiB, aligned).
        let mut slab = vec![t.alloc(1024).ctx("alloc")?];
        if how.disown {
            // Every hand-over as on hardware: the sender writes the block back, the receiver
            // invalidates it.
            sim::app_write_back(&heap, slab[0].as_ptr(), 1024);
            to_r.send_u64(heap.offset_of(slab[0].as_ptr()).ctx("offset")?.raw());
            from_r.recv_u64(DEADLINE).ctx("R freed the first block")?;
        }
        let next = loop {
            let p = t.alloc(1024).ctx("alloc")?;
            if p.as_ptr() as usize >> 15 != slab[0].as_ptr() as usize >> 15 {
                break p;
            }
            slab.push(p);
        };
        if how.disown {
            slab.remove(0);
        }
        if how.look {
            ensure!(t.usable_size(slab[0]).ctx("usable size")? == 1024, "usable size");
        }
        to_r.send_u64(slab.len() as u64);
        for p in &slab {
            sim::app_write_back(&heap, p.as_ptr(), 1024);
            to_r.send_u64(heap.offset_of(p.as_ptr()).ctx("offset")?.raw());
        }
        let y = from_r.recv_u64(DEADLINE).ctx("R's block")?;
        sim::app_invalidate(&heap, block_at(&heap, y)?.as_ptr(), 512);
        t.free(block_at(&heap, y)?).ctx("free of R's block")?;
        // Two slabs' worth: a free taken for a local one puts the slab back on O's sized list.
        let mut mine = vec![next];
        for _ in 0..2 * slab.len() {
            let p = t.alloc(1024).ctx("alloc")?;
            let off = heap.offset_of(p.as_ptr()).ctx("offset")?.raw();
            ensure!(off + 1024 <= y || off >= y + 512, "O was handed {off:#x}, over R's live block {y:#x}");
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
        let mut first = u64::MAX;
        if how.disown {
            // Counted at once (a detectable free is never batched): O's slab is then Disowned
            // when it fills.
            let off = from_o.recv_u64(DEADLINE).ctx("first block")?;
            sim::app_invalidate(&heap, block_at(&heap, off)?.as_ptr(), 1024);
            first = off;
            let root = heap.root(1).ctx("root")?;
            root.store(off, std::sync::atomic::Ordering::Release);
            t.free_from(root).ctx("detectable free")?;
            to_o.send_u64(1);
        }
        let n = from_o.recv_u64(DEADLINE).ctx("count")?;
        for _ in 0..n {
            let off = from_o.recv_u64(DEADLINE).ctx("offset")?;
            first = first.min(off);
            sim::app_invalidate(&heap, block_at(&heap, off)?.as_ptr(), 1024);
            if model == Coherence::Limited {
                // O is alive with its mailbox open: a plain free would go there and come back
                // to O (docs/design.md §4.6). A detectable free is always counted, so the slab
                // changes hands by T8 as in the no-HWcc model, where remote frees are counted.
                let root = heap.root(1).ctx("root")?;
                root.store(off, std::sync::atomic::Ordering::Release);
                t.free_from(root).ctx("detectable free")?;
            } else {
                t.free(block_at(&heap, off)?).ctx("remote free")?;
            }
        }
        // Detaching applies the batch: the last subtraction claims the slab (T8), and the
        // detach gives it to the global list, where the next refill takes it back.
        drop(t);
        let t = heap.attach().ctx("attach")?;
        let kept: Vec<_> = (0..how.y).map(|_| t.alloc(512)).collect::<Result<_, _>>().ctx("alloc")?;
        let y = t.alloc(512).ctx("alloc")?;
        let off = heap.offset_of(y.as_ptr()).ctx("offset")?.raw();
        ensure!(
            off == first + 512 * how.y,
            "R's block {off:#x} is not block {} of the claimed slab ({first:#x})",
            how.y
        );
        fill(y, off, 512, 0x5151);
        sim::app_write_back(&heap, y.as_ptr(), 512);
        to_o.send_u64(off);
        // O frees it (remotely: the slab is R's now) and allocates.
        from_o.recv_u64(DEADLINE).ctx("O done")?;
        for p in kept {
            t.free(p).ctx("free")?;
        }
        Ok(())
    };
    two_hosts(&heap, name.as_str(), skip, o, r)
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
    in_both_models(|model| old_owner_frees_into_a_claimed_and_resized_slab(model, None, Handoff::STALE_COPY));
}

/// Hole 2 of the limited and no-HWcc models: a non-owner cannot see the owner's bitset or
/// cached word, yet must refuse a block the owner has freed or never handed out (and so must
/// `usable_size`, `realloc` and `free_from`), without counting it against the slab.
fn non_owner_refuses_blocks_the_owner_holds_free(model: Coherence, skip: Option<Site>) -> Result<(), String> {
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
        // The application hands its live block over as on hardware: written back.
        sim::app_write_back(&heap, blocks[3].as_ptr(), 64);
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
        // What it received, it reads from memory (the application's side of a hand-over).
        for p in [freed, never, live] {
            sim::app_invalidate(&heap, p.as_ptr(), 64);
        }
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
    two_hosts(&heap, name.as_str(), skip, o, r)
}

#[test]
fn a_non_owner_refuses_blocks_the_owner_holds_free() {
    in_both_models(|model| non_owner_refuses_blocks_the_owner_holds_free(model, None));
}

/// docs/design.md §4.1, "Marks kept at re-sizing": host O empties slab A by local frees (T7)
/// and sizes it again for the same class, keeping its mark and writing no block; host R, which
/// reads blocks from memory, must still refuse a block of the new sizing never handed out —
/// the marks it reads are the ones O's local frees wrote back.
fn non_owner_refuses_blocks_of_a_slab_sized_again_with_its_marks(
    model: Coherence,
    skip: Option<Site>,
) -> Result<(), String> {
    let _serial = serial();
    // A cache of empty slabs (the other scenarios keep none), so that A stays with O after T7.
    let name = HeapName::new("simscript");
    let heap = Heap::create(name.as_str(), &Config { cache_local: 2, ..config(model) }).unwrap();
    let _device = (model == Coherence::NoHwcc).then(|| Device::serve(name.as_str(), Duration::ZERO));
    let o = |name: &str, to_r: &Pipe, from_r: &Pipe| -> Result<(), String> {
        let heap = Heap::open(name).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        // Slab A: 32 blocks of 1 KiB, filled (detached); the 33rd allocation sizes slab B.
        let a: Vec<_> = (0..32).map(|_| t.alloc(1024)).collect::<Result<_, _>>().ctx("alloc")?;
        let mut rest = vec![t.alloc(1024).ctx("alloc")?];
        for &p in &a {
            t.free(p).ctx("local free")?;
        }
        // B filled; the next allocation sizes A again for its class and takes its block 0.
        for _ in 0..31 {
            rest.push(t.alloc(1024).ctx("alloc")?);
        }
        let again = t.alloc(1024).ctx("alloc")?;
        ensure!(again == a[0], "slab A was not the one sized again");
        to_r.send_u64(heap.offset_of(a[5].as_ptr()).ctx("offset")?.raw());
        from_r.recv_u64(DEADLINE).ctx("R done")?;
        // Had R's refused free been counted, these frees (or the checker) would find it.
        for p in rest.into_iter().chain([again]) {
            t.free(p).ctx("local free")?;
        }
        Ok(())
    };
    let r = |name: &str, to_o: &Pipe, from_o: &Pipe| -> Result<(), String> {
        let heap = Heap::open(name).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        let never = block_at(&heap, from_o.recv_u64(DEADLINE).ctx("offset")?)?;
        sim::app_invalidate(&heap, never.as_ptr(), 1024);
        let r = t.free(never);
        ensure!(r == Err(FreeError::DoubleFree), "free of a block never handed out in this sizing: {r:?}");
        drop(t);
        to_o.send_u64(1);
        Ok(())
    };
    two_hosts(&heap, name.as_str(), skip, o, r)
}

#[test]
fn a_non_owner_refuses_blocks_of_a_slab_sized_again_with_its_marks_kept() {
    in_both_models(|model| non_owner_refuses_blocks_of_a_slab_sized_again_with_its_marks(model, None));
}

/// The mutation matrix: for every coherence site, the workload (the random run, then the
/// scripted scenarios) with that one operation removed from every host must be caught — a
/// host's check or an error a correct run never gives, or the checker — in both reduced
/// models. Prints the matrix: each cell names the phase that caught the removal.
#[test]
fn every_coherence_site_is_needed_by_the_workload() {
    // The mailbox sites: the no-HWcc model counts its remote frees (docs/design.md §4.6) and
    // never reaches them, so they are shown necessary in the limited model alone.
    let limited_only = [Site::MailboxLink, Site::MailboxRead];
    let mut missed = Vec::new();
    let mut out = format!("{:<16} {:<40} {:<40}\n", "site removed", "limited", "no-HWcc");
    for &site in Site::ALL {
        out += &format!("{:<16}", format!("{site:?}"));
        for model in [Coherence::Limited, Coherence::NoHwcc] {
            if model == Coherence::NoHwcc && limited_only.contains(&site) {
                out += &format!(" {:<40}", "not reached (no mailboxes)");
                continue;
            }
            let cell = match run(model, Some(site)) {
                Ok(()) => {
                    missed.push(format!("{site:?} in {model:?}"));
                    "MISSED".to_string()
                }
                // The phase and the first words of what went wrong, without source locations.
                Err(e) => {
                    let e: String =
                        e.split(": ").filter(|w| !w.starts_with("cxlalloc/tests/")).collect::<Vec<_>>().join(": ");
                    format!("caught ({})", e.chars().take(30).collect::<String>())
                }
            };
            out += &format!(" {cell:<40}");
        }
        out += "\n";
    }
    eprintln!("{out}");
    assert!(missed.is_empty(), "removing these sites went unnoticed: {}", missed.join(", "));
}

/// Blocks own their lines in the reduced models (docs/design.md §9.1): host O allocates two
/// 8-byte blocks one after the other and hands the second to host R; each host writes its
/// own block and writes it back, as the hand-over protocol asks, R first. Had the two blocks
/// shared a line, O's write-back would put its stale copy of R's block over R's bytes.
fn neighbouring_blocks_on_two_hosts_keep_their_bytes(model: Coherence) -> Result<(), String> {
    let _serial = serial();
    let (name, heap, _device) = scripted_heap(model);
    let o = |name: &str, to_r: &Pipe, from_r: &Pipe| -> Result<(), String> {
        let heap = Heap::open(name).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        let (a, b) = (t.alloc(8).ctx("alloc")?, t.alloc(8).ctx("alloc")?);
        sim::app_write_back(&heap, b.as_ptr(), 8);
        to_r.send_u64(heap.offset_of(b.as_ptr()).ctx("offset")?.raw());
        from_r.recv_u64(DEADLINE).ctx("R wrote its block")?;
        let off = heap.offset_of(a.as_ptr()).ctx("offset")?.raw();
        fill(a, off, 8, 0x0a);
        sim::app_write_back(&heap, a.as_ptr(), 8);
        to_r.send_u64(1);
        from_r.recv_u64(DEADLINE).ctx("R done")?;
        ensure!(intact(a, off, 8, 0x0a), "O's block lost its bytes");
        t.free(a).ctx("free")?;
        Ok(())
    };
    let r = |name: &str, to_o: &Pipe, from_o: &Pipe| -> Result<(), String> {
        let heap = Heap::open(name).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        let off = from_o.recv_u64(DEADLINE).ctx("O's block")?;
        let b = block_at(&heap, off)?;
        sim::app_invalidate(&heap, b.as_ptr(), 8);
        fill(b, off, 8, 0x0b);
        sim::app_write_back(&heap, b.as_ptr(), 8);
        to_o.send_u64(1);
        from_o.recv_u64(DEADLINE).ctx("O wrote its block")?;
        // What this host reads of its own block comes from memory, where O wrote back its line.
        sim::app_invalidate(&heap, b.as_ptr(), 8);
        let kept = intact(b, off, 8, 0x0b);
        to_o.send_u64(1);
        ensure!(kept, "R's block {off:#x} lost its bytes to O's write-back of its neighbour");
        t.free(b).ctx("free")?;
        Ok(())
    };
    two_hosts(&heap, name.as_str(), None, o, r)
}

#[test]
fn neighbouring_blocks_on_two_hosts_keep_their_bytes_in_reduced_models() {
    in_both_models(neighbouring_blocks_on_two_hosts_keep_their_bytes);
}
