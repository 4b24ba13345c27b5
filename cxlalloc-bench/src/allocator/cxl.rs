//! cxlalloc as a benchmark allocator.
//!
//! Settings (all optional): `backend` = `"shm"` (default: a file-backed heap in the run's
//! `/dev/shm` directory, shared by every worker process) or `"anon"` (a private anonymous heap,
//! one process only); `capacity_mib` (per bracket, default 8192 — address space reserved, not
//! memory used); `thread_slots` (default 1024); `recovery` (default `true`: threads log their
//! metadata transitions and a dead process's slots can be adopted and repaired; `false`
//! measures what that costs, and a dead slot is then lost with its memory); `coherence` =
//! `"full"` (default), `"limited"` or `"none"` (docs/design.md §9.1; the two reduced models have no huge
//! heap, and `"none"` needs the `shm` backend); `mcas_latency_ns` (only with `"none"`: one
//! thread's mCAS latency, p50, default the paper's 2300; the device injects it less this
//! machine's measured round trip, see [`device::calibrate`]); `return_pages` (default `true`:
//! empty slabs going back on the global list give their pages back, docs/design.md §4.7).
//!
//! # The mCAS device of a no-HWcc run
//!
//! A no-HWcc heap's HWcc words live in the mCAS window in its directory, and no thread can
//! attach while no device serves it. The process that creates the run's heap ([`prepare`], in
//! the coordinator) therefore also starts the software device ([`Device`]: a thread running
//! [`device::serve`]) and returns only once the window is served; the device runs until the
//! coordinator has checked or discarded the heap after the last worker, then stops. Every
//! worker process's threads and the coordinator's own share the one device, as hosts share one
//! memory device.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cxlalloc::internal::mcas::device::{self, DeviceError, Served};
use cxlalloc::internal::mcas::Window;
use cxlalloc::internal::WINDOW_FILE;
use cxlalloc::{Coherence, Config, Heap, ThreadHandle};
use serde_json::{json, Value};

use super::{Allocator, Audit, Handles, Recovered, Spec, ThreadAlloc};
use crate::Error;

/// Where a cxlalloc heap lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A file-backed heap in `/dev/shm`, shared by the run's processes.
    Shm,
    /// A private anonymous heap (one process).
    Anon,
}

/// The settings cxlalloc knows.
const KNOWN: [&str; 7] =
    ["backend", "capacity_mib", "thread_slots", "recovery", "coherence", "mcas_latency_ns", "return_pages"];

/// How long [`prepare`] waits for the device thread to claim the window.
const DEVICE_START: Duration = Duration::from_secs(10);

/// cxlalloc's settings in a workload file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Where the heap lives.
    pub backend: Backend,
    /// Heap configuration.
    pub config: Config,
    /// One thread's mCAS latency (p50) the software device is calibrated to (no-HWcc heaps).
    pub mcas_latency: Duration,
}

impl Settings {
    /// Reads `spec`'s settings, rejecting unknown keys and values.
    pub fn from_spec(spec: &Spec) -> Result<Self, Error> {
        if let Some(k) = spec.settings.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(format!("cxlalloc: unknown setting {k:?} (known: {})", KNOWN.join(", ")).into());
        }
        let backend = match spec.str_setting("backend", "shm")? {
            "shm" => Backend::Shm,
            "anon" => Backend::Anon,
            other => return Err(format!("cxlalloc: backend must be \"shm\" or \"anon\", got {other:?}").into()),
        };
        let mut config = Config::with_capacity(spec.u64_setting("capacity_mib", 8192)? << 20);
        config.thread_slots = u32::try_from(spec.u64_setting("thread_slots", u64::from(config.thread_slots))?)
            .map_err(|_| "cxlalloc: thread_slots out of range")?;
        config.recovery = match spec.settings.get("recovery") {
            None => config.recovery,
            Some(v) => {
                v.as_bool().ok_or_else(|| format!("cxlalloc: setting recovery must be true or false, got {v}"))?
            }
        };
        config.return_pages = match spec.settings.get("return_pages") {
            None => config.return_pages,
            Some(v) => {
                v.as_bool().ok_or_else(|| format!("cxlalloc: setting return_pages must be true or false, got {v}"))?
            }
        };
        let coherence = spec.str_setting("coherence", Coherence::Full.name())?;
        config.coherence = Coherence::from_name(coherence).ok_or_else(|| {
            let names: Vec<_> = Coherence::ALL.iter().map(|c| format!("{:?}", c.name())).collect();
            format!("cxlalloc: coherence must be one of {}, got {coherence:?}", names.join(", "))
        })?;
        if config.coherence != Coherence::Full {
            // The huge heap needs full coherence (`Config::validate`).
            config.huge_capacity = 0;
        }
        let paper_ns = device::PAPER_MCAS_LATENCY.as_nanos() as u64;
        let mcas_latency = Duration::from_nanos(spec.u64_setting("mcas_latency_ns", paper_ns)?);
        if config.coherence == Coherence::NoHwcc {
            if backend != Backend::Shm {
                return Err("cxlalloc: coherence \"none\" needs backend \"shm\" (the mCAS window is a file of the heap directory)".into());
            }
        } else if spec.settings.contains_key("mcas_latency_ns") {
            return Err(format!(
                "cxlalloc: mcas_latency_ns applies only to coherence \"none\", not {:?}",
                config.coherence.name()
            )
            .into());
        }
        config.validate()?;
        Ok(Self { backend, config, mcas_latency })
    }

    /// Whether several processes can share the heap.
    pub fn cross_process(&self) -> bool {
        self.backend == Backend::Shm
    }
}

fn heap_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("heap")
}

/// Creates the shared heap (file backend) before the workers start; for a no-HWcc heap, also
/// starts the software mCAS device on its window and returns it once it serves (keep it until
/// [`finish`] or [`discard`] has run, then [`Device::stop`] it).
pub fn prepare(settings: &Settings, run_dir: &Path) -> Result<Option<Device>, Error> {
    if settings.backend != Backend::Shm {
        return Ok(None);
    }
    let dir = heap_dir(run_dir);
    Heap::create_at(&dir, &settings.config)?;
    if settings.config.coherence != Coherence::NoHwcc {
        return Ok(None);
    }
    let device = Device::start(&dir.join(WINDOW_FILE), settings.mcas_latency);
    if device.is_err() {
        // Nothing can use the heap: remove it as `discard` would.
        let _ = Heap::unlink_at(&dir);
    }
    device.map(Some)
}

/// The software mCAS device serving a run's no-HWcc heap: a thread of the process that created
/// the heap, running [`device::serve`] on its window until [`Device::stop`] (or drop).
#[derive(Debug)]
pub struct Device {
    window: Arc<Window>,
    stop: Arc<cxlalloc::internal::sync::AtomicBool>,
    thread: Option<JoinHandle<Result<Served, DeviceError>>>,
    /// The mCAS latency asked for.
    latency: Duration,
    /// The device time injected per CAS to give it.
    injected: Duration,
}

impl Device {
    /// Starts serving the window at `path` so that one thread's mCAS takes `latency` (the
    /// device injects it less the round trip measured here, [`device::calibrate`]), and waits
    /// until the window names this process as its server (so that workers started afterwards
    /// can attach).
    pub fn start(path: &Path, latency: Duration) -> Result<Self, Error> {
        let injected = if latency.is_zero() { latency } else { device::calibrate(latency)? };
        let window = Arc::new(Window::open(path)?);
        let stop = Arc::new(cxlalloc::internal::sync::AtomicBool::new(false));
        let (w, s) = (window.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("mcas-device".into())
            .spawn(move || device::serve(&w, injected, &s))
            .map_err(|e| format!("starting the mCAS device thread: {e}"))?;
        let device = Device { window, stop, thread: Some(thread), latency, injected };
        let started = Instant::now();
        while device.window.served_by() != Some(std::process::id()) {
            if device.thread.as_ref().is_some_and(JoinHandle::is_finished) {
                // It ended without serving: another process serves the window.
                return Err(device.stop().map_or_else(|e| e, |_| "the mCAS device stopped at once".into()));
            }
            if started.elapsed() > DEVICE_START {
                let _ = device.stop();
                return Err(format!("the mCAS device did not serve {} within {DEVICE_START:?}", path.display()).into());
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(device)
    }

    /// Stops the device (it answers what is in flight first) and returns what it served, as
    /// recorded in the run's lines.
    pub fn stop(mut self) -> Result<Value, Error> {
        self.halt()
    }

    fn halt(&mut self) -> Result<Value, Error> {
        // Wakes the device if it is parked: it would see the flag only at its park's timeout.
        device::stop(&self.window, &self.stop);
        let Some(thread) = self.thread.take() else { return Ok(Value::Null) };
        let served = thread.join().map_err(|_| "the mCAS device thread panicked")??;
        Ok(json!({
            "latency_ns": self.latency.as_nanos() as u64,
            "injected_ns": self.injected.as_nanos() as u64,
            "requests": served.requests,
            "successes": served.successes,
            "conflicts": served.conflicts,
            "errors": served.errors,
            "cpu_s": served.cpu.as_secs_f64(),
            "parks": served.parks,
            "idle_wakeups": served.idle_wakeups,
        }))
    }
}

impl Drop for Device {
    /// A device left running would spin forever in this process: an error path stops it too.
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// Opens the run's heap in a worker (or makes the private one).
pub fn open(settings: &Settings, run_dir: &Path) -> Result<Cxl, Error> {
    let heap = match settings.backend {
        Backend::Shm => Heap::open_at(&heap_dir(run_dir))?,
        Backend::Anon => Heap::anonymous(&settings.config)?,
    };
    Ok(Cxl::new(heap, "cxlalloc"))
}

/// Checks the shared heap after every worker has exited and removes it: an inconsistency or a
/// live block left behind is an error.
pub fn finish(settings: &Settings, run_dir: &Path) -> Result<Value, Error> {
    if settings.backend != Backend::Shm {
        return Ok(Value::Null);
    }
    let dir = heap_dir(run_dir);
    let heap = Heap::open_at(&dir)?;
    // Workers that closed the heap at once can leave freed huge blocks to each other's sweeps.
    heap.sweep_huge();
    let report = heap.check();
    drop(heap);
    Heap::unlink_at(&dir)?;
    let live = report.live_blocks();
    if !report.is_clean() || live != 0 || report.huge.freed != 0 {
        return Err(format!(
            "cxlalloc heap check after the run: {} problem(s), {live} live block(s), {} unreclaimed huge: {report}",
            report.problems.len() + report.huge_problems.len(),
            report.huge.freed
        )
        .into());
    }
    Ok(json!({
        "problems": 0,
        "live_blocks": live,
        "leased_slots": report.leased_slots,
        "huge_backing_objects": report.huge.objects,
    }))
}

/// Removes the shared heap unchecked (a run that ended with its workers killed).
pub fn discard(settings: &Settings, run_dir: &Path) -> Result<(), Error> {
    if settings.backend == Backend::Shm {
        Heap::unlink_at(&heap_dir(run_dir))?;
    }
    Ok(())
}

/// The checker's findings on `heap` as the crash benchmark audits it: every inconsistency
/// counted, the live blocks and what is left of dead processes.
fn audit(heap: &Heap) -> Audit {
    // Freed huge blocks whose owners are gone are reclaimed first, as `finish` does.
    heap.sweep_huge();
    let report = heap.check();
    let problems = (report.problems.len() + report.huge_problems.len()) as u64;
    let live = report.live_blocks();
    let detail = json!({
        "problems": problems,
        "live_blocks": live,
        "leased_slots": report.leased_slots,
        "dead_slots": heap.dead_slots().len(),
        "in_flight": report.in_flight.len(),
        "huge_unreclaimed": report.huge.freed,
        "huge_backing_objects": report.huge.objects,
        "report": (problems > 0).then(|| report.to_string()),
    });
    Audit { problems, live_blocks: Some(live), detail }
}

/// cxlalloc on one heap; every benchmark thread leases its own thread slot.
#[derive(Debug)]
pub struct Cxl {
    /// The heap allocated from.
    pub heap: Heap,
    label: String,
}

impl Cxl {
    /// Benchmarks `heap` under the row label `label`.
    pub fn new(heap: Heap, label: impl Into<String>) -> Self {
        Self { heap, label: label.into() }
    }
}

impl Allocator for Cxl {
    type Thread = ThreadHandle;

    fn name(&self) -> &str {
        &self.label
    }

    fn thread(&self) -> Result<ThreadHandle, Error> {
        Ok(self.heap.attach()?)
    }

    fn base(&self) -> usize {
        self.heap.base_address()
    }

    fn heap_dirs(&self) -> Vec<PathBuf> {
        let location = self.heap.location();
        if location.starts_with('/') {
            vec![PathBuf::from(location)]
        } else {
            Vec::new()
        }
    }

    fn recoverable(&self) -> bool {
        self.heap.config().recovery
    }

    fn dead_slots(&self) -> Vec<u32> {
        self.heap.dead_slots()
    }

    fn adopt(&self, slot: u32) -> Result<(ThreadHandle, Recovered), Error> {
        let (handle, report) = self.heap.adopt(slot)?;
        let recovered = Recovered {
            slot: report.slot,
            duration: report.duration,
            in_flight: report.redo.is_some() || report.pending.is_some(),
            summary: report.to_string(),
        };
        Ok((handle, recovered))
    }

    fn audit(&self) -> Result<Option<Audit>, Error> {
        Ok(Some(audit(&self.heap)))
    }

    fn stats(&self) -> Value {
        let s = self.heap.stats();
        json!({
            "coherence": self.heap.config().coherence.name(),
            "hwcc_bytes": s.hwcc_bytes,
            "swcc_metadata_bytes": s.swcc_metadata_bytes,
            "data_bytes": s.data_bytes,
            "leased_slots": s.leased_slots,
            "remote_frees": s.counters.remote_frees,
            "harvested": s.counters.harvested,
            "slabs_bumped": s.counters.slabs_bumped,
            "global_pops": s.counters.global_pops,
            "global_pushes": s.counters.global_pushes,
            "claims": s.counters.claims,
        })
    }
}

impl ThreadAlloc for ThreadHandle {
    #[inline]
    fn alloc(&mut self, size: usize) -> Result<NonNull<u8>, Error> {
        Ok(ThreadHandle::alloc(self, size)?)
    }

    #[inline]
    unsafe fn free(&mut self, ptr: NonNull<u8>, _size: usize) -> Result<(), Error> {
        Ok(ThreadHandle::free(self, ptr)?)
    }

    fn slot(&self) -> Option<u32> {
        Some(ThreadHandle::slot(self))
    }

    /// Detectable: the heap offset cxlalloc stores is the block's handle (both are the address
    /// less the heap's base).
    #[inline]
    fn alloc_into(&mut self, size: usize, dest: &AtomicU64, _handles: Handles) -> Result<NonNull<u8>, Error> {
        Ok(ThreadHandle::alloc_into(self, size, dest)?)
    }

    /// Detectable; the size is not needed.
    #[inline]
    unsafe fn free_from(&mut self, dest: &AtomicU64, _size: usize, _handles: Handles) -> Result<(), Error> {
        Ok(ThreadHandle::free_from(self, dest)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_default_to_a_shared_heap() {
        let s = Settings::from_spec(&Spec::named("cxlalloc")).unwrap();
        assert_eq!(s.backend, Backend::Shm);
        assert!(s.cross_process());
    }

    #[test]
    fn unknown_settings_are_refused_by_name() {
        let mut spec = Spec::named("cxlalloc");
        spec.settings.insert("coherance".into(), Value::from("none"));
        assert!(Settings::from_spec(&spec).unwrap_err().to_string().contains("coherance"));
    }

    #[test]
    fn recovery_is_on_unless_a_workload_turns_it_off() {
        assert!(Settings::from_spec(&Spec::named("cxlalloc")).unwrap().config.recovery);
        let mut spec = Spec::named("cxlalloc");
        spec.settings.insert("recovery".into(), Value::from(false));
        assert!(!Settings::from_spec(&spec).unwrap().config.recovery);
        spec.settings.insert("recovery".into(), Value::from("off"));
        assert!(Settings::from_spec(&spec).unwrap_err().to_string().contains("true or false"));
    }

    fn with(settings: &[(&str, Value)]) -> Result<Settings, Error> {
        let mut spec = Spec::named("cxlalloc");
        for (k, v) in settings {
            spec.settings.insert((*k).into(), v.clone());
        }
        Settings::from_spec(&spec)
    }

    #[test]
    fn coherence_defaults_to_full_with_a_huge_heap() {
        let s = with(&[]).unwrap();
        assert_eq!(s.config.coherence, Coherence::Full);
        assert!(s.config.huge_capacity > 0);
    }

    #[test]
    fn reduced_coherence_models_have_no_huge_heap() {
        for c in [Coherence::Limited, Coherence::NoHwcc] {
            let s = with(&[("coherence", Value::from(c.name()))]).unwrap();
            assert_eq!((s.config.coherence, s.config.huge_capacity), (c, 0));
        }
        assert!(with(&[("coherence", Value::from("partial"))]).unwrap_err().to_string().contains("\"limited\""));
    }

    #[test]
    fn mcas_latency_defaults_to_the_papers_and_belongs_to_no_hwcc_only() {
        let none = Value::from("none");
        assert_eq!(with(&[("coherence", none.clone())]).unwrap().mcas_latency, device::PAPER_MCAS_LATENCY);
        let s = with(&[("coherence", none), ("mcas_latency_ns", Value::from(0))]).unwrap();
        assert_eq!(s.mcas_latency, Duration::ZERO);
        let e = with(&[("coherence", Value::from("limited")), ("mcas_latency_ns", Value::from(5))]).unwrap_err();
        assert!(e.to_string().contains("only to coherence"), "{e}");
    }

    #[test]
    fn no_hwcc_needs_a_heap_directory() {
        let e = with(&[("coherence", Value::from("none")), ("backend", Value::from("anon"))]).unwrap_err();
        assert!(e.to_string().contains("shm"), "{e}");
        assert!(with(&[("coherence", Value::from("limited")), ("backend", Value::from("anon"))]).is_ok());
    }

    #[test]
    fn a_no_hwcc_heap_is_served_from_prepare_until_stopped() {
        let run_dir = PathBuf::from(format!("/dev/shm/cxlbench-cxl-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir).unwrap();
        let s = with(&[
            ("coherence", Value::from("none")),
            ("capacity_mib", Value::from(16)),
            ("thread_slots", Value::from(4)),
            ("mcas_latency_ns", Value::from(0)),
        ])
        .unwrap();
        let device = prepare(&s, &run_dir).unwrap().expect("a no-HWcc heap gets a device");
        let cxl = open(&s, &run_dir).unwrap();
        {
            let mut t = cxl.heap.attach().unwrap();
            let p = t.alloc(64).unwrap();
            // SAFETY: `p` came from this handle and is freed once.
            unsafe { ThreadAlloc::free(&mut t, p, 64) }.unwrap();
        }
        drop(cxl);
        assert_eq!(finish(&s, &run_dir).unwrap()["problems"], 0);
        let served = device.stop().unwrap();
        assert!(served["requests"].as_u64().unwrap() > 0, "{served}");
        assert_eq!(served["errors"], 0);
        std::fs::remove_dir_all(&run_dir).unwrap();
    }

    #[test]
    fn a_bad_backend_is_refused() {
        let mut spec = Spec::named("cxlalloc");
        spec.settings.insert("backend".into(), Value::from("pmem"));
        assert!(Settings::from_spec(&spec).is_err());
    }
}
