//! The heap handle: create, open, unlink, attach, offsets, roots.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::backing::anon::AnonBacking;
use crate::backing::files::{self, FileBacking};
use crate::error::{AdoptError, AttachError, OffsetError, OpenError};
use crate::huge;
use crate::identity;
use crate::layout::{Config, Header, Span};
use crate::mcas::DeviceSpec;
use crate::mem::HeapMem;
use crate::offset::Offset;
use crate::persist::shared::ROOTS;
use crate::protocol::HwWord;
use crate::recovery::RecoveryReport;
use crate::signal::{self, Registration, MAX_HEAPS};
use crate::sync::{AtomicU64, Ordering};

mod thread;
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
            huge::ops::sweep_unheld(&self.mem, &view);
        }
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
        Self::from_mem(HeapMem::map(header, Box::new(backing), identity::current().pack())?)
    }

    /// Opens the heap in directory `path`: the directory once (not following a symbolic link),
    /// every file relative to it. Refused: a heap this user may not read and write
    /// ([`OpenError::PermissionDenied`]), files with mixed owners or modes
    /// ([`OpenError::MixedPermissions`]), a region file of another heap
    /// ([`OpenError::ForeignRegion`]).
    pub fn open_at(path: &Path) -> Result<Self, OpenError> {
        let (backing, header) = FileBacking::open(path)?;
        Self::from_mem(HeapMem::map(header, Box::new(backing), identity::current().pack())?)
    }

    /// Opens the heap in `path`, creating it with `config` if absent; see [`Heap::open_or_create`].
    pub fn open_or_create_at(path: &Path, config: &Config) -> Result<Self, OpenError> {
        let heap = match Self::open_at(path) {
            Err(OpenError::NotFound(_)) => match Self::create_at(path, config) {
                Err(OpenError::AlreadyExists(_)) => Self::open_at(path)?,
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

    /// A private heap in anonymous memory, for one process (tests, tools).
    pub fn anonymous(config: &Config) -> Result<Self, OpenError> {
        config.validate()?;
        let header = Header::new(config, random_secret());
        Self::from_mem(HeapMem::map(header, Box::new(AnonBacking), identity::current().pack())?)
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

    /// Reclaims freed huge blocks of thread slots that no thread holds: blocks whose owner
    /// detached before another process freed them, or stopped mapping them. Runs by itself when
    /// a heap closes; call it to reclaim sooner (a tool, a supervisor). Returns nothing: the
    /// checker's census shows what is left.
    pub fn sweep_huge(&self) {
        if let Some(view) = self.mem().huge().filter(|v| v.in_own_process()) {
            huge::ops::sweep_unheld(self.mem(), view);
        }
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
