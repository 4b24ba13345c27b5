//! C API: the functions declared in `include/cxlalloc.h`, exported from the static and shared
//! libraries this crate builds.
//!
//! # Conventions
//!
//! * Handles are boxed Rust values handed to C as opaque pointers: [`CxlHeap`] wraps a [`Heap`],
//!   [`CxlThread`] a [`ThreadHandle`]. `cxl_heap_close` / `cxl_thread_detach` drop them.
//! * Every function except `cxl_last_error`, `cxl_last_error_message` and `cxl_strerror` sets the
//!   calling thread's last error: [`ErrorCode::Ok`] on success, the failure's code and a message
//!   otherwise. Failures also set `errno` ([`errno_of`]); successes leave `errno` alone.
//! * A null handle is an error (`CXL_EINVAL`), never a crash. Dangling handles and pointers are
//!   the caller's responsibility (the `# Safety` sections).
//! * Nothing here panics: no `unwrap`, no indexing, no arithmetic that can overflow, and the
//!   thread-local error slots are reached with `try_with` / `try_borrow_mut`. Should a panic
//!   escape the library regardless, `extern "C"` functions abort the process rather than unwind
//!   into C (Rust ≥ 1.81), so it is never undefined behaviour — only a crash, which the
//!   library's policy (docs/design.md §11) rules out on every public path.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::error::{AllocError, ErrorCode, FreeError, OffsetError, OpenError};
use crate::heap::Heap;
use crate::heap::{ReallocError, ThreadHandle};
use crate::layout::{Coherence, Config};
use crate::offset::Offset;
use crate::sync::{AtomicU64, Ordering};

// ---------------------------------------------------------------------------------------------
// Types shared with C
// ---------------------------------------------------------------------------------------------

/// `cxl_heap_t`: an open heap. Opaque to C.
#[derive(Debug)]
pub struct CxlHeap {
    heap: Heap,
}

/// `cxl_thread_t`: a thread's lease on one slot of a heap. Opaque to C. Like [`ThreadHandle`],
/// it may move between threads but only one thread may use it at a time.
#[derive(Debug)]
pub struct CxlThread {
    thread: ThreadHandle,
}

/// `cxl_config_t`: the C mirror of [`Config`]. Field order and types are fixed by the header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CxlConfig {
    /// [`Config::small_capacity`].
    pub small_capacity: u64,
    /// [`Config::large_capacity`].
    pub large_capacity: u64,
    /// [`Config::thread_slots`].
    pub thread_slots: u32,
    /// [`Config::small_batch`].
    pub small_batch: u32,
    /// [`Config::large_batch`].
    pub large_batch: u32,
    /// [`Config::cache_local`].
    pub cache_local: u32,
    /// [`Config::coherence`] as its `repr(u32)` value (`CXL_COHERENCE_*`).
    pub coherence: u32,
    /// [`Config::commit_on_grow`]; any non-zero value is true. An `int`, not a `bool`, so that no
    /// C value can be an invalid Rust `bool`.
    pub commit_on_grow: c_int,
    /// [`Config::huge_capacity`].
    pub huge_capacity: u64,
    /// [`Config::recovery`]; any non-zero value is true.
    pub recovery: c_int,
    /// [`Config::mode`]; 0 means the default, `0600`.
    pub mode: u32,
    /// [`Config::return_pages`]; any non-zero value is true.
    pub return_pages: c_int,
    /// [`Config::host`]: this host's number in a pod, `0 ..= 7`; any negative value (the
    /// default, -1) for none (then `CXLALLOC_HOST`'s, if set).
    pub host: i32,
    /// [`Config::huge_cache_bytes`].
    pub huge_cache_bytes: u64,
}

// Pinned to the header's `cxl_config_t` (the C test asserts the same numbers).
const _: () = assert!(std::mem::size_of::<CxlConfig>() == 72);
// The layout `cxl_host_info_t` has in the header (tests/c/api_test.c asserts the same).
const _: () = assert!(std::mem::size_of::<CxlHostInfo>() == 64);
const _: () = assert!(std::mem::offset_of!(CxlHostInfo, domain) == 8);
const _: () = assert!(std::mem::offset_of!(CxlHostInfo, name) == 24);
const _: () = assert!(std::mem::offset_of!(CxlConfig, recovery) == 48);
const _: () = assert!(std::mem::align_of::<CxlConfig>() == 8);
const _: () = assert!(std::mem::offset_of!(CxlConfig, thread_slots) == 16);
const _: () = assert!(std::mem::offset_of!(CxlConfig, coherence) == 32);
const _: () = assert!(std::mem::offset_of!(CxlConfig, commit_on_grow) == 36);
const _: () = assert!(std::mem::offset_of!(CxlConfig, huge_capacity) == 40);
const _: () = assert!(std::mem::offset_of!(CxlConfig, mode) == 52);
const _: () = assert!(std::mem::offset_of!(CxlConfig, return_pages) == 56);
const _: () = assert!(std::mem::offset_of!(CxlConfig, host) == 60);
const _: () = assert!(std::mem::offset_of!(CxlConfig, huge_cache_bytes) == 64);

// C shares one heap handle between threads; the wrappers inherit Send/Sync from the Rust types.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    fn sendable<T: Send>() {}
    shareable::<CxlHeap>();
    sendable::<CxlThread>();
};

impl From<&Config> for CxlConfig {
    fn from(c: &Config) -> Self {
        Self {
            small_capacity: c.small_capacity,
            large_capacity: c.large_capacity,
            thread_slots: c.thread_slots,
            small_batch: c.small_batch,
            large_batch: c.large_batch,
            cache_local: c.cache_local,
            coherence: c.coherence as u32,
            commit_on_grow: c_int::from(c.commit_on_grow),
            huge_capacity: c.huge_capacity,
            recovery: c_int::from(c.recovery),
            mode: c.mode,
            return_pages: c_int::from(c.return_pages),
            // A number too big for an i32 is no host number: validation refuses it either way.
            host: c.host.map_or(-1, |h| i32::try_from(h).unwrap_or(i32::MAX)),
            huge_cache_bytes: c.huge_cache_bytes,
        }
    }
}

impl CxlConfig {
    fn to_config(self) -> Result<Config, String> {
        let coherence =
            Coherence::from_raw(self.coherence).ok_or_else(|| format!("unknown coherence model {}", self.coherence))?;
        Ok(Config {
            small_capacity: self.small_capacity,
            large_capacity: self.large_capacity,
            thread_slots: self.thread_slots,
            small_batch: self.small_batch,
            large_batch: self.large_batch,
            cache_local: self.cache_local,
            huge_capacity: self.huge_capacity,
            huge_cache_bytes: self.huge_cache_bytes,
            coherence,
            commit_on_grow: self.commit_on_grow != 0,
            recovery: self.recovery != 0,
            return_pages: self.return_pages != 0,
            // C creates window-backed no-HWcc heaps; device-backed ones open like any other.
            mcas_device: None,
            mode: if self.mode == 0 { crate::layout::DEFAULT_MODE } else { self.mode },
            host: u32::try_from(self.host).ok(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Error codes and the thread-local last error
// ---------------------------------------------------------------------------------------------

/// Every [`ErrorCode`], in value order. The header's `CXL_OK` / `CXL_E*` constants are tested
/// against this list.
pub const ALL_CODES: [ErrorCode; 16] = [
    ErrorCode::Ok,
    ErrorCode::InvalidArgument,
    ErrorCode::OutOfMemory,
    ErrorCode::NotFound,
    ErrorCode::AlreadyExists,
    ErrorCode::BadHeap,
    ErrorCode::Mismatch,
    ErrorCode::SlotsExhausted,
    ErrorCode::ForeignPointer,
    ErrorCode::InteriorPointer,
    ErrorCode::DoubleFree,
    ErrorCode::NotAllocated,
    ErrorCode::Corrupt,
    ErrorCode::Unsupported,
    ErrorCode::Io,
    ErrorCode::PermissionDenied,
];
// A variant appended to `ErrorCode` without being listed here fails the build.
const _: () = assert!(ALL_CODES.len() == ErrorCode::PermissionDenied as usize + 1);

/// The header's name for `code` and a one-line description (what `cxl_strerror` returns).
/// Exhaustive: a new [`ErrorCode`] variant does not compile until it is named here.
pub fn code_info(code: ErrorCode) -> (&'static str, &'static CStr) {
    match code {
        ErrorCode::Ok => ("CXL_OK", c"success"),
        ErrorCode::InvalidArgument => ("CXL_EINVAL", c"invalid argument"),
        ErrorCode::OutOfMemory => ("CXL_ENOMEM", c"out of memory"),
        ErrorCode::NotFound => ("CXL_ENOTFOUND", c"heap not found"),
        ErrorCode::AlreadyExists => ("CXL_EEXIST", c"heap already exists"),
        ErrorCode::BadHeap => ("CXL_EBADHEAP", c"heap files corrupt, truncated, or not a heap"),
        ErrorCode::Mismatch => ("CXL_EMISMATCH", c"heap parameters differ from those expected"),
        ErrorCode::SlotsExhausted => ("CXL_ESLOTS_EXHAUSTED", c"all thread slots are leased"),
        ErrorCode::ForeignPointer => ("CXL_EFOREIGN_POINTER", c"pointer does not belong to this heap"),
        ErrorCode::InteriorPointer => ("CXL_EINTERIOR_POINTER", c"pointer is interior to a block"),
        ErrorCode::DoubleFree => ("CXL_EDOUBLE_FREE", c"double free"),
        ErrorCode::NotAllocated => ("CXL_ENOT_ALLOCATED", c"pointer is not an allocated block"),
        ErrorCode::Corrupt => ("CXL_ECORRUPT", c"heap metadata corrupt"),
        ErrorCode::Unsupported => {
            ("CXL_EUNSUPPORTED", c"request not supported (above 512 KiB in a heap without a huge heap)")
        }
        ErrorCode::Io => ("CXL_EIO", c"operating-system error"),
        ErrorCode::PermissionDenied => {
            ("CXL_EACCES", c"the heap's files do not admit this user, or have mixed owners or modes")
        }
    }
}

/// The `errno` value a failure with `code` sets (allocation functions override it with
/// `ENOMEM`, see `alloc_failed`; open failures carry the OS error where there is one).
pub fn errno_of(code: ErrorCode) -> c_int {
    match code {
        ErrorCode::Ok => 0,
        ErrorCode::OutOfMemory | ErrorCode::Unsupported => libc::ENOMEM,
        ErrorCode::NotFound => libc::ENOENT,
        ErrorCode::AlreadyExists => libc::EEXIST,
        ErrorCode::SlotsExhausted => libc::EAGAIN,
        ErrorCode::Corrupt | ErrorCode::Io => libc::EIO,
        ErrorCode::PermissionDenied => libc::EACCES,
        ErrorCode::InvalidArgument
        | ErrorCode::BadHeap
        | ErrorCode::Mismatch
        | ErrorCode::ForeignPointer
        | ErrorCode::InteriorPointer
        | ErrorCode::DoubleFree
        | ErrorCode::NotAllocated => libc::EINVAL,
    }
}

thread_local! {
    /// The calling thread's last error code (an [`ErrorCode`] value).
    static LAST_CODE: Cell<i32> = const { Cell::new(ErrorCode::Ok as i32) };
    /// The message of the calling thread's last failure; replaced by the next failure.
    static LAST_MESSAGE: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records success. One thread-local store: cheap enough for the allocation fast path.
#[inline]
fn succeed() {
    // An Err means the thread is tearing down its thread-locals; nothing is left to report to.
    let _ = LAST_CODE.try_with(|c| c.set(ErrorCode::Ok as i32));
}

/// Records a failure of `func`: code, `errno`, and the message "`func`: `detail`".
#[cold]
#[inline(never)]
fn fail(func: &str, code: ErrorCode, errno: c_int, detail: &dyn fmt::Display) {
    nix::errno::Errno::set_raw(errno);
    let _ = LAST_CODE.try_with(|c| c.set(code as i32));
    let message = to_cstring(format!("{func}: {detail}"));
    let _ = LAST_MESSAGE.try_with(|m| {
        // Never contended: nothing on this thread holds the borrow across a call.
        if let Ok(mut slot) = m.try_borrow_mut() {
            *slot = Some(message);
        }
    });
}

/// `s` as a C string, with any interior NUL dropped.
fn to_cstring(s: String) -> CString {
    CString::new(s).unwrap_or_else(|e| {
        let mut bytes = e.into_vec();
        bytes.retain(|&b| b != 0);
        CString::new(bytes).unwrap_or_default()
    })
}

fn invalid(func: &str, detail: &dyn fmt::Display) {
    fail(func, ErrorCode::InvalidArgument, libc::EINVAL, detail);
}

fn null_argument(func: &str, what: &str) {
    invalid(func, &format_args!("{what} is NULL"));
}

fn open_failed(func: &str, e: &OpenError) {
    let code = ErrorCode::from(e);
    let errno = match e {
        OpenError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        OpenError::Map(errno) => *errno as c_int,
        _ => errno_of(code),
    };
    fail(func, code, errno, e);
}

/// Allocation functions report every failure but a bad argument as `ENOMEM`, as C expects.
fn alloc_failed(func: &str, e: &AllocError) {
    let code = ErrorCode::from(e);
    let errno = if code == ErrorCode::InvalidArgument { libc::EINVAL } else { libc::ENOMEM };
    fail(func, code, errno, e);
}

fn free_failed(func: &str, e: &FreeError) {
    let code = ErrorCode::from(e);
    fail(func, code, errno_of(code), e);
}

fn offset_failed(func: &str, e: &OffsetError) {
    let code = match e {
        OffsetError::Null => ErrorCode::InvalidArgument,
        OffsetError::OutOfBounds => ErrorCode::ForeignPointer,
    };
    fail(func, code, errno_of(code), e);
}

// ---------------------------------------------------------------------------------------------
// Argument conversion
// ---------------------------------------------------------------------------------------------

/// The heap behind `heap`, or `None` (recorded as `CXL_EINVAL`) if it is null.
///
/// # Safety
///
/// `heap` is null or a live pointer returned by a `cxl_heap_*` constructor.
unsafe fn heap_ref<'a>(heap: *const CxlHeap, func: &str) -> Option<&'a Heap> {
    // SAFETY: by the contract above, a non-null `heap` points to a live CxlHeap.
    match unsafe { heap.as_ref() } {
        Some(h) => Some(&h.heap),
        None => {
            null_argument(func, "heap");
            None
        }
    }
}

/// The thread handle behind `thread`, or `None` (recorded as `CXL_EINVAL`) if it is null.
///
/// # Safety
///
/// `thread` is null or a live pointer returned by `cxl_thread_attach`, used by no other thread
/// during this call.
unsafe fn thread_ref<'a>(thread: *const CxlThread, func: &str) -> Option<&'a ThreadHandle> {
    // SAFETY: by the contract above, a non-null `thread` points to a live CxlThread that no
    // other thread is using.
    match unsafe { thread.as_ref() } {
        Some(t) => Some(&t.thread),
        None => {
            null_argument(func, "thread");
            None
        }
    }
}

/// A heap name: non-null, NUL-terminated UTF-8.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string valid for reads.
unsafe fn name_arg<'a>(name: *const c_char, func: &str) -> Option<&'a str> {
    if name.is_null() {
        null_argument(func, "name");
        return None;
    }
    // SAFETY: non-null, and NUL-terminated and readable by the contract above.
    let bytes = unsafe { CStr::from_ptr(name) };
    match bytes.to_str() {
        Ok(s) => Some(s),
        Err(_) => {
            invalid(func, &"name is not valid UTF-8");
            None
        }
    }
}

/// A directory path: non-null, NUL-terminated, any bytes.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string valid for reads.
unsafe fn path_arg<'a>(path: *const c_char, func: &str) -> Option<&'a Path> {
    if path.is_null() {
        null_argument(func, "path");
        return None;
    }
    // SAFETY: non-null, and NUL-terminated and readable by the contract above.
    let bytes = unsafe { CStr::from_ptr(path) };
    Some(Path::new(std::ffi::OsStr::from_bytes(bytes.to_bytes())))
}

/// The configuration `cfg` describes, or the default one if `cfg` is null.
///
/// # Safety
///
/// `cfg` is null or points to a readable `cxl_config_t`.
unsafe fn config_arg(cfg: *const CxlConfig, func: &str) -> Option<Config> {
    // SAFETY: by the contract above, a non-null `cfg` is readable. `CxlConfig` has no invalid
    // bit patterns (integers only), so any bytes C left there are a valid value.
    let Some(c) = (unsafe { cfg.as_ref() }) else {
        return Some(Config::default());
    };
    match c.to_config() {
        Ok(config) => Some(config),
        Err(msg) => {
            invalid(func, &msg);
            None
        }
    }
}

/// Boxes an opened heap for C, or records why it could not be opened.
fn heap_result(func: &str, r: Result<Heap, OpenError>) -> *mut CxlHeap {
    match r {
        Ok(heap) => {
            succeed();
            Box::into_raw(Box::new(CxlHeap { heap }))
        }
        Err(e) => {
            open_failed(func, &e);
            ptr::null_mut()
        }
    }
}

fn unit_result(func: &str, r: Result<(), OpenError>) -> c_int {
    match r {
        Ok(()) => {
            succeed();
            ErrorCode::Ok as c_int
        }
        Err(e) => {
            open_failed(func, &e);
            ErrorCode::from(&e) as c_int
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// `int cxl_last_error(void)`: the calling thread's last error code.
#[unsafe(no_mangle)]
pub extern "C" fn cxl_last_error() -> c_int {
    LAST_CODE.try_with(Cell::get).unwrap_or(ErrorCode::Ok as i32)
}

/// `const char* cxl_last_error_message(void)`: the message of the calling thread's last error
/// ("success" when the last call succeeded). Never null. Valid until the next cxlalloc call on
/// this thread.
#[unsafe(no_mangle)]
pub extern "C" fn cxl_last_error_message() -> *const c_char {
    let code = cxl_last_error();
    if code == ErrorCode::Ok as c_int {
        return c"success".as_ptr();
    }
    let stored = LAST_MESSAGE
        .try_with(|m| m.try_borrow().ok().and_then(|slot| slot.as_ref().map(|s| s.as_ptr())))
        .ok()
        .flatten();
    // The CString's buffer is not freed until the next failure replaces it.
    stored.unwrap_or_else(|| cxl_strerror(code))
}

/// `const char* cxl_strerror(int code)`: a static description of `code`. Never null.
#[unsafe(no_mangle)]
pub extern "C" fn cxl_strerror(code: c_int) -> *const c_char {
    match ALL_CODES.iter().find(|&&c| c as c_int == code) {
        Some(&c) => code_info(c).1.as_ptr(),
        None => c"unknown cxlalloc error code".as_ptr(),
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration and heaps
// ---------------------------------------------------------------------------------------------

/// `void cxl_config_default(cxl_config_t* cfg)`: fills `*cfg` with the defaults.
///
/// # Safety
///
/// `cfg` is null (recorded as `CXL_EINVAL`) or points to writable memory for a `cxl_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_config_default(cfg: *mut CxlConfig) {
    if cfg.is_null() {
        null_argument("cxl_config_default", "cfg");
        return;
    }
    // SAFETY: non-null and writable by the contract above; `write` reads nothing old.
    unsafe { cfg.write(CxlConfig::from(&Config::default())) };
    succeed();
}

/// `cxl_heap_t* cxl_heap_create(const char* name, const cxl_config_t* cfg)`: creates the heap
/// `name` in `/dev/shm`; fails with `CXL_EEXIST` if it exists. A null `cfg` means the defaults.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string; `cfg` is null or points to a `cxl_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_create(name: *const c_char, cfg: *const CxlConfig) -> *mut CxlHeap {
    const F: &str = "cxl_heap_create";
    // SAFETY: forwarded from this function's contract.
    let Some(name) = (unsafe { name_arg(name, F) }) else {
        return ptr::null_mut();
    };
    // SAFETY: forwarded from this function's contract.
    let Some(config) = (unsafe { config_arg(cfg, F) }) else {
        return ptr::null_mut();
    };
    heap_result(F, Heap::create(name, &config))
}

/// `cxl_heap_t* cxl_heap_open(const char* name)`: opens the existing heap `name`.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_open(name: *const c_char) -> *mut CxlHeap {
    const F: &str = "cxl_heap_open";
    // SAFETY: forwarded from this function's contract.
    let Some(name) = (unsafe { name_arg(name, F) }) else {
        return ptr::null_mut();
    };
    heap_result(F, Heap::open(name))
}

/// `cxl_heap_t* cxl_heap_open_or_create(const char* name, const cxl_config_t* cfg)`: opens the
/// heap `name`, creating it with `cfg` (null: defaults) if absent; an existing heap must match
/// `cfg` (`CXL_EMISMATCH`).
///
/// # Safety
///
/// `name` is null or a NUL-terminated string; `cfg` is null or points to a `cxl_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_open_or_create(name: *const c_char, cfg: *const CxlConfig) -> *mut CxlHeap {
    const F: &str = "cxl_heap_open_or_create";
    // SAFETY: forwarded from this function's contract.
    let Some(name) = (unsafe { name_arg(name, F) }) else {
        return ptr::null_mut();
    };
    // SAFETY: forwarded from this function's contract.
    let Some(config) = (unsafe { config_arg(cfg, F) }) else {
        return ptr::null_mut();
    };
    heap_result(F, Heap::open_or_create(name, &config))
}

/// `int cxl_heap_unlink(const char* name)`: removes the heap `name`; processes that have it
/// open keep using it. Returns `CXL_OK` or the error code.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_unlink(name: *const c_char) -> c_int {
    const F: &str = "cxl_heap_unlink";
    // SAFETY: forwarded from this function's contract.
    let Some(name) = (unsafe { name_arg(name, F) }) else {
        return ErrorCode::InvalidArgument as c_int;
    };
    unit_result(F, Heap::unlink(name))
}

/// `cxl_heap_t* cxl_heap_create_at(const char* path, const cxl_config_t* cfg)`: creates a heap
/// in directory `path`, which must not exist.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string; `cfg` is null or points to a `cxl_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_create_at(path: *const c_char, cfg: *const CxlConfig) -> *mut CxlHeap {
    const F: &str = "cxl_heap_create_at";
    // SAFETY: forwarded from this function's contract.
    let Some(path) = (unsafe { path_arg(path, F) }) else {
        return ptr::null_mut();
    };
    // SAFETY: forwarded from this function's contract.
    let Some(config) = (unsafe { config_arg(cfg, F) }) else {
        return ptr::null_mut();
    };
    heap_result(F, Heap::create_at(path, &config))
}

/// `cxl_heap_t* cxl_heap_open_at(const char* path)`: opens the heap in directory `path`.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_open_at(path: *const c_char) -> *mut CxlHeap {
    const F: &str = "cxl_heap_open_at";
    // SAFETY: forwarded from this function's contract.
    let Some(path) = (unsafe { path_arg(path, F) }) else {
        return ptr::null_mut();
    };
    heap_result(F, Heap::open_at(path))
}

/// `cxl_heap_t* cxl_heap_open_or_create_at(const char* path, const cxl_config_t* cfg)`: as
/// [`cxl_heap_open_or_create`], for a directory.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string; `cfg` is null or points to a `cxl_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_open_or_create_at(path: *const c_char, cfg: *const CxlConfig) -> *mut CxlHeap {
    const F: &str = "cxl_heap_open_or_create_at";
    // SAFETY: forwarded from this function's contract.
    let Some(path) = (unsafe { path_arg(path, F) }) else {
        return ptr::null_mut();
    };
    // SAFETY: forwarded from this function's contract.
    let Some(config) = (unsafe { config_arg(cfg, F) }) else {
        return ptr::null_mut();
    };
    heap_result(F, Heap::open_or_create_at(path, &config))
}

/// `int cxl_heap_unlink_at(const char* path)`: removes the heap directory `path`.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_unlink_at(path: *const c_char) -> c_int {
    const F: &str = "cxl_heap_unlink_at";
    // SAFETY: forwarded from this function's contract.
    let Some(path) = (unsafe { path_arg(path, F) }) else {
        return ErrorCode::InvalidArgument as c_int;
    };
    unit_result(F, Heap::unlink_at(path))
}

/// `cxl_heap_t* cxl_heap_format_device(const char* path, const cxl_config_t* cfg)`: formats the
/// device `path` (a DAX device, a PCI BAR's resource file, or a plain file) for a heap and
/// opens it ([`Heap::format_device`]); whatever the device held is lost.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string; `cfg` is null or points to a `cxl_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_format_device(path: *const c_char, cfg: *const CxlConfig) -> *mut CxlHeap {
    const F: &str = "cxl_heap_format_device";
    // SAFETY: forwarded from this function's contract.
    let Some(path) = (unsafe { path_arg(path, F) }) else {
        return ptr::null_mut();
    };
    // SAFETY: forwarded from this function's contract.
    let Some(config) = (unsafe { config_arg(cfg, F) }) else {
        return ptr::null_mut();
    };
    heap_result(F, Heap::format_device(path, &config))
}

/// `cxl_heap_t* cxl_heap_open_device(const char* path)`: opens the heap on the device `path`
/// ([`Heap::open_device`]).
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_open_device(path: *const c_char) -> *mut CxlHeap {
    const F: &str = "cxl_heap_open_device";
    // SAFETY: forwarded from this function's contract.
    let Some(path) = (unsafe { path_arg(path, F) }) else {
        return ptr::null_mut();
    };
    heap_result(F, Heap::open_device(path))
}

/// `uint64_t cxl_device_bytes(const cxl_config_t* cfg)`: bytes a device needs for a heap with
/// `cfg` ([`Heap::device_bytes`]); 0 with the error set for an invalid configuration.
///
/// # Safety
///
/// `cfg` is null or points to a `cxl_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_device_bytes(cfg: *const CxlConfig) -> u64 {
    const F: &str = "cxl_device_bytes";
    // SAFETY: forwarded from this function's contract.
    let Some(config) = (unsafe { config_arg(cfg, F) }) else {
        return 0;
    };
    match Heap::device_bytes(&config) {
        Ok(n) => {
            succeed();
            n
        }
        Err(e) => {
            open_failed(F, &e);
            0
        }
    }
}

/// `cxl_heap_t* cxl_heap_anonymous(const cxl_config_t* cfg)`: a private heap in anonymous
/// memory, for this process only.
///
/// # Safety
///
/// `cfg` is null or points to a `cxl_config_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_anonymous(cfg: *const CxlConfig) -> *mut CxlHeap {
    const F: &str = "cxl_heap_anonymous";
    // SAFETY: forwarded from this function's contract.
    let Some(config) = (unsafe { config_arg(cfg, F) }) else {
        return ptr::null_mut();
    };
    heap_result(F, Heap::anonymous(&config))
}

/// `void cxl_heap_close(cxl_heap_t* heap)`: drops the handle. Thread handles attached to the
/// heap stay valid; the mapping lives until the last of them is detached. Null is a no-op.
///
/// # Safety
///
/// `heap` is null or a live heap handle, which no other thread is using and which is not used
/// again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_close(heap: *mut CxlHeap) {
    if !heap.is_null() {
        // SAFETY: by the contract above, `heap` came from Box::into_raw in `heap_result` and
        // ownership returns to us here, once.
        drop(unsafe { Box::from_raw(heap) });
    }
    succeed();
}

// ---------------------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------------------

/// `cxl_thread_t* cxl_thread_attach(cxl_heap_t* heap)`: leases a thread slot of `heap` for the
/// caller (`CXL_ESLOTS_EXHAUSTED` when none is free).
///
/// # Safety
///
/// `heap` is null or a live heap handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_thread_attach(heap: *const CxlHeap) -> *mut CxlThread {
    const F: &str = "cxl_thread_attach";
    // SAFETY: forwarded from this function's contract.
    let Some(heap) = (unsafe { heap_ref(heap, F) }) else {
        return ptr::null_mut();
    };
    match heap.attach() {
        Ok(thread) => {
            succeed();
            Box::into_raw(Box::new(CxlThread { thread }))
        }
        Err(e) => {
            let code = ErrorCode::from(&e);
            fail(F, code, errno_of(code), &e);
            ptr::null_mut()
        }
    }
}

/// `cxl_thread_t* cxl_thread_adopt(cxl_heap_t* heap, unsigned slot)`: takes over thread slot
/// `slot`, whose holder process died, and repairs it (the operation it was in, its lists, its
/// detectable allocation or free, its hazards); the caller then holds the slot. Errors:
/// `CXL_EINVAL` (no such slot, not leased, holder alive), `CXL_ESLOTS_EXHAUSTED` (another thread
/// adopted it first), `CXL_EUNSUPPORTED` (heap created without recovery).
///
/// # Safety
///
/// `heap` is null or a live heap handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_thread_adopt(heap: *const CxlHeap, slot: c_uint) -> *mut CxlThread {
    const F: &str = "cxl_thread_adopt";
    // SAFETY: forwarded from this function's contract.
    let Some(heap) = (unsafe { heap_ref(heap, F) }) else {
        return ptr::null_mut();
    };
    match heap.adopt(slot) {
        Ok((thread, _)) => {
            succeed();
            Box::into_raw(Box::new(CxlThread { thread }))
        }
        Err(e) => {
            let code = ErrorCode::from(&e);
            fail(F, code, errno_of(code), &e);
            ptr::null_mut()
        }
    }
}

/// `size_t cxl_heap_recover(cxl_heap_t* heap)`: adopts, repairs and releases every slot whose
/// holder died; returns how many (0 on error, with the last error set).
///
/// # Safety
///
/// `heap` is null or a live heap handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_recover(heap: *const CxlHeap) -> usize {
    const F: &str = "cxl_heap_recover";
    // SAFETY: forwarded from this function's contract.
    let Some(heap) = (unsafe { heap_ref(heap, F) }) else {
        return 0;
    };
    let n = heap.recover_dead().len();
    succeed();
    n
}

/// The heap behind `heap` if this process may run huge operations through it: not null, and
/// not a handle a forked child inherited from its parent (docs/design.md §7.5); otherwise
/// `None`, with `CXL_EINVAL` recorded.
///
/// # Safety
///
/// `heap` is null or a live heap handle.
unsafe fn huge_heap_ref<'a>(heap: *const CxlHeap, func: &str) -> Option<&'a Heap> {
    // SAFETY: forwarded from this function's contract.
    let h = unsafe { heap_ref(heap, func) }?;
    if h.mem().huge().is_some_and(|v| !v.in_own_process()) {
        fail(
            func,
            ErrorCode::InvalidArgument,
            libc::EINVAL,
            &"a handle inherited across fork: the child must open the heap itself for huge blocks",
        );
        return None;
    }
    Some(h)
}

/// `int cxl_heap_drop_stale_huge(const cxl_heap_t* heap, size_t* dropped_out)`: drops this
/// process's mappings of huge blocks no longer live (freed by any process), so that their
/// memory is given back without waiting for this process's next huge operation, and stores
/// how many it dropped in `*dropped_out` (if non-null). Returns `CXL_OK`, or `CXL_EINVAL` for a
/// null heap or a handle inherited across `fork` (docs/design.md §7.4, §7.6).
///
/// # Safety
///
/// `heap` is null or a live heap handle; `dropped_out` is null or points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_drop_stale_huge(heap: *const CxlHeap, dropped_out: *mut usize) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe { count_huge_work(heap, dropped_out, "cxl_heap_drop_stale_huge", Heap::drop_stale_huge) }
}

/// `int cxl_heap_sweep_huge(const cxl_heap_t* heap, size_t* released_out)`: reclaims freed
/// huge blocks that no process maps any more but nobody has reclaimed (what `cxlalloc recover`
/// runs), and stores how many backing objects of held slots it removed in `*released_out` (if
/// non-null). Returns `CXL_OK`, or `CXL_EINVAL` for a null heap or a handle inherited across
/// `fork` (docs/design.md §7.6).
///
/// # Safety
///
/// `heap` is null or a live heap handle; `released_out` is null or points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_sweep_huge(heap: *const CxlHeap, released_out: *mut usize) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe { count_huge_work(heap, released_out, "cxl_heap_sweep_huge", Heap::sweep_huge) }
}

/// Runs one of the huge heap's maintenance steps and stores how many blocks it handled in
/// `*count_out` (if non-null): the shared body of `cxl_heap_drop_stale_huge` and
/// `cxl_heap_sweep_huge`.
///
/// # Safety
///
/// `heap` is null or a live heap handle; `count_out` is null or points to a writable `size_t`.
unsafe fn count_huge_work(heap: *const CxlHeap, count_out: *mut usize, f: &str, work: fn(&Heap) -> usize) -> c_int {
    // SAFETY: forwarded from this function's contract.
    let Some(h) = (unsafe { huge_heap_ref(heap, f) }) else {
        return ErrorCode::InvalidArgument as c_int;
    };
    let n = work(h);
    // SAFETY: by the contract above, a non-null `count_out` is writable.
    if let Some(out) = unsafe { count_out.as_mut() } {
        *out = n;
    }
    succeed();
    ErrorCode::Ok as c_int
}

/// `cxl_host_info_t`: one entry of a heap's host table ([`crate::HostInfo`], docs/design.md §8.6).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CxlHostInfo {
    /// [`crate::HostInfo::id`]: the entry's index.
    pub id: u16,
    /// [`crate::HostInfo::own`].
    pub own: bool,
    /// [`crate::HostInfo::declared_dead`].
    pub declared_dead: bool,
    /// [`crate::HostInfo::domain`]: with `id`, the host's name for `cxl_heap_recover_host`.
    pub domain: u64,
    /// [`crate::HostInfo::silent_for`] in seconds; -1 when the beat lies ahead of this clock.
    pub silent_for: i64,
    /// [`crate::HostInfo::name`], NUL-terminated (cut at a character to fit).
    pub name: [c_char; 40],
}

/// `size_t cxl_heap_hosts(const cxl_heap_t* heap, cxl_host_info_t* out, size_t capacity)`:
/// writes up to `capacity` entries of the heap's host table to `out` and returns how many hosts
/// there are (more than `capacity`: call again with room for all). 0 on error (last error set).
///
/// # Safety
///
/// `heap` is null or a live heap handle; `out` is null (then `capacity` must be 0) or points to
/// `capacity` writable `cxl_host_info_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_hosts(heap: *const CxlHeap, out: *mut CxlHostInfo, capacity: usize) -> usize {
    const F: &str = "cxl_heap_hosts";
    // SAFETY: forwarded from this function's contract.
    let Some(heap) = (unsafe { heap_ref(heap, F) }) else {
        return 0;
    };
    if out.is_null() && capacity != 0 {
        fail(F, ErrorCode::InvalidArgument, libc::EINVAL, &"out is NULL with a non-zero capacity");
        return 0;
    }
    let hosts = heap.hosts();
    for (i, h) in hosts.iter().take(capacity).enumerate() {
        let mut name = [0 as c_char; 40];
        let mut end = h.name.len().min(name.len() - 1);
        while !h.name.is_char_boundary(end) {
            end -= 1;
        }
        for (d, &b) in name.iter_mut().zip(&h.name.as_bytes()[..end]) {
            *d = b as c_char;
        }
        let info = CxlHostInfo {
            id: h.id,
            own: h.own,
            declared_dead: h.declared_dead,
            domain: h.domain,
            silent_for: h.silent_for.map_or(-1, |s| i64::try_from(s).unwrap_or(i64::MAX)),
            name,
        };
        // SAFETY: `i < capacity`, and `out` points to `capacity` writable entries (contract).
        unsafe { out.add(i).write(info) };
    }
    succeed();
    hosts.len()
}

/// `int cxl_heap_recover_host(const cxl_heap_t* heap, uint16_t id, uint64_t domain,
/// size_t* recovered_out)`: [`Heap::recover_host`]: declares host `id` of `domain` (as
/// `cxl_heap_hosts` lists it) dead and recovers what it held; stores the number of slots
/// recovered in `*recovered_out` (if non-null). Returns `CXL_OK`; `CXL_EINVAL` for a null heap,
/// a free entry, this process's own host, or an entry now naming another domain (reused);
/// `CXL_EUNSUPPORTED` for a heap created without recovery.
///
/// # Safety
///
/// `heap` is null or a live heap handle; `recovered_out` is null or points to a writable
/// `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_recover_host(
    heap: *const CxlHeap,
    id: u16,
    domain: u64,
    recovered_out: *mut usize,
) -> c_int {
    const F: &str = "cxl_heap_recover_host";
    // SAFETY: forwarded from this function's contract.
    let Some(heap) = (unsafe { heap_ref(heap, F) }) else {
        return ErrorCode::InvalidArgument as c_int;
    };
    match heap.recover_host(id, domain) {
        Ok(r) => {
            // SAFETY: by the contract above, a non-null `recovered_out` is writable.
            if let Some(out) = unsafe { recovered_out.as_mut() } {
                *out = r.reports.len();
            }
            succeed();
            ErrorCode::Ok as c_int
        }
        Err(e) => {
            let code = ErrorCode::from(&e);
            fail(F, code, errno_of(code), &e);
            code as c_int
        }
    }
}

/// `void cxl_thread_detach(cxl_thread_t* thread)`: releases the slot (its cached empty slabs go
/// back to the heap). Blocks allocated through it stay allocated. Null is a no-op.
///
/// # Safety
///
/// `thread` is null or a live thread handle, which no other thread is using and which is not
/// used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_thread_detach(thread: *mut CxlThread) {
    if !thread.is_null() {
        // SAFETY: by the contract above, `thread` came from Box::into_raw in
        // `cxl_thread_attach` and ownership returns to us here, once.
        drop(unsafe { Box::from_raw(thread) });
    }
    succeed();
}

// ---------------------------------------------------------------------------------------------
// Allocation
// ---------------------------------------------------------------------------------------------

fn alloc_result(func: &str, r: Result<NonNull<u8>, AllocError>) -> *mut c_void {
    match r {
        Ok(p) => {
            succeed();
            p.as_ptr().cast()
        }
        Err(e) => {
            alloc_failed(func, &e);
            ptr::null_mut()
        }
    }
}

/// `void* cxl_malloc(cxl_thread_t* thread, size_t size)`: `size` bytes, uninitialized. Null on
/// failure: `CXL_EINVAL`/`EINVAL` for size 0, `CXL_ENOMEM`/`ENOMEM` when the heap (or its huge
/// address space) is full, `CXL_EUNSUPPORTED`/`ENOMEM` above 512 KiB in a heap created without a
/// huge heap.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_malloc(thread: *mut CxlThread, size: usize) -> *mut c_void {
    const F: &str = "cxl_malloc";
    // SAFETY: forwarded from this function's contract.
    let Some(t) = (unsafe { thread_ref(thread, F) }) else {
        return ptr::null_mut();
    };
    alloc_result(F, t.alloc(size))
}

/// `void* cxl_calloc(cxl_thread_t* thread, size_t count, size_t size)`: `count * size` zeroed
/// bytes. An overflowing product fails with `CXL_ENOMEM`/`ENOMEM`.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_calloc(thread: *mut CxlThread, count: usize, size: usize) -> *mut c_void {
    const F: &str = "cxl_calloc";
    // SAFETY: forwarded from this function's contract.
    let Some(t) = (unsafe { thread_ref(thread, F) }) else {
        return ptr::null_mut();
    };
    alloc_result(F, t.alloc_array_zeroed(count, size))
}

/// `void* cxl_realloc(cxl_thread_t* thread, void* ptr, size_t size)`: C `realloc`. Null `ptr`:
/// `cxl_malloc(size)`. Size 0: frees `ptr` and returns null (the last error is `CXL_OK` when
/// the free succeeded). Otherwise `ptr` is validated before anything is copied; on any failure
/// null is returned and `ptr` is untouched and still allocated.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using; `ptr` is null or
/// any pointer (a block of this heap, or not: foreign pointers are detected) whose block no
/// other thread frees or reallocates concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_realloc(thread: *mut CxlThread, ptr: *mut c_void, size: usize) -> *mut c_void {
    const F: &str = "cxl_realloc";
    // SAFETY: forwarded from this function's contract.
    let Some(t) = (unsafe { thread_ref(thread, F) }) else {
        return ptr::null_mut();
    };
    let Some(old) = NonNull::new(ptr.cast::<u8>()) else {
        return alloc_result(F, t.alloc(size));
    };
    if size == 0 {
        match t.free(old) {
            Ok(()) => succeed(),
            Err(e) => free_failed(F, &e),
        }
        return ptr::null_mut();
    }
    match t.realloc(old, size) {
        Ok(p) => {
            succeed();
            p.as_ptr().cast()
        }
        Err(ReallocError::Free(e)) => {
            free_failed(F, &e);
            ptr::null_mut()
        }
        Err(ReallocError::Alloc(e)) => {
            alloc_failed(F, &e);
            ptr::null_mut()
        }
    }
}

/// `void* cxl_aligned_alloc(cxl_thread_t* thread, size_t alignment, size_t size)`: C11
/// `aligned_alloc` (alignment first). `alignment` must be a power of two of at most 1 GiB
/// ([`crate::MAX_ALIGN`]; else `CXL_EINVAL`, with a message naming the limit); `size` need not
/// be a multiple of it.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_aligned_alloc(thread: *mut CxlThread, alignment: usize, size: usize) -> *mut c_void {
    const F: &str = "cxl_aligned_alloc";
    // SAFETY: forwarded from this function's contract.
    let Some(t) = (unsafe { thread_ref(thread, F) }) else {
        return ptr::null_mut();
    };
    alloc_result(F, t.alloc_aligned(size, alignment))
}

/// `int cxl_free(cxl_thread_t* thread, void* ptr)`: frees a block allocated by any thread of
/// any process from this heap. Null `ptr` is a no-op. Returns `CXL_OK` or the error code
/// (foreign, interior, double free, ...), in which case the heap is untouched.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using; `ptr` is null or any
/// pointer whose block no other thread frees or reallocates concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_free(thread: *mut CxlThread, ptr: *mut c_void) -> c_int {
    const F: &str = "cxl_free";
    // SAFETY: forwarded from this function's contract.
    let Some(t) = (unsafe { thread_ref(thread, F) }) else {
        return ErrorCode::InvalidArgument as c_int;
    };
    let Some(p) = NonNull::new(ptr.cast::<u8>()) else {
        succeed();
        return ErrorCode::Ok as c_int;
    };
    free_status(F, t.free(p))
}

/// The C status of a free's result (recording the last error).
fn free_status(f: &str, result: Result<(), FreeError>) -> c_int {
    match result {
        Ok(()) => {
            succeed();
            ErrorCode::Ok as c_int
        }
        Err(e) => {
            free_failed(f, &e);
            ErrorCode::from(&e) as c_int
        }
    }
}

/// `void* cxl_malloc_into(cxl_thread_t* thread, size_t size, uint64_t* dest)`: detectable
/// allocation: like cxl_malloc(), and stores the block's heap offset into `*dest`, a word of
/// this heap (in a block or a root) that the application's structure owns. If the process dies
/// at any point, recovery of the thread's slot completes the store or leaves the block free.
/// `dest` null, or not an 8-aligned word this process can use (a root, a word of a slab below
/// the heap's length, or a word in a live huge block; see [`crate::mem::HeapMem::word_at`]):
/// `CXL_EINVAL`, checked before `dest` is read or written.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using; `dest` is any
/// pointer (it is checked to be a word of the heap before it is read or written).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_malloc_into(thread: *mut CxlThread, size: usize, dest: *mut u64) -> *mut c_void {
    const F: &str = "cxl_malloc_into";
    // SAFETY: forwarded from this function's contract.
    let Some(t) = (unsafe { thread_ref(thread, F) }) else {
        return ptr::null_mut();
    };
    let Some(word) = heap_word(t, dest) else {
        alloc_failed(F, &AllocError::BadDestination);
        return ptr::null_mut();
    };
    alloc_result(F, t.alloc_into(size, word))
}

/// `int cxl_free_from(cxl_thread_t* thread, uint64_t* dest)`: detectable free: clears `*dest`,
/// which holds the heap offset of an allocated block, then frees the block; recovery finishes
/// both if the process dies. Errors as cxl_free() (the block is validated before `*dest` is
/// touched); `*dest` holding 0: `CXL_ENOT_ALLOCATED`.
///
/// # Safety
///
/// As cxl_malloc_into().
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_free_from(thread: *mut CxlThread, dest: *mut u64) -> c_int {
    const F: &str = "cxl_free_from";
    // SAFETY: forwarded from this function's contract.
    let Some(t) = (unsafe { thread_ref(thread, F) }) else {
        return ErrorCode::InvalidArgument as c_int;
    };
    let result = match heap_word(t, dest) {
        Some(word) => t.free_from(word),
        None => Err(FreeError::ForeignPointer),
    };
    free_status(F, result)
}

/// `dest` as a word of `t`'s heap that this process can use (8-aligned: a root, a word of a slab
/// below the length, or a word in a live huge block), if it is one.
fn heap_word(t: &ThreadHandle, dest: *mut u64) -> Option<&AtomicU64> {
    let mem = t.heap().mem();
    mem.word_at(mem.word_offset(dest.cast_const().cast())?)
}

/// `size_t cxl_usable_size(cxl_thread_t* thread, const void* ptr)`: the usable size of an
/// allocated block; 0 for null `ptr` (not an error) and on error.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_usable_size(thread: *mut CxlThread, ptr: *const c_void) -> usize {
    const F: &str = "cxl_usable_size";
    // SAFETY: forwarded from this function's contract.
    let Some(t) = (unsafe { thread_ref(thread, F) }) else {
        return 0;
    };
    let Some(p) = NonNull::new(ptr.cast::<u8>().cast_mut()) else {
        succeed();
        return 0;
    };
    match t.usable_size(p) {
        Ok(n) => {
            succeed();
            n
        }
        Err(e) => {
            free_failed(F, &e);
            0
        }
    }
}

/// Which side of a hand-over [`hand_over`] runs.
#[derive(Clone, Copy)]
enum HandOver {
    WriteBack,
    Invalidate,
}

/// `cxl_write_back` / `cxl_invalidate`: [`ThreadHandle::write_back`] /
/// [`ThreadHandle::invalidate`] of `len` bytes at `ptr`.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using.
unsafe fn hand_over(thread: *mut CxlThread, ptr: *const c_void, len: usize, side: HandOver, func: &str) -> c_int {
    // SAFETY: forwarded from this function's contract.
    let Some(t) = (unsafe { thread_ref(thread, func) }) else {
        return ErrorCode::InvalidArgument as c_int;
    };
    let Some(p) = NonNull::new(ptr.cast::<u8>().cast_mut()) else {
        fail(func, ErrorCode::InvalidArgument, libc::EINVAL, &"ptr is NULL");
        return ErrorCode::InvalidArgument as c_int;
    };
    let done = match side {
        HandOver::WriteBack => t.write_back(p, len),
        HandOver::Invalidate => t.invalidate(p, len),
    };
    match done {
        Ok(()) => {
            succeed();
            ErrorCode::Ok as c_int
        }
        Err(e) => {
            let code = ErrorCode::from(&e);
            fail(func, code, errno_of(code), &e);
            code as c_int
        }
    }
}

/// `int cxl_write_back(cxl_thread_t* thread, const void* ptr, size_t len)`: the sending side
/// of handing `len` bytes at `ptr` to another host in the limited and no-HWcc models (a no-op
/// in the full model; docs/design.md §9.1). Returns `CXL_OK`; `CXL_EINVAL` for a null thread or
/// `ptr`, or a range past the pointer's slab or huge block; the codes of `cxl_free` for a
/// pointer outside the heap's blocks.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_write_back(thread: *mut CxlThread, ptr: *const c_void, len: usize) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe { hand_over(thread, ptr, len, HandOver::WriteBack, "cxl_write_back") }
}

/// `int cxl_invalidate(cxl_thread_t* thread, const void* ptr, size_t len)`: the receiving side
/// of a hand-over (see `cxl_write_back`), before reading or freeing what another host wrote.
/// The same codes as `cxl_write_back`.
///
/// # Safety
///
/// `thread` is null or a live thread handle that no other thread is using.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_invalidate(thread: *mut CxlThread, ptr: *const c_void, len: usize) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe { hand_over(thread, ptr, len, HandOver::Invalidate, "cxl_invalidate") }
}

// ---------------------------------------------------------------------------------------------
// Offsets and roots
// ---------------------------------------------------------------------------------------------

/// `uint64_t cxl_offset_of(const cxl_heap_t* heap, const void* ptr)`: the offset of `ptr`,
/// which must point into the heap's block data; 0 on error (`CXL_EINVAL` for null,
/// `CXL_EFOREIGN_POINTER` outside the heap).
///
/// # Safety
///
/// `heap` is null or a live heap handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_offset_of(heap: *const CxlHeap, ptr: *const c_void) -> u64 {
    const F: &str = "cxl_offset_of";
    // SAFETY: forwarded from this function's contract.
    let Some(h) = (unsafe { heap_ref(heap, F) }) else {
        return 0;
    };
    match h.offset_of(ptr.cast::<u8>()) {
        Ok(off) => {
            succeed();
            off.raw()
        }
        Err(e) => {
            offset_failed(F, &e);
            0
        }
    }
}

/// `void* cxl_pointer(const cxl_heap_t* heap, uint64_t offset)`: the address of `offset` in this
/// process's mapping of the heap; null on error (`CXL_EINVAL` for offset 0,
/// `CXL_EFOREIGN_POINTER` outside the heap's block data).
///
/// # Safety
///
/// `heap` is null or a live heap handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_pointer(heap: *const CxlHeap, offset: u64) -> *mut c_void {
    const F: &str = "cxl_pointer";
    // SAFETY: forwarded from this function's contract.
    let Some(h) = (unsafe { heap_ref(heap, F) }) else {
        return ptr::null_mut();
    };
    match h.pointer(Offset::<u8>::from_raw(offset)) {
        Ok(p) => {
            succeed();
            p.as_ptr().cast()
        }
        Err(e) => {
            offset_failed(F, &e);
            ptr::null_mut()
        }
    }
}

fn bad_root(func: &str, index: c_uint) {
    invalid(func, &format_args!("root index {index} is not below {}", Heap::ROOTS));
}

/// `uint64_t cxl_root_load(const cxl_heap_t* heap, unsigned index)`: application root `index`
/// (< `CXL_ROOTS`); 0 on error (`CXL_EINVAL`), so check `cxl_last_error` when 0 is ambiguous.
///
/// # Safety
///
/// `heap` is null or a live heap handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_root_load(heap: *const CxlHeap, index: c_uint) -> u64 {
    const F: &str = "cxl_root_load";
    // SAFETY: forwarded from this function's contract.
    let Some(h) = (unsafe { heap_ref(heap, F) }) else {
        return 0;
    };
    match h.root(index as usize) {
        Some(root) => {
            succeed();
            // Acquire: pairs with the AcqRel of the `cxl_root_cas` that stored the value, so
            // the block the root names is seen as its writer left it.
            root.load(Ordering::Acquire)
        }
        None => {
            bad_root(F, index);
            0
        }
    }
}

/// `bool cxl_root_cas(const cxl_heap_t* heap, unsigned index, uint64_t* expected,
/// uint64_t desired)`: C11 `atomic_compare_exchange_strong` on root `index`. True if the root
/// held `*expected` and now holds `desired`; false otherwise, with the current value written to
/// `*expected`. Invalid arguments also return false (`CXL_EINVAL`), leaving `*expected` alone.
///
/// # Safety
///
/// `heap` is null or a live heap handle; `expected` is null or points to a readable and
/// writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_root_cas(heap: *const CxlHeap, index: c_uint, expected: *mut u64, desired: u64) -> bool {
    const F: &str = "cxl_root_cas";
    // SAFETY: forwarded from this function's contract.
    let Some(h) = (unsafe { heap_ref(heap, F) }) else {
        return false;
    };
    // SAFETY: by the contract above, a non-null `expected` is readable and writable, and C
    // holds no other reference to it during this call.
    let Some(expected) = (unsafe { expected.as_mut() }) else {
        null_argument(F, "expected");
        return false;
    };
    // AcqRel inside: Release publishes the caller's writes to the block `desired` names (pairs
    // with the Acquire in `cxl_root_load` and in a later CAS); Acquire on success and failure
    // gives the same guarantee for the value read. Through mCAS in the no-HWcc model.
    let Some(outcome) = h.root_compare_exchange(index as usize, *expected, desired) else {
        bad_root(F, index);
        return false;
    };
    succeed();
    match outcome {
        Ok(_) => true,
        Err(current) => {
            *expected = current;
            false
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checker
// ---------------------------------------------------------------------------------------------

/// `int cxl_heap_check(const cxl_heap_t* heap, size_t* problems_out)`: runs the checker on a
/// quiescent heap and stores the number of problems found in `*problems_out` (if non-null).
/// Returns `CXL_OK`, or `CXL_EINVAL` for a null heap.
///
/// # Safety
///
/// `heap` is null or a live heap handle; `problems_out` is null or points to a writable
/// `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cxl_heap_check(heap: *const CxlHeap, problems_out: *mut usize) -> c_int {
    const F: &str = "cxl_heap_check";
    // SAFETY: forwarded from this function's contract.
    let Some(h) = (unsafe { heap_ref(heap, F) }) else {
        return ErrorCode::InvalidArgument as c_int;
    };
    let report = h.check();
    // SAFETY: by the contract above, a non-null `problems_out` is writable.
    if let Some(out) = unsafe { problems_out.as_mut() } {
        *out = report.problems.len();
    }
    succeed();
    ErrorCode::Ok as c_int
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = include_str!("../include/cxlalloc.h");

    /// `(name, value)` of every `#define NAME VALUE` in the header whose value is an integer.
    fn header_defines() -> Vec<(String, i64)> {
        HEADER
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                if words.next()? != "#define" {
                    return None;
                }
                let name = words.next()?;
                let value = words.next()?.trim_start_matches('(').trim_end_matches(')').trim_end_matches(['u', 'U']);
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn header_error_codes_match_error_code() {
        let defines: Vec<_> =
            header_defines().into_iter().filter(|(name, _)| name == "CXL_OK" || name.starts_with("CXL_E")).collect();
        for code in ALL_CODES {
            let name = code_info(code).0;
            let found: Vec<_> = defines.iter().filter(|(n, _)| n == name).collect();
            assert_eq!(found.len(), 1, "{name} must be defined exactly once in cxlalloc.h");
            assert_eq!(found[0].1, code as i64, "{name} in cxlalloc.h differs from ErrorCode::{code:?}");
        }
        for (name, _) in &defines {
            assert!(
                ALL_CODES.iter().any(|&c| code_info(c).0 == name),
                "cxlalloc.h defines {name}, which is no ErrorCode"
            );
        }
    }

    #[test]
    fn header_constants_match_rust() {
        let defines = header_defines();
        let get = |n: &str| defines.iter().find(|(name, _)| name == n).map(|&(_, v)| v);
        assert_eq!(get("CXL_ROOTS"), Some(Heap::ROOTS as i64));
        assert_eq!(get("CXL_COHERENCE_FULL"), Some(Coherence::Full as i64));
        assert_eq!(get("CXL_COHERENCE_LIMITED"), Some(Coherence::Limited as i64));
        assert_eq!(get("CXL_COHERENCE_NONE"), Some(Coherence::NoHwcc as i64));
        // Every model has its constant, and no other CXL_COHERENCE_* is defined.
        let models: Vec<_> = defines.iter().filter(|(n, _)| n.starts_with("CXL_COHERENCE_")).collect();
        assert_eq!(models.len(), Coherence::ALL.len(), "{models:?}");
    }

    #[test]
    fn all_codes_are_in_value_order() {
        for (i, c) in ALL_CODES.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }

    #[test]
    fn config_round_trips_through_c_struct() {
        let c = Config::with_capacity(1 << 30);
        assert_eq!(CxlConfig::from(&c).to_config(), Ok(c));
        let bad = CxlConfig { coherence: 99, ..CxlConfig::from(&Config::default()) };
        assert!(bad.to_config().is_err());
        for coherence in Coherence::ALL {
            let c = Config { coherence, huge_capacity: 0, ..Config::with_capacity(1 << 30) };
            assert_eq!(CxlConfig::from(&c).to_config(), Ok(c));
        }
        let kept = Config { return_pages: false, ..Config::with_capacity(1 << 30) };
        assert_eq!(CxlConfig::from(&kept).to_config(), Ok(kept));
    }

    #[test]
    fn null_handles_are_errors_not_crashes() {
        // SAFETY: every handle passed is null, which each function accepts.
        unsafe {
            assert!(cxl_malloc(ptr::null_mut(), 8).is_null());
            assert_eq!(cxl_last_error(), ErrorCode::InvalidArgument as c_int);
            assert_eq!(cxl_free(ptr::null_mut(), ptr::null_mut()), ErrorCode::InvalidArgument as c_int);
            assert!(cxl_thread_attach(ptr::null()).is_null());
            assert_eq!(cxl_root_load(ptr::null(), 0), 0);
            assert_eq!(cxl_heap_check(ptr::null(), ptr::null_mut()), ErrorCode::InvalidArgument as c_int);
            let msg = CStr::from_ptr(cxl_last_error_message()).to_string_lossy().into_owned();
            assert!(msg.contains("cxl_heap_check") && msg.contains("NULL"), "{msg}");
            cxl_heap_close(ptr::null_mut());
            cxl_thread_detach(ptr::null_mut());
            assert_eq!(cxl_last_error(), ErrorCode::Ok as c_int);
        }
    }

    #[test]
    fn anonymous_heap_through_c_api() {
        // Miri backs a reservation with one real allocation: no huge span there.
        let huge_capacity = if cfg!(miri) { 0 } else { 1 << 30 };
        let cfg = CxlConfig::from(&Config { huge_capacity, ..Config::with_capacity(64 << 20) });
        // SAFETY: handles come from the constructors and are used on this thread only.
        unsafe {
            let h = cxl_heap_anonymous(&cfg);
            assert!(!h.is_null());
            let t = cxl_thread_attach(h);
            assert!(!t.is_null());
            let p = cxl_malloc(t, 100);
            assert!(!p.is_null());
            assert!(cxl_usable_size(t, p) >= 100);
            let off = cxl_offset_of(h, p);
            assert_eq!(cxl_pointer(h, off), p);
            assert_eq!(cxl_free(t, p), 0);
            let huge = cxl_malloc(t, (512 << 10) + 1);
            if huge_capacity == 0 {
                assert!(huge.is_null());
                assert_eq!(cxl_last_error(), ErrorCode::Unsupported as c_int);
            } else {
                assert!(!huge.is_null(), "above 512 KiB comes from the huge heap");
                assert_eq!(cxl_free(t, huge), 0);
            }
            assert!(cxl_malloc(t, usize::MAX).is_null());
            let code = if huge_capacity == 0 { ErrorCode::Unsupported } else { ErrorCode::OutOfMemory };
            assert_eq!(cxl_last_error(), code as c_int);
            assert_eq!(nix::errno::Errno::last_raw(), libc::ENOMEM);
            let mut problems = usize::MAX;
            assert_eq!(cxl_heap_check(h, &mut problems), 0);
            assert_eq!(problems, 0);
            cxl_thread_detach(t);
            cxl_heap_close(h);
        }
    }
}
