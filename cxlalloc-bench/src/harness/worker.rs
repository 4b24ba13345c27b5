//! A worker process: opens the allocator and the control area, runs its share of the
//! benchmark's threads (pinned, timed between process-shared barriers), samples its PSS, and
//! returns its NDJSON record.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use cxlalloc::internal::RegionId;
use serde_json::{Map, Value};

use super::job::{Job, CONTROL_FILE, HARNESS_WORDS};
use super::record::{HwccRegions, Memory, Pss, Record, Rusage, ThreadTiming};
use crate::allocator::{self, Allocator, Handles};
use crate::barrier::Barrier;
use crate::bench::{self, Benchmark, Ctx, Params, Phases, Report, Shape, ThreadCpu};
use crate::memory::{self, MemorySplit};
use crate::shm::SharedArea;
use crate::Error;

/// Runs process `process` of the run in `run_dir` and returns its record (`None` for a crash
/// run, whose coordinator reads everything from the control area: a killed worker prints
/// nothing).
pub fn work(run_dir: &Path, process: usize) -> Result<Option<Record>, Error> {
    let job = Job::read(run_dir)?;
    if process >= job.config.processes {
        return Err(format!("process {process} of a {}-process run", job.config.processes).into());
    }
    if super::crash::is_crash(&job) {
        return super::crash::work(&job, run_dir, process).map(|()| None);
    }
    let area = SharedArea::open(&run_dir.join(CONTROL_FILE))?;
    let barrier = job.barrier(&area)?;
    let shared = area.words().get(HARNESS_WORDS..).ok_or("control area too small")?;
    let result = allocator::open(&job.config.allocator, run_dir, OnAllocator { job: &job, process, barrier, shared });
    if result.is_err() {
        // Threads of other processes must not wait for this one at a barrier.
        barrier.abort();
    }
    result.map(Some)
}

struct OnAllocator<'a> {
    job: &'a Job,
    process: usize,
    barrier: Barrier<'a>,
    shared: &'a [std::sync::atomic::AtomicU64],
}

impl allocator::Visit for OnAllocator<'_> {
    type Output = Record;

    fn visit<A: Allocator>(self, alloc: &A) -> Result<Record, Error> {
        let c = &self.job.config;
        let params = Params(c.params.clone());
        bench::with_benchmark(&c.benchmark, &params, c.processes, c.threads, OnBenchmark { on: self, alloc })
    }
}

struct OnBenchmark<'a, A> {
    on: OnAllocator<'a>,
    alloc: &'a A,
}

impl<A: Allocator> bench::Visit for OnBenchmark<'_, A> {
    type Output = Record;

    fn visit<B: Benchmark>(self, bench: &B) -> Result<Record, Error> {
        let OnAllocator { job, process, barrier, shared } = self.on;
        let c = &job.config;
        let shared = shared.get(..bench.shared_words()).ok_or("control area smaller than the benchmark needs")?;
        let dirs = self.alloc.heap_dirs();
        let local = Shape::threads_of(c.threads, c.processes, process);
        let first = Shape::first_thread_of(c.threads, c.processes, process);
        let sampler = Sampler::default();
        let measured = AtomicBool::new(false);
        let on_stop = || {
            if !measured.swap(true, Ordering::AcqRel) {
                sampler.end(&dirs);
            }
        };
        let handles = Handles::of(self.alloc);
        let results: Vec<Result<(Report, f64, ThreadCpu), Error>> = std::thread::scope(|s| {
            let sampling = s.spawn(|| sampler.run(&dirs, Duration::from_millis(job.sample_ms.max(1))));
            let threads: Vec<_> = (first..first + local)
                .map(|thread| {
                    let shape = Shape { processes: c.processes, threads: c.threads, process, thread };
                    let ctx = Ctx { alloc: self.alloc, handles, shared, shape, seed: c.seed };
                    let on_stop = &on_stop;
                    s.spawn(move || {
                        let r = run_thread(bench, &ctx, barrier, on_stop);
                        if r.is_err() {
                            barrier.abort();
                        }
                        r
                    })
                })
                .collect();
            let results = threads
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|_| Err("benchmark thread panicked".into())))
                .collect();
            sampler.stop();
            if sampling.join().is_err() {
                return vec![Err("memory sampler panicked".into())];
            }
            results
        });
        let mut reports = Vec::with_capacity(results.len());
        for r in results {
            reports.push(r?);
        }
        let mut record = record(job, process, first, &reports, sampler.memory()?, self.alloc.stats());
        record.trace = bench.trace(c.seed);
        Ok(record)
    }
}

fn run_thread<A: Allocator, B: Benchmark>(
    bench: &B,
    ctx: &Ctx<'_, A>,
    barrier: Barrier<'_>,
    on_stop: &(dyn Fn() + Sync),
) -> Result<(Report, f64, ThreadCpu), Error> {
    pin(ctx.shape.thread);
    let mut phases = Phases::new(barrier, on_stop);
    let mut t = ctx.alloc.thread()?;
    let report = bench.thread(ctx, &mut t, &mut phases)?;
    Ok((report, phases.secs()?, phases.cpu()?))
}

/// Pins the calling thread to core `thread mod cores`; a failure only costs stability.
fn pin(thread: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut set = nix::sched::CpuSet::new();
    if set.set(thread % cores).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

/// PSS samples of this process: the end-of-run measurement and the field-wise peak.
#[derive(Default)]
struct Sampler {
    state: Mutex<SamplerState>,
    /// Set by `stop`; the condition variable wakes a sampler sleeping between samples.
    done: Mutex<bool>,
    wake: Condvar,
}

#[derive(Default)]
struct SamplerState {
    end: Option<(Pss, HwccRegions)>,
    peak: Pss,
    samples: u64,
    error: Option<String>,
}

impl Sampler {
    fn sample(&self, dirs: &[PathBuf]) -> Option<(Pss, HwccRegions)> {
        let measured = memory::measure(dirs);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match measured {
            Ok(split) => {
                let pss = pss_of(&split);
                let peak = &mut state.peak;
                peak.hwcc_bytes = peak.hwcc_bytes.max(pss.hwcc_bytes);
                peak.swcc_bytes = peak.swcc_bytes.max(pss.swcc_bytes);
                peak.other_bytes = peak.other_bytes.max(pss.other_bytes);
                peak.total_bytes = peak.total_bytes.max(pss.total_bytes);
                peak.region_huge_bytes = peak.region_huge_bytes.max(pss.region_huge_bytes);
                peak.other_huge_bytes = peak.other_huge_bytes.max(pss.other_huge_bytes);
                state.samples += 1;
                Some((pss, hwcc_regions_of(&split)))
            }
            Err(e) => {
                state.error.get_or_insert(e.to_string());
                None
            }
        }
    }

    fn end(&self, dirs: &[PathBuf]) {
        if let Some(end) = self.sample(dirs) {
            self.state.lock().unwrap_or_else(|e| e.into_inner()).end = Some(end);
        }
    }

    fn run(&self, dirs: &[PathBuf], every: Duration) {
        loop {
            self.sample(dirs);
            let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
            let (done, _) = self.wake.wait_timeout_while(done, every, |d| !*d).unwrap_or_else(|e| e.into_inner());
            if *done {
                return;
            }
        }
    }

    fn stop(&self) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
    }

    fn memory(&self) -> Result<Memory, Error> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = &state.error {
            return Err(format!("measuring PSS: {e}").into());
        }
        let (end, end_hwcc) =
            state.end.ok_or("no end-of-run memory measurement (the benchmark never stopped its timer)")?;
        Ok(Memory {
            end,
            peak: state.peak,
            peak_rss_bytes: memory::peak_rss_bytes().unwrap_or(0),
            samples: state.samples,
            end_hwcc,
        })
    }
}

/// The HWcc part of `s` by region (the breakdown of `pss_of(s).hwcc_bytes`).
fn hwcc_regions_of(s: &MemorySplit) -> HwccRegions {
    let region = |r: RegionId| s.region_pss_bytes[r as usize];
    HwccRegions {
        shared_bytes: region(RegionId::Shared),
        claims_bytes: region(RegionId::Claims),
        remote_bytes: region(RegionId::Remote),
        window_bytes: s.window_pss_bytes,
    }
}

fn pss_of(s: &MemorySplit) -> Pss {
    Pss {
        hwcc_bytes: s.hwcc_pss_bytes,
        swcc_bytes: s.swcc_pss_bytes,
        other_bytes: s.other_pss_bytes,
        total_bytes: s.total_pss_bytes,
        region_huge_bytes: s.region_pmd_bytes,
        other_huge_bytes: s.other_pmd_bytes,
    }
}

fn record(
    job: &Job,
    process: usize,
    first: usize,
    reports: &[(Report, f64, ThreadCpu)],
    memory: Memory,
    stats: Value,
) -> Record {
    let per_thread: Vec<ThreadTiming> = reports
        .iter()
        .enumerate()
        .map(|(i, (r, secs, cpu))| ThreadTiming {
            thread: first + i,
            ops: r.ops,
            secs: *secs,
            cpu_user_s: cpu.user_s,
            cpu_system_s: cpu.system_s,
        })
        .collect();
    let mut extra = Map::new();
    for (r, _, _) in reports {
        for (k, v) in &r.extra {
            let sum = match (extra.get(k), v) {
                (Some(Value::Number(a)), Value::Number(b)) => match (a.as_u64(), b.as_u64()) {
                    (Some(a), Some(b)) => Value::from(a + b),
                    _ => Value::from(a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0)),
                },
                _ => v.clone(),
            };
            extra.insert(k.clone(), sum);
        }
    }
    Record {
        allocated: reports.iter().map(|(r, _, _)| r.allocated).sum(),
        freed: reports.iter().map(|(r, _, _)| r.freed).sum(),
        verified: reports.iter().map(|(r, _, _)| r.verified).sum(),
        extra,
        memory,
        rusage: rusage(),
        allocator_stats: stats,
        ..Record::for_job(job, process, per_thread)
    }
}

fn rusage() -> Rusage {
    match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
            Rusage {
                user_s: secs(u.user_time()),
                system_s: secs(u.system_time()),
                minor_faults: u.minor_page_faults() as u64,
                major_faults: u.major_page_faults() as u64,
                voluntary_switches: u.voluntary_context_switches() as u64,
                involuntary_switches: u.involuntary_context_switches() as u64,
            }
        }
        Err(_) => Rusage::default(),
    }
}
