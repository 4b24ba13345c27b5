//! The heap's persistent layout: configuration, the header every open validates, and where each
//! region and array lies inside the per-process reservation.
//!
//! ```text
//! reservation (one per heap per process; identical offsets in every process = PC-S)
//! +--------+--------+--------+-------+--------+-------------+-------------+-------------+-------+
//! | header | shared | claims | owned | hazard | remote: s,l | local: s,l  | data: s,l   | huge  |
//! +--------+--------+--------+-------+--------+-------------+-------------+-------------+-------+
//!   R/O      HWcc     HWcc     SWcc    SWcc     HWcc          SWcc          SWcc (lazy)   1 GiB
//! ```
//!
//! The huge heap's HWcc words (claims, hazard-set leases) have a region of their own, so that a
//! process that never uses huge blocks never maps their pages (the kernel's fault-around maps
//! the neighbours of a touched page, within one mapping).
//!
//! ```text
//! ```
//!
//! Each region is its own file (or device range), mapped `MAP_FIXED | MAP_SHARED` at its offset.
//! The huge span is not a region: each huge allocation has its own backing object, mapped at its
//! offset by the allocating process and lazily (on fault) by the others.
//! Offsets are relative to the reservation base, so offset 0 (the header) never names a block and
//! can serve as null. Every region starts on a 2 MiB boundary and the huge span on a 1 GiB one;
//! the base is aligned to 1 GiB (2 MiB without a huge heap), so slabs are aligned to their own
//! size, and huge blocks to up to 1 GiB, in every process.

use crate::class::{Bracket, LARGE_CLASSES, SMALL_CLASSES};
use crate::error::OpenError;
use crate::persist::record::ThreadRecord;
use crate::persist::shared::{HostEntry, SharedHeader, SlotLease, MAX_HOSTS, ROOTS};
use crate::word::MAX_SLOTS;

/// Alignment of every region and of the reservation base.
pub(crate) const REGION_ALIGN: usize = 2 << 20;
/// Size of the header region.
pub(crate) const HEADER_BYTES: usize = 4096;
/// Version of the on-device layout; bumped on any incompatible change.
pub(crate) const LAYOUT_VERSION: u32 = 10;
/// log2 of a huge slot: the unit in which threads claim huge address space.
pub(crate) const HUGE_SLOT_SHIFT: u32 = 30;
/// Bytes of one huge slot (1 GiB).
pub(crate) const HUGE_SLOT: usize = 1 << HUGE_SLOT_SHIFT;
/// Most huge slots a heap may have (16 TiB of huge address space).
pub(crate) const MAX_HUGE_SLOTS: u32 = 1 << 14;
/// Hazard entries per hazard set (each entry is two words: key and length in pages).
pub(crate) const HAZARDS_PER_SET: usize = 32;
/// Magic bytes at the start of the header.
pub(crate) const MAGIC: [u8; 8] = *b"CXLALLOC";

/// How the device keeps memory coherent between hosts (docs/design.md §9.1). Recorded in the header;
/// every process of a heap runs the same model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum Coherence {
    /// Every access is hardware-coherent: plain atomics, no flushes.
    #[default]
    Full = 0,
    /// Only the HWcc regions (shared, claims, remote) are coherent; descriptors and records
    /// (SWcc) are written back before their ownership moves and invalidated before another
    /// host's copy is read (`clflushopt`/`clwb` + fences, `clflush` where the CPU lacks them).
    Limited = 1,
    /// Nothing is coherent: the HWcc words live in an mCAS window (each in its own cache line)
    /// and every CAS on them is executed by the device's near-memory unit; SWcc memory follows
    /// the limited model's flush protocol.
    NoHwcc = 2,
}

impl Coherence {
    /// Every model, in discriminant order.
    pub const ALL: [Coherence; 3] = [Coherence::Full, Coherence::Limited, Coherence::NoHwcc];

    /// The model's name in configuration files and on command lines.
    pub fn name(self) -> &'static str {
        match self {
            Coherence::Full => "full",
            Coherence::Limited => "limited",
            Coherence::NoHwcc => "none",
        }
    }

    /// The model named `name` (see [`Coherence::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The model with discriminant `raw`.
    pub fn from_raw(raw: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|&c| c as u32 == raw)
    }

    /// Bytes between consecutive per-slab and per-slot HWcc words: each mCAS target gets a
    /// cache line of its own (docs/design.md §9.1), the others pack 8-byte words.
    pub fn hwcc_stride(self) -> usize {
        match self {
            Coherence::NoHwcc => 64,
            Coherence::Full | Coherence::Limited => 8,
        }
    }
}

/// Parameters of a new heap. Stored in the header; openers that pass one are checked against it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Bound on small-bracket data, bytes (rounded down to whole slabs).
    pub small_capacity: u64,
    /// Bound on large-bracket data, bytes (rounded down to whole slabs).
    pub large_capacity: u64,
    /// Thread slots (1 ..= 4095): the most threads attached at once, over all processes.
    pub thread_slots: u32,
    /// Slabs a thread takes when it extends the small heap (T1).
    pub small_batch: u32,
    /// Slabs a thread takes when it extends the large heap (T1).
    pub large_batch: u32,
    /// Empty slabs a thread keeps cached before returning extras to the global list (T9).
    pub cache_local: u32,
    /// Huge address space, bytes (a multiple of 1 GiB; 0 = no huge heap, allocations above
    /// 512 KiB fail). Only address space: memory is committed per allocation.
    pub huge_capacity: u64,
    /// Bytes of freed huge blocks' backing objects that each thread slot keeps for reuse
    /// (docs/design.md §7.6): an allocation a cached object fits takes it back with its pages,
    /// no new object, no `fallocate`, no zeroing. Bounded in bytes only, so that many mid-sized
    /// blocks freed in a burst are all kept; trimmed further when the system runs short of
    /// memory, and emptied when the thread detaches. 0 caches nothing. Default 2 GiB: a burst
    /// of 128 blocks of 16 MiB, or one 1 GiB block and change.
    pub huge_cache_bytes: u64,
    /// Coherence model of the device.
    pub coherence: Coherence,
    /// Reserve backing store when the heap grows (`fallocate`), so a full `/dev/shm` is an
    /// out-of-memory error instead of a `SIGBUS` on first touch.
    pub commit_on_grow: bool,
    /// Crash recovery (docs/design.md §8): threads log every metadata transition and help each
    /// other's detectable CASes, so that a dead slot can be adopted and repaired. Off only to
    /// measure what recovery costs: a slot whose holder died is then lost with its memory.
    pub recovery: bool,
    /// Give an empty slab's data pages back to the system (a hole punched in the data file)
    /// when it goes back on the global list (T9), so the heap's memory shrinks as its live data
    /// does (docs/design.md §4.7). A slab taken from the global list is faulted in afresh (and
    /// reserved again under `commit_on_grow`). Default on; off keeps every page the heap ever
    /// touched until the heap is removed.
    pub return_pages: bool,
    /// No-HWcc model only: the description file of the hardware mCAS device whose memory holds
    /// the HWcc regions (`mcas::DeviceSpec`; copied into the heap directory at creation).
    /// `None`: an mCAS window file in the heap directory, served by `cxlalloc-mcasd`. Not in
    /// the header, and not compared by openers.
    pub mcas_device: Option<std::path::PathBuf>,
    /// Permission bits of every file the heap ever creates: region files, huge blocks' backing
    /// objects, the mCAS window, the device description (docs/design.md §2.3). Default
    /// `DEFAULT_MODE` (`0o600`): only the creating user. Sharing is an explicit choice:
    /// `0o660` for a group, `0o666` for every local user. Only read and write bits are allowed,
    /// and the user's are required; the heap directory gets the matching search bits
    /// (`dir_mode`). Applied with `fchmod`, so the umask changes nothing. Recorded in the
    /// header: a huge object created later, by any process, gets the same mode, and the heap's
    /// owner and group (a process of another user that may change them: root); see
    /// [`crate::Heap::create_at`].
    pub mode: u32,
    /// This host's number in a pod (`0 ..= 7`), by which a process leases the requesters of a
    /// no-HWcc heap's mCAS window (docs/design.md §9.2): required for a window carved in a
    /// device that several kernels share, used if given for a window in a heap directory.
    /// `None` (the default): the `CXLALLOC_HOST` environment variable's, if set; giving both is
    /// an error unless they agree ([`OpenError::HostNumber`]). A property of the opening
    /// process, not of the heap: not in the header, not compared by openers. Used by
    /// [`crate::Heap::create_at`], [`crate::Heap::open_or_create_at`] and
    /// [`crate::Heap::format_device`] (and their by-name forms); [`crate::Heap::open_device_as`]
    /// takes it alone.
    pub host: Option<u32>,
}

/// Host numbers an operator may give the hosts of a pod ([`Config::host`], `CXLALLOC_HOST`,
/// docs/design.md §9.2): host `h` owns its own share of the process requesters of every heap's
/// mCAS window.
pub const HOST_NUMBERS: u32 = 8;

/// Checks a host number ([`Config::host`]): below [`HOST_NUMBERS`].
pub(crate) fn check_host_number(h: u32) -> Result<(), OpenError> {
    if h >= HOST_NUMBERS {
        return Err(OpenError::HostNumber(format!("host number {h}: a host number is 0 ..= {}", HOST_NUMBERS - 1)));
    }
    Ok(())
}

/// The default [`Config::huge_cache_bytes`] (docs/design.md §7.6).
pub(crate) const DEFAULT_HUGE_CACHE_BYTES: u64 = 2 << 30;

/// The default [`Config::mode`]: read and write for the creating user only.
pub(crate) const DEFAULT_MODE: u32 = 0o600;

/// The heap directory's mode for file mode `mode`: search (x) for each class that may read.
pub(crate) fn dir_mode(mode: u32) -> u32 {
    mode | ((mode & 0o444) >> 2)
}

/// Checks a [`Config::mode`]: only read and write bits, and the user's both.
pub(crate) fn check_mode(mode: u32) -> Result<(), String> {
    if mode & !0o666 != 0 {
        return Err(format!("mode {mode:#o} has bits other than read and write (allowed: 0o666)"));
    }
    if mode & 0o600 != 0o600 {
        return Err(format!("mode {mode:#o} must give the owner read and write (0o600)"));
    }
    Ok(())
}

impl Default for Config {
    fn default() -> Self {
        Self {
            small_capacity: 16 << 30,
            large_capacity: 64 << 30,
            thread_slots: 1024,
            small_batch: 8,
            large_batch: 1,
            cache_local: 8,
            huge_capacity: 1 << 40,
            huge_cache_bytes: DEFAULT_HUGE_CACHE_BYTES,
            coherence: Coherence::Full,
            commit_on_grow: true,
            recovery: true,
            return_pages: true,
            mcas_device: None,
            mode: DEFAULT_MODE,
            host: None,
        }
    }
}

impl Config {
    /// A configuration with both brackets bounded to `bytes` each.
    pub fn with_capacity(bytes: u64) -> Self {
        Self { small_capacity: bytes, large_capacity: bytes, ..Self::default() }
    }

    fn capacity_slabs(&self, b: Bracket) -> u64 {
        let bytes = match b {
            Bracket::Small => self.small_capacity,
            Bracket::Large => self.large_capacity,
        };
        bytes >> b.spec().slab_shift
    }

    /// Checks bounds; the header stores only validated configurations.
    pub fn validate(&self) -> Result<(), OpenError> {
        let bad = |s: String| Err(OpenError::InvalidConfig(s));
        if self.thread_slots == 0 || self.thread_slots > MAX_SLOTS {
            return bad(format!("thread_slots must be 1..={MAX_SLOTS}, got {}", self.thread_slots));
        }
        for b in Bracket::ALL {
            let slabs = self.capacity_slabs(b);
            if slabs == 0 || slabs >= u64::from(u32::MAX) {
                return bad(format!("{} capacity must be 1 ..< 2^32 slabs, got {slabs}", b.name()));
            }
        }
        if self.small_batch == 0 || self.large_batch == 0 {
            return bad("growth batches must be at least one slab".into());
        }
        let slots = self.huge_capacity >> HUGE_SLOT_SHIFT;
        if self.huge_capacity % HUGE_SLOT as u64 != 0 || slots > u64::from(MAX_HUGE_SLOTS) {
            return bad(format!(
                "huge_capacity must be a multiple of 1 GiB up to {} GiB, got {} bytes",
                MAX_HUGE_SLOTS, self.huge_capacity
            ));
        }
        if self.coherence != Coherence::Full && self.huge_capacity != 0 {
            return bad(format!(
                "the huge heap needs coherence = full (its descriptors' status word is CASed by any \
                 host); set huge_capacity = 0 for coherence = {}",
                self.coherence.name()
            ));
        }
        check_mode(self.mode).map_err(OpenError::InvalidConfig)?;
        if let Some(h) = self.host {
            check_host_number(h)?;
        }
        if self.mcas_device.is_some() && self.coherence != Coherence::NoHwcc {
            return bad(format!("an mCAS device serves only coherence = none, not {}", self.coherence.name()));
        }
        Ok(())
    }
}

/// The persisted header: everything an opener needs to rebuild the [`Layout`] and to refuse a
/// heap this build cannot read. Written once by the creator before the heap becomes visible;
/// read-only afterwards.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`LAYOUT_VERSION`].
    pub layout_version: u32,
    /// `size_of::<Header>()` of the writer.
    pub header_bytes: u32,
    /// Page size of the creator.
    pub page_size: u32,
    /// [`Coherence`] discriminant.
    pub coherence: u32,
    /// Thread slots.
    pub slots: u32,
    /// Application roots.
    pub roots: u32,
    /// log2 of the small and large slab sizes.
    pub slab_shift: [u32; 2],
    /// Local-descriptor sizes of the two brackets.
    pub descriptor_bytes: [u32; 2],
    /// Class counts of the two brackets.
    pub classes: [u32; 2],
    /// Size of one per-thread record.
    pub record_bytes: u32,
    /// Bit 0: commit on grow; bit 1: recovery.
    pub flags: u32,
    /// Capacity of each bracket, slabs.
    pub capacity: [u32; 2],
    /// Growth batch of each bracket, slabs.
    pub batch: [u32; 2],
    /// Empty slabs cached per thread.
    pub cache_local: u32,
    /// Huge slots (1 GiB each) of the huge span.
    pub huge_slots: u32,
    /// [`Config::mode`]: permission bits of every file of the heap, applied by every process
    /// that creates one (huge objects are created long after the heap).
    pub mode: u32,
    /// Zero; keeps `heap_id` 8-aligned.
    pub reserved: u32,
    /// Random identity of the heap, drawn at creation and written into every region file's
    /// trailer (`backing::files`), so an opener refuses a region file of another heap. Zero
    /// for an anonymous heap.
    pub heap_id: u64,
    /// Random per-heap value mixed into the free-block marks (double-free detection).
    pub secret: u64,
    /// [`Config::huge_cache_bytes`]: every process's threads keep at most this much in their
    /// slots' huge caches.
    pub huge_cache_bytes: u64,
    /// Byte size of each region, in [`RegionId`] order.
    pub region_bytes: [u64; REGIONS],
    /// FNV-1a of all preceding bytes.
    pub checksum: u64,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);
const _: () = assert!(std::mem::size_of::<Header>() % 8 == 0);

const FLAG_COMMIT: u32 = 1;
const FLAG_RECOVERY: u32 = 2;
const FLAG_RETURN_PAGES: u32 = 4;

pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

impl Header {
    /// The header of a new heap with `config` (already validated).
    pub(crate) fn new(config: &Config, secret: u64) -> Self {
        let spec = |b: Bracket| b.spec();
        let mut h = Header {
            magic: MAGIC,
            layout_version: LAYOUT_VERSION,
            header_bytes: std::mem::size_of::<Header>() as u32,
            page_size: page_size() as u32,
            coherence: config.coherence as u32,
            slots: config.thread_slots,
            roots: ROOTS as u32,
            slab_shift: Bracket::ALL.map(|b| spec(b).slab_shift),
            descriptor_bytes: Bracket::ALL.map(|b| spec(b).descriptor_size() as u32),
            classes: [SMALL_CLASSES as u32, LARGE_CLASSES as u32],
            record_bytes: std::mem::size_of::<ThreadRecord>() as u32,
            flags: if config.commit_on_grow { FLAG_COMMIT } else { 0 }
                | if config.recovery { FLAG_RECOVERY } else { 0 }
                | if config.return_pages { FLAG_RETURN_PAGES } else { 0 },
            capacity: Bracket::ALL.map(|b| config.capacity_slabs(b) as u32),
            batch: [config.small_batch, config.large_batch],
            cache_local: config.cache_local,
            huge_slots: (config.huge_capacity >> HUGE_SLOT_SHIFT) as u32,
            mode: config.mode,
            reserved: 0,
            heap_id: 0,
            secret,
            huge_cache_bytes: config.huge_cache_bytes,
            region_bytes: [0; REGIONS],
            checksum: 0,
        };
        let layout = Layout::from_header(&h);
        h.region_bytes = RegionId::ALL.map(|r| layout.region(r).size as u64);
        h.checksum = h.compute_checksum();
        h
    }

    /// This header with identity `heap_id` (see [`Header::heap_id`]).
    pub(crate) fn with_heap_id(mut self, heap_id: u64) -> Self {
        self.heap_id = heap_id;
        self.checksum = self.compute_checksum();
        self
    }

    fn compute_checksum(&self) -> u64 {
        let bytes = self.as_bytes();
        fnv1a(&bytes[..bytes.len() - 8])
    }

    /// The header's bytes, as written to the header region.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: Header is repr(C), Copy, made only of integers, and has no padding (asserted
        // by the size checks above and the field order), so every byte is initialized.
        unsafe { std::slice::from_raw_parts((self as *const Self).cast::<u8>(), std::mem::size_of::<Self>()) }
    }

    /// Parses and validates header bytes read from `path`: magic, checksum, and every constant
    /// this build depends on. The error names the first field that differs.
    pub(crate) fn parse(bytes: &[u8], path: &std::path::Path) -> Result<Self, OpenError> {
        if bytes.len() < 8 || bytes[..8] != MAGIC {
            return Err(OpenError::BadMagic(path.to_path_buf()));
        }
        if bytes.len() < std::mem::size_of::<Header>() {
            return Err(OpenError::Truncated {
                path: path.to_path_buf(),
                expected: std::mem::size_of::<Header>() as u64,
                actual: bytes.len() as u64,
            });
        }
        // SAFETY: the length was checked above; Header is plain integers, so any bit pattern is
        // a valid value and read_unaligned imposes no alignment requirement.
        let h: Header = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let expect = |field, found: u64, expected: u64| {
            if found == expected {
                Ok(())
            } else {
                Err(OpenError::Mismatch { field, found, expected })
            }
        };
        expect("layout_version", h.layout_version.into(), LAYOUT_VERSION.into())?;
        expect("header_bytes", h.header_bytes.into(), std::mem::size_of::<Header>() as u64)?;
        if h.checksum != h.compute_checksum() {
            return Err(OpenError::Checksum(path.to_path_buf()));
        }
        let reference = Header::new(&Config::default(), 0);
        expect("page_size", h.page_size.into(), reference.page_size.into())?;
        if Coherence::from_raw(h.coherence).is_none() {
            return Err(OpenError::Mismatch { field: "coherence", found: h.coherence.into(), expected: 0 });
        }
        expect("roots", h.roots.into(), reference.roots.into())?;
        expect("record_bytes", h.record_bytes.into(), reference.record_bytes.into())?;
        for i in 0..2 {
            expect("slab_shift", h.slab_shift[i].into(), reference.slab_shift[i].into())?;
            expect("descriptor_bytes", h.descriptor_bytes[i].into(), reference.descriptor_bytes[i].into())?;
            expect("classes", h.classes[i].into(), reference.classes[i].into())?;
        }
        let config = h.config();
        config.validate()?;
        let recomputed = Header::new(&config, h.secret);
        for (r, (&found, &want)) in RegionId::ALL.iter().zip(h.region_bytes.iter().zip(&recomputed.region_bytes)) {
            expect(r.size_field(), found, want)?;
        }
        Ok(h)
    }

    /// The configuration this header records.
    pub(crate) fn config(&self) -> Config {
        Config {
            small_capacity: u64::from(self.capacity[0]) << self.slab_shift[0],
            large_capacity: u64::from(self.capacity[1]) << self.slab_shift[1],
            thread_slots: self.slots,
            small_batch: self.batch[0],
            large_batch: self.batch[1],
            cache_local: self.cache_local,
            huge_capacity: u64::from(self.huge_slots) << HUGE_SLOT_SHIFT,
            huge_cache_bytes: self.huge_cache_bytes,
            coherence: Coherence::from_raw(self.coherence).unwrap_or_default(),
            commit_on_grow: self.flags & FLAG_COMMIT != 0,
            recovery: self.flags & FLAG_RECOVERY != 0,
            return_pages: self.flags & FLAG_RETURN_PAGES != 0,
            mcas_device: None,
            mode: self.mode,
            host: None,
        }
    }

    /// Checks that an opener's expected configuration matches this heap.
    pub(crate) fn check_matches(&self, config: &Config) -> Result<(), OpenError> {
        let mine = self.config();
        let pairs: [(&'static str, u64, u64); 12] = [
            ("small_capacity", mine.small_capacity, config.capacity_slabs(Bracket::Small) << self.slab_shift[0]),
            ("large_capacity", mine.large_capacity, config.capacity_slabs(Bracket::Large) << self.slab_shift[1]),
            ("thread_slots", mine.thread_slots.into(), config.thread_slots.into()),
            ("small_batch", mine.small_batch.into(), config.small_batch.into()),
            ("large_batch", mine.large_batch.into(), config.large_batch.into()),
            ("cache_local", mine.cache_local.into(), config.cache_local.into()),
            ("huge_capacity", mine.huge_capacity, config.huge_capacity),
            ("huge_cache_bytes", mine.huge_cache_bytes, config.huge_cache_bytes),
            ("coherence", mine.coherence as u64, config.coherence as u64),
            ("recovery", mine.recovery.into(), config.recovery.into()),
            ("return_pages", mine.return_pages.into(), config.return_pages.into()),
            ("mode", mine.mode.into(), config.mode.into()),
        ];
        for (field, found, expected) in pairs {
            if found != expected {
                return Err(OpenError::Mismatch { field, found, expected });
            }
        }
        Ok(())
    }
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Number of regions.
pub const REGIONS: usize = 8;

/// The regions of a heap, each its own file / mappable object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionId {
    /// Read-mostly header.
    Header = 0,
    /// HWcc global words, slot table, roots.
    Shared = 1,
    /// HWcc huge claim array and hazard-set leases.
    Claims = 2,
    /// SWcc per-thread records.
    Owned = 3,
    /// SWcc hazard sets: which huge allocations each process has mapped.
    Hazard = 4,
    /// HWcc remote-free counters, one word per slab.
    Remote = 5,
    /// SWcc local descriptors, one per slab.
    Local = 6,
    /// Slab data.
    Data = 7,
}

impl RegionId {
    /// All regions in layout order.
    pub const ALL: [RegionId; REGIONS] = [
        RegionId::Header,
        RegionId::Shared,
        RegionId::Claims,
        RegionId::Owned,
        RegionId::Hazard,
        RegionId::Remote,
        RegionId::Local,
        RegionId::Data,
    ];

    /// File name of the region inside a heap directory.
    pub fn file_name(self) -> &'static str {
        match self {
            RegionId::Header => "header",
            RegionId::Shared => "shared",
            RegionId::Claims => "claims",
            RegionId::Owned => "owned",
            RegionId::Hazard => "hazard",
            RegionId::Remote => "remote",
            RegionId::Local => "local",
            RegionId::Data => "data",
        }
    }

    /// Whether the region must live in hardware-coherent memory.
    pub fn is_hwcc(self) -> bool {
        matches!(self, RegionId::Shared | RegionId::Claims | RegionId::Remote)
    }

    fn size_field(self) -> &'static str {
        match self {
            RegionId::Header => "header region size",
            RegionId::Shared => "shared region size",
            RegionId::Claims => "claims region size",
            RegionId::Owned => "owned region size",
            RegionId::Hazard => "hazard region size",
            RegionId::Remote => "remote region size",
            RegionId::Local => "local region size",
            RegionId::Data => "data region size",
        }
    }
}

/// A byte range of the reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Span {
    /// Offset from the reservation base.
    pub offset: usize,
    /// Length in bytes.
    pub size: usize,
}

impl Span {
    /// One past the last byte.
    pub(crate) fn end(&self) -> usize {
        self.offset + self.size
    }

    /// Whether `off` lies inside.
    pub(crate) fn contains(&self, off: usize) -> bool {
        off >= self.offset && off < self.end()
    }
}

/// Where a bracket's three per-slab arrays lie.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BracketLayout {
    /// Slab capacity.
    pub capacity: u32,
    /// Remote-free counters, 8 bytes per slab (in the remote region).
    pub remote: Span,
    /// Local descriptors (in the local region).
    pub local: Span,
    /// Slab data (in the data region).
    pub data: Span,
}

/// Offsets of everything in the reservation, derived only from the header.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// Regions, indexed by [`RegionId`].
    pub regions: [Span; REGIONS],
    /// Per-bracket arrays, indexed by [`Bracket`].
    pub brackets: [BracketLayout; 2],
    /// Offset of the fixed header ([`SharedHeader`]: bracket globals and roots) in the shared
    /// region, right after the slot records and right before the host table.
    pub shared_header: usize,
    /// Offset of slot 0's record (in the shared region, right below the fixed header): one
    /// record of [`Layout::lease_stride`] bytes per slot, its lease first, then its help
    /// words. The records run *downwards*: slot `s`'s is `s * lease_stride` below slot 0's
    /// ([`Layout::slot_record`]), so that the slots leased first share the fixed header's
    /// page (layout version 10, docs/design.md §9.1 "HWcc bytes").
    pub slot_table: usize,
    /// Offset of slot 0's detectable-CAS help word (in the shared region, inside slot 0's
    /// record, after its lease): see [`crate::protocol::detectable`]; it is followed by the
    /// slot's mailbox heads ([`HELP_WORDS`] words a slot, `hwcc_stride` apart). Slot
    /// `s`'s words are `s * lease_stride` below.
    pub help_table: usize,
    /// Offset of slot 0's remote-free mailbox head of each bracket (the help word's next two
    /// words, `hwcc_stride` apart): slot `s`'s are `s * lease_stride` below. Kept apart from
    /// `help_table` so that a mailbox push computes its head with one multiply.
    pub mailboxes: [usize; 2],
    /// Offset of the host table (in the shared region, right after the fixed header):
    /// [`MAX_HOSTS`] entries (docs/design.md §8.6). Its entry 0 ends the fixed header's page.
    pub host_table: usize,
    /// Bytes between consecutive slot records (a lease and its help words). One record per
    /// slot, rather than a lease table followed by a help table, so that the slots in use
    /// touch one run of HWcc pages from slot 0 on, not one in each table (docs/design.md §9.1,
    /// "HWcc bytes").
    pub lease_stride: usize,
    /// Bytes between consecutive remote counters and between help words
    /// ([`Coherence::hwcc_stride`]).
    pub hwcc_stride: usize,
    /// Thread slots.
    pub slots: u32,
    /// Offset of the huge claim array (in the claims region): one word per huge slot, 0 = free,
    /// else the claiming thread slot + 1.
    pub claims: usize,
    /// Offset of the hazard-set leases (in the claims region, after the claim array): one
    /// packed [`crate::word::Holder`] per hazard set, 0 = free.
    pub hazard_leases: usize,
    /// Hazard sets (one per thread slot: a process needs one, a big one a few).
    pub hazard_sets: u32,
    /// The huge span: `huge_slots` slots of [`HUGE_SLOT`] bytes.
    pub huge: Span,
    /// Total reservation size.
    pub total: usize,
}

/// Words per slot after its lease (see [`Layout::help_table`]): the detectable-CAS help word,
/// then the slot's two remote-free mailbox heads (small, large; [`crate::protocol::mailbox`]).
const HELP_WORDS: usize = 3;

/// Bytes of one hazard set: [`HAZARDS_PER_SET`] entries of two words.
pub(crate) const HAZARD_SET_BYTES: usize = HAZARDS_PER_SET * 16;

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

impl Layout {
    /// Computes the layout recorded by `h`.
    pub(crate) fn from_header(h: &Header) -> Self {
        let page = h.page_size as usize;
        let mut regions = [Span::default(); REGIONS];
        let mut brackets = [BracketLayout::default(); 2];
        let mut cursor = 0usize;
        let mut place = |id: RegionId, size: usize, regions: &mut [Span; REGIONS]| {
            let span = Span { offset: cursor, size: align_up(size.max(1), page) };
            cursor = align_up(span.end(), REGION_ALIGN);
            regions[id as usize] = span;
            span.offset
        };
        place(RegionId::Header, HEADER_BYTES, &mut regions);
        let coherence = Coherence::from_raw(h.coherence).unwrap_or_default();
        let stride = coherence.hwcc_stride();
        // One record per slot (slot 0's highest, the others below it), the fixed header, then
        // the host table, placed so that the header's page ends with host entry 0: a process
        // of host 0 using the first slots (81 of them, 12 without HWcc) touches one HWcc page
        // of this region. Version 9 put the header first, then the 4 KiB host table, then the
        // records (upwards): two pages, header and host entry 0 in one, the slots in the next
        // (docs/design.md §9.1, "HWcc bytes").
        let lease_bytes = align_up(std::mem::size_of::<SlotLease>(), stride);
        let lease_stride = lease_bytes + HELP_WORDS * stride;
        let records = h.slots as usize * lease_stride;
        let header_bytes = align_up(std::mem::size_of::<SharedHeader>(), std::mem::align_of::<HostEntry>());
        let entry = std::mem::size_of::<HostEntry>();
        let header_at = align_up(records + header_bytes + entry, page) - header_bytes - entry;
        let host_table = header_at + header_bytes;
        let slot_table = header_at - lease_stride;
        let help_table = slot_table + lease_bytes;
        let shared = host_table + MAX_HOSTS as usize * entry;
        let shared_off = place(RegionId::Shared, shared, &mut regions);
        let hazard_sets = h.slots;
        let claims = h.huge_slots as usize * 8;
        let claims_off = place(RegionId::Claims, claims + hazard_sets as usize * 8, &mut regions);
        place(RegionId::Owned, h.slots as usize * h.record_bytes as usize, &mut regions);
        place(RegionId::Hazard, hazard_sets as usize * HAZARD_SET_BYTES, &mut regions);

        let mut arrays = |id: RegionId, stride: &dyn Fn(usize) -> usize, regions: &mut [Span; REGIONS]| {
            let mut size = 0;
            let sub: [Span; 2] = std::array::from_fn(|i| {
                let bytes = align_up(h.capacity[i] as usize * stride(i), REGION_ALIGN);
                let span = Span { offset: size, size: bytes };
                size += bytes;
                span
            });
            let base = place(id, size, regions);
            sub.map(|s| Span { offset: base + s.offset, ..s })
        };
        let remote = arrays(RegionId::Remote, &|_| stride, &mut regions);
        let local = arrays(RegionId::Local, &|i| h.descriptor_bytes[i] as usize, &mut regions);
        let data = arrays(RegionId::Data, &|i| 1usize << h.slab_shift[i], &mut regions);
        for i in 0..2 {
            brackets[i] = BracketLayout { capacity: h.capacity[i], remote: remote[i], local: local[i], data: data[i] };
        }
        let huge_offset = align_up(cursor, HUGE_SLOT);
        let huge = Span { offset: huge_offset, size: (h.huge_slots as usize) << HUGE_SLOT_SHIFT };
        Layout {
            regions,
            brackets,
            shared_header: shared_off + header_at,
            slot_table: shared_off + slot_table,
            help_table: shared_off + help_table,
            mailboxes: [1, 2].map(|w| shared_off + help_table + w * stride),
            host_table: shared_off + host_table,
            lease_stride,
            hwcc_stride: stride,
            slots: h.slots,
            claims: claims_off,
            hazard_leases: claims_off + claims,
            hazard_sets,
            total: if huge.size == 0 { cursor } else { huge.end() },
            huge,
        }
    }

    /// Alignment of the reservation base: huge blocks aligned to up to one huge slot need it.
    pub(crate) fn base_align(&self) -> usize {
        if self.huge.size == 0 {
            REGION_ALIGN
        } else {
            HUGE_SLOT
        }
    }

    /// The span of region `r`.
    pub(crate) fn region(&self, r: RegionId) -> Span {
        self.regions[r as usize]
    }

    /// Offset of slot `slot`'s record (its lease); the records run downwards from slot 0's
    /// ([`Layout::slot_table`]). `slot` must be below the slot count.
    #[inline]
    pub(crate) fn slot_record(&self, slot: u32) -> usize {
        debug_assert!(slot < self.slots, "slot index out of range");
        self.slot_table - slot as usize * self.lease_stride
    }

    /// Offset of the lowest slot record (the last slot's): where the slot records begin.
    pub(crate) fn slot_records_start(&self) -> usize {
        self.slot_table - (self.slots as usize).saturating_sub(1) * self.lease_stride
    }

    /// The arrays of bracket `b`.
    #[inline]
    pub(crate) fn bracket(&self, b: Bracket) -> &BracketLayout {
        &self.brackets[b as usize]
    }

    /// HWcc bytes in use: the shared region's fixed words and host table, the records of the
    /// `used_slots` slots ever leased (slots never leased are never touched), the claims region
    /// (whole: it exists only with a huge heap), and the remote counters of the heap's current
    /// lengths (docs/design.md §9.1, "HWcc bytes"). Bytes, not pages: what a process pays is
    /// the pages it touches, which the harness measures as PSS.
    pub(crate) fn hwcc_bytes(&self, lengths: [u32; 2], used_slots: u32) -> u64 {
        let remote: usize = lengths.iter().map(|&l| l as usize * self.hwcc_stride).sum();
        let fixed = self.host_table + MAX_HOSTS as usize * std::mem::size_of::<HostEntry>() - self.shared_header;
        let slots = used_slots.min(self.slots) as usize * self.lease_stride;
        (fixed + slots + self.region(RegionId::Claims).size + remote) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HWcc pages of the shared region that a process of host 0 using slots `0 .. slots`
    /// touches: every word of the fixed header, host entry 0, and each slot's lease, help word
    /// and mailbox heads (every byte of each).
    fn shared_pages_touched(layout: &Layout, slots: u32) -> std::collections::BTreeSet<usize> {
        let pages = |at: usize, len: usize| (at / 4096)..=((at + len - 1) / 4096);
        let mut touched: std::collections::BTreeSet<usize> = pages(layout.shared_header, size_of::<SharedHeader>())
            .chain(pages(layout.host_table, size_of::<HostEntry>()))
            .collect();
        for slot in 0..slots {
            let record = layout.slot_record(slot);
            touched.extend(pages(record, size_of::<SlotLease>()));
            let help = record + (layout.help_table - layout.slot_table);
            touched.extend((0..HELP_WORDS).flat_map(|w| pages(help + w * layout.hwcc_stride, 8)));
        }
        touched
    }

    #[test]
    fn the_fixed_header_host_entry_0_and_the_first_slots_share_one_hwcc_page_in_every_model() {
        for coherence in [Coherence::Full, Coherence::Limited, Coherence::NoHwcc] {
            let layout = Layout::from_header(&Header::new(&Config { coherence, ..Config::default() }, 1));
            // Full and limited: 40-byte slot records, 81 of them below the header in its page;
            // no-HWcc: 256-byte ones (each word its own line), 12.
            let few = if coherence == Coherence::NoHwcc { 12 } else { 81 };
            assert_eq!(shared_pages_touched(&layout, few).len(), 1, "{coherence:?}");
            assert_eq!(shared_pages_touched(&layout, few + 1).len(), 2, "{coherence:?}: one slot more spills");
        }
    }

    #[test]
    fn slot_records_run_down_from_slot_0_below_the_fixed_header() {
        for coherence in [Coherence::Full, Coherence::Limited, Coherence::NoHwcc] {
            let layout = Layout::from_header(&Header::new(&Config { coherence, ..Config::default() }, 1));
            let shared = layout.region(RegionId::Shared);
            assert_eq!(layout.slot_record(0) + layout.lease_stride, layout.shared_header, "{coherence:?}");
            assert_eq!(layout.slot_record(1) + layout.lease_stride, layout.slot_record(0));
            assert_eq!(layout.slot_records_start(), layout.slot_record(layout.slots - 1));
            assert!(layout.slot_records_start() >= shared.offset, "{coherence:?}");
            assert_eq!(layout.shared_header % std::mem::align_of::<SharedHeader>(), 0);
            assert_eq!(layout.host_table % std::mem::align_of::<HostEntry>(), 0);
            assert!(layout.host_table >= layout.shared_header + size_of::<SharedHeader>());
            assert!(layout.host_table + MAX_HOSTS as usize * size_of::<HostEntry>() <= shared.end());
        }
    }

    #[test]
    fn slot_records_hold_each_hwcc_word_on_its_stride_inside_the_shared_region() {
        for coherence in [Coherence::Full, Coherence::Limited, Coherence::NoHwcc] {
            let layout = Layout::from_header(&Header::new(&Config { coherence, ..Config::default() }, 1));
            let stride = layout.hwcc_stride;
            assert!(layout.help_table >= layout.slot_table + std::mem::size_of::<SlotLease>());
            assert_eq!((layout.help_table - layout.slot_table) % stride, 0, "{coherence:?}");
            assert_eq!(layout.lease_stride, layout.help_table - layout.slot_table + HELP_WORDS * stride);
            // Slot 0's record is the highest: its last word ends at or below the fixed header.
            let last = layout.help_table + (HELP_WORDS - 1) * stride;
            assert!(last + 8 <= layout.shared_header, "{coherence:?}: slot 0's words run into the header");
            assert_eq!(layout.slot_table % stride.max(8), 0);
            assert_eq!(layout.slot_records_start() % stride.max(8), 0);
            assert_eq!(layout.mailboxes, [layout.help_table + stride, layout.help_table + 2 * stride]);
        }
    }

    #[test]
    fn hwcc_bytes_count_the_records_of_used_slots_only() {
        let layout = Layout::from_header(&Header::new(&Config::default(), 1));
        let none = layout.hwcc_bytes([0, 0], 0);
        assert_eq!(layout.hwcc_bytes([0, 0], 3) - none, 3 * layout.lease_stride as u64);
        assert_eq!(layout.hwcc_bytes([10, 2], 0) - none, 12 * layout.hwcc_stride as u64);
        // Every slot used: the shared region's bytes from the first record to the host table's
        // end, never more.
        let shared = layout.region(RegionId::Shared);
        let all = layout.hwcc_bytes([0, 0], layout.slots);
        let claims = layout.region(RegionId::Claims).size as u64;
        let hosts_end = layout.host_table + MAX_HOSTS as usize * size_of::<HostEntry>();
        assert_eq!(all - claims, (hosts_end - layout.slot_records_start()) as u64);
        assert!(all - claims <= shared.size as u64);
    }

    #[test]
    fn header_round_trips_through_parse() {
        let h = Header::new(&Config::default(), 42);
        let back = Header::parse(h.as_bytes(), "x".as_ref());
        assert_eq!(back.as_ref().ok(), Some(&h));
        assert_eq!(back.ok().map(|b| b.config()), Some(Config::default()));
    }

    #[test]
    fn flipped_byte_fails_the_checksum() {
        let h = Header::new(&Config::default(), 42);
        let mut bytes = h.as_bytes().to_vec();
        bytes[100] ^= 1;
        assert!(matches!(Header::parse(&bytes, "x".as_ref()), Err(OpenError::Checksum(_))));
    }

    #[test]
    fn wrong_magic_is_named() {
        let h = Header::new(&Config::default(), 1);
        let mut bytes = h.as_bytes().to_vec();
        bytes[0] = b'X';
        assert!(matches!(Header::parse(&bytes, "x".as_ref()), Err(OpenError::BadMagic(_))));
    }

    #[test]
    fn mismatched_expectation_names_the_field() {
        let h = Header::new(&Config::default(), 1);
        let other = Config { thread_slots: 8, ..Config::default() };
        let r = h.check_matches(&other);
        assert!(matches!(r, Err(OpenError::Mismatch { field: "thread_slots", .. })), "{r:?}");
    }

    #[test]
    fn regions_are_aligned_and_disjoint() {
        let l = Layout::from_header(&Header::new(&Config::with_capacity(1 << 30), 0));
        for w in l.regions.windows(2) {
            assert!(w[0].end() <= w[1].offset);
            assert_eq!(w[1].offset % REGION_ALIGN, 0);
        }
        for b in Bracket::ALL {
            let bl = l.bracket(b);
            assert_eq!(bl.data.offset % b.spec().slab_size(), 0);
            assert!(bl.data.size >= bl.capacity as usize * b.spec().slab_size());
        }
    }

    #[test]
    fn invalid_configs_are_refused() {
        assert!(Config { thread_slots: 0, ..Config::default() }.validate().is_err());
        assert!(Config { thread_slots: 5000, ..Config::default() }.validate().is_err());
        assert!(Config { small_capacity: 100, ..Config::default() }.validate().is_err());
    }
}
