//! The worker that `script/pod.sh` runs on every host of a pod (QEMU guests and the machine
//! itself), on one heap device: the guests' `ivshmem` BAR (`resource2`) and the host's backing
//! file are the same bytes. Each command prints what it did and exits 0 only if everything it
//! checked held; a failed check says why on stderr and exits 1. Not a benchmark.
//!
//! ```text
//! pod_worker DEVICE alloc BASE        blocks of every size (small, large, and huge if the heap
//!                                      has a huge heap), filled with a pattern, published in
//!                                      roots BASE..BASE+3; kept live
//! pod_worker DEVICE verify-free BASE  checks those blocks' bytes and frees them
//! pod_worker DEVICE hold THREADS SECS holds THREADS slots for SECS seconds, allocating and
//!                                      freeing all the while (prints "holding host H")
//! pod_worker DEVICE foreign           every slot is held by live holders of other hosts: attach,
//!                                      dead_slots, recover_dead and adopt must all refuse them
//! pod_worker DEVICE churn BASE K SECS detectable allocations and frees into roots BASE..BASE+K
//!                                      for SECS seconds (0: until killed), progress each second
//! pod_worker DEVICE drain BASE K      frees whatever roots BASE..BASE+K hold
//! ```

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cxlalloc::{AdoptError, AttachError, Heap, Offset};

/// Block sizes of `alloc`: one per bracket (small, large, huge).
const SIZES: [usize; 3] = [200, 100 << 10, 3 << 20];
/// Sizes `churn` cycles through (small and large).
const CHURN_SIZES: [usize; 4] = [24, 640, 9 << 10, 200 << 10];

type Res<T> = Result<T, String>;

fn pattern(root: usize, i: usize) -> u8 {
    (root as u8).wrapping_mul(31) ^ (i as u8).wrapping_add((i >> 8) as u8)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Res<T> {
    args.get(i).and_then(|a| a.parse().ok()).ok_or_else(|| format!("argument {i}: expected {what}"))
}

fn root(heap: &Heap, r: usize) -> Res<&std::sync::atomic::AtomicU64> {
    heap.root(r).ok_or_else(|| format!("no root {r}"))
}

/// The sizes of `alloc` this heap serves: the huge one only with a huge heap (coherence full).
fn sizes(heap: &Heap) -> &'static [usize] {
    if heap.config().huge_capacity > 0 {
        &SIZES
    } else {
        &SIZES[..2]
    }
}

fn alloc(heap: &Heap, base: usize) -> Res<()> {
    let t = heap.attach().map_err(|e| format!("attach: {e}"))?;
    for (i, &size) in sizes(heap).iter().enumerate() {
        let r = base + i;
        let p = t.alloc(size).map_err(|e| format!("alloc {size}: {e}"))?;
        // SAFETY: a fresh block of `size` bytes, ours alone until published below.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), size) };
        for (j, b) in bytes.iter_mut().enumerate() {
            *b = pattern(r, j);
        }
        let off = heap.offset_of(p.as_ptr()).map_err(|e| e.to_string())?;
        root(heap, r)?.store(off.raw(), Ordering::Release);
        println!("allocated {size} bytes at offset {:#x} (root {r})", off.raw());
    }
    Ok(())
}

fn verify_free(heap: &Heap, base: usize) -> Res<()> {
    let t = heap.attach().map_err(|e| format!("attach: {e}"))?;
    for (i, &size) in sizes(heap).iter().enumerate() {
        let r = base + i;
        let raw = root(heap, r)?.load(Ordering::Acquire);
        let p = heap.pointer::<u8>(Offset::from_raw(raw)).map_err(|e| format!("root {r}: {e}"))?;
        // SAFETY: the block is `size` bytes, allocated by `alloc` and not freed.
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), size) };
        if let Some((j, b)) = bytes.iter().enumerate().find(|&(j, &b)| b != pattern(r, j)) {
            return Err(format!("root {r}: byte {j} is {b:#x}, expected {:#x}", pattern(r, j)));
        }
        root(heap, r)?.store(0, Ordering::Release);
        t.free(p).map_err(|e| format!("free root {r}: {e}"))?;
        println!("verified and freed {size} bytes at offset {raw:#x} (root {r})");
    }
    Ok(())
}

fn hold(heap: &Heap, threads: usize, secs: u64) -> Res<()> {
    let until = Instant::now() + Duration::from_secs(secs);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let heap = heap.clone();
            std::thread::spawn(move || -> Res<u64> {
                let t = heap.attach().map_err(|e| format!("attach: {e}"))?;
                let mut ops = 0u64;
                while Instant::now() < until {
                    let p = t.alloc(64).map_err(|e| e.to_string())?;
                    t.free(p).map_err(|e| e.to_string())?;
                    ops += 1;
                }
                Ok(ops)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    println!("holding host {}", heap.host_id().map_or(-1, i64::from));
    let mut total = 0;
    for h in handles {
        total += h.join().map_err(|_| "a thread panicked".to_string())??;
    }
    println!("held {threads} slots for {secs} s, {total} allocations");
    Ok(())
}

fn foreign(heap: &Heap) -> Res<()> {
    let slots = heap.slots();
    if slots.is_empty() || slots.iter().any(|s| s.local || !s.alive) {
        return Err(format!("expected only live foreign holders, found {slots:?}"));
    }
    if !heap.dead_slots().is_empty() {
        return Err(format!("foreign holders listed dead: {:?}", heap.dead_slots()));
    }
    if !heap.recover_dead().is_empty() {
        return Err("recover_dead recovered a foreign holder's slot".into());
    }
    match heap.attach() {
        Err(AttachError::SlotsExhausted { dead: 0, .. }) => {}
        Err(e) => return Err(format!("attach: {e}")),
        Ok(t) => return Err(format!("attach took slot {} from a live foreign holder", t.slot())),
    }
    for s in &slots {
        match heap.adopt(s.slot) {
            Err(AdoptError::ForeignHost { host, .. }) if host == s.host => {}
            Err(e) => return Err(format!("adopt slot {}: {e}", s.slot)),
            Ok(_) => return Err(format!("adopted slot {} from a live foreign holder", s.slot)),
        }
    }
    println!("{} slots held by other hosts: none listed dead, adopted or recovered", slots.len());
    Ok(())
}

fn churn(heap: &Heap, base: usize, k: usize, secs: u64) -> Res<()> {
    let t = heap.attach().map_err(|e| format!("attach: {e}"))?;
    let start = Instant::now();
    let mut last = start;
    let (mut ops, mut i) = (0u64, 0usize);
    while secs == 0 || start.elapsed() < Duration::from_secs(secs) {
        let r = root(heap, base + i % k)?;
        if r.load(Ordering::Acquire) == 0 {
            let size = CHURN_SIZES[i % CHURN_SIZES.len()];
            let p = t.alloc_into(size, r).map_err(|e| format!("alloc_into: {e}"))?;
            // SAFETY: a fresh block of at least 8 bytes.
            unsafe { p.as_ptr().cast::<u64>().write_unaligned(ops) };
        } else {
            t.free_from(r).map_err(|e| format!("free_from: {e}"))?;
        }
        ops += 1;
        i = i.wrapping_add(7);
        if last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            println!("progress {ops} at {:.1} s", start.elapsed().as_secs_f64());
        }
    }
    println!("churned {ops} operations");
    Ok(())
}

fn drain(heap: &Heap, base: usize, k: usize) -> Res<()> {
    let t = heap.attach().map_err(|e| format!("attach: {e}"))?;
    let mut freed = 0;
    for r in base..base + k {
        if root(heap, r)?.load(Ordering::Acquire) != 0 {
            t.free_from(root(heap, r)?).map_err(|e| format!("free_from root {r}: {e}"))?;
            freed += 1;
        }
    }
    println!("drained {freed} blocks");
    Ok(())
}

fn run(args: &[String]) -> Res<()> {
    let device = args.get(1).ok_or("usage: pod_worker DEVICE COMMAND ...")?;
    let heap = Heap::open_device(Path::new(device)).map_err(|e| format!("open {device}: {e}"))?;
    match args.get(2).map(String::as_str) {
        Some("alloc") => alloc(&heap, arg(args, 3, "root base")?),
        Some("verify-free") => verify_free(&heap, arg(args, 3, "root base")?),
        Some("hold") => hold(&heap, arg(args, 3, "threads")?, arg(args, 4, "seconds")?),
        Some("foreign") => foreign(&heap),
        Some("churn") => churn(&heap, arg(args, 3, "root base")?, arg(args, 4, "roots")?, arg(args, 5, "seconds")?),
        Some("drain") => drain(&heap, arg(args, 3, "root base")?, arg(args, 4, "roots")?),
        other => Err(format!("unknown command {other:?}")),
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pod_worker: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
