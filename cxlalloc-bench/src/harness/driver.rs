//! The driver: expands a workload file, runs one coordinator process per run (with a progress
//! bar and ETA), appends every record to an NDJSON file, and prints the results table.
//!
//! Runs are ordered repeat-major (every configuration once, then again), so slow drift of a
//! shared machine spreads over all configurations instead of biasing one. With `resume`, runs
//! whose every process line is already in the output file are not run again.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::backing::{Backing, HugeRoot, MOUNT_HUGE};
use super::coordinator;
use super::job::Job;
use super::record::Record;
use super::table;
use super::workload::{self, Config};
use crate::bench::{self, Benchmark, Params};
use crate::Error;

/// What to run and where the results go.
#[derive(Clone, Debug)]
pub struct Options {
    /// The workload file.
    pub workload: PathBuf,
    /// NDJSON output file (appended to).
    pub out: PathBuf,
    /// Skip runs already complete in `out`.
    pub resume: bool,
    /// Only configurations whose description contains this text.
    pub only: Option<String>,
    /// List the runs without running them.
    pub dry_run: bool,
    /// Milliseconds between PSS samples.
    pub sample_ms: u64,
    /// Where run directories are made (see [`Job::run_root`]).
    pub run_root: PathBuf,
    /// Where a workload with `huge_pages = true` mounts its huge-page tmpfs (under this
    /// directory, [`HugeRoot::mount`]).
    pub huge_mount: PathBuf,
    /// The size bound of that tmpfs (`size=`: `12g`, `50%`).
    pub huge_size: String,
}

/// What a drive did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Runs completed now.
    pub ran: usize,
    /// Runs skipped because `out` already had them.
    pub resumed: usize,
    /// Runs that failed, with their errors.
    pub failed: Vec<String>,
    /// Every record in `out` from this workload's configurations (for the table).
    pub records: Vec<Record>,
}

/// Runs `opts.workload`, starting coordinators as `exe coordinate --job JSON`.
pub fn drive(opts: &Options, exe: &Path) -> Result<Summary, Error> {
    let w = workload::load(&opts.workload)?;
    let stem = opts.workload.file_stem().map_or("workload".into(), |s| s.to_string_lossy().into_owned());
    let configs: Vec<&Config> =
        w.configs.iter().filter(|c| opts.only.as_ref().is_none_or(|o| c.describe().contains(o.as_str()))).collect();
    validate(&configs)?;
    for s in &w.skipped {
        eprintln!("skip  {}  ({})", s.config.describe(), s.reason);
    }
    let existing = if opts.resume { read_records(&opts.out)? } else { Vec::new() };
    let done = complete_runs(&existing);
    let date = utc_now();
    let mut jobs = Vec::new();
    let mut summary = Summary::default();
    for repeat in 0..w.repeats {
        for c in &configs {
            if done.contains(&(c.id(), repeat)) {
                summary.resumed += 1;
                continue;
            }
            let run_id = format!("{stem}-{}-{}-r{repeat}", compact(&date), &c.id()[..8]);
            jobs.push(Job {
                config: (*c).clone(),
                repeat,
                run_id,
                date: date.clone(),
                workload: stem.clone(),
                sample_ms: opts.sample_ms,
                run_root: opts.run_root.clone(),
                huge_fallback: String::new(),
            });
        }
    }
    if opts.dry_run {
        for j in &jobs {
            println!("run   {}  (repeat {})", j.config.describe(), j.repeat);
        }
        return Ok(summary);
    }
    // Held until every run is done: dropping it unmounts the huge-page tmpfs.
    let _huge_root = huge_pages_root(opts, &mut jobs);
    if let Some(dir) = opts.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let mut out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&opts.out)
        .map_err(|e| format!("opening {}: {e}", opts.out.display()))?;
    let bar = ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs  elapsed {elapsed}  ETA {eta}  {wide_msg}")
            .map_err(|e| format!("progress bar template: {e}"))?,
    );
    for job in &jobs {
        bar.set_message(job.config.describe());
        let started = Instant::now();
        match run_coordinator(job, exe) {
            Ok(records) => {
                for r in &records {
                    writeln!(out, "{}", serde_json::to_string(r)?)
                        .map_err(|e| format!("writing {}: {e}", opts.out.display()))?;
                }
                out.flush().map_err(|e| format!("writing {}: {e}", opts.out.display()))?;
                let throughput: f64 = records.iter().map(|r| r.throughput).sum();
                let pss: u64 = records.iter().map(|r| r.memory.end.total_bytes).sum();
                say(
                    &bar,
                    format!(
                        "ok    {}  {}ops/s  PSS {:.1} MiB  ({:.1} s)",
                        job.config.describe(),
                        table::rate(throughput),
                        pss as f64 / f64::from(1 << 20),
                        started.elapsed().as_secs_f64()
                    ),
                );
                summary.ran += 1;
            }
            Err(e) => {
                say(&bar, format!("FAIL  {}  (repeat {}): {e}", job.config.describe(), job.repeat));
                summary.failed.push(format!("{} (repeat {}): {e}", job.config.describe(), job.repeat));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let ids: BTreeSet<String> = configs.iter().map(|c| c.id()).collect();
    summary.records = read_records(&opts.out)?.into_iter().filter(|r| ids.contains(&r.config_id)).collect();
    Ok(summary)
}

/// Points the jobs that ask for huge pages at a run root that has them (docs/design.md §12.1):
/// the ordinary run root if its mount already gives huge pages, else a tmpfs mounted
/// `huge=advise` for this drive (returned; it is unmounted when dropped). Where none can
/// be mounted those jobs stay on the ordinary root, each with the reason in
/// [`Job::huge_fallback`], which its records carry.
fn huge_pages_root(opts: &Options, jobs: &mut [Job]) -> Option<HugeRoot> {
    if !jobs.iter().any(|j| j.config.huge_pages) || Backing::of(&opts.run_root).huge_pages {
        return None;
    }
    let (root, path, fallback) = match HugeRoot::mount(&opts.huge_mount, &opts.huge_size) {
        Ok(root) => {
            let path = root.path().to_path_buf();
            eprintln!("huge pages: the huge_pages runs go to {} (tmpfs huge={MOUNT_HUGE})", path.display());
            (Some(root), path, String::new())
        }
        Err(e) => {
            eprintln!(
                "huge pages: cannot mount a huge-page tmpfs ({e}); the huge_pages runs stay on {} without them",
                opts.run_root.display()
            );
            (None, opts.run_root.clone(), e.to_string())
        }
    };
    for j in jobs.iter_mut().filter(|j| j.config.huge_pages) {
        j.run_root.clone_from(&path);
        j.huge_fallback.clone_from(&fallback);
    }
    root
}

/// Prints a line above the progress bar, or plainly when the bar is hidden (not a terminal:
/// CI logs still get one line per run).
fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

/// Constructs every configuration's benchmark once, so a bad parameter fails the whole
/// workload before anything runs, with every error listed.
fn validate(configs: &[&Config]) -> Result<(), Error> {
    struct Check;
    impl bench::Visit for Check {
        type Output = ();
        fn visit<B: Benchmark>(self, _bench: &B) -> Result<(), Error> {
            Ok(())
        }
    }
    let errors: BTreeSet<String> = configs
        .iter()
        .filter_map(|c| {
            bench::with_benchmark(&c.benchmark, &Params(c.params.clone()), c.processes, c.threads, Check)
                .err()
                .map(|e| format!("{}: {e}", c.describe()))
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("invalid configurations:\n  {}", errors.into_iter().collect::<Vec<_>>().join("\n  ")).into())
    }
}

fn run_coordinator(job: &Job, exe: &Path) -> Result<Vec<Record>, Error> {
    let output = Command::new(exe)
        .arg("coordinate")
        .arg("--job")
        .arg(serde_json::to_string(job)?)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting coordinator {}: {e}", exe.display()))?;
    if !output.status.success() {
        // The coordinator's and workers' messages say why; keep them with the failure.
        let why = String::from_utf8_lossy(&output.stderr);
        let why: Vec<&str> = why.lines().filter(|l| !l.trim().is_empty()).collect();
        return Err(format!("coordinator {}: {}", output.status, why.join(" | ")).into());
    }
    coordinator::parse_records(&String::from_utf8_lossy(&output.stdout))
}

/// Every record in the NDJSON file at `path` (none when it does not exist).
pub fn read_records(path: &Path) -> Result<Vec<Record>, Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("reading {}: {e}", path.display()).into()),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1).into()))
        .collect()
}

/// (config id, repeat) of every run whose lines are all present.
fn complete_runs(records: &[Record]) -> BTreeSet<(String, u32)> {
    let mut count: std::collections::BTreeMap<&str, (usize, &Record)> = Default::default();
    for r in records {
        count.entry(&r.run_id).or_insert((0, r)).0 += 1;
    }
    count.values().filter(|(n, r)| *n == r.processes).map(|(_, r)| (r.config_id.clone(), r.repeat)).collect()
}

/// The results table for `records`.
pub fn results_table(records: &[Record]) -> String {
    let mut text = table::render(&table::rows(records));
    let crashes = super::crash::rows(records);
    if !crashes.is_empty() {
        text.push('\n');
        text.push_str(&super::crash::render(&crashes));
    }
    text
}

/// Now, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `2026-11-21T10:00:00Z` → `20261121T100000Z`, for file names and run ids.
pub fn compact(date: &str) -> String {
    date.chars().filter(|c| !matches!(c, '-' | ':')).collect()
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_413), (2025, 11, 21));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(compact("2026-11-21T10:00:00Z"), "20261121T100000Z");
    }
}
