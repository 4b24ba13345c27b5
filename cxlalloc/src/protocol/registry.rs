//! A registry slot that a signal handler reads while another thread may unregister and free
//! what it names (docs/design.md §6: the fault handler's registry of open heaps).
//!
//! The handler cannot lock, and the thing a slot names (a heap's fault-time view) is freed as
//! soon as the heap closes. So a slot pairs its pointer with a count of handlers inside it:
//!
//! - **Handler** ([`Slot::enter`]): increments `active`, fences (SeqCst), then loads the
//!   pointer; it may use the pointee until the returned [`Guard`] drops, which decrements
//!   `active` (Release: its reads of the pointee happen before the dropper's Acquire load).
//! - **Dropper** ([`Slot::unregister`]): stores null, fences (SeqCst), then waits until it
//!   reads `active` zero; only then may the pointee be freed.
//!
//! This is the store-buffering pattern with a fence on each side: in the fences' total order
//! either the handler's fence comes first (the dropper then reads `active` ≥ 1 and waits for
//! the guard to drop) or the dropper's does (the handler then loads null and never touches the
//! pointee). Never both "not seen". Model-checked in `tests/loom.rs`, which also shows that a
//! dropper that does not wait, or a handler without its fence, lets a handler read freed
//! memory.
//!
//! Async-signal-safety and nesting: the handler side is two RMWs, a fence and a load; it never
//! waits. A fault taken inside a guard (handlers run with `SA_NODEFER`) enters the slot again
//! and just counts twice. Only the dropper waits, and only for guards that are running
//! (bounded work, see `crate::signal`); a thread that forked while another was inside a guard
//! leaves a count nobody will drop, so the child resets every count ([`Slot::reset_in_child`]).

use crate::sync::{fence, AtomicPtr, AtomicUsize, Ordering};

/// One registry entry: a pointer a signal handler may use, and the handlers using it.
#[derive(Debug)]
pub struct Slot<T> {
    /// The registered object, or null. Written by `register`/`unregister` (normal context).
    ptr: AtomicPtr<T>,
    /// Handlers between [`Slot::enter`] and the drop of its guard, in this process.
    active: AtomicUsize,
}

impl<T> Slot<T> {
    /// An empty slot (usable in a `static`).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Slot { ptr: AtomicPtr::new(std::ptr::null_mut()), active: AtomicUsize::new(0) }
    }

    /// An empty slot (loom's atomics cannot be built in a `const fn`).
    #[cfg(loom)]
    pub fn new() -> Self {
        Slot { ptr: AtomicPtr::new(std::ptr::null_mut()), active: AtomicUsize::new(0) }
    }

    /// Puts `ptr` (non-null) into the slot if it is empty; false if it is taken.
    pub fn register(&self, ptr: *mut T) -> bool {
        // Release: publishes the pointee's contents to the handler's Acquire load in `enter`.
        self.ptr.compare_exchange(std::ptr::null_mut(), ptr, Ordering::Release, Ordering::Relaxed).is_ok()
    }

    /// Whether the slot looks registered: a cheap peek that lets a handler skip empty slots
    /// without an RMW. Relaxed: a slot registered before the faulting access was made is seen
    /// (the access itself came after the registration, by happens-before); one registered
    /// concurrently cannot be the one the access needs.
    pub fn looks_registered(&self) -> bool {
        !self.ptr.load(Ordering::Relaxed).is_null()
    }

    /// Handler side: announces a handler in the slot and loads the pointer. While the guard
    /// lives, a non-null [`Guard::get`] stays valid (the dropper waits). Async-signal-safe.
    pub fn enter(&self) -> Guard<'_, T> {
        // Relaxed: ordered before the pointer load by the fence below.
        self.active.fetch_add(1, Ordering::Relaxed);
        // SeqCst: pairs with the fence in `clear` (store-buffering; see the module doc).
        fence(Ordering::SeqCst);
        // Acquire: pairs with the Release in `register`, so the pointee's contents are seen.
        let ptr = self.ptr.load(Ordering::Acquire);
        Guard { slot: self, ptr }
    }

    /// Dropper side: empties the slot and waits until no handler can still be using what it
    /// named. After this returns the caller may free the pointee. Must not be called from a
    /// signal handler (it waits for handlers).
    pub fn unregister(&self) {
        self.clear();
        self.wait_idle();
    }

    /// The first half of [`Slot::unregister`]: empties the slot and fences. Freeing the
    /// pointee after only this is the bug the loom model's negative control shows.
    pub fn clear(&self) {
        // Relaxed: ordered before the read of `active` by the fence below.
        self.ptr.store(std::ptr::null_mut(), Ordering::Relaxed);
        // SeqCst: pairs with the fence in `enter`.
        fence(Ordering::SeqCst);
    }

    /// The second half of [`Slot::unregister`]: waits until no handler is inside the slot.
    pub fn wait_idle(&self) {
        // Acquire: pairs with the Release decrement in `Guard::drop`, so every read a handler
        // made of the pointee happens before the caller frees it.
        while self.active.load(Ordering::Acquire) != 0 {
            crate::sync::spin_wait();
        }
    }

    /// In a child just forked: no other thread exists, so no handler is running; counts left
    /// by threads of the parent that were inside a guard at the fork are dropped.
    /// Async-signal-safe (a `pthread_atfork` child handler).
    pub fn reset_in_child(&self) {
        // Relaxed: only this thread exists.
        self.active.store(0, Ordering::Relaxed);
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// A handler's hold on a [`Slot`]: the pointer it loaded stays valid until this drops.
#[derive(Debug)]
pub struct Guard<'a, T> {
    slot: &'a Slot<T>,
    ptr: *mut T,
}

impl<T> Guard<'_, T> {
    /// The registered pointer, or `None` if the slot was empty (or being unregistered) when
    /// the handler entered.
    pub fn get(&self) -> Option<*mut T> {
        (!self.ptr.is_null()).then_some(self.ptr)
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // Release: the handler's reads of the pointee happen before the dropper's Acquire
        // load of `active` that sees this decrement.
        self.slot.active.fetch_sub(1, Ordering::Release);
    }
}
