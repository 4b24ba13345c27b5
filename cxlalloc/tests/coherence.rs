//! The coherence models (docs/design.md §9.1): the model is fixed at creation and checked at open; the
//! no-HWcc model keeps its HWcc words in an mCAS window and runs every CAS on them through the
//! software mCAS device, from threads and from processes.

mod common;

use std::time::Duration;

use common::{fork_child, free_roots_and_check_empty, remote_free_ring, serial, Ctx, Device, HeapName};
use cxlalloc::{AttachError, Coherence, Config, Heap, OpenError};

fn config(coherence: Coherence) -> Config {
    Config { coherence, huge_capacity: 0, thread_slots: 16, ..Config::with_capacity(64 << 20) }
}

#[test]
fn a_heap_records_its_coherence_model_and_refuses_another_at_open() {
    for model in [Coherence::Limited, Coherence::NoHwcc] {
        let name = HeapName::new("model");
        let heap = Heap::create(name.as_str(), &config(model)).unwrap();
        assert_eq!(heap.config().coherence, model);
        drop(heap);
        assert_eq!(Heap::open(name.as_str()).unwrap().config().coherence, model);
        let r = Heap::open_or_create(name.as_str(), &config(Coherence::Full));
        assert!(matches!(r, Err(OpenError::Mismatch { field: "coherence", .. })), "{model:?}: {r:?}");
    }
}

#[test]
fn the_huge_heap_is_refused_outside_full_coherence() {
    let c = Config { coherence: Coherence::Limited, ..Config::with_capacity(64 << 20) };
    assert!(matches!(Heap::anonymous(&c), Err(OpenError::InvalidConfig(_))));
}

#[test]
fn a_no_hwcc_heap_needs_a_heap_directory() {
    assert!(matches!(Heap::anonymous(&config(Coherence::NoHwcc)), Err(OpenError::Mcas(_))));
}

#[test]
fn attaching_to_a_no_hwcc_heap_nobody_serves_is_refused() {
    let name = HeapName::new("unserved");
    let heap = Heap::create(name.as_str(), &config(Coherence::NoHwcc)).unwrap();
    assert!(matches!(heap.attach(), Err(AttachError::DeviceUnserved(_))));
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let t = heap.attach().unwrap();
    t.free(t.alloc(64).unwrap()).unwrap();
    drop(t);
    assert!(device.stop() > 0);
}

#[test]
fn no_hwcc_hwcc_words_live_in_the_mcas_window() {
    let name = HeapName::new("window");
    let heap = Heap::create(name.as_str(), &config(Coherence::NoHwcc)).unwrap();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let t = heap.attach().unwrap();
    let _block = t.alloc(64).unwrap();
    let window =
        cxlalloc::internal::mcas::Window::open(&Heap::path_of(name.as_str()).unwrap().join("mcas-window")).unwrap();
    // The shared region comes first in the target area, and the small bracket's length word
    // first in its fixed header: the bump that gave the thread its first slabs went through
    // the device.
    let at = cxlalloc::internal::shared_header_offset(&heap);
    let length = window.target(at).unwrap().load(std::sync::atomic::Ordering::Acquire);
    assert_ne!(length & 0xffff_ffff, 0, "length word {length:#x}");
    drop(t);
    assert!(device.stop() > 0);
}

#[test]
fn no_hwcc_threads_allocate_and_free_remotely_through_the_device() {
    let name = HeapName::new("ring");
    let heap = Heap::create(name.as_str(), &config(Coherence::NoHwcc)).unwrap();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    remote_free_ring(&heap, 4, 3000);
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    // 12,000 remote frees, batched per slab: far fewer device requests, but some.
    let requests = device.stop();
    assert!(requests > 0 && requests < 12_000, "{requests} mCAS requests");
}

#[test]
fn limited_coherence_threads_allocate_and_free_remotely() {
    let heap = Heap::anonymous(&config(Coherence::Limited)).unwrap();
    remote_free_ring(&heap, 4, 3000);
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
}

#[test]
fn no_hwcc_processes_share_the_device_window() {
    let _serial = serial();
    let name = HeapName::new("procs");
    let heap = Heap::create(name.as_str(), &config(Coherence::NoHwcc)).unwrap();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let mut children: Vec<_> = (0..3u64)
        .map(|i| {
            let name = name.as_str().to_string();
            fork_child("no-hwcc worker", move || {
                let heap = Heap::open(&name).ctx("open")?;
                let t = heap.attach().ctx("attach")?;
                let mut kept = Vec::new();
                for n in 0..2000usize {
                    let p = t.alloc(16 + n % 300).ctx("alloc")?;
                    if n % 3 == 0 {
                        t.free(p).ctx("free")?;
                    } else {
                        kept.push(p);
                    }
                }
                // Leave one block per child in a root for the parent to free remotely.
                let last = kept.pop().ctx("a kept block")?;
                heap.root(i as usize)
                    .ctx("root")?
                    .store(heap.offset_of(last.as_ptr()).ctx("offset")?.raw(), std::sync::atomic::Ordering::Release);
                for p in kept {
                    t.free(p).ctx("free kept")?;
                }
                Ok(())
            })
        })
        .collect();
    for c in &mut children {
        c.succeeds();
    }
    free_roots_and_check_empty(&heap, 3);
    assert!(device.stop() > 0);
}

#[test]
fn no_hwcc_root_compare_exchange_goes_through_the_device() {
    let name = HeapName::new("root");
    let heap = Heap::create(name.as_str(), &config(Coherence::NoHwcc)).unwrap();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    assert_eq!(heap.root_compare_exchange(3, 0, 41), Some(Ok(0)));
    assert_eq!(heap.root_compare_exchange(3, 0, 42), Some(Err(41)));
    assert_eq!(heap.root(3).unwrap().load(std::sync::atomic::Ordering::Acquire), 41);
    assert_eq!(heap.root_compare_exchange(Heap::ROOTS, 0, 1), None);
    assert!(device.stop() >= 2, "both CASes were mCAS requests");
}

/// Co-simulation end to end: the heap's window is served by the Verilated RTL (`mcas-cosim`)
/// instead of the software device, and threads allocate and free remotely through it.
/// `script/fpga.sh` builds the server and runs this with `MCAS_COSIM` set.
#[test]
#[ignore = "needs MCAS_COSIM=path/to/mcas-cosim (script/fpga.sh builds it and runs this)"]
fn no_hwcc_threads_allocate_and_free_remotely_through_the_rtl() {
    let bin = std::env::var("MCAS_COSIM").expect("MCAS_COSIM names the mcas-cosim binary");
    let name = HeapName::new("rtl");
    let heap = Heap::create(name.as_str(), &config(Coherence::NoHwcc)).unwrap();
    let window = Heap::path_of(name.as_str()).unwrap().join(cxlalloc::internal::WINDOW_FILE);
    let mut server = std::process::Command::new(&bin)
        .args(["--window", window.to_str().unwrap(), "--latency", "4"])
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"));
    let started = std::time::Instant::now();
    while cxlalloc::internal::mcas::Window::open(&window).ok().and_then(|w| w.served_by()).is_none() {
        assert!(started.elapsed() < Duration::from_secs(20), "mcas-cosim never served the heap's window");
        std::thread::sleep(Duration::from_millis(10));
    }
    remote_free_ring(&heap, 4, 400);
    let report = heap.check();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(server.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(server.wait().unwrap().success(), "mcas-cosim did not exit cleanly");
    assert!(report.is_clean(), "{report}");
}

/// No-HWcc remote frees of a slab with no owner are batched per slab (one mCAS per run): a
/// holder killed with a batch counted but not yet subtracted leaves it in its record, and
/// adoption applies it.
#[test]
fn a_batch_of_remote_frees_left_by_a_killed_process_is_applied_by_recovery() {
    let _serial = serial();
    let name = HeapName::new("batch");
    let heap = Heap::create(name.as_str(), &config(Coherence::NoHwcc)).unwrap();
    let _device = Device::serve(name.as_str(), Duration::ZERO);
    let owner = heap.attach().unwrap();
    let blocks: Vec<u64> = (0..10).map(|_| heap.offset_of(owner.alloc(64).unwrap().as_ptr()).unwrap().raw()).collect();
    // The owner leaves (abandoning the slab): frees of a live owner's blocks would go to its
    // mailbox instead of a batch (docs/design.md §4.6).
    drop(owner);
    let n = name.as_str().to_string();
    let mut child = common::fork_code("batching freer", move || {
        let Ok(heap) = Heap::open(&n) else { return 1 };
        let Ok(t) = heap.attach() else { return 2 };
        for &off in &blocks {
            let Ok(p) = heap.pointer(cxlalloc::Offset::<u8>::from_raw(off)) else { return 3 };
            if t.free(p).is_err() {
                return 4;
            }
        }
        // Killed holding the batch: nothing subtracted yet.
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        5
    });
    assert_eq!(child.killed_by(), nix::sys::signal::Signal::SIGKILL);
    let live = |h: &Heap| cxlalloc::Bracket::ALL.iter().map(|&b| h.check().bracket(b).live_blocks()).sum::<u64>();
    assert_eq!(live(&heap), 10, "the batch is not applied before recovery");
    let reports = heap.recover_dead();
    assert_eq!(reports.len(), 1);
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(live(&heap), 0, "recovery applied the dead holder's batch");
}

/// docs/design.md §4.5: in the no-HWcc model (no mailboxes, remote frees counted in batches), a
/// batch that holds every block of its slab is applied at once: the last free claims the slab
/// (T8), rather than the batch waiting for another slab's free to evict it, or for a detach.
#[test]
fn a_batch_holding_every_block_of_its_slab_claims_it_at_once_without_hwcc() {
    let name = HeapName::new("batch-whole");
    let heap = Heap::create(name.as_str(), &config(Coherence::NoHwcc)).unwrap();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    // 1 KiB blocks: one small slab holds 32; the 33rd allocation retires it (T4, Detached).
    let blocks: Vec<_> = (0..33).map(|_| owner.alloc(1024).unwrap()).collect();
    let claims = heap.stats().counters.claims;
    for &p in &blocks[..32] {
        other.free(p).unwrap();
    }
    assert_eq!(heap.stats().counters.claims, claims + 1, "the slab's last free claimed it");
    owner.free(blocks[32]).unwrap();
    drop((owner, other));
    assert!(heap.check().is_clean(), "{}", heap.check());
    drop(device);
}

/// 1 KiB blocks fill a small slab with 32; `slabs` full slabs (and one more block, which
/// retires the last of them) allocated by `t`.
fn fill_slabs(t: &cxlalloc::ThreadHandle, slabs: usize) -> Vec<std::ptr::NonNull<u8>> {
    (0..slabs * 32 + 1).map(|_| t.alloc(1024).unwrap()).collect()
}

/// docs/design.md §4.3, "Chains": without HWcc every CAS on the global list is an mCAS, so a
/// thread that claims slab after slab (its frees are all remote) pushes the slabs beyond its
/// cache in chains, one mCAS per chain, not one per slab. Recovery off, so that no
/// detectable-CAS help is sent: the device then answers exactly the subtractions and pushes.
#[test]
fn a_freer_pushes_the_slabs_it_claims_beyond_its_cache_in_chains_without_hwcc() {
    let name = HeapName::new("chain-push");
    let heap = Heap::create(name.as_str(), &Config { recovery: false, ..config(Coherence::NoHwcc) }).unwrap();
    let slabs = 64;
    let cache = heap.config().cache_local as u64;
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let blocks = fill_slabs(&owner, slabs);
    device.stop();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let before = heap.stats().counters;
    for &p in &blocks[..slabs * 32] {
        other.free(p).unwrap();
    }
    let requests = device.stop();
    let after = heap.stats().counters;
    // Judged once the handles are gone: a handle dropped while no device serves would wait
    // for it forever.
    let device = Device::serve(name.as_str(), Duration::ZERO);
    owner.free(blocks[slabs * 32]).unwrap();
    drop((owner, other));
    assert!(heap.check().is_clean(), "{}", heap.check());
    drop(device);
    let slabs = slabs as u64;
    assert_eq!(after.claims - before.claims, slabs, "every slab was claimed by its last free");
    let pushed = after.global_pushes - before.global_pushes;
    assert!(pushed >= slabs - cache, "the claimer kept at most its cache: {pushed} pushed");
    // One subtraction per slab (a whole slab's batch claims it), then the pushes.
    assert!(
        requests <= slabs + pushed / 4,
        "{requests} mCAS for {slabs} claims and {pushed} slabs pushed: pushes are not chained"
    );
}

/// docs/design.md §4.3, "Chains": a refill that finds no slab in its cache pops a chain of
/// slabs from the global list with one mCAS, filling its cache, instead of one mCAS per slab.
#[test]
fn a_refill_pops_a_chain_of_slabs_from_the_global_list_without_hwcc() {
    let name = HeapName::new("chain-pop");
    let heap = Heap::create(name.as_str(), &Config { recovery: false, ..config(Coherence::NoHwcc) }).unwrap();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let first = heap.attach().unwrap();
    let second = heap.attach().unwrap();
    // 40 slabs sized, emptied by local frees and given back: all but the cache go global.
    let blocks = fill_slabs(&first, 40);
    for &p in &blocks {
        first.free(p).unwrap();
    }
    drop(first);
    let listed = heap.stats().counters.global_pushes;
    device.stop();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let before = heap.stats().counters;
    let slabs = 16;
    let again = fill_slabs(&second, slabs);
    let requests = device.stop();
    let after = heap.stats().counters;
    // Judged once the handle is gone (see the test above).
    let device = Device::serve(name.as_str(), Duration::ZERO);
    for &p in &again {
        second.free(p).unwrap();
    }
    drop(second);
    assert!(heap.check().is_clean(), "{}", heap.check());
    drop(device);
    assert!(listed >= 32, "{listed} slabs on the global list");
    let popped = after.global_pops - before.global_pops;
    assert!(popped >= slabs as u64, "the refills took {popped} slabs from the global list");
    assert_eq!(after.slabs_bumped, before.slabs_bumped, "the heap did not grow");
    // One counter reset per sizing (each slab was last counted by another slot), then the pops.
    let sized = slabs as u64 + 1;
    assert!(
        requests <= sized + popped / 4,
        "{requests} mCAS for {sized} sizings and {popped} slabs popped: pops are not chained"
    );
}

/// docs/design.md §4.5, "The batch table": a no-HWcc remote freer keeps a batch for each of
/// more slabs than the 32 a scanned array held (xmalloc's consumer frees from about 77 at once):
/// freeing one block of each of 100 slabs in turn, 32 times round, applies each slab's batch
/// once, with the free that completes it (its claim), not a partial batch per eviction.
/// Recovery off, so that the device answers exactly the subtractions and the pushes.
#[test]
fn a_freer_batches_a_hundred_slabs_at_once_and_subtracts_each_once_without_hwcc() {
    let name = HeapName::new("batch-wide");
    let heap = Heap::create(name.as_str(), &Config { recovery: false, ..config(Coherence::NoHwcc) }).unwrap();
    let slabs = 100;
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let blocks = fill_slabs(&owner, slabs);
    device.stop();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let before = heap.stats().counters;
    // Round-robin over the slabs: every slab's batch is open until the last round.
    for j in 0..32 {
        for s in 0..slabs {
            other.free(blocks[s * 32 + j]).unwrap();
        }
    }
    let requests = device.stop();
    let after = heap.stats().counters;
    // Judged once the handles are gone (see the chain tests above).
    let device = Device::serve(name.as_str(), Duration::ZERO);
    owner.free(blocks[slabs * 32]).unwrap();
    drop((owner, other));
    assert!(heap.check().is_clean(), "{}", heap.check());
    drop(device);
    let slabs = slabs as u64;
    assert_eq!(after.claims - before.claims, slabs, "every slab was claimed by its last free");
    let pushed = after.global_pushes - before.global_pushes;
    // One subtraction per slab, then the chained pushes: no partial batch was applied early.
    assert!(
        requests <= slabs + pushed / 4,
        "{requests} mCAS for {slabs} claims and {pushed} slabs pushed: batches were applied early"
    );
}

/// docs/design.md §4.5, "The batch table": a partial batch keeps its slab from being claimed,
/// and with 256 entries no eviction may come for it. A slab freed half by one thread and half
/// by another (whose batch is applied when it leaves) is claimed once the first thread's
/// batch has gone unused for `STALE_BATCH` (65 536) of its remote frees: the sweep applies it.
#[test]
fn a_partial_batch_left_unused_is_applied_and_its_slab_claimed_without_hwcc() {
    let name = HeapName::new("batch-stale");
    let heap = Heap::create(name.as_str(), &Config { recovery: false, ..config(Coherence::NoHwcc) }).unwrap();
    let device = Device::serve(name.as_str(), Duration::ZERO);
    let live = |h: &Heap| cxlalloc::Bracket::ALL.iter().map(|&b| h.check().bracket(b).live_blocks()).sum::<u64>();
    let owner = heap.attach().unwrap();
    let first = heap.attach().unwrap();
    let blocks = fill_slabs(&owner, 1);
    {
        let second = heap.attach().unwrap();
        for &p in &blocks[..16] {
            first.free(p).unwrap();
        }
        for &p in &blocks[16..32] {
            second.free(p).unwrap();
        }
        // `second` leaves: its batch is applied, 16 frees counted, and the slab still waits
        // for `first`'s 16.
    }
    assert_eq!(live(&heap), 17, "first's batch of 16 is not applied yet (and one block is live)");
    // The owner's current slab is now empty, so each round of 32 allocations fills one slab
    // (the 32nd retires it) and `first`'s 32 frees claim it: 70 400 more remote frees.
    owner.free(blocks[32]).unwrap();
    for _ in 0..2200 {
        let churn: Vec<_> = (0..32).map(|_| owner.alloc(1024).unwrap()).collect();
        for p in churn {
            first.free(p).unwrap();
        }
    }
    assert_eq!(live(&heap), 0, "the stale batch was applied and the slab claimed");
    drop((owner, first));
    assert!(heap.check().is_clean(), "{}", heap.check());
    drop(device);
}
