//! The allocators the harness compares, behind one per-thread interface.
//!
//! An [`Allocator`] is shared by a worker process's benchmark threads; each thread takes its own
//! [`ThreadAlloc`] (for cxlalloc, a leased thread slot) and allocates only through it. Benchmarks
//! are generic over the allocator, so every comparison runs the same monomorphized loop.
//!
//! A workload file names allocators by [`Spec`] (a name plus settings). A run's lifecycle is:
//! the coordinator calls [`prepare`] once (creating a shared heap or segment), every worker
//! process calls [`open`] with a [`Visit`] that runs its benchmark threads, and the coordinator
//! calls [`finish`] once all workers have exited (checking and removing what `prepare` made).
//!
//! Shared-memory benchmarks pass blocks between threads and processes as [`Handles`]: a block's
//! handle is its address minus the allocator's [`Allocator::base`], the same number in every
//! process for a cross-process allocator.
//!
//! Kinds (docs/design.md §12.3): cxlalloc ([`cxl`]); the process-local mimalloc, jemalloc and system
//! allocators ([`global`]); Boost.Interprocess `managed_shared_memory`, cross-process
//! ([`boost`]); PMDK `libpmemobj`, one process per pool ([`pmdk`]). The last two need system
//! libraries (Debian `libboost-dev`, `libpmemobj-dev`, installed by `script/setup.sh`); a build
//! without them keeps the kinds, which then refuse to run and say what to install.

pub mod boost;
pub mod cxl;
pub mod global;
pub mod pmdk;

pub use boost::Boost;
pub use cxl::Cxl;
pub use global::{Global, JEMALLOC, MIMALLOC};
pub use pmdk::Pmdk;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;

/// An allocator shared by all benchmark threads of one process.
pub trait Allocator: Sync {
    /// A thread's handle on the allocator.
    type Thread: ThreadAlloc;

    /// Row label in tables and NDJSON (`cxlalloc`, `mimalloc`, ...).
    fn name(&self) -> &str;

    /// Takes a handle for the calling thread (call it on the thread that will use it).
    fn thread(&self) -> Result<Self::Thread, Error>;

    /// The address handles are relative to: 0 for a process-local allocator, the start of the
    /// shared mapping in this process for a cross-process one.
    fn base(&self) -> usize {
        0
    }

    /// Directories of file-backed heap regions, for the PSS region table (see
    /// [`crate::memory::RegionTable`]); empty when the allocator has no such regions.
    fn heap_dirs(&self) -> Vec<PathBuf> {
        Vec::new()
    }

    /// Allocator statistics recorded in the NDJSON line (`Null` when it keeps none).
    fn stats(&self) -> Value {
        Value::Null
    }

    /// Whether a thread slot whose process died can be taken over and repaired
    /// ([`Allocator::adopt`]): cxlalloc with recovery on. The `crash` benchmark's replacement
    /// workers adopt their predecessors' slots when it is.
    fn recoverable(&self) -> bool {
        false
    }

    /// Thread slots still held by dead processes (none for an allocator without slots).
    fn dead_slots(&self) -> Vec<u32> {
        Vec::new()
    }

    /// Takes over thread slot `slot`, held by a dead process, for the calling thread: repairs
    /// what the dead holder left half done and returns a handle on the slot and what the repair
    /// took. Only a [`recoverable`](Allocator::recoverable) allocator can.
    fn adopt(&self, slot: u32) -> Result<(Self::Thread, Recovered), Error> {
        Err(format!("{}: cannot adopt thread slot {slot}: the allocator does not recover", self.name()).into())
    }

    /// Free bytes of a fixed-size segment, for a leak count in bytes where blocks cannot be
    /// counted (Boost); `None` for allocators without one.
    fn free_bytes(&self) -> Option<u64> {
        None
    }

    /// The allocator's own consistency check and census, run after every worker is gone
    /// (the `crash` benchmark's end-of-run audit). `None` when the allocator has no check.
    fn audit(&self) -> Result<Option<Audit>, Error> {
        Ok(None)
    }
}

/// What adopting a dead thread slot took ([`Allocator::adopt`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Recovered {
    /// The slot repaired.
    pub slot: u32,
    /// Wall time of the repair, as the allocator measured it.
    pub duration: std::time::Duration,
    /// Whether the dead holder was in the middle of an operation that the repair finished or
    /// undid (the kill landed inside the allocator).
    pub in_flight: bool,
    /// The allocator's account of what it repaired, one line.
    pub summary: String,
}

/// An allocator's end-of-run check ([`Allocator::audit`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Audit {
    /// Inconsistencies found (0 when consistent).
    pub problems: u64,
    /// Blocks still allocated, where the allocator can count them.
    pub live_blocks: Option<u64>,
    /// The findings as recorded in the NDJSON line's `heap_check`.
    pub detail: Value,
}

/// One thread's view of an allocator.
pub trait ThreadAlloc {
    /// Allocates `size` (≥ 1) bytes, aligned to at least 8 when `size >= 8`.
    fn alloc(&mut self, size: usize) -> Result<NonNull<u8>, Error>;

    /// Frees a block.
    ///
    /// # Safety
    ///
    /// - `ptr` was returned by [`ThreadAlloc::alloc`]`(size)` on a handle of the same
    ///   allocator (in any process, for a cross-process allocator), with this same `size`, and
    ///   has not been freed since.
    /// - Nothing uses the block after this call.
    unsafe fn free(&mut self, ptr: NonNull<u8>, size: usize) -> Result<(), Error>;

    /// The allocator's thread slot this handle holds, if it has slots.
    fn slot(&self) -> Option<u32> {
        None
    }

    /// Allocates `size` bytes and stores the block's handle (see [`Handles`]) in `dest`, which
    /// holds 0. Detectable for cxlalloc (a crash at any point either completes the store or
    /// frees the block); elsewhere a plain allocation followed by a store, so a process killed
    /// between the two leaks the block.
    fn alloc_into(&mut self, size: usize, dest: &AtomicU64, handles: Handles) -> Result<NonNull<u8>, Error> {
        let block = self.alloc(size)?;
        // Release: a reader of `dest` (a later process) sees the block's contents stored before.
        dest.store(handles.handle(block), Ordering::Release);
        Ok(block)
    }

    /// Clears `dest`, which holds the handle of a block of `size` bytes, and frees that block.
    /// Detectable for cxlalloc; elsewhere a swap followed by a plain free, so a process killed
    /// between the two leaks the block.
    ///
    /// # Safety
    ///
    /// - `dest` holds 0 or the handle of a block allocated on this allocator with `size` bytes,
    ///   not freed since, and no other thread frees through `dest` at the same time.
    /// - Nothing uses the block after this call.
    unsafe fn free_from(&mut self, dest: &AtomicU64, size: usize, handles: Handles) -> Result<(), Error> {
        // AcqRel: takes the block (and the writes to it) from whoever stored the handle.
        let handle = dest.swap(0, Ordering::AcqRel);
        let block = handles.block(handle).ok_or("free_from: the destination word holds no block")?;
        // SAFETY: `dest` held this block's handle and the block's size is `size` (the caller's
        // contract); the swap took it out of `dest`, so it is freed once.
        unsafe { self.free(block, size) }
    }
}

/// Converts between block addresses and handles (address − [`Allocator::base`]); handle 0 is
/// "no block" (no allocator hands out its base address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handles {
    base: usize,
}

impl Handles {
    /// Handles relative to `alloc`'s base in this process.
    pub fn of<A: Allocator + ?Sized>(alloc: &A) -> Self {
        Self { base: alloc.base() }
    }

    /// The handle of the block at `ptr`.
    #[inline]
    pub fn handle(self, ptr: NonNull<u8>) -> u64 {
        (ptr.as_ptr() as usize).wrapping_sub(self.base) as u64
    }

    /// The block whose handle is `h` in this process (`None` for handle 0).
    #[inline]
    pub fn block(self, h: u64) -> Option<NonNull<u8>> {
        if h == 0 {
            return None;
        }
        NonNull::new(self.base.wrapping_add(h as usize) as *mut u8)
    }
}

/// An allocator as a workload file names it: `name` plus allocator-specific settings, all of
/// which are recorded in every NDJSON line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// One of [`Kind::ALL`]'s names.
    pub name: String,
    /// Allocator-specific settings (see each kind's documentation); missing ones take defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, Value>,
}

impl Spec {
    /// `name` with default settings.
    pub fn named(name: &str) -> Self {
        Self { name: name.to_owned(), settings: BTreeMap::new() }
    }

    /// The kind this spec names.
    pub fn kind(&self) -> Result<Kind, Error> {
        Kind::from_name(&self.name)
    }

    /// Setting `key` as a string, or `default`.
    pub fn str_setting<'a>(&'a self, key: &str, default: &'a str) -> Result<&'a str, Error> {
        match self.settings.get(key) {
            None => Ok(default),
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(format!("allocator {}: setting {key} must be a string, got {v}", self.name).into()),
        }
    }

    /// Setting `key` as an unsigned integer, or `default`.
    pub fn u64_setting(&self, key: &str, default: u64) -> Result<u64, Error> {
        match self.settings.get(key) {
            None => Ok(default),
            Some(v) => v.as_u64().ok_or_else(|| {
                format!("allocator {}: setting {key} must be an unsigned integer, got {v}", self.name).into()
            }),
        }
    }

    /// Row label: the name, then each setting as `key=value`.
    pub fn label(&self) -> String {
        let mut s = self.name.clone();
        for (k, v) in &self.settings {
            let v = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
            s.push_str(&format!(" {k}={v}"));
        }
        s
    }
}

/// Every allocator the harness knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// cxlalloc (settings: [`cxl::Settings`]).
    Cxlalloc,
    /// mimalloc, process-local.
    Mimalloc,
    /// The system allocator (glibc malloc), process-local.
    System,
    /// jemalloc (tikv-jemallocator), process-local.
    Jemalloc,
    /// Boost.Interprocess `managed_shared_memory`, cross-process (settings: [`boost::Settings`]).
    Boost,
    /// PMDK `libpmemobj`, one process per pool (settings: [`pmdk::Settings`]).
    Pmdk,
}

impl Kind {
    /// Every kind, in table order.
    pub const ALL: [Kind; 6] = [Kind::Cxlalloc, Kind::Mimalloc, Kind::System, Kind::Jemalloc, Kind::Boost, Kind::Pmdk];

    /// The name workload files use.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Cxlalloc => "cxlalloc",
            Kind::Mimalloc => "mimalloc",
            Kind::System => "system",
            Kind::Jemalloc => "jemalloc",
            Kind::Boost => "boost",
            Kind::Pmdk => "pmdk",
        }
    }

    /// The kind called `name`.
    pub fn from_name(name: &str) -> Result<Kind, Error> {
        Kind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let known: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown allocator {name:?} (known: {})", known.join(", ")).into()
        })
    }
}

/// Why a configuration cannot run with an allocator (the driver skips it and says why), or
/// `None` when it can. `processes` is the configuration's process count. A baseline built
/// without its system library is unsupported for every configuration.
pub fn unsupported(spec: &Spec, processes: usize) -> Result<Option<String>, Error> {
    let cross = match spec.kind()? {
        Kind::Cxlalloc => cxl::Settings::from_spec(spec)?.cross_process(),
        Kind::Mimalloc | Kind::System | Kind::Jemalloc => false,
        Kind::Boost => {
            boost::Settings::from_spec(spec)?;
            if !boost::AVAILABLE {
                return Ok(Some(boost::UNAVAILABLE.to_owned()));
            }
            true
        }
        Kind::Pmdk => {
            pmdk::Settings::from_spec(spec)?;
            if !pmdk::AVAILABLE {
                return Ok(Some(pmdk::UNAVAILABLE.to_owned()));
            }
            false
        }
    };
    Ok((processes > 1 && !cross)
        .then(|| format!("{} is process-local; it cannot run {processes} processes", spec.label())))
}

/// Whether `spec` keeps its shared memory in files under the run directory, so that the run
/// root's mount decides its pages (huge pages on a `huge=` tmpfs, docs/design.md §12.1):
/// cxlalloc's shared heap, Boost's segment and PMDK's pool do; the process-local allocators and
/// an anonymous cxlalloc heap take anonymous memory wherever they run.
pub fn shares_run_root(spec: &Spec) -> Result<bool, Error> {
    Ok(match spec.kind()? {
        Kind::Cxlalloc => cxl::Settings::from_spec(spec)?.cross_process(),
        Kind::Mimalloc | Kind::System | Kind::Jemalloc => false,
        Kind::Boost | Kind::Pmdk => true,
    })
}

/// Runs generic code on an opened allocator: [`open`] calls [`Visit::visit`] with the concrete
/// allocator type, so benchmark loops are monomorphized per allocator.
pub trait Visit {
    /// What the visit returns.
    type Output;

    /// Uses `alloc`.
    fn visit<A: Allocator>(self, alloc: &A) -> Result<Self::Output, Error>;
}

/// Creates what a run of `spec` shares (a heap, a segment) under `run_dir`, before any worker
/// starts, and starts what must serve it for the whole run (the software mCAS device of a
/// no-HWcc cxlalloc heap). Process-local allocators need nothing. Keep the returned
/// [`Prepared`] until [`finish`] or [`discard`] has run, then [`Prepared::stop`] it.
pub fn prepare(spec: &Spec, run_dir: &Path) -> Result<Prepared, Error> {
    let device = match spec.kind()? {
        Kind::Cxlalloc => cxl::prepare(&cxl::Settings::from_spec(spec)?, run_dir)?,
        Kind::Mimalloc | Kind::System | Kind::Jemalloc => None,
        Kind::Boost => boost::prepare(&boost::Settings::from_spec(spec)?, run_dir).map(|()| None)?,
        Kind::Pmdk => pmdk::prepare(&pmdk::Settings::from_spec(spec)?, run_dir).map(|()| None)?,
    };
    Ok(Prepared { device })
}

/// What [`prepare`] started that runs alongside a run's workers: for a no-HWcc cxlalloc heap,
/// the software mCAS device (a thread of this process). Dropping it stops it too.
#[derive(Debug)]
#[must_use = "dropping it stops the mCAS device a no-HWcc run needs"]
pub struct Prepared {
    device: Option<cxl::Device>,
}

impl Prepared {
    /// Stops what runs alongside the run and returns what it did, for the run's lines
    /// (`Null` when nothing ran; a device's requests, conflicts, ...). Call it after [`finish`]
    /// or [`discard`]: checking a no-HWcc heap can still need the device.
    pub fn stop(self) -> Result<Value, Error> {
        self.device.map_or(Ok(Value::Null), cxl::Device::stop)
    }
}

/// Opens `spec` in a worker process (after [`prepare`]) and runs `v` on it.
pub fn open<V: Visit>(spec: &Spec, run_dir: &Path, v: V) -> Result<V::Output, Error> {
    match spec.kind()? {
        Kind::Cxlalloc => v.visit(&cxl::open(&cxl::Settings::from_spec(spec)?, run_dir)?),
        Kind::Mimalloc => v.visit(&global::Global::mimalloc()),
        Kind::System => v.visit(&global::Global::system()),
        Kind::Jemalloc => v.visit(&global::Global::jemalloc()),
        Kind::Boost => v.visit(&boost::open(&boost::Settings::from_spec(spec)?, run_dir)?),
        Kind::Pmdk => v.visit(&pmdk::open(&pmdk::Settings::from_spec(spec)?, run_dir)?),
    }
}

/// After every worker of a run has exited: checks what [`prepare`] made (the cxlalloc heap
/// checker: no inconsistency, no live block; Boost's and libpmemobj's own checks and leak
/// counts), removes it, and returns the findings for the NDJSON lines (`Null` when there is
/// nothing to check). A failed check is an error.
pub fn finish(spec: &Spec, run_dir: &Path) -> Result<Value, Error> {
    match spec.kind()? {
        Kind::Cxlalloc => cxl::finish(&cxl::Settings::from_spec(spec)?, run_dir),
        Kind::Mimalloc | Kind::System | Kind::Jemalloc => Ok(Value::Null),
        Kind::Boost => boost::finish(&boost::Settings::from_spec(spec)?, run_dir),
        Kind::Pmdk => pmdk::finish(&pmdk::Settings::from_spec(spec)?, run_dir),
    }
}

/// Removes what [`prepare`] made without checking it: after a run whose workers were killed
/// in the middle (a Boost segment whose mutex a dead worker holds would hang any check).
pub fn discard(spec: &Spec, run_dir: &Path) -> Result<(), Error> {
    match spec.kind()? {
        Kind::Cxlalloc => cxl::discard(&cxl::Settings::from_spec(spec)?, run_dir),
        Kind::Mimalloc | Kind::System | Kind::Jemalloc => Ok(()),
        Kind::Boost => boost::discard(run_dir),
        Kind::Pmdk => match std::fs::remove_file(pmdk::pool_path(run_dir)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("pmdk: removing the pool: {e}").into()),
            _ => Ok(()),
        },
    }
}

/// Fails unless the filesystem holding `dir` has `bytes` available for `what` (a segment or
/// pool that would otherwise die of `SIGBUS` or `ENOSPC` halfway through a run).
pub(crate) fn ensure_space(dir: &Path, bytes: u64, what: &str) -> Result<(), Error> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(|e| format!("{what}: statvfs {}: {e}", dir.display()))?;
    #[allow(clippy::useless_conversion)] // The field types differ between targets.
    let available = u64::from(st.blocks_available()).saturating_mul(u64::from(st.fragment_size()));
    if available < bytes {
        return Err(format!(
            "{what}: needs {} MiB but {} has only {} MiB available",
            bytes >> 20,
            dir.display(),
            available >> 20
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_zero_is_no_block() {
        let h = Handles { base: 0x1000 };
        let p = NonNull::new(0x1040 as *mut u8).unwrap();
        assert_eq!(h.handle(p), 0x40);
        assert_eq!(h.block(0x40), Some(p));
        assert_eq!(h.block(0), None);
    }

    #[test]
    fn process_local_allocators_are_skipped_for_several_processes() {
        assert!(unsupported(&Spec::named("mimalloc"), 2).unwrap().is_some());
        assert!(unsupported(&Spec::named("mimalloc"), 1).unwrap().is_none());
        assert!(unsupported(&Spec::named("cxlalloc"), 4).unwrap().is_none());
        assert!(unsupported(&Spec::named("jemalloc"), 2).unwrap().is_some());
        assert!(unsupported(&Spec::named("jemalloc"), 1).unwrap().is_none());
        assert!(unsupported(&Spec::named("pmdk"), 2).unwrap().is_some());
    }

    #[test]
    fn boost_runs_several_processes_and_pmdk_one_when_built_with_their_libraries() {
        assert_eq!(unsupported(&Spec::named("boost"), 4).unwrap().is_none(), boost::AVAILABLE);
        assert_eq!(unsupported(&Spec::named("pmdk"), 1).unwrap().is_none(), pmdk::AVAILABLE);
    }

    #[test]
    fn every_kind_is_found_by_its_name() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()).unwrap(), k);
        }
    }

    #[test]
    fn a_baseline_setting_of_the_wrong_kind_is_refused_before_any_run() {
        let mut s = Spec::named("boost");
        s.settings.insert("pool_mib".into(), Value::from(64));
        assert!(unsupported(&s, 1).unwrap_err().to_string().contains("pool_mib"));
    }

    #[test]
    fn an_unknown_allocator_name_is_an_error_listing_the_known_ones() {
        let e = Spec::named("tcmalloc").kind().unwrap_err().to_string();
        assert!(e.contains("tcmalloc") && e.contains("mimalloc"), "{e}");
    }

    #[test]
    fn labels_show_every_setting() {
        let mut s = Spec::named("cxlalloc");
        s.settings.insert("backend".into(), Value::from("anon"));
        s.settings.insert("capacity_mib".into(), Value::from(64));
        assert_eq!(s.label(), "cxlalloc backend=anon capacity_mib=64");
    }
}
