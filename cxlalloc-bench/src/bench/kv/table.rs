//! One thread's operations on the shared table (see the module docs of [`super`]).

use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::ebr::Participant;
use super::node::{self, Node, NODE_SIZE};
use super::{hash_key, value, Kv};
use crate::allocator::{Handles, ThreadAlloc};
use crate::Error;

/// Longest chain walk before the table is called corrupt (a cycle left by a bug or a crashed
/// writer would otherwise hang the reader). Far above any real chain: 2^24 nodes in one bucket.
const MAX_CHAIN: u64 = 1 << 24;

/// The body length of a replacement value, given the current one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resize {
    /// Exactly this many bytes (`replace`, `cas`).
    To(u32),
    /// The old length plus this many bytes (`append`, `prepend`).
    Grow(u32),
    /// The old length (`incr`, `decr`: the number is rewritten in place of the old one).
    Keep,
}

impl Resize {
    fn apply(self, old: u32) -> u32 {
        match self {
            Resize::To(n) => n,
            Resize::Grow(n) => old.saturating_add(n),
            Resize::Keep => old,
        }
    }
}

/// What an insert does when a racing insert of the same key won.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnExisting {
    /// Replace the winner's value (set).
    Replace,
    /// Store only if the winner's value word is empty (add).
    IfAbsent,
}

/// A thread's handle on the table: its allocator handle, its reclamation slot and its counts.
pub struct KvThread<'a, T: ThreadAlloc> {
    kv: Kv<'a>,
    handles: Handles,
    alloc: &'a mut T,
    ebr: Participant<'a>,
    stamp: u16,
    /// Blocks this thread allocated.
    pub allocated: u64,
    /// Blocks this thread freed.
    pub freed: u64,
    /// Values this thread read and checked byte for byte.
    pub verified: u64,
}

impl<T: ThreadAlloc> std::fmt::Debug for KvThread<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvThread")
            .field("allocated", &self.allocated)
            .field("freed", &self.freed)
            .field("verified", &self.verified)
            .field("retired", &self.ebr.pending())
            .finish_non_exhaustive()
    }
}

impl<'a, T: ThreadAlloc> KvThread<'a, T> {
    /// Thread `thread` (global id, `< ` the table's thread count) on `kv`, allocating through
    /// `alloc`, whose blocks `handles` converts.
    pub fn new(kv: Kv<'a>, handles: Handles, alloc: &'a mut T, thread: usize) -> Result<Self, Error> {
        let ebr = Participant::new(kv.epochs(), thread)?;
        // Different threads start their stamps apart so their rewrites of one key differ.
        let stamp = (thread as u16).wrapping_mul(0x9e37);
        Ok(Self { kv, handles, alloc, ebr, stamp, allocated: 0, freed: 0, verified: 0 })
    }

    /// Values retired and not yet freed.
    pub fn retired(&self) -> usize {
        self.ebr.pending()
    }

    /// Looks `key` up and checks its value; `Some(body length)` on a hit.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<u32>, Error> {
        let hash = hash_key(key);
        self.pinned(|s| {
            let Some(node) = s.find(hash, key)?.0 else { return Ok(None) };
            // SeqCst: orders this load after the pin (see `ebr`); Acquire for the value body.
            let v = node.value.load(Ordering::SeqCst);
            if v == 0 {
                return Ok(None);
            }
            let block = node::block(s.handles, v, "value")?;
            // SAFETY: `v` was published in a node and we are pinned: it stays allocated.
            let header = unsafe { value::verify(block, hash) }?;
            s.verified += 1;
            Ok(Some(header.len))
        })
    }

    /// Stores a fresh `len`-byte value under `key`, inserting the key if absent; returns
    /// whether a live value was replaced.
    pub fn set(&mut self, key: &[u8], len: u32) -> Result<bool, Error> {
        let hash = hash_key(key);
        self.pinned(|s| {
            let v = s.new_value(hash, len)?;
            match s.find(hash, key)? {
                (Some(node), _) => s.replace_value(node, v),
                (None, head) => s.insert(hash, key, v, head, OnExisting::Replace),
            }
        })
    }

    /// Stores a fresh `len`-byte value only if `key` has none (memcached `add`); returns
    /// whether it was stored.
    pub fn add(&mut self, key: &[u8], len: u32) -> Result<bool, Error> {
        let hash = hash_key(key);
        self.pinned(|s| {
            let v = s.new_value(hash, len)?;
            match s.find(hash, key)? {
                (Some(node), _) => s.store_if_absent(node, v),
                (None, head) => s.insert(hash, key, v, head, OnExisting::IfAbsent),
            }
        })
    }

    /// Replaces `key`'s value with a fresh one sized by `resize`, only if it has one; returns
    /// whether it was stored.
    pub fn replace(&mut self, key: &[u8], resize: Resize) -> Result<bool, Error> {
        let hash = hash_key(key);
        self.pinned(|s| {
            let Some(node) = s.find(hash, key)?.0 else { return Ok(false) };
            loop {
                let old = node.value.load(Ordering::SeqCst);
                if old == 0 {
                    return Ok(false);
                }
                // SAFETY: published and we are pinned.
                let old_len = unsafe { value::header(node::block(s.handles, old, "value")?) }.len;
                let v = s.new_value(hash, resize.apply(old_len))?;
                // No ABA on `old`: we are pinned, so it cannot be freed and handed out again.
                match node.value.compare_exchange(old, v, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => {
                        s.retire(old)?;
                        return Ok(true);
                    }
                    // SAFETY: `v` was never published.
                    Err(_) => unsafe { s.free_value(v)? },
                }
            }
        })
    }

    /// Deletes `key` (tombstones its node); returns whether it had a value.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        let hash = hash_key(key);
        self.pinned(|s| {
            let Some(node) = s.find(hash, key)?.0 else { return Ok(false) };
            let old = node.value.swap(0, Ordering::SeqCst);
            if old != 0 {
                s.retire(old)?;
            }
            Ok(old != 0)
        })
    }

    /// Frees every value this thread retired. Call only once no thread of any process uses the
    /// table any more (after the stop barrier).
    pub fn free_retired(&mut self) -> Result<(), Error> {
        let pending: Vec<_> = self.ebr.drain_all().collect();
        for r in pending {
            self.free_block(r.handle, r.size)?;
        }
        Ok(())
    }

    /// Frees the nodes, keys and values of buckets `i ≡ part (mod parts)` and empties them.
    /// Call only once no thread uses the table (after a barrier that follows
    /// [`KvThread::free_retired`] on every thread).
    pub fn teardown(&mut self, part: usize, parts: usize) -> Result<(), Error> {
        if parts == 0 || part >= parts {
            return Err(format!("kv teardown: part {part} of {parts}").into());
        }
        let kv = self.kv;
        for bucket in kv.buckets.iter().skip(part).step_by(parts) {
            // Acquire: the chain's nodes were published by other threads' Release CASes (the
            // barriers before tear-down order them too; this keeps the walk sound on its own).
            let mut h = bucket.swap(0, Ordering::Acquire);
            let mut steps = 0u64;
            while h != 0 {
                steps += 1;
                if steps > MAX_CHAIN {
                    return Err("kv teardown: chain longer than 2^24 nodes (corrupt)".into());
                }
                // SAFETY: a published node; nobody else uses the table now, and this thread is
                // the only one tearing this bucket down.
                let n = unsafe { node::node(self.handles, h) }?;
                let (next, key, key_len) = (n.next.load(Ordering::Relaxed), n.key, n.key_len);
                let v = n.value.load(Ordering::Acquire);
                if v != 0 {
                    // SAFETY: the node's live value; unreachable once the bucket is emptied.
                    unsafe { self.free_value(v)? };
                }
                self.free_block(key, key_len as usize)?;
                self.free_block(h, NODE_SIZE)?;
                h = next;
            }
        }
        Ok(())
    }

    /// Counts nodes and live values (a read-only walk, for tests and checks; safe while others
    /// operate, since nodes are never freed before tear-down).
    pub fn census(&self) -> Result<(u64, u64), Error> {
        let (mut nodes, mut values) = (0, 0);
        for bucket in self.kv.buckets {
            let mut h = bucket.load(Ordering::Acquire);
            while h != 0 {
                // SAFETY: a published node; the table is not being torn down.
                let n = unsafe { node::node(self.handles, h) }?;
                nodes += 1;
                // Relaxed: a count, not a dereference.
                values += u64::from(n.value.load(Ordering::Relaxed) != 0);
                h = n.next.load(Ordering::Relaxed);
                if nodes > MAX_CHAIN * self.kv.buckets() as u64 {
                    return Err("kv census: more nodes than chains can hold (corrupt)".into());
                }
            }
        }
        Ok((nodes, values))
    }

    /// Runs `op` pinned, then advances the epoch and frees what has become free (unpinned:
    /// a pinned thread's own announcement would hold the epoch back).
    #[inline]
    fn pinned<R>(&mut self, op: impl FnOnce(&mut Self) -> Result<R, Error>) -> Result<R, Error> {
        self.ebr.pin();
        let result = op(self);
        self.ebr.unpin();
        self.ebr.maybe_advance();
        while let Some(r) = self.ebr.reclaimable() {
            self.free_block(r.handle, r.size)?;
        }
        result
    }

    /// The node holding `key`, and the bucket head the search started from (an insert CASes
    /// against it, so nodes added since are exactly those it must re-check).
    fn find(&self, hash: u64, key: &[u8]) -> Result<(Option<&'a Node>, u64), Error> {
        // Acquire: pairs with the Release of the CAS that published the head node.
        let head = self.kv.bucket(hash).load(Ordering::Acquire);
        Ok((self.scan(head, 0, hash, key)?, head))
    }

    /// Searches the chain from `from` up to (not including) `until` for `key`.
    fn scan(&self, from: u64, until: u64, hash: u64, key: &[u8]) -> Result<Option<&'a Node>, Error> {
        let mut h = from;
        let mut steps = 0u64;
        while h != until {
            if h == 0 {
                return Err(format!("kv: chain ended before reaching node {until:#x} (corrupt)").into());
            }
            steps += 1;
            if steps > MAX_CHAIN {
                return Err("kv: chain longer than 2^24 nodes (corrupt or cyclic)".into());
            }
            // SAFETY: `h` came from a bucket word or a published node's next link, loaded
            // with Acquire (or published before its predecessor); nodes live until tear-down.
            let n = unsafe { node::node(self.handles, h) }?;
            if n.hash == hash && n.key_len == key.len() as u64 && self.key_bytes(n)? == key {
                return Ok(Some(n));
            }
            // Relaxed: `next` was written before the node was published, which the Acquire
            // that reached this node already ordered.
            h = n.next.load(Ordering::Relaxed);
        }
        Ok(None)
    }

    fn key_bytes(&self, n: &Node) -> Result<&'a [u8], Error> {
        let p = self.handles.block(n.key).ok_or("corrupt key link: null")?;
        // SAFETY: the key block is `key_len` bytes, written before the node was published and
        // never changed or freed before tear-down.
        Ok(unsafe { std::slice::from_raw_parts(p.as_ptr(), n.key_len as usize) })
    }

    /// Publishes a new node for `key` holding value `v`, expecting the bucket head `head`.
    /// Returns whether a live value was replaced (set) / whether `v` was stored (add).
    fn insert(&mut self, hash: u64, key: &[u8], v: u64, mut head: u64, on: OnExisting) -> Result<bool, Error> {
        if key.is_empty() {
            // SAFETY: `v` was never published.
            unsafe { self.free_value(v)? };
            return Err("kv: empty key".into());
        }
        let key_block = self.alloc_block(key.len())?;
        // SAFETY: a fresh block of `key.len()` bytes, not overlapping `key`.
        unsafe { std::ptr::copy_nonoverlapping(key.as_ptr(), key_block.as_ptr(), key.len()) };
        let node_block = match self.alloc_block(NODE_SIZE) {
            Ok(b) => b,
            Err(e) => {
                self.free_block(self.handles.handle(key_block), key.len())?;
                return Err(e);
            }
        };
        let node = Node {
            next: head.into(),
            key: self.handles.handle(key_block),
            key_len: key.len() as u64,
            hash,
            value: v.into(),
        };
        // SAFETY: a fresh, private, 8-aligned block of NODE_SIZE bytes.
        let new = unsafe {
            node_block.cast::<Node>().write(node);
            node_block.cast::<Node>().as_ref()
        };
        let new_h = self.handles.handle(node_block);
        let bucket = self.kv.bucket(hash);
        loop {
            // Release on success: publishes the node, its key and its value body. Acquire on
            // failure: the winners' nodes are read next.
            match bucket.compare_exchange(head, new_h, Ordering::AcqRel, Ordering::Acquire) {
                // Nothing was replaced (set); the value was stored (add).
                Ok(_) => return Ok(on == OnExisting::IfAbsent),
                Err(now) => {
                    if let Some(winner) = self.scan(now, head, hash, key)? {
                        // The key went in meanwhile: ours was never published, free it.
                        self.free_block(new_h, NODE_SIZE)?;
                        self.free_block(self.handles.handle(key_block), key.len())?;
                        return match on {
                            OnExisting::Replace => self.replace_value(winner, v),
                            OnExisting::IfAbsent => self.store_if_absent(winner, v),
                        };
                    }
                    head = now;
                    // Relaxed: still private; the next CAS publishes it.
                    new.next.store(head, Ordering::Relaxed);
                }
            }
        }
    }

    /// Swaps `v` into `node`, retiring the old value; returns whether there was one.
    fn replace_value(&mut self, node: &Node, v: u64) -> Result<bool, Error> {
        // SeqCst: publishes `v`'s body (Release), reads the old one's header (Acquire), and
        // takes part in the reclamation order.
        let old = node.value.swap(v, Ordering::SeqCst);
        if old != 0 {
            self.retire(old)?;
        }
        Ok(old != 0)
    }

    /// Stores `v` in `node` only if its value word is empty; frees `v` otherwise.
    fn store_if_absent(&mut self, node: &Node, v: u64) -> Result<bool, Error> {
        match node.value.compare_exchange(0, v, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => Ok(true),
            Err(_) => {
                // SAFETY: `v` was never published.
                unsafe { self.free_value(v)? };
                Ok(false)
            }
        }
    }

    /// Retires value `v`, just unlinked by this (pinned) thread.
    fn retire(&mut self, v: u64) -> Result<(), Error> {
        // SAFETY: we are pinned and unlinked `v` ourselves: nobody frees it before us.
        let size = unsafe { value::header(node::block(self.handles, v, "value")?) }.block_size();
        self.ebr.retire(v, size);
        Ok(())
    }

    /// Allocates and fills a value with a `len`-byte body for the key hashing to `hash`.
    fn new_value(&mut self, hash: u64, len: u32) -> Result<u64, Error> {
        let block = self.alloc_block(value::block_size(len))?;
        self.stamp = self.stamp.wrapping_add(1);
        // SAFETY: a fresh private block of `block_size(len) ≥ 8` bytes, hence 8-aligned.
        unsafe { value::fill(block, hash, len, self.stamp) };
        Ok(self.handles.handle(block))
    }

    /// Frees value `v`, reading its size from its header.
    ///
    /// # Safety
    ///
    /// `v` is a value block nobody else can reach or free (never published, or unreachable).
    unsafe fn free_value(&mut self, v: u64) -> Result<(), Error> {
        // SAFETY: caller's contract.
        let size = unsafe { value::header(node::block(self.handles, v, "value")?) }.block_size();
        self.free_block(v, size)
    }

    fn alloc_block(&mut self, size: usize) -> Result<NonNull<u8>, Error> {
        let b = self.alloc.alloc(size)?;
        self.allocated += 1;
        Ok(b)
    }

    /// Frees block `h` of `size` bytes. Callers own the block: it is unreachable by every
    /// other thread (never published, reclaimed by the epoch protocol, or torn down).
    fn free_block(&mut self, h: u64, size: usize) -> Result<(), Error> {
        let p = self.handles.block(h).ok_or("kv: freeing a null block")?;
        // SAFETY: allocated with `size` bytes by a handle of this allocator (sizes are
        // recorded in node/value headers); the caller owns it, so it is freed exactly once.
        unsafe { self.alloc.free(p, size) }?;
        self.freed += 1;
        Ok(())
    }
}
