//! The NDJSON record: one line per worker process per run (docs/design.md §12.4). `plot/` reads these
//! lines; change [`SCHEMA`] when a field changes meaning or goes away.
//!
//! A run's lines share `run_id`; its throughput is the sum of the lines' `throughput` (each is
//! Σ over the process's threads of ops / seconds) and its memory the sum of their PSS.
//!
//! A `crash` run writes one line per process index, over every incarnation of it (killed
//! workers and their replacements), with the run's kills, outcome, leaks, stalls and recovery
//! times in `extra` (see [`super::crash`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

pub use super::backing::Backing;
use super::job::Job;

/// Version of the record layout.
pub const SCHEMA: u32 = 1;

/// One worker process's line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// [`SCHEMA`].
    pub schema: u32,
    /// Groups the lines of one run (one configuration, one repeat).
    pub run_id: String,
    /// When the driver started, UTC, `YYYY-MM-DDTHH:MM:SSZ`; groups the runs of one invocation.
    pub date: String,
    /// Workload file stem (`mini`, `main`, ...).
    pub workload: String,
    /// Stable id of the configuration (all settings but the repeat): the resume key.
    pub config_id: String,
    /// Repeat index, `0..repeats`.
    pub repeat: u32,
    /// Benchmark name.
    pub benchmark: String,
    /// Benchmark parameters, as expanded.
    pub params: BTreeMap<String, Value>,
    /// Allocator name.
    pub allocator: String,
    /// Allocator settings as given in the workload file (defaults not spelled out).
    pub allocator_settings: BTreeMap<String, Value>,
    /// Name plus settings, the row label in tables and plots.
    pub allocator_label: String,
    /// Worker processes in the run.
    pub processes: usize,
    /// Threads in the run, over all processes.
    pub threads: usize,
    /// This process, `0..processes`.
    pub process: usize,
    /// Seed of the configuration.
    pub seed: u64,
    /// Per-thread timing, in global thread id order.
    pub per_thread: Vec<ThreadTiming>,
    /// Σ ops over this process's threads.
    pub ops: u64,
    /// Σ over this process's threads of ops / secs, in operations per second.
    pub throughput: f64,
    /// Blocks allocated by this process's threads (timed or not).
    pub allocated: u64,
    /// Blocks freed by this process's threads; summed over the run it equals `allocated`.
    pub freed: u64,
    /// Values verified byte for byte on read.
    pub verified: u64,
    /// Benchmark-specific counts, summed over this process's threads.
    pub extra: Map<String, Value>,
    /// PSS split by coherence class.
    pub memory: Memory,
    /// `getrusage(RUSAGE_SELF)` at the end of the worker.
    pub rusage: Rusage,
    /// Allocator statistics after the run (`null` when it keeps none).
    pub allocator_stats: Value,
    /// The heap checker's findings after all workers exited (`null` when nothing to check).
    pub heap_check: Value,
    /// The trace replayed (memcached), `null` otherwise: `{"synthetic": bool, "cluster",
    /// "seed", "path"}`.
    pub trace: Value,
    /// Machine facts: `{"cores", "kernel"}`.
    pub host: Value,
    /// The run root and what its mount gives (huge pages or not), read by the worker from its
    /// mount table (docs/design.md §12.1); empty in records from before it was kept.
    #[serde(default)]
    pub backing: Backing,
}

/// One thread's timing.
impl Record {
    /// A line of `job`'s run for worker `process` with these thread timings: the run's
    /// identity, settings, timings and host filled in; counts, extras and measurements empty,
    /// for the caller to set.
    pub fn for_job(job: &Job, process: usize, per_thread: Vec<ThreadTiming>) -> Self {
        let c = &job.config;
        Record {
            schema: SCHEMA,
            run_id: job.run_id.clone(),
            date: job.date.clone(),
            workload: job.workload.clone(),
            config_id: c.id(),
            repeat: job.repeat,
            benchmark: c.benchmark.clone(),
            params: c.params.clone(),
            allocator: c.allocator.name.clone(),
            allocator_settings: c.allocator.settings.clone(),
            allocator_label: c.allocator.label(),
            processes: c.processes,
            threads: c.threads,
            process,
            seed: c.seed,
            throughput: per_thread.iter().map(|t| t.ops as f64 / t.secs.max(1e-9)).sum(),
            ops: per_thread.iter().map(|t| t.ops).sum(),
            per_thread,
            allocated: 0,
            freed: 0,
            verified: 0,
            extra: Map::new(),
            memory: Memory::default(),
            rusage: Rusage::default(),
            allocator_stats: Value::Null,
            heap_check: Value::Null,
            trace: Value::Null,
            host: json!({
                "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
                "kernel": nix::sys::utsname::uname()
                    .map(|u| u.release().to_string_lossy().into_owned())
                    .unwrap_or_default(),
            }),
            backing: Backing {
                requested: c.huge_pages,
                fallback: job.huge_fallback.clone(),
                ..Backing::of(&job.run_root)
            },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadTiming {
    /// Global thread id.
    pub thread: usize,
    /// Operations in its timed section.
    pub ops: u64,
    /// Seconds between its start and stop barriers.
    pub secs: f64,
    /// User CPU seconds of the thread over the same section (`getrusage(RUSAGE_THREAD)`; 0 in
    /// records written before it was kept, and in crash runs).
    #[serde(default)]
    pub cpu_user_s: f64,
    /// System CPU seconds of the thread over the same section.
    #[serde(default)]
    pub cpu_system_s: f64,
}

/// One process's PSS, in bytes, from `/proc/self/smaps` through the region table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Measured right after the timed section (every thread past the stop barrier).
    pub end: Pss,
    /// The largest of the samples taken through the run (and the end measurement), per field.
    pub peak: Pss,
    /// `VmHWM`: peak resident set.
    pub peak_rss_bytes: u64,
    /// Samples taken.
    pub samples: u64,
    /// The end-of-run HWcc PSS (`end.hwcc_bytes`) by region (all 0 in records written before it
    /// was kept, and in crash runs).
    #[serde(default)]
    pub end_hwcc: HwccRegions,
}

/// HWcc PSS by heap region, in bytes: what `Pss::hwcc_bytes` is made of (docs/design.md §2.1,
/// §9.1 "HWcc bytes").
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HwccRegions {
    /// The `shared` region: bracket globals, roots, host table, slot records.
    pub shared_bytes: u64,
    /// The `claims` region: huge-slot claims and hazard-set leases.
    pub claims_bytes: u64,
    /// The `remote` region: the per-slab remote-free counters.
    pub remote_bytes: u64,
    /// No-HWcc heaps' mCAS window files (their HWcc regions and requester slots together).
    pub window_bytes: u64,
}

/// PSS split by coherence class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pss {
    /// HWcc heap regions.
    pub hwcc_bytes: u64,
    /// SWcc heap regions.
    pub swcc_bytes: u64,
    /// Everything else (the binary, libraries, stacks, process-local allocators' memory).
    pub other_bytes: u64,
    /// The whole process.
    pub total_bytes: u64,
    /// Of the heap's region files (HWcc and SWcc), the bytes mapped by 2 MiB pages: 0 unless the
    /// run root gives every file huge pages (`huge=within_size`), docs/design.md §7.6. Not PSS:
    /// the process's own mapped bytes. Absent in records written before it existed (read as 0).
    #[serde(default)]
    pub region_huge_bytes: u64,
    /// Of every other file mapping (the huge blocks' objects among them), the bytes mapped by
    /// 2 MiB pages.
    #[serde(default)]
    pub other_huge_bytes: u64,
}

/// Resource use of the worker process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rusage {
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub system_s: f64,
    /// Minor page faults.
    pub minor_faults: u64,
    /// Major page faults.
    pub major_faults: u64,
    /// Voluntary context switches.
    pub voluntary_switches: u64,
    /// Involuntary context switches.
    pub involuntary_switches: u64,
}
