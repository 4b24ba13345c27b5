//! The words of the shared region (HWcc): per-bracket globals, thread-slot leases, roots.

use crate::sync::AtomicU64;

/// Number of application roots in the shared region.
pub(crate) const ROOTS: usize = 64;

/// Per-bracket HWcc global words.
///
/// Region: shared (HWcc). Both words are written by any thread of any process with CAS only and
/// carry a [`crate::word::Tagged`] value. Each sits on its own cache line: the length changes
/// rarely, the global head often, and neither should slow the other.
#[repr(C, align(64))]
pub(crate) struct BracketGlobals {
    /// Heap length in slabs (T1 bumps it). Monotone; a stale read only delays growth.
    pub length: AtomicU64,
    _pad0: [u8; 56],
    /// Global free-list head: slab index + 1, 0 = empty (T2 pops, T9 pushes).
    pub global_head: AtomicU64,
    _pad1: [u8; 56],
}

/// One thread-slot lease.
///
/// Region: shared (HWcc). `holder` is claimed with CAS 0 → [`crate::word::Holder`] by an
/// attaching thread and cleared by its holder (or an adopter). `tid` is written by the holder
/// after claiming and never cleared: non-zero means the slot's record has been used (and its
/// backing store reserved).
#[repr(C)]
pub(crate) struct SlotLease {
    /// Packed [`crate::word::Holder`]; 0 = free.
    pub holder: AtomicU64,
    /// Kernel thread id of the holding thread.
    pub tid: AtomicU64,
}

/// The fixed part of the shared region; the slot table follows it.
///
/// Region: shared (HWcc).
#[repr(C)]
pub(crate) struct SharedHeader {
    /// Global words of the small and large brackets.
    pub brackets: [BracketGlobals; 2],
    /// Application roots: offsets (or any 64-bit value) updated with CAS by any process.
    pub roots: [AtomicU64; ROOTS],
}

const _: () = assert!(std::mem::size_of::<BracketGlobals>() == 128);
const _: () = assert!(std::mem::size_of::<SharedHeader>() % 64 == 0);
