//! A heap in one fixed-size mappable object (docs/design.md §2.4): a DAX device (`/dev/daxX.Y`),
//! a PCI BAR's resource file (`/sys/bus/pci/devices/…/resource2`, which is how a QEMU guest sees
//! an `ivshmem` device), or, for tests, a plain file of that size.
//!
//! On a CXL pod the hosts share the device but no file system: there is no directory to hold
//! one file per region, no name to open a huge block by, and the object cannot be resized
//! (`ftruncate` and `fallocate` fail on a BAR). So `format` carves every region at a fixed
//! offset, derived from the header alone, and every host maps the same bytes:
//!
//! ```text
//! device offset 0                                                     (every start 2 MiB-aligned)
//! +--------+--------+--------+-------+--------+--------+-------+------+------------+-------------+
//! | header | shared | claims | owned | hazard | remote | local | data | huge range | mCAS window |
//! +--------+--------+--------+-------+--------+--------+-------+------+------------+-------------+
//!   page 0: the header, and at LABEL_AT the device label     huge_capacity bytes   no-HWcc only
//! ```
//!
//! Regions sit at their reservation offsets (the reservation and the device agree up to the end
//! of the data region); the huge range follows at the next 2 MiB boundary instead of the next
//! 1 GiB one, and a huge block at heap offset `o` is the device's bytes at
//! `huge + (o - huge span start)`; a no-HWcc heap's mCAS window comes last, and its HWcc regions
//! live in the window's target area (their own slots in the device stay unused).
//!
//! The device label records that carving and the heap's identity, so an opener refuses a device
//! carved by another build (`Mismatch`), a label of another heap (`ForeignRegion`), a heap
//! directory's header file given as a device (`NotADevice`), and a device shorter than the
//! carving (`Truncated`). The header and label are read and written through a mapping, never
//! with `pread`/`pwrite`, which a BAR's resource file does not support.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::FallocateFlags;

use super::{Backing, HugeName};
use crate::coherence::{window_geometry, McasHome};
use crate::error::OpenError;
use crate::layout::{fnv1a, page_size, Coherence, Header, Layout, RegionId, HEADER_BYTES, REGIONS, REGION_ALIGN};
use crate::mcas::{Geometry, Window};

/// Byte offset of the device label in the header page (after the header, which is smaller).
const LABEL_AT: usize = 2048;
/// The label's magic.
const LABEL_MAGIC: [u8; 8] = *b"CXLDEV01";
/// Largest mapping alignment a device may require: every carved range starts on a 2 MiB
/// boundary.
const MAX_DEVICE_ALIGN: usize = REGION_ALIGN;
/// Mapping alignment assumed for a DAX device whose sysfs directory does not say.
const DAX_DEFAULT_ALIGN: usize = 2 << 20;

const _: () = assert!(std::mem::size_of::<Header>() <= LABEL_AT);
const _: () = assert!(LABEL_AT + std::mem::size_of::<Label>() <= HEADER_BYTES);

/// Where everything of a heap lies in its device: a function of the header alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Carving {
    /// Device offset of each region, in [`RegionId`] order (a no-HWcc heap's HWcc regions: in
    /// the window's target area).
    pub regions: [u64; REGIONS],
    /// Device offset of the huge range (0: no huge heap).
    pub huge: u64,
    /// Device offset and geometry of the mCAS window (no-HWcc heaps).
    pub window: Option<(u64, Geometry)>,
    /// Bytes of the device the heap uses.
    pub bytes: u64,
}

fn align(x: u64) -> u64 {
    x.next_multiple_of(REGION_ALIGN as u64)
}

impl Carving {
    /// The carving of the heap whose header is `header`.
    pub(crate) fn of(header: &Header) -> Self {
        let layout = Layout::from_header(header);
        let mut regions = RegionId::ALL.map(|r| layout.region(r).offset as u64);
        let data = layout.region(RegionId::Data);
        let mut cursor = align(data.end() as u64);
        let huge = if layout.huge.size > 0 { cursor } else { 0 };
        cursor += layout.huge.size as u64;
        let mut window = None;
        if Coherence::from_raw(header.coherence) == Some(Coherence::NoHwcc) {
            let hwcc: u64 =
                RegionId::ALL.iter().filter(|r| r.is_hwcc()).map(|&r| header.region_bytes[r as usize]).sum();
            let geometry = window_geometry(header.slots, hwcc);
            let at = align(cursor);
            let mut target = at + geometry.target_offset();
            for r in RegionId::ALL.into_iter().filter(|r| r.is_hwcc()) {
                regions[r as usize] = target;
                target += header.region_bytes[r as usize];
            }
            window = Some((at, geometry));
            cursor = at + align(geometry.file_bytes());
        }
        Carving { regions, huge, window, bytes: align(cursor) }
    }
}

/// The device label, at [`LABEL_AT`] of the header page: the carving the formatter used and the
/// heap's identity. Written once by `format`, before the header's magic; read-only after.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Label {
    /// [`LABEL_MAGIC`].
    magic: [u8; 8],
    /// The header's heap id.
    heap_id: u64,
    /// [`Carving::bytes`].
    bytes: u64,
    /// [`Carving::regions`].
    regions: [u64; REGIONS],
    /// [`Carving::huge`].
    huge: u64,
    /// Device offset of the mCAS window (0: none).
    window: u64,
    /// Bytes of the mCAS window (0: none).
    window_bytes: u64,
    /// FNV-1a of all preceding bytes.
    checksum: u64,
}

const _: () = assert!(std::mem::size_of::<Label>() % 8 == 0);

impl Label {
    fn new(c: &Carving, heap_id: u64) -> Self {
        let mut l = Label {
            magic: LABEL_MAGIC,
            heap_id,
            bytes: c.bytes,
            regions: c.regions,
            huge: c.huge,
            window: c.window.map_or(0, |(at, _)| at),
            window_bytes: c.window.map_or(0, |(_, g)| g.file_bytes()),
            checksum: 0,
        };
        l.checksum = l.compute_checksum();
        l
    }

    fn as_bytes(&self) -> &[u8] {
        // SAFETY: Label is repr(C), Copy, made only of integers and byte arrays, with no padding
        // (all fields 8-byte multiples), so every byte is initialized.
        unsafe { std::slice::from_raw_parts((self as *const Self).cast::<u8>(), std::mem::size_of::<Self>()) }
    }

    fn compute_checksum(&self) -> u64 {
        let b = self.as_bytes();
        fnv1a(&b[..b.len() - 8])
    }

    /// The label in the header page `page`, if one is there (its magic).
    fn read(page: &[u8]) -> Option<Self> {
        let bytes = page.get(LABEL_AT..LABEL_AT + std::mem::size_of::<Self>())?;
        if bytes[..8] != LABEL_MAGIC {
            return None;
        }
        // SAFETY: the slice holds size_of::<Label>() bytes; Label is plain integers, valid for
        // any bit pattern, and read_unaligned imposes no alignment.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) })
    }
}

/// What kind of object a device path names, and how big it is.
struct Probe {
    /// Bytes of the object.
    bytes: u64,
    /// Mapping granule, if larger than a page (a DAX device's alignment).
    align: usize,
    /// A plain file: `fallocate` reserves and frees its memory.
    regular: bool,
}

fn sys(op: &'static str, path: &Path, e: std::io::Error) -> OpenError {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => OpenError::PermissionDenied { path: path.to_path_buf() },
        std::io::ErrorKind::NotFound => OpenError::NotFound(path.to_path_buf()),
        _ => OpenError::Io { op, path: path.to_path_buf(), source: e },
    }
}

/// A number in a sysfs attribute file of the character device `rdev`.
fn sysfs_number(rdev: u64, attribute: &str) -> Option<u64> {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let text = std::fs::read_to_string(format!("/sys/dev/char/{major}:{minor}/{attribute}")).ok()?;
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

fn probe(file: &File, path: &Path) -> Result<Probe, OpenError> {
    let meta = file.metadata().map_err(|e| sys("stat", path, e))?;
    let not = |what: &str| Err(OpenError::NotADevice { path: path.to_path_buf(), what: what.to_string() });
    let kind = meta.file_type();
    if kind.is_file() {
        // A plain file, or a PCI BAR's resource file in sysfs (whose size is the BAR's, and
        // which cannot be fallocated).
        let sysfs =
            nix::sys::statfs::fstatfs(file).is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::SYSFS_MAGIC);
        return Ok(Probe { bytes: meta.len(), align: 0, regular: !sysfs });
    }
    if kind.is_char_device() {
        use std::os::unix::fs::MetadataExt;
        let Some(bytes) = sysfs_number(meta.rdev(), "size") else {
            return not("a character device with no size in /sys/dev/char (only DAX devices hold heaps)");
        };
        let align = sysfs_number(meta.rdev(), "align").map_or(DAX_DEFAULT_ALIGN, |a| a as usize);
        if align > MAX_DEVICE_ALIGN {
            return not(&format!("mapping alignment {align} bytes; the carving supports up to {MAX_DEVICE_ALIGN}"));
        }
        return Ok(Probe { bytes, align, regular: false });
    }
    if kind.is_dir() {
        return not("a directory (a heap directory is opened with Heap::open_at, `cxlalloc --at DIR`)");
    }
    not("neither a file nor a character device")
}

fn open_rw(path: &Path) -> Result<File, OpenError> {
    OpenOptions::new().read(true).write(true).open(path).map_err(|e| sys_or_dir("open", path, e))
}

fn sys_or_dir(op: &'static str, path: &Path, e: std::io::Error) -> OpenError {
    if e.raw_os_error() == Some(libc::EISDIR) {
        return OpenError::NotADevice {
            path: path.to_path_buf(),
            what: "a directory (a heap directory is opened with Heap::open_at, `cxlalloc --at DIR`)".into(),
        };
    }
    sys(op, path, e)
}

/// A shared read-write mapping of `len` bytes at `offset` of the device.
fn map(file: &File, path: &Path, offset: u64, len: u64) -> Result<memmap2::MmapRaw, OpenError> {
    memmap2::MmapOptions::new().offset(offset).len(len as usize).map_raw(file).map_err(|e| OpenError::Io {
        op: "map",
        path: path.to_path_buf(),
        source: e,
    })
}

/// Zeroes `len` bytes at `offset` of the device: a hole punched in a plain file (which also
/// gives its memory back), else stores through a mapping, a chunk at a time.
fn zero(file: &File, path: &Path, regular: bool, offset: u64, len: u64) -> Result<(), OpenError> {
    if len == 0 {
        return Ok(());
    }
    let punch = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    if regular && nix::fcntl::fallocate(file, punch, offset as i64, len as i64).is_ok() {
        return Ok(());
    }
    const CHUNK: u64 = 1 << 30;
    let mut at = offset;
    while at < offset + len {
        let n = CHUNK.min(offset + len - at);
        let m = map(file, path, at, n)?;
        // SAFETY: the mapping is `n` bytes, writable, and ours until dropped; formatting owns
        // the device (nobody else may use it meanwhile: docs/design.md §2.4).
        unsafe { std::ptr::write_bytes(m.as_mut_ptr(), 0, n as usize) };
        at += n;
    }
    Ok(())
}

/// Gives the plain file standing in for a device the heap's mode (`Config::mode`), whatever
/// its mode was and whatever the umask, as a heap directory's files get it (docs/design.md
/// §2.4): the file is the heap's only file. Nothing to do if it has the mode already; a file
/// of another user is refused ([`OpenError::PermissionDenied`]) unless it has the mode.
fn apply_mode(file: &File, path: &Path, mode: u32) -> Result<(), OpenError> {
    use std::os::unix::fs::PermissionsExt;
    let now = file.metadata().map_err(|e| sys("stat", path, e))?.permissions().mode() & 0o7777;
    if now == mode {
        return Ok(());
    }
    file.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(|e| sys("chmod", path, e))
}

/// Reads the header page of the device through a mapping.
fn read_header_page(file: &File, path: &Path) -> Result<Vec<u8>, OpenError> {
    let m = memmap2::MmapOptions::new().len(HEADER_BYTES).map_raw_read_only(file).map_err(|e| OpenError::Io {
        op: "map",
        path: path.to_path_buf(),
        source: e,
    })?;
    let mut page = vec![0u8; HEADER_BYTES];
    // SAFETY: the mapping holds HEADER_BYTES readable bytes; `page` is as long and distinct.
    unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), page.as_mut_ptr(), HEADER_BYTES) };
    Ok(page)
}

/// Refuses a no-HWcc carving on a device that maps only units larger than a page: the window
/// packs the HWcc regions at page offsets of its target area.
fn check_window_unit(path: &Path, carving: &Carving, probe: &Probe) -> Result<(), OpenError> {
    if carving.window.is_some() && probe.align > page_size() {
        return Err(OpenError::NotADevice {
            path: path.to_path_buf(),
            what: format!(
                "maps only {}-byte units, and a no-HWcc heap's mCAS window packs its regions at page \
                 offsets (use a BAR's resource file or a plain file, or another coherence model)",
                probe.align
            ),
        });
    }
    Ok(())
}

/// The header and label of the device at `path`, validated; with the open file and its probe.
fn read_validated(path: &Path, file: File) -> Result<(File, Probe, Header, Carving), OpenError> {
    let probe = probe(&file, path)?;
    if probe.bytes < HEADER_BYTES as u64 {
        return Err(OpenError::DeviceTooSmall {
            path: path.to_path_buf(),
            needed: HEADER_BYTES as u64,
            actual: probe.bytes,
        });
    }
    let page = read_header_page(&file, path)?;
    if page[..8] == [0; 8] {
        return Err(OpenError::NotFormatted(path.to_path_buf()));
    }
    let header = Header::parse(&page, path)?;
    let Some(label) = Label::read(&page) else {
        return Err(OpenError::NotADevice {
            path: path.to_path_buf(),
            what: "a heap header with no device label (a heap directory's header file? open the directory)".into(),
        });
    };
    if label.checksum != label.compute_checksum() {
        return Err(OpenError::Checksum(path.to_path_buf()));
    }
    if label.heap_id != header.heap_id {
        return Err(OpenError::ForeignRegion {
            path: path.to_path_buf(),
            found: label.heap_id,
            expected: header.heap_id,
        });
    }
    let carving = Carving::of(&header);
    let expected = Label::new(&carving, header.heap_id);
    let fields: [(&'static str, u64, u64); 4] = [
        ("device bytes", label.bytes, expected.bytes),
        ("device huge range offset", label.huge, expected.huge),
        ("device mCAS window offset", label.window, expected.window),
        ("device mCAS window bytes", label.window_bytes, expected.window_bytes),
    ];
    for (field, found, want) in fields {
        if found != want {
            return Err(OpenError::Mismatch { field, found, expected: want });
        }
    }
    for (&found, &want) in label.regions.iter().zip(&expected.regions) {
        if found != want {
            return Err(OpenError::Mismatch { field: "device region offset", found, expected: want });
        }
    }
    if probe.bytes < carving.bytes {
        return Err(OpenError::Truncated { path: path.to_path_buf(), expected: carving.bytes, actual: probe.bytes });
    }
    check_window_unit(path, &carving, &probe)?;
    Ok((file, probe, header, carving))
}

/// A heap device, kept open for the life of the heap.
#[derive(Debug)]
pub(crate) struct DeviceBacking {
    path: PathBuf,
    file: File,
    carving: Carving,
    /// Heap offset of the huge span (the reservation's, 1 GiB-aligned).
    huge_span: u64,
    /// Mapping granule if larger than a page.
    align: usize,
    /// A plain file: `fallocate` works on it.
    regular: bool,
    home: Option<McasHome>,
}

impl DeviceBacking {
    /// Bytes of the device at `path`.
    pub(crate) fn capacity(path: &Path) -> Result<u64, OpenError> {
        let file = OpenOptions::new().read(true).open(path).map_err(|e| sys_or_dir("open", path, e))?;
        Ok(probe(&file, path)?.bytes)
    }

    /// Bytes a device needs to hold a heap with `header`.
    pub(crate) fn bytes_needed(header: &Header) -> u64 {
        Carving::of(header).bytes
    }

    /// Formats the device at `path` for a heap with `header` (its `heap_id` set): zeroes the
    /// magic first (a crash leaves an unformatted device, never an old header over new
    /// metadata), then every carved range but the huge one, writes the mCAS window's header
    /// (no-HWcc), the label, and the header, its magic last. Whatever the device held is lost;
    /// nobody may use it meanwhile.
    pub(crate) fn format(path: &Path, header: &Header) -> Result<(), OpenError> {
        let file = open_rw(path)?;
        let probe = probe(&file, path)?;
        let carving = Carving::of(header);
        if probe.bytes < carving.bytes {
            return Err(OpenError::DeviceTooSmall {
                path: path.to_path_buf(),
                needed: carving.bytes,
                actual: probe.bytes,
            });
        }
        check_window_unit(path, &carving, &probe)?;
        if probe.regular {
            // Before anything is written: a device this user may not give the heap's mode is
            // refused whole.
            apply_mode(&file, path, header.mode)?;
        }
        let page = map(&file, path, 0, HEADER_BYTES as u64)?;
        // SAFETY: the mapping holds HEADER_BYTES writable bytes, ours until dropped.
        unsafe { std::ptr::write_bytes(page.as_mut_ptr(), 0, HEADER_BYTES) };
        page.flush().map_err(|e| OpenError::Io { op: "flush", path: path.to_path_buf(), source: e })?;
        let layout = Layout::from_header(header);
        let data_end = carving.regions[RegionId::Data as usize] + layout.region(RegionId::Data).size as u64;
        zero(&file, path, probe.regular, 0, data_end)?;
        if let Some((at, geometry)) = carving.window {
            zero(&file, path, probe.regular, at, geometry.file_bytes())?;
        }
        if probe.regular {
            // Small, and touched by every process (hazards: from the signal handler, which
            // cannot report ENOSPC): reserved now, as in a heap directory.
            for r in [RegionId::Header, RegionId::Shared, RegionId::Claims, RegionId::Hazard] {
                let (at, len) = (carving.regions[r as usize], header.region_bytes[r as usize]);
                nix::fcntl::fallocate(&file, FallocateFlags::FALLOC_FL_KEEP_SIZE, at as i64, len as i64)
                    .map_err(|e| OpenError::Io { op: "reserve", path: path.to_path_buf(), source: e.into() })?;
            }
        }
        if let Some((at, geometry)) = carving.window {
            let window = Window::format_in(&file, path, at, geometry).map_err(|e| OpenError::Mcas(e.to_string()))?;
            window.set_owner(header.heap_id);
        }
        let label = Label::new(&carving, header.heap_id);
        let bytes = header.as_bytes();
        // SAFETY: the label and the header fit the page (asserted sizes); the page mapping is
        // ours and writable. The magic goes last, after a fence, so that an opener that sees it
        // sees everything else.
        unsafe {
            let p = page.as_mut_ptr();
            std::ptr::copy_nonoverlapping(label.as_bytes().as_ptr(), p.add(LABEL_AT), label.as_bytes().len());
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(8), p.add(8), bytes.len() - 8);
            crate::sync::fence(crate::sync::Ordering::Release);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, 8);
        }
        page.flush().map_err(|e| OpenError::Io { op: "flush", path: path.to_path_buf(), source: e })
    }

    /// Opens the heap on the device at `path`: validates the header as a heap directory's open
    /// does, then the label (carving and identity), the device's size, and a no-HWcc heap's
    /// mCAS window.
    pub(crate) fn open(path: &Path) -> Result<(Self, Header), OpenError> {
        let (file, probe, header, carving) = read_validated(path, open_rw(path)?)?;
        let mut home = None;
        if let Some((at, geometry)) = carving.window {
            let window =
                Window::open_in(&file, path, at, geometry.file_bytes()).map_err(|e| OpenError::Mcas(e.to_string()))?;
            if window.geometry() != geometry {
                return Err(OpenError::Mismatch {
                    field: "mCAS window target bytes",
                    found: window.geometry().target_bytes,
                    expected: geometry.target_bytes,
                });
            }
            if window.owner() != header.heap_id {
                return Err(OpenError::ForeignRegion {
                    path: path.to_path_buf(),
                    found: window.owner(),
                    expected: header.heap_id,
                });
            }
            home = Some(McasHome::DeviceWindow { path: path.to_path_buf(), offset: at, len: geometry.file_bytes() });
        }
        let huge_span = Layout::from_header(&header).huge.offset as u64;
        let backing = DeviceBacking {
            path: path.to_path_buf(),
            file,
            carving,
            huge_span,
            align: if probe.align > page_size() { probe.align } else { 0 },
            regular: probe.regular,
            home,
        };
        Ok((backing, header))
    }

    /// The mCAS window carved in the no-HWcc heap device at `path`, for the software mCAS device
    /// that serves it (`cxlalloc-mcasd --device PATH`).
    pub(crate) fn window(path: &Path) -> Result<Window, OpenError> {
        let (file, _, header, carving) = read_validated(path, open_rw(path)?)?;
        let Some((at, geometry)) = carving.window else {
            return Err(OpenError::Mcas(format!(
                "{}: a heap with coherence {} has no mCAS window",
                path.display(),
                header.config().coherence.name()
            )));
        };
        Window::open_in(&file, path, at, geometry.file_bytes()).map_err(|e| OpenError::Mcas(e.to_string()))
    }

    /// The header of the heap on the device at `path` and where region `r` lies in it, for the
    /// read-only survey (`crate::survey`), which maps only what it reads.
    pub(crate) fn survey(path: &Path) -> Result<(File, Header, Carving), OpenError> {
        let file = OpenOptions::new().read(true).open(path).map_err(|e| sys_or_dir("open", path, e))?;
        let (file, _, header, carving) = read_validated(path, file)?;
        Ok((file, header, carving))
    }

    /// Reads `buf.len()` bytes at byte `at` of a device through a read-only mapping of the pages
    /// that hold them.
    pub(crate) fn read_mapped(file: &File, path: &Path, at: u64, buf: &mut [u8]) -> Result<(), OpenError> {
        let page = page_size() as u64;
        let start = at / page * page;
        let len = (at - start) as usize + buf.len();
        let map = memmap2::MmapOptions::new()
            .offset(start)
            .len(len)
            .map_raw_read_only(file)
            .map_err(|source| OpenError::Io { op: "map", path: path.to_path_buf(), source })?;
        // SAFETY: the mapping holds `len` readable bytes, of which `buf.len()` from `at - start`;
        // `buf` is distinct memory. Words other processes write meanwhile may read torn, as any
        // survey's `pread` would: the survey is a snapshot, advisory.
        unsafe { std::ptr::copy_nonoverlapping(map.as_ptr().add((at - start) as usize), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }
}

impl Backing for DeviceBacking {
    fn fd(&self, _: RegionId) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }

    fn commit(&self, r: RegionId, off: usize, len: usize) -> Result<(), Errno> {
        if !self.regular {
            // Device memory is all there; it cannot be fallocated.
            return Ok(());
        }
        let at = self.carving.regions[r as usize] + off as u64;
        nix::fcntl::fallocate(&self.file, FallocateFlags::FALLOC_FL_KEEP_SIZE, at as i64, len as i64).map(|_| ())
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn huge_create(&self, name: &HugeName, len: usize, commit: bool) -> Result<Option<OwnedFd>, Errno> {
        let (offset, _) = name.as_cstr().to_str().ok().and_then(HugeName::parse).ok_or(Errno::EINVAL)?;
        let rel = offset.checked_sub(self.huge_span).ok_or(Errno::EINVAL)?;
        if commit && self.regular {
            let at = self.carving.huge + rel;
            nix::fcntl::fallocate(&self.file, FallocateFlags::FALLOC_FL_KEEP_SIZE, at as i64, len as i64)?;
        }
        // The block is the device at its place in the huge range (`huge_device`): the caller
        // maps this descriptor there.
        self.file.as_fd().try_clone_to_owned().map(Some).map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))
    }

    fn region_offset(&self, r: RegionId) -> u64 {
        self.carving.regions[r as usize]
    }

    fn mcas_home(&self) -> Option<McasHome> {
        self.home.clone()
    }

    fn huge_device(&self) -> Option<(RawFd, u64)> {
        (self.carving.huge != 0).then(|| (self.file.as_raw_fd(), self.carving.huge))
    }

    fn map_align(&self) -> usize {
        self.align
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Config;

    #[test]
    fn carved_ranges_are_aligned_disjoint_and_inside_the_device() {
        for coherence in Coherence::ALL {
            let huge = if coherence == Coherence::Full { 2 << 30 } else { 0 };
            let config = Config { huge_capacity: huge, coherence, ..Config::with_capacity(64 << 20) };
            let header = Header::new(&config, 1).with_heap_id(7);
            let c = Carving::of(&header);
            let mut ranges: Vec<(u64, u64)> = RegionId::ALL
                .iter()
                .filter(|r| !(coherence == Coherence::NoHwcc && r.is_hwcc()))
                .map(|&r| (c.regions[r as usize], header.region_bytes[r as usize]))
                .collect();
            if huge > 0 {
                ranges.push((c.huge, huge));
            }
            if let Some((at, g)) = c.window {
                ranges.push((at, g.file_bytes()));
            }
            ranges.sort();
            for w in ranges.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "{coherence:?}: {w:?} overlap");
            }
            for &(at, len) in &ranges {
                assert_eq!(at % REGION_ALIGN as u64, 0, "{coherence:?}: {at:#x} unaligned");
                assert!(at + len <= c.bytes, "{coherence:?}: range past the device");
            }
        }
    }

    #[test]
    fn a_no_hwcc_window_is_refused_on_a_device_that_maps_only_2_mib_units() {
        let config = Config { coherence: Coherence::NoHwcc, huge_capacity: 0, ..Config::with_capacity(64 << 20) };
        let carving = Carving::of(&Header::new(&config, 1));
        let dax = Probe { bytes: carving.bytes, align: 2 << 20, regular: false };
        let bar = Probe { bytes: carving.bytes, align: 0, regular: false };
        assert!(matches!(check_window_unit(Path::new("d"), &carving, &dax), Err(OpenError::NotADevice { .. })));
        assert!(check_window_unit(Path::new("d"), &carving, &bar).is_ok());
        let full = Carving::of(&Header::new(&Config::with_capacity(64 << 20), 1));
        assert!(check_window_unit(Path::new("d"), &full, &dax).is_ok());
    }

    #[test]
    fn a_label_round_trips_and_a_flipped_byte_fails_its_checksum() {
        let header = Header::new(&Config::with_capacity(64 << 20), 1).with_heap_id(9);
        let label = Label::new(&Carving::of(&header), 9);
        let mut page = vec![0u8; HEADER_BYTES];
        page[LABEL_AT..LABEL_AT + label.as_bytes().len()].copy_from_slice(label.as_bytes());
        let back = Label::read(&page);
        assert_eq!(back, Some(label));
        page[LABEL_AT + 20] ^= 1;
        let flipped = Label::read(&page).map(|l| l.checksum == l.compute_checksum());
        assert_eq!(flipped, Some(false));
    }
}
