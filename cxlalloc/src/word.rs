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

/// Bits of a [`Holder`] naming its pid: Linux pids stay below `PID_MAX_LIMIT` = 2^22.
const PID_BITS: u32 = 22;
const PID_MASK: u64 = (1 << PID_BITS) - 1;
/// Bits of a [`Holder`] naming its host: an index into the heap's host table.
const HOST_BITS: u32 = 10;
const HOST_MASK: u64 = (1 << HOST_BITS) - 1;

/// Identity of a thread-slot holder, stored in the slot's lease word (and in a hazard set's).
///
/// ```text
///  63                              32 31           22 21                 0
/// +----------------------------------+---------------+--------------------+
/// | process start time (low 32 bits) | host (10 b)   | pid (22 b)         |
/// +----------------------------------+---------------+--------------------+
/// ```
///
/// The host is the holder's entry in the heap's host table (docs/design.md §8.6): its pid and
/// start time mean something only in that host's pid namespace. The start time (clock ticks
/// since boot, `/proc/PID/stat` field 22) tells a live holder from an unrelated process that
/// reused its pid. 0 means the slot is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Process id of the holder, in its host's pid namespace (below 2^22).
    pub pid: u32,
    /// The holder's host: its index in the heap's host table (below 2^10).
    pub host: u16,
    /// Low 32 bits of the holder's start time; never 0 for a real holder.
    pub start: u32,
}

impl Holder {
    /// The raw lease word. A pid or host too wide for its field is cut to it (neither happens
    /// for a real holder: see the field docs).
    #[inline]
    pub fn pack(self) -> u64 {
        (u64::from(self.start) << 32)
            | ((u64::from(self.host) & HOST_MASK) << PID_BITS)
            | (u64::from(self.pid) & PID_MASK)
    }

    /// Decodes a lease word; `None` for a free slot.
    #[inline]
    pub fn unpack(word: u64) -> Option<Self> {
        (word != 0).then_some(Self {
            pid: (word & PID_MASK) as u32,
            host: ((word >> PID_BITS) & HOST_MASK) as u16,
            start: (word >> 32) as u32,
        })
    }
}

/// Largest number of hosts a [`Holder`] can name.
pub(crate) const MAX_HOST_INDEX: u32 = 1 << HOST_BITS;

/// An entry of the host table: which domain holds it and whether it was declared dead.
///
/// ```text
///  63                                                            1   0
/// +----------------------------------------------------------------+---+
/// | domain fingerprint (63 bits, never 0)                          | D |
/// +----------------------------------------------------------------+---+
/// ```
///
/// A domain is one kernel's view of processes: boot id and machine id folded with a pid
/// namespace (docs/design.md §8.6). `D` is set when an operator declares the host dead
/// (`cxlalloc recover --host`). 0 means the entry is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostWord {
    /// The domain's fingerprint, 63 bits, non-zero.
    pub domain: u64,
    /// Declared dead: its slots may be adopted from any host.
    pub dead: bool,
}

impl HostWord {
    /// Fits a 64-bit fingerprint into the word's 63 bits, never 0.
    #[inline]
    pub fn fingerprint(hash: u64) -> u64 {
        (hash >> 1).max(1)
    }

    /// The raw word.
    #[inline]
    pub fn pack(self) -> u64 {
        (self.domain << 1) | u64::from(self.dead)
    }

    /// Decodes an entry word; `None` for a free entry.
    #[inline]
    pub fn unpack(word: u64) -> Option<Self> {
        (word != 0).then_some(Self { domain: word >> 1, dead: word & 1 != 0 })
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
        let h = Holder { pid: 77, host: 3, start: 9 };
        assert_eq!(Holder::unpack(h.pack()), Some(h));
    }

    #[test]
    fn holder_keeps_the_widest_pid_and_host_apart() {
        let h = Holder { pid: (1 << 22) - 1, host: (1 << 10) - 1, start: u32::MAX };
        assert_eq!(Holder::unpack(h.pack()), Some(h));
        let h = Holder { pid: 1, host: 0, start: 1 };
        assert_eq!(Holder::unpack(h.pack()), Some(h));
    }

    #[test]
    fn host_word_zero_means_free_and_the_dead_bit_is_its_own() {
        assert_eq!(HostWord::unpack(0), None);
        let live = HostWord { domain: HostWord::fingerprint(u64::MAX), dead: false };
        let dead = HostWord { dead: true, ..live };
        assert_eq!(HostWord::unpack(live.pack()), Some(live));
        assert_eq!(HostWord::unpack(dead.pack()), Some(dead));
        assert_ne!(live.pack(), dead.pack());
        assert_ne!(HostWord::fingerprint(0), 0);
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
