//! This process's memory, split into HWcc, SWcc and other (docs/design.md §12.1).
//!
//! The split comes from `/proc/self/smaps`: every mapping's `Pss` and `Rss` are attributed by an
//! explicit region table ([`RegionTable`]) built from the heap directories this process has open.
//! A mapping belongs to a heap region only when its pathname is exactly `DIR/FILE`, where `DIR` is
//! one of the heap directories and `FILE` is one of [`RegionId::file_name`] (an unlinked heap's
//! ` (deleted)` suffix is allowed). Whether the region is HWcc comes from [`RegionId::is_hwcc`];
//! nothing here keeps a second copy of the region names or their coherence classes. (The published
//! harness matched file-name substrings and silently reported 0 HWcc after a rename.)
//!
//! A no-HWcc heap keeps its HWcc regions in its mCAS window file instead
//! ([`cxlalloc::internal::WINDOW_FILE`], next to the other region files), with the requesters'
//! request and answer slots that a device keeps in uncachable memory: every mapping of
//! `DIR/mcas-window` is HWcc ([`Class::Window`]), counted in the HWcc totals but in no single
//! region's.
//!
//! An anonymous heap ([`cxlalloc::Heap::anonymous`]) has no files, so its memory is `Other`.
//!
//! # Peak
//!
//! The kernel keeps a peak only for RSS (`VmHWM` in `/proc/self/status`, see [`peak_rss_bytes`]).
//! PSS has no kernel peak: the harness samples [`measure`] during a run and keeps the largest
//! sample as its peak PSS. RSS overstates shared memory (every process counts a shared page in
//! full), which is why PSS is what the harness sums over processes.
//!
//! Reading `/proc/self/smaps` walks every mapping under the process's mmap lock: measure between
//! timed phases, never inside one.
//!
//! A read is not atomic: the kernel fills it a page at a time and finds its place again by
//! address. A mapping that grows meanwhile — a cxlalloc heap maps its data 2 MiB at a time
//! next to what it mapped before, and the kernel merges the two — is printed again, whole, after
//! its first part was: summing such a read counted the heap's data twice or more (a sampled
//! peak PSS of 3.6 GiB for a process whose peak RSS was 1.25 GiB). [`split_mappings`] therefore
//! counts a mapping only where it starts at or above the end of the one before it
//! ([`MemorySplit::torn`] says whether it had to skip one), and [`measure`] reads again when a
//! read was torn.

use std::path::{Path, PathBuf};

use cxlalloc::internal::{RegionId, REGIONS};
use cxlalloc::internal::{UNLINKED_PREFIX, WINDOW_FILE};

/// What went wrong reading or parsing `/proc/self/smaps` or `/proc/self/status`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line that is neither a `Key: value` field nor a well-formed mapping header.
    #[error("smaps line {line}: malformed mapping header ({reason}): {text:?}")]
    BadHeader {
        /// 1-based line number.
        line: usize,
        /// Which part of the header is wrong.
        reason: &'static str,
        /// The line.
        text: String,
    },
    /// A `Key: value` field before the first mapping header.
    #[error("smaps line {line}: field {field:?} before any mapping header")]
    FieldBeforeHeader {
        /// 1-based line number.
        line: usize,
        /// The field's key.
        field: String,
    },
    /// A size field whose value is not `<n> kB` (or overflows when converted to bytes).
    #[error("smaps line {line}: field {field} has malformed size {value:?} (expected \"<n> kB\")")]
    BadSize {
        /// 1-based line number.
        line: usize,
        /// The field's key.
        field: String,
        /// The value as written.
        value: String,
    },
    /// `/proc/self/status` has no (well-formed) `VmHWM` line.
    #[error("no VmHWM line in process status")]
    NoPeak,
}

/// Fields that are always sizes; any other field whose value ends in `kB` is parsed too.
const SIZE_FIELDS: [&str; 3] = ["Size", "Rss", "Pss"];

/// Suffix the kernel appends to the pathname of a mapped file that has been unlinked.
const DELETED: &str = " (deleted)";

/// One mapping of `/proc/self/smaps`: its header line and its size fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Permissions as written, e.g. `rw-s`.
    pub perms: String,
    /// Offset into the mapped object.
    pub offset: u64,
    /// Device, `major:minor` as written.
    pub dev: String,
    /// Inode (0 for anonymous memory).
    pub inode: u64,
    /// Pathname as written, including any ` (deleted)` suffix; `None` for anonymous memory
    /// without a name.
    pub pathname: Option<String>,
    /// Every field written `<n> kB`, in bytes, in file order (unknown fields included).
    pub sizes: Vec<(String, u64)>,
}

impl Mapping {
    /// The value in bytes of size field `key` (e.g. `"Pss_Shmem"`), if the mapping has it.
    pub fn size(&self, key: &str) -> Option<u64> {
        self.sizes.iter().find(|(k, _)| k == key).map(|&(_, v)| v)
    }

    /// Resident bytes (0 if the field is absent).
    pub fn rss_bytes(&self) -> u64 {
        self.size("Rss").unwrap_or(0)
    }

    /// Proportional-set bytes (0 if the field is absent).
    pub fn pss_bytes(&self) -> u64 {
        self.size("Pss").unwrap_or(0)
    }

    /// Bytes of a shared or file mapping mapped by huge (PMD, 2 MiB on x86-64) page-table
    /// entries: `ShmemPmdMapped` (tmpfs, shm) plus `FilePmdMapped` (other page-cache files).
    pub fn pmd_mapped_bytes(&self) -> u64 {
        self.size("ShmemPmdMapped").unwrap_or(0) + self.size("FilePmdMapped").unwrap_or(0)
    }

    /// The pathname without the ` (deleted)` suffix, and whether the suffix was there.
    pub fn file(&self) -> Option<(&str, bool)> {
        let p = self.pathname.as_deref()?;
        Some(match p.strip_suffix(DELETED) {
            Some(stripped) => (stripped, true),
            None => (p, false),
        })
    }
}

fn bad_header(line: usize, reason: &'static str, text: &str) -> Error {
    Error::BadHeader { line, reason, text: text.to_string() }
}

/// Splits off the next whitespace-separated token of `s`.
fn next_token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

fn parse_header(line: usize, text: &str) -> Result<Mapping, Error> {
    let bad = |what| bad_header(line, what, text);
    let hex = |s: &str, what| u64::from_str_radix(s, 16).map_err(|_| bad(what));
    // Fields in order, each checked as it is read, so the error names the first bad one.
    let (range, rest) = next_token(text).ok_or_else(|| bad("empty"))?;
    let (start, end) = range.split_once('-').ok_or_else(|| bad("address range"))?;
    let (start, end) = (hex(start, "range start")?, hex(end, "range end")?);
    if end < start {
        return Err(bad("range end below start"));
    }
    let (perms, rest) = next_token(rest).ok_or_else(|| bad("no permissions"))?;
    let perms_ok = perms.len() == 4
        && perms.bytes().zip([b"r-", b"w-", b"x-", b"ps"]).all(|(c, allowed): (u8, &[u8; 2])| allowed.contains(&c));
    if !perms_ok {
        return Err(bad("permissions"));
    }
    let (offset, rest) = next_token(rest).ok_or_else(|| bad("no offset"))?;
    let offset = hex(offset, "offset")?;
    let (dev, rest) = next_token(rest).ok_or_else(|| bad("no device"))?;
    let dev_ok = dev
        .split_once(':')
        .is_some_and(|(ma, mi)| [ma, mi].iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit())));
    if !dev_ok {
        return Err(bad("device"));
    }
    let (inode, rest) = next_token(rest).ok_or_else(|| bad("no inode"))?;
    let inode = inode.parse::<u64>().map_err(|_| bad("inode"))?;
    // The pathname is everything after the padding; it may contain spaces.
    let pathname = rest.trim_start();
    let pathname = (!pathname.is_empty()).then(|| pathname.to_string());
    Ok(Mapping {
        start,
        end,
        perms: perms.to_string(),
        offset,
        dev: dev.to_string(),
        inode,
        pathname,
        sizes: Vec::new(),
    })
}

/// Parses `<n> kB` into bytes; `None` if the value has another form or overflows.
fn parse_kb(value: &str) -> Option<u64> {
    let n = value.strip_suffix("kB")?.trim_end();
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse::<u64>().ok()?.checked_mul(1024)
}

/// Parses smaps text (the format of `/proc/PID/smaps`) into its mappings.
///
/// A line whose first word ends in `:` is a field of the current mapping; any other non-blank
/// line must be a mapping header. Fields written `<n> kB` are kept in bytes; other fields
/// (`THPeligible`, `VmFlags`, `ProtectionKey`, ones newer kernels add) are skipped.
pub fn parse_smaps(text: &str) -> Result<Vec<Mapping>, Error> {
    let mut mappings: Vec<Mapping> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let first = next_token(raw).map_or("", |(t, _)| t);
        let Some(key) = first.strip_suffix(':') else {
            mappings.push(parse_header(line, raw)?);
            continue;
        };
        let Some(current) = mappings.last_mut() else {
            return Err(Error::FieldBeforeHeader { line, field: key.to_string() });
        };
        let value = raw.split_once(':').map_or("", |(_, v)| v).trim();
        let bad_size = || Error::BadSize { line, field: key.to_string(), value: value.to_string() };
        if value.ends_with("kB") {
            current.sizes.push((key.to_string(), parse_kb(value).ok_or_else(bad_size)?));
        } else if SIZE_FIELDS.contains(&key) {
            return Err(bad_size());
        }
    }
    Ok(mappings)
}

/// Which memory a mapping is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A heap region file whose [`RegionId::is_hwcc`] is true (`shared`, `claims`, `remote`).
    Hwcc(RegionId),
    /// Any other heap region file (`header`, `owned`, `local`, `data`).
    Swcc(RegionId),
    /// A no-HWcc heap's mCAS window file: its HWcc regions and the requester slots (HWcc).
    Window,
    /// Everything else: the binary, libraries, stack, the process's own heap, other files.
    Other,
}

/// The explicit region table: the full path of every region file of every heap directory.
#[derive(Clone, Debug)]
pub struct RegionTable {
    entries: Vec<(PathBuf, RegionId)>,
    /// Every heap directory's mCAS window file (present only for no-HWcc heaps).
    windows: Vec<PathBuf>,
}

impl RegionTable {
    /// The table for `heap_dirs` (directories as [`cxlalloc::Heap::location`] gives them).
    ///
    /// Paths are compared as given, component by component; smaps shows absolute paths with
    /// symbolic links resolved, so pass directories in that form ([`measure`] canonicalizes).
    pub fn new(heap_dirs: &[PathBuf]) -> Self {
        let entries =
            heap_dirs.iter().flat_map(|d| RegionId::ALL.into_iter().map(move |r| (d.join(r.file_name()), r))).collect();
        let windows = heap_dirs.iter().map(|d| d.join(WINDOW_FILE)).collect();
        RegionTable { entries, windows }
    }

    /// The heap region whose file is `path` (a ` (deleted)` suffix allowed, and the heap
    /// directory possibly renamed aside by an unlink: `same_file`).
    pub fn region_of(&self, path: &str) -> Option<RegionId> {
        let path = Path::new(path.strip_suffix(DELETED).unwrap_or(path));
        self.entries.iter().find(|(p, _)| same_file(p, path)).map(|&(_, r)| r)
    }

    /// Whether `path` is a heap directory's mCAS window file (as for [`RegionTable::region_of`]).
    pub fn is_window(&self, path: &str) -> bool {
        let path = Path::new(path.strip_suffix(DELETED).unwrap_or(path));
        self.windows.iter().any(|w| same_file(w, path))
    }

    /// The class of `mapping`.
    pub fn classify(&self, mapping: &Mapping) -> Class {
        let Some(path) = mapping.pathname.as_deref() else { return Class::Other };
        match self.region_of(path) {
            Some(r) if r.is_hwcc() => Class::Hwcc(r),
            Some(r) => Class::Swcc(r),
            None if self.is_window(path) => Class::Window,
            None => Class::Other,
        }
    }
}

/// Whether the mapped file `path` is the heap file `expected`: the same path, or the same file
/// name in the directory an unlink renamed the heap's directory to (a hidden
/// `.cxlalloc.unlinked-…` sibling: processes that have the heap open keep using it there).
fn same_file(expected: &Path, path: &Path) -> bool {
    if expected == path {
        return true;
    }
    let (Some(heap_dir), Some(dir)) = (expected.parent(), path.parent()) else { return false };
    expected.file_name() == path.file_name()
        && heap_dir.parent() == dir.parent()
        && dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with(UNLINKED_PREFIX))
}

/// This process's memory split by coherence class, in bytes.
///
/// Invariants: `total_pss_bytes == hwcc_pss_bytes + swcc_pss_bytes + other_pss_bytes`, the same
/// for RSS, and `region_pss_bytes` (indexed by `RegionId as usize`) plus `window_pss_bytes` sums
/// to `hwcc_pss_bytes + swcc_pss_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemorySplit {
    /// PSS of HWcc heap regions.
    pub hwcc_pss_bytes: u64,
    /// PSS of SWcc heap regions.
    pub swcc_pss_bytes: u64,
    /// PSS of everything else.
    pub other_pss_bytes: u64,
    /// PSS of the whole process.
    pub total_pss_bytes: u64,
    /// RSS of HWcc heap regions.
    pub hwcc_rss_bytes: u64,
    /// RSS of SWcc heap regions.
    pub swcc_rss_bytes: u64,
    /// RSS of everything else.
    pub other_rss_bytes: u64,
    /// RSS of the whole process.
    pub total_rss_bytes: u64,
    /// PSS per heap region, indexed by `RegionId as usize`, summed over heaps.
    pub region_pss_bytes: [u64; REGIONS],
    /// PSS of no-HWcc heaps' mCAS window files (part of `hwcc_pss_bytes`, of no region's).
    pub window_pss_bytes: u64,
    /// Bytes of heap region files (and mCAS window files) mapped by 2 MiB page-table entries
    /// ([`Mapping::pmd_mapped_bytes`]). A tmpfs mounted `huge=within_size` or `always` gives
    /// the region files huge pages too; `huge=advise` only the advised huge blocks, so on it
    /// this stays 0 (docs/design.md §7.6).
    pub region_pmd_bytes: u64,
    /// Bytes of every other file mapping mapped by 2 MiB page-table entries: the huge blocks'
    /// objects, which cxlalloc advises `MADV_HUGEPAGE`, among them.
    pub other_pmd_bytes: u64,
    /// Whether the read was torn: a mapping printed again (grown or merged while the file was
    /// read) was skipped, so the totals may miss what it gained meanwhile, but never count a
    /// page twice.
    #[serde(skip)]
    pub torn: bool,
}

impl MemorySplit {
    /// HWcc PSS as a fraction of the process's total PSS (0 when the total is 0).
    pub fn hwcc_share(&self) -> f64 {
        if self.total_pss_bytes == 0 {
            0.0
        } else {
            self.hwcc_pss_bytes as f64 / self.total_pss_bytes as f64
        }
    }

    /// Adds one mapping's sizes under `class`.
    fn add(&mut self, class: Class, pss: u64, rss: u64, pmd: u64) {
        match class {
            Class::Hwcc(_) | Class::Swcc(_) | Class::Window => self.region_pmd_bytes += pmd,
            Class::Other => self.other_pmd_bytes += pmd,
        }
        let (p, r) = match class {
            Class::Hwcc(_) | Class::Window => (&mut self.hwcc_pss_bytes, &mut self.hwcc_rss_bytes),
            Class::Swcc(_) => (&mut self.swcc_pss_bytes, &mut self.swcc_rss_bytes),
            Class::Other => (&mut self.other_pss_bytes, &mut self.other_rss_bytes),
        };
        *p += pss;
        *r += rss;
        match class {
            Class::Hwcc(region) | Class::Swcc(region) => self.region_pss_bytes[region as usize] += pss,
            Class::Window => self.window_pss_bytes += pss,
            Class::Other => {}
        }
        self.total_pss_bytes += pss;
        self.total_rss_bytes += rss;
    }
}

/// Splits parsed mappings with `table`. In address order, a mapping that starts below the end
/// of one before it was printed again by a torn read (see the module docs) and is skipped.
pub fn split_mappings(mappings: &[Mapping], table: &RegionTable) -> MemorySplit {
    let mut split = MemorySplit::default();
    let mut sorted: Vec<&Mapping> = mappings.iter().collect();
    // Stable: of a mapping printed twice, the first print (the part read before it grew) counts.
    sorted.sort_by_key(|m| m.start);
    let mut end = 0;
    for m in sorted {
        if m.start < end {
            split.torn = true;
            continue;
        }
        end = end.max(m.end);
        split.add(table.classify(m), m.pss_bytes(), m.rss_bytes(), m.pmd_mapped_bytes());
    }
    split
}

/// Parses `smaps_text` and splits it by the regions of `heap_dirs` (paths compared as given).
pub fn split(smaps_text: &str, heap_dirs: &[PathBuf]) -> Result<MemorySplit, Error> {
    Ok(split_mappings(&parse_smaps(smaps_text)?, &RegionTable::new(heap_dirs)))
}

fn read_proc(path: &str) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Io { path: PathBuf::from(path), source })
}

/// Measures this process now from `/proc/self/smaps`, splitting by the regions of `heap_dirs`.
///
/// Each directory is canonicalized when it still exists (smaps shows resolved absolute paths);
/// an unlinked heap's directory is used as given. A directory that names no file-backed heap
/// (e.g. `"anonymous"`) matches nothing.
/// A torn read is repeated up to [`READS`] times; the last one is returned as it is (its torn
/// mappings skipped).
pub fn measure(heap_dirs: &[PathBuf]) -> Result<MemorySplit, Error> {
    let dirs: Vec<PathBuf> = heap_dirs.iter().map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.clone())).collect();
    let mut measured = split(&read_proc("/proc/self/smaps")?, &dirs)?;
    for _ in 1..READS {
        if !measured.torn {
            break;
        }
        measured = split(&read_proc("/proc/self/smaps")?, &dirs)?;
    }
    Ok(measured)
}

/// Most reads [`measure`] makes for one measurement.
pub const READS: usize = 4;

/// The `VmHWM` (peak resident set) of `/proc/PID/status` text, in bytes.
pub fn parse_vm_hwm(status_text: &str) -> Result<u64, Error> {
    status_text.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| parse_kb(v.trim())).ok_or(Error::NoPeak)
}

/// This process's peak RSS so far (`VmHWM` of `/proc/self/status`), in bytes. See the
/// [module docs](self) for why peak PSS is sampled instead.
pub fn peak_rss_bytes() -> Result<u64, Error> {
    parse_vm_hwm(&read_proc("/proc/self/status")?)
}
