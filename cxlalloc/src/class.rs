//! Size classes of the two slab brackets.
//!
//! | bracket | sizes | step | slab | classes |
//! | --- | --- | --- | --- | --- |
//! | small | 8 B … 1 KiB | 8 B | 32 KiB | 128 |
//! | large | 1 KiB + 1 … 512 KiB | four per doubling | 512 KiB | 36 |
//!
//! Class ids are 1-based so that a zero descriptor means "no class" (zero = valid). Large classes
//! are `k · 2^e` for `k ∈ {5,6,7,8}`, which bounds internal waste at 25 % instead of the 50 % of
//! power-of-two classes. Every block offset inside a slab is a multiple of its class size and
//! slabs are aligned to their own size, so a class of size `s` is aligned to the largest power
//! of two dividing `s`.

/// The two slab brackets. The discriminant is the bracket's index in per-bracket arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Bracket {
    /// 8 B … 1 KiB blocks in 32 KiB slabs.
    Small = 0,
    /// 1 KiB … 512 KiB blocks in 512 KiB slabs.
    Large = 1,
}

impl Bracket {
    /// Both brackets, in index order.
    pub const ALL: [Bracket; 2] = [Bracket::Small, Bracket::Large];

    /// Static parameters of this bracket.
    #[inline]
    pub(crate) fn spec(self) -> &'static BracketSpec {
        &SPECS[self as usize]
    }

    /// The bracket with index `i` (as stored in redo records).
    pub fn from_index(i: u32) -> Option<Self> {
        match i {
            0 => Some(Bracket::Small),
            1 => Some(Bracket::Large),
            _ => None,
        }
    }

    /// log2 of the slab size. A `const fn` so that fast paths specialised to one bracket fold it.
    #[inline(always)]
    pub(crate) const fn slab_shift(self) -> u32 {
        match self {
            Bracket::Small => 15,
            Bracket::Large => 19,
        }
    }

    /// Bits of a block index within one slab (`64 · bitset_words` blocks at most): how a
    /// mailbox names a block (`protocol::mailbox::BlockId`).
    pub(crate) const fn block_shift(self) -> u32 {
        match self {
            Bracket::Small => 12,
            Bracket::Large => 9,
        }
    }

    /// 64-bit words in a descriptor's free-block bitset.
    #[inline(always)]
    pub(crate) const fn bitset_words(self) -> usize {
        match self {
            Bracket::Small => 64,
            Bracket::Large => 8,
        }
    }

    /// Bytes of one local descriptor: a 64-byte metadata line plus the bitset.
    #[inline(always)]
    pub(crate) const fn descriptor_size(self) -> usize {
        64 + self.bitset_words() * 8
    }

    /// The class with 1-based id `class`, if it exists (direct table access, foldable when the
    /// bracket is a constant).
    #[inline(always)]
    pub(crate) fn class(self, class: u32) -> Option<&'static ClassInfo> {
        let i = (class as usize).wrapping_sub(1);
        match self {
            Bracket::Small => SMALL_TABLE.get(i),
            Bracket::Large => LARGE_TABLE.get(i),
        }
    }

    /// Block size in bytes of the class with 1-based id `class` (the index of
    /// [`BracketCensus::classes`](crate::BracketCensus) plus one), if it exists.
    pub fn class_size(self, class: u32) -> Option<usize> {
        self.class(class).map(|info| info.size as usize)
    }

    /// Number of size classes.
    #[inline(always)]
    pub const fn class_count(self) -> usize {
        match self {
            Bracket::Small => SMALL_CLASSES,
            Bracket::Large => LARGE_CLASSES,
        }
    }

    /// Human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Bracket::Small => "small",
            Bracket::Large => "large",
        }
    }
}

/// Largest request served by the small bracket.
pub const SMALL_MAX: usize = 1024;
/// Largest request served by the slab heaps at all; above this is the huge heap.
pub const LARGE_MAX: usize = 512 * 1024;

/// Number of small classes.
pub(crate) const SMALL_CLASSES: usize = SMALL_MAX / 8;
/// Number of large classes.
pub(crate) const LARGE_CLASSES: usize = 36;

/// One size class.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClassInfo {
    /// Block size in bytes.
    pub size: u32,
    /// Blocks per slab.
    pub blocks: u32,
    /// `ceil(2^40 / size)`: `(offset * recip) >> 40 == offset / size` for every in-slab offset.
    pub recip: u64,
}

/// Static parameters of a bracket.
#[derive(Debug)]
pub(crate) struct BracketSpec {
    /// Which bracket.
    pub bracket: Bracket,
    /// log2 of the slab size.
    pub slab_shift: u32,
    /// Class table, index = class id − 1.
    pub classes: &'static [ClassInfo],
    /// Slabs per lazily mapped chunk (2 MiB of data).
    pub chunk_slabs: u32,
}

impl BracketSpec {
    /// Slab size in bytes.
    #[inline]
    pub(crate) fn slab_size(&self) -> usize {
        1 << self.slab_shift
    }

    /// The class with 1-based id `class`, if it exists.
    #[inline]
    pub(crate) fn class(&self, class: u32) -> Option<&'static ClassInfo> {
        self.classes.get((class as usize).wrapping_sub(1))
    }

    /// Bytes of one local descriptor: a 64-byte metadata line plus the bitset.
    pub(crate) fn descriptor_size(&self) -> usize {
        self.bracket.descriptor_size()
    }
}

const fn info(size: u32, slab: u32) -> ClassInfo {
    ClassInfo { size, blocks: slab / size, recip: (1u64 << 40).div_ceil(size as u64) }
}

const fn small_classes() -> [ClassInfo; SMALL_CLASSES] {
    let mut out = [ClassInfo { size: 0, blocks: 0, recip: 0 }; SMALL_CLASSES];
    let mut i = 0;
    while i < SMALL_CLASSES {
        out[i] = info(8 * (i as u32 + 1), 1 << Bracket::Small.slab_shift());
        i += 1;
    }
    out
}

const fn large_classes() -> [ClassInfo; LARGE_CLASSES] {
    let mut out = [ClassInfo { size: 0, blocks: 0, recip: 0 }; LARGE_CLASSES];
    let mut i = 0;
    while i < LARGE_CLASSES {
        let step = 1u32 << (8 + i / 4);
        out[i] = info((5 + (i as u32 % 4)) * step, 1 << Bracket::Large.slab_shift());
        i += 1;
    }
    out
}

static SMALL_TABLE: [ClassInfo; SMALL_CLASSES] = small_classes();
static LARGE_TABLE: [ClassInfo; LARGE_CLASSES] = large_classes();

static SPECS: [BracketSpec; 2] = [
    BracketSpec { bracket: Bracket::Small, slab_shift: 15, classes: &SMALL_TABLE, chunk_slabs: 64 },
    BracketSpec { bracket: Bracket::Large, slab_shift: 19, classes: &LARGE_TABLE, chunk_slabs: 4 },
];

/// The bracket and 1-based class id serving a request of `size` bytes (`1 ..= LARGE_MAX`).
#[inline]
pub fn class_of(size: usize) -> Option<(Bracket, u32)> {
    if size == 0 {
        None
    } else if size <= SMALL_MAX {
        Some((Bracket::Small, size.div_ceil(8) as u32))
    } else if size <= LARGE_MAX {
        let s = size - 1;
        let log = usize::BITS - 1 - s.leading_zeros();
        let quarter = (s >> (log - 2)) as u32 - 4;
        Some((Bracket::Large, (log - 10) * 4 + quarter + 1))
    } else {
        None
    }
}

/// The smallest class that holds `size` bytes with every block aligned to `align` (a power of
/// two no larger than the slab size), or `None` when no slab class can.
pub fn class_aligned(size: usize, align: usize) -> Option<(Bracket, u32)> {
    let (mut bracket, mut class) = class_of(size.max(1))?;
    loop {
        let spec = bracket.spec();
        if align <= spec.slab_size() && spec.class(class)?.size as usize % align == 0 {
            return Some((bracket, class));
        }
        class += 1;
        if spec.class(class).is_none() {
            bracket = match bracket {
                Bracket::Small => Bracket::Large,
                Bracket::Large => return None,
            };
            class = 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // Pure arithmetic over every seventh offset of every class: no unsafe code for miri to
    // check, and hours under its interpreter.
    #[cfg_attr(miri, ignore)]
    fn reciprocal_division_is_exact_for_every_in_slab_offset() {
        for spec in Bracket::ALL.map(Bracket::spec) {
            for info in spec.classes {
                for off in (0..spec.slab_size() as u64).step_by(7).chain([spec.slab_size() as u64 - 1]) {
                    assert_eq!((off * info.recip) >> 40, off / u64::from(info.size), "{info:?} {off}");
                }
            }
        }
    }

    #[test]
    fn bitsets_cover_the_densest_class() {
        for spec in Bracket::ALL.map(Bracket::spec) {
            let max = spec.classes.iter().map(|c| c.blocks).max().unwrap() as usize;
            assert!(max <= spec.bracket.bitset_words() * 64);
        }
    }
}
