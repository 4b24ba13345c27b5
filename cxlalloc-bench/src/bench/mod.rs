//! The benchmarks (docs/design.md §12.2) as the harness runs them: one [`Benchmark`] per name, each a
//! per-thread body that a worker process runs on every one of its threads.
//!
//! A benchmark sees its parameters ([`Params`], scalars from the workload file), where its
//! thread sits in the run ([`Shape`]), the allocator and its [`Handles`], and its own words of
//! the run's shared control area (zero-filled at the start). It marks its timed section with
//! [`Phases::start`] and [`Phases::stop`] — both barriers across every thread of every
//! process — and may add [`Phases::sync`] barriers for untimed set-up and tear-down. Every
//! thread must make the same sequence of phase calls.
//!
//! Built-in correctness checks report through [`Report`]: `allocated` and `freed` are summed
//! over the run and must match, and `verified` counts values checked on read. A failed check is
//! an error, never a silently wrong number.

pub mod crash;
pub mod huge;
pub mod kv;
pub mod larson;
pub mod memcached;
pub mod mstress;
pub mod queue;
pub mod stress;
pub mod threadtest;
pub mod xmalloc;
pub mod ycsb;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use serde_json::{Map, Value};

use crate::allocator::{Allocator, Handles};
use crate::barrier::Barrier;
use crate::Error;

/// A benchmark's parameters for one configuration: scalar values by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params(pub BTreeMap<String, Value>);

impl Params {
    /// Parameters from `(name, value)` pairs (tests and tools; workload files go through the
    /// harness).
    pub fn of<V: Into<Value> + Clone>(pairs: &[(&str, V)]) -> Self {
        Params(pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone().into())).collect())
    }

    /// Fails on a key not in `known` (a misspelt parameter would otherwise silently default).
    pub fn only(&self, bench: &str, known: &[&str]) -> Result<(), Error> {
        match self.0.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(format!("{bench}: unknown parameter {k:?} (known: {})", known.join(", ")).into()),
            None => Ok(()),
        }
    }

    /// Parameter `key` as an unsigned integer, or `default`.
    pub fn u64(&self, key: &str, default: u64) -> Result<u64, Error> {
        match self.0.get(key) {
            None => Ok(default),
            Some(v) => v.as_u64().ok_or_else(|| format!("parameter {key} must be an unsigned integer, got {v}").into()),
        }
    }

    /// Parameter `key` as a number, or `default`.
    pub fn f64(&self, key: &str, default: f64) -> Result<f64, Error> {
        match self.0.get(key) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| format!("parameter {key} must be a number, got {v}").into()),
        }
    }

    /// Parameter `key` as a string, or `default`.
    pub fn str<'a>(&'a self, key: &str, default: &'a str) -> Result<&'a str, Error> {
        match self.0.get(key) {
            None => Ok(default),
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(format!("parameter {key} must be a string, got {v}").into()),
        }
    }

    /// Parameter `key` as a boolean, or `default`.
    pub fn bool(&self, key: &str, default: bool) -> Result<bool, Error> {
        match self.0.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| format!("parameter {key} must be true or false, got {v}").into()),
        }
    }
}

/// Where one thread sits in a run of `processes` × `threads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Worker processes in the run.
    pub processes: usize,
    /// Threads in the run, over all processes.
    pub threads: usize,
    /// This thread's process, `0..processes`.
    pub process: usize,
    /// This thread's global id, `0..threads`; process `p` runs a contiguous range of ids.
    pub thread: usize,
}

impl Shape {
    /// Threads process `process` runs: `threads / processes`, one more for the first
    /// `threads % processes` processes.
    pub fn threads_of(threads: usize, processes: usize, process: usize) -> usize {
        threads / processes + usize::from(process < threads % processes)
    }

    /// The first global thread id of process `process`.
    pub fn first_thread_of(threads: usize, processes: usize, process: usize) -> usize {
        (0..process).map(|p| Self::threads_of(threads, processes, p)).sum()
    }
}

/// What a benchmark thread gets.
#[derive(Debug)]
pub struct Ctx<'a, A: Allocator> {
    /// The allocator, shared by this process's threads.
    pub alloc: &'a A,
    /// Block handles for this process.
    pub handles: Handles,
    /// The benchmark's words of the control area (as many as [`Benchmark::shared_words`] asked
    /// for), the same words in every process.
    pub shared: &'a [AtomicU64],
    /// This thread's place.
    pub shape: Shape,
    /// The configuration's seed (derive per-thread streams from it and `shape.thread`).
    pub seed: u64,
}

/// What one thread reports besides its timing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Operations counted in the timed section (the throughput numerator).
    pub ops: u64,
    /// Blocks this thread allocated, timed or not.
    pub allocated: u64,
    /// Blocks this thread freed, timed or not (summed over the run, must equal `allocated`).
    pub freed: u64,
    /// Values checked byte for byte on read.
    pub verified: u64,
    /// Benchmark-specific counts recorded in the NDJSON line.
    pub extra: Map<String, Value>,
}

/// The phase barriers of one thread, and its timer.
pub struct Phases<'a> {
    barrier: Barrier<'a>,
    started: Option<Instant>,
    secs: Option<f64>,
    /// This thread's CPU time when its timer started, then what the timed section used.
    cpu_started: ThreadCpu,
    cpu: Option<ThreadCpu>,
    on_stop: &'a (dyn Fn() + Sync),
}

/// CPU time of one thread (`getrusage(RUSAGE_THREAD)`), in seconds: over a timed section it is
/// the measure to compare on a shared machine, where wall-clock also counts the time a thread
/// waited for a core, and where the process's rusage also counts untimed set-up and tear-down
/// (docs/design.md §12.4).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThreadCpu {
    /// User time.
    pub user_s: f64,
    /// System time.
    pub system_s: f64,
}

impl ThreadCpu {
    /// The calling thread's CPU time so far (zero if the kernel refuses, which only costs the
    /// measurement).
    pub fn now() -> Self {
        match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD) {
            Ok(u) => {
                let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
                Self { user_s: secs(u.user_time()), system_s: secs(u.system_time()) }
            }
            Err(_) => Self::default(),
        }
    }

    /// What was used between `earlier` and `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self { user_s: self.user_s - earlier.user_s, system_s: self.system_s - earlier.system_s }
    }
}

impl std::fmt::Debug for Phases<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Phases")
            .field("started", &self.started)
            .field("secs", &self.secs)
            .field("cpu", &self.cpu)
            .finish_non_exhaustive()
    }
}

impl<'a> Phases<'a> {
    /// Phases over `barrier`; `on_stop` runs on one thread right after the stop barrier (the
    /// worker's end-of-run memory measurement).
    pub fn new(barrier: Barrier<'a>, on_stop: &'a (dyn Fn() + Sync)) -> Self {
        Self { barrier, started: None, secs: None, cpu_started: ThreadCpu::default(), cpu: None, on_stop }
    }

    /// Waits for every thread, then starts this thread's timer.
    pub fn start(&mut self) -> Result<(), Error> {
        if self.started.is_some() {
            return Err("Phases::start called twice".into());
        }
        self.barrier.wait()?;
        self.cpu_started = ThreadCpu::now();
        self.started = Some(Instant::now());
        Ok(())
    }

    /// Stops this thread's timer, then waits for every thread.
    pub fn stop(&mut self) -> Result<(), Error> {
        let started = self.started.ok_or("Phases::stop before Phases::start")?;
        if self.secs.is_some() {
            return Err("Phases::stop called twice".into());
        }
        self.secs = Some(started.elapsed().as_secs_f64());
        self.cpu = Some(ThreadCpu::now().since(self.cpu_started));
        self.barrier.wait()?;
        (self.on_stop)();
        self.barrier.wait()
    }

    /// An untimed barrier across every thread.
    pub fn sync(&self) -> Result<(), Error> {
        self.barrier.wait()
    }

    /// Seconds between start and stop, once both were called.
    pub fn secs(&self) -> Result<f64, Error> {
        self.secs.ok_or_else(|| "the benchmark never called Phases::start and Phases::stop".into())
    }

    /// CPU time this thread used between start and stop, once both were called.
    pub fn cpu(&self) -> Result<ThreadCpu, Error> {
        self.cpu.ok_or_else(|| "the benchmark never called Phases::start and Phases::stop".into())
    }

    /// The run's abort word: raised by [`Phases::abort`] (or by a benchmark wait that stalls);
    /// a benchmark's own waits outside the barriers watch it, so one word ends them all.
    pub fn abort_word(&self) -> &'a AtomicU64 {
        self.barrier.abort_word()
    }

    /// Fails every other thread's barrier waits (this thread failed).
    pub fn abort(&self) {
        self.barrier.abort();
    }
}

/// One benchmark.
pub trait Benchmark: Sized + Sync {
    /// Reads and validates this benchmark's parameters for a run of `processes` × `threads`.
    fn new(params: &Params, processes: usize, threads: usize) -> Result<Self, Error>;

    /// Control-area words the benchmark needs (zero-filled at the start).
    fn shared_words(&self) -> usize {
        0
    }

    /// What the NDJSON line records about the trace a run with `seed` replays (`null` for
    /// benchmarks that replay none).
    fn trace(&self, _seed: u64) -> Value {
        Value::Null
    }

    /// One thread's body: must call [`Phases::start`] and [`Phases::stop`] exactly once. When it
    /// fails, its caller aborts the run ([`Phases::abort`]), which ends every other thread's
    /// barrier waits and every wait watching [`Phases::abort_word`].
    fn thread<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
    ) -> Result<Report, Error>;
}

/// Runs generic code on a constructed benchmark: [`with_benchmark`] calls [`Visit::visit`] with
/// the concrete benchmark type.
pub trait Visit {
    /// What the visit returns.
    type Output;

    /// Uses `bench`.
    fn visit<B: Benchmark>(self, bench: &B) -> Result<Self::Output, Error>;
}

/// Every benchmark name the harness knows.
pub const NAMES: [&str; 8] = ["threadtest", "xmalloc", "larson", "mstress", "ycsb", "memcached", "huge", "crash"];

/// Constructs benchmark `name` from `params` and runs `v` on it.
pub fn with_benchmark<V: Visit>(
    name: &str,
    params: &Params,
    processes: usize,
    threads: usize,
    v: V,
) -> Result<V::Output, Error> {
    match name {
        "threadtest" => v.visit(&threadtest::Threadtest::new(params, processes, threads)?),
        "xmalloc" => v.visit(&xmalloc::Xmalloc::new(params, processes, threads)?),
        "larson" => v.visit(&larson::Larson::new(params, processes, threads)?),
        "mstress" => v.visit(&mstress::Mstress::new(params, processes, threads)?),
        "ycsb" => v.visit(&ycsb::Ycsb::new(params, processes, threads)?),
        "memcached" => v.visit(&memcached::Memcached::new(params, processes, threads)?),
        "huge" => v.visit(&huge::Huge::new(params, processes, threads)?),
        "crash" => v.visit(&crash::Crash::new(params, processes, threads)?),
        other => Err(format!("unknown benchmark {other:?} (known: {})", NAMES.join(", ")).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_spread_evenly_and_contiguously_over_processes() {
        assert_eq!((0..3).map(|p| Shape::threads_of(8, 3, p)).collect::<Vec<_>>(), [3, 3, 2]);
        assert_eq!((0..3).map(|p| Shape::first_thread_of(8, 3, p)).collect::<Vec<_>>(), [0, 3, 6]);
    }

    #[test]
    fn misspelt_parameters_are_refused() {
        let p = Params([("sise".to_owned(), Value::from(8))].into_iter().collect());
        assert!(p.only("threadtest", &["size"]).unwrap_err().to_string().contains("sise"));
    }
}
