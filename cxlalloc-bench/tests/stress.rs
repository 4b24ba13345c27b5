//! The stress benchmarks (xmalloc, larson, mstress) as the harness runs them: in one process on
//! scoped threads, and across forked processes sharing a `/dev/shm` heap and control area.
//! Small fixed parameters and seeds; not a benchmark, and no timing is asserted.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use cxlalloc::{Config, Heap};
use cxlalloc_bench::allocator::{Allocator, Cxl, Global, Handles};
use cxlalloc_bench::barrier::{self, Barrier};
use cxlalloc_bench::bench::larson::Larson;
use cxlalloc_bench::bench::mstress::Mstress;
use cxlalloc_bench::bench::xmalloc::{Xmalloc, OBJECTS_PER_CONTAINER};
use cxlalloc_bench::bench::{self, Benchmark, Ctx, Params, Phases, Report, Shape, Visit};
use cxlalloc_bench::shm::SharedArea;
use cxlalloc_bench::Error;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

/// Forking while another test thread holds a lock (in cxlalloc, the allocator, stdio) would
/// leave that lock held forever in the child: fork-based tests take this for writing, the
/// others for reading, so no other test runs while a test forks.
static FORK: RwLock<()> = RwLock::new(());

const SEED: u64 = 0x5eed;
const BARRIER_TIMEOUT: Duration = Duration::from_secs(30);

/// Sums of the reports of every thread of a run.
#[derive(Debug, Default, PartialEq, Eq)]
struct Totals {
    ops: u64,
    allocated: u64,
    freed: u64,
    verified: u64,
}

impl Totals {
    fn add(&mut self, r: &Report) {
        self.ops += r.ops;
        self.allocated += r.allocated;
        self.freed += r.freed;
        self.verified += r.verified;
    }

    /// As four control-area words (for a child process to hand back).
    fn store(&self, words: &[AtomicU64]) {
        for (w, v) in words.iter().zip([self.ops, self.allocated, self.freed, self.verified]) {
            w.fetch_add(v, Ordering::SeqCst);
        }
    }

    fn load(words: &[AtomicU64]) -> Self {
        let v: Vec<u64> = words.iter().map(|w| w.load(Ordering::SeqCst)).collect();
        Self { ops: v[0], allocated: v[1], freed: v[2], verified: v[3] }
    }
}

/// Runs threads `first..first + count` of a run of `shape_threads` threads over `processes`
/// processes, on `alloc`, with the barrier in `words[..barrier::WORDS]` and the benchmark's words
/// after it (what a harness worker does). A failing thread aborts the barrier so no thread
/// hangs.
fn run_threads<A: Allocator, B: Benchmark>(
    alloc: &A,
    bench: &B,
    words: &[AtomicU64],
    processes: usize,
    process: usize,
    threads: usize,
) -> Result<Totals, Error> {
    let (barrier_words, shared) = words.split_at(barrier::WORDS);
    let barrier = Barrier::new(barrier_words, threads, BARRIER_TIMEOUT)?;
    let first = bench::Shape::first_thread_of(threads, processes, process);
    let count = Shape::threads_of(threads, processes, process);
    let on_stop = || {};
    let reports: Vec<Result<Report, Error>> = std::thread::scope(|s| {
        let workers: Vec<_> = (first..first + count)
            .map(|thread| {
                let on_stop = &on_stop;
                s.spawn(move || {
                    let mut phases = Phases::new(barrier, on_stop);
                    let result = alloc.thread().and_then(|mut t| {
                        let ctx = Ctx {
                            alloc,
                            handles: Handles::of(alloc),
                            shared: &shared[..bench.shared_words()],
                            shape: Shape { processes, threads, process, thread },
                            seed: SEED,
                        };
                        bench.thread(&ctx, &mut t, &mut phases)
                    });
                    if result.is_err() {
                        phases.abort();
                    }
                    result
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err("benchmark thread panicked".into()))).collect()
    });
    let mut totals = Totals::default();
    for r in reports {
        totals.add(&r?);
    }
    Ok(totals)
}

/// Runs `bench` in this process on `threads` threads.
fn run_here<A: Allocator, B: Benchmark>(alloc: &A, bench: &B, threads: usize) -> Totals {
    let words: Vec<AtomicU64> = (0..barrier::WORDS + bench.shared_words()).map(|_| AtomicU64::new(0)).collect();
    run_threads(alloc, bench, &words, 1, 0, threads)
        .unwrap_or_else(|e| panic!("{} on {threads} threads: {e}", alloc.name()))
}

/// Asserts the heap is consistent and holds no live block.
fn assert_empty(heap: &Heap, what: &str) {
    let report = heap.check();
    let live: u64 = report.brackets.iter().map(|b| b.live_blocks()).sum();
    assert!(report.is_clean() && live == 0, "{what}: {live} live blocks: {report}");
}

/// Runs `make(threads)` for 2 and 4 threads on cxlalloc (anonymous heap, checked after every
/// run) and on mimalloc, handing each run's totals to `expect`.
fn on_both_allocators<B: Benchmark>(make: impl Fn(usize) -> B, expect: impl Fn(&B, usize, &Totals)) {
    let _guard = FORK.read().unwrap_or_else(|e| e.into_inner());
    let heap = Heap::anonymous(&Config::with_capacity(256 << 20)).unwrap();
    let cxl = Cxl::new(heap.clone(), "cxlalloc");
    let mimalloc = Global::mimalloc();
    for threads in [2, 4] {
        let bench = make(threads);
        let totals = run_here(&cxl, &bench, threads);
        expect(&bench, threads, &totals);
        assert_empty(&heap, &format!("cxlalloc, {threads} threads"));
        expect(&bench, threads, &run_here(&mimalloc, &bench, threads));
    }
}

fn xmalloc(threads: usize, processes: usize) -> Xmalloc {
    Xmalloc::new(&Params::of(&[("containers", 60), ("warmup_containers", 6), ("seed", 11)]), processes, threads)
        .unwrap()
}

fn expect_xmalloc(x: &Xmalloc, _threads: usize, t: &Totals) {
    let containers = x.containers + x.warmup_containers;
    let objects = containers * OBJECTS_PER_CONTAINER as u64;
    assert_eq!(t.allocated, objects + containers, "every object and container allocated");
    assert_eq!(t.freed, t.allocated, "and freed");
    assert_eq!(t.verified, objects, "every object verified by its consumer");
    assert_eq!(t.ops, 2 * x.objects(), "one op per timed allocation and per timed free");
}

fn larson(threads: usize, processes: usize) -> Larson {
    Larson::new(&Params::of(&[("slots", 100), ("ops", 20_000), ("rounds", 5), ("max_size", 2048)]), processes, threads)
        .unwrap()
}

fn expect_larson(l: &Larson, threads: usize, t: &Totals) {
    assert_eq!(t.ops, l.ops, "timed replacements");
    assert_eq!(t.allocated, (threads * l.slots) as u64 + l.ops, "initial fill plus one per replacement");
    assert_eq!(t.freed, t.allocated);
    assert_eq!(t.verified, t.freed, "every free verified");
}

fn mstress(threads: usize, processes: usize) -> Mstress {
    Mstress::new(
        &Params::of(&[("iterations", 40), ("objects_per_iter", 100), ("transfer_slots", 64)]),
        processes,
        threads,
    )
    .unwrap()
}

fn expect_mstress(m: &Mstress, _threads: usize, t: &Totals) {
    assert_eq!(t.allocated, m.iterations * m.objects_per_iter as u64);
    assert_eq!(t.freed, t.allocated);
    assert_eq!(t.verified, t.freed, "every free verified");
    assert!(t.ops > t.allocated && t.ops < t.allocated + t.freed, "timed allocations and some frees: {t:?}");
}

#[test]
fn xmalloc_frees_every_object_on_another_thread_and_verifies_it() {
    on_both_allocators(|threads| xmalloc(threads, 1), expect_xmalloc);
}

#[test]
fn larson_hands_arrays_around_and_frees_every_block() {
    on_both_allocators(|threads| larson(threads, 1), expect_larson);
}

#[test]
fn larson_on_one_thread_hands_its_array_to_itself() {
    let _guard = FORK.read().unwrap_or_else(|e| e.into_inner());
    let l = larson(1, 1);
    expect_larson(&l, 1, &run_here(&Global::mimalloc(), &l, 1));
}

#[test]
fn mstress_transfers_objects_and_drains_the_transfer_array() {
    on_both_allocators(|threads| mstress(threads, 1), expect_mstress);
}

/// A fresh directory in `/dev/shm`, removed on drop.
struct ShmDir(PathBuf);

impl ShmDir {
    fn new(what: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(format!("/dev/shm/cxlbench-stress-{}-{n}-{what}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = Heap::unlink_at(&self.0.join("heap"));
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Words for each process's [`Totals`] after the barrier and the benchmark's words.
const TOTALS: usize = 4;

/// Forks a child running process `process`'s threads of `bench`; the child never returns into
/// the test harness: it leaves with `_exit` (0 on success), after adding its totals to `words`.
fn fork_worker<B: Benchmark>(dir: &Path, bench: &B, processes: usize, process: usize, threads: usize) -> Pid {
    // SAFETY: no other test thread runs while the FORK lock is held for writing, and the child
    // only opens the heap and area, runs the benchmark and `_exit`s.
    match unsafe { fork() }.unwrap() {
        ForkResult::Parent { child } => child,
        ForkResult::Child => {
            let body = || -> Result<(), Error> {
                let area = SharedArea::open(&dir.join("area"))?;
                let words = area.words();
                let cxl = Cxl::new(Heap::open_at(&dir.join("heap"))?, "cxlalloc");
                let totals = run_threads(&cxl, bench, words, processes, process, threads)?;
                let at = barrier::WORDS + bench.shared_words();
                totals.store(&words[at..at + TOTALS]);
                Ok(())
            };
            let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                Ok(Ok(())) => 0,
                Ok(Err(e)) => {
                    use std::io::Write;
                    let _ = writeln!(std::io::stderr(), "worker process {process}: {e}");
                    1
                }
                Err(_) => 2,
            };
            // SAFETY: ends the child without running the parent's destructors or test harness.
            unsafe { libc::_exit(code) }
        }
    }
}

/// Waits for `child` (at most a minute, then kills it) and returns whether it exited with 0.
fn reap(child: Pid) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)).map_err(|e| e.to_string())? {
            WaitStatus::Exited(_, 0) => return Ok(()),
            WaitStatus::StillAlive if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            WaitStatus::StillAlive => {
                let _ = kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                return Err(format!("child {child} did not finish within a minute"));
            }
            other => return Err(format!("child {child} ended with {other:?}")),
        }
    }
}

/// Runs `bench` with `threads` threads in `processes` forked processes on one `/dev/shm` heap
/// and control area; checks the heap after they exit and returns the summed totals and the
/// heap's remote-free count.
fn run_across_processes<B: Benchmark>(what: &str, bench: &B, processes: usize, threads: usize) -> (Totals, u64) {
    let _guard = FORK.write().unwrap_or_else(|e| e.into_inner());
    let dir = ShmDir::new(what);
    let heap = Heap::create_at(&dir.0.join("heap"), &Config::with_capacity(256 << 20)).unwrap();
    let area = SharedArea::create(&dir.0.join("area"), barrier::WORDS + bench.shared_words() + TOTALS).unwrap();
    let children: Vec<Pid> = (0..processes).map(|p| fork_worker(&dir.0, bench, processes, p, threads)).collect();
    let outcomes: Vec<Result<(), String>> = children.into_iter().map(reap).collect();
    for (p, o) in outcomes.iter().enumerate() {
        assert!(o.is_ok(), "{what}: worker process {p}: {o:?}");
    }
    assert_empty(&heap, what);
    let at = barrier::WORDS + bench.shared_words();
    (Totals::load(&area.words()[at..at + TOTALS]), heap.stats().counters.remote_frees)
}

#[test]
fn xmalloc_across_two_processes_frees_remotely_and_leaves_the_heap_empty() {
    let x = xmalloc(2, 2);
    let (totals, remote) = run_across_processes("xmalloc", &x, 2, 2);
    expect_xmalloc(&x, 2, &totals);
    assert!(remote > 0, "the consumer's frees are remote");
}

#[test]
fn xmalloc_with_two_threads_in_each_of_two_processes_completes() {
    let x = xmalloc(4, 2);
    expect_xmalloc(&x, 4, &run_across_processes("xmalloc4", &x, 2, 4).0);
}

#[test]
fn larson_hands_arrays_across_processes() {
    let l = larson(2, 2);
    let (totals, remote) = run_across_processes("larson", &l, 2, 2);
    expect_larson(&l, 2, &totals);
    assert!(remote > 0, "blocks of a handed-over array are freed remotely");
}

#[test]
fn mstress_transfers_objects_across_processes() {
    let m = mstress(4, 2);
    expect_mstress(&m, 4, &run_across_processes("mstress", &m, 2, 4).0);
}

/// Constructs a benchmark through the registry and does nothing with it.
struct Construct;

impl Visit for Construct {
    type Output = ();

    fn visit<B: Benchmark>(self, _bench: &B) -> Result<(), Error> {
        Ok(())
    }
}

#[test]
fn the_registry_knows_the_stress_benchmarks_and_refuses_unknown_parameters() {
    for name in ["xmalloc", "larson", "mstress"] {
        assert!(bench::NAMES.contains(&name));
        bench::with_benchmark(name, &Params::default(), 1, 2, Construct).unwrap();
        let e = bench::with_benchmark(name, &Params::of(&[("bogus", 1)]), 1, 2, Construct).unwrap_err().to_string();
        assert!(e.contains("bogus"), "{name}: {e}");
    }
}

#[test]
fn xmalloc_refuses_a_single_thread() {
    let e = bench::with_benchmark("xmalloc", &Params::default(), 1, 1, Construct).unwrap_err().to_string();
    assert!(e.contains("at least 2 threads"), "{e}");
}

/// Runs `bench` on a cxlalloc heap with 1 MiB of small-bracket capacity and returns the error.
fn exhaust<B: Benchmark>(bench: &B, threads: usize) -> String {
    let _guard = FORK.read().unwrap_or_else(|e| e.into_inner());
    let heap = Heap::anonymous(&Config { small_capacity: 1 << 20, ..Config::with_capacity(64 << 20) }).unwrap();
    let cxl = Cxl::new(heap, "cxlalloc");
    let words: Vec<AtomicU64> = (0..barrier::WORDS + bench.shared_words()).map(|_| AtomicU64::new(0)).collect();
    match run_threads(&cxl, bench, &words, 1, 0, threads) {
        Ok(t) => panic!("a run that cannot fit succeeded: {t:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn an_allocation_failure_ends_an_xmalloc_run_with_an_error_not_a_hang() {
    // 32 small slabs cannot hold 100 waiting containers of 120 objects: the producer fails, and
    // the consumer waiting on the LIFO must give up too.
    let x = Xmalloc::new(&Params::of(&[("containers", 100_000), ("warmup_containers", 0)]), 1, 2).unwrap();
    let e = exhaust(&x, 2);
    assert!(e.contains("exhausted") || e.contains("aborted"), "failed for the wrong reason: {e}");
}

#[test]
fn an_allocation_failure_ends_a_larson_run_with_an_error_not_a_hang() {
    // 2 arrays of 4000 blocks of up to 1 KiB cannot fit in 1 MiB.
    let l = Larson::new(&Params::of(&[("slots", 4000), ("ops", 1000)]), 1, 2).unwrap();
    let e = exhaust(&l, 2);
    assert!(e.contains("exhausted") || e.contains("aborted"), "failed for the wrong reason: {e}");
}
