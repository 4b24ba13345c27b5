//! The xmalloc workload (small parameters; not a benchmark).

use cxlalloc::class::Bracket;
use cxlalloc::{Config, Heap};
use cxlalloc_bench::allocator::{Allocator, Cxl, Global};
use cxlalloc_bench::xmalloc::{self, Outcome, Params, Role, SizeStream, OBJECTS_PER_CONTAINER, SIZES};

fn tiny(threads: usize) -> Params {
    Params { threads, containers: 30, warmup_containers: 4, seed: 7 }
}

fn check_outcome(name: &str, p: &Params, out: &Outcome) {
    assert_eq!(out.threads.len(), p.threads, "{name}");
    assert_eq!(out.allocated(), 30 * OBJECTS_PER_CONTAINER as u64, "{name}");
    assert_eq!(out.freed(), out.allocated(), "{name}: every object freed exactly once");
    for (i, t) in out.threads.iter().enumerate() {
        let expect = if i % 2 == 0 { Role::Producer(i / 2) } else { Role::Consumer };
        assert_eq!(t.role, expect, "{name}: thread {i}");
        assert!(t.secs > 0.0, "{name}");
    }
    assert!(out.mops() > 0.0, "{name}");
}

fn run_on<A: Allocator>(a: &A, threads: usize) {
    let p = tiny(threads);
    let out = xmalloc::run(a, &p).unwrap_or_else(|e| panic!("{}: {e}", a.name()));
    check_outcome(a.name(), &p, &out);
}

#[test]
fn a_tiny_run_completes_and_frees_everything_on_every_allocator() {
    for threads in [2, 3, 4] {
        run_on(&Global::mimalloc(), threads);
        run_on(&Global::system(), threads);
    }
}

#[test]
fn a_tiny_run_leaves_the_cxlalloc_heap_consistent_and_empty() {
    let heap = Heap::anonymous(&Config::with_capacity(64 << 20)).unwrap();
    let cxl = Cxl::new(heap.clone(), "cxlalloc-anon");
    for threads in [2, 3, 4] {
        run_on(&cxl, threads);
        let report = heap.check();
        assert!(report.is_clean(), "{threads} threads: {report}");
        assert_eq!(report.bracket(Bracket::Small).live_blocks(), 0, "{threads} threads: {report}");
        assert_eq!(report.bracket(Bracket::Large).live_blocks(), 0, "{threads} threads: {report}");
    }
}

#[test]
fn fewer_than_two_threads_is_an_error() {
    assert!(xmalloc::run(&Global::system(), &tiny(1)).is_err());
}

#[test]
fn an_allocation_failure_is_reported_not_hung() {
    // 1 MiB of small-bracket capacity (32 slabs) cannot hold 100 waiting containers of 120 objects.
    let cfg = Config { small_capacity: 1 << 20, ..Config::with_capacity(64 << 20) };
    let heap = Heap::anonymous(&cfg).unwrap();
    let cxl = Cxl::new(heap.clone(), "cxl");
    let p = Params { threads: 2, containers: 100_000, warmup_containers: 0, seed: 1 };
    let err = xmalloc::run(&cxl, &p).unwrap_err().to_string();
    assert!(err.contains("exhausted"), "failed for the wrong reason: {err}");
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.bracket(Bracket::Small).live_blocks(), 0, "leftovers freed: {report}");
}

#[test]
fn the_size_distribution_covers_every_listed_size_and_nothing_else() {
    let mut counts = [0u64; SIZES.len()];
    let n = 140_000;
    for size in SizeStream::new(xmalloc::DEFAULT_SEED, 0).take(n) {
        let i = SIZES.iter().position(|&s| s == size).unwrap_or_else(|| panic!("size {size} not listed"));
        counts[i] += 1;
    }
    let expect = (n / SIZES.len()) as f64;
    for (size, &c) in SIZES.iter().zip(&counts) {
        assert!((c as f64 - expect).abs() < 0.05 * expect, "size {size}: {c} draws, expected about {expect}");
    }
}

#[test]
fn the_same_seed_gives_the_same_sizes_and_others_differ() {
    let take = |seed, stream| SizeStream::new(seed, stream).take(1000).collect::<Vec<usize>>();
    assert_eq!(take(42, 0), take(42, 0));
    assert_eq!(take(42, 3), take(42, 3));
    assert_ne!(take(42, 0), take(43, 0));
    assert_ne!(take(42, 0), take(42, 1));
}
