//! A full backing device is an out-of-memory error, never a SIGBUS: with `commit_on_grow` the
//! heap reserves backing store (`fallocate`) before it extends, on a real 16 MiB tmpfs.
//!
//! Mounting needs root (CI runs as root); elsewhere the test says so and does nothing.

use std::path::PathBuf;
use std::process::Command;

use cxlalloc::{AllocError, Config, Heap};

struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        Self::mount_with(size, "")
    }

    /// A tmpfs of `size` with more mount options (`,huge=advise`).
    fn mount_with(size: &str, options: &str) -> Option<Self> {
        let dir = std::env::temp_dir().join(format!("cxlalloc-tmpfs-{}-{size}{options}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}{options}"), "none"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            Some(Tmpfs(dir))
        } else {
            let _ = std::fs::remove_dir(&dir);
            None
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_full_device_is_out_of_memory_and_the_heap_stays_usable() {
    let Some(fs) = Tmpfs::mount("16m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    // Capacity far beyond the device: only the device can run out.
    let heap = Heap::create_at(&fs.0.join("heap"), &Config::with_capacity(1 << 30)).unwrap();
    let t = heap.attach().unwrap();
    let mut blocks = Vec::new();
    let err = loop {
        match t.alloc(100_000) {
            Ok(p) => {
                // Touch every page: with backing store reserved up front this cannot SIGBUS.
                unsafe { p.as_ptr().write_bytes(0xcd, 100_000) };
                blocks.push(p);
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(err, AllocError::OutOfMemory(_)), "{err:?}");
    assert!(blocks.len() > 10, "only {} blocks fit", blocks.len());
    let small = t.alloc(64);
    for p in blocks.drain(..) {
        t.free(p).unwrap();
    }
    if let Ok(p) = small {
        t.free(p).unwrap();
    }
    assert!(t.alloc(100_000).is_ok(), "freed memory serves again");
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

const MIB: usize = 1 << 20;

#[test]
fn huge_blocks_on_a_full_tmpfs_are_an_error_never_a_sigbus() {
    let Some(fs) = Tmpfs::mount("100m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let config = Config { huge_capacity: 1 << 30, ..Config::with_capacity(16 << 20) };
    let heap = Heap::create_at(&fs.0.join("heap"), &config).unwrap();
    let t = heap.attach().unwrap();
    let mut blocks = Vec::new();
    let err = loop {
        match t.alloc(16 * MIB) {
            Ok(p) => {
                // Every byte: a block handed out with pages the tmpfs could not give would
                // SIGBUS here.
                // SAFETY: our fresh block of 16 MiB.
                unsafe { p.as_ptr().write_bytes(0xcd, 16 * MIB) };
                blocks.push(p);
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(err, AllocError::Backing(_) | AllocError::OutOfMemory(_)), "{err:?}");
    assert!(blocks.len() >= 3, "only {} blocks fit", blocks.len());
    for p in blocks.drain(..) {
        t.free(p).unwrap();
    }
    assert!(t.alloc(16 * MIB).is_ok(), "freed memory serves again");
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

/// `ShmemPmdMapped` of the mapping holding `addr` (`/proc/self/smaps`), in KiB: the bytes
/// mapped by huge pages of shared memory.
fn shmem_pmd_mapped_kib(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
        if let Some((Ok(lo), Ok(hi))) =
            range.map(|(lo, hi)| (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)))
        {
            inside = (lo..hi).contains(&addr);
            continue;
        }
        if let Some(v) = line.strip_prefix("ShmemPmdMapped:").filter(|_| inside) {
            return v.trim().trim_end_matches("kB").trim().parse().ok();
        }
    }
    None
}

#[test]
fn a_new_huge_block_on_a_tmpfs_mounted_huge_advise_is_made_of_huge_pages() {
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        eprintln!("skipped: no transparent huge pages in this kernel");
        return;
    }
    let Some(fs) = Tmpfs::mount_with("256m", ",huge=advise") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let config = Config { huge_capacity: 1 << 30, ..Config::with_capacity(16 << 20) };
    let heap = Heap::create_at(&fs.0.join("heap"), &config).unwrap();
    let t = heap.attach().unwrap();
    let p = t.alloc(16 * MIB).unwrap();
    // Reserved and entered at allocation (commit_on_grow), through the advised mapping: a
    // reservation made before the mapping would have given the object small pages for good.
    let huge = shmem_pmd_mapped_kib(p.as_ptr() as usize).expect("the block's mapping in smaps");
    assert_eq!(huge, 16 * 1024, "KiB of the new block in huge pages");
    t.free(p).unwrap();
    drop(t);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}
