//! Coherence models (docs/design.md §9.1): what a process does so that heap metadata written on one
//! host is seen correctly on another.
//!
//! - [`Swcc`]: the software-coherence operations on descriptors and records (SWcc memory).
//!   Full coherence makes them no-ops; the limited and no-HWcc models write lines back before
//!   their ownership moves ([`Swcc::publish`], [`Swcc::persist`]) and invalidate before reading
//!   a line another host wrote ([`Swcc::refresh`]), with [`flush`]'s instructions.
//! - [`hwcc`]: HWcc words in the no-HWcc model, CASed through the mCAS window.
//!
//! Where each operation is applied (the protocol of docs/design.md §9.1, fixing §14.3) is documented at
//! the call sites in `slab::ops`, `thread` and `recovery`; each call names the transition.
//!
//! # Crashes
//!
//! What only a slot's holder reads (its record: redo word, pending record, remote-free batch,
//! lists and cached words; the descriptors of slabs it keeps) stays in its host's caches, as in
//! paper §3.2.2. A dead holder's slot is adopted by a process on the same host: liveness is that
//! host's `/proc` (`identity`), and the host's caches are coherent among its own cores,
//! so the adopter reads every line as the dead thread left it. Writing the record back at each
//! logged step would buy nothing: a host on another machine could not use it, because the
//! lists, cached words and bitsets it names are not written back either, and a live host's
//! later eviction of them would overwrite whatever the adopter wrote. A slot crosses hosts only
//! when released ([`Site::SlotReleased`] writes the whole record back, [`Site::SlotTaken`]
//! reads it from memory). A host that goes down with dirty lines needs the platform to flush
//! them to the device (CXL Global Persistent Flush) before its slots can be recovered.

pub(crate) mod flush;
pub(crate) mod hwcc;
#[cfg(feature = "noncoherent-sim")]
pub(crate) mod sim;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use crate::layout::Coherence;
use crate::mcas::{Device, DeviceSpec, Geometry, Link, McasError, Window};
use flush::Instructions;
use hwcc::{McasPort, Targets};

/// Requester slots of a heap's mCAS window beyond its thread slots: one per process that has
/// the heap open, for the lease operations that run before a thread holds a slot.
pub const PROCESS_REQUESTERS: u32 = 32;

/// Host numbers an operator may give the hosts of a pod ([`HOST_ENV`], docs/design.md §9.2):
/// host `h` owns process requesters `h * REQUESTERS_PER_HOST ..` of every heap's window.
pub const HOST_NUMBERS: u32 = 8;

/// Process requesters of each host number: the processes of one host that may have one heap
/// open at once.
const REQUESTERS_PER_HOST: u32 = PROCESS_REQUESTERS / HOST_NUMBERS;

/// The environment variable that gives this host's number (`0 .. HOST_NUMBERS`), as a CXL
/// port id would: required to open a no-HWcc heap whose window lies in a shared device.
pub const HOST_ENV: &str = "CXLALLOC_HOST";

/// The file name of a no-HWcc heap's mCAS window, in the heap directory.
pub const WINDOW_FILE: &str = "mcas-window";

/// The file name of a device-backed no-HWcc heap's copy of its device description
/// ([`DeviceSpec`]), in the heap directory, in place of a window.
pub const DEVICE_FILE: &str = "mcas-device";

/// The window geometry of a no-HWcc heap with `slots` thread slots whose HWcc regions total
/// `hwcc_bytes`.
pub(crate) fn window_geometry(slots: u32, hwcc_bytes: u64) -> Geometry {
    Geometry { slots: slots + PROCESS_REQUESTERS, target_bytes: hwcc_bytes }
}

/// Declares [`Site`] and its list of every value ([`Site::ALL`]) from one list of variants, so
/// that a new site joins the simulator's mutation matrix (`tests/noncoherent.rs`) without
/// anyone remembering to add it there.
macro_rules! sites {
    ($(#[$doc:meta])* pub enum Site { $($(#[$vdoc:meta])* $v:ident,)* }) => {
        $(#[$doc])*
        pub enum Site { $($(#[$vdoc])* $v,)* }

        impl Site {
            /// Every site, in declaration order.
            pub const ALL: &'static [Site] = &[$(Site::$v),*];
        }
    };
}

sites! {
/// Where in the protocol a coherence operation is applied: each call site names its step, so
/// that the non-coherence simulator can remove one (`sim::skip`, feature `noncoherent-sim`) and
/// show that a test fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Site {
    /// T3: a freshly sized slab's head line, before its first block is handed out.
    Sized,
    /// T4: a full slab kept off-list, written back and evicted: it may change hands without
    /// its owner (T8).
    Detached,
    /// A local free into a full slab that is not the class's current one: "owner == me" read
    /// from memory, since the slab may be Detached and claimed since.
    OwnerChecked,
    /// T5: a full slab given up to remote freers.
    Disowned,
    /// A partly used slab abandoned at detach.
    Abandoned,
    /// T9: an empty slab pushed on the global list (`next` written first).
    GlobalPush,
    /// T2: the global head's head line (its `next` link), read from memory before the pop.
    /// The same read serves the popped slab: the pop's tagged CAS proves the line unchanged
    /// since, and its sizing (T3) rewrites the rest. (A claim (T8) likewise reads nothing of
    /// the descriptor but the generation, which its located free read from memory: see
    /// `SlabThread::claim`.)
    PopNext,
    /// A remote free locating its block from the slab's head line.
    Located,
    /// A remote free's mark, written back and evicted before the counter moves: a dirty mark
    /// line written back after the slab's next sizing would overwrite a block of it.
    RemoteMark,
    /// Limited model: a mailbox push's freed block (its link, and what the application wrote
    /// there), written back and evicted before the push CAS hands it to the owner
    /// (docs/design.md §4.6).
    MailboxLink,
    /// Limited model: a harvested block's link, read from memory (its pusher wrote it on
    /// another host).
    MailboxRead,
    /// The owner's free marks (every block's at sizing, the block's at a local free), written
    /// back and kept: a non-owner on another host reads them from memory to refuse a block
    /// the owner holds free (docs/design.md §4.1, "Free mark").
    FreeMarks,
    /// A slab leaving this host's hands with free blocks (T9 push, abandon): its data lines
    /// written back and evicted, so that no dirty line of it (marks, bytes the application
    /// wrote into blocks freed since) is written back later over a block of the slab's next
    /// sizing on another host, and no stale copy is read here.
    SlabData,
    /// A slot's record when the slot is leased or adopted.
    SlotTaken,
    /// Every descriptor when a slot is leased or adopted: copies this host cached before
    /// may name the slot as owner of slabs its previous holder (on another host) gave up.
    SlotDescriptors,
    /// A slot's record when its holder releases it.
    SlotReleased,
    /// The checker and the slot survey reading every descriptor and record. (Recovery needs
    /// no scan of its own: it runs right after taking the slot, which invalidated both.)
    Scan,
}
}

/// How this process keeps SWcc memory coherent.
#[derive(Debug)]
pub(crate) enum Swcc {
    /// The device is coherent: nothing to do.
    Coherent,
    /// Explicit write-backs and invalidations with these instructions.
    Flush(Instructions),
    /// A simulated host of the non-coherence simulator (tests).
    #[cfg(feature = "noncoherent-sim")]
    Sim(sim::Host),
}

impl Swcc {
    /// The operations for `model` on this CPU.
    pub(crate) fn for_model(model: Coherence) -> Self {
        match model {
            Coherence::Full => Swcc::Coherent,
            Coherence::Limited | Coherence::NoHwcc => Swcc::Flush(Instructions::detect()),
        }
    }

    /// Whether every operation is a no-op.
    #[inline]
    pub(crate) fn is_coherent(&self) -> bool {
        matches!(self, Swcc::Coherent)
    }

    /// Before a line's ownership moves to another host, or another host may read it: writes
    /// `[p, p + len)` back and evicts it (so a later read of ours sees the next owner's
    /// writes), then fences.
    #[inline]
    pub(crate) fn publish(&self, site: Site, p: *const u8, len: usize) {
        self.apply(Action::Publish, site, p, len);
    }

    /// Writes lines this thread keeps owning back to memory (records a recovering host must
    /// find), keeping them cached where the CPU can, then fences.
    #[inline]
    pub(crate) fn persist(&self, site: Site, p: *const u8, len: usize) {
        self.apply(Action::Persist, site, p, len);
    }

    /// Before reading lines another host may have written: evicts `[p, p + len)` so the reads
    /// that follow come from memory.
    #[inline]
    pub(crate) fn refresh(&self, site: Site, p: *const u8, len: usize) {
        self.apply(Action::Refresh, site, p, len);
    }

    /// [`Swcc::publish`] without its fence: the caller issues [`Swcc::fence`] before anything
    /// that depends on the write-back (a batch of remote frees fences once, before its mCAS).
    #[inline]
    pub(crate) fn publish_unfenced(&self, site: Site, p: *const u8, len: usize) {
        self.apply(Action::PublishLater, site, p, len);
    }

    /// [`Swcc::persist`] of the one line holding `p`, without its fence (a later fence: the
    /// application's, before it tells another host, or the protocol's next [`Swcc::persist`]
    /// orders it): the fast path's form (a local free's mark), without the range loop.
    #[inline(always)]
    pub(crate) fn persist_line_unfenced(&self, site: Site, p: *const u8) {
        match self {
            Swcc::Coherent => {}
            Swcc::Flush(i) => i.write_back_line(p),
            #[cfg(feature = "noncoherent-sim")]
            Swcc::Sim(host) if !sim::skipped(site) => host.write_back(p, 1),
            #[cfg(feature = "noncoherent-sim")]
            Swcc::Sim(_) => {}
        }
        let _ = site;
    }

    /// Stores `value` into the first word of each of `count` blocks `stride` bytes apart from
    /// `first` (a slab's free marks at sizing, T3) and writes each such line back, keeping it
    /// ([`Swcc::persist_line_unfenced`] of each, with one dispatch for the whole run). In the
    /// full model only the stores. Unfenced: the sizing's [`Site::Sized`] persist fences them.
    ///
    /// # Safety
    ///
    /// - `first` starts a run of `count` blocks of `stride` bytes (a multiple of 8), 8-aligned,
    ///   inside one mapped slab;
    /// - each of them is free and the calling thread's, so no one else writes its first word.
    pub(crate) unsafe fn store_and_persist_strided_unfenced(
        &self,
        site: Site,
        first: *mut u8,
        stride: usize,
        count: usize,
        value: u64,
    ) {
        let word = |i: usize| {
            // SAFETY: by the caller's contract block `i < count` lies in a mapped slab and starts
            // 8-aligned, so its first word is a valid `AtomicU64` that no one else writes.
            unsafe { &*(first.add(i * stride) as *const crate::sync::AtomicU64) }
        };
        let store = |i: usize| word(i).store(value, crate::sync::Ordering::Relaxed);
        match self {
            Swcc::Coherent => (0..count).for_each(store),
            Swcc::Flush(ins) => ins.for_each_line_written_back((0..count).map(|i| {
                store(i);
                word(i) as *const crate::sync::AtomicU64 as *const u8
            })),
            #[cfg(feature = "noncoherent-sim")]
            Swcc::Sim(host) => (0..count).for_each(|i| {
                store(i);
                if !sim::skipped(site) {
                    host.write_back(word(i) as *const crate::sync::AtomicU64 as *const u8, 1);
                }
            }),
        }
        let _ = site;
    }

    /// Orders every earlier unfenced write-back before later stores and CASes.
    #[inline]
    pub(crate) fn fence(&self) {
        if let Swcc::Flush(_) = self {
            flush::store_fence();
        }
    }

    /// Non-coherence simulator: writes back every dirty line of this host's caches (the
    /// platform's Global Persistent Flush when a host goes down); nothing in other models.
    #[cfg(feature = "noncoherent-sim")]
    pub(crate) fn global_flush(&self) {
        if let Swcc::Sim(host) = self {
            host.write_back_all();
        }
    }

    /// The application's write-back of `[p, p + len)` before it hands what it wrote to another
    /// host (lines kept cached), then a fence; no [`Site`] names it and [`sim::skip`] never
    /// removes it. Nothing in the full model.
    pub(crate) fn app_write_back(&self, p: *const u8, len: usize) {
        match self {
            Swcc::Coherent => {}
            Swcc::Flush(i) => {
                i.write_back(p, len);
                flush::store_fence();
            }
            #[cfg(feature = "noncoherent-sim")]
            Swcc::Sim(host) => host.write_back(p, len),
        }
    }

    /// The application's invalidation of `[p, p + len)` before it reads what another host
    /// wrote there (a dirty line is written back first, as the CPU does), then a full fence so
    /// that later loads come from memory. Nothing in the full model.
    pub(crate) fn app_invalidate(&self, p: *const u8, len: usize) {
        match self {
            Swcc::Coherent => {}
            Swcc::Flush(i) => {
                i.evict(p, len);
                flush::full_fence();
            }
            #[cfg(feature = "noncoherent-sim")]
            Swcc::Sim(host) => host.evict(p, len),
        }
    }

    #[inline]
    fn apply(&self, action: Action, site: Site, p: *const u8, len: usize) {
        match self {
            Swcc::Coherent => {}
            Swcc::Flush(i) => match action {
                Action::Publish => {
                    i.evict(p, len);
                    flush::store_fence();
                }
                Action::Persist => {
                    i.write_back(p, len);
                    flush::store_fence();
                }
                Action::Refresh => {
                    i.evict(p, len);
                    flush::full_fence();
                }
                Action::PublishLater => i.evict(p, len),
            },
            #[cfg(feature = "noncoherent-sim")]
            Swcc::Sim(host) if !sim::skipped(site) => match action {
                Action::Persist => host.write_back(p, len),
                Action::Publish | Action::PublishLater | Action::Refresh => host.evict(p, len),
            },
            #[cfg(feature = "noncoherent-sim")]
            Swcc::Sim(_) => {}
        }
        let _ = site;
    }
}

/// The SWcc operations.
#[derive(Clone, Copy)]
enum Action {
    Publish,
    Persist,
    Refresh,
    PublishLater,
}

/// Where a no-HWcc heap's HWcc words live, and what executes the CASes on them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum McasHome {
    /// The target area of an mCAS window file in the heap directory, served by the software
    /// device (`cxlalloc-mcasd`) or the RTL co-simulation.
    Window(PathBuf),
    /// The mCAS window a heap device carves for a no-HWcc heap: `len` bytes at byte `offset`
    /// of the device file `path` (docs/design.md §2.4), served like a window file.
    DeviceWindow {
        /// The heap device.
        path: PathBuf,
        /// Byte offset of the window in the device.
        offset: u64,
        /// Bytes of the window.
        len: u64,
    },
    /// A hardware device's memory, CASed through its registers. `description` is the heap
    /// directory's copy of the device description ([`DEVICE_FILE`]), whose bytes lease the
    /// process requesters.
    Device {
        /// The device.
        spec: DeviceSpec,
        /// The heap directory's description file.
        description: PathBuf,
    },
}

impl McasHome {
    /// The file whose bytes lease the process requesters.
    fn lock_file(&self) -> &Path {
        match self {
            McasHome::Window(path) | McasHome::DeviceWindow { path, .. } => path,
            McasHome::Device { description, .. } => description,
        }
    }
}

/// A process's connection to a no-HWcc heap's mCAS window or device.
#[derive(Debug)]
pub(crate) struct McasHub {
    link: Link,
    targets: Targets,
    /// The requester of this process's lease operations.
    process: McasPort,
    /// Holds the lock on the process requester (released when the process closes it or dies).
    _lock: std::fs::File,
    /// The window is carved in a heap device (docs/design.md §2.4), which hosts with other
    /// kernels share: its server may run on another host, whose pid this one cannot judge.
    shared_device: bool,
}

/// Why a process could not connect to a heap's mCAS window or device.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HubError {
    /// The window or device could not be opened or does not fit this heap.
    #[error("{0}")]
    Window(String),
    /// Every process requester is taken.
    #[error("every process requester of {0} that this host may lease is in use")]
    Requesters(String),
    /// A requester could not be set up.
    #[error(transparent)]
    Mcas(#[from] McasError),
    /// The host number is missing where the window is shared by kernels, or is malformed.
    #[error("{0}")]
    HostNumber(String),
}

/// This host's number from [`HOST_ENV`]: `None` when unset.
pub(crate) fn host_number() -> Result<Option<u32>, HubError> {
    match std::env::var(HOST_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => parse_host_number(&v).map(Some),
        Err(std::env::VarError::NotUnicode(_)) => Err(HubError::HostNumber(format!("{HOST_ENV} is not a number"))),
    }
}

/// Parses a host number: a decimal below [`HOST_NUMBERS`].
fn parse_host_number(v: &str) -> Result<u32, HubError> {
    match v.trim().parse::<u32>() {
        Ok(h) if h < HOST_NUMBERS => Ok(h),
        _ => Err(HubError::HostNumber(format!("{HOST_ENV}={v:?}: a host number is 0 ..= {}", HOST_NUMBERS - 1))),
    }
}

/// The process requesters (offsets from the first) a process may lease: with a host number,
/// only its host's share, disjoint from every other host's; without, all of them (one kernel
/// uses the window, whose OFD locks alone keep its processes apart).
fn requester_range(host: Option<u32>) -> std::ops::Range<u32> {
    match host {
        Some(h) => h * REQUESTERS_PER_HOST..(h + 1) * REQUESTERS_PER_HOST,
        None => 0..PROCESS_REQUESTERS,
    }
}

/// The host number a process opening `home` leases under: a window carved in a heap device is
/// shared by kernels whose byte locks do not see each other (docs/design.md §9.2), so it needs
/// one; elsewhere one is used if given.
fn host_for(home: &McasHome, host: Option<u32>) -> Result<Option<u32>, HubError> {
    match (home, host) {
        (McasHome::DeviceWindow { path, .. }, None) => Err(HubError::HostNumber(format!(
            "the mCAS window of {} lies in a device that hosts with other kernels share: set {HOST_ENV} \
             to this host's number (0 ..= {}), distinct on every host of the pod",
            path.display(),
            HOST_NUMBERS - 1
        ))),
        (_, host) => Ok(host),
    }
}

impl McasHub {
    /// Connects to `home`, which must fit `geometry` (requesters, target bytes), and leases a
    /// process requester. `targets` maps this process's HWcc regions into the target area.
    pub(crate) fn open(home: &McasHome, geometry: Geometry, targets: Targets) -> Result<Self, HubError> {
        let link = match home {
            McasHome::Window(path) => {
                let window = Window::open(path).map_err(|e| HubError::Window(e.to_string()))?;
                if window.geometry() != geometry {
                    return Err(HubError::Window(format!(
                        "{}: geometry {:?}, the heap needs {geometry:?}",
                        path.display(),
                        window.geometry()
                    )));
                }
                Link::Window(Arc::new(window))
            }
            McasHome::DeviceWindow { path, offset, len } => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(|e| HubError::Window(format!("{}: {e}", path.display())))?;
                let window =
                    Window::open_in(&file, path, *offset, *len).map_err(|e| HubError::Window(e.to_string()))?;
                if window.geometry() != geometry {
                    return Err(HubError::Window(format!(
                        "{} at {offset:#x}: geometry {:?}, the heap needs {geometry:?}",
                        path.display(),
                        window.geometry()
                    )));
                }
                Link::Window(Arc::new(window))
            }
            McasHome::Device { spec, .. } => {
                if spec.slots < geometry.slots || spec.memory_bytes < geometry.target_bytes {
                    return Err(HubError::Window(format!(
                        "mCAS device {}: {} requesters and {} bytes, the heap needs {} and {}",
                        spec.registers.display(),
                        spec.slots,
                        spec.memory_bytes,
                        geometry.slots,
                        geometry.target_bytes
                    )));
                }
                Link::Device(Arc::new(Device::open(spec).map_err(|e| HubError::Window(e.to_string()))?))
            }
        };
        let host = host_for(home, host_number()?)?;
        let (index, lock) =
            lease_process_requester(home.lock_file(), geometry.slots - PROCESS_REQUESTERS, requester_range(host))?;
        let process = McasPort::new(link.clone(), index, targets)?;
        let shared_device = matches!(home, McasHome::DeviceWindow { .. });
        Ok(Self { link, targets, process, _lock: lock, shared_device })
    }

    /// The port of thread slot `slot`'s requester.
    pub(crate) fn thread_port(&self, slot: u32) -> Result<McasPort, McasError> {
        McasPort::new(self.link.clone(), slot, self.targets)
    }

    /// This process's requester, for lease operations.
    pub(crate) fn process_port(&self) -> &McasPort {
        &self.process
    }

    /// `Err(window)` while no live process serves the window (the software device or the RTL
    /// co-simulation); a hardware device always answers.
    pub(crate) fn served(&self) -> Result<(), String> {
        match &self.link {
            // A device's window may be served from another host: a server word is taken as
            // served, since its pid names a process of that host (a server that died without
            // clearing it shows as requests that time out, `McasError`).
            Link::Window(w) if self.shared_device && w.server().load(crate::sync::Ordering::Acquire) != 0 => Ok(()),
            Link::Window(w) if w.served_by().is_none() => Err(w.path().display().to_string()),
            _ => Ok(()),
        }
    }
}

/// Locks one of the process requesters `first + range` with an open-file-description lock on its
/// byte of `path` (the window file, or the heap's device description): the kernel drops it when
/// this process closes the file or dies, so a crashed process never strands a requester.
fn lease_process_requester(
    path: &Path,
    first: u32,
    range: std::ops::Range<u32>,
) -> Result<(u32, std::fs::File), HubError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| HubError::Window(format!("{}: {e}", path.display())))?;
    for i in range {
        let index = first + i;
        let lock = libc::flock {
            l_type: libc::F_WRLCK as i16,
            l_whence: libc::SEEK_SET as i16,
            l_start: i64::from(index),
            l_len: 1,
            l_pid: 0,
        };
        if nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_OFD_SETLK(&lock)).is_ok() {
            return Ok((index, file));
        }
    }
    Err(HubError::Requesters(path.display().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_marks_land_on_each_blocks_first_word_and_nowhere_else() {
        for swcc in [Swcc::Coherent, Swcc::Flush(Instructions::detect())] {
            // 8 blocks of 128 bytes (16 words each) in a 1 KiB buffer.
            let mut buf = vec![[7u64; 8]; 16];
            let first = buf.as_mut_ptr() as *mut u8;
            // SAFETY: 8 blocks of 128 bytes lie in the 1 KiB buffer, 8-aligned (what the
            // stores need), and nothing else uses it.
            unsafe { swcc.store_and_persist_strided_unfenced(Site::FreeMarks, first, 128, 8, 0x55) };
            flush::full_fence();
            let words: Vec<u64> = buf.iter().flatten().copied().collect();
            for (i, w) in words.iter().enumerate() {
                let expected = if i % 16 == 0 { 0x55 } else { 7 };
                assert_eq!(*w, expected, "{swcc:?}: word {i}");
            }
        }
    }

    #[test]
    fn host_numbers_own_disjoint_requesters_that_cover_the_process_requesters() {
        let mut owner = [None; PROCESS_REQUESTERS as usize];
        for h in 0..HOST_NUMBERS {
            let range = requester_range(Some(h));
            assert_eq!(range.len() as u32, REQUESTERS_PER_HOST);
            for i in range {
                assert_eq!(owner[i as usize], None, "requester {i} given to hosts {:?} and {h}", owner[i as usize]);
                owner[i as usize] = Some(h);
            }
        }
        assert!(owner.iter().all(Option::is_some), "every requester belongs to a host: {owner:?}");
    }

    #[test]
    fn without_a_host_number_every_process_requester_may_be_leased() {
        assert_eq!(requester_range(None), 0..PROCESS_REQUESTERS);
    }

    #[test]
    fn a_host_number_is_a_decimal_below_host_numbers() {
        assert_eq!(parse_host_number("0").ok(), Some(0));
        assert_eq!(parse_host_number(" 7\n").ok(), Some(HOST_NUMBERS - 1));
        for bad in ["8", "-1", "", "one", "0x1"] {
            assert!(matches!(parse_host_number(bad), Err(HubError::HostNumber(_))), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_device_window_is_refused_without_a_host_number() {
        let shared = McasHome::DeviceWindow { path: PathBuf::from("/dev/dax0.0"), offset: 0, len: 4096 };
        let err = host_for(&shared, None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(HOST_ENV), "refusal names the variable: {err:?}");
        assert_eq!(host_for(&shared, Some(3)).ok(), Some(Some(3)));
        let local = McasHome::Window(PathBuf::from("/dev/shm/h/mcas-window"));
        assert_eq!(host_for(&local, None).ok(), Some(None));
        assert_eq!(host_for(&local, Some(2)).ok(), Some(Some(2)));
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri does not support fcntl's open-file-description locks")]
    fn two_hosts_lease_disjoint_requesters_of_one_lock_file() {
        // Two kernels do not see each other's byte locks; two separate files stand in for the
        // one file as each kernel's lock table sees it.
        let dir = std::env::temp_dir().join(format!("cxlalloc-requesters-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let (a, b) = (dir.join("a"), dir.join("b"));
        for p in [&a, &b] {
            std::fs::write(p, [0u8; 64]).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
        let first = 100;
        let mut held = Vec::new();
        let mut taken = std::collections::BTreeMap::new();
        for (path, host) in [(&a, 1), (&b, 2)] {
            while let Ok((index, lock)) = lease_process_requester(path, first, requester_range(Some(host))) {
                assert!(taken.insert(index, host).is_none(), "requester {index} leased by two hosts");
                held.push(lock);
            }
        }
        assert_eq!(taken.len() as u32, 2 * REQUESTERS_PER_HOST, "each host leases its whole share: {taken:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
