//! A coordinator process: sets up one run (a directory under `/dev/shm` with the job, the
//! control area and whatever the allocator shares), starts its worker processes, waits for them
//! within the run's time limit, checks the allocator afterwards, and returns the workers'
//! records. A failing worker aborts the others' barriers, so a run fails fast rather than hangs;
//! a run past its limit has its workers killed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::job::{Job, CONTROL_FILE, HARNESS_WORDS};
use super::record::Record;
use crate::allocator;
use crate::bench::{self, Benchmark, Params};
use crate::shm::SharedArea;
use crate::Error;

/// Runs `job` with worker processes started as `exe work --run-dir DIR --process I`.
pub fn coordinate(job: &Job, exe: &Path) -> Result<Vec<Record>, Error> {
    if super::crash::is_crash(job) {
        // Workers are killed and replaced under load: a coordinator of its own.
        return super::crash::coordinate(job, exe);
    }
    let dir = RunDir::create(&job.run_root)?;
    job.write(&dir.0)?;
    let c = &job.config;
    let words = bench::with_benchmark(&c.benchmark, &Params(c.params.clone()), c.processes, c.threads, SharedWords)?;
    let area = SharedArea::create(&dir.0.join(CONTROL_FILE), HARNESS_WORDS + words)?;
    let prepared = allocator::prepare(&c.allocator, &dir.0)?;
    let outcome = run_workers(job, exe, &dir.0, &area);
    // The allocator is checked and its shared state removed even when a worker failed; what
    // serves it (a no-HWcc heap's mCAS device) stops only after the check.
    let check = allocator::finish(&c.allocator, &dir.0);
    let device = prepared.stop();
    let mut records = outcome?;
    let check = check?;
    let device = device?;
    let allocated: u64 = records.iter().map(|r| r.allocated).sum();
    let freed: u64 = records.iter().map(|r| r.freed).sum();
    if allocated != freed {
        return Err(format!("{allocated} blocks allocated but {freed} freed over the run").into());
    }
    for r in &mut records {
        r.heap_check = check.clone();
        if let (false, Value::Object(stats)) = (device.is_null(), &mut r.allocator_stats) {
            // The run's device, the same in every line of the run.
            stats.insert("mcas_device".into(), device.clone());
        }
    }
    records.sort_by_key(|r| r.process);
    Ok(records)
}

struct SharedWords;

impl bench::Visit for SharedWords {
    type Output = usize;

    fn visit<B: Benchmark>(self, bench: &B) -> Result<usize, Error> {
        Ok(bench.shared_words())
    }
}

/// The command that starts worker process `process` of the run in `dir` (`exe work`).
pub(crate) fn worker_command(exe: &Path, dir: &Path, process: usize) -> Command {
    let mut c = Command::new(exe);
    c.arg("work").arg("--run-dir").arg(dir).arg("--process").arg(process.to_string());
    c
}

fn run_workers(job: &Job, exe: &Path, dir: &Path, area: &SharedArea) -> Result<Vec<Record>, Error> {
    let barrier = job.barrier(area)?;
    let mut children = Vec::new();
    for process in 0..job.config.processes {
        let child = worker_command(exe, dir, process)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                barrier.abort();
                kill_all(&mut children);
                return Err(format!("starting worker {process} ({}): {e}", exe.display()).into());
            }
        }
    }
    // Each worker writes one line; read them concurrently so no pipe ever fills.
    let readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let mut out = c.stdout.take();
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(o) = out.as_mut() {
                    let _ = o.read_to_string(&mut text);
                }
                text
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(job.config.timeout_s);
    let mut failures = Vec::new();
    let mut running: Vec<Option<&mut Child>> = children.iter_mut().map(Some).collect();
    while running.iter().any(Option::is_some) {
        for (process, slot) in running.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            match child.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        failures.push(format!("worker {process} {status}"));
                        barrier.abort();
                    }
                    *slot = None;
                }
                Ok(None) => {}
                Err(e) => {
                    failures.push(format!("waiting for worker {process}: {e}"));
                    *slot = None;
                }
            }
        }
        if Instant::now() > deadline {
            barrier.abort();
            for child in running.iter_mut().flatten() {
                let _ = child.kill();
                let _ = child.wait();
            }
            return Err(format!("run exceeded its {} s limit; workers killed", job.config.timeout_s).into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let outputs: Vec<String> = readers.into_iter().map(|r| r.join().unwrap_or_default()).collect();
    if !failures.is_empty() {
        return Err(failures.join("; ").into());
    }
    outputs
        .iter()
        .enumerate()
        .map(|(process, text)| {
            let line = text.lines().last().ok_or_else(|| format!("worker {process} printed no record"))?;
            serde_json::from_str(line).map_err(|e| format!("worker {process} record: {e}: {line}").into())
        })
        .collect()
}

fn kill_all(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The run's directory under the run root, removed (with everything left in it) when dropped.
pub(crate) struct RunDir(pub(crate) PathBuf);

impl RunDir {
    pub(crate) fn create(root: &Path) -> Result<Self, Error> {
        remove_stale(root);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let path = root.join(format!("cxlbench.{}.{nanos}", std::process::id()));
        std::fs::create_dir(&path).map_err(|e| format!("creating run directory {}: {e}", path.display()))?;
        Ok(Self(path))
    }
}

/// Removes run directories under `root` whose coordinator process is gone (killed before it
/// could clean up), so an interrupted run leaves nothing behind for long.
fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("cxlbench.")).and_then(|n| n.split('.').next())
        else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else { continue };
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Parses a coordinator's stdout: one record per line.
pub fn parse_records(text: &str) -> Result<Vec<Record>, Error> {
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).map_err(Error::from)).collect()
}
