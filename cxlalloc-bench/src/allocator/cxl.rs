//! cxlalloc as a benchmark allocator.
//!
//! Settings (all optional): `backend` = `"shm"` (default: a file-backed heap in the run's
//! `/dev/shm` directory, shared by every worker process) or `"anon"` (a private anonymous heap,
//! one process only); `capacity_mib` (per bracket, default 8192 — address space reserved, not
//! memory used); `thread_slots` (default 1024); `recovery` (default `true`: threads log their
//! metadata transitions and a dead process's slots can be adopted and repaired; `false`
//! measures what that costs, and a dead slot is then lost with its memory).

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use cxlalloc::{Config, Heap, ThreadHandle};
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
const KNOWN: [&str; 4] = ["backend", "capacity_mib", "thread_slots", "recovery"];

/// cxlalloc's settings in a workload file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Where the heap lives.
    pub backend: Backend,
    /// Heap configuration.
    pub config: Config,
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
        Ok(Self { backend, config })
    }

    /// Whether several processes can share the heap.
    pub fn cross_process(&self) -> bool {
        self.backend == Backend::Shm
    }
}

fn heap_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("heap")
}

/// Creates the shared heap (file backend) before the workers start.
pub fn prepare(settings: &Settings, run_dir: &Path) -> Result<(), Error> {
    if settings.backend == Backend::Shm {
        Heap::create_at(&heap_dir(run_dir), &settings.config)?;
    }
    Ok(())
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
            "hwcc_bytes": s.hwcc_bytes,
            "swcc_metadata_bytes": s.swcc_metadata_bytes,
            "data_bytes": s.data_bytes,
            "leased_slots": s.leased_slots,
            "remote_frees": s.counters.remote_frees,
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

    #[test]
    fn a_bad_backend_is_refused() {
        let mut spec = Spec::named("cxlalloc");
        spec.settings.insert("backend".into(), Value::from("pmem"));
        assert!(Settings::from_spec(&spec).is_err());
    }
}
