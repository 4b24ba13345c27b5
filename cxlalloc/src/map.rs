//! Address-space reservation and fixed mappings: the only place that calls `mmap`.
//!
//! A heap's reservation is `PROT_NONE` address space; regions are mapped into it with
//! `MAP_FIXED`. Nothing inside a live reservation is ever `munmap`ped (a hole could be filled by
//! an unrelated mapping); the whole reservation is released at once when the heap is closed.
//! [`map_shared_fixed`] is async-signal-safe (one raw system call) and is what the SIGSEGV
//! handler uses.

use std::ptr::NonNull;

use nix::errno::Errno;

use crate::layout::REGION_ALIGN;

/// Reserves `len` bytes of `PROT_NONE` address space aligned to `align` (a power of two, at
/// least [`REGION_ALIGN`]).
#[cfg(not(miri))]
pub(crate) fn reserve(len: usize, align: usize) -> Result<NonNull<u8>, Errno> {
    let padded = len.checked_add(align).ok_or(Errno::ENOMEM)?;
    // SAFETY: a fresh anonymous PROT_NONE mapping at a kernel-chosen address affects no existing
    // memory.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            padded,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    let start = raw as usize;
    let base = start.next_multiple_of(align.max(REGION_ALIGN));
    // SAFETY: both trimmed ranges lie inside the mapping just created and outside [base, base+len),
    // which stays reserved; nothing else can have been placed there yet.
    unsafe {
        if base > start {
            libc::munmap(raw, base - start);
        }
        let tail = start + padded - (base + len);
        if tail > 0 {
            libc::munmap((base + len) as *mut libc::c_void, tail);
        }
    }
    NonNull::new(base as *mut u8).ok_or(Errno::ENOMEM)
}

/// Maps `len` bytes of `fd` at file offset `off` over `addr`, shared and read/write (read-only
/// when `writable` is false). Async-signal-safe.
///
/// # Safety
/// - `[addr, addr + len)` must lie inside a reservation owned by the caller's heap, so that
///   replacing whatever is mapped there cannot clobber unrelated memory.
/// - `addr`, `off` and `len` must be page-aligned.
pub(crate) unsafe fn map_shared_fixed(
    addr: *mut u8,
    len: usize,
    fd: i32,
    off: usize,
    writable: bool,
) -> Result<(), Errno> {
    let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
    // SAFETY: forwarded from this function's contract.
    unsafe { mmap_fixed(addr, len, prot, libc::MAP_SHARED, fd, off) }
}

/// Maps private zero-filled read/write memory over `[addr, addr + len)`.
///
/// # Safety
/// Same as [`map_shared_fixed`].
#[cfg(not(miri))]
pub(crate) unsafe fn map_private_fixed(addr: *mut u8, len: usize) -> Result<(), Errno> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: forwarded from this function's contract.
    unsafe { mmap_fixed(addr, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) }
}

/// Replaces whatever is mapped over `[addr, addr + len)` with reserved `PROT_NONE` address
/// space, exactly like the reservation itself (so the kernel merges it back into one mapping and
/// a freed huge range never leaves a hole that an unrelated mapping could fill).
/// Async-signal-safe.
///
/// # Safety
/// Same as [`map_shared_fixed`]; nothing in this process may use the range afterwards.
#[cfg(not(miri))]
pub(crate) unsafe fn map_none_fixed(addr: *mut u8, len: usize) -> Result<(), Errno> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: forwarded from this function's contract.
    unsafe { mmap_fixed(addr, len, libc::PROT_NONE, flags, -1, 0) }
}

/// Miri: the reservation is plain memory, which stays accessible.
///
/// # Safety
/// Same as the non-miri version.
#[cfg(miri)]
pub(crate) unsafe fn map_none_fixed(_addr: *mut u8, _len: usize) -> Result<(), Errno> {
    Ok(())
}

/// One `mmap(MAP_FIXED)` system call. Async-signal-safe.
///
/// # Safety
/// Same as [`map_shared_fixed`].
unsafe fn mmap_fixed(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: usize) -> Result<(), Errno> {
    // SAFETY: the caller guarantees the range is inside our own reservation.
    let raw = unsafe { libc::mmap(addr.cast(), len, prot, flags | libc::MAP_FIXED, fd, off as libc::off_t) };
    if raw == libc::MAP_FAILED {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// Releases a whole reservation.
///
/// # Safety
/// `base..base + len` must be a reservation returned by [`reserve`] that nothing will touch again.
#[cfg(not(miri))]
pub(crate) unsafe fn release(base: NonNull<u8>, len: usize) {
    // SAFETY: the caller hands over the whole reservation.
    unsafe {
        libc::munmap(base.as_ptr().cast(), len);
    }
}

/// `MADV_POPULATE_WRITE` (Linux 5.14), not in the libc crate yet.
#[cfg(not(miri))]
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Faults `addr..addr + len` in for writing with one system call instead of one page fault
/// per page. Kernels before 5.14 refuse it (`EINVAL`); callers treat any error as "let the
/// pages fault in lazily instead".
///
/// # Safety
/// The range lies inside a live shared mapping of a heap (populating changes no contents).
#[cfg(not(miri))]
pub(crate) unsafe fn populate_write(addr: *mut u8, len: usize) -> Result<(), Errno> {
    // SAFETY: by the caller's contract the range is mapped; populating writes no data.
    if unsafe { libc::madvise(addr.cast(), len, MADV_POPULATE_WRITE) } == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// Miri: the reservation is plain memory; there is nothing to populate.
///
/// # Safety
/// Same as the non-miri version.
#[cfg(miri)]
pub(crate) unsafe fn populate_write(_addr: *mut u8, _len: usize) -> Result<(), Errno> {
    Ok(())
}

/// Asks for transparent huge pages over `[addr, addr + len)` (`MADV_HUGEPAGE`): a 16 MiB
/// block is then 8 pages of 2 MiB, faulted, zeroed and entered in the page tables 512 times
/// faster per call and with 512 times fewer TLB entries. For shared memory (tmpfs) the kernel
/// honours it only when `/sys/kernel/mm/transparent_hugepage/shmem_enabled` is `advise` (or
/// `within_size`/`always`), or the tmpfs is mounted `huge=`; otherwise it only marks the
/// mapping (`hg` in `/proc/self/smaps`) and changes nothing (docs/design.md §7.6). Errors are
/// ignored: the advice is an optimization, and a kernel without THP refuses it. Async-signal-safe.
///
/// # Safety
/// The range is page-aligned and lies inside a reservation of this process (advice changes no
/// contents).
#[cfg(not(miri))]
pub(crate) unsafe fn advise_huge_pages(addr: *mut u8, len: usize) {
    // SAFETY: by the caller's contract the range is ours; MADV_HUGEPAGE only sets a flag on
    // the mapping.
    unsafe { libc::madvise(addr.cast(), len, libc::MADV_HUGEPAGE) };
}

/// Miri: plain memory, nothing to advise.
///
/// # Safety
/// Same as the non-miri version.
#[cfg(miri)]
pub(crate) unsafe fn advise_huge_pages(_addr: *mut u8, _len: usize) {}

/// Whether the page at `addr` is resident (`mincore`): for a shared file mapping, whether the
/// file's page is in memory; for reserved `PROT_NONE` address space, never (it has no pages).
/// The huge heap uses it to tell a range that still maps a cached object from one returned to
/// `PROT_NONE` (docs/design.md §7.6). Errors read as "not resident". Async-signal-safe.
///
/// # Safety
/// `addr` is page-aligned and lies inside a reservation of this process.
#[cfg(not(miri))]
pub(crate) unsafe fn is_resident(addr: *mut u8, page: usize) -> bool {
    let mut v = 0u8;
    // SAFETY: by the caller's contract the page lies in our reservation (mapped, as an object
    // or as PROT_NONE); mincore writes one byte per page of the one-page range into `v`.
    let r = unsafe { libc::mincore(addr.cast(), page, &mut v) };
    r == 0 && v & 1 == 1
}

/// Miri: the reservation is plain memory, always there.
///
/// # Safety
/// Same as the non-miri version.
#[cfg(miri)]
pub(crate) unsafe fn is_resident(_addr: *mut u8, _page: usize) -> bool {
    true
}

// Under miri, which models only plain allocations, a reservation is one zeroed heap allocation
// that is readable and writable from the start: exactly what the anonymous backend needs, so
// the allocator's unsafe code can be checked (file backings are unavailable there).

/// Miri: a zeroed allocation stands in for the reservation (heaps under miri have no huge
/// span, so the alignment is the region alignment).
#[cfg(miri)]
pub(crate) fn reserve(len: usize, _align: usize) -> Result<NonNull<u8>, Errno> {
    let layout = std::alloc::Layout::from_size_align(len, REGION_ALIGN).map_err(|_| Errno::ENOMEM)?;
    // SAFETY: the layout has a non-zero size (a heap has at least a header region).
    NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or(Errno::ENOMEM)
}

/// Miri: the reservation is already zeroed and writable.
///
/// # Safety
/// Same as [`map_shared_fixed`].
#[cfg(miri)]
pub(crate) unsafe fn map_private_fixed(_addr: *mut u8, _len: usize) -> Result<(), Errno> {
    Ok(())
}

/// Miri: frees the allocation made by [`reserve`].
///
/// # Safety
/// `base..base + len` must come from [`reserve`] and nothing may touch it again.
#[cfg(miri)]
pub(crate) unsafe fn release(base: NonNull<u8>, len: usize) {
    if let Ok(layout) = std::alloc::Layout::from_size_align(len, REGION_ALIGN) {
        // SAFETY: allocated by `reserve` with this very layout.
        unsafe { std::alloc::dealloc(base.as_ptr(), layout) };
    }
}
