//! `libcxlalloc_preload.so`: the C allocation functions on a cxlalloc heap, so that unmodified
//! programs run on one:
//!
//! ```sh
//! LD_PRELOAD=target/release/libcxlalloc_preload.so CXLALLOC_VERBOSE=1 python3 -c 'print(1)'
//! ```
//!
//! How it works is docs/design.md §17: which memory serves which call (the heap, or the
//! library's own allocator in `meta` before the heap is ready and for the library itself),
//! per-thread slots attached on first use and released at thread exit, `fork`, configuration by
//! environment and the report at exit.
//!
//! Nothing here panics into the caller: a failed allocation is `NULL` with `errno = ENOMEM`
//! (`EINVAL` for a bad alignment), and a pointer the library does not recognise is left alone
//! by `free` (counted, and reported at exit).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod cache;
mod config;
mod meta;

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use cxlalloc::internal::LARGE_MAX;
use cxlalloc::{AllocError, Heap, ReallocError, ThreadHandle, MAX_ALIGN};

use crate::config::{Place, Settings};

// Every Rust allocation of this library (and of `cxlalloc` inside it) comes from `meta`, never
// from the exported `malloc`: the heap's bookkeeping cannot recurse into the heap.
#[global_allocator]
static META: meta::Meta = meta::Meta;

/// The process's heap, once the library's constructor has opened it.
struct Global {
    heap: Heap,
    /// `[start, end)`: the heap's reservation in this process; a pointer in it is the heap's.
    start: usize,
    end: usize,
    /// Start of the huge span (`usize::MAX`: none): blocks at or above it are huge blocks.
    huge_start: usize,
    settings: Settings,
    /// The process that opened the heap: only it removes a shared heap at exit
    /// (`CXLALLOC_UNLINK=1`), not the forked children that inherited it.
    opener: u32,
    /// The pthread key whose destructor releases a thread's slot at thread exit.
    key: libc::pthread_key_t,
}

impl Global {
    /// Whether this process inherited a shared heap across `fork` rather than opening it: its
    /// blocks are then shared with the parent (docs/design.md §17.1).
    fn inherited(&self) -> bool {
        self.settings.place != Place::Private && std::process::id() != self.opener
    }
}

/// Set once by [`init`] (Release; read with Acquire so the `Global` is seen whole), never freed.
static GLOBAL: AtomicPtr<Global> = AtomicPtr::new(ptr::null_mut());

/// `free` calls with a pointer that is neither the heap's nor the library's (left alone).
static FOREIGN_FREES: AtomicU64 = AtomicU64::new(0);
/// Calls on heap pointers the heap refused (double or interior frees, and the like).
static REFUSED: AtomicU64 = AtomicU64::new(0);
/// Heap frees that found no usable thread slot (the block stays allocated).
static LEAKED: AtomicU64 = AtomicU64::new(0);

/// What a thread uses to reach the heap.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Has not touched the heap yet: the next call attaches a slot.
    Fresh,
    /// Holds its own slot (`Local::handle`).
    Own,
    /// Shares the process's spare slot under a lock: its attach found every slot taken, or it
    /// is exiting and has released its own.
    Shared,
}

/// Per-thread state. No destructor, so the thread-local costs no registration (which would
/// allocate) and reads compile to plain TLS accesses.
struct Local {
    handle: Cell<*const ThreadHandle>,
    /// Inside the library on this thread: a `malloc` now comes from a libc function the library
    /// called, and is served by `meta` (the thread's handle is in use).
    busy: Cell<bool>,
    mode: Cell<Mode>,
}

thread_local! {
    static LOCAL: Local = const {
        Local { handle: Cell::new(ptr::null()), busy: Cell::new(false), mode: Cell::new(Mode::Fresh) }
    };
}

/// The spare slot for threads without their own (see [`Mode::Shared`]), under [`SPARE_LOCK`].
static SPARE: AtomicPtr<ThreadHandle> = AtomicPtr::new(ptr::null_mut());
static SPARE_LOCK: AtomicBool = AtomicBool::new(false);

fn spare_lock() {
    // Acquire: pairs with the Release in `spare_unlock` (the previous user's use of the slot).
    while SPARE_LOCK.swap(true, Ordering::Acquire) {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

fn spare_unlock() {
    // Release: this user's use of the spare slot happens before the next one's.
    SPARE_LOCK.store(false, Ordering::Release);
}

fn global() -> Option<&'static Global> {
    // SAFETY: GLOBAL is null or a leaked Box<Global> that is never freed.
    unsafe { GLOBAL.load(Ordering::Acquire).as_ref() }
}

fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Runs `op` with the heap and a thread handle, or returns `None` when this call must be served
/// elsewhere: the heap is not open, this thread is already inside the library, or it can get
/// no slot. A panic inside the library (a bug) is caught and also gives `None`.
#[inline]
fn with_heap<R>(op: impl FnOnce(&Global, &ThreadHandle) -> R) -> Option<R> {
    let g = global()?;
    LOCAL
        .try_with(|l| {
            if l.busy.get() {
                return None;
            }
            let h = l.handle.get();
            l.busy.set(true);
            let r = if h.is_null() {
                slow(g, l, op)
            } else {
                // SAFETY: a non-null handle is this thread's own, alive until its destructor
                // (which clears the pointer first).
                let h = unsafe { &*h };
                catch_unwind(AssertUnwindSafe(|| op(g, h))).ok()
            };
            l.busy.set(false);
            r
        })
        .ok()
        .flatten()
}

/// The first call of a thread (attach a slot) and calls from threads without their own slot
/// (the spare slot, under its lock).
#[cold]
#[inline(never)]
fn slow<R>(g: &Global, l: &Local, op: impl FnOnce(&Global, &ThreadHandle) -> R) -> Option<R> {
    if l.mode.get() == Mode::Fresh {
        match catch_unwind(AssertUnwindSafe(|| g.heap.attach())) {
            Ok(Ok(h)) => {
                let h = Box::into_raw(Box::new(h));
                // SAFETY: the key was created at init; the value is released by `thread_exit`.
                unsafe { libc::pthread_setspecific(g.key, h as *const c_void) };
                l.handle.set(h);
                l.mode.set(Mode::Own);
                // SAFETY: just created, owned by this thread.
                return catch_unwind(AssertUnwindSafe(|| op(g, unsafe { &*h }))).ok();
            }
            // Every slot taken (or a failure to set one up): share the spare one.
            _ => l.mode.set(Mode::Shared),
        }
    }
    spare_lock();
    let mut h = SPARE.load(Ordering::Relaxed);
    if h.is_null() {
        if let Ok(Ok(t)) = catch_unwind(AssertUnwindSafe(|| g.heap.attach())) {
            h = Box::into_raw(Box::new(t));
            SPARE.store(h, Ordering::Relaxed);
        }
    }
    // SAFETY: the spare handle is only used under SPARE_LOCK, which we hold.
    let r = if h.is_null() { None } else { catch_unwind(AssertUnwindSafe(|| op(g, unsafe { &*h }))).ok() };
    spare_unlock();
    r
}

/// The pthread key's destructor: releases the exiting thread's slot. Later calls on this thread
/// (other destructors) use the spare slot.
unsafe extern "C" fn thread_exit(h: *mut c_void) {
    let _ = LOCAL.try_with(|l| {
        if l.handle.get() != h as *const ThreadHandle {
            return;
        }
        l.handle.set(ptr::null());
        l.mode.set(Mode::Shared);
        l.busy.set(true);
        // SAFETY: the pointer was Box::into_raw'd by `slow` for this thread and is dropped once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(h as *mut ThreadHandle) })));
        l.busy.set(false);
    });
}

/// Normalises a request so that every block is aligned for any C object (16 bytes) when it is
/// bigger than 8 bytes: small classes are multiples of 8 bytes, and a class whose size is a
/// multiple of 16 has every block 16-aligned (docs/design.md §3).
#[inline]
fn request(size: usize) -> usize {
    if size <= 8 {
        size.max(1)
    } else {
        size.wrapping_add(15) & !15
    }
}

fn alloc_error(e: AllocError) -> *mut c_void {
    set_errno(match e {
        AllocError::BadAlignment(_) => libc::EINVAL,
        _ => libc::ENOMEM,
    });
    ptr::null_mut()
}

fn meta_alloc(size: usize, align: usize) -> *mut c_void {
    let p = meta::alloc(size, align);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

/// Allocates `size` bytes aligned to `align` (0: the default alignment).
#[inline]
fn allocate(size: usize, align: usize) -> *mut c_void {
    if size > LARGE_MAX && align <= 16 {
        if let Some(p) = cache::take(size) {
            return p.as_ptr().cast();
        }
    }
    allocate_uncached(size, align)
}

/// [`allocate`] without looking in the cache of huge blocks.
fn allocate_uncached(size: usize, align: usize) -> *mut c_void {
    allocate_from_heap(size, align, false)
}

/// [`allocate_uncached`]; with `zeroed`, a block the heap serves comes zeroed
/// (`alloc_zeroed`, which writes zeroes only into a huge block it reuses: a new one is zero
/// from the kernel, docs/design.md §7.6). Blocks from `meta` are not zeroed.
fn allocate_from_heap(size: usize, align: usize, zeroed: bool) -> *mut c_void {
    if size > isize::MAX as usize {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    }
    let r = with_heap(|_, h| match (align <= 16, zeroed) {
        (true, true) => h.alloc_zeroed(request(size)),
        (true, false) => h.alloc(request(size)),
        (false, _) => h.alloc_aligned(size.max(1), align),
    });
    match r {
        Some(Ok(p)) => p.as_ptr().cast(),
        // The heap has no huge heap (a reduced coherence model), or it is shared and this is a
        // forked child, whose huge calls it refuses: the block is the process's own memory
        // anyway, so `meta` serves it (docs/design.md §17.1).
        Some(Err(e)) if beyond_heap(&e) => meta_alloc(size, align.max(16)),
        Some(Err(e)) => alloc_error(e),
        None => {
            if GLOBAL.load(Ordering::Relaxed).is_null() {
                maybe_open(size);
                if global().is_some() {
                    return allocate_from_heap(size, align, zeroed);
                }
            }
            meta_alloc(size, align.max(16))
        }
    }
}

/// Whether the heap refused a request only because it cannot serve huge blocks in this
/// process: it has no huge heap (`CXLALLOC_COHERENCE=limited` or `none`, or `CXLALLOC_HUGE=0`),
/// or it is a shared heap and this process is a forked child of the one that opened it.
fn beyond_heap(e: &AllocError) -> bool {
    matches!(e, AllocError::Unsupported(_) | AllocError::ForeignProcess)
}

/// Whose pointer `p` is.
enum Owner {
    Heap,
    Meta,
    Foreign,
}

#[inline]
fn owner(p: *mut c_void) -> Owner {
    let a = p as usize;
    match global() {
        Some(g) if a >= g.start && a < g.end => Owner::Heap,
        _ if meta::owns(a) => Owner::Meta,
        _ => Owner::Foreign,
    }
}

/// Bytes usable at `p` (0 for a pointer that is not a live block of ours).
fn usable(p: *mut c_void) -> usize {
    match owner(p) {
        Owner::Heap => with_heap(|_, h| NonNull::new(p.cast()).map_or(Ok(0), |p| h.usable_size(p)))
            .and_then(Result::ok)
            .unwrap_or(0),
        // SAFETY: `owns` holds.
        Owner::Meta => unsafe { meta::usable(p.cast()) },
        Owner::Foreign => 0,
    }
}

/// `malloc(3)`.
///
/// # Safety
/// Callable from any thread, any time (it is the process's allocator).
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    allocate(size, 0)
}

/// `free(3)`: heap blocks go back to the heap, the library's own to it; any other pointer
/// (memory from before the library loaded, or not from an allocator at all) is left alone.
///
/// # Safety
/// As `free(3)`.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    let Some(nn) = NonNull::new(p.cast::<u8>()) else { return };
    match owner(p) {
        Owner::Heap => match with_heap(|g, h| {
            // A huge block may be kept for reuse instead (see `cache`); a slab block (below
            // the huge span) goes straight back.
            // Nor is a forked child's free of a shared heap's huge block cached: the block is
            // its parent's, which the child's later `malloc` must not be handed (the heap
            // refuses the child's free instead, §17.1).
            if (p as usize) < g.huge_start || g.inherited() {
                return h.free(nn);
            }
            match h.usable_size(nn) {
                Ok(n) if n > LARGE_MAX && cache::put(nn, n) => Ok(()),
                _ => h.free(nn),
            }
        }) {
            Some(Ok(())) => {}
            Some(Err(_)) => {
                REFUSED.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                LEAKED.fetch_add(1, Ordering::Relaxed);
            }
        },
        Owner::Meta => {
            // SAFETY: `owns` holds.
            if !unsafe { meta::free(nn.as_ptr()) } {
                REFUSED.fetch_add(1, Ordering::Relaxed);
            }
        }
        Owner::Foreign => {
            FOREIGN_FREES.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `cfree`, the old name of `free`.
///
/// # Safety
/// As `free(3)`.
#[no_mangle]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: forwarded.
    unsafe { free(p) }
}

/// `calloc(3)`: `n * size` zeroed bytes; `NULL` with `ENOMEM` when the product overflows.
///
/// # Safety
/// Callable from any thread, any time.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    let Some(bytes) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    // A huge block (above LARGE_MAX) from the heap comes zeroed from `alloc_zeroed`, which
    // skips the zeroes where the kernel gave new pages and writes them only into an object the
    // heap's own cache (named heaps, docs/design.md §7.6) hands out again: no memset here that
    // touches every page of a new block. A block from this library's cache, or from `meta`, is
    // zeroed like any other.
    let mut fresh = false;
    let p = if bytes > LARGE_MAX {
        match cache::take(bytes) {
            Some(p) => p.as_ptr().cast(),
            None => {
                let p = allocate_from_heap(bytes, 0, true);
                fresh = matches!(owner(p), Owner::Heap);
                p
            }
        }
    } else {
        allocate(bytes, 0)
    };
    if !p.is_null() && !fresh {
        // SAFETY: a fresh block of at least `bytes` bytes.
        unsafe { p.cast::<u8>().write_bytes(0, bytes) };
    }
    p
}

/// `realloc(3)`. `realloc(p, 0)` frees `p` and returns `NULL` (as glibc does); on failure the
/// old block is untouched.
///
/// # Safety
/// As `realloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    let Some(nn) = NonNull::new(p.cast::<u8>()) else { return allocate(size, 0) };
    if size == 0 {
        // SAFETY: forwarded.
        unsafe { free(p) };
        return ptr::null_mut();
    }
    if let Owner::Heap = owner(p) {
        if let Some(r) = with_heap(|_, h| h.realloc(nn, request(size))) {
            return match r {
                Ok(q) => q.as_ptr().cast(),
                // Growing past what the heap serves here: the block moves to `meta` (below).
                Err(ReallocError::Alloc(e)) if beyond_heap(&e) => move_block(p, size),
                Err(ReallocError::Alloc(e)) => alloc_error(e),
                Err(ReallocError::Free(_)) => {
                    REFUSED.fetch_add(1, Ordering::Relaxed);
                    set_errno(libc::EINVAL);
                    ptr::null_mut()
                }
            };
        }
    }
    // A block of the library's own (or the heap's, on a thread that cannot use the heap now):
    // move it.
    move_block(p, size)
}

/// `realloc` by moving: a new block of `size` bytes gets the old one's bytes, and the old one is
/// freed. `p` is a live block of ours, or not (then `ENOMEM`, its size being unknown).
fn move_block(p: *mut c_void, size: usize) -> *mut c_void {
    let old = usable(p);
    if old == 0 {
        // Not a block we know: its size is unknown, so it cannot be moved.
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    }
    let q = allocate(size, 0);
    if !q.is_null() {
        // SAFETY: both blocks are live, distinct and at least min(old, size) bytes.
        unsafe { ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), old.min(size)) };
        // SAFETY: forwarded.
        unsafe { free(p) };
    }
    q
}

/// `reallocarray(3)`: `realloc(p, n * size)`, `NULL` with `ENOMEM` when the product overflows.
///
/// # Safety
/// As `realloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded.
        Some(bytes) => unsafe { realloc(p, bytes) },
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}

/// Allocates with an alignment checked the way glibc checks it for `aligned_alloc` (a power of
/// two, at most [`MAX_ALIGN`]).
fn aligned(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    if align > MAX_ALIGN {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    }
    allocate(size, align)
}

/// `posix_memalign(3)`: `EINVAL` unless `align` is a power of two multiple of the pointer
/// size, `ENOMEM` when out of memory; `*out` is set only on success.
///
/// # Safety
/// `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    if !align.is_power_of_two() || align % std::mem::size_of::<usize>() != 0 {
        return libc::EINVAL;
    }
    let saved = errno();
    let p = aligned(align, size);
    if p.is_null() {
        let e = errno();
        set_errno(saved);
        return e;
    }
    // SAFETY: the caller passes a writable pointer.
    unsafe { *out = p };
    0
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// `aligned_alloc(3)`.
///
/// # Safety
/// Callable from any thread, any time.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    aligned(align, size)
}

/// `memalign(3)`: an alignment that is not a power of two is rounded up to one (as glibc does).
///
/// # Safety
/// Callable from any thread, any time.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    match align.checked_next_power_of_two() {
        Some(a) => aligned(a, size),
        None => {
            set_errno(libc::EINVAL);
            ptr::null_mut()
        }
    }
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// `valloc(3)`: page-aligned.
///
/// # Safety
/// Callable from any thread, any time.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(page(), size)
}

/// `pvalloc(3)`: page-aligned, the size rounded up to whole pages.
///
/// # Safety
/// Callable from any thread, any time.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    match size.max(1).checked_next_multiple_of(page()) {
        Some(bytes) => aligned(page(), bytes),
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}

/// `malloc_usable_size(3)`: the block's whole class (what the program may use), 0 for `NULL`
/// or a pointer that is not a live block of ours.
///
/// # Safety
/// As `malloc_usable_size(3)`.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        0
    } else {
        usable(p)
    }
}

// ---- initialisation, fork and exit ---------------------------------------------------------

/// Opens the heap the environment names. Runs as the library's constructor: libc is ready
/// (environment, TLS, pthreads), so nothing before it needs the heap; what was allocated
/// before it came from `meta`.
extern "C" fn init() {
    let _ = LOCAL.try_with(|l| l.busy.set(true));
    // From the start, not only once the heap opens: `meta`'s lock must not be inherited held
    // either. (Registering allocates; this thread is busy, so that comes from `meta`.)
    // SAFETY: the three handlers are plain functions that stay loaded with the library.
    if unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) } != 0 {
        eprintln!("cxlalloc: pthread_atfork failed; this process allocates without the heap");
        let _ = LOCAL.try_with(|l| l.busy.set(false));
        return;
    }
    let r = catch_unwind(|| config::read(&|k| std::env::var(k).ok()));
    match r {
        Ok(Ok(settings)) => {
            if settings.verbose {
                // Many programs close stderr before they exit (coreutils' `close_stdout`), and
                // the report comes after that: it goes to a duplicate taken now.
                // SAFETY: fcntl on stderr; a failure gives -1, and the report is then lost.
                REPORT_FD.store(unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 100) }, Ordering::Relaxed);
            }
            let eager = settings.threshold == 0;
            SETTINGS.store(Box::into_raw(Box::new(settings)), Ordering::Release);
            STATE.store(DEFERRED, Ordering::Release);
            if eager {
                open_now();
            }
        }
        Ok(Err(e)) => eprintln!("cxlalloc: {e}; this process allocates without the heap"),
        Err(_) => eprintln!("cxlalloc: reading the configuration failed; this process allocates without the heap"),
    }
    let _ = LOCAL.try_with(|l| l.busy.set(false));
}

/// The constructor has not run, or the configuration was refused: no heap, ever.
const NONE: u8 = 0;
/// Configured; the heap opens once the process has taken [`Settings::threshold`] bytes from
/// `meta`.
const DEFERRED: u8 = 1;
/// One thread is opening the heap.
const OPENING: u8 = 2;
/// Open ([`GLOBAL`] is set), or failed to open (it stays null).
const DONE: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(NONE);
/// The settings read by the constructor (a leaked box, set before `STATE` leaves `NONE`).
static SETTINGS: AtomicPtr<Settings> = AtomicPtr::new(ptr::null_mut());
/// Bytes `meta` served to the program (not to the library itself) before the heap opened.
static BOOTSTRAP_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Where the report at exit goes (`CXLALLOC_VERBOSE=1`): a duplicate of stderr, or -1.
static REPORT_FD: AtomicI32 = AtomicI32::new(-1);

/// Opens the heap if the process has used up its bootstrap allowance (called on the
/// allocation path while no heap is open; the thread is not busy).
#[cold]
fn maybe_open(size: usize) {
    let used = BOOTSTRAP_BYTES.fetch_add(size, Ordering::Relaxed) + size;
    if STATE.load(Ordering::Acquire) != DEFERRED {
        return;
    }
    // SAFETY: SETTINGS is set before STATE becomes DEFERRED and never freed.
    let threshold = unsafe { SETTINGS.load(Ordering::Acquire).as_ref() }.map_or(usize::MAX, |s| s.threshold);
    if used >= threshold {
        let _ = LOCAL.try_with(|l| {
            if !l.busy.get() {
                l.busy.set(true);
                open_now();
                l.busy.set(false);
            }
        });
    }
}

/// Opens the heap (one thread wins; the others keep allocating from `meta` meanwhile). The
/// caller has marked its thread busy, so what opening allocates comes from `meta`.
fn open_now() {
    // Acquire/Release: the winner's view of SETTINGS; its GLOBAL store is published by DONE.
    if STATE.compare_exchange(DEFERRED, OPENING, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    // SAFETY: set before STATE became DEFERRED, never freed.
    let Some(settings) = (unsafe { SETTINGS.load(Ordering::Acquire).as_ref() }) else { return };
    match catch_unwind(|| open(settings.clone())) {
        Ok(Ok(g)) => GLOBAL.store(Box::into_raw(Box::new(g)), Ordering::Release),
        Ok(Err(e)) => eprintln!("cxlalloc: {e}; this process allocates without the heap"),
        Err(_) => eprintln!("cxlalloc: opening the heap failed; this process allocates without the heap"),
    }
    STATE.store(DONE, Ordering::Release);
}

fn open(settings: Settings) -> Result<Global, String> {
    let heap = match &settings.place {
        Place::Private => Heap::anonymous(&settings.config),
        Place::Named(name) => Heap::open_or_create(name, &settings.config),
        Place::Dir(dir) => Heap::open_or_create_at(dir, &settings.config),
    }
    .map_err(|e| format!("cannot open the heap ({:?}): {e}", settings.place))?;
    let (start, len) = cxlalloc::internal::reserved_span(&heap);
    // The spare slot is leased now, while slots are free: a thread that later finds every slot
    // taken (or is exiting) still reaches the heap through it, so its frees are never lost.
    let spare = heap.attach().map_err(|e| format!("cannot attach the spare slot: {e}"))?;
    SPARE.store(Box::into_raw(Box::new(spare)), Ordering::Relaxed);
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: key is writable; thread_exit has the destructor signature.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } != 0 {
        return Err("pthread_key_create failed".into());
    }
    let huge_start = cxlalloc::internal::huge_start(&heap);
    Ok(Global { heap, start, end: start + len, huge_start, settings, opener: std::process::id(), key })
}

/// Before `fork`: hold both locks, so the child does not inherit one held by a thread that
/// does not exist there.
extern "C" fn fork_prepare() {
    spare_lock();
    cache::lock();
    meta::lock();
}

extern "C" fn fork_parent() {
    meta::unlock();
    cache::unlock();
    spare_unlock();
}

/// In the child: the forking thread is the only thread, and every handle it inherited names a
/// slot its parent leases. Forget them (never drop: the slots are the parent's) so that the
/// next call attaches a slot of the child's own.
extern "C" fn fork_child() {
    meta::unlock();
    // In a private heap the cached blocks are the child's own (its copy). In a shared heap
    // they are its parent's, which may reuse them: the child must not.
    if global().is_some_and(|g| g.settings.place != Place::Private) {
        cache::forget_locked();
    }
    cache::unlock();
    SPARE.store(ptr::null_mut(), Ordering::Relaxed);
    spare_unlock();
    let _ = LOCAL.try_with(|l| {
        l.handle.set(ptr::null());
        l.mode.set(Mode::Fresh);
        l.busy.set(false);
    });
    if let Some(g) = global() {
        // SAFETY: the key exists; a null value means no destructor runs for the old handle.
        unsafe { libc::pthread_setspecific(g.key, ptr::null()) };
    }
}

/// At exit: with `CXLALLOC_VERBOSE=1`, one line on stderr naming the heap, what it holds and
/// whether the checker finds it consistent; with `CXLALLOC_UNLINK=1`, the heap is removed.
extern "C" fn fini() {
    let Some(g) = global() else {
        // SAFETY: SETTINGS is null or a leaked box, never freed.
        if let Some(s) = unsafe { SETTINGS.load(Ordering::Acquire).as_ref() } {
            if s.verbose && STATE.load(Ordering::Acquire) == DEFERRED {
                let line = format!(
                    "cxlalloc: pid {} never opened its heap: it took {} KiB, below the threshold of {} KiB, from the bootstrap allocator\n",
                    std::process::id(),
                    BOOTSTRAP_BYTES.load(Ordering::Relaxed) >> 10,
                    s.threshold >> 10
                );
                write_all(REPORT_FD.load(Ordering::Relaxed), line.as_bytes());
            }
        }
        return;
    };
    let _ = LOCAL.try_with(|l| l.busy.set(true));
    let _ = catch_unwind(AssertUnwindSafe(|| report(g)));
    let _ = LOCAL.try_with(|l| l.busy.set(false));
}

fn report(g: &Global) {
    if g.settings.verbose {
        let r = g.heap.check();
        let huge = if r.huge.slots > 0 {
            format!(", {} huge blocks live ({} KiB)", r.huge.live, r.huge.live_bytes >> 10)
        } else {
            String::new()
        };
        let verdict = if r.is_clean() {
            "check clean".to_string()
        } else {
            format!(
                "check found {} problems: {:?} {:?}",
                r.problems.len() + r.huge_problems.len(),
                r.problems.first(),
                r.huge_problems.first()
            )
        };
        let line = format!(
            "cxlalloc: heap {} pid {}: {} slots leased, {} blocks live{}, {} foreign frees ignored, {} refused, {} leaked; {}\n",
            g.heap.location(),
            std::process::id(),
            r.leased_slots,
            r.live_blocks(),
            huge,
            FOREIGN_FREES.load(Ordering::Relaxed),
            REFUSED.load(Ordering::Relaxed),
            LEAKED.load(Ordering::Relaxed),
            verdict
        );
        write_all(REPORT_FD.load(Ordering::Relaxed), line.as_bytes());
    }
    if g.settings.unlink && !g.inherited() {
        let r = match &g.settings.place {
            Place::Named(name) => Heap::unlink(name),
            Place::Dir(dir) => Heap::unlink_at(dir),
            Place::Private => Ok(()),
        };
        if let Err(e) = r {
            eprintln!("cxlalloc: unlink at exit: {e}");
        }
    }
}

/// Writes `bytes` to `fd` (retrying short writes and `EINTR`; other errors drop the rest).
fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: bytes is a readable buffer of bytes.len() bytes.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;
