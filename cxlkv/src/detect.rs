//! The detectable publish of a bucket write (docs/design.md §16.3), apart from the table so
//! that the loom models (`tests/loom.rs`) run this very code against loom's atomics.
//!
//! A write publishes its new array `new` with one CAS of the bucket word from the array it read,
//! `old`. If the writer dies around the CAS, its recovery must know whether the CAS happened:
//! if so the table owns `new` (and the writer owes the retirement of `old`), if not the writer
//! owns `new` (and must free it). The bucket alone cannot tell once a later write has replaced
//! `new`. So every writer, before its CAS, sets the `seen` word of the array it replaces: an
//! array is replaced only after it was in the bucket, so `seen` set means "was published", and
//! it is set before the array leaves the bucket, so recovery that reads the bucket first and
//! `seen` second never misses both.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `old` (whose `seen` word is `old_seen`, `None` for the empty bucket) by `new` in
/// `bucket`; returns whether the CAS won.
pub fn publish(bucket: &AtomicU64, old: u64, old_seen: Option<&AtomicU64>, new: u64) -> bool {
    if let Some(seen) = old_seen {
        // SeqCst, before the CAS: a recovery that finds `old` gone from the bucket (its SeqCst
        // load follows our CAS) then finds this mark.
        if seen.load(Ordering::Relaxed) == 0 {
            seen.store(1, Ordering::SeqCst);
        }
    }
    // SeqCst: Release publishes `new`'s contents; the total order carries the argument above.
    bucket.compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst).is_ok()
}

/// Whether the dead writer's CAS that published `new` (whose `seen` word is `new_seen`) in
/// `bucket` happened. `new` must still be allocated: the dead writer's epoch announcement holds
/// it until recovery ends.
pub fn was_published(bucket: &AtomicU64, new: u64, new_seen: &AtomicU64) -> bool {
    // The bucket first, then the mark: if a replacer took `new` out after the first load, it
    // had marked it before (see `publish`).
    bucket.load(Ordering::SeqCst) == new || new_seen.load(Ordering::SeqCst) != 0
}
