//! The redo record: one 8-byte word per thread slot, written before every metadata transition
//! so that recovery can finish or undo the one operation a crash interrupted.
//!
//! ```text
//!  63                 32 31               7   6     5  4 3      0
//! +---------------------+------------------+------+------+--------+
//! | slab index (32 b)   | arg (25 b)       | flag | brkt | op     |
//! +---------------------+------------------+------+------+--------+
//! ```
//!
//! `arg` is a detectable-CAS version (bump, remote free), a version and a chain length (pop,
//! push: [`ChainArg`]), a class id (unsized →
//! sized, retire), a bitset word (take word) or a block index (local free). A zero word means
//! "no operation in flight". The allocation fast path needs no record: popping a bit from the
//! persistent current-slab word ([`crate::persist::record::Current`]) is one store that both
//! performs and records it.
//!
//! Operations that span several slab operations (a huge allocation, whose descriptor is a
//! small block; a detectable allocation or free, which also writes the caller's word) have a
//! second, outer record, the [`PendingRecord`]: slab operations inside them overwrite the redo
//! word freely, and recovery resolves the redo word first, then the pending one.

use crate::class::Bracket;
use crate::sync::AtomicU64;

/// The logged operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// T1: extend the heap by a batch of slabs starting at `slab` (old length); arg = version.
    Bump = 1,
    /// T2: pop the chain that starts at `slab` from the global list; arg = `ChainArg` (version
    /// and the chain's slab count).
    GlobalPop = 2,
    /// T3: give unsized `slab` the class in arg.
    Size = 3,
    /// Move bitset word arg of `slab` into the class's current-slab cache; flag = the reverse
    /// (return the cached word to the bitset).
    TakeWord = 4,
    /// Owner frees block arg of `slab` and T6/T7 follows. Logged only when the free moves the
    /// slab between lists: a free that moves nothing is one bitset store plus the slab's free
    /// count and summary, which a crash can leave behind the bitset and recovery recomputes
    /// from the bitsets of the slabs the slot owns.
    LocalFree = 5,
    /// T4/T5: the owner's allocation filled `slab`; flag = disown.
    Retire = 6,
    /// T10/T8: decrement `slab`'s remote counter; arg = version, flag = this free claims it.
    RemoteFree = 7,
    /// T9: push the chain of the first slabs of the unsized list, starting at `slab`, to the
    /// global list; arg = `ChainArg` (version and the chain's slab count).
    GlobalPush = 8,
    /// A detaching owner disowns partly used `slab`, counting its free blocks off the remote
    /// counter in one CAS; arg = version, flag = that CAS claimed the slab back (it was empty).
    Abandon = 9,
    /// A refill found sized `slab` (class in arg) empty, every block back locally or remotely,
    /// and moves it to the unsized list.
    Reclaim = 10,
    /// A remote free pushes a block of `slab` on its owner's mailbox (docs/design.md §4.6); arg =
    /// version. The block index and the owner are in the record (`remote_block`,
    /// `remote_owner`).
    MailboxPush = 11,
    /// The slot takes its mailbox's chain (the record's `harvest` names it); arg = version,
    /// flag = the mailbox is being closed (a detaching holder). `slab` is unused (0).
    Harvest = 12,
}

impl Op {
    /// The operation's name (as in crash-point labels).
    pub fn name(self) -> &'static str {
        match self {
            Op::Bump => "Bump",
            Op::GlobalPop => "GlobalPop",
            Op::Size => "Size",
            Op::TakeWord => "TakeWord",
            Op::LocalFree => "LocalFree",
            Op::Retire => "Retire",
            Op::RemoteFree => "RemoteFree",
            Op::GlobalPush => "GlobalPush",
            Op::Abandon => "Abandon",
            Op::Reclaim => "Reclaim",
            Op::MailboxPush => "MailboxPush",
            Op::Harvest => "Harvest",
        }
    }

    fn from_bits(bits: u64) -> Option<Self> {
        Some(match bits {
            1 => Op::Bump,
            2 => Op::GlobalPop,
            3 => Op::Size,
            4 => Op::TakeWord,
            5 => Op::LocalFree,
            6 => Op::Retire,
            7 => Op::RemoteFree,
            8 => Op::GlobalPush,
            9 => Op::Abandon,
            10 => Op::Reclaim,
            11 => Op::MailboxPush,
            12 => Op::Harvest,
            _ => return None,
        })
    }
}

/// The argument of [`Op::GlobalPop`] and [`Op::GlobalPush`]: the operation's detectable-CAS
/// version and how many slabs its chain holds (docs/design.md §4.3, "Chains"). A chain of one
/// slab packs to the bare version, the argument's form before chains.
///
/// ```text
///  24          20 19                   0
/// +--------------+----------------------+
/// | slabs − 1    | version (20 b)       |
/// +--------------+----------------------+
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChainArg {
    /// The operation's version.
    pub(crate) version: u32,
    /// Slabs in the chain, 1..=[`ChainArg::MAX_SLABS`].
    pub(crate) slabs: u32,
}

const CHAIN_VERSION_BITS: u32 = 20;
const CHAIN_VERSION_MASK: u32 = (1 << CHAIN_VERSION_BITS) - 1;

impl ChainArg {
    /// Longest chain one record names (the five bits above the version).
    pub(crate) const MAX_SLABS: u32 = 1 << (ARG_BITS - CHAIN_VERSION_BITS);

    /// The argument of a chain of `slabs` (1..=[`ChainArg::MAX_SLABS`]) under `version`.
    #[inline]
    pub(crate) fn new(version: u32, slabs: u32) -> Self {
        debug_assert!((1..=Self::MAX_SLABS).contains(&slabs));
        Self { version, slabs }
    }

    /// The `arg` field.
    #[inline]
    pub(crate) fn pack(self) -> u32 {
        (self.version & CHAIN_VERSION_MASK) | (self.slabs.clamp(1, Self::MAX_SLABS) - 1) << CHAIN_VERSION_BITS
    }

    /// Decodes an `arg` field.
    #[inline]
    pub(crate) fn unpack(arg: u32) -> Self {
        Self { version: arg & CHAIN_VERSION_MASK, slabs: (arg >> CHAIN_VERSION_BITS) % Self::MAX_SLABS + 1 }
    }
}

/// A decoded redo record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Redo {
    /// What was in flight.
    pub op: Op,
    /// In which bracket.
    pub bracket: Bracket,
    /// Op-specific flag (see [`Op`]).
    pub flag: bool,
    /// Op-specific argument (see [`Op`]); 25 bits.
    pub arg: u32,
    /// The slab concerned.
    pub slab: u32,
}

const ARG_BITS: u32 = 25;
const ARG_MASK: u64 = (1 << ARG_BITS) - 1;

impl Redo {
    /// A record of `op` on `slab`.
    #[inline]
    pub fn new(op: Op, bracket: Bracket, slab: u32, arg: u32) -> Self {
        Self { op, bracket, flag: false, arg, slab }
    }

    /// The same record with the flag set.
    #[inline]
    pub fn flagged(self) -> Self {
        Self { flag: true, ..self }
    }

    /// The raw word.
    #[inline]
    pub fn pack(self) -> u64 {
        (self.op as u64)
            | ((self.bracket as u64) << 4)
            | (u64::from(self.flag) << 6)
            | ((u64::from(self.arg) & ARG_MASK) << 7)
            | (u64::from(self.slab) << 32)
    }

    /// Decodes a raw word; `None` for 0 (idle) or an unknown op (a corrupt record).
    pub fn unpack(word: u64) -> Option<Self> {
        Some(Self {
            op: Op::from_bits(word & 0xf)?,
            bracket: Bracket::from_index(((word >> 4) & 3) as u32)?,
            flag: (word >> 6) & 1 == 1,
            arg: ((word >> 7) & ARG_MASK) as u32,
            slab: (word >> 32) as u32,
        })
    }
}

/// The outer operation in flight (see the module docs).
///
/// Region: owned (SWcc), in the slot's [`crate::persist::record::ThreadRecord`]; written only by
/// the slot's holder. `word` (a packed [`Pending`], 0 = idle) is written after the other
/// fields when an operation starts and cleared when it ends, so the fields recovery reads are
/// always those of the operation `word` names.
#[repr(C)]
pub(crate) struct PendingRecord {
    /// Packed [`Pending`]; 0 = no outer operation in flight.
    pub word: AtomicU64,
    /// Heap offset of the application's block (allocated or being freed); 0 = not yet known.
    pub block: AtomicU64,
    /// Heap offset of the caller's destination word (detectable operations); 0 = none.
    pub dest: AtomicU64,
    /// Heap offset of a huge descriptor (huge operations).
    pub desc: AtomicU64,
}

/// Kinds of outer operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PendingKind {
    /// Detectable allocation: `block` (written before the block leaves the free state) is to
    /// be stored into `dest`.
    Alloc = 1,
    /// Detectable free: `dest` is to be cleared, then `block` (of allocation `generation`)
    /// freed.
    Free = 2,
    /// Huge allocation: descriptor `desc` (written before the descriptor block is taken) is
    /// being filled, linked and backed; recovery undoes it. `dest` as for `Alloc`.
    HugePlace = 3,
    /// Free of the huge block described by `desc`, allocation `generation`: recovery marks it
    /// Freed if it is still that live allocation.
    HugeFree = 4,
    /// The owner reclaims the Freed huge block described by `desc` (generation `generation`):
    /// recovery finishes removing its object, unlinking and freeing the descriptor.
    HugeReclaim = 5,
}

/// A decoded pending word.
///
/// ```text
///  63                                                      8 7        0
/// +---------------------------------------------------------+----------+
/// | generation (56 b)                                       | kind     |
/// +---------------------------------------------------------+----------+
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// What is in flight.
    pub kind: PendingKind,
    /// The block's allocation generation (a slab's sizing count, or a huge block's
    /// generation), low 56 bits; 0 where the kind has none.
    pub generation: u64,
}

const GENERATION_MASK: u64 = (1 << 56) - 1;

impl Pending {
    /// A pending word of `kind` for allocation `generation` (truncated to 56 bits).
    pub fn new(kind: PendingKind, generation: u64) -> Self {
        Self { kind, generation: generation & GENERATION_MASK }
    }

    /// The raw word.
    pub fn pack(self) -> u64 {
        self.kind as u64 | (self.generation << 8)
    }

    /// Decodes a raw word; `None` for 0 (idle) or an unknown kind (a corrupt record).
    pub fn unpack(word: u64) -> Option<Self> {
        let kind = match word & 0xff {
            1 => PendingKind::Alloc,
            2 => PendingKind::Free,
            3 => PendingKind::HugePlace,
            4 => PendingKind::HugeFree,
            5 => PendingKind::HugeReclaim,
            _ => return None,
        };
        Some(Self { kind, generation: word >> 8 })
    }

    /// Whether `generation` (full width) is the one this record names.
    pub fn names(self, generation: u64) -> bool {
        self.generation == generation & GENERATION_MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_argument_round_trips_and_one_slab_is_the_bare_version() {
        for (version, slabs) in [(1, 1), (0xf_ffff, 1), (77, 5), (0xf_ffff, ChainArg::MAX_SLABS)] {
            let arg = ChainArg::new(version, slabs);
            assert_eq!(ChainArg::unpack(arg.pack()), arg);
            assert!(arg.pack() < 1 << ARG_BITS);
        }
        assert_eq!(ChainArg::new(4242, 1).pack(), 4242);
    }

    #[test]
    fn every_op_round_trips() {
        for op in [
            Op::Bump,
            Op::GlobalPop,
            Op::Size,
            Op::TakeWord,
            Op::LocalFree,
            Op::Retire,
            Op::RemoteFree,
            Op::GlobalPush,
            Op::Abandon,
            Op::Reclaim,
            Op::MailboxPush,
            Op::Harvest,
        ] {
            for b in Bracket::ALL {
                let r = Redo::new(op, b, u32::MAX, (1 << 25) - 1).flagged();
                assert_eq!(Redo::unpack(r.pack()), Some(r));
            }
        }
    }

    #[test]
    fn zero_is_idle() {
        assert_eq!(Redo::unpack(0), None);
        assert_eq!(Pending::unpack(0), None);
    }

    #[test]
    fn pending_round_trips_and_truncates_generations() {
        for kind in [
            PendingKind::Alloc,
            PendingKind::Free,
            PendingKind::HugePlace,
            PendingKind::HugeFree,
            PendingKind::HugeReclaim,
        ] {
            let p = Pending::new(kind, u64::MAX);
            assert_eq!(Pending::unpack(p.pack()), Some(p));
            assert!(p.names(u64::MAX));
            assert!(!p.names(u64::MAX - 1));
        }
    }
}
