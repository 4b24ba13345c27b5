//! The one concurrency facade: every atomic, fence and cell the allocator uses comes from here.
//!
//! Under `--cfg loom` the lock-free protocols in [`crate::protocol`] are compiled against loom's
//! model-checked primitives instead of `std`'s; `clippy.toml` bans the `std` types elsewhere so
//! no protocol can slip past the model checker.
#![allow(clippy::disallowed_types)]

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence as compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    Ordering,
};

#[cfg(not(loom))]
pub use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
