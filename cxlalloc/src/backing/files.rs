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
use crate::coherence::{window_geometry, McasHome, DEVICE_FILE, PROCESS_REQUESTERS, WINDOW_FILE};
use crate::error::OpenError;
use crate::layout::{Coherence, Header, RegionId, REGIONS};
use crate::mcas::{DeviceSpec, Geometry, Window};

/// Default directory for named heaps.
pub(crate) const SHM_DIR: &str = "/dev/shm";
/// Prefix of a named heap's directory in [`SHM_DIR`].
pub(crate) const NAME_PREFIX: &str = "cxlalloc.";

/// The directory of the heap called `name` in `/dev/shm`.
pub(crate) fn path_for_name(name: &str) -> Result<PathBuf, OpenError> {
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
pub(crate) struct FileBacking {
    dir: PathBuf,
    dir_fd: OwnedFd,
    files: [File; REGIONS],
    /// Offset of each region in its file: 0, except in a no-HWcc heap, whose HWcc regions
    /// follow each other in the target area of the mCAS window file or in the device memory.
    offsets: [u64; REGIONS],
    /// No-HWcc heap: where the HWcc regions are.
    home: Option<McasHome>,
}

/// Where a no-HWcc heap's HWcc regions go: a window file in the heap directory, or a hardware
/// device's memory.
enum Place {
    Window(Geometry),
    Device(DeviceSpec),
}

impl Place {
    /// The file holding the HWcc regions, for a heap directory at `dir`.
    fn file(&self, dir: &Path) -> PathBuf {
        match self {
            Place::Window(_) => dir.join(WINDOW_FILE),
            Place::Device(spec) => spec.memory.clone(),
        }
    }

    /// The home an opener connects to, for a heap directory at `dir`.
    fn home(&self, dir: &Path) -> McasHome {
        match self {
            Place::Window(_) => McasHome::Window(dir.join(WINDOW_FILE)),
            Place::Device(spec) => McasHome::Device { spec: spec.clone(), description: dir.join(DEVICE_FILE) },
        }
    }
}

/// Bytes of a heap's HWcc regions together.
fn hwcc_bytes(header: &Header) -> u64 {
    RegionId::ALL.iter().filter(|r| r.is_hwcc()).map(|&r| header.region_bytes[r as usize]).sum()
}

/// Where a no-HWcc heap's HWcc regions go (on `device` if given, else in a window), and each
/// region's offset in its file. `None` for the other models.
fn plan(header: &Header, device: Option<DeviceSpec>) -> Option<(Place, [u64; REGIONS])> {
    if Coherence::from_raw(header.coherence) != Some(Coherence::NoHwcc) {
        return None;
    }
    let (place, mut at) = match device {
        Some(spec) => {
            let at = spec.memory_offset;
            (Place::Device(spec), at)
        }
        None => {
            let geometry = window_geometry(header.slots, hwcc_bytes(header));
            (Place::Window(geometry), geometry.target_offset())
        }
    };
    let mut offsets = [0; REGIONS];
    for r in RegionId::ALL.into_iter().filter(|r| r.is_hwcc()) {
        offsets[r as usize] = at;
        at += header.region_bytes[r as usize];
    }
    Some((place, offsets))
}

fn window_error(path: &Path) -> impl FnOnce(crate::mcas::WindowError) -> OpenError + '_ {
    move |e| OpenError::Io { op: "mCAS window", path: path.to_path_buf(), source: std::io::Error::other(e.to_string()) }
}

/// Whether `device` can hold the HWcc regions of a heap with `header` and serve its requesters.
fn check_device(spec: &DeviceSpec, header: &Header) -> Result<(), OpenError> {
    let needed = window_geometry(header.slots, hwcc_bytes(header));
    if spec.memory_bytes < needed.target_bytes || spec.slots < needed.slots {
        return Err(OpenError::InvalidConfig(format!(
            "mCAS device {}: {} bytes of memory and {} requesters; this heap needs {} bytes and {} \
             requesters ({} thread slots + {PROCESS_REQUESTERS})",
            spec.registers.display(),
            spec.memory_bytes,
            spec.slots,
            needed.target_bytes,
            needed.slots,
            header.slots
        )));
    }
    Ok(())
}

/// Zeroes the device memory a new heap's HWcc regions will occupy: the only write to device
/// memory not made through the unit, done before the heap exists (so no CAS can be in flight).
fn zero_device_memory(spec: &DeviceSpec, bytes: u64) -> Result<(), OpenError> {
    let file = OpenOptions::new().read(true).write(true).open(&spec.memory).map_err(io("open", &spec.memory))?;
    let len = bytes.next_multiple_of(4096) as usize;
    // SAFETY: a shared mapping of the device memory the heap is being created on; nothing else
    // may use that range (the device description gives it to this heap).
    let mut map = unsafe { memmap2::MmapOptions::new().offset(spec.memory_offset).len(len).map_mut(&file) }
        .map_err(io("map", &spec.memory))?;
    map.fill(0);
    Ok(())
}

fn open_dir(dir: &Path) -> Result<OwnedFd, OpenError> {
    nix::fcntl::open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| io("open directory", dir)(e.into()))
}

impl FileBacking {
    /// Creates a heap directory at `dir` with `header`; fails with `AlreadyExists` if one is there.
    /// A no-HWcc heap's HWcc regions go on `device` when one is given.
    pub(crate) fn create(dir: &Path, header: &Header, device: Option<DeviceSpec>) -> Result<Self, OpenError> {
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let leaf =
            dir.file_name().ok_or_else(|| OpenError::InvalidConfig(format!("bad heap path {}", dir.display())))?;
        let prefix = format!(".{}.creating-", leaf.to_string_lossy());
        remove_abandoned_creations(parent, &prefix);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let tmp = parent.join(format!("{prefix}{}-{nanos}", std::process::id()));
        std::fs::create_dir(&tmp).map_err(io("create directory", &tmp))?;
        let plan = plan(header, device);
        let built = Self::populate(&tmp, header, plan.as_ref());
        let offsets = plan.as_ref().map_or([0; REGIONS], |(_, o)| *o);
        let home = plan.map(|(place, _)| place.home(dir));
        let result =
            built.and_then(|files| match renameat2(AT_FDCWD, &tmp, AT_FDCWD, dir, RenameFlags::RENAME_NOREPLACE) {
                Ok(()) => Ok(FileBacking { dir: dir.to_path_buf(), dir_fd: open_dir(dir)?, files, offsets, home }),
                Err(Errno::EEXIST) | Err(Errno::ENOTEMPTY) => Err(OpenError::AlreadyExists(dir.to_path_buf())),
                Err(e) => Err(OpenError::Io { op: "rename", path: dir.to_path_buf(), source: e.into() }),
            });
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result
    }

    fn populate(
        tmp: &Path,
        header: &Header,
        plan: Option<&(Place, [u64; REGIONS])>,
    ) -> Result<[File; REGIONS], OpenError> {
        match plan {
            Some((Place::Window(geometry), _)) => {
                let path = tmp.join(WINDOW_FILE);
                Window::create_or_open(&path, *geometry).map_err(window_error(&path))?;
            }
            Some((Place::Device(spec), _)) => {
                check_device(spec, header)?;
                let path = tmp.join(DEVICE_FILE);
                std::fs::write(&path, spec.to_toml()).map_err(io("write", &path))?;
                zero_device_memory(spec, hwcc_bytes(header))?;
            }
            None => {}
        }
        let on_device = matches!(plan, Some((Place::Device(_), _)));
        let mut files = Vec::with_capacity(REGIONS);
        for r in RegionId::ALL {
            let bytes = header.region_bytes[r as usize];
            let (path, mut f, at) = match plan {
                Some((place, offsets)) if r.is_hwcc() => {
                    let path = place.file(tmp);
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
            // Device memory is there already (and cannot be fallocated).
            let device_memory = on_device && r.is_hwcc();
            if !device_memory && matches!(r, RegionId::Header | RegionId::Shared | RegionId::Claims | RegionId::Hazard)
            {
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
    pub(crate) fn open(dir: &Path) -> Result<(Self, Header), OpenError> {
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
        let description = dir.join(DEVICE_FILE);
        let device = match description.exists() {
            true => Some(DeviceSpec::load(&description).map_err(|e| OpenError::Mcas(e.to_string()))?),
            false => None,
        };
        let plan = plan(&header, device);
        match &plan {
            Some((Place::Window(geometry), _)) => {
                let path = dir.join(WINDOW_FILE);
                let found = Window::open(&path).map_err(window_error(&path))?.geometry();
                if found != *geometry {
                    return Err(OpenError::Mismatch {
                        field: "mCAS window target bytes",
                        found: found.target_bytes,
                        expected: geometry.target_bytes,
                    });
                }
            }
            Some((Place::Device(spec), _)) => check_device(spec, &header)?,
            None => {}
        }
        let offsets = plan.as_ref().map_or([0; REGIONS], |(_, o)| *o);
        let mut files = Vec::with_capacity(REGIONS);
        for r in RegionId::ALL {
            let path = match &plan {
                Some((place, _)) if r.is_hwcc() => place.file(dir),
                _ => dir.join(r.file_name()),
            };
            let f = if r == RegionId::Header {
                hf.try_clone().map_err(io("dup", &path))?
            } else {
                OpenOptions::new().read(true).write(true).open(&path).map_err(io("open", &path))?
            };
            let meta = f.metadata().map_err(io("stat", &path))?;
            let expected = header.region_bytes[r as usize] + offsets[r as usize];
            // A device file (a BAR's resourceN) has no length to check; its description's does.
            if meta.is_file() && meta.len() < expected {
                return Err(OpenError::Truncated { path, expected, actual: meta.len() });
            }
            files.push(f);
        }
        let files = files.try_into().map_err(|_| OpenError::InvalidConfig("region count".into()))?;
        let home = plan.map(|(place, _)| place.home(dir));
        Ok((FileBacking { dir: dir.to_path_buf(), dir_fd: open_dir(dir)?, files, offsets, home }, header))
    }

    /// Removes the heap directory at `dir`. Processes that have it open keep their mappings.
    pub(crate) fn unlink(dir: &Path) -> Result<(), OpenError> {
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
        if r.is_hwcc() && matches!(self.home, Some(McasHome::Device { .. })) {
            // Device memory is all there; it cannot be fallocated.
            return Ok(());
        }
        let at = self.offsets[r as usize] + off as u64;
        nix::fcntl::fallocate(&self.files[r as usize], FallocateFlags::FALLOC_FL_KEEP_SIZE, at as i64, len as i64)
            .map(|_| ())
    }

    fn region_offset(&self, r: RegionId) -> u64 {
        self.offsets[r as usize]
    }

    fn mcas_home(&self) -> Option<McasHome> {
        self.home.clone()
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
