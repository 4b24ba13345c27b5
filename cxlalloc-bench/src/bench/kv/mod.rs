//! The KV store the YCSB and memcached benchmarks run on (docs/design.md §12.2): a fixed-size,
//! lock-free, chained hash table whose bucket words live in the run's control area and hold
//! block handles, so threads of every worker process share one table.
//!
//! # Layout
//!
//! - Control area ([`Kv`]): the global epoch, one announcement line per thread ([`ebr`]), then
//!   `2^buckets_log2` bucket words, each the handle of its chain's first [`node::Node`] (0 =
//!   empty).
//! - Allocator under test: nodes, keys and values are separate blocks. A value is an 8-byte
//!   header plus the body ([`value`]); an empty trace value still gets its header.
//!
//! # Operations ([`KvThread`])
//!
//! - **insert** of an absent key CASes a new node onto its bucket's head. When the CAS fails,
//!   the nodes that won the race are checked for the same key; if one has it, the unused node
//!   and key are freed (never published) and the operation becomes a replace on that node.
//! - **replace** swaps the node's value word and retires the old value.
//! - **delete** swaps the value word to 0 (a tombstone) and retires the old value; a lookup
//!   that finds a tombstone is a miss, and a later insert of the key reuses the node.
//! - **get** looks the key up and checks every value byte ([`value::verify`]).
//!
//! Nodes stay in their chain until tear-down. Unlinking a node under lock-free concurrency
//! needs marked next links (Harris) or hazard pointers to keep a concurrent insert from
//! linking behind a removed node; tombstones avoid both, and the memory they keep is bounded by
//! the key space (one node and key per key ever inserted), which the benchmarks fix.
//!
//! Only values are reclaimed while the table is in use, through [`ebr`]: a thread pins around
//! each operation, so a value a reader found stays allocated until the reader is done.
//!
//! # Tear-down
//!
//! After the timed phase and a barrier, every thread frees what it still has retired
//! ([`KvThread::free_retired`]); after another barrier, thread `t` of `n` frees the nodes,
//! keys and values of buckets `i ≡ t (mod n)` ([`KvThread::teardown`]). Each thread counts
//! blocks it allocated and freed; over the run the sums match.

pub mod dist;
pub mod ebr;
pub mod node;
mod table;
pub mod value;

pub use table::{KvThread, Resize};

use std::sync::atomic::AtomicU64;

use self::ebr::Epochs;
use crate::shm::Carver;
use crate::Error;

/// Largest `buckets_log2` accepted (2^30 bucket words = 8 GiB of control area).
pub const MAX_BUCKETS_LOG2: u32 = 30;

/// Bucket count of the paper's runs.
pub const PAPER_BUCKETS_LOG2: u32 = 25;

/// The table's shared words, carved from a control area identically in every process.
#[derive(Clone, Copy, Debug)]
pub struct Kv<'a> {
    buckets: &'a [AtomicU64],
    epochs: Epochs<'a>,
}

impl<'a> Kv<'a> {
    /// The sizes [`Kv::carve`] takes, in order, for a table shared by `threads` threads
    /// (feed them to [`Carver::words_for`]).
    pub fn word_sizes(threads: usize, buckets_log2: u32) -> [usize; 3] {
        [1, Epochs::announce_words(threads), 1usize << buckets_log2.min(MAX_BUCKETS_LOG2)]
    }

    /// Carves the table for `threads` threads and `2^buckets_log2` buckets.
    pub fn carve(carver: &mut Carver<'a>, threads: usize, buckets_log2: u32) -> Result<Self, Error> {
        if buckets_log2 > MAX_BUCKETS_LOG2 {
            return Err(format!("kv: buckets_log2 {buckets_log2} above {MAX_BUCKETS_LOG2}").into());
        }
        if threads == 0 {
            return Err("kv: needs at least one thread".into());
        }
        let [global, announce, buckets] = Self::word_sizes(threads, buckets_log2);
        let global = &carver.take(global)?[0];
        let epochs = Epochs::new(global, carver.take(announce)?)?;
        Ok(Self { buckets: carver.take(buckets)?, epochs })
    }

    /// The reclamation state.
    pub fn epochs(&self) -> Epochs<'a> {
        self.epochs
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    #[inline]
    fn bucket(&self, hash: u64) -> &'a AtomicU64 {
        // The bucket count is a power of two; the hash's low bits are well mixed (see
        // `hash_key`).
        &self.buckets[hash as usize & (self.buckets.len() - 1)]
    }
}

/// The hash of a key: 8 bytes at a time through a multiply-rotate, finished with a full
/// avalanche so the low bits (the bucket) and the top 16 bits (a value's check) both depend on
/// every key byte.
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    const M: u64 = 0x9fb2_1c65_1e98_df25;
    let mut h = 0x243f_6a88_85a3_08d3 ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(M).rotate_left(29);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    dist::mix64(h ^ u64::from_le_bytes(tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hashes_depend_on_every_byte_and_the_length() {
        let base = hash_key(b"0123456789abcdefXYZ");
        for i in 0..19 {
            let mut k = b"0123456789abcdefXYZ".to_vec();
            k[i] ^= 1;
            assert_ne!(hash_key(&k), base, "byte {i}");
        }
        assert_ne!(hash_key(b"ab"), hash_key(b"ab\0"));
    }

    #[test]
    fn carving_gives_every_process_the_same_layout() {
        let sizes = Kv::word_sizes(3, 6);
        let words: Vec<AtomicU64> = (0..Carver::words_for(&sizes)).map(|_| AtomicU64::new(0)).collect();
        let a = Kv::carve(&mut Carver::new(&words), 3, 6).unwrap();
        let b = Kv::carve(&mut Carver::new(&words), 3, 6).unwrap();
        assert_eq!(a.buckets.as_ptr(), b.buckets.as_ptr());
        assert_eq!((a.buckets(), a.epochs().threads()), (64, 3));
        assert!(Kv::carve(&mut Carver::new(&words), 3, 7).is_err(), "too small an area is an error");
    }
}
