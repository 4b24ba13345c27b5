//! Thread-slot leases: one CAS on the slot's HWcc lease word claims it for a holder.

use crate::protocol::HwWord;
use crate::sync::Ordering;

/// Claims a free slot for `holder` (a non-zero packed [`crate::word::Holder`]).
pub fn try_claim(word: &(impl HwWord + ?Sized), holder: u64) -> bool {
    debug_assert_ne!(holder, 0);
    // Acquire: the new holder sees everything the previous holder wrote before releasing.
    word.compare_exchange(0, holder, Ordering::Acquire, Ordering::Relaxed).is_ok()
}

/// Releases a slot held by `holder`; false if it is not (any longer) held by `holder`.
pub fn release(word: &(impl HwWord + ?Sized), holder: u64) -> bool {
    // Release: publishes the holder's final writes to the slot's record to the next claimer.
    word.compare_exchange(holder, 0, Ordering::Release, Ordering::Relaxed).is_ok()
}

/// Takes over a slot from a dead holder (`dead`, packed) for `holder`: an adopter; false if
/// someone else changed the lease first.
pub fn take_over(word: &(impl HwWord + ?Sized), dead: u64, holder: u64) -> bool {
    debug_assert!(dead != 0 && holder != 0);
    // Acquire: the adopter sees everything the dead holder wrote before it died.
    word.compare_exchange(dead, holder, Ordering::Acquire, Ordering::Relaxed).is_ok()
}
