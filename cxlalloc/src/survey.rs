//! What tools show about a heap without changing it: who holds its thread slots (and whether
//! they are alive), what each slot was doing, what recovering a dead holder's slot would do
//! (docs/design.md §8.3), and [`HeapInfo`], a read-only look at a heap directory that writes
//! nothing, does not map the heap, and never adopts, recovers or creates.
//!
//! The descriptions are for people (`cxlalloc list`, `inspect`, `check`); their wording is not
//! a stable format.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::backing::device::DeviceBacking;
use crate::backing::files;
use crate::coherence::{Site, DEVICE_FILE, WINDOW_FILE};
use crate::error::OpenError;
use crate::heap::{Heap, HostInfo};
use crate::host::{now_secs, HostTable};
use crate::identity;
use crate::layout::{Coherence, Config, Header, Layout, RegionId, HEADER_BYTES};
use crate::mcas::{DeviceSpec, Window};
use crate::persist::record::ThreadRecord;
use crate::persist::redo::{ChainArg, Op, Pending, PendingKind, Redo};
use crate::persist::shared::{HostEntry, MAX_HOSTS};
use crate::recovery::{PendingOutcome, RecoveryReport, Resolution};
use crate::sync::{AtomicU64, Ordering};
use crate::word::Holder;

/// A leased thread slot: its holder and what its records show in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    /// The slot's index.
    pub slot: u32,
    /// Process id of the holder (on the host that leased the slot).
    pub pid: u32,
    /// The holder's host: its id in the heap's host table (docs/design.md §8.6).
    pub host: u16,
    /// Whether the holder runs on the caller's own host (domain), so that `alive` was judged
    /// from this host's `/proc`.
    pub local: bool,
    /// Whether the holder is still running. A local holder is judged from this host's `/proc`
    /// (a pid reused by another process counts as dead: the lease records the holder's start
    /// time too); a holder on another host is alive until that host is declared dead.
    pub alive: bool,
    /// The operations the slot's redo and pending records show interrupted or in progress,
    /// outermost last; empty when the slot is idle.
    pub in_flight: Vec<Interrupted>,
}

/// One operation a slot's records name (see [`SlotInfo::in_flight`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interrupted {
    /// What the operation does, e.g. "free block 3 of small slab 7".
    pub operation: String,
    /// What recovering the slot would do with it, e.g. "finish it".
    pub recovery: String,
}

/// What `cxlalloc recover` (or [`Heap::recover_dead`]) would do for one slot whose holder died.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// The slot.
    pub slot: u32,
    /// The dead holder's process id.
    pub pid: u32,
    /// The steps, in the order recovery takes them.
    pub steps: Vec<String>,
    /// Why recovery cannot run, if it cannot (the steps then say what it would have done).
    pub blocked: Option<String>,
}

/// One region of a heap, as its header records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// The region's name (its file name in the heap directory).
    pub name: &'static str,
    /// Its size in bytes.
    pub bytes: u64,
    /// Whether it must be hardware-coherent (docs/design.md §2.1).
    pub hwcc: bool,
}

/// Where a no-HWcc heap's HWcc words are served from (docs/design.md §9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McasInfo {
    /// An mCAS window file in the heap directory, served by a software device
    /// (`cxlalloc-mcasd`) or the RTL co-simulation.
    Window {
        /// The window file.
        path: PathBuf,
        /// The live process serving it, if any (without one, threads cannot attach).
        served_by: Option<u32>,
    },
    /// The window file exists but cannot be used.
    WindowUnusable {
        /// The window file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A hardware mCAS device, as the heap's copy of its description names it.
    Device {
        /// The register file (BAR).
        registers: PathBuf,
        /// The device memory file.
        memory: PathBuf,
        /// Where this heap's part of the device memory starts.
        memory_offset: u64,
    },
}

/// A read-only look at a heap directory ([`Heap::info_at`]): its header, regions, storage use and
/// slot holders. Reading it writes nothing and does not map the heap (only a no-HWcc heap's
/// mCAS window, to read whether it is served).
#[derive(Clone, Debug)]
pub struct HeapInfo {
    /// The heap directory, or the heap device ([`Heap::info_device`]).
    pub path: PathBuf,
    /// The configuration its header records.
    pub config: Config,
    /// The header's layout version.
    pub layout_version: u32,
    /// Its regions, in layout order.
    pub regions: Vec<RegionInfo>,
    /// Address space the heap reserves in each process that opens it (regions and huge span).
    pub reserved_bytes: u64,
    /// Memory the heap directory's files occupy now (allocated blocks, not their sparse
    /// length); for a heap device, the bytes it carves (a plain file standing in for one: the
    /// blocks it occupies).
    pub stored_bytes: u64,
    /// The leased slots (`Err`: why the slot table could not be read, e.g. on device memory
    /// that only maps).
    pub holders: Result<Vec<SlotInfo>, String>,
    /// The registered hosts (`Err`: why the host table could not be read).
    pub hosts: Result<Vec<HostInfo>, String>,
    /// No-HWcc heaps: where their HWcc words are served from.
    pub mcas: Option<McasInfo>,
}

impl HeapInfo {
    /// Slots whose holder died (their recovery is pending); 0 when the table was unreadable.
    pub fn dead_holders(&self) -> usize {
        self.holders.as_ref().map_or(0, |h| h.iter().filter(|s| !s.alive).count())
    }
}

/// The raw words of one slot that the descriptions are made from.
struct SlotWords {
    holder: u64,
    redo: u64,
    /// The pending record: word, block, dest, desc.
    pending: [u64; 4],
}

/// What recovery does with an interrupted operation, by kind.
const FINISH: &str = "finish it";
const UNDO: &str = "undo it";
const DECIDE: &str = "finish or undo it, as its detectable CAS shows it took effect or not";

fn slab_op(r: Redo) -> Interrupted {
    let (b, s, a) = (r.bracket.name(), r.slab, r.arg);
    let (operation, recovery) = match (r.op, r.flag) {
        (Op::Bump, _) => (format!("extend the {b} heap by a batch of slabs from slab {s}"), DECIDE),
        (Op::GlobalPop, _) => {
            let n = ChainArg::unpack(a).slabs;
            (format!("take {n} {b} slab(s) from slab {s} off the global free list"), DECIDE)
        }
        (Op::GlobalPush, _) => {
            let n = ChainArg::unpack(a).slabs;
            (format!("return {n} {b} slab(s) from slab {s} to the global free list"), DECIDE)
        }
        (Op::Size, _) => (format!("give {b} slab {s} block class {a}"), UNDO),
        (Op::TakeWord, false) => (format!("move bitset word {a} of {b} slab {s} into the thread's cache"), FINISH),
        (Op::TakeWord, true) => {
            (format!("return the thread's cached blocks to bitset word {a} of {b} slab {s}"), FINISH)
        }
        (Op::LocalFree, _) => (format!("free block {a} of {b} slab {s}"), FINISH),
        (Op::Retire, false) => (format!("retire full {b} slab {s} (detach or disown it)"), FINISH),
        (Op::Retire, true) => (format!("disown full {b} slab {s}"), FINISH),
        (Op::RemoteFree, false) => (
            format!("a remote free into {b} slab {s}"),
            "finish it, performing its counter decrement if that had not happened",
        ),
        (Op::RemoteFree, true) => (format!("claim {b} slab {s} by its last remote free"), FINISH),
        (Op::Abandon, false) => (format!("disown partly used {b} slab {s}"), DECIDE),
        (Op::Abandon, true) => (format!("take back empty {b} slab {s} while disowning it"), FINISH),
        (Op::Reclaim, _) => (format!("move empty {b} slab {s} to the unsized list"), FINISH),
        (Op::MailboxPush, _) => (
            format!("a remote free of a block of {b} slab {s} into its owner's mailbox"),
            "finish it: counted on the slab's counter if the push had not happened",
        ),
        (Op::Harvest, false) => (format!("take back the thread's {b} mailbox"), DECIDE),
        (Op::Harvest, true) => (format!("close the thread's {b} mailbox, taking back its blocks"), DECIDE),
    };
    Interrupted { operation, recovery: recovery.to_string() }
}

fn outer_op(p: Pending, [_, block, dest, desc]: [u64; 4]) -> Interrupted {
    let (operation, recovery) = match p.kind {
        PendingKind::Alloc if block == 0 => {
            (format!("a detectable allocation into the word at offset {dest:#x}"), "nothing: no block had been chosen")
        }
        PendingKind::Alloc => (
            format!("a detectable allocation of the block at offset {block:#x} into the word at offset {dest:#x}"),
            "store the block's offset into the word if the block was taken, else leave it free",
        ),
        PendingKind::Free => (
            format!("a detectable free of the block at offset {block:#x} through the word at offset {dest:#x}"),
            "clear the word, and free the block if it is still that allocation",
        ),
        PendingKind::HugePlace => (
            format!("a huge allocation (descriptor at offset {desc:#x})"),
            "undo it: release its backing object, descriptor and address range",
        ),
        PendingKind::HugeFree => (
            format!("a free of the huge block at offset {block:#x}"),
            "finish it if the block is still that allocation",
        ),
        PendingKind::HugeReclaim => (
            format!("the reclaim of the freed huge block at offset {block:#x}"),
            "finish it: remove its backing object and descriptor",
        ),
    };
    Interrupted { operation, recovery: recovery.to_string() }
}

/// The operations `w` names: the slab operation of its redo record, and the outer operation of
/// its pending record.
fn in_flight_parts(w: &SlotWords) -> [Option<Interrupted>; 2] {
    let slab = match Redo::unpack(w.redo) {
        Some(r) => Some(slab_op(r)),
        None if w.redo != 0 => Some(Interrupted {
            operation: format!("an unreadable redo record {:#x}", w.redo),
            recovery: "skip it (the checker reports what the operation left)".to_string(),
        }),
        None => None,
    };
    let outer = match Pending::unpack(w.pending[0]) {
        Some(p) => Some(outer_op(p, w.pending)),
        None if w.pending[0] != 0 => Some(Interrupted {
            operation: format!("an unreadable pending record {:#x}", w.pending[0]),
            recovery: "skip it".to_string(),
        }),
        None => None,
    };
    [slab, outer]
}

fn slot_info(slot: u32, w: &SlotWords, hosts: &HostTable<'_>) -> Option<SlotInfo> {
    let holder = Holder::unpack(w.holder)?;
    let in_flight = in_flight_parts(w).into_iter().flatten().collect();
    let domain = identity::domain();
    Some(SlotInfo {
        slot,
        pid: holder.pid,
        host: holder.host,
        local: hosts.is_local(holder, domain),
        alive: hosts.holder_alive(holder, domain),
        in_flight,
    })
}

/// The plan for `slot`, whose holder `pid` died, from its words `w`; `hazard_sets` of its
/// process to clear. The order is recovery's (docs/design.md §8.3): the slab operation, the list
/// rebuild, the outer operation, the hazards, the release.
fn plan(slot: u32, pid: u32, w: &SlotWords, recovery: bool, hazard_sets: u32) -> RecoveryPlan {
    let describe = |i: Interrupted| format!("interrupted: {}; recovery will {}", i.operation, i.recovery);
    let [slab, outer] = in_flight_parts(w);
    let mut steps = vec![format!("adopt slot {slot} from dead pid {pid}")];
    steps.extend(slab.map(describe));
    steps.push("rebuild its slab lists from the descriptors of the slabs it owns".to_string());
    steps.extend(outer.map(describe));
    if hazard_sets > 0 {
        steps.push(format!("clear the {hazard_sets} hazard set(s) of pid {pid} (its huge mappings)"));
    }
    steps.push(
        "release the slot: its empty slabs go back to the global list, its partly used ones are disowned".to_string(),
    );
    let blocked = (!recovery).then(|| "the heap was created without recovery: its slots cannot be adopted".into());
    RecoveryPlan { slot, pid, steps, blocked }
}

impl RecoveryReport {
    /// What the recovery did, step by step, in words (for `cxlalloc recover`).
    pub fn steps(&self) -> Vec<String> {
        let mut steps = vec![match self.dead_holder {
            Some(h) => format!("adopted slot {} from dead pid {}", self.slot, h.pid),
            None => format!("attached idle slot {}", self.slot),
        }];
        if let Some((r, how)) = self.redo {
            let done = match how {
                Resolution::Completed => "finished",
                Resolution::Undone => "undone",
                Resolution::Redone => "finished, its counter decrement performed now",
            };
            steps.push(format!("interrupted: {}; {done}", slab_op(r).operation));
        }
        let b = &self.rebuilt;
        steps.push(format!(
            "rebuilt its slab lists: {} slabs owned, {} free counts corrected, {} caches dropped",
            b.owned, b.recounted, b.caches_dropped
        ));
        if let Some((p, how)) = self.pending {
            let what = match p.kind {
                PendingKind::Alloc => "a detectable allocation",
                PendingKind::Free => "a detectable free",
                PendingKind::HugePlace => "a huge allocation",
                PendingKind::HugeFree => "a huge free",
                PendingKind::HugeReclaim => "the reclaim of a freed huge block",
            };
            let done = match how {
                PendingOutcome::Stored => "the block's offset stored into the application's word",
                PendingOutcome::NotTaken => "nothing to do: the block never left the free state",
                PendingOutcome::Freed => "the application's word cleared and the block freed",
                PendingOutcome::AlreadyFreed => "nothing to do: it had already happened",
                PendingOutcome::Undone => "undone: its object, descriptor and range released",
                PendingOutcome::Finished => "finished",
            };
            steps.push(format!("interrupted: {what}; {done}"));
        }
        if self.hazard_sets_cleared > 0 {
            steps.push(format!("cleared {} hazard set(s) of the dead process", self.hazard_sets_cleared));
        }
        steps
    }
}

impl Heap {
    /// The words of `slot` (its record refreshed from memory first: under the reduced coherence
    /// models another host may have written it).
    fn slot_words(&self, slot: u32) -> SlotWords {
        let mem = self.mem();
        let holder = mem.lease(slot).holder.load(Ordering::Acquire);
        if holder == 0 {
            return SlotWords { holder, redo: 0, pending: [0; 4] };
        }
        let (record, len) = mem.record_bytes(slot);
        mem.swcc.refresh(Site::Scan, record, len);
        let rec = mem.record(slot);
        let p = &rec.pending;
        SlotWords {
            holder,
            redo: rec.redo.load(Ordering::Acquire),
            pending: [&p.word, &p.block, &p.dest, &p.desc].map(|w| w.load(Ordering::Acquire)),
        }
    }

    /// The leased thread slots: holder pid, whether it is alive, and what each slot's records
    /// show in flight. Reads only; a snapshot, advisory while threads attach and detach.
    pub fn slots(&self) -> Vec<SlotInfo> {
        let hosts = self.mem().hosts();
        (0..self.mem().layout.slots).filter_map(|s| slot_info(s, &self.slot_words(s), &hosts)).collect()
    }

    /// What recovering each slot whose holder died would do, step by step (reads only; see
    /// [`Heap::recover_dead`] to do it).
    pub fn recovery_plan(&self) -> Vec<RecoveryPlan> {
        let mem = self.mem();
        let recovery = mem.recoverable();
        (0..mem.layout.slots)
            .filter_map(|slot| {
                let w = self.slot_words(slot);
                let holder = Holder::unpack(w.holder).filter(|&h| !mem.holder_alive(h))?;
                let sets = mem.huge().map_or(0, |view| {
                    (0..view.sets()).filter(|&i| view.lease(i).load(Ordering::Acquire) == w.holder).count() as u32
                });
                Some(plan(slot, holder.pid, &w, recovery, sets))
            })
            .collect()
    }

    /// The directory that named heaps live in (`/dev/shm`).
    pub fn named_dir() -> PathBuf {
        PathBuf::from(files::SHM_DIR)
    }

    /// The entries of [`Heap::named_dir`] that name heaps: `(name, path)` of each, sorted by
    /// name, whether or not it holds a valid heap (half-built creations, hidden, are left out).
    pub fn named_heaps() -> std::io::Result<Vec<(String, PathBuf)>> {
        let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(files::SHM_DIR)?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.strip_prefix(files::NAME_PREFIX)?.to_string();
                Some((name, e.path()))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// A read-only look at the heap called `name` (see [`Heap::info_at`]).
    pub fn info(name: &str) -> Result<HeapInfo, OpenError> {
        Self::info_at(&files::path_for_name(name)?)
    }

    /// A read-only look at the heap directory `path`: its header (validated as an open would),
    /// regions, storage use, slot holders and mCAS home, read with `pread`. Writes nothing, does
    /// not map the heap (a no-HWcc heap's mCAS window is mapped, to read whether it is served),
    /// registers nothing, and never adopts, recovers or creates: safe to run on any heap, in
    /// use or abandoned.
    pub fn info_at(path: &Path) -> Result<HeapInfo, OpenError> {
        let (mut file, header_path) = files::open_header_read_only(path)?;
        let mut bytes = Vec::with_capacity(HEADER_BYTES);
        Read::by_ref(&mut file).take(HEADER_BYTES as u64).read_to_end(&mut bytes).map_err(|source| OpenError::Io {
            op: "read header",
            path: header_path.clone(),
            source,
        })?;
        let header = Header::parse(&bytes, &header_path)?;
        let layout = Layout::from_header(&header);
        let regions = RegionId::ALL
            .iter()
            .map(|&r| RegionInfo { name: r.file_name(), bytes: header.region_bytes[r as usize], hwcc: r.is_hwcc() })
            .collect();
        let stored_bytes = std::fs::read_dir(path)
            .map(|d| d.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.blocks() * 512).sum())
            .unwrap_or(0);
        let config = header.config();
        Ok(HeapInfo {
            path: path.to_path_buf(),
            config,
            layout_version: header.layout_version,
            regions,
            reserved_bytes: layout.total as u64,
            stored_bytes,
            holders: read_slots(&header, &layout, &|r, at, buf| read_region(path, &header, r, at, buf))
                .map_err(|e| e.to_string()),
            hosts: host_infos(&layout, &|r, at, buf| read_region(path, &header, r, at, buf)),
            mcas: (header.config().coherence == Coherence::NoHwcc).then(|| mcas_info(path)),
        })
    }

    /// A read-only look at the heap on the device at `path` (docs/design.md §2.4), as
    /// [`Heap::info_at`] gives for a directory: the header and label are validated as
    /// [`Heap::open_device`] does, and the slot table and records are read through read-only
    /// mappings of just those pages (a PCI BAR's resource file cannot be `pread`).
    pub fn info_device(path: &Path) -> Result<HeapInfo, OpenError> {
        let (file, header, carving) = DeviceBacking::survey(path)?;
        let layout = Layout::from_header(&header);
        let regions = RegionId::ALL
            .iter()
            .map(|&r| RegionInfo { name: r.file_name(), bytes: header.region_bytes[r as usize], hwcc: r.is_hwcc() })
            .collect();
        let meta = file.metadata().map_err(|source| OpenError::Io { op: "stat", path: path.to_path_buf(), source })?;
        let stored_bytes = if meta.is_file() && meta.blocks() > 0 { meta.blocks() * 512 } else { carving.bytes };
        let read = |r: RegionId, at: u64, buf: &mut [u8]| {
            DeviceBacking::read_mapped(&file, path, carving.regions[r as usize] + at, buf)
        };
        let mcas = (header.config().coherence == Coherence::NoHwcc).then(|| match DeviceBacking::window(path) {
            Ok(w) => McasInfo::Window { served_by: w.served_by(), path: path.to_path_buf() },
            Err(e) => McasInfo::WindowUnusable { path: path.to_path_buf(), reason: e.to_string() },
        });
        Ok(HeapInfo {
            path: path.to_path_buf(),
            config: header.config(),
            layout_version: header.layout_version,
            regions,
            reserved_bytes: layout.total as u64,
            stored_bytes,
            holders: read_slots(&header, &layout, &read).map_err(|e| e.to_string()),
            hosts: host_infos(&layout, &read),
            mcas,
        })
    }
}

/// Reads `buf.len()` bytes at byte `at` of region `r` of the heap directory `dir` with `pread`.
fn read_region(dir: &Path, header: &Header, r: RegionId, at: u64, buf: &mut [u8]) -> Result<(), OpenError> {
    let (path, base) = files::region_file(dir, header, r)?;
    let file = File::open(&path).map_err(|source| OpenError::Io { op: "open", path: path.clone(), source })?;
    file.read_exact_at(buf, base + at).map_err(|source| OpenError::Io { op: "read", path, source })
}

/// How the survey reads a heap: `buf.len()` bytes at byte `at` of a region.
type ReadRegion<'a> = dyn Fn(RegionId, u64, &mut [u8]) -> Result<(), OpenError> + 'a;

/// Reads the host table through `read`, into a private copy.
fn read_hosts(layout: &Layout, read: &ReadRegion<'_>) -> Result<Vec<HostEntry>, OpenError> {
    let first = (layout.host_table - layout.region(RegionId::Shared).offset) as u64;
    let size = std::mem::size_of::<HostEntry>();
    let mut bytes = vec![0u8; MAX_HOSTS as usize * size];
    read(RegionId::Shared, first, &mut bytes)?;
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        AtomicU64::new(u64::from_ne_bytes(w))
    };
    Ok((0..MAX_HOSTS as usize)
        .map(|i| {
            let e = i * size;
            HostEntry::from_words(
                word(e + std::mem::offset_of!(HostEntry, word)),
                word(e + std::mem::offset_of!(HostEntry, heartbeat)),
                word(e + std::mem::offset_of!(HostEntry, registered)),
                std::array::from_fn(|n| word(e + std::mem::offset_of!(HostEntry, name) + n * 8)),
            )
        })
        .collect())
}

/// The registered hosts, as the survey shows them.
fn host_infos(layout: &Layout, read: &ReadRegion<'_>) -> Result<Vec<HostInfo>, String> {
    read_hosts(layout, read)
        .map(|t| HostInfo::from_records(HostTable::new(&t, None).records(), identity::domain(), now_secs()))
        .map_err(|e| e.to_string())
}

/// Reads the slot table and the held slots' records through `read`.
fn read_slots(header: &Header, layout: &Layout, read: &ReadRegion<'_>) -> Result<Vec<SlotInfo>, OpenError> {
    let stride = layout.lease_stride as u64;
    // The records run downwards from slot 0's: read them all from the lowest (the last slot's).
    let first = (layout.slot_records_start() - layout.region(RegionId::Shared).offset) as u64;
    let mut leases = vec![0u8; layout.slots as usize * stride as usize];
    read(RegionId::Shared, first, &mut leases)?;
    let word = |bytes: &[u8], at: usize| {
        let mut w = [0u8; 8];
        if let Some(b) = bytes.get(at..at + 8) {
            w.copy_from_slice(b);
        }
        u64::from_ne_bytes(w)
    };
    let host_entries = read_hosts(layout, read)?;
    let hosts = HostTable::new(&host_entries, None);
    let mut out = Vec::new();
    for slot in 0..layout.slots {
        let holder = word(&leases, (layout.slots - 1 - slot) as usize * stride as usize);
        if holder == 0 {
            continue;
        }
        let record = u64::from(slot) * u64::from(header.record_bytes);
        let mut redo = [0u8; 8];
        read(RegionId::Owned, record + std::mem::offset_of!(ThreadRecord, redo) as u64, &mut redo)?;
        let mut pending = [0u8; 32];
        read(RegionId::Owned, record + std::mem::offset_of!(ThreadRecord, pending) as u64, &mut pending)?;
        let w = SlotWords { holder, redo: word(&redo, 0), pending: std::array::from_fn(|i| word(&pending, i * 8)) };
        out.extend(slot_info(slot, &w, &hosts));
    }
    Ok(out)
}

/// Where the no-HWcc heap in `dir` has its HWcc words served from.
fn mcas_info(dir: &Path) -> McasInfo {
    if let Ok(spec) = DeviceSpec::load(&dir.join(DEVICE_FILE)) {
        return McasInfo::Device { registers: spec.registers, memory: spec.memory, memory_offset: spec.memory_offset };
    }
    let path = dir.join(WINDOW_FILE);
    match Window::open(&path) {
        Ok(w) => McasInfo::Window { served_by: w.served_by(), path },
        Err(e) => McasInfo::WindowUnusable { path, reason: e.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::Bracket;

    #[test]
    fn recovery_resolves_slab_operations_before_the_rebuild_and_outer_ones_after() {
        let w = SlotWords {
            holder: 1,
            redo: Redo::new(Op::LocalFree, Bracket::Small, 7, 5).pack(),
            pending: [Pending::new(PendingKind::Free, 1).pack(), 0x100, 0x200, 0],
        };
        let steps = plan(3, 42, &w, true, 0).steps;
        let at = |s: &str| steps.iter().position(|x| x.contains(s));
        assert!(at("adopt slot 3 from dead pid 42") == Some(0), "{steps:?}");
        assert!(at("free block 5 of small slab 7") < at("rebuild"), "{steps:?}");
        assert!(at("rebuild") < at("detectable free"), "{steps:?}");
        assert!(at("release the slot") == Some(steps.len() - 1), "{steps:?}");
    }

    #[test]
    fn a_heap_without_recovery_says_its_plan_is_blocked() {
        let idle = SlotWords { holder: 1, redo: 0, pending: [0; 4] };
        assert!(plan(0, 1, &idle, false, 0).blocked.is_some());
        assert!(plan(0, 1, &idle, true, 0).blocked.is_none());
    }
}
