//! The fault handler leaves `errno` as the interrupted code had it (docs/design.md §6), also
//! when the fault is not a heap's and goes on to the handler installed before ours, which here
//! makes a failing system call as a careless handler would.
//!
//! One test in its own binary: the application's handler must be installed before the first
//! heap is opened (which installs ours on top of it, and chains to it).
#![cfg(not(miri))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use cxlalloc::{Config, Heap};

/// The page the application's handler owns: `PROT_NONE` until its first touch.
static PAGE: AtomicUsize = AtomicUsize::new(0);
/// Faults the application's handler served.
static SERVED: AtomicUsize = AtomicUsize::new(0);

extern "C" fn application_handler(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    if addr & !4095 != page {
        // Not ours either: back to the default action, so the re-executed access kills.
        // SAFETY: restoring the default action is always valid.
        unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
        return;
    }
    // SAFETY: the page is our own anonymous mapping.
    unsafe { libc::mprotect(page as *mut libc::c_void, 4096, libc::PROT_READ | libc::PROT_WRITE) };
    // A system call that fails and sets errno (EBADF), as a handler that does not save errno.
    // SAFETY: close(-1) only fails.
    unsafe { libc::close(-1) };
    SERVED.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn a_fault_passed_on_to_the_previous_handler_leaves_errno_unchanged() {
    // SAFETY: a fresh anonymous PROT_NONE page.
    let page = unsafe {
        libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    assert_ne!(page, libc::MAP_FAILED);
    PAGE.store(page as usize, Ordering::Relaxed);
    // SAFETY: a zeroed sigaction filled with a valid SA_SIGINFO handler.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = application_handler as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut()), 0);
    }
    // Opening a shared heap installs the allocator's handler, which chains to the one above.
    let name = common::HeapName::new("fault-errno-chain");
    let heap = Heap::create(name.as_str(), &Config::with_capacity(16 << 20)).unwrap();
    nix::errno::Errno::set_raw(libc::EXDEV);
    // SAFETY: the handler makes the page readable before the read is re-executed.
    let v = unsafe { (page as *const u64).read_volatile() };
    let errno = nix::errno::Errno::last_raw();
    assert_eq!(SERVED.load(Ordering::Relaxed), 1, "the application's handler served the fault");
    assert_eq!(v, 0);
    assert_eq!(errno, libc::EXDEV, "errno after the fault: {}", nix::errno::Errno::from_raw(errno));
    drop(heap);
}
