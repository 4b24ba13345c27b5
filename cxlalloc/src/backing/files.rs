//! A heap directory holding one file per region.
//!
//! Creation is atomic: the directory is built under a temporary name (files sized, header
//! written) and renamed into place with `RENAME_NOREPLACE`, so an opener either finds nothing or
//! a complete heap, never a half-created or zero-length one. Files are sized to their full
//! capacity up front and stay sparse until touched.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat2, FallocateFlags, OFlag, RenameFlags, AT_FDCWD};
use nix::sys::stat::Mode;
use nix::unistd::{ftruncate, unlinkat, UnlinkatFlags};

use super::{Backing, HugeName};
use crate::coherence::{window_geometry, WINDOW_FILE};
use crate::error::OpenError;
use crate::layout::{Coherence, Header, RegionId, REGIONS};
use crate::mcas::{Geometry, Window};

/// Default directory for named heaps.
pub const SHM_DIR: &str = "/dev/shm";
/// Prefix of a named heap's directory in [`SHM_DIR`].
pub const NAME_PREFIX: &str = "cxlalloc.";

/// The directory of the heap called `name` in `/dev/shm`.
pub fn path_for_name(name: &str) -> Result<PathBuf, OpenError> {
    if name.is_empty() || name.len() > 200 || name.contains('/') || name.starts_with('.') || name.contains('\0') {
        return Err(OpenError::InvalidConfig(format!("invalid heap name {name:?}")));
    }
    Ok(Path::new(SHM_DIR).join(format!("{NAME_PREFIX}{name}")))
}

fn io<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> OpenError + 'p {
    move |source| OpenError::Io { op, path: path.to_path_buf(), source }
}

/// Removes half-built heap directories (`{prefix}{pid}-{nanos}`) left by creators that died
/// before renaming them into place. A directory whose creator may still be running is left
/// alone; a reused pid only delays the cleanup.
fn remove_abandoned_creations(parent: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The region files of one heap directory, kept open for the life of the heap, and the
/// directory itself, in which huge allocations' backing objects are created and opened by name.
#[derive(Debug)]
pub struct FileBacking {
    dir: PathBuf,
    dir_fd: OwnedFd,
    files: [File; REGIONS],
    /// Offset of each region in its file: 0, except in a no-HWcc heap, whose HWcc regions
    /// follow each other in the target area of the mCAS window file.
    offsets: [u64; REGIONS],
}

/// A no-HWcc heap's window geometry, and where each HWcc region starts in the window file.
fn window_plan(header: &Header) -> Option<(Geometry, [u64; REGIONS])> {
    if Coherence::from_raw(header.coherence) != Some(Coherence::NoHwcc) {
        return None;
    }
    let hwcc = RegionId::ALL.iter().filter(|r| r.is_hwcc()).map(|&r| header.region_bytes[r as usize]).sum();
    let geometry = window_geometry(header.slots, hwcc);
    let mut offsets = [0; REGIONS];
    let mut at = geometry.target_offset();
    for r in RegionId::ALL.into_iter().filter(|r| r.is_hwcc()) {
        offsets[r as usize] = at;
        at += header.region_bytes[r as usize];
    }
    Some((geometry, offsets))
}

/// Whether `offsets` place regions in an mCAS window.
fn window_plan_applies(offsets: &[u64; REGIONS]) -> bool {
    offsets.iter().any(|&o| o != 0)
}

fn window_error(path: &Path) -> impl FnOnce(crate::mcas::WindowError) -> OpenError + '_ {
    move |e| OpenError::Io { op: "mCAS window", path: path.to_path_buf(), source: std::io::Error::other(e.to_string()) }
}

fn open_dir(dir: &Path) -> Result<OwnedFd, OpenError> {
    nix::fcntl::open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| io("open directory", dir)(e.into()))
}

impl FileBacking {
    /// Creates a heap directory at `dir` with `header`; fails with `AlreadyExists` if one is there.
    pub fn create(dir: &Path, header: &Header) -> Result<Self, OpenError> {
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let leaf =
            dir.file_name().ok_or_else(|| OpenError::InvalidConfig(format!("bad heap path {}", dir.display())))?;
        let prefix = format!(".{}.creating-", leaf.to_string_lossy());
        remove_abandoned_creations(parent, &prefix);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let tmp = parent.join(format!("{prefix}{}-{nanos}", std::process::id()));
        std::fs::create_dir(&tmp).map_err(io("create directory", &tmp))?;
        let built = Self::populate(&tmp, header);
        let offsets = window_plan(header).map_or([0; REGIONS], |(_, o)| o);
        let result =
            built.and_then(|files| match renameat2(AT_FDCWD, &tmp, AT_FDCWD, dir, RenameFlags::RENAME_NOREPLACE) {
                Ok(()) => Ok(FileBacking { dir: dir.to_path_buf(), dir_fd: open_dir(dir)?, files, offsets }),
                Err(Errno::EEXIST) | Err(Errno::ENOTEMPTY) => Err(OpenError::AlreadyExists(dir.to_path_buf())),
                Err(e) => Err(OpenError::Io { op: "rename", path: dir.to_path_buf(), source: e.into() }),
            });
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result
    }

    fn populate(tmp: &Path, header: &Header) -> Result<[File; REGIONS], OpenError> {
        let plan = window_plan(header);
        if let Some((geometry, _)) = plan {
            let path = tmp.join(WINDOW_FILE);
            Window::create_or_open(&path, geometry).map_err(window_error(&path))?;
        }
        let mut files = Vec::with_capacity(REGIONS);
        for r in RegionId::ALL {
            let bytes = header.region_bytes[r as usize];
            let (path, mut f, at) = match plan {
                Some((_, offsets)) if r.is_hwcc() => {
                    let path = tmp.join(WINDOW_FILE);
                    let f = OpenOptions::new().read(true).write(true).open(&path).map_err(io("open", &path))?;
                    (path, f, offsets[r as usize])
                }
                _ => {
                    let path = tmp.join(r.file_name());
                    let f = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(io("create", &path))?;
                    f.set_len(bytes).map_err(io("size", &path))?;
                    (path, f, 0)
                }
            };
            if matches!(r, RegionId::Header | RegionId::Shared | RegionId::Claims | RegionId::Hazard) {
                // Small, and touched by every process (hazards: from the signal handler, which
                // cannot report ENOSPC): reserved now, so a full device fails the creation
                // instead of raising SIGBUS in some process later.
                nix::fcntl::fallocate(&f, FallocateFlags::FALLOC_FL_KEEP_SIZE, at as i64, bytes as i64)
                    .map_err(|e| io("reserve", &path)(e.into()))?;
            }
            if r == RegionId::Header {
                f.write_all(header.as_bytes()).map_err(io("write header", &path))?;
            }
            files.push(f);
        }
        files.try_into().map_err(|_| OpenError::InvalidConfig("region count".into()))
    }

    /// Opens the heap directory at `dir`, validating its header and every region file's size.
    pub fn open(dir: &Path) -> Result<(Self, Header), OpenError> {
        let header_path = dir.join(RegionId::Header.file_name());
        let mut hf = match OpenOptions::new().read(true).write(true).open(&header_path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(OpenError::NotFound(dir.to_path_buf())),
            Err(e) => return Err(io("open", &header_path)(e)),
        };
        let mut bytes = Vec::new();
        Read::by_ref(&mut hf)
            .take(crate::layout::HEADER_BYTES as u64)
            .read_to_end(&mut bytes)
            .map_err(io("read header", &header_path))?;
        let header = Header::parse(&bytes, &header_path)?;
        let plan = window_plan(&header);
        if let Some((geometry, _)) = plan {
            let path = dir.join(WINDOW_FILE);
            let found = Window::open(&path).map_err(window_error(&path))?.geometry();
            if found != geometry {
                return Err(OpenError::Mismatch {
                    field: "mCAS window target bytes",
                    found: found.target_bytes,
                    expected: geometry.target_bytes,
                });
            }
        }
        let offsets = plan.map_or([0; REGIONS], |(_, o)| o);
        let mut files = Vec::with_capacity(REGIONS);
        for r in RegionId::ALL {
            let in_window = plan.is_some() && r.is_hwcc();
            let path = dir.join(if in_window { WINDOW_FILE } else { r.file_name() });
            let f = if r == RegionId::Header {
                hf.try_clone().map_err(io("dup", &path))?
            } else {
                OpenOptions::new().read(true).write(true).open(&path).map_err(io("open", &path))?
            };
            let actual = f.metadata().map_err(io("stat", &path))?.len();
            let expected = header.region_bytes[r as usize] + offsets[r as usize];
            if actual < expected {
                return Err(OpenError::Truncated { path, expected, actual });
            }
            files.push(f);
        }
        let files = files.try_into().map_err(|_| OpenError::InvalidConfig("region count".into()))?;
        Ok((FileBacking { dir: dir.to_path_buf(), dir_fd: open_dir(dir)?, files, offsets }, header))
    }

    /// Removes the heap directory at `dir`. Processes that have it open keep their mappings.
    pub fn unlink(dir: &Path) -> Result<(), OpenError> {
        if !dir.join(RegionId::Header.file_name()).exists() {
            return Err(OpenError::NotFound(dir.to_path_buf()));
        }
        std::fs::remove_dir_all(dir).map_err(io("remove", dir))
    }
}

impl Backing for FileBacking {
    fn fd(&self, r: RegionId) -> Option<RawFd> {
        Some(self.files[r as usize].as_raw_fd())
    }

    fn commit(&self, r: RegionId, off: usize, len: usize) -> Result<(), Errno> {
        let at = self.offsets[r as usize] + off as u64;
        nix::fcntl::fallocate(&self.files[r as usize], FallocateFlags::FALLOC_FL_KEEP_SIZE, at as i64, len as i64)
            .map(|_| ())
    }

    fn region_offset(&self, r: RegionId) -> u64 {
        self.offsets[r as usize]
    }

    fn mcas_window(&self) -> Option<PathBuf> {
        window_plan_applies(&self.offsets).then(|| self.dir.join(WINDOW_FILE))
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn huge_create(&self, name: &HugeName, len: usize, commit: bool) -> Result<Option<OwnedFd>, Errno> {
        let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC;
        let fd = openat(&self.dir_fd, name.as_cstr(), flags, Mode::from_bits_truncate(0o600))?;
        let sized = ftruncate(&fd, len as libc::off_t).and_then(|()| {
            if commit {
                nix::fcntl::fallocate(&fd, FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, len as libc::off_t).map(|_| ())
            } else {
                Ok(())
            }
        });
        match sized {
            Ok(()) => Ok(Some(fd)),
            Err(e) => {
                let _ = self.huge_remove(name);
                Err(e)
            }
        }
    }

    fn huge_remove(&self, name: &HugeName) -> Result<(), Errno> {
        match unlinkat(&self.dir_fd, name.as_cstr(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn huge_dir(&self) -> Option<RawFd> {
        Some(self.dir_fd.as_raw_fd())
    }

    fn huge_objects(&self) -> Vec<(u64, u64)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries.flatten().filter_map(|e| e.file_name().to_str().and_then(HugeName::parse)).collect()
    }
}
