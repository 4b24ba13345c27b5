//! The shared-memory window through which software drives an mCAS device (the format of
//! `fpga/cosim/mcas_window.h` and `fpga/README.md`, "The window"): a 4 KiB header, one 128-byte
//! request (spwr) and one 128-byte answer (sprd) slot per requester, then the target area whose
//! 8-byte words the CASes operate on.
//!
//! Served by the software mCAS device ([`crate::mcas::device`]) or by the RTL co-simulation
//! (`mcas-cosim`); a real device maps the same roles onto uncachable address ranges. Clients
//! only ever open a window: creating, sizing and never zeroing it is the server's job.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memmap2::MmapRaw;

use crate::identity::name_of;
use crate::protocol::host_number;
use crate::sync::{AtomicU64, Ordering};

/// The header's magic, stored last by the creator.
pub(crate) const MAGIC: [u8; 8] = *b"CXLMCAS1";
/// The window format's version.
pub(crate) const VERSION: u32 = 1;
/// Bytes of the header.
pub(crate) const HEADER_BYTES: u64 = 4096;
/// Bytes of one request or answer slot.
pub(crate) const SLOT_BYTES: u64 = 128;
/// Most requesters a window may have.
pub(crate) const MAX_SLOTS: u32 = 65_536;
/// Largest target area (the RTL build's 32-bit word address).
pub(crate) const MAX_TARGET_BYTES: u64 = 8 << 32;
/// How long an opener waits for a concurrent creator to publish the header.
pub const HEADER_WAIT: Duration = Duration::from_secs(5);

/// Why a window could not be opened or created.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    /// The file could not be opened, created, sized or mapped.
    #[error("mCAS window {path}: {source}")]
    Io {
        /// The window file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No header was published within [`HEADER_WAIT`] (a creator died mid-way: remove the file).
    #[error("mCAS window {0}: no header (a creator died before publishing it? remove the file)")]
    NoHeader(PathBuf),
    /// The header or the file does not match the format.
    #[error("mCAS window {path}: {what}")]
    Invalid {
        /// The window file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

/// Geometry of a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Requesters (request/answer slot pairs).
    pub slots: u32,
    /// Bytes of the target area (a multiple of 8).
    pub target_bytes: u64,
}

impl Geometry {
    /// Byte offset of the target area.
    pub fn target_offset(self) -> u64 {
        (HEADER_BYTES + 2 * u64::from(self.slots) * SLOT_BYTES).next_multiple_of(4096)
    }

    /// Size of the whole file.
    pub fn file_bytes(self) -> u64 {
        self.target_offset() + self.target_bytes
    }

    fn check(self) -> Result<(), String> {
        if self.slots == 0 || self.slots > MAX_SLOTS {
            return Err(format!("slots {} not in 1..={MAX_SLOTS}", self.slots));
        }
        if self.target_bytes == 0 || self.target_bytes % 8 != 0 || self.target_bytes > MAX_TARGET_BYTES {
            return Err(format!("target_bytes {} not a positive multiple of 8 up to 32 GiB", self.target_bytes));
        }
        Ok(())
    }
}

/// A mapped window.
pub struct Window {
    map: MmapRaw,
    geometry: Geometry,
    path: PathBuf,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window").field("path", &self.path).field("geometry", &self.geometry).finish()
    }
}

/// Field offsets inside a request slot.
pub(crate) mod spwr {
    pub(crate) const EXPECTED: u64 = 0;
    pub(crate) const SWAP: u64 = 8;
    pub(crate) const TARGET: u64 = 16;
    pub(crate) const REQUESTER: u64 = 24;
    pub(crate) const SEQ: u64 = 32;
}

/// Field offsets inside an answer slot.
pub(crate) mod sprd {
    pub(crate) const PREV: u64 = 0;
    pub(crate) const SUCCESS: u64 = 8;
    pub(crate) const DONE_SEQ: u64 = 16;
    pub(crate) const ERROR: u64 = 24;
}

const H_VERSION: u64 = 8;
const H_SLOTS: u64 = 12;
const H_TARGET_BYTES: u64 = 16;
const H_SERVER_PID: u64 = 24;
/// The software device's parked word (1 while it sleeps on it as a futex, else 0). A server
/// that never parks (the RTL co-simulation) leaves it 0, and clients then never wake anyone.
const H_PARKED: u64 = 32;
/// The identity (`Header::heap_id`) of the heap whose HWcc regions the window holds, written
/// by the heap's creator before the heap becomes visible; 0 for a window of no heap.
const H_OWNER: u64 = 40;
/// The host-number claims (docs/design.md §9.2): [`HOST_CLAIMS`] lines of [`CLAIM_BYTES`] from
/// here, one per host number. Word 0 of a line is the claiming kernel's fingerprint
/// (`identity::kernel`, 0 = free), CASed by clients with CPU atomics, as the server word is
/// claimed: the software device serves this window only where its memory is coherent among the
/// hosts that map it, since requests and answers cross hosts through it the same way. Word 1
/// is the wall-clock second of the claim, words 2..6 the claiming host's name (advice, written
/// by the claimant after its CAS; a reader tolerates a stale or half-written name). Zero in a
/// window written before claims existed: every number free.
const H_CLAIMS: u64 = 1024;
/// Host numbers the window keeps claims for.
pub(crate) const HOST_CLAIMS: u32 = 8;
/// Bytes of one claim: its own cache line, since each is CASed by another host.
const CLAIM_BYTES: u64 = 64;

const _: () = assert!(H_CLAIMS + HOST_CLAIMS as u64 * CLAIM_BYTES <= HEADER_BYTES);
const _: () = assert!(H_CLAIMS >= H_OWNER + 8);

/// Who holds a host number's claim in a window ([`Window::host_claim`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostClaim {
    /// The claiming kernel's fingerprint (`identity::kernel`).
    pub kernel: u64,
    /// Wall-clock second of the claim (advice).
    pub since: u64,
    /// The claiming host's name, as it wrote it (advice).
    pub name: String,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WindowError + '_ {
    move |source| WindowError::Io { path: path.to_path_buf(), source }
}

impl Window {
    fn map_file(file: &File, path: &Path) -> Result<MmapRaw, WindowError> {
        MmapRaw::map_raw(file).map_err(io(path))
    }

    /// Maps `len` bytes at byte `offset` (page-aligned) of `file`, without asking the file its
    /// size (a PCI BAR's resource file or a DAX device cannot be resized, and a character
    /// device reports none).
    fn map_range(file: &File, path: &Path, offset: u64, len: u64) -> Result<MmapRaw, WindowError> {
        memmap2::MmapOptions::new().offset(offset).len(len as usize).map_raw(file).map_err(io(path))
    }

    /// Opens an existing window: waits up to [`HEADER_WAIT`] for its magic while it is still
    /// zero (a creator mid-way), refuses any other magic at once, then validates the version,
    /// the geometry and the file size. Never writes to it.
    pub fn open(path: &Path) -> Result<Self, WindowError> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io(path))?;
        Self::open_file(&file, path)
    }

    /// As [`Window::open`], for a file already open for reading and writing (`path` names it
    /// in errors): a heap opener reaches its window relative to the heap directory it opened.
    pub fn open_file(file: &File, path: &Path) -> Result<Self, WindowError> {
        let len = file.metadata().map_err(io(path))?.len();
        if len < HEADER_BYTES {
            return Err(WindowError::Invalid {
                path: path.to_path_buf(),
                what: format!("{len} bytes, shorter than the header"),
            });
        }
        Self::open_in(file, path, 0, len)
    }

    /// As [`Window::open_file`], for a window that fills the `len` bytes at byte `offset`
    /// (page-aligned) of `file`: the window a heap device carves for a no-HWcc heap
    /// (docs/design.md §2.4).
    pub fn open_in(file: &File, path: &Path, offset: u64, len: u64) -> Result<Self, WindowError> {
        let invalid = |what: String| WindowError::Invalid { path: path.to_path_buf(), what };
        if len < HEADER_BYTES {
            return Err(invalid(format!("{len} bytes, shorter than the header")));
        }
        let map = Self::map_range(file, path, offset, len)?;
        let w = Window { map, geometry: Geometry { slots: 1, target_bytes: 8 }, path: path.to_path_buf() };
        let started = Instant::now();
        loop {
            let magic = w.word(0).load(Ordering::Acquire);
            if magic.to_le_bytes() == MAGIC {
                break;
            }
            if magic != 0 {
                // Not a creator mid-way (it publishes the magic whole): some other file.
                return Err(invalid("not an mCAS window (bad magic)".to_string()));
            }
            if started.elapsed() > HEADER_WAIT {
                return Err(WindowError::NoHeader(path.to_path_buf()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let version = w.u32_at(H_VERSION);
        if version != VERSION {
            return Err(invalid(format!("version {version}, expected {VERSION}")));
        }
        let geometry =
            Geometry { slots: w.u32_at(H_SLOTS), target_bytes: w.word(H_TARGET_BYTES).load(Ordering::Relaxed) };
        geometry.check().map_err(&invalid)?;
        if len != geometry.file_bytes() {
            return Err(invalid(format!("{len} bytes, the header's geometry needs {}", geometry.file_bytes())));
        }
        Ok(Window { geometry, ..w })
    }

    /// Creates a new window (the server's job): only if no file exists (one creator wins),
    /// sized with zeros, the header filled in and the magic stored last. An existing window
    /// is opened instead, and must have this geometry: a window is never reshaped or zeroed.
    pub fn create_or_open(path: &Path, geometry: Geometry) -> Result<Self, WindowError> {
        geometry.check().map_err(|what| WindowError::Invalid { path: path.to_path_buf(), what })?;
        let created = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(path);
        let file = match created {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let w = Self::open(path)?;
                if w.geometry != geometry {
                    return Err(WindowError::Invalid {
                        path: path.to_path_buf(),
                        what: format!("exists with {:?}, asked for {geometry:?} (never reshaped)", w.geometry),
                    });
                }
                return Ok(w);
            }
            Err(e) => return Err(io(path)(e)),
        };
        file.set_len(geometry.file_bytes()).map_err(io(path))?;
        let map = Self::map_file(&file, path)?;
        Ok(Self::publish(Window { map, geometry, path: path.to_path_buf() }))
    }

    /// Writes a new window's header into `geometry.file_bytes()` bytes at byte `offset`
    /// (page-aligned) of `file`, which the caller has zeroed and nobody else uses yet (a heap
    /// device being formatted, docs/design.md §2.4).
    pub(crate) fn format_in(file: &File, path: &Path, offset: u64, geometry: Geometry) -> Result<Self, WindowError> {
        geometry.check().map_err(|what| WindowError::Invalid { path: path.to_path_buf(), what })?;
        let map = Self::map_range(file, path, offset, geometry.file_bytes())?;
        Ok(Self::publish(Window { map, geometry, path: path.to_path_buf() }))
    }

    /// Fills in the header of the fresh, zeroed window `w`, the magic last.
    fn publish(w: Window) -> Window {
        w.word(H_VERSION).store(u64::from(VERSION) | u64::from(w.geometry.slots) << 32, Ordering::Relaxed);
        w.word(H_TARGET_BYTES).store(w.geometry.target_bytes, Ordering::Relaxed);
        // Release: an opener that reads the magic (Acquire) sees the fields above.
        w.word(0).store(u64::from_le_bytes(MAGIC), Ordering::Release);
        w
    }

    /// The identity of the heap whose HWcc regions the window holds (0: none).
    pub fn owner(&self) -> u64 {
        // Relaxed: written once before the heap directory is renamed into place, which orders
        // it before any opener's read (the rename and the opener's lookup are system calls).
        self.word(H_OWNER).load(Ordering::Relaxed)
    }

    /// Records the heap whose HWcc regions the window holds (the heap's creator, once).
    pub(crate) fn set_owner(&self, heap_id: u64) {
        // Relaxed: see `owner`.
        self.word(H_OWNER).store(heap_id, Ordering::Relaxed);
    }

    /// The window's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The window file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The 8-byte word at byte offset `off` of the file (callers pass offsets inside it, 8-aligned).
    pub(crate) fn word(&self, off: u64) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.map.len() as u64);
        // SAFETY: `off` is 8-aligned and inside the mapping (the callers' offsets come from the
        // validated geometry), the mapping lives as long as `self`, and every word of the
        // window is accessed atomically by all parties (servers and clients alike).
        unsafe { &*(self.map.as_mut_ptr().add(off as usize) as *const AtomicU64) }
    }

    fn u32_at(&self, off: u64) -> u32 {
        let w = self.word(off & !7).load(Ordering::Relaxed);
        (w >> ((off & 7) * 8)) as u32
    }

    /// Field `field` of request slot `slot`.
    pub(crate) fn spwr(&self, slot: u32, field: u64) -> &AtomicU64 {
        self.word(HEADER_BYTES + u64::from(slot) * SLOT_BYTES + field)
    }

    /// Field `field` of answer slot `slot`.
    pub(crate) fn sprd(&self, slot: u32, field: u64) -> &AtomicU64 {
        self.word(HEADER_BYTES + u64::from(self.geometry.slots + slot) * SLOT_BYTES + field)
    }

    /// The target word at byte offset `target` of the target area, if it is one.
    pub fn target(&self, target: u64) -> Option<&AtomicU64> {
        (target % 8 == 0 && target < self.geometry.target_bytes)
            .then(|| self.word(self.geometry.target_offset() + target))
    }

    /// The pid of the live process serving the window (the software device or the RTL
    /// co-simulation), if any.
    pub fn served_by(&self) -> Option<u32> {
        let pid = self.server().load(Ordering::Acquire);
        (pid != 0 && alive(pid)).then_some(pid as u32)
    }

    /// The header's parked word: the software device sets it to 1 before it sleeps on it (a
    /// futex on its low half), and a client that finds it 1 after ringing its doorbell clears
    /// it and wakes the device ([`Window::wake_server`]).
    pub(crate) fn parked(&self) -> &AtomicU64 {
        self.word(H_PARKED)
    }

    /// Called after each doorbell: wakes the device if it parked. Costs a fence and the load of
    /// a line the device writes only when it parks.
    #[inline]
    pub(crate) fn wake_server(&self) {
        // SeqCst: pairs with the fence the device runs between setting the parked word and its
        // last look at the doorbells (`device::park`): either it sees our doorbell, or we see
        // its parked word.
        crate::sync::fence(Ordering::SeqCst);
        let parked = self.parked();
        if parked.load(Ordering::Relaxed) == 1 && parked.swap(0, Ordering::Relaxed) == 1 {
            futex_wake(parked);
        }
    }

    /// The header's server word (a packed process identity, 0 = unserved).
    pub(crate) fn server(&self) -> &AtomicU64 {
        self.word(H_SERVER_PID)
    }

    /// Word `i` of host number `number`'s claim (`number < HOST_CLAIMS`, `i < 8`).
    fn claim_word(&self, number: u32, i: u64) -> &AtomicU64 {
        debug_assert!(number < HOST_CLAIMS && i < CLAIM_BYTES / 8);
        self.word(H_CLAIMS + u64::from(number % HOST_CLAIMS) * CLAIM_BYTES + 8 * i)
    }

    /// Claims host number `number` for kernel `kernel` (never 0), or finds it claimed by that
    /// kernel already (a sibling process, or one of this kernel that died holding it): `Ok(true)`
    /// when this call took a free claim (and wrote `name` and the time into it), `Ok(false)`
    /// when the kernel held it. `Err` names the other kernel that holds it.
    pub(crate) fn claim_host(&self, number: u32, kernel: u64, name: [u64; 4]) -> Result<bool, HostClaim> {
        if number >= HOST_CLAIMS {
            return Err(HostClaim { kernel: 0, since: 0, name: format!("no host number {number}") });
        }
        // A claim freed between the failed CAS and the read of its holder is tried again (a
        // few times: each retry means a host came and went meanwhile).
        let mut holder = 0;
        for _ in 0..4 {
            match host_number::claim(self.claim_word(number, 0), kernel) {
                Ok(true) => {
                    // Relaxed: advice, see H_CLAIMS.
                    self.claim_word(number, 1).store(now_secs(), Ordering::Relaxed);
                    for (i, w) in name.into_iter().enumerate() {
                        self.claim_word(number, 2 + i as u64).store(w, Ordering::Relaxed);
                    }
                    return Ok(true);
                }
                Ok(false) => return Ok(false),
                Err(seen) => match self.host_claim(number) {
                    Some(claim) if claim.kernel != kernel => return Err(claim),
                    // Freed, or taken by this kernel since: the next CAS says which.
                    _ => holder = seen,
                },
            }
        }
        Err(HostClaim { kernel: holder, since: 0, name: String::new() })
    }

    /// Frees host number `number`'s claim if kernel `kernel` holds it: false if another kernel
    /// does, or nobody. The caller has made sure that no process of `kernel` uses the number
    /// any more (the last one closing, or an operator who knows the kernel is down).
    pub(crate) fn release_host(&self, number: u32, kernel: u64) -> bool {
        number < HOST_CLAIMS && host_number::release(self.claim_word(number, 0), kernel)
    }

    /// Who holds host number `number`'s claim: `None` when it is free.
    pub fn host_claim(&self, number: u32) -> Option<HostClaim> {
        if number >= HOST_CLAIMS {
            return None;
        }
        // Acquire: pairs with the claim's AcqRel (the advice below is the claimant's or later).
        let kernel = self.claim_word(number, 0).load(Ordering::Acquire);
        (kernel != 0).then(|| {
            // Relaxed: advice.
            let name = std::array::from_fn(|i| self.claim_word(number, 2 + i as u64).load(Ordering::Relaxed));
            HostClaim { kernel, since: self.claim_word(number, 1).load(Ordering::Relaxed), name: name_of(name) }
        })
    }

    /// Whether a kernel other than `kernel` holds a host number: clients of another kernel may
    /// use the window, and their doorbells cannot wake a server parked on this kernel's futex.
    pub(crate) fn claimed_by_other_kernels(&self, kernel: u64) -> bool {
        // Relaxed: a hint for how long the device parks; a claim seen late costs at most one
        // long park.
        (0..HOST_CLAIMS).any(|n| matches!(self.claim_word(n, 0).load(Ordering::Relaxed), k if k != 0 && k != kernel))
    }
}

/// Wall-clock seconds now (Unix time); 0 if the clock is before 1970.
fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The futex address of `word`: its low half (x86 is little-endian).
fn futex_addr(word: &AtomicU64) -> *const u32 {
    (word as *const AtomicU64).cast()
}

/// Wakes every thread sleeping on `word`. A shared futex (no `FUTEX_PRIVATE_FLAG`): the window
/// is mapped by several processes.
pub(crate) fn futex_wake(word: &AtomicU64) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; it is a live, aligned word of the
    // mapping.
    unsafe { libc::syscall(libc::SYS_futex, futex_addr(word), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}

/// Sleeps on `word` while its low half is `expected`, at most `timeout` (a wake, a signal or a
/// changed value ends it early; the caller re-checks whatever it waits for).
pub(crate) fn futex_wait(word: &AtomicU64, expected: u32, timeout: Duration) {
    let ts =
        libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: the address is a live, aligned word of the mapping, and `ts` outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_addr(word),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        )
    };
}

/// Whether process `pid` exists (signal 0 probes; EPERM means it exists but is not ours).
pub(crate) fn alive(pid: u64) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
        .map_or_else(|e| e == nix::errno::Errno::EPERM, |()| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_window(tag: &str) -> Window {
        let path = std::env::temp_dir().join(format!("cxlalloc-claims-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let window = Window::create_or_open(&path, Geometry { slots: 2, target_bytes: 64 });
        let _ = std::fs::remove_file(&path);
        window.unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot map files")]
    fn a_host_number_is_claimed_once_per_kernel_and_refused_to_another() {
        let w = scratch_window("claim");
        let name = crate::identity::name_words("guest-a");
        assert_eq!(w.claim_host(2, 10, name), Ok(true));
        assert_eq!(w.claim_host(2, 10, [0; 4]), Ok(false), "the same kernel finds it its own");
        let holder = w.claim_host(2, 11, [0; 4]).err();
        assert_eq!(holder.as_ref().map(|h| (h.kernel, h.name.as_str())), Some((10, "guest-a")));
        assert_eq!(w.claim_host(3, 11, [0; 4]), Ok(true), "another number is free");
        assert!(w.claimed_by_other_kernels(11) && w.claimed_by_other_kernels(10));
        assert!(w.release_host(3, 11));
        assert!(!w.claimed_by_other_kernels(10), "only kernel 10's claim is left");
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot map files")]
    fn a_claim_is_released_only_by_the_kernel_it_names() {
        let w = scratch_window("release");
        assert_eq!(w.claim_host(1, 10, [0; 4]), Ok(true));
        assert!(!w.release_host(1, 11), "another kernel's name frees nothing");
        assert!(w.host_claim(1).is_some());
        assert!(w.release_host(1, 10));
        assert_eq!(w.host_claim(1), None);
        assert!(!w.release_host(1, 10), "a second release finds it free");
        assert_eq!(w.claim_host(1, 11, [0; 4]), Ok(true), "a freed number is claimed by the next kernel");
    }
}
