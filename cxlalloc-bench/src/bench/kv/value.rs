//! Value blocks: an 8-byte [`Header`] followed by `len` bytes that are a function of the key's
//! hash and the header's stamp, so a reader can check every byte it reads.
//!
//! A value is written once, before the word that publishes it (a node's value word), and never
//! changed afterwards; it is freed only through epoch reclamation. A reader that finds a byte
//! other than the expected one has seen corruption or a block freed and reused under it (a
//! reclamation bug) — both are errors, never a silently wrong benchmark number.
//!
//! Content: byte `j` of the body is byte `j % 8` (little-endian) of the word
//! `seed + (j / 8) · STEP`, where `seed = mix64(hash ^ stamp · SALT)`. An add per 8 bytes keeps
//! filling and checking a 960-byte value far cheaper than the allocation it measures, while two
//! values of different keys or stamps still differ in every word.

use std::ptr::NonNull;

use super::dist::mix64;
use crate::Error;

/// Bytes of the header in front of every value.
pub const HEADER: usize = 8;

/// Word-to-word increment of the body pattern (odd, so 2^64 words pass before it repeats).
const STEP: u64 = 0x9e37_79b9_7f4a_7c15;

/// Spreads the stamp over the seed so that consecutive stamps give unrelated bodies.
const SALT: u64 = 0xd6e8_feb8_6659_fd93;

/// A value block's header word.
///
/// ```text
///  63            48 47            32 31                             0
/// +----------------+----------------+--------------------------------+
/// |  check (u16)   |  stamp (u16)   |           len (u32)            |
/// +----------------+----------------+--------------------------------+
/// ```
///
/// `len` is the body length (the block is `HEADER + len` bytes, which is also the size it is
/// freed with); `stamp` varies per write so rewrites of one key differ; `check` is the top 16
/// bits of the key's hash, so a value attached to the wrong key is caught even when `len` is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Body bytes after the header.
    pub len: u32,
    /// Per-write stamp.
    pub stamp: u16,
    /// Top 16 bits of the key hash.
    pub check: u16,
}

impl Header {
    /// The header of a `len`-byte value of the key hashing to `hash`, written with `stamp`.
    pub fn new(hash: u64, len: u32, stamp: u16) -> Self {
        Self { len, stamp, check: (hash >> 48) as u16 }
    }

    /// The header as its word.
    pub fn pack(self) -> u64 {
        u64::from(self.len) | u64::from(self.stamp) << 32 | u64::from(self.check) << 48
    }

    /// The header in `word`.
    pub fn unpack(word: u64) -> Self {
        Self { len: word as u32, stamp: (word >> 32) as u16, check: (word >> 48) as u16 }
    }

    /// The size of the whole block: what it was allocated and must be freed with.
    pub fn block_size(self) -> usize {
        block_size(self.len)
    }
}

/// Allocation size of a value with a `len`-byte body.
pub fn block_size(len: u32) -> usize {
    HEADER + len as usize
}

fn seed(hash: u64, stamp: u16) -> u64 {
    mix64(hash ^ u64::from(stamp).wrapping_mul(SALT))
}

/// Writes the header and body of a value.
///
/// # Safety
///
/// `block` is valid for writes of [`block_size`]`(len)` bytes and 8-aligned.
pub unsafe fn fill(block: NonNull<u8>, hash: u64, len: u32, stamp: u16) {
    let p = block.as_ptr();
    // SAFETY: the block is 8-aligned and at least HEADER bytes (caller's contract).
    unsafe { p.cast::<u64>().write(Header::new(hash, len, stamp).pack()) };
    let len = len as usize;
    // SAFETY: the body lies within the block.
    let body = unsafe { p.add(HEADER) };
    let mut w = seed(hash, stamp);
    for i in 0..len / 8 {
        // SAFETY: word `i` ends at or before byte `len` of the body.
        unsafe { body.add(8 * i).cast::<u64>().write_unaligned(w) };
        w = w.wrapping_add(STEP);
    }
    for (j, b) in (len / 8 * 8..len).zip(w.to_le_bytes()) {
        // SAFETY: byte `j < len` of the body.
        unsafe { body.add(j).write(b) };
    }
}

/// Reads a value's header.
///
/// # Safety
///
/// `block` is a published value block (8-aligned, at least [`HEADER`] bytes) that cannot be
/// freed during the call (the caller is pinned, or owns it).
pub unsafe fn header(block: NonNull<u8>) -> Header {
    // SAFETY: caller's contract; the header is never written after publication.
    Header::unpack(unsafe { block.as_ptr().cast::<u64>().read() })
}

/// Checks the header and every body byte of the value of the key hashing to `hash`; returns
/// the header.
///
/// # Safety
///
/// As for [`header`]; the body is `header.len` bytes long.
pub unsafe fn verify(block: NonNull<u8>, hash: u64) -> Result<Header, Error> {
    // SAFETY: caller's contract.
    let h = unsafe { header(block) };
    if h.check != (hash >> 48) as u16 {
        return Err(format!("value check failed: header {h:?} does not belong to key hash {hash:#018x}").into());
    }
    let len = h.len as usize;
    // SAFETY: the body follows the header inside the block.
    let body = unsafe { block.as_ptr().add(HEADER) };
    let mut w = seed(hash, h.stamp);
    // Differences are OR-ed together and tested once: no branch per word in the common case.
    let mut diff = 0u64;
    for i in 0..len / 8 {
        // SAFETY: word `i` lies within the body (`len` bytes).
        diff |= unsafe { body.add(8 * i).cast::<u64>().read_unaligned() } ^ w;
        w = w.wrapping_add(STEP);
    }
    for (j, b) in (len / 8 * 8..len).zip(w.to_le_bytes()) {
        // SAFETY: byte `j < len` of the body.
        diff |= u64::from(unsafe { body.add(j).read() } ^ b);
    }
    if diff != 0 {
        return Err(
            format!("value check failed: body of {len}-byte value {h:?} of key hash {hash:#018x} differs").into()
        );
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(len: u32) -> Vec<u64> {
        vec![0u64; block_size(len).div_ceil(8)]
    }

    fn ptr(b: &mut [u64]) -> NonNull<u8> {
        NonNull::from(&mut b[0]).cast()
    }

    #[test]
    fn headers_round_trip() {
        let h = Header::new(0xabcd_0000_0000_0001, 960, 77);
        assert_eq!(Header::unpack(h.pack()), h);
        assert_eq!(h.check, 0xabcd);
        assert_eq!(h.block_size(), 968);
    }

    #[test]
    fn a_filled_value_verifies_and_any_changed_byte_is_caught() {
        for len in [0u32, 1, 7, 8, 13, 960] {
            let mut b = block(len);
            let p = ptr(&mut b);
            // SAFETY: `b` holds block_size(len) bytes, 8-aligned.
            unsafe { fill(p, 42, len, 9) };
            // SAFETY: filled above.
            assert_eq!(unsafe { verify(p, 42) }.unwrap().len, len);
            for j in 0..len as usize {
                // SAFETY: byte HEADER + j lies in the block.
                unsafe { *p.as_ptr().add(HEADER + j) ^= 1 };
                // SAFETY: as above.
                assert!(unsafe { verify(p, 42) }.is_err(), "len {len}, byte {j}");
                // SAFETY: as above.
                unsafe { *p.as_ptr().add(HEADER + j) ^= 1 };
            }
        }
    }

    #[test]
    fn a_value_of_another_key_is_refused() {
        let mut b = block(16);
        let p = ptr(&mut b);
        // SAFETY: `b` holds the block.
        unsafe { fill(p, 1 << 60, 16, 0) };
        // SAFETY: filled above.
        assert!(unsafe { verify(p, 2 << 60) }.is_err());
    }
}
