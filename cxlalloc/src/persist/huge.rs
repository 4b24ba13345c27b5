//! The huge descriptor: one per huge allocation, in a 64-byte block of the small heap.

use crate::sync::AtomicU64;

/// Where a huge allocation lies and whether it is still in use.
///
/// Lives in a 64-byte small-heap block allocated by the owning slot (so another process may
/// find it in a chunk it has not mapped yet: the signal handler's nested fault maps it). Every
/// field but `state` is written once by the owner before the descriptor is linked into the
/// owner's list ([`crate::persist::record::HugeRecord`]), and read by any thread of any process;
/// `status` goes Live → Freed with one CAS by whichever thread frees the block (a second free
/// loses the CAS: a double free), and on through the states of [`HugeState`]. Only the owner
/// unlinks and frees a descriptor, inside the list's epoch (see
/// [`crate::huge::view::HugeView::find`]), and only once its status is Freed-and-reclaiming
/// (its own), Released or Cached (owner-only states); never while another thread releases it.
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
    /// The generation the block's backing object is named after
    /// ([`crate::backing::HugeName`]): the first allocation's, kept when the owner reuses a
    /// cached object for a new allocation at the same offset (docs/design.md §7.6). Written by
    /// the owner before the descriptor is linked, like `offset`.
    pub object: AtomicU64,
    _reserved: [u64; 3],
}

const _: () = assert!(std::mem::size_of::<HugeDescriptor>() == 64);

/// Life cycle of a huge allocation (docs/design.md §7.2, §7.6).
///
/// ```text
/// Live ──free (any thread)──▶ Freed ──owner: Reclaiming, no hazard──▶ Cached ──reuse──▶ Live'
///                               │                           │             └─trim─▶ (gone)
///                               │                           └─cache full──────────▶ (gone)
///                               └─another thread: Releasing, no hazard──▶ Released ─owner─▶ (gone)
/// ```
/// A hazard found on the way sends Reclaiming and Releasing back to Freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum HugeState {
    /// Allocated and usable.
    Live = 1,
    /// Freed; its range and backing object are reclaimed once no process maps it.
    Freed = 2,
    /// Its owner is checking the hazards before reclaiming it (back to Freed if some process
    /// still maps it). Only threads of the owning slot set it, so the next holder of the slot
    /// takes one it finds for the leftover of a dead holder.
    Reclaiming = 3,
    /// A thread of another slot that freed it (or swept it) is checking the hazards before it
    /// removes the backing object (back to Freed if some process still maps it). The owner
    /// leaves it alone; recovery of that thread's slot finishes it.
    Releasing = 4,
    /// Hazard-free, its backing object kept (and unmapped everywhere) for the owner's next
    /// allocation of a fitting size; only the owner moves it on.
    Cached = 5,
    /// Hazard-free and its backing object removed by the thread that released it: only the
    /// descriptor and the range are left, for the owner (or a sweep) to take back.
    Released = 6,
}

impl HugeState {
    /// Decodes the state bits of a [`crate::word::HugeStatus`]; `None` for a descriptor being
    /// built (or garbage).
    pub(crate) fn from_bits(bits: u8) -> Option<Self> {
        match bits {
            1 => Some(HugeState::Live),
            2 => Some(HugeState::Freed),
            3 => Some(HugeState::Reclaiming),
            4 => Some(HugeState::Releasing),
            5 => Some(HugeState::Cached),
            6 => Some(HugeState::Released),
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
    /// The generation the backing object is named after.
    pub object: u64,
}

impl HugeBlock {
    /// Whether heap offset `off` lies inside the allocation.
    pub(crate) fn contains(&self, off: u64) -> bool {
        off.wrapping_sub(self.offset) < self.size
    }

    /// Whether `other` is a snapshot of the same allocation in the same state. The `next` link
    /// is not part of it: the owner rewrites it whenever it unlinks the block's successor.
    pub(crate) fn same_allocation(&self, other: &HugeBlock) -> bool {
        (self.desc, self.offset, self.size, self.generation, self.state, self.object)
            == (other.desc, other.offset, other.size, other.generation, other.state, other.object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(next: u64) -> HugeBlock {
        HugeBlock {
            desc: 0x40,
            offset: 1 << 30,
            size: 1 << 20,
            generation: 7,
            state: Some(HugeState::Live),
            next,
            object: 7,
        }
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
