//! Heap growth (T1): one CAS on the tagged length word hands a batch of untouched slabs to the
//! winner. Nothing is mapped here; other processes map new slabs on first touch.

use crate::protocol::HwWord;
use crate::sync::Ordering;
use crate::word::{Tag, Tagged};

/// Extends the heap by up to `batch` slabs without passing `capacity`, returning the slab range
/// now owned by the caller, or `None` when the heap is full.
///
/// `before(from, to)` runs before each CAS attempt (log the range, reserve backing store); an
/// error from it aborts the bump with the length untouched. `help(seen)` runs before each CAS
/// attempt with the word about to be overwritten ([`crate::protocol::detectable::help`]).
pub fn bump<E>(
    word: &(impl HwWord + ?Sized),
    tag: Tag,
    batch: u32,
    capacity: u32,
    mut before: impl FnMut(u32, u32) -> Result<(), E>,
    help: impl Fn(u64),
) -> Result<Option<(u32, u32)>, E> {
    let mut cur = word.load(Ordering::Acquire);
    loop {
        let from = Tagged::unpack(cur).payload;
        if from >= capacity {
            return Ok(None);
        }
        let to = from.saturating_add(batch).min(capacity);
        before(from, to)?;
        help(cur);
        // AcqRel: Release orders the logged record before the new length; Acquire keeps our
        // view of the length monotone on retry.
        match word.compare_exchange_weak(cur, Tagged::new(to, tag).pack(), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(Some((from, to))),
            Err(seen) => cur = seen,
        }
    }
}
