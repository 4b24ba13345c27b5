//! Process-local allocators called through `GlobalAlloc` directly (none is installed as the
//! program's global allocator): mimalloc, jemalloc and the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;

use mimalloc::MiMalloc;
use tikv_jemallocator::Jemalloc;

use super::{Allocator, ThreadAlloc};
use crate::Error;

/// Alignment requested: the natural alignment of an 8-byte object, the same a cxlalloc block of
/// the smallest class gets.
const ALIGN: usize = 8;

/// A process-local `GlobalAlloc` (mimalloc, jemalloc or the system allocator), called directly
/// through the trait — it is not installed as the program's global allocator.
#[derive(Debug)]
pub struct Global<A: 'static> {
    alloc: &'static A,
    label: &'static str,
}

/// mimalloc through its `GlobalAlloc` implementation.
pub static MIMALLOC: MiMalloc = MiMalloc;

impl Global<MiMalloc> {
    /// mimalloc, labelled `mimalloc`.
    pub fn mimalloc() -> Self {
        Self { alloc: &MIMALLOC, label: "mimalloc" }
    }
}

/// jemalloc through its `GlobalAlloc` implementation (tikv-jemallocator, which builds jemalloc
/// with prefixed symbols: it runs beside glibc malloc instead of replacing it).
pub static JEMALLOC: Jemalloc = Jemalloc;

impl Global<Jemalloc> {
    /// jemalloc, labelled `jemalloc`.
    pub fn jemalloc() -> Self {
        Self { alloc: &JEMALLOC, label: "jemalloc" }
    }
}

impl Global<System> {
    /// The platform allocator (glibc malloc), labelled `system`.
    pub fn system() -> Self {
        Self { alloc: &System, label: "system" }
    }
}

/// A thread's handle on a [`Global`] allocator: the allocator itself.
#[derive(Debug)]
pub struct GlobalThread<A: 'static>(&'static A);

impl<A: GlobalAlloc + Sync + 'static> Allocator for Global<A> {
    type Thread = GlobalThread<A>;

    fn name(&self) -> &str {
        self.label
    }

    fn thread(&self) -> Result<GlobalThread<A>, Error> {
        Ok(GlobalThread(self.alloc))
    }
}

fn layout(size: usize) -> Result<Layout, Error> {
    Ok(Layout::from_size_align(size, ALIGN.min(size.next_power_of_two()))?)
}

impl<A: GlobalAlloc + 'static> ThreadAlloc for GlobalThread<A> {
    #[inline]
    fn alloc(&mut self, size: usize) -> Result<NonNull<u8>, Error> {
        if size == 0 {
            return Err("zero-size allocation".into());
        }
        let layout = layout(size)?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let p = unsafe { self.0.alloc(layout) };
        NonNull::new(p).ok_or_else(|| format!("out of memory allocating {size} bytes").into())
    }

    #[inline]
    unsafe fn free(&mut self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
        let layout = layout(size)?;
        // SAFETY: by this function's contract `ptr` came from `alloc` of this allocator with the
        // same size, hence the same layout, and is not freed yet.
        unsafe { self.0.dealloc(ptr.as_ptr(), layout) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<A: Allocator>(a: &A) {
        let mut t = a.thread().unwrap();
        for size in [1, 8, 24, 1000, 65536, 512 << 10] {
            let p = t.alloc(size).unwrap();
            // SAFETY: the block is `size` bytes and ours.
            unsafe { p.as_ptr().write_bytes(0x11, size) };
            // SAFETY: allocated just above with the same size.
            unsafe { t.free(p, size).unwrap() };
        }
    }

    #[test]
    fn mimalloc_jemalloc_and_system_allocate_and_free_each_benchmark_size() {
        round_trip(&Global::mimalloc());
        round_trip(&Global::jemalloc());
        round_trip(&Global::system());
    }

    #[test]
    fn zero_size_is_an_error_not_undefined_behaviour() {
        assert!(Global::system().thread().unwrap().alloc(0).is_err());
    }
}
