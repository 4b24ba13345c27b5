//! A single-writer cached word that other threads can read consistently: the owner's
//! current-slab cache (`Current` in `persist::record`), which remote freers consult to detect
//! double frees of blocks the owner holds.
//!
//! The writer changes `(id, bits)` as `bits := 0; id := new (Release); bits := new (Release)`.
//! A reader loads `id, bits, id` (Acquire) and trusts `bits` only if both `id` loads agree: bits
//! from a newer fill imply the newer id on the second load, and an id seen on the first load
//! implies no bits from an older fill. A torn read yields `None`, never bits of the wrong id.

use crate::sync::{AtomicU64, Ordering};

/// Writer only: replaces the cached word's identity and bits.
pub fn install(id: &AtomicU64, bits: &AtomicU64, new_id: u64, new_bits: u64) {
    bits.store(0, Ordering::Relaxed);
    // Release: the bits = 0 above is visible before the new id.
    id.store(new_id, Ordering::Release);
    // Release: the new id is visible before the new bits.
    bits.store(new_bits, Ordering::Release);
}

/// Any thread: the cached `(id, bits)` if read without tearing.
pub fn read(id: &AtomicU64, bits: &AtomicU64) -> Option<(u64, u64)> {
    // Acquire ×3: pairs with the Release stores in `install`.
    let first = id.load(Ordering::Acquire);
    let b = bits.load(Ordering::Acquire);
    let again = id.load(Ordering::Acquire);
    (first == again).then_some((first, b))
}
