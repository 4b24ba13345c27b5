//! PMDK `libpmemobj` as a benchmark allocator (docs/design.md §12.3): a recoverable persistent-memory
//! allocator. libpmemobj locks a pool file for the one process that opens it, so this kind runs
//! single-process configurations only ([`super::unsupported`] skips the others).
//!
//! Settings (optional): `pool_mib`, the pool's size (default 1024, at least 8 =
//! `PMEMOBJ_MIN_POOL`). libpmemobj allocates the whole pool file when it creates it, so the run
//! directory's filesystem must hold all of it; [`prepare`] checks first.
//!
//! Lifecycle: [`prepare`] (the coordinator) creates the pool file `pmdk.pool` in the run
//! directory and closes it, so the creation cost — allocating and formatting the whole file — is
//! not in any worker's measurement; the worker [`open`]s it; [`finish`] reopens it, counts the
//! objects still allocated, closes it, runs `pmemobj_check` and removes the file.
//!
//! Persistence on `/dev/shm`: the pool is not on real persistent memory, and libpmemobj then makes
//! every change durable with `msync` (three system calls per allocate + free pair, measured
//! with strace). Before the first pool is created or opened in a process, [`force_pmem`] sets
//! `PMEM_IS_PMEM_FORCE=1` — libpmem's documented override, read when libpmemobj first asks
//! whether a mapping is persistent memory — unless the variable is already set. libpmemobj then
//! persists with cache-line flushes and fences, as it would on persistent memory: the cost a
//! recoverable allocator pays on CXL memory too. Run with `PMEM_IS_PMEM_FORCE=0` in the
//! environment to measure the `msync` path instead.
//!
//! Handles: a block is `pmemobj_direct` of the `PMEMoid` allocated; a free recovers the
//! `PMEMoid` with `pmemobj_oid`. [`Allocator::base`] stays 0 (one process: handles are
//! addresses).
//!
//! Built only when build.rs found libpmemobj-dev (`cfg(have_pmdk)`); otherwise every entry point
//! fails with [`UNAVAILABLE`].

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Once};

use serde_json::{json, Value};

use super::{Allocator, Spec, ThreadAlloc};
use crate::Error;

/// Whether this build links libpmemobj.
pub const AVAILABLE: bool = cfg!(have_pmdk);

/// The error every entry point returns in a build without libpmemobj.
pub const UNAVAILABLE: &str = "pmdk: built without PMDK libpmemobj (apt-get install libpmemobj-dev)";

/// Pool size when `pool_mib` is not given.
const DEFAULT_POOL_MIB: u64 = 1024;

/// `PMEMOBJ_MIN_POOL` (8 MiB) in MiB: libpmemobj refuses smaller pools.
const MIN_POOL_MIB: u64 = 8;

/// The pool file's name in the run directory.
const POOL_FILE: &str = "pmdk.pool";

/// libpmemobj's settings in a workload file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The pool's size in bytes (`pool_mib` MiB).
    pub pool_bytes: u64,
}

impl Settings {
    /// Reads `spec`'s settings, rejecting unknown keys and pools below `PMEMOBJ_MIN_POOL`.
    pub fn from_spec(spec: &Spec) -> Result<Self, Error> {
        if let Some(k) = spec.settings.keys().find(|k| k.as_str() != "pool_mib") {
            return Err(format!("pmdk: unknown setting {k:?} (known: pool_mib)").into());
        }
        let mib = spec.u64_setting("pool_mib", DEFAULT_POOL_MIB)?;
        if mib < MIN_POOL_MIB {
            return Err(format!("pmdk: pool_mib must be at least {MIN_POOL_MIB} (PMEMOBJ_MIN_POOL), got {mib}").into());
        }
        let pool_bytes = mib.checked_mul(1 << 20).ok_or_else(|| format!("pmdk: pool_mib {mib} is too large"))?;
        Ok(Self { pool_bytes })
    }
}

/// The pool file of the run in `run_dir`.
pub fn pool_path(run_dir: &Path) -> PathBuf {
    run_dir.join(POOL_FILE)
}

/// Sets `PMEM_IS_PMEM_FORCE=1` for this process unless the environment already has it, once,
/// before libpmemobj first maps a pool (see the module documentation).
///
/// `set_var` races with a `getenv` running at the same moment in another thread's C code; the
/// harness calls [`prepare`] and [`open`] before it starts benchmark threads, and the variable
/// is set once per process.
pub fn force_pmem() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
            std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
        }
    });
}

/// Creates the run's pool file (libpmemobj fails if it exists) and closes it, after checking
/// the run directory's filesystem can hold it.
pub fn prepare(settings: &Settings, run_dir: &Path) -> Result<(), Error> {
    if !AVAILABLE {
        return Err(UNAVAILABLE.into());
    }
    super::ensure_space(run_dir, settings.pool_bytes, "pmdk pool")?;
    force_pmem();
    // Closed again at the end of this function, so the worker can take the pool's lock.
    let _created = Pool::create(&pool_path(run_dir), settings.pool_bytes)?;
    Ok(())
}

/// Opens the run's pool in the worker (after [`prepare`]).
pub fn open(settings: &Settings, run_dir: &Path) -> Result<Pmdk, Error> {
    force_pmem();
    let pool = Pool::open(&pool_path(run_dir))?;
    Ok(Pmdk { pool: Arc::new(pool), pool_bytes: settings.pool_bytes })
}

/// After the worker has exited: counts the objects still allocated, runs `pmemobj_check`,
/// removes the pool file, and returns the findings. A live object or an inconsistent pool is an
/// error (the file is removed either way).
pub fn finish(_settings: &Settings, run_dir: &Path) -> Result<Value, Error> {
    let path = pool_path(run_dir);
    // The pool is closed again before `pmemobj_check`, which opens the file itself.
    let findings = Pool::open(&path).map(|pool| pool.live_objects()).and_then(|live| Ok((live, Pool::check(&path)?)));
    let removed = std::fs::remove_file(&path);
    let (live, consistent) = findings?;
    removed.map_err(|e| format!("pmdk: removing {}: {e}", path.display()))?;
    if live != 0 || !consistent {
        return Err(format!("pmdk pool check after the run: {live} live object(s), consistent {consistent}").into());
    }
    Ok(json!({ "live_objects": live, "consistent": consistent }))
}

/// libpmemobj on one pool; every thread allocates from it (libpmemobj keeps its own per-thread
/// caches).
#[derive(Debug)]
pub struct Pmdk {
    pool: Arc<Pool>,
    pool_bytes: u64,
}

impl Allocator for Pmdk {
    type Thread = PmdkThread;

    fn name(&self) -> &str {
        "pmdk"
    }

    fn thread(&self) -> Result<PmdkThread, Error> {
        Ok(PmdkThread { pool: Arc::clone(&self.pool) })
    }

    fn stats(&self) -> Value {
        json!({ "pool_bytes": self.pool_bytes })
    }
}

/// A thread's handle on a [`Pmdk`] pool: the shared pool.
#[derive(Debug)]
pub struct PmdkThread {
    pool: Arc<Pool>,
}

impl ThreadAlloc for PmdkThread {
    #[inline]
    fn alloc(&mut self, size: usize) -> Result<NonNull<u8>, Error> {
        if size == 0 {
            return Err("pmdk: zero-size allocation".into());
        }
        self.pool.alloc(size)
    }

    #[inline]
    unsafe fn free(&mut self, ptr: NonNull<u8>, _size: usize) -> Result<(), Error> {
        // SAFETY: by this function's contract `ptr` came from `alloc` on this pool and is not
        // freed yet.
        unsafe { self.pool.free(ptr) }
    }
}

#[cfg(have_pmdk)]
use ffi::Pool;

/// Declarations from `<libpmemobj.h>` (PMDK 1.x) and the pool wrapper over them.
#[cfg(have_pmdk)]
mod ffi {
    use std::ffi::{c_char, c_int, c_void, CStr, CString};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::ptr::NonNull;

    use crate::Error;

    /// The pool's layout name (checked by libpmemobj at open).
    const LAYOUT: &CStr = c"cxlalloc-bench";

    /// `PMEMobjpool` (opaque).
    #[repr(C)]
    struct PmemObjPool {
        _opaque: [u8; 0],
    }

    /// `PMEMoid`: an object's pool (low 64 bits of its UUID) and offset in it; all zero is
    /// `OID_NULL`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    struct PmemOid {
        pool_uuid_lo: u64,
        off: u64,
    }

    /// `pmemobj_constr`.
    type Constructor = Option<unsafe extern "C" fn(pop: *mut PmemObjPool, ptr: *mut c_void, arg: *mut c_void) -> c_int>;

    extern "C" {
        fn pmemobj_create(
            path: *const c_char,
            layout: *const c_char,
            poolsize: usize,
            mode: libc::mode_t,
        ) -> *mut PmemObjPool;
        fn pmemobj_open(path: *const c_char, layout: *const c_char) -> *mut PmemObjPool;
        fn pmemobj_close(pop: *mut PmemObjPool);
        fn pmemobj_check(path: *const c_char, layout: *const c_char) -> c_int;
        fn pmemobj_alloc(
            pop: *mut PmemObjPool,
            oidp: *mut PmemOid,
            size: usize,
            type_num: u64,
            constructor: Constructor,
            arg: *mut c_void,
        ) -> c_int;
        fn pmemobj_free(oidp: *mut PmemOid);
        fn pmemobj_oid(addr: *const c_void) -> PmemOid;
        fn pmemobj_direct(oid: PmemOid) -> *mut c_void;
        fn pmemobj_first(pop: *mut PmemObjPool) -> PmemOid;
        fn pmemobj_next(oid: PmemOid) -> PmemOid;
        fn pmemobj_errormsg() -> *const c_char;
    }

    /// libpmemobj's last error message on this thread.
    fn last_error() -> String {
        // SAFETY: `pmemobj_errormsg` returns null or a NUL-terminated thread-local string that
        // stays valid until the next libpmemobj call on this thread; it is copied at once.
        unsafe {
            let p = pmemobj_errormsg();
            if p.is_null() {
                return "unknown error".to_owned();
            }
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }

    fn c_path(path: &Path) -> Result<CString, Error> {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| format!("pmdk: path {} contains a NUL byte", path.display()).into())
    }

    /// An open pool, closed on drop.
    #[derive(Debug)]
    pub(super) struct Pool {
        pop: NonNull<PmemObjPool>,
    }

    // SAFETY: a pool handle is not tied to the thread that opened it; libpmemobj's allocation
    // functions may be called from any thread.
    unsafe impl Send for Pool {}

    // SAFETY: libpmemobj documents its allocation, free and iteration functions as thread-safe
    // on one pool; the calls that are not (create, open, close) need ownership here, not `&`.
    unsafe impl Sync for Pool {}

    impl Pool {
        /// Creates pool file `path` of `bytes` bytes (mode 0600); fails if it exists.
        pub(super) fn create(path: &Path, bytes: u64) -> Result<Self, Error> {
            let c = c_path(path)?;
            let size =
                usize::try_from(bytes).map_err(|_| format!("pmdk: {bytes} bytes do not fit this address space"))?;
            // SAFETY: `c` and `LAYOUT` are NUL-terminated and outlive the call.
            let pop = unsafe { pmemobj_create(c.as_ptr(), LAYOUT.as_ptr(), size, 0o600) };
            NonNull::new(pop).map(|pop| Self { pop }).ok_or_else(|| {
                format!("pmdk: creating pool {} of {bytes} bytes: {}", path.display(), last_error()).into()
            })
        }

        /// Opens pool file `path` (this process then holds its lock).
        pub(super) fn open(path: &Path) -> Result<Self, Error> {
            let c = c_path(path)?;
            // SAFETY: `c` and `LAYOUT` are NUL-terminated and outlive the call.
            let pop = unsafe { pmemobj_open(c.as_ptr(), LAYOUT.as_ptr()) };
            NonNull::new(pop)
                .map(|pop| Self { pop })
                .ok_or_else(|| format!("pmdk: opening pool {}: {}", path.display(), last_error()).into())
        }

        /// `pmemobj_check` on the closed pool file `path`: whether it is consistent.
        pub(super) fn check(path: &Path) -> Result<bool, Error> {
            let c = c_path(path)?;
            // SAFETY: `c` and `LAYOUT` are NUL-terminated and outlive the call.
            match unsafe { pmemobj_check(c.as_ptr(), LAYOUT.as_ptr()) } {
                1 => Ok(true),
                0 => Ok(false),
                _ => Err(format!("pmdk: checking pool {}: {}", path.display(), last_error()).into()),
            }
        }

        /// How many objects are allocated in the pool.
        pub(super) fn live_objects(&self) -> u64 {
            let mut n = 0;
            // SAFETY: `pop` is an open pool; `pmemobj_next` takes an object of it.
            let mut oid = unsafe { pmemobj_first(self.pop.as_ptr()) };
            while oid.off != 0 {
                n += 1;
                // SAFETY: `oid` is a live object of this open pool (returned by first/next).
                oid = unsafe { pmemobj_next(oid) };
            }
            n
        }

        /// A new object of `size` bytes.
        #[inline]
        pub(super) fn alloc(&self, size: usize) -> Result<NonNull<u8>, Error> {
            let mut oid = PmemOid { pool_uuid_lo: 0, off: 0 };
            // SAFETY: `pop` is an open pool, `oid` is writable, and no constructor is passed.
            let rc = unsafe { pmemobj_alloc(self.pop.as_ptr(), &mut oid, size, 0, None, std::ptr::null_mut()) };
            if rc != 0 {
                return Err(format!("pmdk: allocating {size} bytes: {}", last_error()).into());
            }
            // SAFETY: `oid` was just allocated in this open pool.
            let p = unsafe { pmemobj_direct(oid) };
            NonNull::new(p.cast()).ok_or_else(|| "pmdk: pmemobj_direct returned null for a new object".into())
        }

        /// Frees the object at `ptr`.
        ///
        /// # Safety
        ///
        /// - `ptr` came from [`Pool::alloc`] on this pool and has not been freed since.
        #[inline]
        pub(super) unsafe fn free(&self, ptr: NonNull<u8>) -> Result<(), Error> {
            // SAFETY: `ptr` points into this open pool (caller's contract); pmemobj_oid only
            // looks the address up.
            let mut oid = unsafe { pmemobj_oid(ptr.as_ptr().cast_const().cast()) };
            if oid.off == 0 {
                return Err(format!("pmdk: {ptr:p} is not in an open pool").into());
            }
            // SAFETY: `oid` names a live object of this pool (caller's contract), freed once.
            unsafe { pmemobj_free(&mut oid) };
            Ok(())
        }
    }

    impl Drop for Pool {
        fn drop(&mut self) {
            // SAFETY: `pop` came from create/open and is closed only here, once; every thread
            // handle holds an `Arc` of this pool, so none is using it.
            unsafe { pmemobj_close(self.pop.as_ptr()) }
        }
    }
}

#[cfg(not(have_pmdk))]
use absent::Pool;

/// Stand-in for libpmemobj in a build without it: a pool can never be made, so every method on
/// one is unreachable (`Infallible`), and the constructors fail with [`UNAVAILABLE`].
#[cfg(not(have_pmdk))]
mod absent {
    use std::convert::Infallible;
    use std::path::Path;
    use std::ptr::NonNull;

    use super::UNAVAILABLE;
    use crate::Error;

    /// A pool that cannot exist.
    #[derive(Debug)]
    pub(super) struct Pool {
        never: Infallible,
    }

    impl Pool {
        /// Fails: no libpmemobj in this build.
        pub(super) fn create(_path: &Path, _bytes: u64) -> Result<Self, Error> {
            Err(UNAVAILABLE.into())
        }

        /// Fails: no libpmemobj in this build.
        pub(super) fn open(_path: &Path) -> Result<Self, Error> {
            Err(UNAVAILABLE.into())
        }

        /// Fails: no libpmemobj in this build.
        pub(super) fn check(_path: &Path) -> Result<bool, Error> {
            Err(UNAVAILABLE.into())
        }

        pub(super) fn live_objects(&self) -> u64 {
            match self.never {}
        }

        pub(super) fn alloc(&self, _size: usize) -> Result<NonNull<u8>, Error> {
            match self.never {}
        }

        /// Unreachable (no pool exists).
        ///
        /// # Safety
        ///
        /// None needed: no value of `Pool` exists.
        pub(super) unsafe fn free(&self, _ptr: NonNull<u8>) -> Result<(), Error> {
            match self.never {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh run directory in `/dev/shm` named after the test and this process, removed (with
    /// any pool a failed test left) on drop.
    struct RunDir(PathBuf);

    impl RunDir {
        fn new(test: &str) -> Self {
            let path = PathBuf::from(format!("/dev/shm/cxlalloc-bench-test-pmdk-{}-{test}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for RunDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn spec(mib: u64) -> Settings {
        Settings { pool_bytes: mib << 20 }
    }

    fn skip() -> bool {
        if !AVAILABLE {
            eprintln!("SKIPPED: {UNAVAILABLE}");
        }
        !AVAILABLE
    }

    fn pattern(i: usize) -> u8 {
        (i.wrapping_mul(13).wrapping_add(5) % 251) as u8
    }

    #[test]
    fn settings_default_to_a_1_gib_pool_and_refuse_one_below_the_minimum() {
        assert_eq!(Settings::from_spec(&Spec::named("pmdk")).unwrap().pool_bytes, 1 << 30);
        let mut s = Spec::named("pmdk");
        s.settings.insert("pool_mib".into(), Value::from(4));
        assert!(Settings::from_spec(&s).unwrap_err().to_string().contains("PMEMOBJ_MIN_POOL"));
        let mut s = Spec::named("pmdk");
        s.settings.insert("segment_mib".into(), Value::from(64));
        assert!(Settings::from_spec(&s).unwrap_err().to_string().contains("segment_mib"));
    }

    #[test]
    fn without_pmdk_every_entry_point_says_what_to_install() {
        if AVAILABLE {
            return;
        }
        let dir = RunDir::new("absent");
        let e = prepare(&spec(16), &dir.0).unwrap_err().to_string();
        assert!(e.contains("libpmemobj-dev"), "{e}");
        let e = open(&spec(16), &dir.0).unwrap_err().to_string();
        assert!(e.contains("libpmemobj-dev"), "{e}");
    }

    #[test]
    fn allocates_writes_and_frees_every_benchmark_size() {
        if skip() {
            return;
        }
        let dir = RunDir::new("sizes");
        prepare(&spec(16), &dir.0).unwrap();
        {
            let a = open(&spec(16), &dir.0).unwrap();
            let mut t = a.thread().unwrap();
            for size in [8, 64, 1000, 65536, 512 << 10] {
                let p = t.alloc(size).unwrap();
                assert_eq!(p.as_ptr() as usize % 8, 0, "size {size}");
                // SAFETY: the block is `size` bytes and ours.
                let block = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), size) };
                block.iter_mut().enumerate().for_each(|(i, b)| *b = pattern(i));
                assert!(block.iter().enumerate().all(|(i, &b)| b == pattern(i)));
                // SAFETY: allocated just above with the same size, not used after.
                unsafe { t.free(p, size).unwrap() };
            }
            assert!(t.alloc(0).is_err());
            assert!(t.alloc(64 << 20).is_err(), "a block larger than the pool is an error");
        }
        let findings = finish(&spec(16), &dir.0).unwrap();
        assert_eq!(findings["live_objects"], Value::from(0));
        assert!(!pool_path(&dir.0).exists(), "finish must remove the pool file");
    }

    #[test]
    fn threads_allocate_and_free_concurrently_in_one_pool() {
        if skip() {
            return;
        }
        let dir = RunDir::new("threads");
        prepare(&spec(16), &dir.0).unwrap();
        {
            let a = open(&spec(16), &dir.0).unwrap();
            std::thread::scope(|s| {
                for t in 0..2 {
                    let a = &a;
                    s.spawn(move || {
                        let mut th = a.thread().unwrap();
                        let mut held = Vec::new();
                        for i in 0..500 {
                            let size = 16 + (i * 37 + t * 11) % 2000;
                            let p = th.alloc(size).unwrap();
                            // SAFETY: the block is `size` bytes and ours.
                            unsafe { p.as_ptr().write_bytes(t as u8, size) };
                            held.push((p, size));
                        }
                        for (p, size) in held {
                            // SAFETY: the block is `size` bytes, ours, and still holds our byte.
                            assert!(unsafe { std::slice::from_raw_parts(p.as_ptr(), size) }
                                .iter()
                                .all(|&b| b == t as u8));
                            // SAFETY: allocated above with this size, freed once.
                            unsafe { th.free(p, size).unwrap() };
                        }
                    });
                }
            });
        }
        assert_eq!(finish(&spec(16), &dir.0).unwrap()["live_objects"], Value::from(0));
    }

    #[test]
    fn an_object_left_allocated_fails_the_check_and_the_pool_is_still_removed() {
        if skip() {
            return;
        }
        let dir = RunDir::new("leak");
        prepare(&spec(8), &dir.0).unwrap();
        {
            let a = open(&spec(8), &dir.0).unwrap();
            a.thread().unwrap().alloc(100).unwrap();
        }
        let e = finish(&spec(8), &dir.0).unwrap_err().to_string();
        assert!(e.contains("1 live object"), "{e}");
        assert!(!pool_path(&dir.0).exists());
    }

    #[test]
    fn a_second_open_of_a_pool_in_use_is_refused() {
        if skip() {
            return;
        }
        let dir = RunDir::new("lock");
        prepare(&spec(8), &dir.0).unwrap();
        {
            let _a = open(&spec(8), &dir.0).unwrap();
            let e = open(&spec(8), &dir.0).unwrap_err().to_string();
            assert!(e.contains("opening pool"), "{e}");
        }
        finish(&spec(8), &dir.0).unwrap();
    }
}
