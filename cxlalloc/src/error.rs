//! Typed errors, one enum per operation. Each maps to a stable C error code ([`ErrorCode`]).

use std::path::PathBuf;

use crate::class::Bracket;

/// Why a heap could not be created or opened ([`crate::Heap::create`], [`crate::Heap::open`]).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No heap exists under that name or path.
    #[error("no heap at {0}")]
    NotFound(PathBuf),
    /// `create` found a heap already there.
    #[error("a heap already exists at {0}")]
    AlreadyExists(PathBuf),
    /// A system call on the heap's files failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A region file is shorter than its header says.
    #[error("region file {path} is truncated: {actual} bytes, header says {expected}")]
    Truncated {
        /// The region file.
        path: PathBuf,
        /// Size the header records.
        expected: u64,
        /// Size found.
        actual: u64,
    },
    /// The header does not start with the cxlalloc magic.
    #[error("{0} is not a cxlalloc heap (bad magic)")]
    BadMagic(PathBuf),
    /// The header's checksum does not match its contents.
    #[error("heap header at {0} is corrupt (checksum mismatch)")]
    Checksum(PathBuf),
    /// The header names a field whose value differs from what this build or the caller expects.
    #[error("heap parameter `{field}` is {found}, expected {expected}")]
    Mismatch {
        /// The header field.
        field: &'static str,
        /// Value in the header.
        found: u64,
        /// Value expected.
        expected: u64,
    },
    /// The configuration passed to `create` is invalid.
    #[error("invalid heap configuration: {0}")]
    InvalidConfig(String),
    /// Reserving or mapping address space failed.
    #[error("cannot map heap: {0}")]
    Map(nix::errno::Errno),
    /// The process already has the maximum number of heaps open.
    #[error("too many heaps open in this process (max {0})")]
    TooManyHeaps(usize),
    /// A no-HWcc heap's mCAS window could not be used.
    #[error("mCAS window: {0}")]
    Mcas(String),
    /// A no-HWcc heap's window is shared by the kernels of a pod, and this host has no valid
    /// host number (`CXLALLOC_HOST`, docs/design.md §9.2) to lease its requesters by.
    #[error("host number: {0}")]
    HostNumber(String),
    /// Another kernel holds this host number in the heap's mCAS window: two hosts of a pod were
    /// given one number, and their requesters would collide (docs/design.md §9.2). Give this
    /// host another number; if the claimant's kernel is gone (it crashed, or rebooted, with the
    /// heap open), an operator frees its claim with [`crate::Heap::free_host_number`]
    /// (`cxlalloc free-host-number DEVICE NUMBER:KERNEL`).
    #[error(
        "host number {number} is claimed by another kernel ({claimant:#018x}, host {claimant_name:?}, claimed at \
         Unix second {since}); this kernel is {kernel:#018x}: every host of a pod needs its own number. If that \
         kernel is down, free its claim with `cxlalloc free-host-number DEVICE {number}:{claimant:#x}`"
    )]
    HostNumberTaken {
        /// The host number.
        number: u32,
        /// The fingerprint of the kernel that holds it (its boot id, hashed).
        claimant: u64,
        /// The name its host wrote with the claim (advice).
        claimant_name: String,
        /// Wall-clock second of the claim (advice).
        since: u64,
        /// This process's kernel fingerprint.
        kernel: u64,
    },
    /// A heap name breaks the grammar of [`crate::Heap::check_name`], or a path given to a
    /// `*_at` function has no usable final component.
    #[error("invalid heap name {name:?}: {reason}")]
    InvalidName {
        /// The name (or path) as given.
        name: String,
        /// The rule it breaks.
        reason: String,
    },
    /// This process may not read and write a file or directory of the heap (`EACCES` or
    /// `EPERM`): the heap belongs to another user, or its mode does not share it with this one.
    #[error("permission denied (EACCES) opening {path}: the heap's mode or owner does not admit this user")]
    PermissionDenied {
        /// The file or directory.
        path: PathBuf,
    },
    /// A file of the heap has an owner, group or mode other than the heap's (its header file's
    /// owner and group, and the mode the header records): every file of a heap must admit
    /// exactly the users the heap does.
    #[error("{path}: {what}; every file of a heap has its header's owner, group and mode")]
    MixedPermissions {
        /// The file.
        path: PathBuf,
        /// What differs, with both values.
        what: String,
    },
    /// A region file does not carry the header's heap identity: it belongs to another heap (a
    /// file swapped in, or a heap replaced while it was being opened), or is damaged.
    #[error("region file {path} belongs to another heap (identity {found:#018x}, header's {expected:#018x})")]
    ForeignRegion {
        /// The region file.
        path: PathBuf,
        /// Identity found in its trailer.
        found: u64,
        /// The header's identity.
        expected: u64,
    },
    /// A device ([`crate::Heap::open_device`]) that was never formatted (its first bytes are
    /// zero): run `cxlalloc format DEVICE` or [`crate::Heap::format_device`] first.
    #[error("{0} holds no heap (never formatted: run `cxlalloc format` on it)")]
    NotFormatted(PathBuf),
    /// A device is too small for the heap: `format` was asked for a configuration that needs
    /// more bytes than the device has (see [`crate::Heap::device_bytes`]).
    #[error("device {path} has {actual} bytes, the heap needs {needed}")]
    DeviceTooSmall {
        /// The device.
        path: PathBuf,
        /// Bytes the heap needs.
        needed: u64,
        /// Bytes the device has.
        actual: u64,
    },
    /// A path given as a device is not one: a directory (open it with
    /// [`crate::Heap::open_at`]), a file type that cannot be mapped, a device whose mapping
    /// alignment the layout cannot meet, or a heap directory's header file (it has no device
    /// label).
    #[error("{path} is not a usable heap device: {what}")]
    NotADevice {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

/// Why a thread could not attach ([`crate::Heap::attach`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttachError {
    /// Every thread slot is leased; `dead` of them are held by dead holders and can be adopted
    /// once recovery has run.
    #[error("all {slots} thread slots are leased ({dead} by dead holders)")]
    SlotsExhausted {
        /// Slot count of the heap.
        slots: u32,
        /// Slots whose holder is dead.
        dead: u32,
    },
    /// The device has no room for the slot's record (the lease is given back).
    #[error("no backing store left for a thread record: {0}")]
    OutOfMemory(nix::errno::Errno),
    /// No-HWcc heap: no mCAS device serves its window (start `cxlalloc-mcasd --heap NAME`).
    #[error("no mCAS device serves {0} (start cxlalloc-mcasd for this heap)")]
    DeviceUnserved(String),
    /// This process's host could not register: every entry of the heap's host table is taken
    /// by other hosts (docs/design.md §8.6).
    #[error("the heap's host table is full ({0} hosts registered); recover a dead host to free an entry")]
    HostsExhausted(u32),
}

/// Why a slot could not be adopted ([`crate::Heap::adopt`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdoptError {
    /// No such slot.
    #[error("slot {slot} out of range (the heap has {slots})")]
    NoSuchSlot {
        /// The slot asked for.
        slot: u32,
        /// Slot count of the heap.
        slots: u32,
    },
    /// The slot is free: attach instead.
    #[error("slot {0} is not leased")]
    NotHeld(u32),
    /// The slot's holder is alive.
    #[error("slot {slot} is held by live process {pid}")]
    HolderAlive {
        /// The slot.
        slot: u32,
        /// Its holder.
        pid: u32,
    },
    /// The slot's holder runs on another host (another kernel or pid namespace), whose
    /// processes this one cannot see: it counts as alive until that host is declared dead
    /// ([`crate::Heap::recover_host`]).
    #[error("slot {slot} is held by pid {pid} of host {host}, which is not declared dead")]
    ForeignHost {
        /// The slot.
        slot: u32,
        /// Its holder's pid, on its own host.
        pid: u32,
        /// The holder's host id.
        host: u16,
    },
    /// Another process adopted the slot first.
    #[error("slot {0} was adopted by another thread first")]
    Raced(u32),
    /// The heap was created with recovery off: a dead slot's state cannot be repaired.
    #[error("the heap was created without recovery; dead slots cannot be adopted")]
    RecoveryDisabled,
    /// The slot's record could not be backed (the device is full); the slot stays dead and
    /// adoptable.
    #[error("no backing store for the adopted slot's record: {0}")]
    OutOfMemory(nix::errno::Errno),
    /// No-HWcc heap: no mCAS device serves its window.
    #[error("no mCAS device serves {0} (start cxlalloc-mcasd for this heap)")]
    DeviceUnserved(String),
    /// This process's host could not register: the heap's host table is full.
    #[error("the heap's host table is full ({0} hosts registered); recover a dead host to free an entry")]
    HostsExhausted(u32),
}

impl From<&AdoptError> for ErrorCode {
    fn from(e: &AdoptError) -> Self {
        match e {
            AdoptError::NoSuchSlot { .. }
            | AdoptError::NotHeld(_)
            | AdoptError::HolderAlive { .. }
            | AdoptError::ForeignHost { .. } => ErrorCode::InvalidArgument,
            AdoptError::Raced(_) => ErrorCode::SlotsExhausted,
            AdoptError::RecoveryDisabled => ErrorCode::Unsupported,
            AdoptError::OutOfMemory(_) => ErrorCode::OutOfMemory,
            AdoptError::DeviceUnserved(_) => ErrorCode::Io,
            AdoptError::HostsExhausted(_) => ErrorCode::SlotsExhausted,
        }
    }
}

/// Why a host could not be declared dead and recovered ([`crate::Heap::recover_host`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum RecoverHostError {
    /// The host table has no such host (the id is out of range, or its entry is free).
    #[error("no host {0} in the heap's host table")]
    NoSuchHost(u16),
    /// The host is the caller's own: a process cannot declare its own host dead.
    #[error("host {0} is this process's own host; recover it from another host")]
    OwnHost(u16),
    /// The entry names another domain than the one given: the host was recovered and its entry
    /// claimed by another host since it was listed (docs/design.md §8.6).
    #[error("host {host} is now domain {found:016x}, not {named:016x}: its entry was reused; list the hosts again")]
    Reused {
        /// The entry's index.
        host: u16,
        /// The domain the caller named.
        named: u64,
        /// The domain the entry names now.
        found: u64,
    },
    /// The heap was created with recovery off: a dead host's slots cannot be adopted.
    #[error("the heap was created without recovery; dead slots cannot be adopted")]
    RecoveryDisabled,
}

impl From<&RecoverHostError> for ErrorCode {
    fn from(e: &RecoverHostError) -> Self {
        match e {
            RecoverHostError::NoSuchHost(_) | RecoverHostError::OwnHost(_) | RecoverHostError::Reused { .. } => {
                ErrorCode::InvalidArgument
            }
            RecoverHostError::RecoveryDisabled => ErrorCode::Unsupported,
        }
    }
}

impl From<&AttachError> for ErrorCode {
    fn from(e: &AttachError) -> Self {
        match e {
            AttachError::SlotsExhausted { .. } => ErrorCode::SlotsExhausted,
            AttachError::OutOfMemory(_) => ErrorCode::OutOfMemory,
            AttachError::DeviceUnserved(_) => ErrorCode::Io,
            AttachError::HostsExhausted(_) => ErrorCode::SlotsExhausted,
        }
    }
}

/// Why an allocation failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum AllocError {
    /// A zero-byte request.
    #[error("zero-size allocation")]
    ZeroSize,
    /// The size (or size × count) overflows.
    #[error("allocation size overflows")]
    Overflow,
    /// The alignment is not a power of two.
    #[error("alignment {0} is not a power of two")]
    BadAlignment(usize),
    /// The alignment is a power of two above the largest supported, `max`: one huge slot
    /// (1 GiB), the largest unit the huge heap hands out aligned.
    #[error("alignment {align} is above the largest supported alignment, 1 GiB ({max} bytes)")]
    AlignmentTooLarge {
        /// The alignment asked for.
        align: usize,
        /// The largest supported alignment.
        max: usize,
    },
    /// Above the largest slab class, in a heap created without a huge heap
    /// ([`crate::Config::huge_capacity`] 0).
    #[error("{0}-byte allocations need a huge heap, and this heap has none (huge_capacity 0)")]
    Unsupported(usize),
    /// No run of free huge slots is large enough.
    #[error("huge address space exhausted")]
    HugeExhausted,
    /// Every hazard set is leased and full: too many huge blocks mapped at once.
    #[error("every hazard set is full (too many huge blocks mapped at once)")]
    HazardsExhausted,
    /// Creating, sizing or mapping a huge block's backing object failed (`ENOSPC`: the device
    /// is full).
    #[error("huge block backing object: {0}")]
    Backing(nix::errno::Errno),
    /// The heap was opened by another process and inherited across `fork`: huge blocks are
    /// mapped per process, so the child must open the heap itself.
    #[error("heap handle inherited from another process; open the heap in this process")]
    ForeignProcess,
    /// The bracket has reached its configured capacity (or its backing store is full).
    #[error("{} heap exhausted", .0.name())]
    OutOfMemory(Bracket),
    /// Heap metadata is inconsistent; run the checker.
    #[error("heap metadata corrupt: {0}")]
    Corrupt(&'static str),
    /// The destination word of a detectable allocation is not an 8-aligned word of this heap
    /// that this process can use: a root, a word of a slab below the heap's length, or a word
    /// inside a live huge block.
    #[error("destination word is not an aligned word of this heap")]
    BadDestination,
    /// The destination word of a detectable allocation already names a block (overwriting it
    /// would lose that block).
    #[error("destination word is not empty")]
    DestinationInUse,
}

/// Why a free (or a query on a pointer) was refused. The heap is untouched in every case.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum FreeError {
    /// The pointer is not inside this heap's data region.
    #[error("pointer does not belong to this heap")]
    ForeignPointer,
    /// The pointer is inside a block, not at its start.
    #[error("pointer is interior to a block")]
    InteriorPointer,
    /// The pointer names a slab that holds no allocated blocks of any class.
    #[error("pointer is not an allocated block")]
    NotAllocated,
    /// The block is already free.
    #[error("double free")]
    DoubleFree,
    /// Heap metadata is inconsistent; run the checker.
    #[error("heap metadata corrupt: {0}")]
    Corrupt(&'static str),
    /// A huge block freed through a heap handle inherited across `fork` (see
    /// [`AllocError::ForeignProcess`]).
    #[error("heap handle inherited from another process; open the heap in this process")]
    ForeignProcess,
}

/// Why a hand-over write-back or invalidation ([`crate::ThreadHandle::write_back`],
/// [`crate::ThreadHandle::invalidate`]) was refused. Nothing was flushed.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum HandOverError {
    /// The pointer is not in this heap's slab data, nor the start of a live huge block.
    #[error("not heap memory of a block: {0}")]
    Block(FreeError),
    /// The range runs past the end of the slab (or huge block) holding the pointer.
    #[error("{len} bytes run past the {room} bytes left in the pointer's slab or block")]
    PastEnd {
        /// The length asked for.
        len: usize,
        /// The bytes from the pointer to the end of its slab or huge block.
        room: usize,
    },
}

/// Why an offset could not be turned into a pointer or back.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum OffsetError {
    /// The null offset.
    #[error("null offset")]
    Null,
    /// Outside this heap.
    #[error("address or offset outside the heap")]
    OutOfBounds,
}

/// Stable error codes of the C API (`cxlalloc.h`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Success.
    Ok = 0,
    /// Invalid argument (null handle, bad name, zero size, bad alignment).
    InvalidArgument = 1,
    /// Out of memory, or address space, or the heap's capacity.
    OutOfMemory = 2,
    /// Heap not found.
    NotFound = 3,
    /// Heap already exists.
    AlreadyExists = 4,
    /// Heap files corrupt, truncated, or not a heap.
    BadHeap = 5,
    /// Heap parameters differ from what was expected.
    Mismatch = 6,
    /// All thread slots leased.
    SlotsExhausted = 7,
    /// Pointer not from this heap.
    ForeignPointer = 8,
    /// Pointer interior to a block.
    InteriorPointer = 9,
    /// Double free.
    DoubleFree = 10,
    /// Not an allocated block.
    NotAllocated = 11,
    /// Metadata corrupt.
    Corrupt = 12,
    /// Request needs a capability the heap lacks (a huge allocation in a heap without a huge
    /// heap).
    Unsupported = 13,
    /// Operating-system error.
    Io = 14,
    /// The heap's files do not admit this user, or have mixed owners or modes.
    PermissionDenied = 15,
}

impl From<&OpenError> for ErrorCode {
    fn from(e: &OpenError) -> Self {
        match e {
            OpenError::NotFound(_) => ErrorCode::NotFound,
            OpenError::AlreadyExists(_) => ErrorCode::AlreadyExists,
            OpenError::Io { .. } => ErrorCode::Io,
            OpenError::Truncated { .. } | OpenError::BadMagic(_) | OpenError::Checksum(_) => ErrorCode::BadHeap,
            OpenError::Mismatch { .. } => ErrorCode::Mismatch,
            OpenError::InvalidConfig(_) => ErrorCode::InvalidArgument,
            OpenError::Map(_) | OpenError::TooManyHeaps(_) => ErrorCode::OutOfMemory,
            OpenError::Mcas(_) => ErrorCode::Io,
            OpenError::HostNumber(_) | OpenError::HostNumberTaken { .. } => ErrorCode::InvalidArgument,
            OpenError::InvalidName { .. } => ErrorCode::InvalidArgument,
            OpenError::PermissionDenied { .. } | OpenError::MixedPermissions { .. } => ErrorCode::PermissionDenied,
            OpenError::ForeignRegion { .. } => ErrorCode::BadHeap,
            OpenError::NotFormatted(_) => ErrorCode::NotFound,
            OpenError::DeviceTooSmall { .. } | OpenError::NotADevice { .. } => ErrorCode::InvalidArgument,
        }
    }
}

impl From<&AllocError> for ErrorCode {
    fn from(e: &AllocError) -> Self {
        match e {
            AllocError::ZeroSize
            | AllocError::BadAlignment(_)
            | AllocError::AlignmentTooLarge { .. }
            | AllocError::ForeignProcess
            | AllocError::BadDestination
            | AllocError::DestinationInUse => ErrorCode::InvalidArgument,
            AllocError::Overflow
            | AllocError::OutOfMemory(_)
            | AllocError::HugeExhausted
            | AllocError::HazardsExhausted
            | AllocError::Backing(nix::errno::Errno::ENOSPC | nix::errno::Errno::ENOMEM) => ErrorCode::OutOfMemory,
            AllocError::Backing(_) => ErrorCode::Io,
            AllocError::Unsupported(_) => ErrorCode::Unsupported,
            AllocError::Corrupt(_) => ErrorCode::Corrupt,
        }
    }
}

impl From<&FreeError> for ErrorCode {
    fn from(e: &FreeError) -> Self {
        match e {
            FreeError::ForeignPointer => ErrorCode::ForeignPointer,
            FreeError::InteriorPointer => ErrorCode::InteriorPointer,
            FreeError::NotAllocated => ErrorCode::NotAllocated,
            FreeError::DoubleFree => ErrorCode::DoubleFree,
            FreeError::Corrupt(_) => ErrorCode::Corrupt,
            FreeError::ForeignProcess => ErrorCode::InvalidArgument,
        }
    }
}

impl From<&HandOverError> for ErrorCode {
    fn from(e: &HandOverError) -> Self {
        match e {
            HandOverError::Block(f) => ErrorCode::from(f),
            HandOverError::PastEnd { .. } => ErrorCode::InvalidArgument,
        }
    }
}

/// Why huge-block maintenance could not start ([`crate::Heap::maintain_huge`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum MaintenanceError {
    /// The heap has no huge heap (`huge_capacity` 0, or a reduced coherence model).
    #[error("the heap has no huge heap")]
    NoHugeHeap,
    /// A handle a forked child inherited: the child opens the heap itself (docs/design.md §7.5).
    #[error("a heap handle inherited across fork: the child must open the heap itself for huge blocks")]
    ForeignProcess,
    /// The system refused a new thread.
    #[error("cannot start the maintenance thread: {0:?}")]
    Spawn(std::io::ErrorKind),
}

impl From<&MaintenanceError> for ErrorCode {
    fn from(e: &MaintenanceError) -> Self {
        match e {
            MaintenanceError::NoHugeHeap => ErrorCode::Unsupported,
            MaintenanceError::ForeignProcess => ErrorCode::InvalidArgument,
            MaintenanceError::Spawn(_) => ErrorCode::OutOfMemory,
        }
    }
}
