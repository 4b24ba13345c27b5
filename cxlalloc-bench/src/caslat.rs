//! The CAS-latency microbenchmark (issue 6, docs/design.md §9): what one compare-and-swap costs under
//! each coherence model, from 1 to N threads contending on one word.
//!
//! - `native`: a hardware CAS on a cache-coherent word (full HWcc);
//! - `flush+cas`: the line written back and invalidated (`clflushopt`, or `clflush`) and fenced
//!   before each CAS, as limited HWcc does around ownership moves;
//! - `mcas-sw`: the software mCAS device (a thread of this process serving a window in
//!   `/dev/shm`) with its injected device time;
//! - `mcas-rtl`: the Verilated RTL (`mcas-cosim`) serving the window, when given.
//!
//! Each thread times each successful increment (retries included) and the percentiles are over
//! all of them. On a machine with fewer cores than threads + server, the mCAS rows include
//! scheduling delay: compare them within one run, never across machines.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cxlalloc::internal::mcas::device;
use cxlalloc::internal::mcas::{Geometry, McasClient, Window};
use cxlalloc::internal::sync::{AtomicBool, AtomicU64, Ordering};
use serde_json::json;

use crate::Error;

/// One measured configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The mode (see the module docs).
    pub mode: &'static str,
    /// Contending threads.
    pub threads: usize,
    /// Successful CASes timed.
    pub ops: usize,
    /// Median latency, ns.
    pub p50_ns: u64,
    /// 99th percentile latency, ns.
    pub p99_ns: u64,
    /// Total successful CASes per second over all threads.
    pub ops_per_s: f64,
}

impl Row {
    /// The row as an NDJSON value.
    pub fn json(&self) -> serde_json::Value {
        json!({"benchmark": "cas-latency", "mode": self.mode, "threads": self.threads, "ops": self.ops,
               "p50_ns": self.p50_ns, "p99_ns": self.p99_ns, "ops_per_s": self.ops_per_s})
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Successful CASes per thread.
    pub ops: usize,
    /// The software device's time per CAS.
    pub mcas_latency: Duration,
    /// `mcas-cosim` to measure the RTL with, if any.
    pub cosim: Option<PathBuf>,
}

/// Writes back and invalidates the line of `word`, then fences: the flush a limited-HWcc
/// ownership move issues before its CAS.
fn flush_line(word: &AtomicU64) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = (word as *const AtomicU64).cast::<u8>();
        // SAFETY: clflush and sfence only need a mapped address, which a live reference is;
        // clflush is baseline on x86-64 (clflushopt would need a runtime check for no gain in
        // a measurement of the round trip).
        unsafe {
            std::arch::x86_64::_mm_clflush(p);
            std::arch::x86_64::_mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Runs `threads` threads, each doing `ops` increments with `inc` (which returns once its
/// increment succeeded), and summarizes their latencies.
/// A thread's increment: returns once its CAS succeeded.
type Increment<'a> = Box<dyn FnMut() + Send + 'a>;

fn measure<'a>(mode: &'static str, threads: usize, ops: usize, inc: &(dyn Fn(usize) -> Increment<'a> + Sync)) -> Row {
    let started = Instant::now();
    let mut lat: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mut f = inc(t);
                s.spawn(move || {
                    let mut v = Vec::with_capacity(ops);
                    for _ in 0..ops {
                        let t0 = Instant::now();
                        f();
                        v.push(t0.elapsed().as_nanos() as u64);
                    }
                    v
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    let secs = started.elapsed().as_secs_f64();
    lat.sort_unstable();
    let pct =
        |p: f64| lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1))).copied().unwrap_or(0);
    Row { mode, threads, ops: lat.len(), p50_ns: pct(0.50), p99_ns: pct(0.99), ops_per_s: lat.len() as f64 / secs }
}

/// An increment through an mCAS client: weak CASes until one succeeds.
fn mcas_increment(c: &mut McasClient) {
    let Ok(mut cur) = c.load(0) else { return };
    while let Ok(a) = c.compare_exchange_weak(0, cur, cur + 1) {
        if a.success {
            return;
        }
        cur = a.prev;
    }
}

fn mcas_rows(mode: &'static str, window: &Arc<Window>, o: &Options, rows: &mut Vec<Row>) {
    for &n in &o.threads {
        rows.push(measure(mode, n, o.ops, &|t| match McasClient::new(window.clone(), t as u32) {
            Ok(mut c) => Box::new(move || mcas_increment(&mut c)),
            // The window has a slot per thread (created for the largest count).
            Err(_) => Box::new(|| {}),
        }));
    }
}

/// A window file of its own for each measurement (several may run in one process).
fn window_path(tag: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    PathBuf::from(format!("/dev/shm/cxlalloc-caslat-{tag}-{}-{n}", std::process::id()))
}

/// `mcas-cosim` serving a window, killed and its file removed on drop.
struct Cosim(Child, PathBuf);

impl Drop for Cosim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_file(&self.1);
    }
}

fn start_cosim(bin: &Path, slots: usize) -> Result<(Cosim, Arc<Window>), Error> {
    let path = window_path("rtl");
    let child = Command::new(bin)
        .arg("--window")
        .arg(&path)
        .args(["--slots", &slots.to_string(), "--target-bytes", "4096", "--quiet"])
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    let guard = Cosim(child, path.clone());
    let started = Instant::now();
    loop {
        if let Ok(w) = Window::open(&path) {
            return Ok((guard, Arc::new(w)));
        }
        if started.elapsed() > Duration::from_secs(10) {
            return Err(format!("{} never published {}", bin.display(), path.display()).into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Measures every mode at every thread count.
pub fn run(o: &Options) -> Result<Vec<Row>, Error> {
    let mut rows = Vec::new();
    let word = AtomicU64::new(0);
    for &n in &o.threads {
        let word = &word;
        rows.push(measure("native", n, o.ops, &|_| {
            Box::new(move || {
                word.fetch_add(1, Ordering::AcqRel);
            })
        }));
        rows.push(measure("flush+cas", n, o.ops, &|_| {
            Box::new(move || loop {
                flush_line(word);
                let cur = word.load(Ordering::Acquire);
                if word.compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return;
                }
            })
        }));
    }
    let slots = o.threads.iter().copied().max().unwrap_or(1).max(1);
    let path = window_path("sw");
    let window = Arc::new(Window::create_or_open(&path, Geometry { slots: slots as u32, target_bytes: 4096 })?);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let server = s.spawn(|| device::serve(&window, o.mcas_latency, &stop));
        mcas_rows("mcas-sw", &window, o, &mut rows);
        stop.store(true, Ordering::Relaxed);
        let _ = server.join();
    });
    let _ = std::fs::remove_file(&path);
    if let Some(bin) = &o.cosim {
        let (_guard, window) = start_cosim(bin, slots)?;
        mcas_rows("mcas-rtl", &window, o, &mut rows);
    }
    Ok(rows)
}

/// The rows as a table.
pub fn table(rows: &[Row]) -> String {
    let mut s =
        format!("{:<10} {:>7} {:>9} {:>10} {:>10} {:>12}\n", "mode", "threads", "ops", "p50 ns", "p99 ns", "ops/s");
    for r in rows {
        s += &format!(
            "{:<10} {:>7} {:>9} {:>10} {:>10} {:>12.0}\n",
            r.mode, r.threads, r.ops, r.p50_ns, r.p99_ns, r.ops_per_s
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_counts_every_increment() {
        let o = Options { threads: vec![1, 2], ops: 200, mcas_latency: Duration::ZERO, cosim: None };
        let rows = run(&o).unwrap();
        let modes: Vec<_> = rows.iter().map(|r| (r.mode, r.threads)).collect();
        assert_eq!(
            modes,
            [("native", 1), ("flush+cas", 1), ("native", 2), ("flush+cas", 2), ("mcas-sw", 1), ("mcas-sw", 2)]
        );
        assert!(rows.iter().all(|r| r.ops == 200 * r.threads && r.p50_ns <= r.p99_ns));
    }

    #[test]
    fn injected_device_time_shows_in_the_software_mcas_median() {
        let o = Options { threads: vec![1], ops: 50, mcas_latency: Duration::from_micros(20), cosim: None };
        let rows = run(&o).unwrap();
        let sw = rows.iter().find(|r| r.mode == "mcas-sw").unwrap();
        assert!(sw.p50_ns >= 20_000, "{sw:?}");
    }
}
