//! The coordinator and worker of a `crash` run (docs/design.md §12.2; the application is
//! [`crate::bench::crash`]).
//!
//! The coordinator sets up the run like any other (run directory, control area, the
//! allocator's shared state), allocates the slot array, starts the P worker processes and then
//! becomes the killer: at times drawn from the configuration's seed it sends `SIGKILL` to a
//! running worker chosen at random, reaps it and starts a replacement for the same process
//! index, which adopts its predecessor's thread slots and carries on with the same lanes. One
//! replacement in `startup_kill_one_in` is killed again while it starts (while it opens the
//! heap or recovers), so recovery itself is interrupted too.
//!
//! Every `sample_ms` the coordinator reads every lane's operation counter: a worker that makes
//! no progress for `timeout_ms` (a survivor blocked on a lock a dead worker holds, as Boost's
//! segment mutex is) ends the run as a *time-out*, with every worker killed, never a hung run.
//! Once every worker runs, each lane also measures its own longest gap between two operations;
//! the longest over all survivors is the run's longest stall (scheduling included: a machine
//! with fewer cores than lanes shows tens of milliseconds without any kill).
//!
//! After the last kill and `settle_ms`, the coordinator stops the workers, adopts whatever
//! dead slots are left, frees every block the slot array names, and runs the allocator's check:
//! the live-block count must then be 0 (no leak) and the checker must find nothing. The run's
//! lines (one per process index, over all its incarnations) carry the numbers in `extra`.
//!
//! A run of a recoverable allocator (cxlalloc with recovery on) that is not clean fails; for
//! the others the outcome (`time-out`, `leaked`, `inconsistent`, `worker-error`) is recorded.
//!
//! # The lines' `extra`
//!
//! The same in every line of a run: `outcome` and `why`; `kills` (done), `kills_planned`,
//! `kills_at_startup`; `inconsistencies` (checker problems plus blocks that did not read back
//! or could not be freed; `null` after a time-out), `leaked_blocks` (live blocks after freeing
//! everything the table named; `null` where the allocator cannot count them), `leaked_bytes`
//! (segment bytes lost, Boost), `blocks_named_at_end`; `longest_stall_ms` (with
//! `longest_stall_lane`, `longest_stall_at_s` and `kills_in_longest_stall`),
//! `stall_threshold_ms`, `stalled`, `observed_stall_ms` (the coordinator's sampling),
//! `restart_max_ms` (kill to the replacement's first operation); `recoveries`,
//! `recoveries_in_flight` (adoptions that finished or undid an interrupted operation),
//! `recovery_ms_median`, `recovery_ms_max`; `timed_out`, `worker_error`. Per process index:
//! `process_kills`, `kill_times_s`, `recovery_ms` (every adoption by its replacements: lane,
//! slot, ms, in_flight), `process_longest_stall_ms`, `incarnations` and `timeline`
//! (`[[t_s, ops_per_s], ...]`, Figure 7); process 0 adds `end_recovery_ms` (slots adopted at
//! the clean-up). `heap_check` is the allocator's audit after the clean-up.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::coordinator::{worker_command, RunDir};
use super::job::{Job, CONTROL_FILE, HARNESS_WORDS};
use super::record::{Memory, Pss, Record, ThreadTiming};
use crate::allocator::{self, Allocator, Recovered};
use crate::bench::crash::{self, CleanUp, Control, Crash, Logged};
use crate::bench::stress::Rng;
use crate::bench::{Benchmark, Params};
use crate::shm::SharedArea;
use crate::Error;

/// Runs the crash job `job`, starting workers as `exe work --run-dir DIR --process I`.
pub fn coordinate(job: &Job, exe: &Path) -> Result<Vec<Record>, Error> {
    let c = &job.config;
    let crash = Crash::new(&Params(c.params.clone()), c.processes, c.threads)?;
    let dir = RunDir::create(&job.run_root)?;
    job.write(&dir.0)?;
    let control = dir.0.join(CONTROL_FILE);
    let area = SharedArea::create(&control, HARNESS_WORDS + crash.shared_words())?;
    let ctl = Control::new(&crash, area.words().get(HARNESS_WORDS..).ok_or("control area too small")?)?;
    let prepared = allocator::prepare(&c.allocator, &dir.0)?;
    let result = (|| -> Result<(bool, Killed, Option<CleanUp>), Error> {
        let recoverable = allocator::open(&c.allocator, &dir.0, SetUp { crash: &crash, ctl: &ctl })?;
        let killed = kill_and_replace(job, &crash, &ctl, exe, &dir.0)?;
        let cleaned = if killed.timed_out.is_some() {
            None
        } else {
            let limit = Duration::from_millis(crash.timeout_ms.max(1000)) * 10;
            clean_up_within(job, &crash, &dir.0, &control, limit)?
        };
        Ok((recoverable, killed, cleaned))
    })();
    // What prepare made goes unchecked: a wedged Boost mutex would hang its check, and the
    // check has been done (or could not be).
    let discarded = allocator::discard(&c.allocator, &dir.0);
    // A no-HWcc heap's mCAS device served the clean-up's adoptions: it stops last.
    let stopped = prepared.stop();
    let (recoverable, mut killed, cleaned) = result?;
    discarded?;
    stopped?;
    if cleaned.is_none() && killed.timed_out.is_none() {
        killed.timed_out = Some("the end-of-run clean-up did not finish (a lock held by a killed worker?)".into());
    }
    let summary = Summary::of(&crash, &ctl, &killed, cleaned.as_ref());
    let records = records(job, &crash, &ctl, &killed, &summary);
    if recoverable && summary.outcome != Outcome::Clean {
        return Err(format!(
            "crash run not clean for a recoverable allocator: {} after {} kills: {}",
            summary.outcome.name(),
            killed.kills.len(),
            summary.why
        )
        .into());
    }
    Ok(records)
}

/// Allocates the slot array in the coordinator ([`crash::set_up`]).
struct SetUp<'a> {
    crash: &'a Crash,
    ctl: &'a Control<'a>,
}

impl allocator::Visit for SetUp<'_> {
    type Output = bool;

    fn visit<A: Allocator>(self, alloc: &A) -> Result<bool, Error> {
        crash::set_up(self.crash, self.ctl, alloc)
    }
}

/// Runs [`crash::clean_up`] in a thread of its own, giving up after `limit` (a lock left held
/// by a killed worker would block it forever; the thread is then abandoned). `Ok(None)`: it
/// did not finish.
fn clean_up_within(
    job: &Job,
    crash: &Crash,
    dir: &Path,
    control: &Path,
    limit: Duration,
) -> Result<Option<CleanUp>, Error> {
    struct Clean<'a> {
        crash: &'a Crash,
        ctl: &'a Control<'a>,
    }
    impl allocator::Visit for Clean<'_> {
        type Output = CleanUp;
        fn visit<A: Allocator>(self, alloc: &A) -> Result<CleanUp, Error> {
            crash::clean_up(self.crash, self.ctl, alloc)
        }
    }
    let (tx, rx) = mpsc::channel();
    let (spec, dir, control, crash) =
        (job.config.allocator.clone(), dir.to_path_buf(), control.to_path_buf(), crash.clone());
    std::thread::Builder::new()
        .name("crash-clean-up".into())
        .spawn(move || {
            let result = SharedArea::open(&control).and_then(|area| {
                let ctl = Control::new(&crash, area.words().get(HARNESS_WORDS..).ok_or("control area too small")?)?;
                allocator::open(&spec, &dir, Clean { crash: &crash, ctl: &ctl })
            });
            // The receiver is gone only after a time-out; nobody wants the answer then.
            let _ = tx.send(result);
        })
        .map_err(|e| format!("starting the clean-up thread: {e}"))?;
    match rx.recv_timeout(limit) {
        Ok(result) => result.map(Some),
        Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("the clean-up thread died".into()),
    }
}

/// A worker process of a crash run: runs its lanes until the coordinator stops them.
pub fn work(job: &Job, run_dir: &Path, process: usize) -> Result<(), Error> {
    let c = &job.config;
    let crash = Crash::new(&Params(c.params.clone()), c.processes, c.threads)?;
    let area = SharedArea::open(&run_dir.join(CONTROL_FILE))?;
    let ctl = Control::new(&crash, area.words().get(HARNESS_WORDS..).ok_or("control area too small")?)?;
    struct Lanes<'a> {
        crash: &'a Crash,
        ctl: &'a Control<'a>,
        process: usize,
        seed: u64,
    }
    impl allocator::Visit for Lanes<'_> {
        type Output = ();
        fn visit<A: Allocator>(self, alloc: &A) -> Result<(), Error> {
            let abort = AtomicBool::new(false);
            let results: Vec<Result<(), Error>> = std::thread::scope(|s| {
                let lanes: Vec<_> = self
                    .crash
                    .lanes_of(self.process)
                    .map(|lane| {
                        let abort = &abort;
                        s.spawn(move || {
                            pin(lane);
                            let r = crash::run_lane(self.crash, self.ctl, alloc, lane, self.seed, abort);
                            if r.is_err() {
                                // Relaxed: a flag; the other lanes of this process poll it.
                                abort.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                            r
                        })
                    })
                    .collect();
                lanes.into_iter().map(|l| l.join().unwrap_or_else(|_| Err("crash lane panicked".into()))).collect()
            });
            results.into_iter().collect::<Result<Vec<()>, Error>>()?;
            crash::record_pss(self.ctl, self.process, &alloc.heap_dirs());
            Ok(())
        }
    }
    allocator::open(&c.allocator, run_dir, Lanes { crash: &crash, ctl: &ctl, process, seed: c.seed })
}

/// Pins the calling thread to core `lane mod cores`, as the other benchmarks' threads are.
fn pin(lane: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut set = nix::sched::CpuSet::new();
    if set.set(lane % cores).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

/// One kill.
#[derive(Clone, Copy, Debug)]
struct Kill {
    /// Process index killed.
    process: usize,
    /// Seconds since the start of the kill schedule.
    at_s: f64,
    /// The victim was a replacement still starting (opening the allocator, adopting).
    at_startup: bool,
}

/// What the killing phase did.
#[derive(Debug, Default)]
struct Killed {
    /// Every kill, in order.
    kills: Vec<Kill>,
    /// Why the run was cut short as a time-out (workers wedged), if it was.
    timed_out: Option<String>,
    /// A worker that failed by itself (not killed): its process index and message.
    worker_error: Option<(usize, String)>,
    /// Seconds from the start of the kill schedule to the stop.
    secs: f64,
    /// Per process: (t_s, ops/s) points over the run.
    timeline: Vec<Vec<[f64; 2]>>,
    /// Longest time from a kill to its replacement's first operation on every lane, seconds.
    restart_max_s: f64,
    /// Longest lack of progress the coordinator saw on a running lane, seconds.
    observed_stall_s: f64,
    /// Every lane's operation count when the kill schedule started (the start-up before it is
    /// not part of the measured time).
    ops_at_start: Vec<u64>,
    /// The system clock when the kill schedule started, nanoseconds since the Unix epoch.
    start_unix_ns: u64,
}

/// One worker incarnation.
struct Incarnation {
    child: Child,
    /// Collects the worker's stderr (why it failed, if it does).
    stderr: Option<JoinHandle<String>>,
    spawned: Instant,
    /// The kill that made this incarnation a replacement (for the restart time).
    replaces: Option<Instant>,
    /// Every lane has completed an operation since the spawn.
    running: bool,
    /// Lane counters at the spawn.
    ops_at_spawn: Vec<u64>,
    /// When to kill it during its start-up, if it is chosen for that.
    startup_kill: Option<Instant>,
}

fn spawn(exe: &Path, dir: &Path, process: usize, crash: &Crash, ctl: &Control<'_>) -> Result<Incarnation, Error> {
    let mut child = worker_command(exe, dir, process)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting crash worker {process} ({}): {e}", exe.display()))?;
    let stderr = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        })
    });
    Ok(Incarnation {
        child,
        stderr,
        spawned: Instant::now(),
        replaces: None,
        running: false,
        ops_at_spawn: crash.lanes_of(process).map(|l| ctl.ops(l)).collect(),
        startup_kill: None,
    })
}

/// Kills `inc` (SIGKILL) and reaps it, so its thread slots read as dead.
fn kill(inc: &mut Incarnation) {
    let _ = inc.child.kill();
    let _ = inc.child.wait();
    if let Some(r) = inc.stderr.take() {
        let _ = r.join();
    }
}

/// The killer: starts the workers, kills and replaces them on schedule while sampling their
/// progress, and stops them.
fn kill_and_replace(job: &Job, crash: &Crash, ctl: &Control<'_>, exe: &Path, dir: &Path) -> Result<Killed, Error> {
    let mut procs: Vec<Incarnation> = Vec::with_capacity(crash.processes);
    for p in 0..crash.processes {
        match spawn(exe, dir, p, crash, ctl) {
            Ok(inc) => procs.push(inc),
            Err(e) => {
                procs.iter_mut().for_each(kill);
                return Err(e);
            }
        }
    }
    let result = drive(job, crash, ctl, exe, dir, &mut procs);
    // Whatever happened, no worker outlives the coordinator's attention.
    procs.iter_mut().for_each(kill);
    result
}

fn drive(
    job: &Job,
    crash: &Crash,
    ctl: &Control<'_>,
    exe: &Path,
    dir: &Path,
    procs: &mut [Incarnation],
) -> Result<Killed, Error> {
    let hard_limit = Instant::now() + Duration::from_secs(job.config.timeout_s);
    let sample = Duration::from_millis(crash.sample_ms);
    let timeout = Duration::from_millis(crash.timeout_ms);
    let mut rng = Rng::new(job.config.seed, 0xc4a5_4b11);
    let mut out = Killed { timeline: vec![Vec::new(); crash.processes], ..Killed::default() };
    // Lane progress as the coordinator sees it: last value and when it last changed.
    let mut seen: Vec<(u64, Instant)> = (0..crash.threads).map(|l| (ctl.ops(l), Instant::now())).collect();

    // The schedule starts once every worker runs, so a slow start is not a kill window.
    let mut start: Option<Instant> = None;
    let mut schedule: Vec<Duration> = Vec::new();
    let mut next = 0usize;
    let mut last_kill: Option<Instant> = None;
    // Timeline: per process, the last point's time and ops.
    let bin = Duration::from_millis((crash.sample_ms * 5).max(50));
    let mut last_point: Vec<(Instant, u64)> = Vec::new();
    loop {
        std::thread::sleep(sample);
        let now = Instant::now();
        if now > hard_limit {
            return Err(format!("crash run exceeded its {} s limit", job.config.timeout_s).into());
        }
        // A worker that exits by itself failed (a running worker exits only when stopped).
        for (p, inc) in procs.iter_mut().enumerate() {
            if let Ok(Some(status)) = inc.child.try_wait() {
                let text = inc.stderr.take().and_then(|r| r.join().ok()).unwrap_or_default();
                let text: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                out.worker_error = Some((p, format!("worker {p} {status}: {}", text.join(" | "))));
            }
        }
        if out.worker_error.is_some() {
            break;
        }
        // Progress.
        for (l, s) in seen.iter_mut().enumerate() {
            let ops = ctl.ops(l);
            if ops != s.0 {
                *s = (ops, now);
            }
        }
        for (p, inc) in procs.iter_mut().enumerate() {
            if !inc.running && crash.lanes_of(p).zip(&inc.ops_at_spawn).all(|(l, &o)| ctl.ops(l) > o) {
                inc.running = true;
                inc.startup_kill = None;
                if let Some(k) = inc.replaces {
                    out.restart_max_s = out.restart_max_s.max((now - k).as_secs_f64());
                }
            }
        }
        // Time-out: a running worker's lane that stopped moving, or a worker that never starts.
        for (p, inc) in procs.iter().enumerate() {
            let stuck = if inc.running {
                crash.lanes_of(p).map(|l| now - seen[l].1).max().unwrap_or_default()
            } else {
                now - inc.spawned
            };
            if inc.running {
                out.observed_stall_s = out.observed_stall_s.max(stuck.as_secs_f64());
            }
            if stuck > timeout {
                let what = if inc.running { "made no progress" } else { "did not start" };
                out.timed_out = Some(format!("worker {p} {what} for {} ms", stuck.as_millis()));
            }
        }
        if out.timed_out.is_some() {
            // How long nothing at all has moved (every worker wedged, or replaced and stuck).
            let latest = seen.iter().map(|s| s.1).max().unwrap_or(now);
            out.observed_stall_s = out.observed_stall_s.max((now - latest).as_secs_f64());
            break;
        }
        let Some(t0) = start else {
            if procs.iter().all(|i| i.running) {
                start = Some(now);
                out.ops_at_start = (0..crash.threads).map(|l| ctl.ops(l)).collect();
                out.start_unix_ns = crash::unix_nanos();
                ctl.start();
                let window = crash.duration_ms as f64;
                schedule = (0..crash.kills)
                    .map(|_| {
                        Duration::from_micros(((crash.warmup_ms as f64 + rng_f64(&mut rng) * window) * 1e3) as u64)
                    })
                    .collect();
                schedule.sort();
                last_point = (0..crash.processes).map(|p| (now, crash.lanes_of(p).map(|l| ctl.ops(l)).sum())).collect();
            }
            continue;
        };
        let elapsed = now - t0;
        for (p, point) in last_point.iter_mut().enumerate() {
            if now - point.0 >= bin {
                let ops: u64 = crash.lanes_of(p).map(|l| ctl.ops(l)).sum();
                let rate = (ops - point.1) as f64 / (now - point.0).as_secs_f64();
                out.timeline[p].push([(elapsed.as_secs_f64() * 1e3).round() / 1e3, rate.round()]);
                *point = (now, ops);
            }
        }
        // A replacement picked for a start-up kill; it takes the last scheduled kill's place.
        for p in 0..procs.len() {
            if next < schedule.len() && procs[p].startup_kill.is_some_and(|at| now >= at) {
                schedule.pop();
                let k = replace(crash, ctl, exe, dir, procs, p, &mut rng)?;
                out.kills.push(Kill { process: p, at_s: (k - t0).as_secs_f64(), at_startup: true });
                last_kill = Some(k);
            }
        }
        if next < schedule.len() && elapsed >= schedule[next] {
            let running: Vec<usize> = (0..procs.len()).filter(|&p| procs[p].running).collect();
            if !running.is_empty() {
                let p = running[rng.below(running.len() as u64) as usize];
                let k = replace(crash, ctl, exe, dir, procs, p, &mut rng)?;
                out.kills.push(Kill { process: p, at_s: (k - t0).as_secs_f64(), at_startup: false });
                last_kill = Some(k);
                next += 1;
            }
        }
        let settled = last_kill.is_none_or(|k| now - k >= Duration::from_millis(crash.settle_ms));
        let window_over = elapsed >= Duration::from_millis(crash.warmup_ms + crash.duration_ms);
        if next >= schedule.len() && settled && window_over && procs.iter().all(|i| i.running) {
            out.secs = elapsed.as_secs_f64();
            break;
        }
    }
    if let Some(t0) = start {
        if out.secs == 0.0 {
            out.secs = (Instant::now() - t0).as_secs_f64();
        }
    }
    if out.timed_out.is_some() {
        return Ok(out);
    }
    // Stop: every worker finishes its operation and exits.
    ctl.stop();
    let deadline = Instant::now() + timeout;
    for (p, inc) in procs.iter_mut().enumerate() {
        loop {
            match inc.child.try_wait() {
                Ok(Some(status)) => {
                    let text = inc.stderr.take().and_then(|r| r.join().ok()).unwrap_or_default();
                    if !status.success() && out.worker_error.is_none() {
                        let text: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                        out.worker_error = Some((p, format!("worker {p} {status}: {}", text.join(" | "))));
                    }
                    break;
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
                Ok(None) => {
                    out.timed_out = Some(format!("worker {p} did not stop within {} ms", timeout.as_millis()));
                    return Ok(out);
                }
                Err(e) => return Err(format!("waiting for crash worker {p}: {e}").into()),
            }
        }
    }
    Ok(out)
}

/// Uniform in `[0, 1)`.
fn rng_f64(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Kills process index `p`'s incarnation, reaps it and starts its replacement (which, one time
/// in `startup_kill_one_in`, is marked to be killed during its start-up). Returns the kill time.
#[allow(clippy::too_many_arguments)]
fn replace(
    crash: &Crash,
    ctl: &Control<'_>,
    exe: &Path,
    dir: &Path,
    procs: &mut [Incarnation],
    p: usize,
    rng: &mut Rng,
) -> Result<Instant, Error> {
    kill(&mut procs[p]);
    let killed = Instant::now();
    let mut inc = spawn(exe, dir, p, crash, ctl)?;
    inc.replaces = Some(procs[p].replaces.filter(|_| !procs[p].running).unwrap_or(killed));
    if crash.startup_kill_one_in > 0 && rng.one_in(crash.startup_kill_one_in) {
        // Somewhere in exec, mapping, adoption and repair: a few milliseconds here.
        inc.startup_kill = Some(inc.spawned + Duration::from_micros(rng.range(0, 20_000)));
    }
    procs[p] = inc;
    Ok(killed)
}

/// The outcome of a crash run, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Workers wedged (or the clean-up did): the run was cut short.
    TimeOut,
    /// A worker failed by itself (an allocator error, a block that did not read back).
    WorkerError,
    /// The checker (or the application's stamps) found inconsistencies.
    Inconsistent,
    /// Blocks (or bytes) were left allocated after everything named was freed.
    Leaked,
    /// None of the above.
    Clean,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::TimeOut => "time-out",
            Outcome::WorkerError => "worker-error",
            Outcome::Inconsistent => "inconsistent",
            Outcome::Leaked => "leaked",
            Outcome::Clean => "clean",
        }
    }
}

/// The run's numbers, the same in every line.
#[derive(Debug)]
struct Summary {
    outcome: Outcome,
    /// Why it is not clean (empty when clean).
    why: String,
    inconsistencies: Option<u64>,
    leaked_blocks: Option<u64>,
    leaked_bytes: Option<u64>,
    named_at_end: Option<u64>,
    longest_stall_ms: f64,
    /// The lane with the longest gap, when its gap started (seconds into the schedule) and the
    /// kills that fell in it (from 10 ms before): a gap with kills in it is a survivor waiting
    /// on something of the killed worker's, one without is the machine's scheduling.
    longest_stall_at: Option<(usize, f64, usize)>,
    /// Replacements' adoptions, and the clean-up's.
    recoveries: Vec<Logged>,
    end_recoveries: Vec<Recovered>,
    heap_check: Value,
}

impl Summary {
    fn of(crash: &Crash, ctl: &Control<'_>, killed: &Killed, cleaned: Option<&CleanUp>) -> Self {
        let worker_gap = (0..crash.threads).map(|l| ctl.max_gap(l)).max().unwrap_or_default().as_secs_f64();
        let longest_stall_at = (0..crash.threads).max_by_key(|&l| ctl.max_gap(l)).and_then(|l| {
            let end = ctl.max_gap_end(l).as_nanos() as f64 * 1e-9;
            let start = end - ctl.max_gap(l).as_secs_f64() - killed.start_unix_ns as f64 * 1e-9;
            let end = end - killed.start_unix_ns as f64 * 1e-9;
            let kills = killed.kills.iter().filter(|k| k.at_s >= start - 0.01 && k.at_s <= end).count();
            (ctl.max_gap_end(l) > Duration::ZERO && killed.start_unix_ns > 0).then_some((l, start, kills))
        });
        let mut longest = worker_gap;
        if killed.timed_out.is_some() {
            longest = longest.max(killed.observed_stall_s);
        }
        let mut s = Summary {
            outcome: Outcome::Clean,
            why: String::new(),
            inconsistencies: None,
            leaked_blocks: None,
            leaked_bytes: None,
            named_at_end: None,
            longest_stall_ms: (longest * 1e4).round() / 10.0,
            longest_stall_at,
            recoveries: ctl.recoveries(),
            end_recoveries: Vec::new(),
            heap_check: Value::Null,
        };
        let mut why = Vec::new();
        if let Some(t) = &killed.timed_out {
            s.outcome = Outcome::TimeOut;
            why.push(t.clone());
        }
        if let Some((_, e)) = &killed.worker_error {
            if s.outcome == Outcome::Clean {
                s.outcome = Outcome::WorkerError;
            }
            why.push(e.clone());
        }
        if let Some(c) = cleaned {
            let problems = c.audit.as_ref().map_or(0, |a| a.problems);
            let inconsistencies = problems + (c.corrupt.len() + c.free_errors.len() + c.adopt_errors.len()) as u64;
            s.inconsistencies = Some(inconsistencies);
            s.leaked_blocks = c.audit.as_ref().and_then(|a| a.live_blocks);
            s.leaked_bytes = c.leaked_bytes;
            s.named_at_end = Some(c.named);
            s.end_recoveries = c.recovered.clone();
            s.heap_check = c.audit.as_ref().map_or(Value::Null, |a| a.detail.clone());
            let first = |v: &[String]| v.first().cloned().unwrap_or_default();
            if inconsistencies > 0 {
                if s.outcome == Outcome::Clean {
                    s.outcome = Outcome::Inconsistent;
                }
                why.push(format!(
                    "{problems} checker problem(s), {} corrupt block(s) {}, {} failed free(s) {}, {} failed adoption(s) {}",
                    c.corrupt.len(),
                    first(&c.corrupt),
                    c.free_errors.len(),
                    first(&c.free_errors),
                    c.adopt_errors.len(),
                    first(&c.adopt_errors)
                ));
                if let Some(report) = s.heap_check.get("report").and_then(Value::as_str) {
                    why.push(report.replace('\n', "; "));
                }
            }
            let leaked = match (s.leaked_blocks, s.leaked_bytes) {
                (Some(b), _) if b > 0 => Some(format!("{b} block(s) left allocated")),
                (_, Some(b)) if b > 0 => Some(format!("{b} byte(s) of the segment lost")),
                (None, None) => Some("leaks cannot be counted".into()),
                _ => None,
            };
            if let Some(l) = leaked {
                if s.outcome == Outcome::Clean {
                    s.outcome = Outcome::Leaked;
                }
                why.push(l);
            }
        }
        s.why = why.join("; ");
        s
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The run's lines: one per process index, over all its incarnations.
fn records(job: &Job, crash: &Crash, ctl: &Control<'_>, killed: &Killed, s: &Summary) -> Vec<Record> {
    let secs = killed.secs.max(1e-9);
    let all_ms: Vec<f64> =
        s.recoveries.iter().map(|r| r.duration).chain(s.end_recoveries.iter().map(|r| r.duration)).map(ms).collect();
    let run_extra = json!({
        "outcome": s.outcome.name(),
        "why": s.why,
        "kills": killed.kills.len(),
        "kills_planned": crash.kills,
        "kills_at_startup": killed.kills.iter().filter(|k| k.at_startup).count(),
        "inconsistencies": s.inconsistencies,
        "leaked_blocks": s.leaked_blocks,
        "leaked_bytes": s.leaked_bytes,
        "blocks_named_at_end": s.named_at_end,
        "longest_stall_ms": s.longest_stall_ms,
        "longest_stall_lane": s.longest_stall_at.map(|a| a.0),
        "longest_stall_at_s": s.longest_stall_at.map(|a| (a.1 * 1e3).round() / 1e3),
        "kills_in_longest_stall": s.longest_stall_at.map(|a| a.2),
        "stall_threshold_ms": crash.stall_ms,
        "stalled": s.longest_stall_ms > crash.stall_ms as f64,
        "observed_stall_ms": (killed.observed_stall_s * 1e4).round() / 10.0,
        "restart_max_ms": (killed.restart_max_s * 1e4).round() / 10.0,
        "recoveries": all_ms.len(),
        "recoveries_in_flight": s.recoveries.iter().filter(|r| r.in_flight).count()
            + s.end_recoveries.iter().filter(|r| r.in_flight).count(),
        "recoveries_unlogged": ctl.recoveries_claimed().saturating_sub(s.recoveries.len() as u64),
        "recovery_ms_median": median(all_ms.clone()),
        "recovery_ms_max": all_ms.iter().copied().reduce(f64::max),
        "timed_out": killed.timed_out.is_some(),
        "worker_error": killed.worker_error.as_ref().map(|(_, e)| e.clone()),
    });
    let Value::Object(run_extra) = run_extra else { unreachable!("json! of an object") };
    (0..crash.processes)
        .map(|p| {
            let lanes = crash.lanes_of(p);
            let per_thread: Vec<ThreadTiming> = lanes
                .clone()
                .map(|l| {
                    let ops = ctl.ops(l) - killed.ops_at_start.get(l).copied().unwrap_or(0);
                    ThreadTiming { thread: l, ops, secs, cpu_user_s: 0.0, cpu_system_s: 0.0 }
                })
                .collect();
            let counts: Vec<(u64, u64, u64, u64)> = lanes.clone().map(|l| ctl.counts(l)).collect();
            let mut extra: Map<String, Value> = run_extra.clone();
            let kills: Vec<f64> = killed.kills.iter().filter(|k| k.process == p).map(|k| k.at_s).collect();
            let recoveries: Vec<Value> = s
                .recoveries
                .iter()
                .filter(|r| lanes.contains(&r.lane))
                .map(|r| json!({ "lane": r.lane, "slot": r.slot, "ms": ms(r.duration), "in_flight": r.in_flight }))
                .collect();
            extra.insert("process_kills".into(), Value::from(kills.len()));
            extra.insert("kill_times_s".into(), Value::from(kills));
            extra.insert("recovery_ms".into(), Value::from(recoveries));
            if p == 0 {
                let end: Vec<Value> = s
                    .end_recoveries
                    .iter()
                    .map(|r| json!({ "slot": r.slot, "ms": ms(r.duration), "in_flight": r.in_flight }))
                    .collect();
                extra.insert("end_recovery_ms".into(), Value::from(end));
            }
            extra.insert(
                "process_longest_stall_ms".into(),
                Value::from(lanes.clone().map(|l| ms(ctl.max_gap(l))).fold(0.0, f64::max)),
            );
            extra.insert("incarnations".into(), Value::from(counts.iter().map(|c| c.3).max().unwrap_or(0)));
            extra.insert("timeline".into(), json!(killed.timeline[p]));
            let (hwcc, swcc, other, total) = ctl.pss(p);
            let pss =
                Pss { hwcc_bytes: hwcc, swcc_bytes: swcc, other_bytes: other, total_bytes: total, ..Pss::default() };
            Record {
                allocated: counts.iter().map(|c| c.0).sum(),
                freed: counts.iter().map(|c| c.1).sum(),
                verified: counts.iter().map(|c| c.2).sum(),
                extra,
                memory: Memory { end: pss, peak: pss, samples: u64::from(total > 0), ..Memory::default() },
                heap_check: s.heap_check.clone(),
                ..Record::for_job(job, p, per_thread)
            }
        })
        .collect()
}

/// A crash run's row of the results table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Benchmark and parameters.
    pub what: String,
    /// Allocator label.
    pub allocator: String,
    /// Processes.
    pub processes: usize,
    /// Threads.
    pub threads: usize,
    /// `extra` of the run's first line (the run-wide numbers).
    pub extra: Map<String, Value>,
}

/// One row per complete crash run among `records`, in first-seen order.
pub fn rows(records: &[Record]) -> Vec<Row> {
    let mut runs: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    let mut order = Vec::new();
    for r in records.iter().filter(|r| r.benchmark == crash::NAME) {
        let lines = runs.entry(&r.run_id).or_default();
        if lines.is_empty() {
            order.push(r.run_id.as_str());
        }
        lines.push(r);
    }
    order
        .into_iter()
        .filter_map(|id| {
            let lines = &runs[id];
            let head = lines.iter().find(|r| r.process == 0)?;
            if lines.len() != head.processes {
                return None;
            }
            let params: Vec<String> =
                head.params.iter().map(|(k, v)| format!("{k}={}", super::workload::scalar_text(v))).collect();
            Some(Row {
                what: format!("{} {}", head.benchmark, params.join(" ")).trim().to_owned(),
                allocator: head.allocator_label.clone(),
                processes: head.processes,
                threads: head.threads,
                extra: head.extra.clone(),
            })
        })
        .collect()
}

/// The crash runs' table: kills survived, outcome, inconsistencies, leaks, the longest
/// survivor stall and recovery times (median / max over every slot recovered).
pub fn render(rows: &[Row]) -> String {
    use std::fmt::Write;
    if rows.is_empty() {
        return String::new();
    }
    let what_width = rows.iter().map(|r| r.what.len()).max().unwrap_or(9).max(9);
    let alloc_width = rows.iter().map(|r| r.allocator.len()).max().unwrap_or(9).max(9);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<what_width$}  {:<alloc_width$}  {:>2} {:>3}  {:>5}  {:<12}  {:>8}  {:>8}  {:>9}  {:>17}",
        "crash run", "allocator", "P", "T", "kills", "outcome", "inconsis", "leaked", "stall ms", "recovery ms med/max"
    );
    let num = |v: Option<&Value>| match v {
        Some(Value::Null) | None => "-".to_owned(),
        Some(v) => super::workload::scalar_text(v),
    };
    let float = |v: Option<&Value>, digits: usize| {
        v.and_then(Value::as_f64).map_or("-".to_owned(), |x| format!("{x:.digits$}"))
    };
    for r in rows {
        let e = &r.extra;
        let leaked =
            match (e.get("leaked_blocks").and_then(Value::as_u64), e.get("leaked_bytes").and_then(Value::as_u64)) {
                (Some(b), _) => b.to_string(),
                (None, Some(bytes)) => format!("{bytes} B"),
                (None, None) => "-".to_owned(),
            };
        let stalled = if e.get("stalled").and_then(Value::as_bool) == Some(true) { "!" } else { "" };
        let _ = writeln!(
            out,
            "{:<what_width$}  {:<alloc_width$}  {:>2} {:>3}  {:>5}  {:<12}  {:>8}  {:>8}  {:>9}  {:>17}",
            r.what,
            r.allocator,
            r.processes,
            r.threads,
            num(e.get("kills")),
            num(e.get("outcome")),
            num(e.get("inconsistencies")),
            leaked,
            format!("{}{stalled}", float(e.get("longest_stall_ms"), 1)),
            format!("{} / {}", float(e.get("recovery_ms_median"), 3), float(e.get("recovery_ms_max"), 3)),
        );
    }
    out
}

/// Whether `job` is a crash run (run by this module's coordinator and workers).
pub fn is_crash(job: &Job) -> bool {
    job.config.benchmark == crash::NAME
}
