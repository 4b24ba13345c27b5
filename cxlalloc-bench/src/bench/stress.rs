//! Pieces the stress benchmarks ([`super::xmalloc`], [`super::larson`], [`super::mstress`])
//! share: a seeded random stream, the stamp every object carries, waiting on another thread with
//! back-off, and splitting a fixed amount of work.
//!
//! Objects cross threads and processes as handles, so an object's stamp is keyed by its handle
//! (the same number in every process), never by its address: a stamp written in one process
//! verifies in another.
//!
//! Touch parity: every allocator's objects get exactly the same bytes written and read —
//! [`write_stamp`] and [`check_stamp`] are the only code that touches object memory.

use std::ops::RangeInclusive;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Report;
use crate::allocator::ThreadAlloc;
use crate::Error;

/// The largest object the stress benchmarks allocate: cxlalloc's largest size class (larger
/// requests are not supported by it yet, and every allocator must run the same sizes).
pub const MAX_OBJECT: usize = 512 << 10;

/// Bytes of an object covered by its stamp: the first `min(size, STAMP_BYTES)`.
pub const STAMP_BYTES: usize = 64;

/// Beyond the stamp, one word at the start of every further page of this many bytes is written,
/// so a large object's pages are really used, as a program would use them.
pub const PAGE: usize = 4096;

/// How long one wait on another thread may last before the run is declared stuck (a peer
/// process died, or a bug): far beyond any healthy wait, which lasts microseconds.
pub const STALL: Duration = Duration::from_secs(60);

/// 2^64 / φ: the SplitMix64 increment, also used to spread stamp words.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finalizer: a bijective, well-mixing function of 64 bits.
#[inline(always)]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A deterministic random stream (SplitMix64): the same `(seed, stream)` always gives the same
/// numbers, in every process, so a run depends only on its parameters.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// Stream number `stream` of seed `seed` (nearby stream numbers give unrelated streams).
    pub fn new(seed: u64, stream: u64) -> Self {
        Self { state: seed ^ mix(stream.wrapping_add(GOLDEN)) }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix(self.state)
    }

    /// Uniform in `0..n` (`n >= 1`), by a 128-bit multiply (bias below n / 2^64).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi` (`lo <= hi < u64::MAX`).
    #[inline]
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `1 / n`.
    #[inline]
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// Part `index` of `total` split as evenly as possible into `parts` parts (the first
/// `total % parts` parts get one more).
pub fn share(total: u64, parts: usize, index: usize) -> u64 {
    let parts = parts.max(1) as u64;
    total / parts + u64::from((index as u64) < total % parts)
}

/// The stamp's first word for object `handle` of `size` bytes; word `i` is this plus `i`·φ.
/// The size can be read back from the first word given the handle ([`stamped_size`]).
#[inline(always)]
fn stamp_key(handle: u64, size: usize) -> u64 {
    mix(handle) ^ size as u64
}

/// Word `i` of a stamp whose first word is `key`.
#[inline(always)]
fn stamp_word(key: u64, i: usize) -> u64 {
    key.wrapping_add((i as u64).wrapping_mul(GOLDEN))
}

/// Writes the stamp of object `handle` (`size` bytes at `ptr`): the first `min(size, 64)`
/// bytes, then one word at the start of every further 4 KiB page.
///
/// # Safety
///
/// `ptr` is valid for writes of `size` bytes.
#[inline]
pub unsafe fn write_stamp(ptr: NonNull<u8>, handle: u64, size: usize) {
    let p = ptr.as_ptr();
    let key = stamp_key(handle, size);
    let n = size.min(STAMP_BYTES);
    for i in 0..n / 8 {
        // SAFETY: word `i` lies within the first `n <= size` bytes; unaligned writes are allowed.
        unsafe { p.add(8 * i).cast::<u64>().write_unaligned(stamp_word(key, i)) };
    }
    let tail = stamp_word(key, n / 8).to_le_bytes();
    for (j, &b) in tail.iter().enumerate().take(n % 8) {
        // SAFETY: byte `n / 8 * 8 + j < n <= size`.
        unsafe { p.add(n / 8 * 8 + j).write(b) };
    }
    let mut page = PAGE;
    while page + 8 <= size {
        // SAFETY: `page + 8 <= size`.
        unsafe { p.add(page).cast::<u64>().write_unaligned(key) };
        page += PAGE;
    }
}

/// Whether the first `min(size, 64)` bytes at `ptr` hold the stamp [`write_stamp`] writes for
/// object `handle` of `size` bytes. (The page words are written, not checked: checking them
/// would fault in nothing new and cost a cache miss per page.)
///
/// # Safety
///
/// `ptr` is valid for reads of `size` bytes.
#[inline]
pub unsafe fn check_stamp(ptr: NonNull<u8>, handle: u64, size: usize) -> bool {
    let p = ptr.as_ptr();
    let key = stamp_key(handle, size);
    let n = size.min(STAMP_BYTES);
    let mut diff = 0u64;
    for i in 0..n / 8 {
        // SAFETY: as in `write_stamp`.
        diff |= unsafe { p.add(8 * i).cast::<u64>().read_unaligned() } ^ stamp_word(key, i);
    }
    let tail = stamp_word(key, n / 8).to_le_bytes();
    for (j, &b) in tail.iter().enumerate().take(n % 8) {
        // SAFETY: as in `write_stamp`.
        diff |= u64::from(unsafe { p.add(n / 8 * 8 + j).read() } ^ b);
    }
    diff == 0
}

/// The size recorded in the stamp of object `handle` at `ptr` — meaningful only when the object
/// is at least 8 bytes and stamped; confirm it with [`check_stamp`] before trusting it.
///
/// # Safety
///
/// `ptr` is valid for reads of 8 bytes.
#[inline]
pub unsafe fn stamped_size(ptr: NonNull<u8>, handle: u64) -> u64 {
    // SAFETY: by the caller's contract.
    let first = unsafe { ptr.as_ptr().cast::<u64>().read_unaligned() };
    first ^ mix(handle)
}

/// Verifies the stamp of object `h` at `p`, whose size the stamp itself records (it must lie in
/// `sizes`), then frees it; counts it in `report.verified` and `report.freed`.
///
/// # Safety
///
/// `p` is a live object of at least 8 bytes, stamped by [`write_stamp`] when it was allocated
/// with the size the stamp records, and the caller is its only owner (it is freed here, once).
pub unsafe fn free_stamped<T: ThreadAlloc>(
    t: &mut T,
    p: NonNull<u8>,
    h: u64,
    sizes: RangeInclusive<usize>,
    report: &mut Report,
) -> Result<(), Error> {
    // SAFETY: by the contract, at least 8 readable bytes.
    let size = unsafe { stamped_size(p, h) } as usize;
    // SAFETY: the check reads `min(size, 64)` bytes; an in-range size is the object's own
    // unless the object is corrupt, and then the run fails on this very check.
    if !sizes.contains(&size) || !unsafe { check_stamp(p, h, size) } {
        return Err(corrupt(h, size));
    }
    report.verified += 1;
    // SAFETY: allocated with `size` (its stamp says so), owned only by the caller.
    unsafe { t.free(p, size)? };
    report.freed += 1;
    Ok(())
}

/// The error for an object whose stamp does not read back.
pub fn corrupt(handle: u64, size: usize) -> Error {
    format!("object {handle:#x} of {size} bytes does not read back as written").into()
}

/// Marks the run as failed in its abort word ([`super::Phases::abort_word`]), so peers waiting
/// in [`Backoff::snooze`] and at the phase barriers give up instead of waiting for a thread
/// that has left.
fn raise(abort: &AtomicU64) {
    // Relaxed: a flag with no data behind it; waiters poll it.
    abort.store(1, Ordering::Relaxed);
}

/// Waiting for another thread (a full or empty queue, a hand-over): spins briefly, then yields
/// (runs with more threads than cores need the waiter off the core), and fails when the run was
/// aborted or the wait outlasts [`STALL`].
#[derive(Debug)]
pub struct Backoff<'a> {
    abort: &'a AtomicU64,
    step: u32,
    since: Option<Instant>,
}

/// Snoozes that spin before the first yield.
const SPINS: u32 = 64;

impl<'a> Backoff<'a> {
    /// A fresh wait, watching the run's abort word `abort` ([`super::Phases::abort_word`]).
    pub fn new(abort: &'a AtomicU64) -> Self {
        Self { abort, step: 0, since: None }
    }

    /// Whether this wait has snoozed at all since it was made or reset.
    pub fn waited(&self) -> bool {
        self.step > 0
    }

    /// Starts a new wait.
    pub fn reset(&mut self) {
        self.step = 0;
        self.since = None;
    }

    /// Waits a little; fails if the run was aborted or this wait is stuck.
    pub fn snooze(&mut self) -> Result<(), Error> {
        // Relaxed: see `raise`.
        if self.abort.load(Ordering::Relaxed) != 0 {
            return Err("aborted: another benchmark thread failed".into());
        }
        self.step = self.step.saturating_add(1);
        if self.step <= SPINS {
            std::hint::spin_loop();
            return Ok(());
        }
        std::thread::yield_now();
        // Reading the clock costs more than a yield: look only every 256 snoozes.
        if self.step % 256 == 0 {
            let since = *self.since.get_or_insert_with(Instant::now);
            if since.elapsed() > STALL {
                raise(self.abort);
                return Err(format!("a wait on another thread exceeded {STALL:?}; is a peer process dead?").into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_reads_back_and_any_changed_byte_shows() {
        let mut buf = vec![0u8; 2 * PAGE + 64];
        let ptr = NonNull::new(buf.as_mut_ptr()).unwrap();
        for size in [1, 7, 8, 12, 64, 100, 2 * PAGE + 64] {
            // SAFETY: `buf` holds `size` bytes.
            unsafe { write_stamp(ptr, 0x40, size) };
            // SAFETY: as above.
            assert!(unsafe { check_stamp(ptr, 0x40, size) }, "{size}");
            // SAFETY: as above.
            assert!(!unsafe { check_stamp(ptr, 0x48, size) }, "{size}: another handle's stamp");
            if size >= 8 {
                // SAFETY: as above.
                assert_eq!(unsafe { stamped_size(ptr, 0x40) }, size as u64);
            }
            let last = size.min(STAMP_BYTES) - 1;
            buf[last] ^= 1;
            // SAFETY: as above.
            assert!(!unsafe { check_stamp(ptr, 0x40, size) }, "{size}: byte {last} flipped");
        }
    }

    #[test]
    fn a_stamp_touches_every_page_of_a_large_object() {
        let mut buf = vec![0u8; 3 * PAGE];
        let ptr = NonNull::new(buf.as_mut_ptr()).unwrap();
        // SAFETY: `buf` holds `3 * PAGE` bytes.
        unsafe { write_stamp(ptr, 0x1000, 3 * PAGE) };
        assert!(buf[PAGE..PAGE + 8].iter().any(|&b| b != 0) && buf[2 * PAGE..2 * PAGE + 8].iter().any(|&b| b != 0));
        assert!(buf[STAMP_BYTES..PAGE].iter().all(|&b| b == 0), "only the stamp and one word per page");
    }

    #[test]
    fn streams_are_deterministic_and_distinct() {
        let take = |seed, stream| {
            let mut r = Rng::new(seed, stream);
            (0..100).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(take(1, 2), take(1, 2));
        assert_ne!(take(1, 2), take(1, 3));
        assert_ne!(take(1, 2), take(2, 2));
        let mut r = Rng::new(5, 0);
        assert!((0..10_000).map(|_| r.range(3, 9)).all(|x| (3..=9).contains(&x)));
    }

    #[test]
    fn work_is_split_evenly() {
        assert_eq!((0..3).map(|i| share(10, 3, i)).collect::<Vec<_>>(), [4, 3, 3]);
        assert_eq!(share(5, 0, 0), 5);
    }

    #[test]
    fn a_raised_abort_word_ends_a_wait() {
        let abort = AtomicU64::new(0);
        let mut b = Backoff::new(&abort);
        assert!(b.snooze().is_ok() && b.waited());
        raise(&abort);
        assert!(b.snooze().is_err());
    }
}
