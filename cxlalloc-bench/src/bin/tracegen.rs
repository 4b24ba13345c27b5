//! `tracegen`: write a synthetic Twitter cache trace, or print the statistics of any trace.
//!
//! ```text
//! tracegen --cluster MC-37 --seed 1 --requests 100000 [--out FILE]   # CSV to FILE or stdout
//! tracegen --stats FILE                                             # FILE may be `-` (stdin)
//! ```
//!
//! Traces are the 7-column CSV of the public Twitter traces
//! (`timestamp,key,key size,value size,client id,operation,TTL`); zstd files must be decompressed
//! first. `--stats` stops at the first malformed line with its line number.

use std::fs::File;
use std::io::{self, BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use cxlalloc_bench::trace::{self, Cluster, Generator, TraceReader, TraceStats, TraceWriter};
use cxlalloc_bench::Error;

/// Generate a synthetic Twitter cache trace (MC-12, MC-15, MC-31, MC-37), or print a trace's statistics.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Cluster to imitate: MC-12, MC-15, MC-31 or MC-37 (also mc12, 37, ...).
    #[arg(long, required_unless_present = "stats")]
    cluster: Option<Cluster>,
    /// Seed; the same cluster, seed and request count give the same bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Requests to generate.
    #[arg(long, default_value_t = 100_000)]
    requests: u64,
    /// Write the trace here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Read this trace (`-` for stdin) and print its statistics instead of generating one.
    #[arg(long, conflicts_with_all = ["cluster", "out"])]
    stats: Option<PathBuf>,
}

fn generate(cluster: Cluster, seed: u64, requests: u64, out: Box<dyn Write>) -> Result<(), Error> {
    let mut w = TraceWriter::new(BufWriter::with_capacity(1 << 16, out));
    for r in Generator::new(cluster, seed, requests) {
        w.write(&r)?;
    }
    w.finish()?;
    Ok(())
}

fn stats(path: &Path) -> Result<TraceStats, Error> {
    fn gather(reader: TraceReader<impl BufRead>) -> Result<TraceStats, Error> {
        let mut s = TraceStats::new();
        for r in reader {
            s.add(&r?);
        }
        Ok(s)
    }
    if path.as_os_str() == "-" {
        gather(TraceReader::new(io::stdin().lock()))
    } else {
        gather(trace::open(path)?)
    }
}

fn run(args: Args) -> Result<(), Error> {
    if let Some(path) = &args.stats {
        println!("{}", stats(path)?);
        return Ok(());
    }
    let cluster = args.cluster.ok_or("--cluster is required")?;
    let out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(File::create(path).map_err(|e| format!("{}: {e}", path.display()))?),
        None => Box::new(io::stdout().lock()),
    };
    generate(cluster, args.seed, args.requests, out)
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`tracegen ... | head`) is not an error worth reporting.
        Err(e) if e.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tracegen: {e}");
            ExitCode::FAILURE
        }
    }
}
