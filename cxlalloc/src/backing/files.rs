//! A heap directory holding one file per region.
//!
//! Creation is atomic: the directory is built under a temporary name (files sized, header
//! written) and renamed into place with `RENAME_NOREPLACE`, so an opener either finds nothing or
//! a complete heap, never a half-created or zero-length one. Files are sized to their full
//! capacity up front and stay sparse until touched.
//!
//! Permissions (docs/design.md §2.3): every file the heap ever creates gets the header's mode
//! ([`crate::layout::Config::mode`], default `0o600`) with `fchmod`, whatever the umask, and the directory the
//! matching search bits. Huge objects, created later by any process, get the same mode and the
//! heap's owner and group. An opener refuses a heap whose files have mixed owners or modes.
//!
//! Identity: the directory is opened once (`O_NOFOLLOW`) and every file relative to it, so a
//! heap replaced while it is being opened cannot lend the opener some of its files; and every
//! region file carries the header's random heap id in a trailer past the region's end (the
//! mCAS window, in its header), so a file of another heap is refused by name.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::fcntl::{openat, renameat2, FallocateFlags, OFlag, RenameFlags, AT_FDCWD};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, Mode};
use nix::unistd::{fchown, ftruncate, getegid, unlinkat, Gid, Uid, UnlinkatFlags};

use super::{Backing, HugeName};
use crate::coherence::{window_geometry, McasHome, DEVICE_FILE, PROCESS_REQUESTERS, WINDOW_FILE};
use crate::error::OpenError;
use crate::layout::{dir_mode, Coherence, Header, RegionId, REGIONS};
use crate::mcas::{DeviceSpec, Geometry, Window};

/// Default directory for named heaps.
pub(crate) const SHM_DIR: &str = "/dev/shm";
/// Prefix of a named heap's directory in [`SHM_DIR`].
pub(crate) const NAME_PREFIX: &str = "cxlalloc.";
/// Longest file name the kernel accepts (`NAME_MAX`).
pub(crate) const NAME_MAX: usize = 255;
/// Longest heap name: the directory `cxlalloc.NAME` must fit in [`NAME_MAX`].
pub(crate) const MAX_NAME_LEN: usize = NAME_MAX - NAME_PREFIX.len();
/// Prefix of the temporary directory a creation builds before renaming it into place. Its
/// length does not depend on the heap's name, so any valid final component can be created.
const CREATING_PREFIX: &str = ".cxlalloc.creating-";
/// Prefix of the name an unlinked heap's directory is renamed to while processes still have it
/// open (docs/design.md §7.5): hidden, and no heap name can produce it (names start with neither
/// `.` nor `-`).
pub const UNLINKED_PREFIX: &str = ".cxlalloc.unlinked-";

/// Checks a heap name (the `NAME` of [`crate::Heap::create`], `cxl_heap_create` and
/// `cxlalloc create NAME`). The grammar, in full: 1 ..= [`MAX_NAME_LEN`] (246) characters, each
/// an ASCII letter, digit, `.`, `_` or `-`, the first not `.` or `-` (no hidden files, nothing a
/// command line would read as an option). A name is never a path: a heap elsewhere is reached
/// with the `*_at` functions (`cxlalloc --at DIR`).
pub(crate) fn check_name(name: &str) -> Result<(), OpenError> {
    let bad = |reason: String| Err(OpenError::InvalidName { name: name.to_string(), reason });
    let Some(first) = name.chars().next() else {
        return bad("a name has 1 or more characters".into());
    };
    if name.len() > MAX_NAME_LEN {
        return bad(format!("{} characters, the most is {MAX_NAME_LEN}", name.len()));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return bad(format!(
            "{c:?} is not allowed (letters, digits, '.', '_', '-'; a heap in another directory is \
             opened by path)"
        ));
    }
    if first == '.' || first == '-' {
        return bad(format!("a name may not start with {first:?}"));
    }
    Ok(())
}

/// The directory of the heap called `name` in `/dev/shm` (after [`check_name`]).
pub(crate) fn path_for_name(name: &str) -> Result<PathBuf, OpenError> {
    check_name(name)?;
    Ok(Path::new(SHM_DIR).join(format!("{NAME_PREFIX}{name}")))
}

/// The parent directory and final component of a heap directory path given to a `*_at`
/// function; the component must be a name (not `..` or `/`) of at most [`NAME_MAX`] bytes.
fn split_path(dir: &Path) -> Result<(&Path, &OsStr), OpenError> {
    let bad = |reason: String| Err(OpenError::InvalidName { name: dir.display().to_string(), reason });
    let Some(leaf) = dir.file_name() else {
        return bad("the path has no final component naming the heap directory".into());
    };
    if leaf.len() > NAME_MAX {
        return bad(format!("final component of {} bytes, the most is {NAME_MAX}", leaf.len()));
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((parent, leaf))
}

fn io<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> OpenError + 'p {
    move |source| OpenError::Io { op, path: path.to_path_buf(), source }
}

/// `errno` from `op` on `path` as an error: `EACCES`/`EPERM` name the file as not admitting
/// this user.
fn sys(op: &'static str, path: &Path, e: Errno) -> OpenError {
    match e {
        Errno::EACCES | Errno::EPERM => OpenError::PermissionDenied { path: path.to_path_buf() },
        e => OpenError::Io { op, path: path.to_path_buf(), source: e.into() },
    }
}

/// Removes half-built heap directories (`.cxlalloc.creating-{pid}-…`) left in `parent` by
/// creators that died before renaming them into place. A directory whose creator may still be
/// running is left alone; a reused pid only delays the cleanup.
fn remove_abandoned_creations(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(CREATING_PREFIX)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The trailer every region file carries past its region's bytes (never mapped): which heap
/// and which region the file belongs to.
///
/// ```text
/// +0  magic "CXLREGN1"   +8  heap id (u64, LE)   +16  region index (u32, LE)   +20  zero
/// ```
const TRAILER_MAGIC: [u8; 8] = *b"CXLREGN1";
/// Bytes of a region file's trailer.
pub(crate) const TRAILER_BYTES: u64 = 24;

fn trailer(heap_id: u64, r: RegionId) -> [u8; TRAILER_BYTES as usize] {
    let mut t = [0u8; TRAILER_BYTES as usize];
    t[..8].copy_from_slice(&TRAILER_MAGIC);
    t[8..16].copy_from_slice(&heap_id.to_le_bytes());
    t[16..20].copy_from_slice(&(r as u32).to_le_bytes());
    t
}

/// The heap id of the trailer at `at` in `f`, if it is a trailer of region `r` (0 otherwise).
fn trailer_id(f: &File, at: u64, r: RegionId) -> u64 {
    let mut t = [0u8; TRAILER_BYTES as usize];
    if f.read_exact_at(&mut t, at).is_err() || t[..8] != TRAILER_MAGIC || t[16..20] != (r as u32).to_le_bytes() {
        return 0;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&t[8..16]);
    u64::from_le_bytes(id)
}

/// Who a heap's files belong to: its header file's owner and group, and the header's mode.
#[derive(Clone, Copy, Debug)]
struct Owner {
    uid: u32,
    gid: u32,
    mode: u32,
}

impl Owner {
    /// Checks that the file or directory `f` at `path` has this owner and group, and `mode`.
    fn check(&self, f: impl AsFd, path: &Path, mode: u32) -> Result<(), OpenError> {
        let st = fstat(f).map_err(|e| sys("stat", path, e))?;
        let mixed = |what: String| Err(OpenError::MixedPermissions { path: path.to_path_buf(), what });
        if st.st_uid != self.uid || st.st_gid != self.gid {
            return mixed(format!("owner {}:{}, the heap's is {}:{}", st.st_uid, st.st_gid, self.uid, self.gid));
        }
        if st.st_mode & 0o7777 != mode {
            return mixed(format!("mode {:#o}, the heap's is {mode:#o}", st.st_mode & 0o7777));
        }
        Ok(())
    }
}

/// Gives the new file or directory `f` permission bits `mode`, whatever the umask.
fn set_mode(f: impl AsFd, path: &Path, mode: u32) -> Result<(), OpenError> {
    fchmod(f, Mode::from_bits_truncate(mode)).map_err(|e| sys("chmod", path, e))
}

/// Opens `name` in the directory `dir_fd` (at `dir`) for reading and writing, without following
/// a symbolic link; `create`: a new file (mode `0o600` until [`set_mode`]).
fn open_in(dir_fd: &OwnedFd, dir: &Path, name: &str, create: bool) -> Result<(File, PathBuf), OpenError> {
    let path = dir.join(name);
    let mut flags = OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    if create {
        flags |= OFlag::O_CREAT | OFlag::O_EXCL;
    }
    match openat(dir_fd, name, flags, Mode::from_bits_truncate(0o600)) {
        Ok(fd) => Ok((File::from(fd), path)),
        Err(e) => Err(sys(if create { "create" } else { "open" }, &path, e)),
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
    /// Owner, group and mode every huge object gets.
    owner: Owner,
    /// The process that opened the directory (and holds the shared lock on `dir_fd` that tells
    /// an unlink the heap is in use): a forked child's inherited copy never removes it.
    pid: u32,
}

/// Where a no-HWcc heap's HWcc regions go: a window file in the heap directory, or a hardware
/// device's memory.
enum Place {
    Window(Geometry),
    Device(DeviceSpec),
}

impl Place {
    /// The file that holds the HWcc regions, for a heap directory at `dir`.
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

/// Where region `r` of the heap directory `dir` (whose header is `header`) is stored: the file
/// and the region's offset in it. For the read-only survey of a heap (`crate::survey`), which
/// reads words with `pread` instead of mapping the heap.
pub(crate) fn region_file(dir: &Path, header: &Header, r: RegionId) -> Result<(PathBuf, u64), OpenError> {
    let description = dir.join(DEVICE_FILE);
    let device = match description.exists() {
        true => Some(DeviceSpec::load(&description).map_err(|e| OpenError::Mcas(e.to_string()))?),
        false => None,
    };
    Ok(match plan(header, device) {
        Some((place, offsets)) if r.is_hwcc() => (place.file(dir), offsets[r as usize]),
        _ => (dir.join(r.file_name()), 0),
    })
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

/// Makes a fresh temporary directory in `parent` for a creation: `{CREATING_PREFIX}{pid}-{tid}-
/// {nanos}`, unique to the calling thread (a name taken by an earlier creation of the same
/// thread within the clock's resolution is retried with a later time).
fn make_temp_dir(parent: &Path) -> Result<PathBuf, OpenError> {
    let tid = nix::unistd::gettid();
    let mut tries = 0;
    loop {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let tmp = parent.join(format!("{CREATING_PREFIX}{}-{tid}-{nanos}", std::process::id()));
        match mkdirat(AT_FDCWD, &tmp, Mode::from_bits_truncate(0o700)) {
            Ok(()) => return Ok(tmp),
            Err(Errno::EEXIST) if tries < 8 => tries += 1,
            Err(e) => return Err(sys("create directory", &tmp, e)),
        }
    }
}

/// Takes the `flock` lock `how` on the heap directory `dir_fd` (at `dir`). Every open heap holds
/// a shared lock on its directory for its lifetime (the kernel drops it when the process dies);
/// whoever gets the exclusive lock on an unlinked heap's directory knows nobody has it open.
fn lock_dir(dir_fd: &OwnedFd, dir: &Path, how: libc::c_int) -> Result<(), OpenError> {
    // SAFETY: flock on a descriptor this function borrows; no memory is involved.
    if unsafe { libc::flock(dir_fd.as_raw_fd(), how) } == 0 {
        Ok(())
    } else {
        Err(sys("lock", dir, Errno::last()))
    }
}

/// Removes the unlinked heap directory `dir` (`{UNLINKED_PREFIX}…`) if no process has it open
/// any more: its whole content, then itself. Returns whether it did.
fn remove_if_unused(dir: &Path) -> Result<bool, OpenError> {
    let dir_fd = open_dir(dir)?;
    if lock_dir(&dir_fd, dir, libc::LOCK_EX | libc::LOCK_NB).is_err() {
        return Ok(false);
    }
    // Holding the exclusive lock: nobody has the heap open, and nobody can open it by name.
    std::fs::remove_dir_all(dir).map_err(io("remove", dir))?;
    Ok(true)
}

/// Removes the unlinked heap directories in `parent` that no process has open any more: those
/// whose last user was killed (a clean close removes its own, see `FileBacking`'s `Drop`).
fn remove_unused_unlinked(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(UNLINKED_PREFIX)) {
            let _ = remove_if_unused(&entry.path());
        }
    }
}

/// Opens the heap directory `dir` once, not following a symbolic link; every file of the heap
/// is then opened relative to it.
fn open_dir(dir: &Path) -> Result<OwnedFd, OpenError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match nix::fcntl::open(dir, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::ENOENT) => Err(OpenError::NotFound(dir.to_path_buf())),
        // O_NOFOLLOW on a link reads as ENOTDIR or ELOOP ("Not a directory" for a link to one):
        // name the real reason.
        Err(Errno::ENOTDIR | Errno::ELOOP) if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_symlink()) => {
            Err(OpenError::Io {
                op: "open directory",
                path: dir.to_path_buf(),
                source: std::io::Error::other("a symbolic link (a heap directory is never opened through a link)"),
            })
        }
        Err(e) => Err(sys("open directory", dir, e)),
    }
}

/// Opens the header file of the heap directory `dir` for reading only, as [`FileBacking::open`]
/// reaches it (the directory not through a link, the file relative to it, not a link): the
/// read-only survey sees the same heap an opener would, and the same errors.
pub(crate) fn open_header_read_only(dir: &Path) -> Result<(File, PathBuf), OpenError> {
    let dir_fd = open_dir(dir)?;
    let name = RegionId::Header.file_name();
    let path = dir.join(name);
    match openat(&dir_fd, name, OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()) {
        Ok(fd) => Ok((File::from(fd), path)),
        Err(Errno::ENOENT) => Err(OpenError::NotFound(dir.to_path_buf())),
        Err(e) => Err(sys("open", &path, e)),
    }
}

impl FileBacking {
    /// Creates a heap directory at `dir` with `header`; fails with `AlreadyExists` if one is there.
    /// A no-HWcc heap's HWcc regions go on `device` when one is given.
    pub(crate) fn create(dir: &Path, header: &Header, device: Option<DeviceSpec>) -> Result<Self, OpenError> {
        let (parent, _) = split_path(dir)?;
        remove_abandoned_creations(parent);
        let tmp = make_temp_dir(parent)?;
        let plan = plan(header, device);
        let offsets = plan.as_ref().map_or([0; REGIONS], |(_, o)| *o);
        let home = plan.as_ref().map(|(place, _)| place.home(dir));
        let result = Self::populate(&tmp, header, plan.as_ref()).and_then(|(dir_fd, files, owner)| {
            match renameat2(AT_FDCWD, &tmp, AT_FDCWD, dir, RenameFlags::RENAME_NOREPLACE) {
                // The descriptor opened on the temporary directory follows it: no second lookup
                // by path, which a concurrent unlink and re-create could redirect.
                Ok(()) => Ok(FileBacking {
                    dir: dir.to_path_buf(),
                    dir_fd,
                    files,
                    offsets,
                    home,
                    owner,
                    pid: std::process::id(),
                }),
                Err(Errno::EEXIST) | Err(Errno::ENOTEMPTY) => Err(OpenError::AlreadyExists(dir.to_path_buf())),
                Err(e) => Err(sys("rename", dir, e)),
            }
        });
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        result
    }

    /// Fills the new directory `tmp`: its mode, every region file (mode, size, trailer) and the
    /// header. Returns the directory's descriptor, the region files and the heap's owner.
    fn populate(
        tmp: &Path,
        header: &Header,
        plan: Option<&(Place, [u64; REGIONS])>,
    ) -> Result<(OwnedFd, [File; REGIONS], Owner), OpenError> {
        let dir_fd = open_dir(tmp)?;
        lock_dir(&dir_fd, tmp, libc::LOCK_SH)?;
        // A setgid parent gives the directory its group; the heap's group is the creator's,
        // like its files'.
        let egid = getegid();
        if fstat(&dir_fd).is_ok_and(|st| st.st_gid != egid.as_raw()) {
            fchown(&dir_fd, None, Some(egid)).map_err(|e| sys("chown", tmp, e))?;
        }
        set_mode(&dir_fd, tmp, dir_mode(header.mode))?;
        let mut window_file = None;
        match plan {
            Some((Place::Window(geometry), _)) => {
                let path = tmp.join(WINDOW_FILE);
                let window = Window::create_or_open(&path, *geometry).map_err(window_error(&path))?;
                window.set_owner(header.heap_id);
                let (f, path) = open_in(&dir_fd, tmp, WINDOW_FILE, false)?;
                set_mode(&f, &path, header.mode)?;
                window_file = Some((f, path));
            }
            Some((Place::Device(spec), _)) => {
                check_device(spec, header)?;
                let (mut f, path) = open_in(&dir_fd, tmp, DEVICE_FILE, true)?;
                set_mode(&f, &path, header.mode)?;
                f.write_all(spec.to_toml().as_bytes()).map_err(io("write", &path))?;
                zero_device_memory(spec, hwcc_bytes(header))?;
            }
            None => {}
        }
        let mut files = Vec::with_capacity(REGIONS);
        for r in RegionId::ALL {
            let bytes = header.region_bytes[r as usize];
            let (mut f, path, at) = match plan {
                Some((Place::Window(_), offsets)) if r.is_hwcc() => {
                    let (f, path) = window_file
                        .as_ref()
                        .ok_or_else(|| OpenError::InvalidConfig("mCAS window not opened".into()))?;
                    (f.try_clone().map_err(io("dup", path))?, path.clone(), offsets[r as usize])
                }
                Some((Place::Device(spec), offsets)) if r.is_hwcc() => {
                    let f = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&spec.memory)
                        .map_err(io("open", &spec.memory))?;
                    (f, spec.memory.clone(), offsets[r as usize])
                }
                _ => {
                    let (f, path) = open_in(&dir_fd, tmp, r.file_name(), true)?;
                    set_mode(&f, &path, header.mode)?;
                    f.set_len(bytes + TRAILER_BYTES).map_err(io("size", &path))?;
                    f.write_all_at(&trailer(header.heap_id, r), bytes).map_err(io("write trailer", &path))?;
                    (f, path, 0)
                }
            };
            // Device memory is there already (and cannot be fallocated).
            let device_memory = matches!(plan, Some((Place::Device(_), _))) && r.is_hwcc();
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
        // The header region comes first (`RegionId::ALL`); its owner is the heap's.
        let header_file = files.first().ok_or_else(|| OpenError::InvalidConfig("no header region".into()))?;
        let st = fstat(header_file).map_err(|e| sys("stat", tmp, e))?;
        let owner = Owner { uid: st.st_uid, gid: st.st_gid, mode: header.mode };
        let files = files.try_into().map_err(|_| OpenError::InvalidConfig("region count".into()))?;
        Ok((dir_fd, files, owner))
    }

    /// Opens the heap directory at `dir`: the directory once, then every file relative to it.
    /// Validates the header, every region file's size and identity, and that every file has
    /// the header file's owner and group and the header's mode.
    pub(crate) fn open(dir: &Path) -> Result<(Self, Header), OpenError> {
        let dir_fd = open_dir(dir)?;
        lock_dir(&dir_fd, dir, libc::LOCK_SH)?;
        let (mut hf, header_path) = match open_in(&dir_fd, dir, RegionId::Header.file_name(), false) {
            Err(OpenError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Err(OpenError::NotFound(dir.to_path_buf()))
            }
            other => other?,
        };
        let mut bytes = Vec::new();
        Read::by_ref(&mut hf)
            .take(crate::layout::HEADER_BYTES as u64)
            .read_to_end(&mut bytes)
            .map_err(io("read header", &header_path))?;
        let header = Header::parse(&bytes, &header_path)?;
        let st = fstat(&hf).map_err(|e| sys("stat", &header_path, e))?;
        let owner = Owner { uid: st.st_uid, gid: st.st_gid, mode: header.mode };
        owner.check(&hf, &header_path, header.mode)?;
        owner.check(&dir_fd, dir, dir_mode(header.mode))?;
        let device = match open_in(&dir_fd, dir, DEVICE_FILE, false) {
            Ok((mut f, path)) => {
                owner.check(&f, &path, header.mode)?;
                let mut text = String::new();
                f.read_to_string(&mut text).map_err(io("read", &path))?;
                Some(DeviceSpec::parse(&text, &path).map_err(|e| OpenError::Mcas(e.to_string()))?)
            }
            Err(OpenError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let plan = plan(&header, device);
        let mut window_file = None;
        match &plan {
            Some((Place::Window(geometry), _)) => {
                let (f, path) = open_in(&dir_fd, dir, WINDOW_FILE, false)?;
                owner.check(&f, &path, header.mode)?;
                let window = Window::open_file(&f, &path).map_err(window_error(&path))?;
                let found = window.geometry();
                if found != *geometry {
                    return Err(OpenError::Mismatch {
                        field: "mCAS window target bytes",
                        found: found.target_bytes,
                        expected: geometry.target_bytes,
                    });
                }
                if window.owner() != header.heap_id {
                    return Err(OpenError::ForeignRegion { path, found: window.owner(), expected: header.heap_id });
                }
                window_file = Some((f, path));
            }
            Some((Place::Device(spec), _)) => check_device(spec, &header)?,
            None => {}
        }
        let offsets = plan.as_ref().map_or([0; REGIONS], |(_, o)| *o);
        let mut files = Vec::with_capacity(REGIONS);
        for r in RegionId::ALL {
            let (f, path, own) = match &plan {
                Some((Place::Window(_), _)) if r.is_hwcc() => {
                    let (f, path) = window_file
                        .as_ref()
                        .ok_or_else(|| OpenError::InvalidConfig("mCAS window not opened".into()))?;
                    (f.try_clone().map_err(io("dup", path))?, path.clone(), false)
                }
                Some((Place::Device(spec), _)) if r.is_hwcc() => {
                    let f = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&spec.memory)
                        .map_err(io("open", &spec.memory))?;
                    (f, spec.memory.clone(), false)
                }
                _ if r == RegionId::Header => {
                    (hf.try_clone().map_err(io("dup", &header_path))?, header_path.clone(), false)
                }
                _ => {
                    let (f, path) = open_in(&dir_fd, dir, r.file_name(), false)?;
                    owner.check(&f, &path, header.mode)?;
                    (f, path, true)
                }
            };
            let meta = f.metadata().map_err(io("stat", &path))?;
            let bytes = header.region_bytes[r as usize];
            let expected = bytes + offsets[r as usize] + if own { TRAILER_BYTES } else { 0 };
            // A device file (a BAR's resourceN) has no length to check; its description's does.
            if meta.is_file() && meta.len() < expected {
                return Err(OpenError::Truncated { path, expected, actual: meta.len() });
            }
            if own {
                let found = trailer_id(&f, bytes, r);
                if found != header.heap_id {
                    return Err(OpenError::ForeignRegion { path, found, expected: header.heap_id });
                }
            }
            files.push(f);
        }
        let files = files.try_into().map_err(|_| OpenError::InvalidConfig("region count".into()))?;
        let home = plan.map(|(place, _)| place.home(dir));
        let pid = std::process::id();
        Ok((FileBacking { dir: dir.to_path_buf(), dir_fd, files, offsets, home, owner, pid }, header))
    }

    /// Removes the heap directory at `dir` by name: it is renamed out of the way, and removed
    /// once no process has it open (docs/design.md §7.5); until then those processes keep using
    /// it whole, huge objects included.
    /// A user the heap does not admit gets [`OpenError::PermissionDenied`], not `NotFound`: the
    /// heap is there, this user just may not look inside it or remove it. A directory whose
    /// `header` is not a heap header is refused ([`OpenError::BadMagic`]) and left alone.
    pub(crate) fn unlink(dir: &Path) -> Result<(), OpenError> {
        split_path(dir)?;
        let denied_or = |op: &'static str, e: std::io::Error| match e.kind() {
            std::io::ErrorKind::PermissionDenied => OpenError::PermissionDenied { path: dir.to_path_buf() },
            _ => io(op, dir)(e),
        };
        // The directory is removed whole: only if its header says it is a heap's (of any layout
        // version), never merely because it holds a file called `header`.
        let (mut header, header_path) = open_header_read_only(dir)?;
        let mut magic = [0u8; 8];
        if header.read_exact(&mut magic).is_err() || magic != crate::layout::MAGIC {
            return Err(OpenError::BadMagic(header_path));
        }
        drop(header);
        // Like an unlinked file, the heap stays whole for the processes that have it open: the
        // name goes now (a rename keeps their directory descriptors, under which huge objects
        // are created and opened, valid), the directory when the last of them closes it.
        let (parent, _) = split_path(dir)?;
        let tid = nix::unistd::gettid();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let gone = parent.join(format!("{UNLINKED_PREFIX}{}-{tid}-{nanos}", std::process::id()));
        match renameat2(AT_FDCWD, dir, AT_FDCWD, &gone, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => {}
            Err(Errno::ENOENT) => return Err(OpenError::NotFound(dir.to_path_buf())),
            Err(e) => return Err(sys("rename", dir, e)),
        }
        remove_if_unused(&gone).map_err(|e| match e {
            OpenError::Io { source, .. } => denied_or("remove", source),
            e => e,
        })?;
        remove_unused_unlinked(parent);
        Ok(())
    }

    /// Gives a new huge object `fd` the heap's mode, owner and group. A process of another user
    /// changes what it may (root: both; a member of the heap's group: the group); an object
    /// that would still not admit the heap's users is refused with `EACCES`, so that no process
    /// that can open the heap meets an object it cannot map (its fault handler could not say
    /// why: the access would be a `SIGSEGV`).
    fn adopt_huge(&self, fd: &OwnedFd) -> Result<(), Errno> {
        let o = self.owner;
        fchmod(fd, Mode::from_bits_truncate(o.mode))?;
        let st = fstat(fd)?;
        if st.st_uid == o.uid && st.st_gid == o.gid {
            return Ok(());
        }
        if fchown(fd, Some(Uid::from_raw(o.uid)), Some(Gid::from_raw(o.gid))).is_ok() {
            return Ok(());
        }
        let group = fchown(fd, None, Some(Gid::from_raw(o.gid))).is_ok() || st.st_gid == o.gid;
        // The heap's owner reaches the object through its group or through the "other" bits.
        let reachable = (group && o.mode & 0o060 == 0o060) || o.mode & 0o006 == 0o006;
        if reachable {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }
}

impl Drop for FileBacking {
    /// The last process to close an unlinked heap removes its directory (docs/design.md §7.5). A
    /// forked child's inherited copy shares the parent's lock and leaves both alone.
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            return;
        }
        let Ok(at) = std::fs::read_link(format!("/proc/self/fd/{}", self.dir_fd.as_raw_fd())) else { return };
        if at.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(UNLINKED_PREFIX)) {
            // This process's shared lock would keep the exclusive one from it: give it up first.
            let _ = lock_dir(&self.dir_fd, &self.dir, libc::LOCK_UN);
            let _ = remove_if_unused(&at);
        }
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

    fn release(&self, r: RegionId, off: usize, len: usize) -> Result<(), Errno> {
        if r.is_hwcc() && matches!(self.home, Some(McasHome::Device { .. })) {
            return Ok(());
        }
        let at = self.offsets[r as usize] + off as u64;
        // A hole: every process's mapping of the range sees zeros from now on, and the file's
        // pages (and their reservation) are freed.
        let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        nix::fcntl::fallocate(&self.files[r as usize], flags, at as i64, len as i64).map(|_| ())
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
        let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
        let fd = openat(&self.dir_fd, name.as_cstr(), flags, Mode::from_bits_truncate(0o600))?;
        let sized = self.adopt_huge(&fd).and_then(|()| ftruncate(&fd, len as libc::off_t)).and_then(|()| {
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

    fn huge_object_problem(&self, name: &HugeName) -> Option<String> {
        let o = self.owner;
        let st = match fstatat(&self.dir_fd, name.as_cstr(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) => return Some(format!("stat: {e}")),
        };
        let mode = st.st_mode & 0o7777;
        let owned = st.st_uid == o.uid && st.st_gid == o.gid;
        // An object of another user made under the rules of `adopt_huge`: its group is the
        // heap's (with group access), or it admits everyone.
        let reachable = (st.st_gid == o.gid && o.mode & 0o060 == 0o060) || o.mode & 0o006 == 0o006;
        if mode != o.mode || !(owned || reachable) {
            return Some(format!(
                "owner {}:{} mode {mode:#o}, the heap's is {}:{} mode {:#o}",
                st.st_uid, st.st_gid, o.uid, o.gid, o.mode
            ));
        }
        None
    }

    fn huge_objects(&self) -> Vec<(u64, u64)> {
        // Through the descriptor opened with the heap, not the path: a directory renamed or
        // replaced since is not this heap's.
        let own = PathBuf::from(format!("/proc/self/fd/{}", self.dir_fd.as_raw_fd()));
        let Ok(entries) = std::fs::read_dir(&own) else { return Vec::new() };
        entries.flatten().filter_map(|e| e.file_name().to_str().and_then(HugeName::parse)).collect()
    }
}
