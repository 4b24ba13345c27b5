//! Private anonymous backing: one process, no files.

use std::os::fd::{OwnedFd, RawFd};

use nix::errno::Errno;

use super::{Backing, HugeName};
use crate::layout::RegionId;

/// Private anonymous memory; the heap is gone when the process drops it.
#[derive(Debug, Default)]
pub(crate) struct AnonBacking;

impl Backing for AnonBacking {
    fn fd(&self, _: RegionId) -> Option<RawFd> {
        None
    }

    fn commit(&self, _: RegionId, _: usize, _: usize) -> Result<(), Errno> {
        Ok(())
    }

    fn location(&self) -> String {
        "anonymous".into()
    }

    fn huge_create(&self, _: &HugeName, _: usize, _: bool) -> Result<Option<OwnedFd>, Errno> {
        Ok(None)
    }
}
