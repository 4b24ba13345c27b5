//! The operations the protocols perform on an HWcc word, behind one trait so that the same
//! protocol code runs on a CPU atomic (full and limited coherence, and the loom models) and on a
//! word in an mCAS window, where the device's near-memory unit executes every CAS
//! ([`crate::coherence::hwcc`], no-HWcc model).

use crate::sync::{AtomicU64, Ordering};

/// An HWcc word: loads, CASes and stores with the orderings of [`AtomicU64`]'s methods.
pub trait HwWord {
    /// Reads the word.
    fn load(&self, order: Ordering) -> u64;

    /// One CAS attempt that may fail spuriously: `Ok(previous)` when it swapped, `Err(seen)`
    /// otherwise (a conflict of the mCAS unit reports `seen == current`).
    fn compare_exchange_weak(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64>;

    /// A CAS that fails only on a mismatch.
    fn compare_exchange(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64> {
        loop {
            match self.compare_exchange_weak(current, new, success, failure) {
                Err(seen) if seen == current => continue,
                other => return other,
            }
        }
    }

    /// Overwrites the word (callers guarantee no concurrent writer).
    fn store(&self, value: u64, order: Ordering);
}

impl HwWord for AtomicU64 {
    #[inline]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }

    #[inline]
    fn compare_exchange_weak(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64> {
        AtomicU64::compare_exchange_weak(self, current, new, success, failure)
    }

    #[inline]
    fn compare_exchange(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64> {
        AtomicU64::compare_exchange(self, current, new, success, failure)
    }

    #[inline]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
}

impl<T: HwWord + ?Sized> HwWord for &T {
    #[inline]
    fn load(&self, order: Ordering) -> u64 {
        (**self).load(order)
    }

    #[inline]
    fn compare_exchange_weak(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64> {
        (**self).compare_exchange_weak(current, new, success, failure)
    }

    #[inline]
    fn compare_exchange(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64> {
        (**self).compare_exchange(current, new, success, failure)
    }

    #[inline]
    fn store(&self, value: u64, order: Ordering) {
        (**self).store(value, order)
    }
}
