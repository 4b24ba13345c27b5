//! The huge descriptor: one per huge allocation, in a 64-byte block of the small heap.

use crate::sync::AtomicU64;

/// Where a huge allocation lies and whether it is still in use.
///
/// Lives in a 64-byte small-heap block allocated by the owning slot (so another process may
/// find it in a chunk it has not mapped yet: the signal handler's nested fault maps it). Every
/// field but `state` is written once by the owner before the descriptor is linked into the
/// owner's list ([`crate::persist::record::HugeRecord`]), and read by any thread of any process;
/// `status` goes Live → Freed with one CAS by whichever thread frees the block (a second free
/// loses the CAS: a double free). Only the owner unlinks and frees a descriptor, inside the
/// list's epoch (see [`crate::huge::view::HugeView::find`]).
#[repr(C, align(64))]
pub(crate) struct HugeDescriptor {
    /// Heap offset of the allocation (page-aligned, inside the huge span).
    pub offset: AtomicU64,
    /// Mapped length in bytes (a multiple of the page size).
    pub size: AtomicU64,
    /// Packed [`crate::word::HugeStatus`]: the generation (unique per allocation over the
    /// heap's life; it names the backing object) and the [`HugeState`].
    pub status: AtomicU64,
    /// Heap offset of the next descriptor of the owner's list, 0 = end.
    pub next: AtomicU64,
    _reserved: [u64; 4],
}

const _: () = assert!(std::mem::size_of::<HugeDescriptor>() == 64);

/// Life cycle of a huge allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum HugeState {
    /// Allocated and usable.
    Live = 1,
    /// Freed; its range and backing object are reclaimed once no process maps it.
    Freed = 2,
    /// Its owner is checking the hazards before reclaiming it (back to Freed if some process
    /// still maps it).
    Reclaiming = 3,
}

impl HugeState {
    /// Decodes the state bits of a [`crate::word::HugeStatus`]; `None` for a descriptor being
    /// built (or garbage).
    pub(crate) fn from_bits(bits: u8) -> Option<Self> {
        match bits {
            1 => Some(HugeState::Live),
            2 => Some(HugeState::Freed),
            3 => Some(HugeState::Reclaiming),
            _ => None,
        }
    }

    /// The status word of an allocation of generation `generation` in this state.
    pub(crate) fn word(self, generation: u64) -> u64 {
        crate::word::HugeStatus { generation, state: self as u8 }.pack()
    }
}

/// A consistent snapshot of one descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HugeBlock {
    /// Heap offset of the descriptor itself.
    pub desc: u64,
    /// Heap offset of the allocation.
    pub offset: u64,
    /// Mapped length in bytes.
    pub size: u64,
    /// Generation.
    pub generation: u64,
    /// State when read.
    pub state: Option<HugeState>,
    /// Heap offset of the next descriptor on the owner's list, 0 = end.
    pub next: u64,
}

impl HugeBlock {
    /// Whether heap offset `off` lies inside the allocation.
    pub(crate) fn contains(&self, off: u64) -> bool {
        off.wrapping_sub(self.offset) < self.size
    }

    /// Whether `other` is a snapshot of the same allocation in the same state. The `next` link
    /// is not part of it: the owner rewrites it whenever it unlinks the block's successor.
    pub(crate) fn same_allocation(&self, other: &HugeBlock) -> bool {
        (self.desc, self.offset, self.size, self.generation, self.state)
            == (other.desc, other.offset, other.size, other.generation, other.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(next: u64) -> HugeBlock {
        HugeBlock { desc: 0x40, offset: 1 << 30, size: 1 << 20, generation: 7, state: Some(HugeState::Live), next }
    }

    #[test]
    fn a_block_whose_successor_was_unlinked_is_the_same_allocation() {
        assert!(block(0x80).same_allocation(&block(0xc0)));
    }

    #[test]
    fn another_generation_or_state_is_not_the_same_allocation() {
        let freed = HugeBlock { state: Some(HugeState::Freed), ..block(0x80) };
        let reused = HugeBlock { generation: 8, ..block(0x80) };
        assert!(!block(0x80).same_allocation(&freed));
        assert!(!block(0x80).same_allocation(&reused));
    }
}
