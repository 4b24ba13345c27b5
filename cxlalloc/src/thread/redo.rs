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
//! `arg` is a detectable-CAS version (bump, pop, push, remote free), a class id (unsized →
//! sized, retire), a bitset word (take word) or a block index (local free). A zero word means
//! "no operation in flight". The allocation fast path needs no record: popping a bit from the
//! persistent current-slab word ([`crate::thread::record::Current`]) is one store that both
//! performs and records it.

use crate::class::Bracket;

/// The logged operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// T1: extend the heap by a batch of slabs starting at `slab` (old length); arg = version.
    Bump = 1,
    /// T2: pop `slab` from the global list; arg = version.
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
    /// T9: push `slab` from the unsized list to the global list; arg = version.
    GlobalPush = 8,
    /// A detaching owner disowns partly used `slab`, counting its free blocks off the remote
    /// counter in one CAS; arg = version, flag = that CAS claimed the slab back (it was empty).
    Abandon = 9,
    /// A refill found sized `slab` (class in arg) empty, every block back locally or remotely,
    /// and moves it to the unsized list.
    Reclaim = 10,
    /// Huge allocation: `slab` is the index of its descriptor's 64-byte block in the small
    /// data (heap offset = small data start + 64 · index). Logged from the descriptor's
    /// allocation to the return of the mapped block; recovery finishes or undoes it.
    HugeAlloc = 11,
    /// Huge free or reclaim of the descriptor in `slab` (as for [`Op::HugeAlloc`]); flag = the
    /// owner is reclaiming it (removing the backing object, unlinking and freeing the
    /// descriptor), clear = some thread is unmapping it and marking it Freed.
    HugeFree = 12,
}

impl Op {
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
            11 => Op::HugeAlloc,
            12 => Op::HugeFree,
            _ => return None,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

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
            Op::HugeAlloc,
            Op::HugeFree,
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
    }
}
