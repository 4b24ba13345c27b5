//! The KV store and its benchmarks (YCSB, memcached) with small parameters: concurrent
//! correctness on cxlalloc and mimalloc, across real processes on one `/dev/shm` heap, and
//! parameter validation. Fixed seeds; not a benchmark.
//!
//! Every test holds `serial()`: the fork tests must not copy the address space while another
//! test thread holds a lock (the heap registry, the allocator's), and running one at a time
//! keeps the binary inside its time budget on two cores anyway.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cxlalloc::{Config, Heap};
use cxlalloc_bench::allocator::{Allocator, Cxl, Global, Handles};
use cxlalloc_bench::barrier::{self, Barrier};
use cxlalloc_bench::bench::kv::dist::{Rng, Zipfian};
use cxlalloc_bench::bench::kv::{Kv, KvThread, Resize};
use cxlalloc_bench::bench::memcached::Memcached;
use cxlalloc_bench::bench::ycsb::Ycsb;
use cxlalloc_bench::bench::{self, Benchmark, Ctx, Params, Phases, Report, Shape};
use cxlalloc_bench::shm::{Carver, SharedArea};
use cxlalloc_bench::trace::{Op, Request, TraceWriter};
use cxlalloc_bench::Error;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn words(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

fn anon_cxl() -> (Heap, Cxl) {
    let heap = Heap::anonymous(&Config::with_capacity(256 << 20)).unwrap();
    (heap.clone(), Cxl::new(heap, "cxlalloc"))
}

/// The heap holds no block and no inconsistency.
fn assert_heap_empty(heap: &Heap, what: &str) {
    let report = heap.check();
    assert!(report.is_clean(), "{what}: {report}");
    let live: u64 = report.brackets.iter().map(|b| b.live_blocks()).sum();
    assert_eq!(live, 0, "{what}: blocks left live: {report}");
}

fn key(i: u64) -> Vec<u8> {
    // Variable-length keys (7 to 10 bytes), so key sizes and tails vary.
    format!("k{i:0>w$}", w = 6 + (i % 4) as usize).into_bytes()
}

// ---------------------------------------------------------------------------------------------
// The table, in one process

/// Four threads mix every operation over one small key space, then tear the table down.
/// Returns (allocated, freed, verified) summed over the threads.
fn mixed_ops_on<A: Allocator>(alloc: &A) -> (u64, u64, u64) {
    const THREADS: usize = 4;
    const KEYS: u64 = 1500;
    const OPS: u64 = 12_000;
    let sizes = Kv::word_sizes(THREADS, 8);
    let area = words(Carver::words_for(&sizes));
    let kv = Kv::carve(&mut Carver::new(&area), THREADS, 8).unwrap();
    let barrier = std::sync::Barrier::new(THREADS);
    let totals = std::thread::scope(|s| {
        let joins: Vec<_> = (0..THREADS)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut th = alloc.thread().unwrap();
                    let mut kt = KvThread::new(kv, Handles::of(alloc), &mut th, t).unwrap();
                    let mut rng = Rng::new(100 + t as u64);
                    for _ in 0..OPS {
                        let k = key(rng.below(KEYS));
                        let len = rng.below(300) as u32;
                        match rng.below(10) {
                            0..=3 => {
                                kt.get(&k).unwrap();
                            }
                            4..=6 => {
                                kt.set(&k, len).unwrap();
                            }
                            7 => {
                                kt.delete(&k).unwrap();
                            }
                            8 => {
                                kt.add(&k, len).unwrap();
                            }
                            _ => {
                                let resize = [Resize::To(len), Resize::Grow(3), Resize::Keep][rng.below(3) as usize];
                                kt.replace(&k, resize).unwrap();
                            }
                        }
                    }
                    barrier.wait();
                    kt.free_retired().unwrap();
                    barrier.wait();
                    kt.teardown(t, THREADS).unwrap();
                    (kt.allocated, kt.freed, kt.verified)
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    });
    assert!(kv_is_empty(&area), "tear-down leaves every bucket empty");
    totals
}

/// Every bucket and announcement is back to 0 (only the global epoch word may be set).
fn kv_is_empty(area: &[AtomicU64]) -> bool {
    area.iter().filter(|w| w.load(Ordering::Relaxed) != 0).count() <= 1
}

#[test]
fn concurrent_mixed_operations_verify_and_free_every_block_on_cxlalloc() {
    let _g = serial();
    let (heap, cxl) = anon_cxl();
    let (allocated, freed, verified) = mixed_ops_on(&cxl);
    assert_eq!(allocated, freed);
    assert!(verified > 5_000, "{verified} values verified");
    assert_heap_empty(&heap, "after tear-down");
}

#[test]
fn concurrent_mixed_operations_verify_and_free_every_block_on_mimalloc() {
    let _g = serial();
    let (allocated, freed, verified) = mixed_ops_on(&Global::mimalloc());
    assert_eq!(allocated, freed);
    assert!(verified > 5_000, "{verified} values verified");
}

#[test]
fn racing_inserts_of_the_same_keys_leave_one_node_per_key() {
    let _g = serial();
    const THREADS: usize = 4;
    const KEYS: u64 = 3000;
    let (heap, cxl) = anon_cxl();
    // 16 buckets: every insert races with the others' inserts into the same heads.
    let area = words(Carver::words_for(&Kv::word_sizes(THREADS, 4)));
    let kv = Kv::carve(&mut Carver::new(&area), THREADS, 4).unwrap();
    let barrier = std::sync::Barrier::new(THREADS);
    let sums = std::thread::scope(|s| {
        let joins: Vec<_> = (0..THREADS)
            .map(|t| {
                let (barrier, cxl) = (&barrier, &cxl);
                s.spawn(move || {
                    let mut th = cxl.thread().unwrap();
                    let mut kt = KvThread::new(kv, Handles::of(cxl), &mut th, t).unwrap();
                    barrier.wait();
                    for i in 0..KEYS {
                        kt.set(&key(i), 16).unwrap();
                    }
                    barrier.wait();
                    if t == 0 {
                        assert_eq!(kt.census().unwrap(), (KEYS, KEYS), "(nodes, live values)");
                    }
                    for i in 0..KEYS {
                        assert_eq!(kt.get(&key(i)).unwrap(), Some(16));
                    }
                    barrier.wait();
                    kt.free_retired().unwrap();
                    barrier.wait();
                    kt.teardown(t, THREADS).unwrap();
                    (kt.allocated, kt.freed)
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    assert_eq!(sums.0, sums.1);
    assert_heap_empty(&heap, "after tear-down");
}

#[test]
fn a_deleted_key_reads_as_a_miss_and_comes_back_on_the_next_set() {
    let _g = serial();
    let alloc = Global::mimalloc();
    let area = words(Carver::words_for(&Kv::word_sizes(1, 4)));
    let kv = Kv::carve(&mut Carver::new(&area), 1, 4).unwrap();
    let mut th = alloc.thread().unwrap();
    let mut kt = KvThread::new(kv, Handles::of(&alloc), &mut th, 0).unwrap();
    assert!(!kt.set(b"key", 5).unwrap(), "a new key replaces nothing");
    assert!(kt.set(b"key", 7).unwrap(), "a second set replaces");
    assert!(kt.delete(b"key").unwrap());
    assert_eq!(kt.get(b"key").unwrap(), None);
    assert!(!kt.delete(b"key").unwrap(), "deleting a tombstone finds nothing");
    assert!(!kt.replace(b"key", Resize::Keep).unwrap());
    assert!(kt.add(b"key", 0).unwrap(), "add fills a tombstone");
    assert_eq!(kt.get(b"key").unwrap(), Some(0));
    assert_eq!(kt.census().unwrap(), (1, 1), "the node was reused");
    kt.free_retired().unwrap();
    kt.teardown(0, 1).unwrap();
    assert_eq!(kt.allocated, kt.freed);
}

// ---------------------------------------------------------------------------------------------
// Across processes

/// A unique run directory in `/dev/shm`, removed (heap unlinked) on drop.
struct RunDir(PathBuf);

impl RunDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(format!("/dev/shm/cxlbench-kv-test-{}-{n}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        RunDir(dir)
    }

    fn heap(&self) -> PathBuf {
        self.0.join("heap")
    }

    fn area(&self) -> PathBuf {
        self.0.join("area")
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = Heap::unlink_at(&self.heap());
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `msg` to fd 2 without taking the (possibly copied-locked) stderr lock.
fn raw_eprint(msg: &str) {
    // SAFETY: writes initialized bytes of a live string to fd 2.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// Forks a child that runs `body` and `_exit`s: 0 on `Ok`, 1 (after printing why) on `Err`, 101
/// on a panic. It never returns into the test harness.
fn fork_child(body: impl FnOnce() -> Result<(), Error>) -> Pid {
    // SAFETY: the caller holds `serial()`, so no other test thread is inside the allocator or
    // the heap registry; the child only runs `body` and `_exit`s.
    match unsafe { fork() }.unwrap() {
        ForkResult::Parent { child } => child,
        ForkResult::Child => {
            let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                Ok(Ok(())) => 0,
                Ok(Err(e)) => {
                    raw_eprint(&format!("child {} failed: {e}\n", std::process::id()));
                    1
                }
                Err(_) => 101,
            };
            // SAFETY: ends the child without running the parent's destructors; always sound.
            unsafe { libc::_exit(code) }
        }
    }
}

/// Waits for `pid` at most 30 s (then kills it) and asserts it exited 0.
fn expect_success(pid: Pid) {
    let start = Instant::now();
    loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)).unwrap() {
            WaitStatus::StillAlive => {}
            WaitStatus::Exited(_, code) => {
                assert_eq!(code, 0, "child {pid} failed (its stderr says why)");
                return;
            }
            other => panic!("child {pid} ended abnormally: {other:?}"),
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let _ = waitpid(pid, None);
            panic!("child {pid} hung: killed");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Spins until `word` is at least `value`; an error after 20 s.
fn await_word(word: &AtomicU64, value: u64) -> Result<(), Error> {
    let start = Instant::now();
    while word.load(Ordering::Acquire) < value {
        if start.elapsed() > Duration::from_secs(20) {
            return Err("timed out waiting for the other process".into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

const XP_BUCKETS_LOG2: u32 = 10;
const XP_THREADS: usize = 3; // two children and the parent, which tears down
const XP_KEYS: u64 = 1500;
const XP_SHARED_KEYS: u64 = 300;
const XP_ROUNDS: u64 = 3;

/// The table plus, per child, [phase, verified, allocated, freed].
fn xp_layout(area: &[AtomicU64]) -> Result<(Kv<'_>, &[AtomicU64]), Error> {
    let mut c = Carver::new(area);
    let kv = Kv::carve(&mut c, XP_THREADS, XP_BUCKETS_LOG2)?;
    Ok((kv, c.take(8)?))
}

fn xp_words() -> usize {
    let [a, b, c] = Kv::word_sizes(XP_THREADS, XP_BUCKETS_LOG2);
    Carver::words_for(&[a, b, c, 8])
}

fn own_key(child: u64, i: u64) -> Vec<u8> {
    format!("child{child}-{i}").into_bytes()
}

/// Child `k`: inserts its keys, then (once the other has too) reads and verifies the other's
/// keys while replacing its own and fighting over shared keys; frees its retired values once
/// both are done, and reports its counts.
fn xp_child(dir: &Path, k: u64) -> Result<(), Error> {
    let area = SharedArea::open(&dir.join("area"))?;
    let (kv, out) = xp_layout(area.words())?;
    let mine = &out[4 * k as usize..4 * k as usize + 4];
    let other = &out[4 * (1 - k) as usize..4 * (1 - k) as usize + 4];
    let cxl = Cxl::new(Heap::open_at(&dir.join("heap"))?, "cxlalloc");
    let mut th = cxl.thread()?;
    let mut kt = KvThread::new(kv, Handles::of(&cxl), &mut th, k as usize)?;
    for i in 0..XP_KEYS {
        kt.set(&own_key(k, i), (i % 200) as u32)?;
    }
    mine[0].store(1, Ordering::Release);
    await_word(&other[0], 1)?;
    for round in 0..XP_ROUNDS {
        for i in 0..XP_KEYS {
            if kt.get(&own_key(1 - k, i))?.is_none() {
                return Err(format!("key {i} of the other process missing").into());
            }
            kt.set(&own_key(k, i), ((i + round) % 300) as u32)?;
            kt.set(format!("shared-{}", i % XP_SHARED_KEYS).as_bytes(), (i % 50) as u32)?;
        }
    }
    mine[0].store(2, Ordering::Release);
    await_word(&other[0], 2)?;
    kt.free_retired()?;
    mine[1].store(kt.verified, Ordering::Relaxed);
    mine[2].store(kt.allocated, Ordering::Relaxed);
    mine[3].store(kt.freed, Ordering::Release);
    drop(kt);
    drop(th);
    mine[0].store(3, Ordering::Release);
    Ok(())
}

#[test]
fn two_processes_share_one_table_on_a_dev_shm_heap() {
    let _g = serial();
    let dir = RunDir::new("table");
    let heap = Heap::create_at(&dir.heap(), &Config::with_capacity(256 << 20)).unwrap();
    let area = SharedArea::create(&dir.area(), xp_words()).unwrap();
    let children: Vec<Pid> = (0..2).map(|k| fork_child(|| xp_child(&dir.0, k))).collect();
    for pid in children {
        expect_success(pid);
    }
    let (kv, out) = xp_layout(area.words()).unwrap();
    let (mut allocated, mut freed) = (0, 0);
    for k in 0..2 {
        assert_eq!(out[4 * k].load(Ordering::Acquire), 3, "child {k} finished");
        assert_eq!(out[4 * k + 1].load(Ordering::Relaxed), XP_ROUNDS * XP_KEYS, "child {k} verified every read");
        allocated += out[4 * k + 2].load(Ordering::Relaxed);
        freed += out[4 * k + 3].load(Ordering::Relaxed);
    }
    let cxl = Cxl::new(heap.clone(), "cxlalloc");
    let mut th = cxl.thread().unwrap();
    let mut kt = KvThread::new(kv, Handles::of(&cxl), &mut th, 2).unwrap();
    let keys = 2 * XP_KEYS + XP_SHARED_KEYS;
    assert_eq!(kt.census().unwrap(), (keys, keys), "(nodes, live values): one node per key");
    for i in 0..XP_KEYS {
        assert!(kt.get(&own_key(0, i)).unwrap().is_some() && kt.get(&own_key(1, i)).unwrap().is_some());
    }
    kt.teardown(0, 1).unwrap();
    assert_eq!(allocated + kt.allocated, freed + kt.freed, "every block allocated in either process freed");
    drop(kt);
    drop(th);
    assert_heap_empty(&heap, "after tear-down");
}

// ---------------------------------------------------------------------------------------------
// Whole benchmarks through their `Benchmark` interface

/// Runs `b` on `threads` scoped threads of one process.
fn run_in_process<B: Benchmark, A: Allocator>(
    b: &B,
    alloc: &A,
    threads: usize,
    seed: u64,
) -> Result<Vec<Report>, Error> {
    let shared = words(b.shared_words());
    let barrier_words = words(barrier::WORDS);
    let barrier = Barrier::new(&barrier_words, threads, Duration::from_secs(30))?;
    let on_stop = || {};
    let shape = |thread| Shape { processes: 1, threads, process: 0, thread };
    std::thread::scope(|s| {
        let joins: Vec<_> = (0..threads)
            .map(|t| {
                let (shared, on_stop) = (&shared, &on_stop);
                s.spawn(move || -> Result<Report, Error> {
                    let ctx = Ctx { alloc, handles: Handles::of(alloc), shared, shape: shape(t), seed };
                    let mut th = alloc.thread()?;
                    let mut phases = Phases::new(barrier, on_stop);
                    // As the harness worker does: a failing thread aborts the run.
                    let report = b.thread(&ctx, &mut th, &mut phases).inspect_err(|_| phases.abort())?;
                    phases.secs()?;
                    Ok(report)
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().map_err(|_| Error::from("thread panicked"))?).collect()
    })
}

fn sum(reports: &[Report], f: impl Fn(&Report) -> u64) -> u64 {
    reports.iter().map(f).sum()
}

fn extra(reports: &[Report], key: &str) -> u64 {
    reports.iter().map(|r| r.extra[key].as_u64().unwrap()).sum()
}

/// Σallocated = Σfreed and every verified value was a read hit.
fn check_accounting(reports: &[Report], what: &str) {
    assert_eq!(sum(reports, |r| r.allocated), sum(reports, |r| r.freed), "{what}: allocated vs freed");
    assert!(sum(reports, |r| r.allocated) > 0, "{what}");
}

fn ycsb_params(workload: &str, insert: &str) -> Params {
    Params::of(&[
        ("workload", Value::from(workload)),
        ("insert", Value::from(insert)),
        ("records", Value::from(2000)),
        ("ops", Value::from(4000)),
        ("value_size", Value::from(200)),
        ("buckets_log2", Value::from(10)),
    ])
}

fn ycsb_runs_on<A: Allocator>(alloc: &A, heap: Option<&Heap>) {
    const THREADS: usize = 3;
    for (workload, insert) in [("load", "new"), ("a", "new"), ("a", "overwrite"), ("d", "new"), ("d", "overwrite")] {
        let what = format!("{} ycsb {workload}/{insert}", alloc.name());
        let y = Ycsb::new(&ycsb_params(workload, insert), 1, THREADS).unwrap();
        let reports = run_in_process(&y, alloc, THREADS, 42).unwrap_or_else(|e| panic!("{what}: {e}"));
        check_accounting(&reports, &what);
        let ops = sum(&reports, |r| r.ops);
        assert_eq!(ops, if workload == "load" { 2000 } else { 4000 }, "{what}");
        assert_eq!(sum(&reports, |r| r.verified), extra(&reports, "read_hits"), "{what}: every hit verified");
        assert!(reports.iter().all(|r| r.extra["insert"] == insert), "{what}: insert mode recorded");
        if workload == "load" {
            assert_eq!(extra(&reports, "inserts"), 2000, "{what}");
        } else {
            let (reads, hits) = (extra(&reports, "reads"), extra(&reports, "read_hits"));
            // Workload A deletes hot keys for good when inserts make new ones: fewer hits.
            let floor = if workload == "d" { reads / 2 } else { reads / 20 };
            assert!(hits > floor, "{what}: {hits} hits of {reads} reads");
            let read_share = reads as f64 / ops as f64;
            let expect = if workload == "a" { 0.5 } else { 0.95 };
            assert!((read_share - expect).abs() < 0.05, "{what}: read share {read_share}");
        }
        if let Some(heap) = heap {
            assert_heap_empty(heap, &what);
        }
    }
}

#[test]
fn ycsb_load_a_and_d_free_everything_and_verify_every_hit_on_cxlalloc() {
    let _g = serial();
    let (heap, cxl) = anon_cxl();
    ycsb_runs_on(&cxl, Some(&heap));
}

#[test]
fn ycsb_load_a_and_d_free_everything_and_verify_every_hit_on_mimalloc() {
    let _g = serial();
    ycsb_runs_on(&Global::mimalloc(), None);
}

#[test]
fn ycsb_a_with_paper_sized_values_is_deterministic_per_seed() {
    let _g = serial();
    let p = Params::of(&[("records", Value::from(1000)), ("ops", Value::from(2000)), ("buckets_log2", Value::from(8))]);
    let y = Ycsb::new(&p, 1, 1).unwrap();
    let a = run_in_process(&y, &Global::mimalloc(), 1, 7).unwrap();
    let b = run_in_process(&y, &Global::mimalloc(), 1, 7).unwrap();
    assert_eq!(a[0].extra, b[0].extra, "one thread, one seed: the same operations and outcomes");
    assert_eq!((a[0].allocated, a[0].verified), (b[0].allocated, b[0].verified));
    check_accounting(&a, "ycsb a, 960-byte values");
}

#[test]
fn memcached_replays_every_synthetic_cluster_and_frees_everything() {
    let _g = serial();
    let (heap, cxl) = anon_cxl();
    for cluster in ["MC-12", "MC-15", "MC-31", "MC-37"] {
        let p = Params::of(&[
            ("cluster", Value::from(cluster)),
            ("requests", Value::from(2500)),
            ("buckets_log2", Value::from(10)),
        ]);
        let m = Memcached::new(&p, 1, 2).unwrap();
        let reports = run_in_process(&m, &cxl, 2, 3).unwrap_or_else(|e| panic!("{cluster}: {e}"));
        check_accounting(&reports, cluster);
        assert_eq!(sum(&reports, |r| r.ops), 2500, "{cluster}");
        let (hits, misses, sets) = (extra(&reports, "hits"), extra(&reports, "misses"), extra(&reports, "sets"));
        assert_eq!(hits + misses + sets, 2500, "{cluster}: synthetic traces hold gets and sets only");
        assert_eq!(sum(&reports, |r| r.verified), hits, "{cluster}");
        assert_heap_empty(&heap, cluster);
    }
}

fn write_trace(path: &Path, lines: &[(&str, Op, u32)]) {
    let mut w = TraceWriter::new(std::io::BufWriter::new(std::fs::File::create(path).unwrap()));
    for (i, &(key, op, value_size)) in lines.iter().enumerate() {
        let r = Request {
            timestamp: i as u64,
            key: key.as_bytes().to_vec(),
            key_size: key.len() as u32,
            value_size,
            client_id: 0,
            op,
            ttl: 0,
        };
        w.write(&r).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn memcached_maps_every_trace_operation_onto_the_store() {
    let _g = serial();
    let dir = RunDir::new("trace");
    let path = dir.0.join("trace.csv");
    write_trace(
        &path,
        &[
            ("k1", Op::Set, 10),
            ("k1", Op::Get, 0),      // hit
            ("k2", Op::Get, 0),      // miss
            ("k1", Op::Add, 5),      // not stored: present
            ("k2", Op::Add, 0),      // stored, an empty value
            ("k2", Op::Get, 0),      // hit
            ("k3", Op::Replace, 4),  // not stored: absent
            ("k1", Op::Replace, 20), // stored
            ("k1", Op::Append, 5),   // stored
            ("k1", Op::Incr, 0),     // stored
            ("k1", Op::Delete, 0),   // delete
            ("k1", Op::Get, 0),      // miss
            ("k1", Op::Delete, 0),   // delete miss
            ("k2", Op::Cas, 7),      // stored
            ("k4", Op::Prepend, 3),  // not stored
            ("k2", Op::Decr, 0),     // stored
            ("k2", Op::Gets, 0),     // hit
        ],
    );
    let p = Params::of(&[("trace", Value::from(path.display().to_string())), ("requests", Value::from(0))]);
    let m = Memcached::new(&p, 1, 1).unwrap();
    let info = m.trace_info(1);
    assert_eq!(info["synthetic"], false);
    assert_eq!(info["path"], path.display().to_string());
    let reports = run_in_process(&m, &Global::mimalloc(), 1, 1).unwrap();
    let r = &reports[0];
    let got: Vec<u64> = ["hits", "misses", "sets", "stored", "not_stored", "deletes", "delete_misses"]
        .iter()
        .map(|k| r.extra[*k].as_u64().unwrap())
        .collect();
    assert_eq!(got, [3, 2, 1, 6, 3, 1, 1], "hits, misses, sets, stored, not_stored, deletes, delete_misses");
    assert_eq!((r.ops, r.verified), (17, 3));
    assert_eq!(r.allocated, r.freed);
}

/// Child `k` of a two-process YCSB run: thread `k` of 2, with the barrier in the control area.
fn ycsb_child(dir: &Path, k: usize, y: &Ycsb, out_from: usize) -> Result<(), Error> {
    let area = SharedArea::open(&dir.join("area"))?;
    let all = area.words();
    let barrier = Barrier::new(&all[..barrier::WORDS], 2, Duration::from_secs(20))?;
    let shared = &all[barrier::WORDS..barrier::WORDS + y.shared_words()];
    let cxl = Cxl::new(Heap::open_at(&dir.join("heap"))?, "cxlalloc");
    let on_stop = || {};
    let ctx = Ctx {
        alloc: &cxl,
        handles: Handles::of(&cxl),
        shared,
        shape: Shape { processes: 2, threads: 2, process: k, thread: k },
        seed: 5,
    };
    let mut th = cxl.thread()?;
    let mut phases = Phases::new(barrier, &on_stop);
    let report = y.thread(&ctx, &mut th, &mut phases)?;
    let out = &all[out_from + 4 * k..out_from + 4 * k + 4];
    out[0].store(report.allocated, Ordering::Relaxed);
    out[1].store(report.freed, Ordering::Relaxed);
    out[2].store(report.verified, Ordering::Relaxed);
    out[3].store(report.ops, Ordering::Release);
    Ok(())
}

#[test]
fn ycsb_runs_across_two_processes_on_one_dev_shm_heap() {
    let _g = serial();
    let dir = RunDir::new("ycsb");
    let y = Ycsb::new(&ycsb_params("a", "new"), 2, 2).unwrap();
    let heap = Heap::create_at(&dir.heap(), &Config::with_capacity(256 << 20)).unwrap();
    let out_from = barrier::WORDS + y.shared_words();
    let area = SharedArea::create(&dir.area(), out_from + 8).unwrap();
    let children: Vec<Pid> = (0..2).map(|k| fork_child(|| ycsb_child(&dir.0, k, &y, out_from))).collect();
    for pid in children {
        expect_success(pid);
    }
    let out = &area.words()[out_from..];
    let field = |i: usize| out[i].load(Ordering::Acquire) + out[4 + i].load(Ordering::Acquire);
    assert_eq!(field(3), 4000, "timed operations over both processes");
    assert_eq!(field(0), field(1), "blocks allocated in either process were all freed");
    assert!(field(2) > 0, "values were read and verified");
    assert_heap_empty(&heap, "after a two-process run");
}

// ---------------------------------------------------------------------------------------------
// Key distributions and parameters

#[test]
fn the_zipfian_generator_is_deterministic_per_seed() {
    let z = Zipfian::new(100_000, 0.99).unwrap();
    let draw = |seed| {
        let mut rng = Rng::new(seed);
        (0..1000).map(|_| z.next(&mut rng)).collect::<Vec<_>>()
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
}

#[test]
fn zipfian_099_gives_the_top_item_its_theoretical_share_and_falls_off() {
    const N: u64 = 1000;
    const DRAWS: u64 = 200_000;
    let z = Zipfian::new(N, 0.99).unwrap();
    let mut rng = Rng::new(9);
    let mut counts = vec![0u64; N as usize];
    for _ in 0..DRAWS {
        counts[z.next(&mut rng) as usize] += 1;
    }
    let top = counts[0] as f64 / DRAWS as f64;
    // 1 / ζ(1000, 0.99) ≈ 0.13.
    assert!((top - z.top_share()).abs() < 0.1 * z.top_share(), "top share {top}, expected {}", z.top_share());
    assert!(counts[0] > counts[1] && counts[1] > counts[9] && counts[9] > counts[99], "{:?}", &counts[..10]);
    let top_tenth: u64 = counts[..100].iter().sum();
    assert!(top_tenth as f64 > 0.6 * DRAWS as f64, "the top 10 % of items draw most requests");
}

#[test]
fn unknown_and_malformed_benchmark_parameters_are_refused() {
    for p in [Params::of(&[("valuesize", Value::from(8))]), Params::of(&[("workload", Value::from("c"))])] {
        assert!(Ycsb::new(&p, 1, 1).is_err(), "{p:?}");
    }
    for p in [Params::of(&[("value_size", Value::from(8))]), Params::of(&[("cluster", Value::from("MC-1"))])] {
        assert!(Memcached::new(&p, 1, 1).is_err(), "{p:?}");
    }
}

#[test]
fn ycsb_and_memcached_are_registered() {
    struct Words;
    impl bench::Visit for Words {
        type Output = usize;
        fn visit<B: Benchmark>(self, b: &B) -> Result<usize, Error> {
            Ok(b.shared_words())
        }
    }
    for name in ["ycsb", "memcached"] {
        assert!(bench::NAMES.contains(&name));
        let p = Params::of(&[("buckets_log2", Value::from(4))]);
        assert!(bench::with_benchmark(name, &p, 1, 2, Words).unwrap() >= 16, "{name}");
    }
}
