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
        let dir = std::env::temp_dir().join(format!("cxlalloc-tmpfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "none"])
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
