//! A small process-wide cache of freed huge blocks (docs/design.md §17.3).
//!
//! Every huge block of the heap is its own mapping: allocating one maps fresh pages and
//! freeing it unmaps them, two `mmap` calls that serialise on the kernel's per-process mapping
//! lock and fault every page in again on reuse. Programs that free and allocate blocks above
//! 512 KiB in a loop (buffers, hash-table resizes) would pay that every time; glibc avoids it by
//! raising its mmap threshold. So `free` keeps up to [`ENTRIES`] huge blocks (at most
//! [`MAX_BYTES`] together) here instead of freeing them, and `malloc` of a size they fit —
//! without wasting more than half the block — takes one back. To the heap a cached block is
//! still allocated (the exit report counts it live).

use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

/// Blocks the cache holds at most.
const ENTRIES: usize = 16;
/// Bytes the cache holds at most.
const MAX_BYTES: usize = 256 << 20;

struct Cache {
    /// `(address, usable bytes)`; 0 = empty entry.
    blocks: [(usize, usize); ENTRIES],
    bytes: usize,
}

struct Guarded(UnsafeCell<Cache>);

// SAFETY: the cache is only touched under LOCK (`with_cache`).
unsafe impl Sync for Guarded {}

static CACHE: Guarded = Guarded(UnsafeCell::new(Cache { blocks: [(0, 0); ENTRIES], bytes: 0 }));
static LOCK: AtomicBool = AtomicBool::new(false);

/// Takes the lock (also held across `fork` by the fork handlers).
pub(crate) fn lock() {
    // Acquire: pairs with the Release in `unlock`.
    while LOCK.swap(true, Ordering::Acquire) {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// Releases the lock.
pub(crate) fn unlock() {
    // Release: this holder's changes happen before the next holder's reads.
    LOCK.store(false, Ordering::Release);
}

fn with_cache<R>(f: impl FnOnce(&mut Cache) -> R) -> R {
    lock();
    // SAFETY: the lock is held: no other reference to the cache exists.
    let r = f(unsafe { &mut *CACHE.0.get() });
    unlock();
    r
}

/// A cached block of at least `size` usable bytes and at most twice that, if there is one.
pub(crate) fn take(size: usize) -> Option<NonNull<u8>> {
    with_cache(|c| {
        let best = (0..ENTRIES)
            .filter(|&i| {
                let (p, n) = c.blocks[i];
                p != 0 && n >= size && n / 2 <= size
            })
            .min_by_key(|&i| c.blocks[i].1)?;
        let (p, n) = std::mem::take(&mut c.blocks[best]);
        c.bytes -= n;
        NonNull::new(p as *mut u8)
    })
}

/// Keeps the huge block `p` of `usable` bytes; `false` when the cache is full (the caller
/// frees it).
pub(crate) fn put(p: NonNull<u8>, usable: usize) -> bool {
    with_cache(|c| {
        if c.bytes + usable > MAX_BYTES {
            return false;
        }
        let Some(free) = c.blocks.iter_mut().find(|e| e.0 == 0) else { return false };
        *free = (p.as_ptr() as usize, usable);
        c.bytes += usable;
        true
    })
}

/// Empties the cache without freeing its blocks: a forked child of a shared heap, whose cached
/// blocks are its parent's (the parent may take them back), calls it with the lock held.
pub(crate) fn forget_locked() {
    // SAFETY: the caller holds LOCK (the fork handlers took it before `fork`).
    let c = unsafe { &mut *CACHE.0.get() };
    c.blocks = [(0, 0); ENTRIES];
    c.bytes = 0;
}
