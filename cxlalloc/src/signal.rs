//! The SIGSEGV handler that gives pointer consistency in time (PC-T) for growth and huge blocks.
//!
//! When another process extends a heap, this process learns of it only by touching the new
//! memory: the access faults in the `PROT_NONE` reservation, the handler finds the heap whose
//! lazily mapped array holds the address, checks the slab against the current length, maps the
//! covering chunk and returns so the instruction re-executes. A fault in the huge span maps the
//! live huge block there after publishing a hazard for it ([`crate::huge::view::HugeView`]).
//! Any other fault goes to the handler that was installed before ours (or the default action),
//! so real bugs still crash.
//!
//! Async-signal-safety: the handler reads a fixed static array of atomic pointers, plain-data
//! [`LazyMap`]s, atomic words and huge descriptors, and makes `mmap`/`openat`/`close`/
//! `sigaction` system calls. It never allocates, locks, formats or panics, and works on threads
//! that never attached to a heap. It is installed with `SA_NODEFER` so a nested fault inside it
//! is handled too, and `SA_ONSTACK` so it runs on the alternate stack where one exists (Rust's
//! stack-overflow detection). That stack may not hold two signal frames (each carries the CPU's
//! extended state): a nested fault there killed the process in testing. So the huge path never
//! relies on one: it maps a descriptor's small-heap chunk before it reads the descriptor.

use std::sync::{Once, OnceLock};

use crate::mem::LazyMap;
use crate::sync::{AtomicPtr, Ordering};

/// Most heaps one process can have open at once.
pub(crate) const MAX_HEAPS: usize = 64;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicPtr<LazyMap> = AtomicPtr::new(std::ptr::null_mut());
static REGISTRY: [AtomicPtr<LazyMap>; MAX_HEAPS] = [EMPTY; MAX_HEAPS];

static INSTALL: Once = Once::new();
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// A heap's entry in the process-wide registry; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    index: usize,
}

/// Registers `map` (which must outlive the returned registration) and installs the handler.
/// Returns `None` when [`MAX_HEAPS`] heaps are registered.
pub(crate) fn register(map: &LazyMap) -> Option<Registration> {
    install();
    let ptr = map as *const LazyMap as *mut LazyMap;
    for (index, slot) in REGISTRY.iter().enumerate() {
        // Release: publishes the LazyMap's contents to the handler's Acquire load.
        if slot.compare_exchange(std::ptr::null_mut(), ptr, Ordering::Release, Ordering::Relaxed).is_ok() {
            return Some(Registration { index });
        }
    }
    None
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Release: orders the unregistration before the owner unmaps the heap.
        REGISTRY[self.index].store(std::ptr::null_mut(), Ordering::Release);
    }
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sigaction with a null new action only reads the current one into `old`.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to a zeroed sigaction.
        if unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) } != 0 {
            return;
        }
        let _ = PREVIOUS.set(old);
        // SAFETY: a zeroed sigaction is a valid starting value; we fill every field we rely on.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_fault as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK | libc::SA_RESTART;
        // SAFETY: sa_mask is a valid sigset_t inside `action`.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: installing a handler with a valid action struct.
        unsafe { libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut()) };
    });
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    for slot in &REGISTRY {
        // Acquire: pairs with the Release in `register`.
        let map = slot.load(Ordering::Acquire);
        // SAFETY: a registered LazyMap lives in its HeapMem until the Registration is dropped,
        // which happens before the heap is unmapped.
        if !map.is_null() && unsafe { (*map).handle_fault(addr) } {
            return;
        }
    }
    // SAFETY: forwarding the kernel's own arguments.
    unsafe { chain(sig, info, ctx) };
}

/// Hands a fault that is not ours to the previous handler, or restores the default action so
/// that returning re-executes the access and the process dies as it would without us.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let previous = PREVIOUS.get().copied();
    match previous {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous action declared SA_SIGINFO, so its handler has this type.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO the handler takes just the signal number.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // SAFETY: a zeroed sigaction with SIG_DFL (0) is the default action.
            let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            dfl.sa_sigaction = libc::SIG_DFL;
            // SAFETY: valid action struct; sigaction is async-signal-safe.
            unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
        }
    }
}
