//! The words of the shared region (HWcc): per-bracket globals, thread-slot leases, roots.

use crate::sync::AtomicU64;

/// Number of application roots in the shared region.
pub(crate) const ROOTS: usize = 64;

/// Per-bracket HWcc global words.
///
/// Region: shared (HWcc). Both words are written by any thread of any process with CAS only and
/// carry a [`crate::word::Tagged`] value. Each sits on its own cache line: the length changes
/// rarely, the global head often, and neither should slow the other.
#[repr(C, align(64))]
pub(crate) struct BracketGlobals {
    /// Heap length in slabs (T1 bumps it). Monotone; a stale read only delays growth.
    pub length: AtomicU64,
    _pad0: [u8; 56],
    /// Global free-list head: slab index + 1, 0 = empty (T2 pops, T9 pushes).
    pub global_head: AtomicU64,
    _pad1: [u8; 56],
}

/// One thread-slot lease.
///
/// Region: shared (HWcc). `holder` is claimed with CAS 0 → [`crate::word::Holder`] by an
/// attaching thread and cleared by its holder (or an adopter). `tid` is written by the holder
/// after claiming and never cleared: non-zero means the slot's record has been used (and its
/// backing store reserved).
#[repr(C)]
pub(crate) struct SlotLease {
    /// Packed [`crate::word::Holder`]; 0 = free.
    pub holder: AtomicU64,
    /// Kernel thread id of the holding thread.
    pub tid: AtomicU64,
}

/// Entries of the host table: hosts (kernels, or pid namespaces of one kernel) that may use a
/// heap in its lifetime at once (docs/design.md §8.6). An entry is freed when its host is
/// recovered, so a pod may see more hosts come and go.
pub(crate) const MAX_HOSTS: u32 = 64;

/// One entry of the host table (docs/design.md §8.6).
///
/// Region: shared (HWcc), one cache line per entry (only `word` is ever CASed: in the no-HWcc
/// model the mCAS unit executes that CAS and the other words are plain advice).
///
/// - `word`: packed [`crate::word::HostWord`]. Any process CASes 0 → its domain (registration);
///   any process CASes live → dead (an operator declaring the host dead); the recoverer CASes
///   dead → 0 once no slot or hazard set names the host. Read by every liveness judgement; a
///   stale read is tolerated only in the direction of "alive" (it delays recovery, never
///   adopts a live holder).
/// - `heartbeat`, `registered`, `name`: written with plain stores by processes of the host;
///   read by tools only (advice: a stale or torn read misreports, never misdecides).
#[repr(C, align(64))]
pub(crate) struct HostEntry {
    /// Packed [`crate::word::HostWord`]; 0 = free.
    pub word: AtomicU64,
    /// Wall-clock seconds (Unix time) of the host's last sign of life: a process of it opened
    /// the heap, attached, detached or refilled a slab in that second.
    pub heartbeat: AtomicU64,
    /// Wall-clock seconds at which the entry was claimed.
    pub registered: AtomicU64,
    /// The host's name (`uname -n`), up to 32 bytes, zero-padded.
    pub name: [AtomicU64; 4],
    _pad: u64,
}

impl HostEntry {
    /// An entry holding these words (a private copy, as a read-only survey makes one).
    pub(crate) fn from_words(
        word: AtomicU64,
        heartbeat: AtomicU64,
        registered: AtomicU64,
        name: [AtomicU64; 4],
    ) -> Self {
        Self { word, heartbeat, registered, name, _pad: 0 }
    }
}

const _: () = assert!(std::mem::size_of::<HostEntry>() == 64);
// Every entry must be nameable by a holder word.
const _: () = assert!(MAX_HOSTS <= crate::word::MAX_HOST_INDEX);
const _: () = assert!(std::mem::offset_of!(HostEntry, word) == 0);

/// The fixed part of the shared region; the slot table follows it.
///
/// Region: shared (HWcc).
#[repr(C)]
pub(crate) struct SharedHeader {
    /// Global words of the small and large brackets.
    pub brackets: [BracketGlobals; 2],
    /// Application roots: offsets (or any 64-bit value) updated with CAS by any process.
    pub roots: [AtomicU64; ROOTS],
}

const _: () = assert!(std::mem::size_of::<BracketGlobals>() == 128);
const _: () = assert!(std::mem::size_of::<SharedHeader>() % 64 == 0);
