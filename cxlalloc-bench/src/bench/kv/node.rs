//! Chain nodes of the hash table, and the one checked way from a link (a block handle) to a
//! node.

use std::mem::{align_of, offset_of, size_of};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::allocator::Handles;
use crate::Error;

/// One key of the table: a block of the allocator under test, reached from a bucket word or
/// another node's `next` by handle.
///
/// Lives in allocator memory (shared data; any process reads it through atomics or after an
/// Acquire of the link that published it). Nodes are never unlinked or freed while the table
/// is in use — a deleted key keeps its node with a zero value word (see the table's docs) — so
/// a reader needs no protection to walk a chain.
///
/// Accounting: every node owns exactly one key block (`key_len` bytes) and at most one value
/// block (its value word, 0 = none).
#[repr(C)]
#[derive(Debug)]
pub struct Node {
    // Written by the inserting thread before the bucket CAS that publishes the node (it may be
    // rewritten while a CAS retries, while still private); read-only once published.
    /// Handle of the next node of the chain (0 = end).
    pub next: AtomicU64,
    /// Handle of the key block.
    pub key: u64,
    /// Key length in bytes (the key block's size).
    pub key_len: u64,
    /// The key's hash (compared before the key bytes).
    pub hash: u64,

    // Written by any thread of any process, by swap or CAS (SeqCst: the reclamation proof
    // orders these against pins); read by lookups.
    /// Handle of the current value block; 0 = the key is absent (never set, or deleted).
    pub value: AtomicU64,
}

/// Bytes a node block is allocated with.
pub const NODE_SIZE: usize = size_of::<Node>();

const _: () = assert!(NODE_SIZE == 40 && offset_of!(Node, value) == 32 && align_of::<Node>() == 8);

/// Bytes handles of nodes and values are multiples of (both are allocated with ≥ 8 bytes).
const LINK_ALIGN: u64 = 8;

/// The block a node or value handle names, refusing 0 and misaligned handles: a corrupt link
/// becomes an error rather than a wild read.
pub fn block(handles: Handles, h: u64, what: &str) -> Result<NonNull<u8>, Error> {
    if h % LINK_ALIGN != 0 {
        return Err(format!("corrupt {what} link {h:#x}: not 8-aligned").into());
    }
    handles.block(h).ok_or_else(|| format!("corrupt {what} link: null").into())
}

/// The node at handle `h`.
///
/// # Safety
///
/// `h` was published as a node link of a table that is not being torn down: the node stays
/// allocated and its immutable fields unchanged for `'a`.
pub unsafe fn node<'a>(handles: Handles, h: u64) -> Result<&'a Node, Error> {
    let p = block(handles, h, "node")?;
    // SAFETY: caller's contract; the node was fully written before the Release CAS that
    // published `h`, which the caller's Acquire load synchronizes with.
    Ok(unsafe { p.cast::<Node>().as_ref() })
}
