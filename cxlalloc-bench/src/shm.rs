//! The run's shared control area: one zero-filled file in the run directory that every worker
//! process maps, holding the harness's barrier words and each benchmark's shared structures
//! (queues, the KV table, epochs). Benchmarks address it as an array of `AtomicU64` words; all
//! zeros is every structure's initial state, so nothing needs initialising before workers map
//! it. Blocks are referred to from it by [`crate::allocator::Handles`], never by address.

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::atomic::AtomicU64;

use memmap2::{MmapMut, MmapOptions};

use crate::Error;

/// Bytes per word.
pub const WORD: usize = std::mem::size_of::<AtomicU64>();

/// A mapped control area.
#[derive(Debug)]
pub struct SharedArea {
    map: MmapMut,
}

impl SharedArea {
    /// Creates the area file at `path` with `words` zero words (fails if it exists) and maps it.
    pub fn create(path: &Path, words: usize) -> Result<Self, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| format!("creating control area {}: {e}", path.display()))?;
        let bytes = words.checked_mul(WORD).ok_or("control area size overflows")?;
        file.set_len(bytes as u64).map_err(|e| format!("sizing control area {}: {e}", path.display()))?;
        Self::map(&file, path)
    }

    /// Maps the existing area file at `path`.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| format!("opening control area {}: {e}", path.display()))?;
        Self::map(&file, path)
    }

    fn map(file: &File, path: &Path) -> Result<Self, Error> {
        let len = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
        if len == 0 || len % WORD as u64 != 0 {
            return Err(format!("control area {} has {len} bytes, not a whole number of words", path.display()).into());
        }
        // SAFETY: the file is only ever accessed through atomics (see `words`), so concurrent
        // writers in other processes cannot cause a data race on the mapping.
        let map =
            unsafe { MmapOptions::new().map_mut(file) }.map_err(|e| format!("mapping {}: {e}", path.display()))?;
        Ok(Self { map })
    }

    /// Every word of the area.
    pub fn words(&self) -> &[AtomicU64] {
        let ptr = self.map.as_ptr().cast::<AtomicU64>();
        // SAFETY: the mapping is page-aligned, a whole number of words long (checked in `map`),
        // lives as long as `self`, and is only accessed through these atomics.
        unsafe { std::slice::from_raw_parts(ptr, self.map.len() / WORD) }
    }
}

/// Hands out consecutive, non-overlapping word ranges of an area in a fixed order; every process
/// carving the same sizes in the same order gets the same layout.
#[derive(Debug)]
pub struct Carver<'a> {
    rest: &'a [AtomicU64],
}

impl<'a> Carver<'a> {
    /// Carves from `words`.
    pub fn new(words: &'a [AtomicU64]) -> Self {
        Self { rest: words }
    }

    /// The next `n` words, starting on a cache line (8 words) so structures never share one.
    pub fn take(&mut self, n: usize) -> Result<&'a [AtomicU64], Error> {
        let skip = self.rest.as_ptr().align_offset(64).min(self.rest.len());
        let rest = &self.rest[skip..];
        if n > rest.len() {
            return Err(format!("control area too small: {n} words wanted, {} left", rest.len()).into());
        }
        let (taken, rest) = rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    /// Words the layout of `sizes` needs in the worst case (each carve may skip up to 7 words).
    pub fn words_for(sizes: &[usize]) -> usize {
        sizes.iter().map(|n| n + 7).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn two_mappings_of_one_area_see_each_others_stores() {
        let dir = tempdir();
        let path = dir.join("area");
        let a = SharedArea::create(&path, 16).unwrap();
        let b = SharedArea::open(&path).unwrap();
        a.words()[3].store(42, Ordering::Release);
        assert_eq!(b.words()[3].load(Ordering::Acquire), 42);
        assert!(b.words().iter().enumerate().all(|(i, w)| i == 3 || w.load(Ordering::Relaxed) == 0));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn carved_ranges_are_disjoint_line_aligned_and_bounded() {
        let words: Vec<AtomicU64> = (0..64).map(|_| AtomicU64::new(0)).collect();
        let mut c = Carver::new(&words);
        let x = c.take(3).unwrap();
        let y = c.take(5).unwrap();
        assert_eq!(y.as_ptr() as usize % 64, 0);
        assert!(y.as_ptr() as usize >= x.as_ptr() as usize + 3 * WORD);
        assert!(c.take(1000).is_err());
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cxlbench-shm-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
