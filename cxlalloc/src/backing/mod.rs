//! Where a heap's regions live. One trait, one file per implementation.
//!
//! - [`files`]: one file per region in a heap directory — in `/dev/shm` by default (the
//!   recommended backing on a machine without a CXL device), or any directory given by path
//!   (a DAX-mounted filesystem, for instance).
//! - [`device`]: one fixed-size mappable object (a DAX device, a PCI BAR's resource file, or a
//!   plain file of that size) holding every region at fixed offsets, and the huge range: the
//!   backing of a CXL pod, whose hosts share the device but no file system (docs/design.md §2.4).
//! - [`anon`]: private anonymous memory for single-process use (tests, miri).

pub(crate) mod anon;
pub(crate) mod device;
pub(crate) mod files;

use std::ffi::CStr;
use std::os::fd::{OwnedFd, RawFd};

use nix::errno::Errno;

use crate::layout::RegionId;

/// The name of a huge allocation's backing object: `huge-OFFSET-GENERATION` (both 16 hex
/// digits), NUL-terminated. The generation makes the name unique over the heap's life, so a
/// stale cleanup of a freed allocation can never remove a newer one at the same offset. Built
/// without allocating, so the signal handler can open objects by name.
#[derive(Clone, Copy)]
pub(crate) struct HugeName([u8; 40]);

const HUGE_PREFIX: &[u8; 5] = b"huge-";

impl HugeName {
    /// The name of the allocation at heap offset `offset` with generation `generation`.
    pub(crate) fn new(offset: u64, generation: u64) -> Self {
        let mut b = [0u8; 40];
        b[..5].copy_from_slice(HUGE_PREFIX);
        let hex = |out: &mut [u8], v: u64| {
            for (i, o) in out.iter_mut().enumerate() {
                *o = b"0123456789abcdef"[((v >> (60 - 4 * i)) & 0xf) as usize];
            }
        };
        hex(&mut b[5..21], offset);
        b[21] = b'-';
        hex(&mut b[22..38], generation);
        Self(b)
    }

    /// The name of huge block `b`'s backing object (named after its first allocation's
    /// generation, kept while the owner reuses the object).
    pub(crate) fn of_block(b: &crate::persist::huge::HugeBlock) -> Self {
        Self::new(b.offset, b.object)
    }

    /// The name as a C string.
    pub(crate) fn as_cstr(&self) -> &CStr {
        // The buffer always holds 38 ASCII characters followed by NULs.
        CStr::from_bytes_until_nul(&self.0).unwrap_or(c"huge-")
    }

    /// Decodes a directory entry name into `(offset, generation)`; `None` for anything else.
    pub(crate) fn parse(name: &str) -> Option<(u64, u64)> {
        let (offset, generation) = name.strip_prefix("huge-")?.split_once('-')?;
        if offset.len() != 16 || generation.len() != 16 {
            return None;
        }
        Some((u64::from_str_radix(offset, 16).ok()?, u64::from_str_radix(generation, 16).ok()?))
    }
}

impl std::fmt::Debug for HugeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_cstr())
    }
}

/// Storage for a heap's regions.
pub(crate) trait Backing: Send + Sync + std::fmt::Debug {
    /// The descriptor to map region `r` from, or `None` for memory the reservation already holds
    /// (anonymous backing: everything is mapped once at creation and nothing is lazy).
    fn fd(&self, r: RegionId) -> Option<RawFd>;

    /// Reserves backing store for `len` bytes at offset `off` of region `r`, so first touches
    /// cannot fail with `SIGBUS`. `ENOSPC` means the device is full.
    fn commit(&self, r: RegionId, off: usize, len: usize) -> Result<(), Errno>;

    /// Gives the backing store of `len` bytes at offset `off` of region `r` back to the system
    /// (their contents become zero); a later touch allocates afresh. Default: nothing (memory
    /// that cannot be given back keeps its pages).
    fn release(&self, _r: RegionId, _off: usize, _len: usize) -> Result<(), Errno> {
        Ok(())
    }

    /// Where the heap lives, for messages.
    fn location(&self) -> String;

    /// Creates the backing object of a huge allocation, `len` bytes (reserved up front when
    /// `commit`, so a full device is an error now rather than a `SIGBUS` later), and returns a
    /// descriptor to map it. `None` for anonymous memory, which the caller maps privately.
    /// Either way the new block reads as zeroes (a new file, or new anonymous pages): a
    /// zeroed allocation relies on it and writes no zeroes of its own (docs/design.md §7.6).
    fn huge_create(&self, name: &HugeName, len: usize, commit: bool) -> Result<Option<OwnedFd>, Errno>;

    /// Removes a huge allocation's backing object; one already gone is not an error. Default:
    /// nothing (anonymous memory and devices have no objects).
    fn huge_remove(&self, _name: &HugeName) -> Result<(), Errno> {
        Ok(())
    }

    /// The directory under which huge objects are opened by name (with `openat`, from the
    /// signal handler); `None` (the default) when there are no named objects.
    fn huge_dir(&self) -> Option<RawFd> {
        None
    }

    /// The huge objects that exist, as `(offset, generation)`; none by default.
    fn huge_objects(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }

    /// What is wrong with the owner, group or mode of the backing object of huge allocation
    /// `name`, which every process that may open the heap must be able to map (its fault
    /// handler could not report a failure); `None` when nothing is, or there are no objects.
    fn huge_object_problem(&self, _name: &HugeName) -> Option<String> {
        None
    }

    /// The offset of region `r` inside the file [`Backing::fd`] names (non-zero for the HWcc
    /// regions of a no-HWcc heap, which share its mCAS window's target area or its device's
    /// memory).
    fn region_offset(&self, _r: RegionId) -> u64 {
        0
    }

    /// The mCAS window or device holding the HWcc regions of a no-HWcc heap.
    fn mcas_home(&self) -> Option<crate::coherence::McasHome> {
        None
    }

    /// A heap device (docs/design.md §2.4): its descriptor and the device offset of the huge
    /// span, from which every huge block is mapped at its place (there are no objects). `None`
    /// for the other backings.
    fn huge_device(&self) -> Option<(RawFd, u64)> {
        None
    }

    /// The granule in which the backing can be mapped, if larger than a page (a DAX device maps
    /// whole 2 MiB units): region mappings and huge blocks are rounded up to it.
    fn map_align(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_names_round_trip_and_differ_by_generation() {
        let n = HugeName::new(0x40_0000_0000, 7);
        let s = n.as_cstr().to_str().unwrap_or_default();
        assert_eq!(s, "huge-0000004000000000-0000000000000007");
        assert_eq!(HugeName::parse(s), Some((0x40_0000_0000, 7)));
        assert_ne!(HugeName::new(0x40_0000_0000, 8).as_cstr(), n.as_cstr());
        assert_eq!(HugeName::parse("data"), None);
    }
}
