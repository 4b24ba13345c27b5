//! A single-producer single-consumer queue of heap offsets, laid out in a heap block so that
//! threads of different processes can pass blocks to each other (Lamport's ring).
//!
//! A [`Board`] is one heap block: a header followed by an array of [`Ring`]s. Its offset is
//! published in a heap root; every process finds the rings from there. All-zero bytes are a valid
//! empty board apart from the header, which its creator writes before publishing the offset.
//!
//! Coherence: the board lives in slab data, which docs/design.md §2 calls software-coherent. The demo
//! runs only under `Coherence::Full` (the only model the library offers today), where plain
//! atomics are coherent across processes; a SWcc device would need flush/invalidate around each
//! access, which is the library's business, not this queue's.
//!
//! The queue is not protected against misuse from another process (two producers on one ring
//! lose entries; a crashed producer leaves its ring unclosed), but misuse never causes undefined
//! behaviour here: every field is an atomic, and consumers check each offset through
//! [`cxlalloc::Heap::pointer`] before touching the block it names.

use std::sync::atomic::{AtomicU64, Ordering};

use cxlalloc::{Heap, Offset};

use crate::Error;

/// Entries per ring.
pub const RING_SLOTS: usize = 256;

/// `b"OFFRINGS"`, little-endian: marks an initialized board.
pub const BOARD_MAGIC: u64 = u64::from_le_bytes(*b"OFFRINGS");

/// One SPSC ring. Region: slab data (a heap block), read and written by two threads of any
/// processes. `head` and `tail` sit on separate cache lines so the producer and the consumer do
/// not false-share.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Ring {
    /// Entries consumed. Written by the consumer only; read by the producer (to see free space).
    head: AtomicU64,
    _head_line: [u64; 7],
    /// Entries produced. Written by the producer only; read by the consumer.
    tail: AtomicU64,
    /// Non-zero once the producer will push nothing more. Written by the producer only.
    closed: AtomicU64,
    _tail_line: [u64; 6],
    /// Offsets; entry `i` is in `slots[i % RING_SLOTS]`. Written by the producer, read by the
    /// consumer, each slot handed over by `tail` (Release/Acquire) and back by `head`.
    slots: [AtomicU64; RING_SLOTS],
}

const _: () = assert!(std::mem::size_of::<Ring>() == 128 + 8 * RING_SLOTS);
const _: () = assert!(std::mem::offset_of!(Ring, tail) == 64);

impl Ring {
    /// Pushes `offset` (producer only); false when the ring is full.
    pub fn push(&self, offset: u64) -> bool {
        // Relaxed: only this producer writes `tail`.
        let tail = self.tail.load(Ordering::Relaxed);
        // Acquire: pairs with the consumer's Release store of `head`, so its read of the slot we
        // are about to overwrite has happened.
        let head = self.head.load(Ordering::Acquire);
        if tail.wrapping_sub(head) >= RING_SLOTS as u64 {
            return false;
        }
        // Relaxed: the slot is published by the Release store of `tail` below.
        self.slots[(tail % RING_SLOTS as u64) as usize].store(offset, Ordering::Relaxed);
        // Release: publishes the slot and the block contents written before this push; pairs
        // with the Acquire load of `tail` in `pop`.
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        true
    }

    /// Pops the oldest offset (consumer only); `None` when the ring is empty.
    pub fn pop(&self) -> Option<u64> {
        // Relaxed: only this consumer writes `head`.
        let head = self.head.load(Ordering::Relaxed);
        // Acquire: pairs with the Release store in `push`; makes the slot and the block visible.
        let tail = self.tail.load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        // Relaxed: ordered after the Acquire load of `tail` above.
        let offset = self.slots[(head % RING_SLOTS as u64) as usize].load(Ordering::Relaxed);
        // Release: hands the slot back; pairs with the Acquire load of `head` in `push`.
        self.head.store(head.wrapping_add(1), Ordering::Release);
        Some(offset)
    }

    /// Marks the ring closed (producer only, after its last push).
    pub fn close(&self) {
        // Release: a consumer that sees `closed` also sees every earlier push.
        self.closed.store(1, Ordering::Release);
    }

    /// True when the producer closed the ring and every entry has been popped.
    pub fn is_drained(&self) -> bool {
        // Acquire: pairs with `close`; then `tail` below includes the producer's last push.
        let closed = self.closed.load(Ordering::Acquire) != 0;
        closed && self.head.load(Ordering::Relaxed) == self.tail.load(Ordering::Acquire)
    }

    /// Entries pushed and not yet popped (racy snapshot, for reports).
    pub fn len(&self) -> u64 {
        self.tail.load(Ordering::Acquire).wrapping_sub(self.head.load(Ordering::Acquire))
    }

    /// True when [`Ring::len`] is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The board's header. Written once by the creator before the board's offset is published.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct BoardHeader {
    /// [`BOARD_MAGIC`].
    magic: AtomicU64,
    /// Number of rings after the header.
    rings: AtomicU64,
    /// Non-zero once any participant gave up; the others stop waiting for their peers. Written
    /// by any process (store only), read by all.
    abort: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<BoardHeader>() == 64);

/// A board in a heap block: its header and rings, seen from one process.
#[derive(Debug, Clone, Copy)]
pub struct Board<'h> {
    header: &'h BoardHeader,
    rings: &'h [Ring],
}

impl<'h> Board<'h> {
    /// Bytes a board of `rings` rings occupies.
    pub fn bytes(rings: usize) -> usize {
        std::mem::size_of::<BoardHeader>() + rings * std::mem::size_of::<Ring>()
    }

    /// Alignment a board's block needs.
    pub const ALIGN: usize = 64;

    /// Initializes a board in the block at `offset` of `heap` and returns it.
    ///
    /// # Safety
    ///
    /// The block at `offset` is allocated, at least [`Board::bytes`]`(rings)` long, aligned to
    /// [`Board::ALIGN`], and no other thread accesses it until its offset is published (with
    /// Release ordering) after this returns.
    pub unsafe fn init(heap: &'h Heap, offset: u64, rings: usize) -> Result<Self, Error> {
        let base = heap.pointer::<u8>(Offset::from_raw(offset))?;
        // SAFETY: the caller guarantees the block is ours and `bytes(rings)` long; zero bytes
        // are a valid empty ring and header.
        unsafe { base.as_ptr().write_bytes(0, Self::bytes(rings)) };
        let board = Self::locate(heap, offset, rings)?;
        board.header.rings.store(rings as u64, Ordering::Relaxed);
        // Relaxed: the caller publishes the offset with Release, which orders these stores.
        board.header.magic.store(BOARD_MAGIC, Ordering::Relaxed);
        Ok(board)
    }

    /// Opens the board published at `offset` (read from a root with Acquire ordering), which
    /// must have `rings` rings.
    pub fn open(heap: &'h Heap, offset: u64, rings: usize) -> Result<Self, Error> {
        let board = Self::locate(heap, offset, rings)?;
        let magic = board.header.magic.load(Ordering::Relaxed);
        if magic != BOARD_MAGIC {
            return Err(format!("no board at offset {offset:#x} (magic {magic:#x})").into());
        }
        let found = board.header.rings.load(Ordering::Relaxed);
        if found != rings as u64 {
            return Err(format!("board at {offset:#x} has {found} rings, expected {rings}").into());
        }
        Ok(board)
    }

    fn locate(heap: &'h Heap, offset: u64, rings: usize) -> Result<Self, Error> {
        // `Heap::pointer` checks bounds and alignment of the header and of the last ring, so
        // every byte in between lies in the same mapped slab data.
        let header = heap.pointer::<BoardHeader>(Offset::from_raw(offset))?;
        let first = offset + std::mem::size_of::<BoardHeader>() as u64;
        if rings > 0 {
            let last = first + ((rings - 1) * std::mem::size_of::<Ring>()) as u64;
            heap.pointer::<Ring>(Offset::from_raw(last))?;
        }
        let first = heap.pointer::<Ring>(Offset::from_raw(first))?;
        // SAFETY: both pointers were checked by `Heap::pointer` to lie in mapped slab data and
        // be aligned; the range spans whole `Ring`s, which consist of atomics only, so any bytes
        // are valid and shared access is sound. The mapping lives as long as `heap`.
        let (header, rings) = unsafe { (header.as_ref(), std::slice::from_raw_parts(first.as_ptr(), rings)) };
        Ok(Self { header, rings })
    }

    /// Tells every participant to stop waiting for peers (one of them failed).
    pub fn abort(&self) {
        // Relaxed: a flag polled while idle; it orders nothing else.
        self.header.abort.store(1, Ordering::Relaxed);
    }

    /// True once [`Board::abort`] was called by anyone.
    pub fn aborted(&self) -> bool {
        // Relaxed: see `abort`.
        self.header.abort.load(Ordering::Relaxed) != 0
    }

    /// Ring `i`.
    pub fn ring(&self, i: usize) -> Option<&'h Ring> {
        self.rings.get(i)
    }

    /// Number of rings.
    pub fn len(&self) -> usize {
        self.rings.len()
    }

    /// True when the board has no rings.
    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxlalloc::Config;

    fn board_heap() -> (Heap, u64) {
        let heap = Heap::anonymous(&Config::with_capacity(64 << 20)).unwrap();
        let t = heap.attach().unwrap();
        let block = t.alloc_aligned(Board::bytes(3), Board::ALIGN).unwrap();
        let off = heap.offset_of(block.as_ptr()).unwrap().raw();
        // SAFETY: freshly allocated, large and aligned enough, not shared yet.
        unsafe { Board::init(&heap, off, 3).unwrap() };
        (heap, off)
    }

    #[test]
    fn a_ring_is_fifo_and_refuses_pushes_when_full() {
        let (heap, off) = board_heap();
        let ring = Board::open(&heap, off, 3).unwrap().ring(1).unwrap();
        for i in 0..RING_SLOTS as u64 {
            assert!(ring.push(i + 1));
        }
        assert!(!ring.push(999), "full ring accepted a push");
        assert_eq!(ring.len(), RING_SLOTS as u64);
        for i in 0..RING_SLOTS as u64 {
            assert_eq!(ring.pop(), Some(i + 1));
        }
        assert_eq!(ring.pop(), None);
        assert!(!ring.is_drained(), "open ring reported drained");
        ring.close();
        assert!(ring.is_drained());
    }

    #[test]
    fn open_refuses_a_wrong_ring_count_or_an_uninitialized_block() {
        let (heap, off) = board_heap();
        assert!(Board::open(&heap, off, 4).is_err());
        let t = heap.attach().unwrap();
        let other = t.alloc_zeroed(Board::bytes(3)).unwrap();
        let other = heap.offset_of(other.as_ptr()).unwrap().raw();
        assert!(Board::open(&heap, other, 3).is_err());
        assert!(Board::open(&heap, 0, 3).is_err(), "null offset accepted");
    }

    #[test]
    fn every_pushed_offset_arrives_once_in_order_across_threads() {
        let (heap, off) = board_heap();
        let board = Board::open(&heap, off, 3).unwrap();
        let ring = board.ring(2).unwrap();
        const N: u64 = 200_000;
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..=N {
                    while !ring.push(i) {
                        std::hint::spin_loop();
                    }
                }
                ring.close();
            });
            let mut next = 1;
            while !ring.is_drained() {
                if let Some(v) = ring.pop() {
                    assert_eq!(v, next);
                    next += 1;
                }
            }
            assert_eq!(next, N + 1);
        });
    }
}
