//! `micro`: the threadtest and xmalloc micro benchmarks, cxlalloc against mimalloc and the system
//! allocator.
//!
//! ```text
//! cargo run --release -p cxlalloc-bench --bin micro -- [--workload threadtest|xmalloc|all] [--quick]
//!                                                        [--sizes 8,64] [--threads 1,2] [--repeat 3]
//!                                                        [--ndjson results/micro.ndjson]
//! ```
//!
//! One process; cxlalloc is measured on a private anonymous heap and on a `/dev/shm` heap (the
//! multi-process configuration, with one process here). mimalloc and the system allocator are
//! called through `GlobalAlloc` directly. Each configuration — (size, threads) for threadtest,
//! threads for xmalloc — runs every allocator in turn, `--repeat` times, and reports the median
//! throughput. After each xmalloc configuration every cxlalloc heap is checked (consistent, no
//! live blocks). Must be built in release mode.

use std::alloc::System;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use cxlalloc::{Config, Heap};
use cxlalloc_bench::allocator::{Allocator, Cxl, Global};
use cxlalloc_bench::threadtest::{self, Outcome, Params};
use cxlalloc_bench::xmalloc;
use cxlalloc_bench::Error;
use mimalloc::MiMalloc;
use serde_json::json;

/// threadtest: rounds of "allocate N objects, write min(size,64) bytes of each, free all".
/// xmalloc: even threads allocate containers of 120 mixed-size objects, odd threads free them.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Which benchmark to run.
    #[arg(long, value_enum, default_value_t = Workload::Threadtest)]
    workload: Workload,
    /// Tiny op counts and one repetition (a smoke run for CI, not a measurement).
    #[arg(long)]
    quick: bool,
    /// threadtest object sizes in bytes (1 ..= 524288); xmalloc draws its own mix.
    #[arg(long, value_delimiter = ',', default_values_t = [8usize, 64, 1024, 65536])]
    sizes: Vec<usize>,
    /// Thread counts [default: 1,2 for threadtest; 2 for xmalloc, which skips counts below 2].
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Allocators to run.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = Which::ALL)]
    allocators: Vec<Which>,
    /// Repetitions per configuration; the table shows the median (default 3, 1 with --quick).
    #[arg(long)]
    repeat: Option<usize>,
    /// Write one NDJSON line per (allocator, size, threads) to this file.
    #[arg(long)]
    ndjson: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// threadtest only.
    Threadtest,
    /// xmalloc only.
    Xmalloc,
    /// threadtest, then xmalloc.
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    /// cxlalloc on a private anonymous heap.
    CxlallocAnon,
    /// cxlalloc on a named heap in /dev/shm.
    CxlallocShm,
    /// mimalloc via GlobalAlloc.
    Mimalloc,
    /// std::alloc::System (glibc malloc).
    System,
}

impl Which {
    const ALL: [Which; 4] = [Which::CxlallocAnon, Which::CxlallocShm, Which::Mimalloc, Which::System];
}

/// Heap capacity per bracket: far more than any configuration keeps live (reservation only;
/// memory is committed as the heap grows).
const HEAP_CAPACITY: u64 = 1 << 30;

/// Allocate/free pairs per configuration (over all threads), the same for every allocator. Chosen
/// so one run takes roughly 0.1–0.5 s for cxlalloc and mimalloc on the idle 2-core development
/// machine; the system allocator, 10–60x slower at 1 KiB and 64 KiB (glibc gives the top of its
/// heap back to the kernel after every round), takes a few seconds there. A full run (3
/// repetitions) takes about a minute, most of it in the system allocator.
fn total_pairs(size: usize, quick: bool) -> u64 {
    match (quick, size) {
        (true, s) if s <= 1024 => 20_000,
        (true, _) => 1_280,
        (false, s) if s <= 64 => 32_000_000,
        (false, s) if s <= 1024 => 12_000_000,
        (false, _) => 3_000_000,
    }
}

/// xmalloc containers per configuration (over all producers; 120 objects each, so twice that many
/// operations), the same for every allocator: 4.8 M objects, roughly 0.1–0.5 s per run on the
/// 2-core development machine.
fn total_containers(quick: bool) -> u64 {
    if quick {
        200
    } else {
        40_000
    }
}

/// A `/dev/shm` heap that is unlinked when the benchmark ends (also on error).
struct ShmHeap {
    name: String,
    heap: Heap,
}

impl ShmHeap {
    fn create(config: &Config) -> Result<Self, Error> {
        let name = format!("micro-{}", std::process::id());
        let heap = Heap::create(&name, config).map_err(|e| format!("creating heap {name}: {e}"))?;
        Ok(Self { name, heap })
    }
}

impl Drop for ShmHeap {
    fn drop(&mut self) {
        if let Err(e) = Heap::unlink(&self.name) {
            eprintln!("micro: could not unlink heap {}: {e}", self.name);
        }
    }
}

/// The allocators of one run, each a concrete type so the workload is monomorphized for it.
enum Contender {
    Cxl(Cxl),
    Mimalloc(Global<MiMalloc>),
    System(Global<System>),
}

impl Contender {
    fn name(&self) -> &str {
        match self {
            Contender::Cxl(a) => a.name(),
            Contender::Mimalloc(a) => a.name(),
            Contender::System(a) => a.name(),
        }
    }

    fn run(&self, p: &Params) -> Result<Outcome, Error> {
        match self {
            Contender::Cxl(a) => threadtest::run(a, p),
            Contender::Mimalloc(a) => threadtest::run(a, p),
            Contender::System(a) => threadtest::run(a, p),
        }
    }

    fn run_xmalloc(&self, p: &xmalloc::Params) -> Result<xmalloc::Outcome, Error> {
        match self {
            Contender::Cxl(a) => xmalloc::run(a, p),
            Contender::Mimalloc(a) => xmalloc::run(a, p),
            Contender::System(a) => xmalloc::run(a, p),
        }
    }

    /// For cxlalloc: fails unless the heap checks clean with no live blocks (call when idle).
    fn check_empty(&self) -> Result<(), Error> {
        if let Contender::Cxl(a) = self {
            let report = a.heap.check();
            let live: u64 = report.brackets.iter().map(|b| b.live_blocks()).sum();
            if !report.is_clean() || live != 0 {
                return Err(format!("{}: heap not clean and empty ({live} live blocks):\n{report}", a.name()).into());
            }
        }
        Ok(())
    }
}

struct Row {
    workload: &'static str,
    allocator: String,
    size: usize,
    threads: usize,
    mops: f64,
}

/// What every NDJSON record of one `micro` run shares.
struct RunMeta {
    run_id: String,
    repeat: usize,
    quick: bool,
    cores: usize,
}

impl RunMeta {
    /// One NDJSON record: the shared fields, the measurement, and the workload's own fields.
    fn record(
        &self,
        bench: &str,
        allocator: &str,
        threads: usize,
        runs: &[f64],
        thread_secs: Vec<Vec<f64>>,
        specific: serde_json::Value,
    ) -> serde_json::Value {
        let mut line = json!({
            "bench": bench,
            "run": self.run_id,
            "allocator": allocator,
            "threads": threads,
            "repeat": self.repeat,
            "quick": self.quick,
            "cores": self.cores,
            "mops": median(runs.to_vec()),
            "mops_runs": runs,
            "thread_secs": thread_secs,
        });
        if let (Some(all), serde_json::Value::Object(extra)) = (line.as_object_mut(), specific) {
            all.extend(extra);
        }
        line
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("micro: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Error> {
    if cfg!(debug_assertions) && !args.quick {
        return Err("build with --release: debug-build numbers mean nothing (--quick runs anyway)".into());
    }
    let do_threadtest = matches!(args.workload, Workload::Threadtest | Workload::All);
    let do_xmalloc = matches!(args.workload, Workload::Xmalloc | Workload::All);
    if let Some(&bad) = args.sizes.iter().find(|&&s| s == 0 || s > 512 << 10) {
        return Err(format!("size {bad} is outside 1 ..= 524288 (larger sizes are not supported yet)").into());
    }
    let tt_threads = args.threads.clone().unwrap_or_else(|| vec![1, 2]);
    if tt_threads.contains(&0) || args.sizes.is_empty() || tt_threads.is_empty() {
        return Err("need at least one size and thread counts of at least 1".into());
    }
    let xm_threads: Vec<usize> = match &args.threads {
        Some(t) => t.iter().copied().filter(|&n| n >= 2).collect(),
        None => vec![2],
    };
    if do_xmalloc && xm_threads.is_empty() {
        return Err("xmalloc needs a thread count of at least 2 (1 producer + 1 consumer)".into());
    }
    let repeat = args.repeat.unwrap_or(if args.quick { 1 } else { 3 }).max(1);
    let run_id = format!("{}-{}", SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs(), std::process::id());
    let config = Config::with_capacity(HEAP_CAPACITY);

    let mut shm = None;
    let mut contenders = Vec::new();
    for which in &args.allocators {
        contenders.push(match which {
            Which::CxlallocAnon => Contender::Cxl(Cxl::new(Heap::anonymous(&config)?, "cxlalloc-anon")),
            Which::CxlallocShm => {
                let s = shm.insert(ShmHeap::create(&config)?);
                Contender::Cxl(Cxl::new(s.heap.clone(), "cxlalloc-shm"))
            }
            Which::Mimalloc => Contender::Mimalloc(Global::mimalloc()),
            Which::System => Contender::System(Global::system()),
        });
    }

    let mut ndjson = match &args.ndjson {
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            Some(BufWriter::new(File::create(path).map_err(|e| format!("{}: {e}", path.display()))?))
        }
        None => None,
    };

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meta = RunMeta { run_id: run_id.clone(), repeat, quick: args.quick, cores };
    if do_threadtest {
        println!(
            "threadtest: rounds of (allocate N objects, write min(size,64) B each, free all); N = 1000 up to 1 KiB, 64 above"
        );
    }
    if do_xmalloc {
        println!(
            "xmalloc: even threads allocate containers of {} objects of {{8 .. 768}} B (write min(size,64) B each) and push \
             them on a LIFO (limit {}); odd threads pop, verify and free them (every free remote); {} containers in all",
            xmalloc::OBJECTS_PER_CONTAINER,
            xmalloc::LIFO_LIMIT,
            total_containers(args.quick),
        );
        if let Some(&skipped) = args.threads.iter().flatten().find(|&&n| n < 2) {
            println!("xmalloc: skipping {skipped} thread(s) (needs at least 2)");
        }
    }
    println!(
        "run {run_id}: {cores} cores, median of {repeat} run(s), untimed warm-up per thread{}",
        if args.quick { ", QUICK (smoke run: numbers are not measurements)" } else { "" }
    );
    if let Some(s) = &shm {
        println!("cxlalloc-shm heap: {}", s.heap.location());
    }

    let started = Instant::now();
    let mut rows = Vec::new();
    if do_threadtest {
        for &size in &args.sizes {
            for &threads in &tt_threads {
                let p = Params::fixed_total(size, threads, total_pairs(size, args.quick));
                for c in &contenders {
                    let mut outcomes = Vec::with_capacity(repeat);
                    for _ in 0..repeat {
                        outcomes
                            .push(c.run(&p).map_err(|e| format!("{} size {size} threads {threads}: {e}", c.name()))?);
                    }
                    let runs: Vec<f64> = outcomes.iter().map(Outcome::mops).collect();
                    let mops = median(runs.clone());
                    if !args.quick {
                        eprintln!("  {:>14} size {size:>6} threads {threads}: {mops:8.2} Mops/s", c.name());
                    }
                    if let Some(out) = ndjson.as_mut() {
                        let specific = json!({
                            "size": size,
                            "objects": p.objects,
                            "rounds_per_thread": p.rounds,
                            "pairs_per_thread": p.pairs_per_thread(),
                            "warmup_rounds": p.warmup_rounds,
                        });
                        let thread_secs = outcomes.iter().map(|o| o.threads.iter().map(|t| t.secs).collect()).collect();
                        let line = meta.record("threadtest", c.name(), threads, &runs, thread_secs, specific);
                        writeln!(out, "{line}")?;
                    }
                    rows.push(Row { workload: "threadtest", allocator: c.name().to_string(), size, threads, mops });
                }
            }
        }
    }
    if do_xmalloc {
        for &threads in &xm_threads {
            let p = xmalloc::Params::new(threads, total_containers(args.quick));
            for c in &contenders {
                let mut outcomes = Vec::with_capacity(repeat);
                for _ in 0..repeat {
                    let o = c.run_xmalloc(&p).map_err(|e| format!("{} xmalloc threads {threads}: {e}", c.name()))?;
                    c.check_empty()?;
                    outcomes.push(o);
                }
                let runs: Vec<f64> = outcomes.iter().map(xmalloc::Outcome::mops).collect();
                let mops = median(runs.clone());
                if !args.quick {
                    eprintln!(
                        "  {:>14} xmalloc threads {threads}: {mops:8.2} Mops/s ({} LIFO waits)",
                        c.name(),
                        outcomes.iter().map(xmalloc::Outcome::waits).max().unwrap_or(0)
                    );
                }
                if let Some(out) = ndjson.as_mut() {
                    let specific = json!({
                        "producers": p.producers(),
                        "consumers": p.consumers(),
                        "containers": p.containers,
                        "objects_per_container": xmalloc::OBJECTS_PER_CONTAINER,
                        "objects": p.objects(),
                        "lifo_limit": xmalloc::LIFO_LIMIT,
                        "warmup_containers": p.warmup_containers,
                        "seed": p.seed,
                        "waits_runs": outcomes.iter().map(xmalloc::Outcome::waits).collect::<Vec<_>>(),
                    });
                    let thread_secs = outcomes.iter().map(|o| o.threads.iter().map(|t| t.secs).collect()).collect();
                    let line = meta.record("xmalloc", c.name(), threads, &runs, thread_secs, specific);
                    writeln!(out, "{line}")?;
                }
                rows.push(Row { workload: "xmalloc", allocator: c.name().to_string(), size: 0, threads, mops });
            }
        }
    }
    if let Some(mut out) = ndjson {
        out.flush()?;
    }
    if do_threadtest {
        let keys: Vec<(usize, usize)> =
            args.sizes.iter().flat_map(|&s| tt_threads.iter().map(move |&t| (s, t))).collect();
        println!();
        println!("threadtest: Mops/s (million allocate+free pairs per second, higher is better); ratios are cxlalloc / baseline");
        print_table("threadtest", &contenders, &rows, &keys);
    }
    if do_xmalloc {
        let keys: Vec<(usize, usize)> = xm_threads.iter().map(|&t| (0, t)).collect();
        println!();
        println!(
            "xmalloc: Mops/s (million operations per second, an operation being one allocation or one free; \
             higher is better); ratios are cxlalloc / baseline"
        );
        print_table("xmalloc", &contenders, &rows, &keys);
    }
    println!("total time {:.2} s", started.elapsed().as_secs_f64());
    if let Some(path) = &args.ndjson {
        println!("NDJSON: {}", path.display());
    }
    Ok(())
}

/// One table: a line per `(size, threads)` key (size 0: the xmalloc mix, shown as `mix`).
fn print_table(workload: &str, contenders: &[Contender], rows: &[Row], keys: &[(usize, usize)]) {
    let names: Vec<&str> = contenders.iter().map(Contender::name).collect();
    let cxl: Vec<&str> = names.iter().copied().filter(|n| n.starts_with("cxlalloc")).collect();
    let baselines: Vec<&str> = ["mimalloc", "system"].into_iter().filter(|b| names.contains(b)).collect();
    let ratio_name = |c: &str, b: &str| format!("{}/{}", c.trim_start_matches("cxlalloc-"), &b[..3]);
    let ratios: Vec<(&str, &str)> = cxl.iter().flat_map(|&c| baselines.iter().map(move |&b| (c, b))).collect();

    let mops = |alloc: &str, size: usize, threads: usize| {
        rows.iter()
            .find(|r| r.workload == workload && r.allocator == alloc && r.size == size && r.threads == threads)
            .map(|r| r.mops)
    };

    let mut header = format!("{:>6} {:>3}", "size", "thr");
    for n in &names {
        header += &format!(" {n:>13}");
    }
    for &(c, b) in &ratios {
        header += &format!(" {:>8}", ratio_name(c, b));
    }
    println!("{header}");
    println!("{}", "-".repeat(header.len()));

    let mut logs = vec![(0.0f64, 0usize); ratios.len()];
    for &(size, threads) in keys {
        let mut line = if size == 0 { format!("{:>6} {threads:>3}", "mix") } else { format!("{size:>6} {threads:>3}") };
        for n in &names {
            match mops(n, size, threads) {
                Some(m) => line += &format!(" {m:>13.2}"),
                None => line += &format!(" {:>13}", "-"),
            }
        }
        for (i, &(c, b)) in ratios.iter().enumerate() {
            match mops(c, size, threads).zip(mops(b, size, threads)) {
                Some((x, y)) if y > 0.0 && x > 0.0 => {
                    line += &format!(" {:>7.2}x", x / y);
                    logs[i].0 += (x / y).ln();
                    logs[i].1 += 1;
                }
                _ => line += &format!(" {:>8}", "-"),
            }
        }
        println!("{line}");
    }
    if !ratios.is_empty() && keys.len() > 1 {
        let mut line = format!("{:>10}", "geo-mean");
        line += &" ".repeat(14 * names.len());
        for &(sum, n) in &logs {
            line += &format!(" {:>7.2}x", if n > 0 { (sum / n as f64).exp() } else { f64::NAN });
        }
        println!("{line}");
    }
}
