//! The one concurrency facade: every atomic, fence and cell the allocator uses comes from here.
//!
//! Under `--cfg loom` the lock-free protocols in [`crate::protocol`] are compiled against loom's
//! model-checked primitives instead of `std`'s. The test `tests/facade.rs` fails if any other
//! source file names `std`'s atomics or cells directly, so no protocol can slip past the model
//! checker. (clippy's `disallowed-types` cannot express this: it also flags the re-exports.)

// The three the crate's tools and loom models use too (through `internal::sync`).
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicPtr, AtomicUsize};
#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicUsize};
#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One iteration of a rare wait loop: yields the CPU to the awaited thread (which may be
/// preempted on this very core), or under loom lets the model schedule it (a loom thread that
/// spins without yielding never does).
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}
