//! Detectable CAS (docs/design.md §8.2): after a crash, recovery asks "did my last CAS take effect?".
//!
//! Every CAS target is a [`Tagged`] word naming its last writer `{slot, version}`. A thread
//! starts each logged operation with a fresh version (and writes it to its redo record), and
//! stamps every CAS and every plain store of that operation with it. Before any thread
//! overwrites a word last written by *another* slot `j`, it records `j`'s version in `j`'s help
//! word (one HWcc word per slot, not the published T×T matrix). Recovery of slot `j`'s
//! operation `v` then answers: it took effect iff the word still carries `{j, v}`, or `j`'s help
//! word holds `v`.
//!
//! Why this is sound (the three defects of docs/design.md §14.1 are excluded by construction):
//! - **No self-help**: a thread overwriting its own word records nothing, so its help word can
//!   never move back to one of its older versions (the versions it compares against are only
//!   ever its latest).
//! - **Forward only**: a help word moves with a CAS, and only to a version *after* the one it
//!   holds ([`after`]: wrap-aware, within half the version space). A slow helper that read an
//!   old tag cannot overwrite a newer entry.
//! - **Wrap**: versions have 20 bits. The owner refreshes its help word every
//!   [`REFRESH_PERIOD`] operations to a version it has completed itself ([`refresh`]), so the
//!   entry never falls half the version space behind and [`after`] stays meaningful; an entry
//!   equal to the current version can therefore only come from a helper of the current one.
//! - **Stores carry fresh versions**: the one plain store to a tagged word (the remote counter
//!   reset) is stamped with a version of its own, never 0 and never a logged CAS's.
//! - **One success per version**: help entries are per slot, not per word, so every version
//!   stamps at most one successful write over all words (each logged operation draws its own).
//! - **Bounded staleness**: a helper stalled between reading a tag and recording it for half
//!   the version space (2^19 of the victim's operations) could still move the entry to a stale
//!   version; versions are bounded, so that is the limit of the scheme.
//!
//! The help word holds the version in its low 20 bits; 0 means "never helped" (versions start
//! at 1 and 0 is skipped on wrap by [`crate::word::Tag::next_version`]'s callers).

use crate::protocol::HwWord;
use crate::sync::Ordering;
use crate::word::{Tag, Tagged};

/// Bits of a version (as in [`Tag`]).
const VERSION_BITS: u32 = 20;
const VERSION_SPACE: u32 = 1 << VERSION_BITS;

/// The owner refreshes its help word whenever its version is a multiple of this. Versions
/// skip 0, so the longest run without a refresh is the one across the wrap, `2 · P − 1`
/// operations: an eighth of the space keeps that under a quarter, and an entry never falls
/// the half behind at which [`after`] would refuse to move it forward.
pub const REFRESH_PERIOD: u32 = VERSION_SPACE / 8;

/// Whether the owner refreshes its help word when starting operation `version` (to
/// `version − 1`, see [`refresh`]).
pub fn refreshes_at(version: u32) -> bool {
    version % REFRESH_PERIOD == 0
}

/// Whether version `a` comes after version `b` (wrap-aware, within half the version space).
pub fn after(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b) & (VERSION_SPACE - 1);
    d != 0 && d < VERSION_SPACE / 2
}

/// Records that the word `seen` (about to be overwritten by slot tag `me`) was written by its
/// writer's operation `seen.tag.version`, unless the writer is `me` or the initializer.
/// `help_of(writer slot)` returns that slot's help word (`None` for an out-of-range writer,
/// which a corrupt word could name; nothing is recorded then).
pub fn help<W: HwWord>(seen: u64, me: Tag, help_of: impl FnOnce(u32) -> Option<W>) {
    let tag = Tagged::unpack(seen).tag;
    if tag.writer == 0 || tag.writer == me.writer {
        return;
    }
    if let Some(word) = help_of(u32::from(tag.writer) - 1) {
        advance(&word, tag.version);
    }
}

/// Moves `word` forward to `version` unless it already holds it or a later one.
fn advance(word: &(impl HwWord + ?Sized), version: u32) {
    // Acquire on the load only orders our check; the CAS is AcqRel so that a recovering
    // reader that sees the entry also sees what the helped writer's word held.
    let mut cur = word.load(Ordering::Acquire);
    loop {
        let held = cur as u32;
        if held == version || (held != 0 && !after(version, held)) {
            return;
        }
        match word.compare_exchange_weak(cur, u64::from(version), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(seen) => cur = seen,
        }
    }
}

/// The owner's periodic refresh: moves its own help word forward to `completed`, a version
/// whose operation it has finished (so the entry claims nothing recovery could ask about).
pub fn refresh(word: &(impl HwWord + ?Sized), completed: u32) {
    advance(word, completed);
}

/// Recovery's question: did slot tag `me`'s CAS with version `me.version` on `word` take
/// effect? Yes iff the word still carries the tag, or a helper recorded the version.
pub fn took_effect(word: &(impl HwWord + ?Sized), help: &(impl HwWord + ?Sized), me: Tag) -> bool {
    // Acquire ×2: pair with the writers' AcqRel CAS and the helpers' AcqRel advance. The word
    // is read first: a helper records before it overwrites, so if the word no longer carries
    // our tag when we read it, the help entry was written before that read.
    Tagged::unpack(word.load(Ordering::Acquire)).tag == me || help.load(Ordering::Acquire) as u32 == me.version
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::AtomicU64;

    fn tagged(slot: u32, v: u32) -> u64 {
        Tagged::new(7, Tag::new(slot, v)).pack()
    }

    #[test]
    fn after_is_wrap_aware() {
        assert!(after(2, 1));
        assert!(!after(1, 2));
        assert!(!after(5, 5));
        assert!(after(0, VERSION_SPACE - 1));
        assert!(after(3, VERSION_SPACE - 2));
        assert!(!after(VERSION_SPACE - 2, 3));
    }

    #[test]
    fn overwriting_another_slots_word_records_its_version() {
        let h = AtomicU64::new(0);
        help(tagged(3, 41), Tag::new(5, 9), |s| (s == 3).then_some(&h));
        assert_eq!(h.load(Ordering::Relaxed), 41);
    }

    #[test]
    fn a_thread_never_helps_itself() {
        let h = AtomicU64::new(40);
        help(tagged(3, 2), Tag::new(3, 9), |_| Some(&h));
        assert_eq!(h.load(Ordering::Relaxed), 40);
    }

    #[test]
    fn help_entries_never_move_backwards() {
        let h = AtomicU64::new(0);
        help(tagged(1, 10), Tag::new(2, 1), |_| Some(&h));
        help(tagged(1, 8), Tag::new(3, 1), |_| Some(&h));
        assert_eq!(h.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn help_entries_move_forward_across_the_wrap() {
        let h = AtomicU64::new(u64::from(VERSION_SPACE - 1));
        help(tagged(1, 2), Tag::new(2, 1), |_| Some(&h));
        assert_eq!(h.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_initializers_words_are_never_helped() {
        let h = AtomicU64::new(0);
        help(0, Tag::new(2, 1), |_| Some(&h));
        assert_eq!(h.load(Ordering::Relaxed), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "three million iterations: minutes under miri, and no unsafe code")]
    fn help_entries_keep_up_across_many_wraps() {
        // An owner nobody helps for three whole version cycles: at every operation a helper
        // arriving with that version must still be able to record it.
        let h = AtomicU64::new(0);
        let mut v = 0;
        for _ in 0..3 * VERSION_SPACE {
            v = crate::word::Tag::next_version(v);
            if refreshes_at(v) {
                refresh(&h, v - 1);
            }
            let held = h.load(Ordering::Relaxed) as u32;
            assert!(held == 0 || after(v, held), "version {v} could not be recorded over {held}");
        }
    }

    #[test]
    fn took_effect_reads_the_tag_or_the_help_entry() {
        let me = Tag::new(4, 77);
        let word = AtomicU64::new(Tagged::new(1, me).pack());
        let help_word = AtomicU64::new(0);
        assert!(took_effect(&word, &help_word, me));
        word.store(tagged(9, 3), Ordering::Relaxed);
        assert!(!took_effect(&word, &help_word, me));
        help_word.store(77, Ordering::Relaxed);
        assert!(took_effect(&word, &help_word, me));
        assert!(!took_effect(&word, &help_word, Tag::new(4, 78)));
    }
}
