//! The supervisor (docs/design.md §16.6): listens on the port, starts one worker process per
//! index (this binary again, inheriting the listening socket), restarts a worker that dies, and
//! on SIGTERM/SIGINT stops them all and returns.

use std::os::fd::RawFd;
use std::process::{Child, Command};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::crash;
use crate::server::STOP;
use crate::store::Store;

/// What the supervisor needs to start workers.
#[derive(Clone, Debug)]
pub struct Options {
    /// Address to listen on.
    pub listen: String,
    /// TCP port.
    pub port: u16,
    /// Worker processes.
    pub workers: usize,
    /// Heap name.
    pub heap: String,
    /// Bucket count's log2 (used when the table is created).
    pub buckets_log2: u32,
}

/// The crash point the `generation`th process of a worker index is armed with: the
/// `+`-separated stages of [`crash::ENV`] in turn, then none.
fn crash_stage(generation: usize) -> Option<String> {
    let spec = std::env::var(crash::ENV).ok()?;
    spec.split('+').nth(generation).map(str::to_string)
}

fn spawn(o: &Options, k: usize, fd: RawFd, generation: usize) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["--worker-index", &k.to_string(), "--listen-fd", &fd.to_string()])
        .args(["--heap", &o.heap, "--workers", &o.workers.to_string()])
        .args(["--buckets-log2", &o.buckets_log2.to_string(), "--port", &o.port.to_string()]);
    // A crash point fires in one process of an index only (see `crash`).
    match crash_stage(generation) {
        Some(stage) => cmd.env(crash::ENV, stage),
        None => cmd.env_remove(crash::ENV),
    };
    cmd.spawn().map_err(|e| format!("starting worker {k}: {e}"))
}

/// Runs the server until SIGTERM/SIGINT: starts the workers, restarts any that dies, then
/// stops them. Errors: the port or heap cannot be had, or a worker fails at start.
pub fn run(o: &Options, store: &Store, fd: RawFd) -> Result<(), String> {
    let mut kids: Vec<Option<(Child, Instant)>> = Vec::new();
    let mut generation = vec![0usize; o.workers];
    for k in 0..o.workers {
        kids.push(Some((spawn(o, k, fd, 0)?, Instant::now())));
    }
    let mut failure = None;
    // Relaxed: set by the signal handler; polled every 20 ms.
    while !STOP.load(Ordering::Relaxed) && failure.is_none() {
        std::thread::sleep(Duration::from_millis(20));
        for k in 0..o.workers {
            let Some((child, started)) = kids[k].as_mut() else { continue };
            let Ok(Some(status)) = child.try_wait() else { continue };
            if STOP.load(Ordering::Relaxed) {
                kids[k] = None;
                continue;
            }
            // A worker that exits by itself right after starting cannot start: give up rather
            // than loop. A killed one (a signal, no exit code) is restarted.
            if status.code().is_some_and(|c| c != 0) && started.elapsed() < Duration::from_secs(1) {
                failure = Some(format!("worker {k} failed at start ({status})"));
                kids[k] = None;
                break;
            }
            eprintln!("cxlkv: worker {k} (pid {}) ended ({status}); restarting it", child.id());
            store.count_restart();
            generation[k] += 1;
            kids[k] = Some((spawn(o, k, fd, generation[k])?, Instant::now()));
        }
    }
    stop_all(&mut kids);
    failure.map_or(Ok(()), Err)
}

/// SIGTERM to every worker, then SIGKILL to those still there after 5 s; reaps them all.
fn stop_all(kids: &mut [Option<(Child, Instant)>]) {
    for (child, _) in kids.iter().flatten() {
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for slot in kids.iter_mut() {
        let Some((child, _)) = slot.as_mut() else { continue };
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
            let _ = child.wait();
        }
        *slot = None;
    }
}
