//! The errors of cxlkv's store and server.

use cxlalloc::{AdoptError, AllocError, AttachError, FreeError, OpenError};

/// Why a store operation, a worker's start or its recovery failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The heap could not be opened or created.
    #[error("heap: {0}")]
    Open(#[from] OpenError),
    /// The heap is not in the HWcc (`full`) coherence model: the table's words are used with
    /// the CPU's atomics.
    #[error("the heap's coherence model is {0}; cxlkv needs 'full' (hardware-coherent)")]
    Coherence(String),
    /// The heap holds a table of another layout, or something else in the root.
    #[error("root {root} of the heap holds no cxlkv table (magic {magic:#x})")]
    NotATable {
        /// The root.
        root: usize,
        /// What was found where the magic word should be.
        magic: u64,
    },
    /// A bucket count outside 4 ..= 30 (log2).
    #[error("buckets_log2 {0} outside 4..=30")]
    Buckets(u32),
    /// A worker index at or above the table's worker slots.
    #[error("worker index {0} at or above {max}", max = crate::layout::MAX_WORKERS)]
    WorkerIndex(usize),
    /// No thread slot could be leased.
    #[error("attach: {0}")]
    Attach(#[from] AttachError),
    /// The dead worker's thread slot could not be adopted.
    #[error("adopt: {0}")]
    Adopt(#[from] AdoptError),
    /// The allocator refused an allocation.
    #[error("allocation: {0}")]
    Alloc(#[from] AllocError),
    /// The allocator refused a free (a corrupt offset).
    #[error("free: {0}")]
    Free(#[from] FreeError),
    /// The memory limit is reached and eviction could not make room.
    #[error("out of memory storing object")]
    OutOfMemory,
    /// A value above the largest item (or above the whole memory limit).
    #[error("object too large for cache ({0} bytes)")]
    TooLarge(usize),
    /// A key's bucket holds more items than a bucket may.
    #[error("bucket full ({} items)", crate::layout::MAX_BUCKET)]
    BucketFull,
    /// An offset read from the heap is outside its data or misaligned (left by a bug or a
    /// corrupted heap).
    #[error("corrupt {what} at offset {off:#x}")]
    Corrupt {
        /// What the offset should have named.
        what: &'static str,
        /// The offset.
        off: u64,
    },
}
