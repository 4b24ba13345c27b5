//! Local slab descriptors: owner, class, list links and the free-block bitset.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The fixed first cache line of every local descriptor; the bitset follows it.
///
/// Region: local descriptors (SWcc). All fields but `owner` are written only by the slab's owner
/// (the thread slot named by `owner`), or by the thread that is taking ownership of an unowned
/// slab (bump, global pop, claim). `owner`, `class`, `generation` and the bitset are read by
/// remote freers, which tolerate stale values (paper §3.2.2: memory never names a non-owner as
/// owner, so a stale read can only send a free down the remote path).
///
/// Accounting identity, for a sized slab with `blocks` blocks, where `cached` counts the bits
/// the owner holds in its current-slab word for this slab:
/// `free == popcount(bitset)`, and
/// `free + cached + outstanding + remotely_freed == blocks`, where
/// `remote counter == blocks − remotely_freed`.
/// Hence `free + cached ≤ remote counter`, and the counter reaches 0 exactly when every block
/// has been freed remotely.
#[repr(C, align(64))]
pub(crate) struct DescriptorHead {
    /// Owning thread slot + 1; 0 = none (Global, Disowned, Untouched).
    pub owner: AtomicU32,
    /// Class id; 0 = unsized.
    pub class: AtomicU32,
    /// Slab index + 1 of the next slab on whichever list holds this one; 0 = end.
    pub next: AtomicU32,
    /// Slab index + 1 of the previous slab on a sized list (O(1) unlink); 0 = head.
    pub prev: AtomicU32,
    /// Number of set bits in the bitset.
    pub free: AtomicU32,
    /// Bumped each time the slab is given a class; salts the free-block marks.
    pub generation: AtomicU32,
    /// Bit `w` set ⇔ bitset word `w` is non-zero: the lowest free word in one `tzcnt`.
    pub summary: AtomicU64,
    /// Value a remote free writes into a block's first word, drawn when the slab is sized (kept
    /// by a sizing for the same class that `marked_class` allows): a
    /// block freed remotely is never reallocated within its slab's sizing, so finding the mark
    /// there means the block was already freed. In the limited and no-HWcc models every free
    /// block carries it (written at sizing and by local frees, cleared at allocation), since
    /// a remote freer cannot see the owner's bitset (docs/design.md §4.1).
    pub mark: AtomicU64,
    /// Block size of the class, copied here when the slab is sized so that a free finds the
    /// block geometry on the line it already reads (0 while unsized).
    pub size: AtomicU32,
    /// Blocks per slab of the class (0 while unsized).
    pub blocks: AtomicU32,
    /// `ceil(2^40 / size)`: in-slab offset → block index by one multiplication.
    pub recip: AtomicU64,
    /// Limited and no-HWcc models: the class whose every block start carries `mark` with no
    /// crash since the marks were written (docs/design.md §4.1, "Marks kept at re-sizing").
    /// While sized: set to the class by the sizing once every block is marked; the slab's free
    /// blocks keep their marks from then on. After T7 by a local free (every block back in the
    /// bitset, so every block marked by this owner's host): kept, so that sizing the slab again
    /// for that class keeps `mark` and writes no block. 0 = unknown: a fresh, popped, claimed
    /// or reclaimed slab, any slab of a recovered slot, and every slab leaving its owner.
    /// Owner only; read only by the owner (no other host ever relies on it).
    pub marked_class: AtomicU32,
    _pad: [u8; 4],
}

const _: () = assert!(std::mem::size_of::<DescriptorHead>() == 64);
const _: () = assert!(std::mem::offset_of!(DescriptorHead, marked_class) == 56);

/// A view of one descriptor: its head line and its bitset (bit set = block free).
#[derive(Clone, Copy)]
pub(crate) struct Descriptor<'a> {
    /// Metadata line.
    pub head: &'a DescriptorHead,
    /// Free-block bitset, one bit per block.
    pub bits: &'a [AtomicU64],
}

// Relaxed throughout: every write below is by the single owner, and cross-thread readers
// (remote freers, the checker) tolerate stale values; ownership hand-offs are ordered by the
// CAS on the HWcc word that transfers the slab (global head or remote counter).
impl Descriptor<'_> {
    /// The descriptor's bytes (head line and bitset), for cache-line write-back and
    /// invalidation ([`crate::coherence::Swcc`]).
    #[inline]
    pub(crate) fn bytes(&self) -> (*const u8, usize) {
        (self.head as *const DescriptorHead as *const u8, 64 + std::mem::size_of_val(self.bits))
    }

    /// The head line alone: what a remote freer reads.
    #[inline]
    pub(crate) fn head_line(&self) -> (*const u8, usize) {
        (self.head as *const DescriptorHead as *const u8, 64)
    }

    /// Whether block `i` is free in the owner's bitset.
    #[inline]
    pub(crate) fn is_free(&self, i: u32) -> bool {
        self.bits[(i / 64) as usize].load(Ordering::Relaxed) & (1 << (i % 64)) != 0
    }

    /// The lowest non-empty bitset word, if any.
    #[inline]
    pub(crate) fn lowest_word(&self) -> Option<u32> {
        let summary = self.head.summary.load(Ordering::Relaxed);
        // A corrupt summary naming a word past the bitset reads as "no free word", not a panic.
        Some(summary.trailing_zeros()).filter(|&w| (w as usize) < self.bits.len())
    }

    /// Empties bitset word `w`, returning its free bits (now the caller's).
    pub(crate) fn take_word(&self, w: u32) -> u64 {
        let bits = self.bits[w as usize].load(Ordering::Relaxed);
        self.bits[w as usize].store(0, Ordering::Relaxed);
        let s = self.head.summary.load(Ordering::Relaxed) & !(1 << w);
        self.head.summary.store(s, Ordering::Relaxed);
        let free = self.head.free.load(Ordering::Relaxed) - bits.count_ones();
        self.head.free.store(free, Ordering::Relaxed);
        bits
    }

    /// Marks allocated block `i` free; returns the new free count.
    #[inline]
    pub(crate) fn put(&self, i: u32) -> u32 {
        self.put_bits(i / 64, 1 << (i % 64))
    }

    /// Marks the allocated blocks `bits` of bitset word `w` free (a freed block, or a cached word
    /// given back); returns the new free count.
    #[inline(always)]
    pub(crate) fn put_bits(&self, w: u32, bits: u64) -> u32 {
        let word = &self.bits[w as usize];
        let old = word.load(Ordering::Relaxed);
        word.store(old | bits, Ordering::Relaxed);
        if old == 0 && bits != 0 {
            self.head.summary.store(self.head.summary.load(Ordering::Relaxed) | (1 << w), Ordering::Relaxed);
        }
        let free = self.head.free.load(Ordering::Relaxed) + bits.count_ones();
        self.head.free.store(free, Ordering::Relaxed);
        free
    }

    /// [`Descriptor::put_bits`] of one block (`bit` of bitset word `w`, which is `word`) whose
    /// caller already loaded that word (`old`) and the free count (`before`) for its checks: the
    /// quick local free (docs/design.md §4.5), which would otherwise load both again.
    #[inline(always)]
    pub(crate) fn put_loaded(&self, w: u32, word: &AtomicU64, old: u64, bit: u64, before: u32) {
        debug_assert_eq!(old, word.load(Ordering::Relaxed));
        debug_assert_eq!(before, self.head.free.load(Ordering::Relaxed));
        word.store(old | bit, Ordering::Relaxed);
        if old == 0 {
            self.head.summary.store(self.head.summary.load(Ordering::Relaxed) | (1 << w), Ordering::Relaxed);
        }
        self.head.free.store(before + 1, Ordering::Relaxed);
    }

    /// Marks blocks `0..blocks` free and the rest of the bitset allocated.
    pub(crate) fn fill(&self, blocks: u32) {
        let mut summary = 0u64;
        for (w, word) in self.bits.iter().enumerate() {
            let lo = w as u32 * 64;
            let v = match blocks.saturating_sub(lo) {
                0 => 0,
                n if n >= 64 => u64::MAX,
                n => (1u64 << n) - 1,
            };
            if v != 0 {
                summary |= 1 << w;
            }
            word.store(v, Ordering::Relaxed);
        }
        self.head.summary.store(summary, Ordering::Relaxed);
        self.head.free.store(blocks, Ordering::Relaxed);
    }

    /// Population count of the bitset (O(words); for checks, not the fast path).
    pub(crate) fn count_free(&self) -> u32 {
        self.bits.iter().map(|w| w.load(Ordering::Relaxed).count_ones()).sum()
    }

    /// The summary word the bitset implies (O(words)).
    fn summary_of_bits(&self) -> u64 {
        self.bits
            .iter()
            .enumerate()
            .filter(|(_, word)| word.load(Ordering::Relaxed) != 0)
            .fold(0, |s, (w, _)| s | 1 << w)
    }

    /// Whether the summary word agrees with the bitset (O(words)).
    pub(crate) fn summary_consistent(&self) -> bool {
        self.head.summary.load(Ordering::Relaxed) == self.summary_of_bits()
    }

    /// Recovery: recomputes the free count and the summary from the bitset, which a crash can
    /// leave ahead of them; true if either was wrong.
    pub(crate) fn recount(&self) -> bool {
        let (free, summary) = (self.count_free(), self.summary_of_bits());
        let wrong = self.head.free.load(Ordering::Relaxed) != free || !self.summary_consistent();
        self.head.free.store(free, Ordering::Relaxed);
        self.head.summary.store(summary, Ordering::Relaxed);
        wrong
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_desc<R>(words: usize, f: impl FnOnce(Descriptor<'_>) -> R) -> R {
        // SAFETY: DescriptorHead is all atomics and padding, for which zero is a valid value.
        let head: DescriptorHead = unsafe { std::mem::zeroed() };
        let bits: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
        f(Descriptor { head: &head, bits: &bits })
    }

    #[test]
    fn fill_then_take_words_yields_every_block_once() {
        with_desc(64, |d| {
            d.fill(130);
            let mut words = Vec::new();
            while let Some(w) = d.lowest_word() {
                words.push((w, d.take_word(w)));
            }
            assert_eq!(words, vec![(0, u64::MAX), (1, u64::MAX), (2, 0b11)]);
            assert_eq!(d.head.free.load(Ordering::Relaxed), 0);
            assert!(d.summary_consistent());
        });
    }

    #[test]
    fn put_makes_blocks_free_again_lowest_word_first() {
        with_desc(8, |d| {
            d.fill(100);
            while let Some(w) = d.lowest_word() {
                d.take_word(w);
            }
            assert_eq!(d.put(70), 1);
            assert_eq!(d.put(3), 2);
            assert_eq!(d.lowest_word(), Some(0));
            assert!(d.is_free(70) && !d.is_free(71));
            assert_eq!(d.count_free(), 2);
            assert!(d.summary_consistent());
        });
    }
}
