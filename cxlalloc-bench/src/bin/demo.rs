//! `demo`: several processes share one `/dev/shm` heap and free each other's blocks.
//!
//! ```text
//! demo [--workload FILE-WITH-A-[demo]-TABLE] [--processes P] [--threads T] [--blocks B] [--ndjson FILE]
//! ```
//!
//! The parent creates a uniquely named heap, allocates a board of offset rings in it (one ring
//! per worker thread, see `cxlalloc_bench::ring`) and publishes the board's offset in root 0. It
//! then starts P copies of itself with `--worker`. Each worker opens the heap by name and runs T
//! threads, each leasing its own thread slot. A thread allocates its share of the B blocks with
//! assorted sizes (16 B ..= 512 KiB), stamps every byte, keeps about one in four for itself (freed
//! locally a little later) and pushes the others' offsets to the same thread index of the next
//! process. Meanwhile it pops the offsets the previous process pushed to it, checks each block's
//! stamp and every byte, and frees it: a cross-process remote free.
//!
//! When all workers have exited the parent frees the board, runs the heap checker, prints the
//! census, the library's counters and a per-worker table, and unlinks the heap. It exits non-zero
//! if a worker failed, the checker found an inconsistency, or any block is left allocated.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use cxlalloc::{Config, Heap, Offset, Stats, ThreadHandle};
use cxlalloc_bench::demo::{self, pick_size, Params, Rng, Stamp, WorkerSummary, STAMP_HEADER};
use cxlalloc_bench::ring::{Board, Ring};
use cxlalloc_bench::Error;

#[derive(Parser, Debug)]
#[command(version, about = "Several processes share one /dev/shm heap and free each other's blocks")]
struct Args {
    /// Workload file whose [demo] table gives the parameters.
    #[arg(long)]
    workload: Option<PathBuf>,
    /// Worker processes (overrides the workload file).
    #[arg(long)]
    processes: Option<usize>,
    /// Threads per worker (overrides the workload file).
    #[arg(long)]
    threads: Option<usize>,
    /// Blocks per worker (overrides the workload file).
    #[arg(long)]
    blocks: Option<u64>,
    /// Seed of the size choices (overrides the workload file).
    #[arg(long)]
    seed: Option<u64>,
    /// Append one NDJSON line per worker, and one for the run, to this file.
    #[arg(long)]
    ndjson: Option<PathBuf>,
    /// Internal: run as worker process INDEX of the heap named by --heap.
    #[arg(long, hide = true, requires = "heap")]
    worker: Option<usize>,
    /// Internal: the heap a worker opens.
    #[arg(long, hide = true)]
    heap: Option<String>,
}

/// Root holding the board's offset.
const BOARD_ROOT: usize = 0;
/// Heap capacity per bracket (reserved address space; committed as the heap grows).
const HEAP_CAPACITY: u64 = 2 << 30;
/// Blocks a thread keeps for itself before freeing the oldest (local frees).
const LOCAL_WINDOW: usize = 32;
/// Offsets a thread pops per pass before producing again.
const POP_BATCH: usize = 64;
/// A thread that makes no progress for this long gives up (a peer presumably died).
const STALL: Duration = Duration::from_secs(30);
/// Prefix of the worker's machine-readable summary line on stdout.
const RESULT: &str = "RESULT ";

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match (args.worker, &args.heap) {
        (Some(index), Some(heap)) => params(&args).and_then(|p| worker(&p, heap, index)),
        _ => params(&args).and_then(|p| parent(&p, &args)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let who = args.worker.map_or("demo".to_string(), |i| format!("demo worker {i}"));
            // One write, so lines of concurrent workers do not interleave.
            let _ = std::io::stderr().write_all(format!("{who}: {e}\n").as_bytes());
            ExitCode::FAILURE
        }
    }
}

fn params(args: &Args) -> Result<Params, Error> {
    let mut p = match &args.workload {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            demo::parse_workload(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => Params::default(),
    };
    p.processes = args.processes.unwrap_or(p.processes);
    p.threads = args.threads.unwrap_or(p.threads);
    p.blocks = args.blocks.unwrap_or(p.blocks);
    p.seed = args.seed.unwrap_or(p.seed);
    p.validate()?;
    Ok(p)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

// ---------------------------------------------------------------------------------------------
// Parent

/// The demo's heap: unlinked when the parent returns, whatever happened.
struct NamedHeap {
    name: String,
    heap: Heap,
}

impl Drop for NamedHeap {
    fn drop(&mut self) {
        match Heap::unlink(&self.name) {
            Ok(()) => println!("unlinked heap {}", self.name),
            Err(e) => eprintln!("demo: could not unlink heap {}: {e}", self.name),
        }
    }
}

struct WorkerRun {
    index: usize,
    child: Child,
    exit: Option<std::process::ExitStatus>,
}

fn parent(p: &Params, args: &Args) -> Result<(), Error> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.subsec_nanos();
    let name = format!("demo-{}-{nanos}", std::process::id());
    let heap =
        Heap::create(&name, &Config::with_capacity(HEAP_CAPACITY)).map_err(|e| format!("creating heap {name}: {e}"))?;
    let named = NamedHeap { name, heap };
    let heap = &named.heap;
    println!(
        "demo: heap {} at {}; {} worker processes x {} threads, {} blocks per worker",
        named.name,
        heap.location(),
        p.processes,
        p.threads,
        p.blocks
    );

    // The board: one ring per worker thread, published in root 0.
    let me = heap.attach()?;
    let rings = p.total_threads();
    let block = me.alloc_aligned(Board::bytes(rings), Board::ALIGN)?;
    let board_off = heap.offset_of(block.as_ptr())?.raw();
    // SAFETY: the block was just allocated with the size and alignment a board needs, and no
    // other thread can reach it until root 0 is written below.
    let board = unsafe { Board::init(heap, board_off, rings)? };
    let root = heap.root(BOARD_ROOT).ok_or("heap has no root 0")?;
    // Release: publishes the board's initialization; pairs with the workers' Acquire load.
    root.compare_exchange(0, board_off, Ordering::Release, Ordering::Relaxed)
        .map_err(|found| format!("root {BOARD_ROOT} of a new heap holds {found:#x}"))?;

    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let mut runs = Vec::new();
    for index in 0..p.processes {
        let spawned = Command::new(&exe)
            .args(["--worker", &index.to_string(), "--heap", &named.name])
            .args(["--processes", &p.processes.to_string(), "--threads", &p.threads.to_string()])
            .args(["--blocks", &p.blocks.to_string(), "--seed", &p.seed.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn();
        match spawned {
            Ok(child) => runs.push(WorkerRun { index, child, exit: None }),
            Err(e) => {
                board.abort();
                eprintln!("demo: starting worker {index}: {e}");
                break;
            }
        }
    }
    let started_all = runs.len() == p.processes;

    // Wait for every worker; when one fails, tell the others to stop waiting for its blocks.
    while runs.iter().any(|r| r.exit.is_none()) {
        for r in runs.iter_mut().filter(|r| r.exit.is_none()) {
            if let Some(status) = r.child.try_wait()? {
                if !status.success() {
                    board.abort();
                }
                r.exit = Some(status);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed();

    let mut failures = Vec::new();
    if !started_all {
        failures.push(format!("only {} of {} workers started", runs.len(), p.processes));
    }
    let mut summaries = Vec::new();
    let mut failed_rows = Vec::new();
    for r in &mut runs {
        let mut out = String::new();
        if let Some(mut stdout) = r.child.stdout.take() {
            stdout.read_to_string(&mut out)?;
        }
        let mut summary = None;
        for line in out.lines() {
            match line.strip_prefix(RESULT) {
                Some(json) => summary = serde_json::from_str::<WorkerSummary>(json).ok(),
                None => println!("{line}"),
            }
        }
        let status = r.exit.map_or("not reaped".to_string(), |s| s.to_string());
        match summary {
            Some(s) if r.exit.is_some_and(|s| s.success()) => summaries.push(s),
            _ => {
                failures.push(format!("worker {} failed ({status})", r.index));
                failed_rows.push((r.index, r.child.id(), status));
            }
        }
    }

    // Blocks still in rings (only after a failure): free them so the census shows real leaks.
    let mut orphans = 0u64;
    for i in 0..board.len() {
        let ring = board.ring(i).ok_or("ring index")?;
        while let Some(off) = ring.pop() {
            orphans += 1;
            if let Err(e) = heap.pointer::<u8>(Offset::from_raw(off)).map_err(Error::from).and_then(|b| Ok(me.free(b)?))
            {
                failures.push(format!("ring {i}: leftover offset {off:#x}: {e}"));
            }
        }
    }
    if orphans > 0 {
        failures.push(format!("{orphans} blocks were left in rings"));
    }
    root.store(0, Ordering::Relaxed);
    me.free(block)?;
    drop(me);

    let report = heap.check();
    let stats = heap.stats();
    println!();
    println!("heap check after all workers exited and the board was freed:");
    print!("{report}");
    print_stats(&stats);
    if !report.is_clean() {
        failures
            .push(format!("the checker found {} inconsistencies", report.problems.len() + report.huge_problems.len()));
    }
    let live = report.live_blocks();
    if live != 0 {
        failures.push(format!("{live} blocks are still allocated (leak)"));
    }
    if report.leased_slots != 0 || !report.in_flight.is_empty() {
        failures.push(format!(
            "{} slots still leased, {} with an operation in flight",
            report.leased_slots,
            report.in_flight.len()
        ));
    }

    let mut total = WorkerSummary::default();
    summaries.iter().for_each(|s| total.add(s));
    print_summary(&summaries, &failed_rows, &total, &stats, elapsed);
    if failures.is_empty() {
        if total.sent != total.remote_frees {
            failures.push(format!("{} blocks sent but {} received", total.sent, total.remote_frees));
        }
        if total.allocs != total.frees {
            failures.push(format!("{} allocations but {} frees", total.allocs, total.frees));
        }
    }
    if let Some(path) = &args.ndjson {
        write_ndjson(path, p, &named.name, &summaries, &total, &report, elapsed, &failures)?;
    }
    if failures.is_empty() {
        println!("demo: OK");
        Ok(())
    } else {
        Err(failures.join("; ").into())
    }
}

fn print_stats(s: &Stats) {
    let c = &s.counters;
    println!(
        "library counters: remote frees {}, slabs bumped {}, global pops {}, global pushes {}, claims {}, detaches {}, disowns {}",
        c.remote_frees, c.slabs_bumped, c.global_pops, c.global_pushes, c.claims, c.detaches, c.disowns
    );
    println!(
        "memory: slab data {:.1} MiB, SWcc metadata {:.1} MiB, HWcc metadata {:.1} KiB; leased slots {}",
        mib(s.data_bytes),
        mib(s.swcc_metadata_bytes),
        s.hwcc_bytes as f64 / 1024.0,
        s.leased_slots
    );
}

/// Prints the per-worker table; `failed` lists (index, pid, exit status) of workers that gave no
/// summary.
fn print_summary(
    summaries: &[WorkerSummary],
    failed: &[(usize, u32, String)],
    total: &WorkerSummary,
    stats: &Stats,
    elapsed: Duration,
) {
    println!();
    println!(
        "{:>6} {:>8} {:>9} {:>9} {:>9} {:>13} {:>9} {:>13} {:>7}",
        "worker", "pid", "allocs", "frees", "local", "remote(xproc)", "sent", "MiB verified", "ms"
    );
    let line = |w: &str, pid: &str, s: &WorkerSummary| {
        println!(
            "{w:>6} {pid:>8} {:>9} {:>9} {:>9} {:>13} {:>9} {:>13.1} {:>7}",
            s.allocs,
            s.frees,
            s.local_frees,
            s.remote_frees,
            s.sent,
            mib(s.bytes_verified),
            s.millis
        )
    };
    for s in summaries {
        line(&s.index.to_string(), &s.pid.to_string(), s);
    }
    for (index, pid, status) in failed {
        println!("{index:>6} {pid:>8} FAILED: {status}");
    }
    let total = WorkerSummary { millis: elapsed.as_millis() as u64, ..total.clone() };
    line("total", "", &total);
    println!(
        "cross-process frees reported by workers: {}; remote frees counted by the library: {}",
        total.remote_frees, stats.counters.remote_frees
    );
}

#[allow(clippy::too_many_arguments)]
fn write_ndjson(
    path: &PathBuf,
    p: &Params,
    heap: &str,
    summaries: &[WorkerSummary],
    total: &WorkerSummary,
    report: &cxlalloc::Report,
    elapsed: Duration,
    failures: &[String],
) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f =
        OpenOptions::new().create(true).append(true).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for s in summaries {
        writeln!(f, "{}", serde_json::json!({ "bench": "demo", "heap": heap, "params": p, "worker": s }))?;
    }
    let line = serde_json::json!({
        "bench": "demo",
        "heap": heap,
        "params": p,
        "total": total,
        "elapsed_ms": elapsed.as_millis() as u64,
        "check_clean": report.is_clean(),
        "live_blocks": report.live_blocks(),
        "failures": failures,
    });
    writeln!(f, "{line}")?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Worker

fn worker(p: &Params, name: &str, index: usize) -> Result<(), Error> {
    if index >= p.processes {
        return Err(format!("worker index {index} out of range (processes = {})", p.processes).into());
    }
    let started = Instant::now();
    let heap = Heap::open(name).map_err(|e| format!("opening heap {name}: {e}"))?;
    // Acquire: pairs with the parent's Release publication of the initialized board.
    let off = heap.root(BOARD_ROOT).ok_or("heap has no root 0")?.load(Ordering::Acquire);
    let board = Board::open(&heap, off, p.total_threads())?;
    let pid = std::process::id();

    let results: Vec<Result<(ThreadInfo, WorkerSummary), Error>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..p.threads)
            .map(|t| {
                let heap = &heap;
                s.spawn(move || {
                    let r = worker_thread(heap, board, p, index, t);
                    if r.is_err() {
                        board.abort();
                    }
                    r
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap_or_else(|_| Err("worker thread panicked".into()))).collect()
    });

    let mut total = WorkerSummary { index, pid, ..WorkerSummary::default() };
    let mut errors = Vec::new();
    for (t, r) in results.into_iter().enumerate() {
        match r {
            Ok((info, s)) => {
                let to = p.consumer_of(index * p.threads + t) / p.threads;
                let from = p.producer_of(index * p.threads + t) / p.threads;
                println!(
                    "[worker {index} pid {pid}] thread {t} (slot {}): allocated {} blocks ({:.1} MiB), passed {} to worker {to}, \
                     freed {} of its own, freed {} from worker {from} (cross-process), verified {:.1} MiB",
                    info.slot,
                    s.allocs,
                    mib(info.bytes_allocated),
                    s.sent,
                    s.local_frees,
                    s.remote_frees,
                    mib(s.bytes_verified)
                );
                total.add(&s);
            }
            Err(e) => errors.push(format!("thread {t}: {e}")),
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("; ").into());
    }
    total.millis = started.elapsed().as_millis() as u64;
    println!("{RESULT}{}", serde_json::to_string(&total)?);
    Ok(())
}

struct ThreadInfo {
    slot: u32,
    bytes_allocated: u64,
}

/// A block this thread allocated and still holds.
struct Held {
    ptr: NonNull<u8>,
    stamp: Stamp,
}

/// Checks a block against its stamp and frees it; returns the bytes verified.
fn verify_and_free(th: &ThreadHandle, ptr: NonNull<u8>, expect_producer: u32) -> Result<(Stamp, u64), Error> {
    let usable = th.usable_size(ptr)?;
    if usable < STAMP_HEADER {
        return Err(format!("block of usable size {usable} cannot hold a stamp").into());
    }
    // SAFETY: `usable_size` confirmed `ptr` starts an allocated block of at least STAMP_HEADER
    // bytes, and the producer handed the block over (ring Release/Acquire) before this read.
    let stamp = Stamp::read(unsafe { &*ptr.as_ptr().cast::<[u8; STAMP_HEADER]>() });
    if stamp.producer != expect_producer || stamp.size > usable as u64 || (stamp.size as usize) < STAMP_HEADER {
        return Err(format!(
            "bad stamp {stamp:?} in block of usable size {usable} (expected producer {expect_producer})"
        )
        .into());
    }
    // SAFETY: `stamp.size <= usable`, the block is allocated and now exclusively ours.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), stamp.size as usize) };
    stamp.verify(bytes).map_err(|at| format!("block {stamp:?}: byte {at} is wrong"))?;
    th.free(ptr)?;
    Ok((stamp, stamp.size))
}

fn worker_thread(
    heap: &Heap,
    board: Board<'_>,
    p: &Params,
    index: usize,
    t: usize,
) -> Result<(ThreadInfo, WorkerSummary), Error> {
    let g = index * p.threads + t;
    let outbound: &Ring = board.ring(p.consumer_of(g)).ok_or("outbound ring missing")?;
    let inbound: &Ring = board.ring(g).ok_or("inbound ring missing")?;
    let producer = p.producer_of(g) as u32;
    let th = heap.attach()?;
    let mut rng = Rng::new(p.seed, g as u64);
    let quota = p.blocks_of_thread(t);

    let mut s = WorkerSummary::default();
    let mut bytes_allocated = 0u64;
    let mut seq = 0u32;
    let mut pending: Option<u64> = None;
    let mut local: VecDeque<Held> = VecDeque::with_capacity(LOCAL_WINDOW + 1);
    let mut last_seq_in: Option<u32> = None;
    let mut closed = false;
    let mut idle_since: Option<Instant> = None;

    loop {
        let mut progress = false;
        if pending.is_none() && u64::from(seq) < quota {
            let size = pick_size(&mut rng);
            let ptr = th.alloc(size)?;
            let stamp = Stamp { producer: g as u32, seq, size: size as u64 };
            // SAFETY: the block is `size` bytes, allocated just now, and ours.
            stamp.write(unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), size) });
            seq += 1;
            s.allocs += 1;
            bytes_allocated += size as u64;
            if rng.one_in(4) {
                local.push_back(Held { ptr, stamp });
                if local.len() > LOCAL_WINDOW {
                    free_local(&th, &mut local, &mut s)?;
                }
            } else {
                pending = Some(heap.offset_of(ptr.as_ptr())?.raw());
            }
            progress = true;
        }
        if let Some(off) = pending {
            if outbound.push(off) {
                pending = None;
                s.sent += 1;
                progress = true;
            }
        }
        if !closed && pending.is_none() && u64::from(seq) == quota {
            outbound.close();
            closed = true;
        }
        for _ in 0..POP_BATCH {
            let Some(off) = inbound.pop() else { break };
            let ptr =
                heap.pointer::<u8>(Offset::from_raw(off)).map_err(|e| format!("offset {off:#x} from the ring: {e}"))?;
            let (stamp, bytes) = verify_and_free(&th, ptr, producer)?;
            if last_seq_in.is_some_and(|last| stamp.seq <= last) {
                return Err(format!("block {stamp:?} arrived after sequence {last_seq_in:?}").into());
            }
            last_seq_in = Some(stamp.seq);
            s.remote_frees += 1;
            s.frees += 1;
            s.bytes_verified += bytes;
            progress = true;
        }
        if closed && inbound.is_drained() {
            break;
        }
        if progress {
            idle_since = None;
        } else {
            if board.aborted() {
                return Err("stopping: another participant failed".into());
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() > STALL {
                return Err(format!(
                    "no progress for {STALL:?}: worker {} stopped sending",
                    producer as usize / p.threads
                )
                .into());
            }
            std::thread::yield_now();
        }
    }
    while !local.is_empty() {
        free_local(&th, &mut local, &mut s)?;
    }
    Ok((ThreadInfo { slot: th.slot(), bytes_allocated }, s))
}

fn free_local(th: &ThreadHandle, local: &mut VecDeque<Held>, s: &mut WorkerSummary) -> Result<(), Error> {
    if let Some(h) = local.pop_front() {
        let (stamp, bytes) = verify_and_free(th, h.ptr, h.stamp.producer)?;
        if stamp != h.stamp {
            return Err(format!("held block changed stamp: {:?} became {stamp:?}", h.stamp).into());
        }
        s.local_frees += 1;
        s.frees += 1;
        s.bytes_verified += bytes;
    }
    Ok(())
}
