//! Where a heap's regions live. One trait, one file per implementation.
//!
//! - [`files`]: one file per region in a heap directory — in `/dev/shm` by default (the
//!   recommended backing on a machine without a CXL device), or any directory given by path
//!   (a DAX-mounted filesystem, for instance).
//! - [`anon`]: private anonymous memory for single-process use (tests, miri).

pub mod anon;
pub mod files;

use std::os::fd::RawFd;

use nix::errno::Errno;

use crate::layout::RegionId;

/// Storage for a heap's regions.
pub trait Backing: Send + Sync + std::fmt::Debug {
    /// The descriptor to map region `r` from, or `None` for memory the reservation already holds
    /// (anonymous backing: everything is mapped once at creation and nothing is lazy).
    fn fd(&self, r: RegionId) -> Option<RawFd>;

    /// Reserves backing store for `len` bytes at offset `off` of region `r`, so first touches
    /// cannot fail with `SIGBUS`. `ENOSPC` means the device is full.
    fn commit(&self, r: RegionId, off: usize, len: usize) -> Result<(), Errno>;

    /// Where the heap lives, for messages.
    fn location(&self) -> String;
}
