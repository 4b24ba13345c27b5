//! A host number's claim in an mCAS window (docs/design.md §9.2): one word naming the kernel
//! that holds the number (its fingerprint, never 0), or 0 when free. `crate::mcas::window`
//! keeps the words; the loom models in `tests/loom.rs` run these functions as they are.
//!
//! ```text
//!   0 (free) ──claim by K──▶ K ──release naming K──▶ 0 (free)
//! ```
//!
//! A kernel's processes share its claim: a claim finding its own kernel's word is joined.
//! Every move is a CAS from the exact word it leaves, so that an operator freeing a dead
//! kernel's claim from a stale read (a second operator, late, after the number was freed and
//! claimed by another kernel) fails instead of freeing the new holder's claim, which would let
//! a third kernel share the number with it.

use crate::protocol::HwWord;
use crate::sync::Ordering;

/// Claims the number whose word is `word` for kernel `kernel` (never 0): `Ok(true)` when this
/// call took it free, `Ok(false)` when `kernel` held it already; `Err(holder)` when another
/// kernel holds it.
pub fn claim<W: HwWord>(word: &W, kernel: u64) -> Result<bool, u64> {
    // AcqRel on success: the claim is ordered after the release that freed it (pairs with
    // `release`) and before the claimant's advice stores; Acquire on failure: the holder's
    // advice is read after its claim.
    match word.compare_exchange(0, kernel, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Ok(true),
        Err(seen) if seen == kernel => Ok(false),
        Err(seen) => Err(seen),
    }
}

/// Frees the number whose word is `word` if kernel `kernel` holds it: false if another kernel
/// does, or nobody (freed already).
pub fn release<W: HwWord>(word: &W, kernel: u64) -> bool {
    // Release: what the holder did under the claim happens before the next claim (pairs with
    // its AcqRel). A CAS from the named kernel: see the module docs.
    kernel != 0 && word.compare_exchange(kernel, 0, Ordering::Release, Ordering::Relaxed).is_ok()
}
