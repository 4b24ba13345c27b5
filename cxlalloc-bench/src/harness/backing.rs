//! Where a run's shared files live, and huge pages for them (docs/design.md §12.1, §7.6).
//!
//! A run's directory (heap, control area, Boost's segment) is made under its run root. Whether
//! the pages of those files can be 2 MiB is the run root's mount's business: a tmpfs mounted
//! `huge=within_size` or `always` gives huge pages to every file, `huge=advise` to pages faulted
//! through a mapping advised `MADV_HUGEPAGE` (cxlalloc advises its huge blocks), and the default
//! (`/dev/shm` as most distributions mount it) none. [`Backing::of`] reads that from
//! `/proc/self/mountinfo`, so a record says what the run really ran on, not what was asked.
//!
//! A configuration with `huge_pages = true` runs under a tmpfs the driver mounts for the
//! workload ([`HugeRoot::mount`]: `huge=advise`, bounded in size, removed again when the
//! drive ends), or under the ordinary run root when it cannot mount one (not root, no `mount`),
//! which the record's [`Backing::fallback`] and the results table say.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::Error;

/// The run root of one run and what its mount gives, as recorded in each NDJSON line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backing {
    /// The run root the run's directory was made under.
    pub run_root: String,
    /// The mount point holding it (from `/proc/self/mountinfo`), "" when not found.
    pub mount_point: String,
    /// Its file system type (`tmpfs`, `ext4`, ...), "" when not found.
    pub fs: String,
    /// A tmpfs's `huge=` mode (`never` when the option is absent, `within_size`, `always`,
    /// `advise`); "" for other file systems.
    pub huge: String,
    /// Whether files there get huge pages: a tmpfs mounted `huge=within_size`, `always` or
    /// `advise` (the last only for advised mappings, which cxlalloc's huge blocks are).
    pub huge_pages: bool,
    /// Whether the configuration asked for huge pages (`huge_pages = true`).
    pub requested: bool,
    /// Why a configuration that asked for huge pages runs without them ("" otherwise).
    pub fallback: String,
}

impl Backing {
    /// The backing of run root `root`, from this process's mount table.
    pub fn of(root: &Path) -> Backing {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Self::from_mountinfo(root, &text)
    }

    /// The backing of `root` given the text of a `mountinfo` file: the mount whose point is the
    /// longest leading part of `root` (canonicalized), the last listed of equals (a later mount
    /// on the same point hides the earlier).
    pub fn from_mountinfo(root: &Path, mountinfo: &str) -> Backing {
        let path = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        let mut best: Option<Mount> = None;
        for m in mountinfo.lines().filter_map(Mount::parse) {
            if path.starts_with(&m.point)
                && best.as_ref().is_none_or(|b| m.point.as_os_str().len() >= b.point.as_os_str().len())
            {
                best = Some(m);
            }
        }
        let mut b = Backing { run_root: root.display().to_string(), ..Backing::default() };
        if let Some(m) = best {
            b.mount_point = m.point.display().to_string();
            if m.fs == "tmpfs" {
                b.huge = m.option("huge").unwrap_or("never").to_owned();
                b.huge_pages = matches!(b.huge.as_str(), "within_size" | "always" | "advise");
            }
            b.fs = m.fs;
        }
        b
    }

    /// A short label for tables: the tmpfs huge mode when the run had huge pages, a note when it
    /// asked for them and fell back, "-" for an ordinary run.
    pub fn label(&self) -> String {
        if self.huge_pages {
            format!("huge={}", self.huge)
        } else if self.requested {
            "no huge pages (fallback)".to_owned()
        } else {
            "-".to_owned()
        }
    }
}

/// One line of `/proc/self/mountinfo` (proc(5)): the fields the backing needs.
struct Mount {
    point: PathBuf,
    fs: String,
    super_options: String,
}

impl Mount {
    /// `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`.
    fn parse(line: &str) -> Option<Mount> {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split(' ').nth(4)?;
        let mut right = right.split(' ');
        let fs = right.next()?.to_owned();
        let _source = right.next()?;
        let super_options = right.next().unwrap_or("").to_owned();
        Some(Mount { point: PathBuf::from(unescape(point)), fs, super_options })
    }

    /// The value of super option `key` (`huge=within_size` → `within_size`).
    fn option(&self, key: &str) -> Option<&str> {
        self.super_options.split(',').find_map(|o| o.strip_prefix(key)?.strip_prefix('='))
    }
}

/// Undoes mountinfo's octal escapes of space, tab, newline and backslash (`\040`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal =
            bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `huge=` mode of the tmpfs [`HugeRoot::mount`] makes.
pub const MOUNT_HUGE: &str = "advise";

/// Prefix of the mount points [`HugeRoot::mount`] makes; the driver's process id follows.
const MOUNT_PREFIX: &str = "cxlbench-huge.";

/// A tmpfs mounted `huge=advise` for the huge-page configurations of one drive; unmounted and
/// its mount point removed when dropped.
///
/// `advise`, not `within_size`: within_size gives 2 MiB pages to every file big enough,
/// the heap's region files (descriptors, the HWcc shared region, small and large data) too,
/// which a process then holds whole (on a mini huge row the HWcc share of PSS went from
/// 0.08 % to 4.6 %, and PSS grew 9 MiB a run). Under `advise` only faults through a mapping
/// advised `MADV_HUGEPAGE` get huge pages: cxlalloc's huge blocks (docs/design.md §7.6).
#[derive(Debug)]
pub struct HugeRoot {
    point: PathBuf,
}

impl HugeRoot {
    /// Mounts a tmpfs of at most `size` (a tmpfs `size=` value: `12g`, `50%`) with
    /// `huge=advise` at `parent/cxlbench-huge.PID`, first removing the mounts that a
    /// driver killed before it could clean up left under `parent`. Fails (with `mount`'s own
    /// message) where this process may not mount, and when the mount did not come out a
    /// huge-page tmpfs.
    pub fn mount(parent: &Path, size: &str) -> Result<HugeRoot, Error> {
        remove_stale(parent);
        let point = parent.join(format!("{MOUNT_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&point).map_err(|e| format!("creating {}: {e}", point.display()))?;
        let options = format!("size={size},huge={MOUNT_HUGE},mode=1777");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "cxlbench-huge"])
            .arg(&point)
            .output()
            .map_err(|e| format!("running mount: {e}"));
        let failed = match out {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_owned()),
            Err(e) => Some(e),
        };
        if let Some(why) = failed {
            let _ = std::fs::remove_dir(&point);
            return Err(format!("mount -t tmpfs -o {options}: {why}").into());
        }
        // Mounted: from here on, dropping `root` unmounts it.
        let root = HugeRoot { point };
        let backing = Backing::of(&root.point);
        if !backing.huge_pages || backing.mount_point != root.point.display().to_string() {
            return Err(
                format!("{} was mounted but is not a huge-page tmpfs ({backing:?})", root.point.display()).into()
            );
        }
        Ok(root)
    }

    /// The mount point: the run root of the huge-page configurations.
    pub fn path(&self) -> &Path {
        &self.point
    }
}

impl Drop for HugeRoot {
    fn drop(&mut self) {
        unmount(&self.point);
    }
}

/// Lazily unmounts `point` (a run still holding a file there cannot keep it mounted) and
/// removes the empty mount point.
fn unmount(point: &Path) {
    let _ = Command::new("umount").arg("--lazy").arg(point).output();
    let _ = std::fs::remove_dir(point);
}

/// Unmounts the huge roots under `parent` whose driver process is gone.
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(MOUNT_PREFIX)) else { continue };
        let Ok(pid) = pid.parse::<i32>() else { continue };
        if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH) {
            unmount(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
30 22 0:25 / /dev/shm rw,relatime shared:3 - tmpfs tmpfs rw,size=24684084k
40 22 0:30 / /mnt/huge\\040pages rw,relatime - tmpfs none rw,size=1048576k,huge=within_size
41 22 0:31 / /mnt/adv rw - tmpfs none rw,size=1024k,huge=never
42 22 0:32 / /mnt/adv rw - tmpfs none rw,size=1024k,huge=advise
";

    #[test]
    fn the_backing_is_the_innermost_mount_and_its_huge_option() {
        let shm = Backing::from_mountinfo(Path::new("/dev/shm/runs"), MOUNTINFO);
        assert_eq!((shm.mount_point.as_str(), shm.fs.as_str(), shm.huge.as_str()), ("/dev/shm", "tmpfs", "never"));
        assert!(!shm.huge_pages);
        let huge = Backing::from_mountinfo(Path::new("/mnt/huge pages/x"), MOUNTINFO);
        assert_eq!((huge.mount_point.as_str(), huge.huge.as_str()), ("/mnt/huge pages", "within_size"));
        assert!(huge.huge_pages);
        let disk = Backing::from_mountinfo(Path::new("/var/tmp"), MOUNTINFO);
        assert_eq!((disk.fs.as_str(), disk.huge.as_str(), disk.huge_pages), ("ext4", "", false));
    }

    #[test]
    fn a_later_mount_on_the_same_point_hides_the_earlier() {
        let b = Backing::from_mountinfo(Path::new("/mnt/adv"), MOUNTINFO);
        assert_eq!(b.huge, "advise");
        assert!(b.huge_pages);
    }

    #[test]
    fn a_mount_point_is_a_whole_path_component() {
        // `/mnt/adv` holds `/mnt/adv/x`, not `/mnt/advice`.
        assert_eq!(Backing::from_mountinfo(Path::new("/mnt/advice"), MOUNTINFO).mount_point, "/");
    }
}
