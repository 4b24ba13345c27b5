//! The heap handle: create, open, unlink, attach, offsets, roots.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::backing::anon::AnonBacking;
use crate::backing::device::DeviceBacking;
use crate::backing::files::{self, FileBacking};
use crate::class::Bracket;
use crate::crash::crash_point;
use crate::error::{AdoptError, AttachError, MaintenanceError, OffsetError, OpenError, RecoverHostError};
use crate::host::DeclareError;
use crate::huge;
use crate::identity;
use crate::layout::{check_host_number, Config, Header, Span};
use crate::mcas::DeviceSpec;
use crate::mem::HeapMem;
use crate::offset::Offset;
use crate::persist::shared::ROOTS;
use crate::protocol::HwWord;
use crate::recovery::RecoveryReport;
use crate::signal::{self, Registration, MAX_HEAPS};
use crate::sync::{AtomicU64, Ordering};

mod maintenance;
mod thread;
pub use maintenance::HugeMaintenance;
pub use thread::{ReallocError, ThreadHandle, MAX_ALIGN};

#[derive(Debug)]
struct HeapInner {
    /// The fault handler's entry for this heap, dropped first of all (see `Drop`).
    registration: Option<Registration>,
    mem: HeapMem,
}

impl Drop for HeapInner {
    /// Unregisters from the fault handler, then gives up this process's huge mappings and
    /// hazards and reclaims what that made reclaimable in slots nobody holds. (Every thread
    /// handle is gone: each holds a clone.)
    fn drop(&mut self) {
        // First: dropping the registration waits until no handler on any thread uses the
        // heap's LazyMap, so none maps a huge block (or leases a hazard set) after the huge
        // span is unmapped and the sets given back below, nor maps anything after the
        // reservation is released when `mem` drops.
        drop(self.registration.take());
        let Some(view) = self.mem.huge().copied() else { return };
        if !view.in_own_process() {
            return;
        }
        // Only a process that used huge blocks (it leased a hazard set to map one) can be the
        // last to pin one; the others leave the slot table alone (reading it all would put
        // every page of it in the page cache, and then in every process's footprint).
        let used_huge = view.my_sets().next().is_some();
        // Rule 2: unmap first, then retract (here: give back whole hazard sets).
        let _ = view.unmap(view.span.offset as u64, view.span.size);
        view.release_sets();
        if used_huge {
            // The registration is gone, so a descriptor in a small-heap chunk this process never
            // mapped would fault with no handler to map it: map every chunk below the small
            // heap's length first (docs/design.md §7.5).
            let len = self.mem.refresh_length(Bracket::Small);
            if self.mem.ensure_mapped(Bracket::Small, len).is_err() {
                return;
            }
            huge::ops::sweep_unheld(&self.mem, &view);
        }
    }
}

/// What [`Heap::recover_host`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRecovery {
    /// The host-table entries declared dead: the host asked for and every other live entry of
    /// its domain.
    pub declared: Vec<u16>,
    /// What adopting each of the host's slots repaired.
    pub reports: Vec<RecoveryReport>,
    /// Hazard sets of the host's processes given back (besides those the slot recoveries
    /// cleared).
    pub hazard_sets_cleared: u32,
    /// Slots of the host still held (another thread was adopting them, or adoption failed):
    /// run it again.
    pub remaining: Vec<u32>,
    /// Entries freed for new hosts (all of `declared` once nothing names them).
    pub released: Vec<u16>,
}

/// A host registered in a heap (docs/design.md §8.6), as [`Heap::hosts`] and
/// [`Heap::info_at`] show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// Its id: the entry's index in the host table.
    pub id: u16,
    /// Its domain's fingerprint (docs/design.md §8.6): with `id`, the name [`Heap::recover_host`]
    /// takes, which a later claim of the entry by another host cannot take over.
    pub domain: u64,
    /// The host's name (`uname -n` when it registered), for people.
    pub name: String,
    /// Whether it is the calling process's own host (domain).
    pub own: bool,
    /// Whether an operator declared it dead (its recovery may still be under way).
    pub declared_dead: bool,
    /// Seconds since its last heartbeat, by this host's clock (`None` if the beat lies in the
    /// future, as with clocks apart). Advice: a host that is merely idle is silent too.
    pub silent_for: Option<u64>,
}

impl HostInfo {
    pub(crate) fn from_records(records: Vec<crate::host::HostRecord>, domain: u64, now: u64) -> Vec<HostInfo> {
        let mine = crate::word::HostWord::fingerprint(domain);
        records
            .into_iter()
            .map(|r| HostInfo {
                id: r.id,
                domain: r.word.domain,
                name: r.name,
                own: r.word.domain == mine,
                declared_dead: r.word.dead,
                silent_for: now.checked_sub(r.heartbeat),
            })
            .collect()
    }
}

/// A heap mapped into this process. Cheap to clone (shared handle); the mapping lives until the
/// last clone and the last [`ThreadHandle`] are dropped.
///
/// After `fork`, a child may attach threads to an inherited `Heap` and use the slab brackets,
/// but every huge allocation or free through it is refused with
/// [`AllocError::ForeignProcess`](crate::AllocError::ForeignProcess) (huge mappings and their
/// hazards belong to the process that opened the heap): the child opens the heap by name itself
/// to use huge blocks (docs/design.md §7.5). An [`anonymous`](Heap::anonymous) heap is the
/// exception: it is private memory, so the child's copy is wholly its own and serves huge
/// blocks too.
#[derive(Clone, Debug)]
pub struct Heap {
    inner: Arc<HeapInner>,
}

fn random_secret() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    let seed = if n == 8 { u64::from_ne_bytes(buf) } else { 0 };
    seed ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl Heap {
    fn from_mem(mem: HeapMem) -> Result<Self, OpenError> {
        let mut inner = Arc::new(HeapInner { registration: None, mem });
        if let Some(lazy) = inner.mem.lazy() {
            let registration = signal::register(lazy).ok_or(OpenError::TooManyHeaps(MAX_HEAPS))?;
            match Arc::get_mut(&mut inner) {
                Some(i) => i.registration = Some(registration),
                None => return Err(OpenError::TooManyHeaps(MAX_HEAPS)),
            }
        }
        Ok(Heap { inner })
    }

    /// Checks a heap name against the one grammar every entry point uses (the Rust API, the C
    /// API, `cxlalloc NAME`): 1 ..= 246 characters of `[A-Za-z0-9._-]`, the first not `.` or
    /// `-`. A name is never a path; a heap in another directory is reached with the `*_at`
    /// functions. Errors are [`OpenError::InvalidName`], with the rule broken.
    pub fn check_name(name: &str) -> Result<(), OpenError> {
        files::check_name(name)
    }

    /// Creates the heap called `name` (see [`Heap::check_name`]) in `/dev/shm`; fails if it
    /// exists.
    pub fn create(name: &str, config: &Config) -> Result<Self, OpenError> {
        Self::create_at(&files::path_for_name(name)?, config)
    }

    /// Opens the existing heap called `name` in `/dev/shm`, whatever its configuration.
    pub fn open(name: &str) -> Result<Self, OpenError> {
        Self::open_at(&files::path_for_name(name)?)
    }

    /// Opens the heap called `name`, creating it with `config` if it does not exist; an existing
    /// heap must have been created with the same configuration.
    pub fn open_or_create(name: &str, config: &Config) -> Result<Self, OpenError> {
        Self::open_or_create_at(&files::path_for_name(name)?, config)
    }

    /// Removes the heap called `name`. Processes that have it open keep using it whole, huge
    /// blocks included (creating, mapping and freeing them); its storage goes when the last of
    /// them drops it (docs/design.md §7.5).
    pub fn unlink(name: &str) -> Result<(), OpenError> {
        FileBacking::unlink(&files::path_for_name(name)?)
    }

    /// Where a named heap's directory lives.
    pub fn path_of(name: &str) -> Result<PathBuf, OpenError> {
        files::path_for_name(name)
    }

    /// Creates a heap in directory `path` (which must not exist; its final component may be any
    /// file name of up to 255 bytes).
    ///
    /// Permissions: the directory and every file the heap ever creates get [`Config::mode`]
    /// (default `0o600`: the creating user only) whatever the umask, and the heap's owner and
    /// group (the creator's). A process of another user that the mode admits may use the heap;
    /// a huge block it allocates gets the heap's mode, owner and group (root may change both,
    /// a member of the heap's group the group), and a block whose object would not admit the
    /// heap's users is refused (`AllocError::Backing(EACCES)`), so that a fault on a huge block
    /// never meets a file this process may not map. An opener the heap does not admit gets
    /// [`OpenError::PermissionDenied`]; a heap whose files were given other owners or modes
    /// afterwards is refused with [`OpenError::MixedPermissions`], naming the file.
    pub fn create_at(path: &Path, config: &Config) -> Result<Self, OpenError> {
        config.validate()?;
        let header = Header::new(config, random_secret()).with_heap_id(random_secret() | 1);
        let device = match &config.mcas_device {
            Some(spec) => Some(DeviceSpec::load(spec).map_err(|e| OpenError::Mcas(e.to_string()))?),
            None => None,
        };
        let backing = FileBacking::create(path, &header, device)?;
        Self::from_mem(HeapMem::map_created(header, Box::new(backing), config.host)?)
    }

    /// Opens the heap in directory `path`: the directory once (not following a symbolic link),
    /// every file relative to it. Refused: a heap this user may not read and write
    /// ([`OpenError::PermissionDenied`]), files with mixed owners or modes
    /// ([`OpenError::MixedPermissions`]), a region file of another heap
    /// ([`OpenError::ForeignRegion`]).
    pub fn open_at(path: &Path) -> Result<Self, OpenError> {
        Self::open_at_as(path, None)
    }

    /// [`Heap::open_at`] as host number `host` ([`Config::host`]).
    fn open_at_as(path: &Path, host: Option<u32>) -> Result<Self, OpenError> {
        let (backing, header) = FileBacking::open(path)?;
        Self::from_mem(HeapMem::map(header, Box::new(backing), host)?)
    }

    /// Opens the heap in `path`, creating it with `config` if absent; see [`Heap::open_or_create`].
    /// [`Config::host`] applies to either.
    pub fn open_or_create_at(path: &Path, config: &Config) -> Result<Self, OpenError> {
        if let Some(h) = config.host {
            // Checked before anything is opened.
            check_host_number(h)?;
        }
        let heap = match Self::open_at_as(path, config.host) {
            Err(OpenError::NotFound(_)) => match Self::create_at(path, config) {
                Err(OpenError::AlreadyExists(_)) => Self::open_at_as(path, config.host)?,
                other => other?,
            },
            other => other?,
        };
        heap.mem().header.check_matches(config)?;
        Ok(heap)
    }

    /// Removes the heap directory at `path`.
    pub fn unlink_at(path: &Path) -> Result<(), OpenError> {
        FileBacking::unlink(path)
    }

    /// Formats the device at `path` for a heap with `config` and opens it (docs/design.md
    /// §2.4): a DAX device (`/dev/daxX.Y`), a PCI BAR's resource file
    /// (`/sys/bus/pci/devices/…/resource2`, an `ivshmem` device in a QEMU guest), or a plain
    /// file at least [`Heap::device_bytes`] long. Every region and the huge range are carved at
    /// fixed offsets; nothing is ever created, resized or removed on the device, so every host
    /// that maps it (its own kernel, no shared file system) opens the same bytes with
    /// [`Heap::open_device`].
    ///
    /// Whatever the device held is lost, and nobody may use it while it is formatted. Errors:
    /// [`OpenError::DeviceTooSmall`], [`OpenError::NotADevice`] (a directory, a character
    /// device that is not DAX), and those of opening. [`Config::mode`] is given to a plain file
    /// (with `chmod`, whatever its mode and the umask; [`OpenError::PermissionDenied`] for a
    /// file of another user without it); a DAX node or a BAR's resource file keeps the
    /// permissions the system gave it, which decide who opens the heap (docs/design.md §2.4).
    /// [`Config::host`] is the host number the heap is opened under. [`Config::mcas_device`] is
    /// refused: a no-HWcc heap on a device has its mCAS window carved in the device, served by
    /// `cxlalloc-mcasd --device PATH`.
    pub fn format_device(path: &Path, config: &Config) -> Result<Self, OpenError> {
        config.validate()?;
        if config.mcas_device.is_some() {
            return Err(OpenError::InvalidConfig(
                "a heap device carves its own mCAS window; mcas_device is for heap directories".into(),
            ));
        }
        let header = Header::new(config, random_secret()).with_heap_id(random_secret() | 1);
        DeviceBacking::format(path, &header)?;
        Self::open_device_with(path, config.host)
    }

    /// Opens the heap on the device at `path` (see [`Heap::format_device`]). The header is
    /// validated as [`Heap::open_at`] does; then the device label: [`OpenError::NotFormatted`]
    /// for a device that holds no heap, [`OpenError::Checksum`] for a damaged label,
    /// [`OpenError::ForeignRegion`] for a label of another heap, [`OpenError::Mismatch`] for a
    /// carving this build does not make, [`OpenError::Truncated`] for a device shorter than
    /// the carving.
    pub fn open_device(path: &Path) -> Result<Self, OpenError> {
        Self::open_device_with(path, None)
    }

    /// [`Heap::open_device`] as host number `host` of the pod ([`Config::host`], docs/design.md
    /// §9.2), which a no-HWcc heap's mCAS window in a device needs: instead of `CXLALLOC_HOST`,
    /// or agreeing with it ([`OpenError::HostNumber`] when they differ, or for a number not in
    /// `0 ..= 7`). [`OpenError::HostNumberTaken`] when a process of another kernel holds the
    /// number.
    pub fn open_device_as(path: &Path, host: u32) -> Result<Self, OpenError> {
        check_host_number(host)?;
        Self::open_device_with(path, Some(host))
    }

    fn open_device_with(path: &Path, host: Option<u32>) -> Result<Self, OpenError> {
        let (backing, header) = DeviceBacking::open(path)?;
        Self::from_mem(HeapMem::map(header, Box::new(backing), host)?)
    }

    /// Frees host number `number`'s claim in the mCAS window of the no-HWcc heap device at
    /// `path`, held by the kernel whose fingerprint is `claimant` (as
    /// [`OpenError::HostNumberTaken`] names it): the operator's act once that kernel is known
    /// to be down (it crashed, or rebooted, while a process of it had the heap open; a host
    /// whose last process closes frees its claim itself). Run it from any host, the rebooted
    /// one included: it needs no host number and touches nothing but the claim (docs/design.md
    /// §9.2). Returns whether it freed the claim: `false` when the number is free (already
    /// freed: a repeated run). Refused ([`OpenError::HostNumber`]) when the number is held by
    /// another kernel than `claimant` (claimed again since the operator read it) or by this
    /// process's own kernel (whose processes may still use it), and for a device without a
    /// window.
    pub fn free_host_number(path: &Path, number: u32, claimant: u64) -> Result<bool, OpenError> {
        check_host_number(number)?;
        let window = DeviceBacking::window(path)?;
        if claimant == identity::kernel() {
            return Err(OpenError::HostNumber(format!(
                "host number {number}: {claimant:#018x} is this process's own kernel, whose processes may use it \
                 (its last process to close frees it)"
            )));
        }
        if window.release_host(number, claimant) {
            return Ok(true);
        }
        match window.host_claim(number) {
            None => Ok(false),
            Some(c) => Err(OpenError::HostNumber(format!(
                "host number {number} is claimed by kernel {:#018x} (host {:?}), not {claimant:#018x}: claimed \
                 again since? nothing freed",
                c.kernel, c.name
            ))),
        }
    }

    /// Bytes a device must have to hold a heap with `config` (what [`Heap::format_device`]
    /// carves: the regions, the huge range, and a no-HWcc heap's mCAS window).
    pub fn device_bytes(config: &Config) -> Result<u64, OpenError> {
        config.validate()?;
        Ok(DeviceBacking::bytes_needed(&Header::new(config, 0)))
    }

    /// Bytes of the device at `path`: a plain file's or a BAR resource file's size, a DAX
    /// device's as its sysfs directory gives it. [`OpenError::NotADevice`] for anything else.
    pub fn device_capacity(path: &Path) -> Result<u64, OpenError> {
        DeviceBacking::capacity(path)
    }

    /// A private heap in anonymous memory, for one process (tests, tools).
    pub fn anonymous(config: &Config) -> Result<Self, OpenError> {
        config.validate()?;
        let header = Header::new(config, random_secret());
        Self::from_mem(HeapMem::map_created(header, Box::new(AnonBacking), None)?)
    }

    pub(crate) fn mem(&self) -> &HeapMem {
        &self.inner.mem
    }

    /// The configuration recorded in the heap's header.
    pub fn config(&self) -> Config {
        self.mem().header.config()
    }

    /// Where the heap lives (directory path, or "anonymous").
    pub fn location(&self) -> String {
        self.mem().location()
    }

    /// Leases a thread slot for the calling thread.
    pub fn attach(&self) -> Result<ThreadHandle, AttachError> {
        thread::attach(self)
    }

    /// Reclaims freed huge blocks that no process maps any more but that nobody has reclaimed:
    /// first drops this process's own stale mappings ([`Heap::drop_stale_huge`]); then takes
    /// back wholly, cached objects included, the blocks of thread slots that no thread holds
    /// (their owner detached before another process freed them, or stopped mapping them);
    /// then releases down to their backing objects the freed blocks of held slots whose owners
    /// have not done huge work since (the descriptor and range wait for the owner). Runs by
    /// itself, for unheld slots, when a heap closes; `cxlalloc recover` runs it; call it to
    /// reclaim sooner (a tool, a supervisor). Returns how many backing objects of held slots
    /// it removed (the checker's census shows what is left). It attaches a thread for the
    /// moment it takes, and skips what needs one if no slot is free (docs/design.md §7.6).
    pub fn sweep_huge(&self) -> usize {
        let Some(view) = self.mem().huge().filter(|v| v.in_own_process()) else { return 0 };
        let dropped = huge::ops::drop_stale_mappings(self.mem(), view, None);
        huge::ops::sweep_unheld(self.mem(), view);
        self.attach().map_or(0, |t| t.release_huge(&dropped) + t.release_freed_huge())
    }

    /// Drops this process's mappings of huge blocks that are no longer live (freed by some
    /// process, here or elsewhere), with the hazards that kept them from being reclaimed, and
    /// releases those of them whose last mapping that was (their backing objects go now, not
    /// when their owners next do huge work). Returns how many mappings it dropped. The
    /// mappings of live blocks stay. Every huge allocation and free of this process does it,
    /// and the fault handler (dropping only) when the hazard sets are full; a process that
    /// only reads huge blocks calls it to hand freed blocks back sooner (docs/design.md §7.4,
    /// §7.6). Does nothing in a forked child (its huge mappings are its parent's, §7.5).
    pub fn drop_stale_huge(&self) -> usize {
        let Some(view) = self.mem().huge().filter(|v| v.in_own_process()) else { return 0 };
        let dropped = huge::ops::drop_stale_mappings(self.mem(), view, None);
        if !dropped.is_empty() {
            // A thread for the pending record of each release; none free: the owners take
            // them back at their next huge work, or a sweep.
            if let Ok(t) = self.attach() {
                t.release_huge(&dropped);
            }
        }
        dropped.len()
    }

    /// Starts a thread that runs [`Heap::drop_stale_huge`] every `every`, until the returned
    /// handle is dropped (or every `Heap` of this instance is gone): for a process that reads
    /// huge blocks other processes allocate and free but allocates and frees none itself, whose
    /// mappings would otherwise keep freed blocks from being reclaimed until its next huge
    /// operation, or a fault on a full hazard table. Off unless started: the library starts no
    /// thread behind the application's back, and a process that allocates or frees huge blocks
    /// drops its stale mappings at each of those already. A pass with nothing stale reads this
    /// process's hazard entries and makes no system call; 100 ms is a reasonable period
    /// (docs/design.md §7.4).
    pub fn maintain_huge(&self, every: std::time::Duration) -> Result<HugeMaintenance, MaintenanceError> {
        HugeMaintenance::start(self, every)
    }

    /// Adopts thread slot `slot`, whose holder process died, for the calling thread: finishes
    /// or undoes the operation the holder was in, rebuilds the slot's lists, completes its
    /// detectable allocation or free, and clears the dead process's hazards, while every other
    /// thread goes on (docs/design.md §8.3). The handle then holds the slot: keep using it, or drop it
    /// to return the slot's empty slabs to the heap and release the slot.
    pub fn adopt(&self, slot: u32) -> Result<(ThreadHandle, RecoveryReport), AdoptError> {
        thread::adopt(self, slot)
    }

    /// Adopts and releases every slot whose holder died: each repaired slot's empty slabs go
    /// back to the heap and the slot becomes free. Returns what each recovery did (slots
    /// another thread adopted first are skipped).
    pub fn recover_dead(&self) -> Vec<RecoveryReport> {
        self.dead_slots().into_iter().filter_map(|s| self.adopt(s).ok().map(|(_, r)| r)).collect()
    }

    /// This process's host in the heap: its entry in the heap's host table, the id that
    /// [`Heap::recover_host`] and `cxlalloc recover --host` take (docs/design.md §8.6). `None`
    /// until registered: a process registers when it opens the heap, or for a no-HWcc heap
    /// whose mCAS device was not serving then, when its first thread attaches.
    pub fn host_id(&self) -> Option<u16> {
        self.mem().host()
    }

    /// Declares host `host` of domain `domain` (both as [`Heap::hosts`] lists them:
    /// [`HostInfo::id`], [`HostInfo::domain`]) dead and recovers everything it held, from this
    /// (another) host:
    /// every slot its processes held is adopted, repaired and released, the hazard sets of its
    /// processes are given back, and its host-table entry is freed once nothing names it
    /// (docs/design.md §8.6).
    ///
    /// Run it only once the host is known to be down (the operator's fencing): a process of a
    /// host declared dead that still runs would share its slots with their adopters. Declaring
    /// covers every entry of the host's domain. Running it again (after a crash mid-way, or to
    /// finish slots another thread was adopting) goes on where the last run stopped. Refused with
    /// [`RecoverHostError::Reused`] once entry `host` names another domain (the host's recovery
    /// freed it and another host claimed it): the index alone would declare an innocent host.
    pub fn recover_host(&self, host: u16, domain: u64) -> Result<HostRecovery, RecoverHostError> {
        let mem = self.mem();
        if !mem.recoverable() {
            return Err(RecoverHostError::RecoveryDisabled);
        }
        let declared = mem.hosts().declare_dead(host, domain, identity::domain()).map_err(|e| match e {
            DeclareError::NoSuchHost => RecoverHostError::NoSuchHost(host),
            DeclareError::OwnHost => RecoverHostError::OwnHost(host),
            DeclareError::Reused(found) => RecoverHostError::Reused { host, named: domain, found },
        })?;
        crash_point!(RecoveryHostDeclared);
        let of_host = |slot: u32| {
            crate::word::Holder::unpack(mem.lease(slot).holder.load(Ordering::Acquire))
                .is_some_and(|h| declared.contains(&h.host))
        };
        let reports: Vec<RecoveryReport> = (0..mem.layout.slots)
            .filter(|&s| of_host(s))
            .filter_map(|s| {
                // The handle drops at once: the slot is repaired and released before the next.
                let report = self.adopt(s).ok().map(|(_, r)| r);
                crash_point!(RecoveryHostSlot);
                report
            })
            .collect();
        let hazard_sets_cleared = mem
            .huge()
            .filter(|v| v.in_own_process())
            .map_or(0, |view| crate::recovery::clear_host_hazards(view, &declared));
        let remaining: Vec<u32> = (0..mem.layout.slots).filter(|&s| of_host(s)).collect();
        let named_by_sets = mem.huge().is_some_and(|view| {
            (0..view.sets()).any(|s| {
                crate::word::Holder::unpack(view.lease(s).load(Ordering::Acquire))
                    .is_some_and(|h| declared.contains(&h.host))
            })
        });
        let released = if remaining.is_empty() && !named_by_sets {
            declared.iter().copied().filter(|&id| mem.hosts().release(id)).collect()
        } else {
            Vec::new()
        };
        Ok(HostRecovery { declared, reports, hazard_sets_cleared, remaining, released })
    }

    /// The hosts registered in the heap's host table, with their heartbeat (advice).
    pub fn hosts(&self) -> Vec<HostInfo> {
        let mem = self.mem();
        HostInfo::from_records(mem.hosts().records(), identity::domain(), crate::host::now_secs())
    }

    /// Slots still leased by processes that have died (their recovery is pending).
    pub fn dead_slots(&self) -> Vec<u32> {
        thread::dead_slots(self)
    }

    /// The address in this process that every [`Offset`] of this heap is relative to: a block at
    /// `ptr` has offset `ptr - base_address()` in every process. Unchecked arithmetic for hot
    /// loops; [`Heap::offset_of`] and [`Heap::pointer`] are the checked forms.
    pub fn base_address(&self) -> usize {
        self.mem().base() as usize
    }

    /// The span of data that `off` lies in: a bracket's slab data or the huge span.
    fn data_span_at(&self, off: usize) -> Option<Span> {
        let mem = self.mem();
        match mem.bracket_at(off) {
            Some((b, _)) => Some(mem.data_span(b)),
            None => mem.huge().map(|h| h.span).filter(|s| s.contains(off)),
        }
    }

    /// The offset of `ptr`, which must point into this heap's slab data or huge span.
    pub fn offset_of<T>(&self, ptr: *const T) -> Result<Offset<T>, OffsetError> {
        if ptr.is_null() {
            return Err(OffsetError::Null);
        }
        let off = (ptr as usize).wrapping_sub(self.mem().base() as usize);
        self.data_span_at(off).map(|_| Offset::from_raw(off as u64)).ok_or(OffsetError::OutOfBounds)
    }

    /// The address in this process of `offset`, checked to lie in slab data or the huge span
    /// and to be aligned for `T`.
    pub fn pointer<T>(&self, offset: Offset<T>) -> Result<NonNull<T>, OffsetError> {
        if offset.is_null() {
            return Err(OffsetError::Null);
        }
        let off = usize::try_from(offset.raw()).map_err(|_| OffsetError::OutOfBounds)?;
        let span = self.data_span_at(off).ok_or(OffsetError::OutOfBounds)?;
        let fits = off.checked_add(std::mem::size_of::<T>()).is_some_and(|end| end <= span.end());
        if !fits || off % std::mem::align_of::<T>() != 0 {
            return Err(OffsetError::OutOfBounds);
        }
        Ok(self.mem().block(off).cast())
    }

    /// Application root `index` (< [`Heap::ROOTS`]): a 64-bit word in HWcc memory that every process
    /// sees, typically holding an [`Offset`]'s raw value, updated with compare-and-swap. In the
    /// no-HWcc model only loads and [`Heap::root_compare_exchange`] are atomic across hosts.
    pub fn root(&self, index: usize) -> Option<&AtomicU64> {
        self.mem().shared().roots.get(index)
    }

    /// Compare-and-swap of application root `index` from `current` to `new`, atomic across
    /// hosts in every coherence model: in the no-HWcc model the mCAS device executes it. `Ok`
    /// with the previous value on success, `Err` with the value found otherwise; `None` if
    /// `index` is not a root.
    pub fn root_compare_exchange(&self, index: usize, current: u64, new: u64) -> Option<Result<u64, u64>> {
        let word = self.root(index)?;
        Some(self.mem().hw_process(word).compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire))
    }

    /// Number of application roots.
    pub const ROOTS: usize = ROOTS;
}
