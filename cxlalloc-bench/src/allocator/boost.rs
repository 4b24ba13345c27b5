//! Boost.Interprocess `managed_mapped_file` as a benchmark allocator (docs/design.md §12.3): the
//! cross-process baseline.
//!
//! One segment per run: the file [`SEGMENT_FILE`] in the run directory, so on the same run root
//! as cxlalloc's heap (on `/dev/shm` by default, where a mapped file is what a POSIX
//! shared-memory object is; on a `huge=` tmpfs both get huge pages, docs/design.md §12.1). Boost's allocator (`rbtree_best_fit`) serializes every allocation and free
//! of every thread of every process with one interprocess mutex — that is the point of this
//! baseline — and never recovers that mutex when a process dies holding it.
//!
//! Settings (optional): `segment_mib`, the segment's size (default 1024, at least 1). The
//! segment is sparse until used, but a page touched beyond what its file system can hold kills
//! the process with `SIGBUS`, so [`prepare`] refuses a segment larger than the space left there.
//!
//! Lifecycle: [`prepare`] creates the segment; every worker [`open`]s it, mapped at a different
//! address in each process, so blocks travel as offsets from [`Allocator::base`] (the segment's
//! start in this process); [`finish`] runs Boost's own checks (`check_sanity`,
//! `all_memory_deallocated`) and removes the segment.
//!
//! The C++ side is `cshim/boost_shim.cpp`, compiled by `build.rs` when it finds libboost-dev
//! (`cfg(have_boost)`). Without it every entry point fails with [`UNAVAILABLE`].

use std::path::Path;
use std::ptr::NonNull;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use serde_json::{json, Value};

use super::{Allocator, Audit, Spec, ThreadAlloc};
use crate::Error;

/// Whether this build has the Boost.Interprocess shim.
pub const AVAILABLE: bool = cfg!(have_boost);

/// The error every entry point returns in a build without Boost.Interprocess.
pub const UNAVAILABLE: &str = "boost: built without Boost.Interprocess (apt-get install libboost-dev)";

/// Segment size when `segment_mib` is not given.
const DEFAULT_SEGMENT_MIB: u64 = 1024;

/// Smallest `segment_mib` accepted: room for Boost's segment manager and a 512 KiB block.
const MIN_SEGMENT_MIB: u64 = 1;

/// The segment's file name in the run directory.
pub const SEGMENT_FILE: &str = "boost.segment";

/// How long [`finish`] waits for Boost's checks, which block forever on a mutex left held by a
/// worker that died inside the allocator.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// Boost's settings in a workload file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The segment's size in bytes (`segment_mib` MiB).
    pub segment_bytes: u64,
}

impl Settings {
    /// Reads `spec`'s settings, rejecting unknown keys and sizes below 1 MiB.
    pub fn from_spec(spec: &Spec) -> Result<Self, Error> {
        if let Some(k) = spec.settings.keys().find(|k| k.as_str() != "segment_mib") {
            return Err(format!("boost: unknown setting {k:?} (known: segment_mib)").into());
        }
        let mib = spec.u64_setting("segment_mib", DEFAULT_SEGMENT_MIB)?;
        if mib < MIN_SEGMENT_MIB {
            return Err(format!("boost: segment_mib must be at least {MIN_SEGMENT_MIB}, got {mib}").into());
        }
        let segment_bytes = mib.checked_mul(1 << 20).ok_or_else(|| format!("boost: segment_mib {mib} is too large"))?;
        Ok(Self { segment_bytes })
    }
}

/// The path of the segment of the run in `run_dir` (a file in it: two runs never share a
/// segment, and a leftover would make [`prepare`] fail, never share silently: it creates
/// exclusively).
pub fn segment_name(run_dir: &Path) -> String {
    run_dir.join(SEGMENT_FILE).to_string_lossy().into_owned()
}

/// Creates the run's segment (exclusively: an existing one is an error) before the workers
/// start, after checking the run directory's file system can hold all of it.
pub fn prepare(settings: &Settings, run_dir: &Path) -> Result<(), Error> {
    if !AVAILABLE {
        return Err(UNAVAILABLE.into());
    }
    super::ensure_space(run_dir, settings.segment_bytes, "boost segment")?;
    let name = segment_name(run_dir);
    // Unmapped again at the end of this function; the shared-memory object stays until
    // `finish` removes it.
    let _created = Segment::create(&name, settings.segment_bytes)?;
    Ok(())
}

/// Opens the run's segment in a worker (after [`prepare`]).
pub fn open(_settings: &Settings, run_dir: &Path) -> Result<Boost, Error> {
    let name = segment_name(run_dir);
    let segment = Segment::open(&name)?;
    Ok(Boost { segment: Arc::new(segment), name })
}

/// What Boost's checks found in a segment.
#[derive(Clone, Copy, Debug)]
struct Findings {
    sane: bool,
    all_freed: bool,
    size: usize,
    free: usize,
}

/// Runs Boost's checks on `segment` in a helper thread, giving up after `timeout` (the helper,
/// blocked on a dead process's mutex, is then left behind with its mapping).
fn check_with_timeout(segment: Segment, timeout: Duration) -> Result<Findings, Error> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("boost-check".into())
        .spawn(move || {
            let findings = segment.check().and_then(|(sane, all_freed)| {
                Ok(Findings { sane, all_freed, size: segment.size(), free: segment.free_memory()? })
            });
            // The receiver is gone only after a timeout; nobody wants the answer then.
            let _ = tx.send(findings);
        })
        .map_err(|e| format!("boost: starting the segment check thread: {e}"))?;
    match rx.recv_timeout(timeout) {
        Ok(findings) => findings,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "boost: the segment check did not finish within {} s: a worker probably died holding the \
             segment's mutex, which Boost.Interprocess never recovers",
            timeout.as_secs()
        )
        .into()),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("boost: the segment check thread died".into()),
    }
}

/// After every worker has exited: runs Boost's checks on the segment, removes it, and returns
/// the findings. A malformed free-block tree or memory still allocated is an error (the segment
/// is removed either way).
pub fn finish(_settings: &Settings, run_dir: &Path) -> Result<Value, Error> {
    let name = segment_name(run_dir);
    let findings = Segment::open(&name).and_then(|s| check_with_timeout(s, CHECK_TIMEOUT));
    let removed = Segment::remove(&name);
    let f = findings?;
    if !removed {
        return Err(format!("boost: segment {name} could not be removed").into());
    }
    if !f.sane || !f.all_freed {
        return Err(format!(
            "boost segment check after the run: check_sanity {}, all_memory_deallocated {} ({} of {} bytes free)",
            f.sane, f.all_freed, f.free, f.size
        )
        .into());
    }
    Ok(
        json!({ "segment_bytes": f.size, "free_bytes": f.free, "check_sanity": f.sane, "all_memory_deallocated": f.all_freed }),
    )
}

/// Removes the run's segment unchecked (its mutex may be held by a killed worker).
pub fn discard(run_dir: &Path) -> Result<(), Error> {
    if AVAILABLE && !Segment::remove(&segment_name(run_dir)) {
        return Err(format!("boost: segment {} could not be removed", segment_name(run_dir)).into());
    }
    Ok(())
}

/// Boost.Interprocess on one segment, as mapped in this process; every thread allocates from
/// the same mapping.
#[derive(Debug)]
pub struct Boost {
    segment: Arc<Segment>,
    name: String,
}

impl Allocator for Boost {
    type Thread = BoostThread;

    fn name(&self) -> &str {
        "boost"
    }

    fn thread(&self) -> Result<BoostThread, Error> {
        Ok(BoostThread { segment: Arc::clone(&self.segment) })
    }

    fn base(&self) -> usize {
        self.segment.base()
    }

    fn free_bytes(&self) -> Option<u64> {
        self.segment.free_memory().ok().map(|b| b as u64)
    }

    /// Boost's `check_sanity` and `all_memory_deallocated`, given up after 30 s
    /// (a killed worker may hold the segment's mutex). Boost cannot count its live blocks.
    fn audit(&self) -> Result<Option<Audit>, Error> {
        let name = self.name.clone();
        let f = Segment::open(&name).and_then(|s| check_with_timeout(s, CHECK_TIMEOUT))?;
        Ok(Some(Audit {
            problems: u64::from(!f.sane),
            live_blocks: f.all_freed.then_some(0),
            detail: json!({
                "segment_bytes": f.size, "free_bytes": f.free,
                "check_sanity": f.sane, "all_memory_deallocated": f.all_freed,
            }),
        }))
    }

    fn stats(&self) -> Value {
        json!({
            "segment": self.name,
            "segment_bytes": self.segment.size(),
            "free_bytes": self.segment.free_memory().ok(),
        })
    }
}

/// A thread's handle on a [`Boost`] segment: the shared mapping (Boost keeps no per-thread
/// state).
#[derive(Debug)]
pub struct BoostThread {
    segment: Arc<Segment>,
}

impl ThreadAlloc for BoostThread {
    #[inline]
    fn alloc(&mut self, size: usize) -> Result<NonNull<u8>, Error> {
        if size == 0 {
            return Err("boost: zero-size allocation".into());
        }
        self.segment.allocate(size).ok_or_else(|| format!("boost: segment full allocating {size} bytes").into())
    }

    #[inline]
    unsafe fn free(&mut self, ptr: NonNull<u8>, _size: usize) -> Result<(), Error> {
        // SAFETY: by this function's contract `ptr` came from `alloc` on this segment (in some
        // process) and is not freed yet.
        unsafe { self.segment.deallocate(ptr) }
    }
}

#[cfg(have_boost)]
use shim::Segment;

/// The Rust side of `cshim/boost_shim.cpp`.
#[cfg(have_boost)]
mod shim {
    use std::ffi::{c_char, c_int, c_void, CString};
    use std::ptr::NonNull;

    use crate::Error;

    /// One process's mapping of a segment (`struct cxb_segment`, opaque).
    #[repr(C)]
    struct RawSegment {
        _opaque: [u8; 0],
    }

    extern "C" {
        fn cxb_create(name: *const c_char, bytes: usize, err: *mut c_char, err_len: usize) -> *mut RawSegment;
        fn cxb_open(name: *const c_char, err: *mut c_char, err_len: usize) -> *mut RawSegment;
        fn cxb_close(seg: *mut RawSegment);
        fn cxb_allocate(seg: *mut RawSegment, bytes: usize) -> *mut c_void;
        fn cxb_deallocate(seg: *mut RawSegment, ptr: *mut c_void) -> c_int;
        fn cxb_base(seg: *const RawSegment) -> *mut c_void;
        fn cxb_size(seg: *const RawSegment) -> usize;
        fn cxb_free_memory(seg: *const RawSegment, out: *mut usize) -> c_int;
        fn cxb_check(seg: *mut RawSegment, sane: *mut c_int, all_freed: *mut c_int) -> c_int;
        fn cxb_remove(name: *const c_char) -> c_int;
    }

    /// Room for a Boost exception's text.
    const ERR_LEN: usize = 512;

    fn c_name(name: &str) -> Result<CString, Error> {
        CString::new(name).map_err(|_| format!("boost: segment name {name:?} contains a NUL byte").into())
    }

    fn err_text(err: &[c_char; ERR_LEN]) -> String {
        let bytes: Vec<u8> = err.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// One process's mapping of a segment, unmapped on drop.
    #[derive(Debug)]
    pub(super) struct Segment {
        raw: NonNull<RawSegment>,
    }

    // SAFETY: the mapping belongs to the process, not to the thread that made it; the shim's
    // functions may be called from any thread.
    unsafe impl Send for Segment {}

    // SAFETY: the shim's functions on a shared segment either only read the process-local
    // mapping object (base, size) or run under the segment's interprocess mutex (allocate,
    // deallocate, free memory, check), so concurrent calls through `&Segment` do not race.
    unsafe impl Sync for Segment {}

    impl Segment {
        /// Creates and maps segment `name` of `bytes` bytes; fails if it exists.
        pub(super) fn create(name: &str, bytes: u64) -> Result<Self, Error> {
            let c = c_name(name)?;
            let bytes =
                usize::try_from(bytes).map_err(|_| format!("boost: {bytes} bytes do not fit this address space"))?;
            let mut err = [0 as c_char; ERR_LEN];
            // SAFETY: `c` is NUL-terminated and `err` is writable for `ERR_LEN` bytes; both outlive
            // the call, and the shim never lets an exception out.
            let raw = unsafe { cxb_create(c.as_ptr(), bytes, err.as_mut_ptr(), ERR_LEN) };
            NonNull::new(raw)
                .map(|raw| Self { raw })
                .ok_or_else(|| format!("boost: creating segment {name} of {bytes} bytes: {}", err_text(&err)).into())
        }

        /// Maps the existing segment `name`.
        pub(super) fn open(name: &str) -> Result<Self, Error> {
            let c = c_name(name)?;
            let mut err = [0 as c_char; ERR_LEN];
            // SAFETY: `c` is NUL-terminated and `err` is writable for `ERR_LEN` bytes; both outlive
            // the call, and the shim never lets an exception out.
            let raw = unsafe { cxb_open(c.as_ptr(), err.as_mut_ptr(), ERR_LEN) };
            NonNull::new(raw)
                .map(|raw| Self { raw })
                .ok_or_else(|| format!("boost: opening segment {name}: {}", err_text(&err)).into())
        }

        /// Removes segment `name` (mappings stay valid); whether it existed and was removed.
        pub(super) fn remove(name: &str) -> bool {
            let Ok(c) = c_name(name) else { return false };
            // SAFETY: `c` is NUL-terminated and outlives the call.
            unsafe { cxb_remove(c.as_ptr()) == 1 }
        }

        /// The segment's start in this process.
        pub(super) fn base(&self) -> usize {
            // SAFETY: `raw` is a live mapping from `cxb_create`/`cxb_open`, closed only on drop.
            unsafe { cxb_base(self.raw.as_ptr()) as usize }
        }

        /// The segment's size in bytes.
        pub(super) fn size(&self) -> usize {
            // SAFETY: `raw` is a live mapping, closed only on drop.
            unsafe { cxb_size(self.raw.as_ptr()) }
        }

        /// Free bytes in the segment (takes the segment's mutex).
        pub(super) fn free_memory(&self) -> Result<usize, Error> {
            let mut free = 0usize;
            // SAFETY: `raw` is a live mapping; `free` is a writable `size_t`.
            match unsafe { cxb_free_memory(self.raw.as_ptr(), &mut free) } {
                0 => Ok(free),
                _ => Err("boost: reading the segment's free memory failed".into()),
            }
        }

        /// Boost's `check_sanity()` and `all_memory_deallocated()` (takes the segment's mutex).
        pub(super) fn check(&self) -> Result<(bool, bool), Error> {
            let (mut sane, mut all_freed): (c_int, c_int) = (0, 0);
            // SAFETY: `raw` is a live mapping; both outputs are writable `int`s.
            match unsafe { cxb_check(self.raw.as_ptr(), &mut sane, &mut all_freed) } {
                0 => Ok((sane != 0, all_freed != 0)),
                _ => Err("boost: the segment check failed".into()),
            }
        }

        /// A block of `bytes` bytes (16-byte aligned), or `None` when the segment is full.
        #[inline]
        pub(super) fn allocate(&self, bytes: usize) -> Option<NonNull<u8>> {
            // SAFETY: `raw` is a live mapping; the allocation runs under the segment's mutex.
            NonNull::new(unsafe { cxb_allocate(self.raw.as_ptr(), bytes) }.cast())
        }

        /// Returns a block to the segment.
        ///
        /// # Safety
        ///
        /// - `ptr` came from [`Segment::allocate`] on a mapping of this same segment (any
        ///   process) and has not been deallocated since.
        #[inline]
        pub(super) unsafe fn deallocate(&self, ptr: NonNull<u8>) -> Result<(), Error> {
            // SAFETY: `raw` is a live mapping and `ptr` one of its live blocks (caller's contract).
            match unsafe { cxb_deallocate(self.raw.as_ptr(), ptr.as_ptr().cast()) } {
                0 => Ok(()),
                _ => Err("boost: deallocate failed (the segment's mutex could not be taken)".into()),
            }
        }
    }

    impl Drop for Segment {
        fn drop(&mut self) {
            // SAFETY: `raw` came from `cxb_create`/`cxb_open` and is closed only here, once.
            unsafe { cxb_close(self.raw.as_ptr()) }
        }
    }
}

#[cfg(not(have_boost))]
use absent::Segment;

/// Stand-in for the shim in a build without Boost: a segment can never be made, so every method
/// on one is unreachable (`Infallible`), and the constructors fail with [`UNAVAILABLE`].
#[cfg(not(have_boost))]
mod absent {
    use std::convert::Infallible;
    use std::ptr::NonNull;

    use super::UNAVAILABLE;
    use crate::Error;

    /// A segment that cannot exist.
    #[derive(Debug)]
    pub(super) struct Segment {
        never: Infallible,
    }

    impl Segment {
        /// Fails: no Boost.Interprocess in this build.
        pub(super) fn create(_name: &str, _bytes: u64) -> Result<Self, Error> {
            Err(UNAVAILABLE.into())
        }

        /// Fails: no Boost.Interprocess in this build.
        pub(super) fn open(_name: &str) -> Result<Self, Error> {
            Err(UNAVAILABLE.into())
        }

        /// Nothing to remove.
        pub(super) fn remove(_name: &str) -> bool {
            false
        }

        pub(super) fn base(&self) -> usize {
            match self.never {}
        }

        pub(super) fn size(&self) -> usize {
            match self.never {}
        }

        pub(super) fn free_memory(&self) -> Result<usize, Error> {
            match self.never {}
        }

        pub(super) fn check(&self) -> Result<(bool, bool), Error> {
            match self.never {}
        }

        pub(super) fn allocate(&self, _bytes: usize) -> Option<NonNull<u8>> {
            match self.never {}
        }

        /// Unreachable (no segment exists).
        ///
        /// # Safety
        ///
        /// None needed: no value of `Segment` exists.
        pub(super) unsafe fn deallocate(&self, _ptr: NonNull<u8>) -> Result<(), Error> {
            match self.never {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::Command;

    use super::*;
    use crate::allocator::Handles;

    /// Environment variable naming the run directory to the child process of
    /// [`a_block_allocated_in_another_process_is_read_and_freed_here_by_its_handle`].
    const CHILD_ENV: &str = "CXLALLOC_BENCH_BOOST_TEST_CHILD";
    /// The line prefix the child prints its block's handle after.
    const HANDLE_PREFIX: &str = "cxlalloc-bench-boost-child-handle=";
    /// Bytes the child writes.
    const CHILD_BLOCK: usize = 4096;

    fn pattern(i: usize) -> u8 {
        (i.wrapping_mul(7).wrapping_add(3) % 251) as u8
    }

    /// A fresh run directory in `/dev/shm` named after the test and this process; on drop it
    /// removes itself with any segment of its run left behind by a failed test.
    struct RunDir {
        path: PathBuf,
        segment: String,
    }

    impl RunDir {
        fn new(test: &str) -> Self {
            let path = PathBuf::from(format!("/dev/shm/cxlalloc-bench-test-boost-{}-{test}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            let segment = segment_name(&path);
            Self { path, segment }
        }
    }

    impl Drop for RunDir {
        fn drop(&mut self) {
            Segment::remove(&self.segment);
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }

    fn spec(mib: u64) -> Settings {
        Settings { segment_bytes: mib << 20 }
    }

    fn skip() -> bool {
        if !AVAILABLE {
            eprintln!("SKIPPED: {UNAVAILABLE}");
        }
        !AVAILABLE
    }

    #[test]
    fn settings_default_to_a_1_gib_segment_and_refuse_unknown_keys() {
        assert_eq!(Settings::from_spec(&Spec::named("boost")).unwrap().segment_bytes, 1 << 30);
        let mut s = Spec::named("boost");
        s.settings.insert("segment_gib".into(), Value::from(1));
        assert!(Settings::from_spec(&s).unwrap_err().to_string().contains("segment_gib"));
        let mut s = Spec::named("boost");
        s.settings.insert("segment_mib".into(), Value::from(0));
        assert!(Settings::from_spec(&s).is_err());
    }

    #[test]
    fn the_segment_is_a_file_in_the_run_directory() {
        if skip() {
            return;
        }
        let dir = RunDir::new("file");
        prepare(&spec(16), &dir.path).unwrap();
        let file = dir.path.join(SEGMENT_FILE);
        assert_eq!(segment_name(&dir.path), file.to_string_lossy());
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 16 << 20, "the segment is not in the run directory");
        finish(&spec(16), &dir.path).unwrap();
        assert!(!file.exists());
    }

    #[test]
    fn without_boost_every_entry_point_says_what_to_install() {
        if AVAILABLE {
            return;
        }
        let dir = RunDir::new("absent");
        let e = prepare(&spec(16), &dir.path).unwrap_err().to_string();
        assert!(e.contains("libboost-dev"), "{e}");
        let e = open(&spec(16), &dir.path).unwrap_err().to_string();
        assert!(e.contains("libboost-dev"), "{e}");
    }

    #[test]
    fn allocates_writes_and_frees_every_benchmark_size() {
        if skip() {
            return;
        }
        let dir = RunDir::new("sizes");
        prepare(&spec(16), &dir.path).unwrap();
        {
            let a = open(&spec(16), &dir.path).unwrap();
            let mut t = a.thread().unwrap();
            for size in [8, 64, 1000, 65536, 512 << 10] {
                let p = t.alloc(size).unwrap();
                assert_eq!(p.as_ptr() as usize % 8, 0, "size {size}");
                let base = a.base();
                assert!(p.as_ptr() as usize > base && p.as_ptr() as usize + size <= base + (16 << 20));
                // SAFETY: the block is `size` bytes and ours.
                let block = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), size) };
                block.iter_mut().enumerate().for_each(|(i, b)| *b = pattern(i));
                assert!(block.iter().enumerate().all(|(i, &b)| b == pattern(i)));
                // SAFETY: allocated just above with the same size, not used after.
                unsafe { t.free(p, size).unwrap() };
            }
            assert!(t.alloc(0).is_err());
            assert!(t.alloc(32 << 20).is_err(), "a block larger than the segment is an error");
        }
        let findings = finish(&spec(16), &dir.path).unwrap();
        assert_eq!(findings["all_memory_deallocated"], Value::from(true));
        assert!(!Path::new(&dir.segment).exists());
    }

    #[test]
    fn a_block_left_allocated_fails_the_check_and_the_segment_is_still_removed() {
        if skip() {
            return;
        }
        let dir = RunDir::new("leak");
        prepare(&spec(4), &dir.path).unwrap();
        {
            let a = open(&spec(4), &dir.path).unwrap();
            a.thread().unwrap().alloc(100).unwrap();
        }
        let e = finish(&spec(4), &dir.path).unwrap_err().to_string();
        assert!(e.contains("all_memory_deallocated false"), "{e}");
        assert!(!Path::new(&dir.segment).exists());
    }

    #[test]
    fn prepare_refuses_a_segment_larger_than_dev_shm_and_an_existing_one() {
        if skip() {
            return;
        }
        let dir = RunDir::new("refuse");
        let e = prepare(&spec(1 << 40), &dir.path).unwrap_err().to_string();
        assert!(e.contains("available"), "{e}");
        prepare(&spec(2), &dir.path).unwrap();
        assert!(prepare(&spec(2), &dir.path).is_err(), "a second prepare must not share the segment");
        finish(&spec(2), &dir.path).unwrap();
    }

    /// The child side of the cross-process test: does nothing unless that test spawned this
    /// process with [`CHILD_ENV`] set.
    #[test]
    fn child_process_side_of_the_cross_process_test() {
        let Some(run_dir) = std::env::var_os(CHILD_ENV) else { return };
        let a = open(&spec(16), Path::new(&run_dir)).unwrap();
        let p = a.thread().unwrap().alloc(CHILD_BLOCK).unwrap();
        // SAFETY: the block is `CHILD_BLOCK` bytes and ours.
        let block = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), CHILD_BLOCK) };
        block.iter_mut().enumerate().for_each(|(i, b)| *b = pattern(i));
        println!("{HANDLE_PREFIX}{}", Handles::of(&a).handle(p));
    }

    #[test]
    fn a_block_allocated_in_another_process_is_read_and_freed_here_by_its_handle() {
        if skip() {
            return;
        }
        let dir = RunDir::new("cross");
        prepare(&spec(16), &dir.path).unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "allocator::boost::tests::child_process_side_of_the_cross_process_test"])
            .args(["--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir.path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        // The test harness prints the test's name on the same line, before the handle.
        let (_, after) =
            stdout.split_once(HANDLE_PREFIX).unwrap_or_else(|| panic!("no handle in the child's output: {stdout}"));
        let handle: u64 = after.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap();
        {
            let a = open(&spec(16), &dir.path).unwrap();
            let p = Handles::of(&a).block(handle).unwrap();
            // SAFETY: the child allocated `CHILD_BLOCK` bytes at this handle and exited; the
            // block is ours now.
            let block = unsafe { std::slice::from_raw_parts(p.as_ptr(), CHILD_BLOCK) };
            assert!(block.iter().enumerate().all(|(i, &b)| b == pattern(i)), "the child's pattern differs");
            // SAFETY: allocated by the child with this size, freed once, here.
            unsafe { a.thread().unwrap().free(p, CHILD_BLOCK).unwrap() };
        }
        let findings = finish(&spec(16), &dir.path).unwrap();
        assert_eq!(findings["all_memory_deallocated"], Value::from(true));
        assert!(!Path::new(&dir.segment).exists(), "finish must remove the segment file");
    }
}
