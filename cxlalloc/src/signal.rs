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
//! Lifetime: a heap's [`LazyMap`] lives inside the heap's handle, which another thread may close
//! while a handler runs. Each registry slot counts the handlers inside it, and closing waits
//! for them ([`crate::protocol::registry`], model-checked with loom), so a handler never reads
//! a freed map or maps into a released reservation. The handler saves and restores `errno`.
//!
//! Async-signal-safety: the handler reads a fixed static array of registry slots, plain-data
//! [`LazyMap`]s, atomic words and huge descriptors, and makes `mmap`/`openat`/`close`/
//! `sigaction` system calls. It never allocates, locks, formats or panics, and works on threads
//! that never attached to a heap. It is installed with `SA_NODEFER` so a nested fault inside it
//! is handled too, and without `SA_ONSTACK`: it runs on the faulting thread's own stack, not on
//! an alternate signal stack. Serving a huge block can take a deep path (when every hazard set
//! is full, the handler drops stale entries and retries), and Rust's alternate stacks are a few
//! KiB: in a debug build that path overflowed one and killed a process that only read huge
//! blocks (tests/huge.rs, the read-only reader). The price: a thread that overflows its own
//! stack dies of SIGSEGV without Rust's "has overflowed its stack" message, as the kernel cannot
//! push a frame for any handler there. The huge path still maps a descriptor's small-heap chunk
//! before it reads the descriptor, so it never relies on a nested fault.

use std::sync::{Once, OnceLock};

use crate::mem::LazyMap;
use crate::protocol::registry::Slot;

/// Most heaps one process can have open at once.
pub(crate) const MAX_HEAPS: usize = 64;

/// The open heaps' fault-time views. A slot's pointer is valid while a handler holds the slot's
/// guard: unregistering waits for such handlers ([`crate::protocol::registry`]).
static REGISTRY: [Slot<LazyMap>; MAX_HEAPS] = [const { Slot::new() }; MAX_HEAPS];

static INSTALL: Once = Once::new();
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// A heap's entry in the process-wide registry; unregisters on drop, waiting until no fault
/// handler on any thread still uses the heap's [`LazyMap`].
#[derive(Debug)]
pub(crate) struct Registration {
    index: usize,
}

/// Registers `map` (which must outlive the returned registration) and installs the handler.
/// Returns `None` when [`MAX_HEAPS`] heaps are registered.
pub(crate) fn register(map: &LazyMap) -> Option<Registration> {
    install();
    let ptr = map as *const LazyMap as *mut LazyMap;
    REGISTRY.iter().position(|slot| slot.register(ptr)).map(|index| Registration { index })
}

impl Drop for Registration {
    /// After this returns no handler reads the `LazyMap` or maps anything for the heap, so the
    /// owner may release the reservation and free the map. Waits at most for the handlers
    /// running now (each does a bounded amount of work: a few system calls and list walks of
    /// at most [`crate::huge::view::MAX_WALK`] steps).
    fn drop(&mut self) {
        REGISTRY[self.index].unregister();
    }
}

/// `pthread_atfork` child handler: the forking thread is the child's only thread and is not
/// inside the fault handler, so a count another thread of the parent held is stale.
extern "C" fn reset_after_fork() {
    for slot in &REGISTRY {
        slot.reset_in_child();
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
        // No SA_ONSTACK: see the module docs (a small alternate stack cannot hold the huge path).
        action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_RESTART;
        // SAFETY: sa_mask is a valid sigset_t inside `action`.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: a child handler with no preconditions; registering it cannot break anything
        // (on failure a fork during a fault could leave a count that makes the child's
        // unregistration wait, nothing worse).
        unsafe { libc::pthread_atfork(None, None, Some(reset_after_fork)) };
        // SAFETY: installing a handler with a valid action struct.
        unsafe { libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut()) };
    });
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // The handler's system calls (mmap, openat, close) may set errno; the interrupted code must
    // find it as it left it.
    let errno = nix::errno::Errno::last_raw();
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let handled = REGISTRY.iter().filter(|slot| slot.looks_registered()).any(|slot| {
        let guard = slot.enter();
        // SAFETY: the guard keeps the registration's LazyMap alive: its dropper waits for the
        // guard before the heap is unmapped and the map freed (protocol::registry).
        guard.get().is_some_and(|map| unsafe { (*map).handle_fault(addr) })
    });
    if !handled {
        // Every guard is dropped by now: a previous handler that never returns (longjmp) or
        // kills the process leaves no count behind.
        // SAFETY: forwarding the kernel's own arguments.
        unsafe { chain(sig, info, ctx) };
    }
    nix::errno::Errno::set_raw(errno);
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
