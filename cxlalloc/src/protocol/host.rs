//! The host table's entry protocol (docs/design.md §8.6): claiming an entry for a domain,
//! declaring a domain dead, and freeing a dead entry, each one CAS on the entry's HWcc word
//! (a [`HostWord`]), plus the heartbeat store. `crate::host` wraps these for the allocator; the
//! loom models in `tests/loom.rs` run them as they are.
//!
//! An entry word moves only along
//!
//! ```text
//!   0 (free) ──claim──▶ live(D) ──declare──▶ dead(D) ──release──▶ 0 (free)
//! ```
//!
//! and every move is a CAS from the exact word it leaves, so an operator acting on a stale read
//! (a second survivor declaring the same host, late) fails instead of overwriting an entry that
//! was freed and claimed by another domain meanwhile. The heartbeat word is advice: a plain
//! store that no decision reads.
//!
//! The table is given as `n` entries and a function from an index to the entry's word (an
//! [`HwWord`]: a CPU atomic, or a word the mCAS unit serves in the no-HWcc model).

use crate::protocol::HwWord;
use crate::sync::Ordering;
pub use crate::word::HostWord;

/// The lowest live entry of domain fingerprint `fp` among `n` entries, if any.
pub fn find_live<W: HwWord>(n: usize, word: impl Fn(usize) -> W, fp: u64) -> Option<usize> {
    let live = HostWord { domain: fp, dead: false }.pack();
    // Acquire: pairs with the claim's AcqRel, so the claimant's advice words are seen after.
    (0..n).find(|&i| word(i).load(Ordering::Acquire) == live)
}

/// Claims the first free entry for the live domain fingerprint `fp`, or joins a live entry of
/// `fp` that a sibling process (same domain) claimed while this one scanned. `Some((index,
/// claimed))`, `claimed` true when this call took a free entry (and should write its advice
/// words); `None` when every entry is taken.
pub fn claim<W: HwWord>(n: usize, word: impl Fn(usize) -> W, fp: u64) -> Option<(usize, bool)> {
    let me = HostWord { domain: fp, dead: false }.pack();
    for i in 0..n {
        // AcqRel on success: the claim is ordered before the advice stores that follow it, and
        // after the release that freed the entry (pairs with `release`); Acquire on failure: a
        // sibling's entry is read whole.
        match word(i).compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some((i, true)),
            // Only a *live* entry of the very same domain is joined: never a dead one (its
            // holders are being adopted), never another domain's.
            Err(seen) if seen == me => return Some((i, false)),
            Err(_) => continue,
        }
    }
    None
}

/// The live entry of domain fingerprint `fp`, claimed if it has none ([`find_live`], then
/// [`claim`]): as for [`claim`].
pub fn register<W: HwWord>(n: usize, word: impl Fn(usize) -> W + Copy, fp: u64) -> Option<(usize, bool)> {
    find_live(n, word, fp).map(|i| (i, false)).or_else(|| claim(n, word, fp))
}

/// Declares domain fingerprint `fp` dead in every entry that holds it: each live entry of it
/// turns dead with one CAS. Returns the indices of the entries of `fp` that are dead afterwards
/// (turned by this call or already dead), ascending.
pub fn declare_dead<W: HwWord>(n: usize, word: impl Fn(usize) -> W, fp: u64) -> Vec<usize> {
    let live = HostWord { domain: fp, dead: false }.pack();
    let dead = HostWord { domain: fp, dead: true }.pack();
    (0..n)
        .filter(|&i| {
            // AcqRel: the verdict is published before any adoption that acts on it; pairs with
            // the Acquire load of every later judgement. A CAS, not a load and a store: the
            // entry may have been declared, freed and claimed by another domain since any
            // earlier read of it.
            let r = word(i).compare_exchange(live, dead, Ordering::AcqRel, Ordering::Acquire);
            r.is_ok() || r == Err(dead)
        })
        .collect()
}

/// Frees an entry declared dead, once nothing names it any more (the caller checked): false if
/// it is not (any longer) a dead entry.
pub fn release<W: HwWord>(word: &W) -> bool {
    // Acquire: read the verdict whole (pairs with the declaring CAS).
    let Some(w) = HostWord::unpack(word.load(Ordering::Acquire)).filter(|w| w.dead) else { return false };
    // Release: the recovery that emptied the host happens before a new claimant's claim.
    word.compare_exchange(w.pack(), 0, Ordering::Release, Ordering::Relaxed).is_ok()
}

/// The entry's state: `None` for a free entry.
pub fn judge<W: HwWord>(word: &W) -> Option<HostWord> {
    // Acquire: pairs with the declaring CAS, so a judgement "dead" is seen with everything the
    // declarer did before it.
    HostWord::unpack(word.load(Ordering::Acquire))
}

/// Records a sign of life at wall-clock second `now` in an entry's heartbeat word.
pub fn beat<W: HwWord>(heartbeat: &W, now: u64) {
    // Relaxed: advice only (`cxlalloc list` and `check` print it); no decision reads it.
    heartbeat.store(now, Ordering::Relaxed);
}
