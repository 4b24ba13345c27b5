//! `cxlalloc-bench`: the evaluation harness (docs/design.md §12).
//!
//! ```text
//! cxlalloc-bench run WORKLOAD.toml [--out FILE] [--resume] [--only TEXT] [--dry-run]
//!                    [--run-root DIR] [--huge-mount DIR] [--huge-size SIZE]
//! cxlalloc-bench table FILE.ndjson...
//! cxlalloc-bench cas-latency [--threads 1,2,4] [--ops N] [--mcas-latency-ns NS [--uncalibrated]] [--cosim BIN]
//! ```
//!
//! `run` is the driver: it expands the workload file into configurations, runs each (a
//! coordinator process, which starts the worker processes), appends one NDJSON line per worker
//! to the output file, and prints the results table. `coordinate` and `work` are the other two
//! roles of the same binary, started by the driver and the coordinator. Build in release mode.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use std::time::Duration;

use cxlalloc_bench::caslat;
use cxlalloc_bench::harness::driver::{self, Options};
use cxlalloc_bench::harness::{coordinator, job::Job, worker};
use cxlalloc_bench::Error;

#[derive(Parser, Debug)]
#[command(version, about = "cxlalloc evaluation harness: driver, coordinator and worker")]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a workload file and print the results table.
    Run {
        /// The workload file (e.g. workloads/mini.toml).
        workload: PathBuf,
        /// NDJSON output, appended to [default: results/STEM-DATE.ndjson].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Skip runs whose lines are already all in --out.
        #[arg(long, requires = "out")]
        resume: bool,
        /// Only configurations whose description contains TEXT (e.g. "xmalloc", "P=2").
        #[arg(long, value_name = "TEXT")]
        only: Option<String>,
        /// List the runs and skips without running anything.
        #[arg(long)]
        dry_run: bool,
        /// Milliseconds between PSS samples in each worker.
        #[arg(long, default_value_t = 100)]
        sample_ms: u64,
        /// Directory for run directories (heaps, control areas): a tmpfs or DAX mount.
        #[arg(long, default_value = "/dev/shm")]
        run_root: PathBuf,
        /// Where configurations with `huge_pages = true` mount their tmpfs (`huge=advise`,
        /// as root; without it they run on --run-root and their records say so)
        /// [default: the system's temporary directory].
        #[arg(long)]
        huge_mount: Option<PathBuf>,
        /// Size bound of that tmpfs (a tmpfs `size=`: `16g`, `50%` of memory).
        #[arg(long, default_value = "50%")]
        huge_size: String,
    },
    /// Measure CAS latency per coherence model: native, flush+CAS, software mCAS, RTL mCAS.
    CasLatency {
        /// Thread counts (contending on one word).
        #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
        threads: Vec<usize>,
        /// Successful CASes per thread.
        #[arg(long, default_value_t = 20_000)]
        ops: usize,
        /// The software mCAS CAS time at one thread (p50), ns: the paper's device took 2300.
        /// The device injects this less its measured round trip (calibration).
        #[arg(long, default_value_t = 2300)]
        mcas_latency_ns: u64,
        /// Inject `--mcas-latency-ns` as device time as it is, without calibration.
        #[arg(long)]
        uncalibrated: bool,
        /// `mcas-cosim` (built by script/fpga.sh) to measure the RTL too.
        #[arg(long)]
        cosim: Option<PathBuf>,
        /// NDJSON output, one line per row (appended).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print the results table of NDJSON files.
    Table {
        /// NDJSON files written by `run`.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// (Started by the driver.) Coordinate one run given as JSON; print its records.
    #[command(hide = true)]
    Coordinate {
        /// The job.
        #[arg(long)]
        job: String,
    },
    /// (Started by a coordinator.) Run one worker process of the run in DIR; print its record.
    #[command(hide = true)]
    Work {
        /// The run directory.
        #[arg(long)]
        run_dir: PathBuf,
        /// This worker's index.
        #[arg(long)]
        process: usize,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cxlalloc-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Cmd) -> Result<ExitCode, Error> {
    let exe = std::env::current_exe().map_err(|e| format!("locating this program: {e}"))?;
    match cmd {
        Cmd::Run { workload, out, resume, only, dry_run, sample_ms, run_root, huge_mount, huge_size } => {
            if cfg!(debug_assertions) && !dry_run {
                eprintln!("warning: a debug build; throughput numbers are meaningless (use --release)");
            }
            let out = out.unwrap_or_else(|| {
                let stem = workload.file_stem().map_or("workload".into(), |s| s.to_string_lossy().into_owned());
                PathBuf::from(format!("results/{stem}-{}.ndjson", driver::compact(&driver::utc_now())))
            });
            let huge_mount = huge_mount.unwrap_or_else(std::env::temp_dir);
            let opts = Options {
                workload,
                out: out.clone(),
                resume,
                only,
                dry_run,
                sample_ms,
                run_root,
                huge_mount,
                huge_size,
            };
            let summary = driver::drive(&opts, &exe)?;
            if dry_run {
                return Ok(ExitCode::SUCCESS);
            }
            println!();
            print!("{}", driver::results_table(&summary.records));
            println!();
            println!(
                "{} runs now, {} already in {}; NDJSON: {}",
                summary.ran,
                summary.resumed,
                out.display(),
                out.display()
            );
            if summary.failed.is_empty() {
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("{} run(s) failed:", summary.failed.len());
                for f in &summary.failed {
                    eprintln!("  {f}");
                }
                Ok(ExitCode::FAILURE)
            }
        }
        Cmd::CasLatency { threads, ops, mcas_latency_ns, uncalibrated, cosim, out } => {
            let target = Duration::from_nanos(mcas_latency_ns);
            let mcas_latency = if uncalibrated { target } else { cxlalloc::internal::mcas::device::calibrate(target)? };
            eprintln!("software mCAS: {} ns of device time per CAS", mcas_latency.as_nanos());
            let opts = caslat::Options { threads, ops, mcas_latency, cosim };
            let rows = caslat::run(&opts)?;
            print!("{}", caslat::table(&rows));
            if let Some(out) = out {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&out)?;
                for r in &rows {
                    writeln!(f, "{}", r.json())?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Table { files } => {
            let mut records = Vec::new();
            for f in &files {
                records.extend(driver::read_records(f)?);
            }
            print!("{}", driver::results_table(&records));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Coordinate { job } => {
            let job: Job = serde_json::from_str(&job)?;
            for r in coordinator::coordinate(&job, &exe)? {
                println!("{}", serde_json::to_string(&r)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Work { run_dir, process } => {
            if let Some(record) = worker::work(&run_dir, process)? {
                println!("{}", serde_json::to_string(&record)?);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
