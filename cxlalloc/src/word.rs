//! Decoders for the packed 64-bit words that several threads update with one CAS.
//!
//! No shifts or masks on shared words appear outside this module.
//!
//! ```text
//!  63            52 51                     32 31                             0
//! +----------------+-------------------------+--------------------------------+
//! | writer (12 b)  | version (20 b)          | payload (32 b)                 |
//! +----------------+-------------------------+--------------------------------+
//! ```
//!
//! The upper half is a detectable-CAS [`Tag`]: which thread slot wrote the word last and that
//! slot's operation version. It makes every CAS target ABA-safe (a word rewritten to the same
//! payload carries another tag) and lets recovery ask "did my last CAS take effect?".

/// Bits of a [`Tag`] naming the writer (thread slot + 1; 0 = the heap initializer).
const WRITER_BITS: u32 = 12;
/// Bits of a [`Tag`] holding the writer's operation version.
const VERSION_BITS: u32 = 20;
const VERSION_MASK: u32 = (1 << VERSION_BITS) - 1;
/// Number of distinct operation versions (they wrap at this).
pub(crate) const VERSION_SPACE: u32 = 1 << VERSION_BITS;

/// Largest thread-slot count a tag can name (writer ids are slot + 1, and 0 is reserved).
pub(crate) const MAX_SLOTS: u32 = (1 << WRITER_BITS) - 1;

/// Who wrote a shared word last: `{writer slot + 1, writer's version}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Tag {
    /// Thread slot + 1 of the writer; 0 when the word still holds its initial zero.
    pub writer: u16,
    /// The writer's operation version at the time of the write (wraps at 2^20).
    pub version: u32,
}

impl Tag {
    /// The tag thread `slot` uses for its operation number `version`.
    #[inline]
    pub fn new(slot: u32, version: u32) -> Self {
        debug_assert!(slot < MAX_SLOTS);
        Self { writer: (slot + 1) as u16, version: version & VERSION_MASK }
    }

    #[inline]
    fn pack(self) -> u32 {
        (u32::from(self.writer) << VERSION_BITS) | (self.version & VERSION_MASK)
    }

    #[inline]
    fn unpack(bits: u32) -> Self {
        Self { writer: (bits >> VERSION_BITS) as u16, version: bits & VERSION_MASK }
    }

    /// The next operation version after `version`, wrapping inside the tag's width and
    /// skipping 0 (which a help word uses for "never helped").
    pub fn next_version(version: u32) -> u32 {
        (version & VERSION_MASK) % VERSION_MASK + 1
    }
}

/// A 32-bit payload with the [`Tag`] of its last writer: the shape of every HWcc CAS word
/// (heap length, global free-list head, remote-free counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Tagged {
    /// The word's value proper (a length, a slab index + 1, or a counter).
    pub payload: u32,
    /// Who wrote it.
    pub tag: Tag,
}

impl Tagged {
    /// A payload stamped with `tag`.
    #[inline]
    pub fn new(payload: u32, tag: Tag) -> Self {
        Self { payload, tag }
    }

    /// The raw word.
    #[inline]
    pub fn pack(self) -> u64 {
        (u64::from(self.tag.pack()) << 32) | u64::from(self.payload)
    }

    /// Decodes a raw word.
    #[inline]
    pub fn unpack(word: u64) -> Self {
        Self { payload: word as u32, tag: Tag::unpack((word >> 32) as u32) }
    }
}

/// Identity of a thread-slot holder, stored in the slot's lease word.
///
/// ```text
///  63                              32 31                              0
/// +----------------------------------+---------------------------------+
/// | process start time (low 32 bits) | pid                             |
/// +----------------------------------+---------------------------------+
/// ```
///
/// The start time (clock ticks since boot, `/proc/PID/stat` field 22) tells a live holder from
/// an unrelated process that reused its pid. 0 means the slot is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Process id of the holder.
    pub pid: u32,
    /// Low 32 bits of the holder's start time; never 0 for a real holder.
    pub start: u32,
}

impl Holder {
    /// The raw lease word.
    #[inline]
    pub fn pack(self) -> u64 {
        (u64::from(self.start) << 32) | u64::from(self.pid)
    }

    /// Decodes a lease word; `None` for a free slot.
    #[inline]
    pub fn unpack(word: u64) -> Option<Self> {
        (word != 0).then_some(Self { pid: word as u32, start: (word >> 32) as u32 })
    }
}

/// A huge descriptor's status word: the allocation's generation and its state, in one word so
/// that the Live → Freed CAS names the very allocation it frees (a descriptor block reused for
/// a newer allocation carries another generation: a late double free cannot free it).
///
/// ```text
///  63                                                    3 2     0
/// +-------------------------------------------------------+-------+
/// | generation (61 b)                                     |  st   |
/// +-------------------------------------------------------+-------+
/// ```
///
/// `st`: 0 = being built, 1 = live, 2 = freed, 3 = being reclaimed by its owner, 4 = being
/// released by another thread, 5 = cached by its owner, 6 = released (see
/// [`crate::persist::huge::HugeState`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HugeStatus {
    /// The allocation's generation.
    pub generation: u64,
    /// The state bits (see [`crate::persist::huge::HugeState`]).
    pub state: u8,
}

impl HugeStatus {
    /// The raw word.
    #[inline]
    pub(crate) fn pack(self) -> u64 {
        (self.generation << 3) | u64::from(self.state & 7)
    }

    /// Decodes a raw word.
    #[inline]
    pub(crate) fn unpack(word: u64) -> Self {
        Self { generation: word >> 3, state: (word & 7) as u8 }
    }
}

/// A hazard entry's key: which huge allocation a process has mapped.
///
/// ```text
///  63                    36 35                                        0
/// +------------------------+-------------------------------------------+
/// | generation (28 b)      | huge offset / 4096 (36 b)                 |
/// +------------------------+-------------------------------------------+
/// ```
///
/// The generation (low bits of the allocation's [`crate::persist::huge::HugeDescriptor`]
/// generation) tells two allocations at one offset apart, so a stale entry for a freed
/// allocation never pins a newer one at the same address. 0 means an empty entry (offset 0 is
/// the header, never a huge block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HazardKey {
    /// Heap offset of the allocation (page-aligned).
    pub offset: u64,
    /// Low 28 bits of its generation.
    pub generation: u32,
}

const HAZARD_PAGE_BITS: u32 = 36;
const HAZARD_GEN_MASK: u64 = (1 << (64 - HAZARD_PAGE_BITS)) - 1;

impl HazardKey {
    /// The key of the allocation at `offset` with generation `generation`.
    #[inline]
    pub(crate) fn new(offset: u64, generation: u64) -> Self {
        Self { offset: offset & !0xfff, generation: (generation & HAZARD_GEN_MASK) as u32 }
    }

    /// The raw entry word.
    #[inline]
    pub(crate) fn pack(self) -> u64 {
        ((self.offset >> 12) & ((1 << HAZARD_PAGE_BITS) - 1)) | (u64::from(self.generation) << HAZARD_PAGE_BITS)
    }

    /// Decodes an entry word; `None` for an empty entry.
    #[inline]
    pub(crate) fn unpack(word: u64) -> Option<Self> {
        (word != 0).then_some(Self {
            offset: (word & ((1 << HAZARD_PAGE_BITS) - 1)) << 12,
            generation: (word >> HAZARD_PAGE_BITS) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_round_trips_every_field() {
        let w = Tagged::new(0xdead_beef, Tag::new(4094, 0xf_ffff));
        assert_eq!(Tagged::unpack(w.pack()), w);
        assert_eq!(Tagged::unpack(w.pack()).tag.writer, 4095);
    }

    #[test]
    fn zero_word_is_untagged_zero_payload() {
        assert_eq!(Tagged::unpack(0), Tagged::default());
    }

    #[test]
    fn version_wraps_inside_its_width() {
        assert_eq!(Tag::next_version(VERSION_MASK), 1);
        assert_eq!(Tag::next_version(0), 1);
        assert_eq!(Tag::next_version(VERSION_MASK - 1), VERSION_MASK);
        assert_eq!(Tag::new(0, VERSION_MASK + 5).version, 4);
    }

    #[test]
    fn holder_zero_means_free() {
        assert_eq!(Holder::unpack(0), None);
        let h = Holder { pid: 77, start: 9 };
        assert_eq!(Holder::unpack(h.pack()), Some(h));
    }

    #[test]
    fn hazard_key_round_trips_and_keeps_generations_apart() {
        let k = HazardKey::new(0xff_ffff_f000, (1 << 40) | 0xabc_def1);
        assert_eq!(HazardKey::unpack(k.pack()), Some(k));
        assert_eq!(k.generation, 0xabc_def1);
        assert_ne!(k.pack(), HazardKey::new(0xff_ffff_f000, 2).pack());
        assert_eq!(HazardKey::unpack(0), None);
    }
}
