//! The library's own allocator ("meta" memory): everything that must not come from the cxlalloc
//! heap (docs/design.md §17.2).
//!
//! It serves three kinds of request:
//! - the Rust code of this library and of `cxlalloc` (it is the `#[global_allocator]`: the heap's
//!   own bookkeeping, thread handles, the strings of an error message);
//! - `malloc` calls made before the heap is ready (the dynamic loader, other libraries'
//!   constructors), or while this thread is inside the library already (a libc function the
//!   library calls, such as `opendir`, calling `malloc` back);
//! - blocks above the largest slab class when the heap has no huge heap for this process (a
//!   reduced coherence model, or a forked child of a shared heap);
//! - everything, if the heap could not be opened.
//!
//! Memory comes first from [`BOOT`], a static region in `.bss` (untouched pages cost nothing),
//! then from one lazily reserved anonymous arena. A pointer belongs here exactly when it lies in
//! one of the two ranges, which is how `free` recognises it.
//!
//! Blocks are powers of two (16 B header included), aligned to their own size, kept on one free
//! list per size under one spin lock: simple, not fast, and only the rare paths use it. Each
//! block's header records its class and, for an over-aligned request, how far the payload moved.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bytes of the static bootstrap region.
const BOOT_BYTES: usize = 1 << 20;
/// Bytes of address space reserved for the arena once the bootstrap region is used up.
const ARENA_BYTES: usize = 64 << 30;
/// Header bytes before every payload (keeps payloads 16-byte aligned).
const HEADER: usize = 16;
/// log2 of the smallest block (header + 16 bytes of payload).
const MIN_SHIFT: u32 = 5;
/// One free list per power of two up to the arena's size.
const CLASSES: usize = 40;
/// Blocks of this size and above give their pages (all but the first) back to the kernel when
/// freed: they are huge requests, which would otherwise keep their memory for good.
const TRIM: usize = 1 << 20;
/// The smallest page size; `TRIM` blocks are aligned to it.
const PAGE: usize = 4096;
/// Marks a live header; a payload whose header lacks it is not ours to free.
const MAGIC: u32 = 0xc81a_110c;

#[repr(C, align(4096))]
struct Boot(UnsafeCell<[u8; BOOT_BYTES]>);

// SAFETY: the bytes are only handed out in disjoint blocks, under `LOCK`.
unsafe impl Sync for Boot {}

static BOOT: Boot = Boot(UnsafeCell::new([0; BOOT_BYTES]));

/// The allocator's state, guarded by [`LOCK`].
struct State {
    /// Next free byte of the current region (bootstrap, then arena).
    bump: usize,
    /// End of the current region.
    end: usize,
    /// Free-list heads per class (a free block's first word links the next).
    free: [usize; CLASSES],
}

struct Guarded(UnsafeCell<State>);

// SAFETY: `State` is only touched while `LOCK` is held (see `with_state`).
unsafe impl Sync for Guarded {}

static STATE: Guarded = Guarded(UnsafeCell::new(State { bump: 0, end: 0, free: [0; CLASSES] }));
static LOCK: AtomicBool = AtomicBool::new(false);
/// Start of the arena, 0 until it is reserved. Written once under `LOCK`; read without it by
/// [`owns`] (Acquire pairs with the Release store that publishes it).
static ARENA: AtomicUsize = AtomicUsize::new(0);

/// Takes the lock. Spins briefly, then yields: the holder may be preempted, and with more
/// threads than cores spinning alone could starve it.
pub(crate) fn lock() {
    let mut spins = 0u32;
    // Acquire: pairs with the Release in `unlock`, so the previous holder's writes are seen.
    while LOCK.swap(true, Ordering::Acquire) {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

/// Releases the lock (also used by the fork handlers, which hold it across `fork`).
pub(crate) fn unlock() {
    // Release: publishes this holder's writes to the next one.
    LOCK.store(false, Ordering::Release);
}

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    lock();
    // SAFETY: the lock is held, so no other thread has a reference to the state.
    let r = f(unsafe { &mut *STATE.0.get() });
    unlock();
    r
}

fn boot_range() -> (usize, usize) {
    let start = BOOT.0.get() as usize;
    (start, start + BOOT_BYTES)
}

/// Whether `p` was handed out by this allocator (lies in the bootstrap region or the arena).
pub(crate) fn owns(p: usize) -> bool {
    let (s, e) = boot_range();
    if (s..e).contains(&p) {
        return true;
    }
    let a = ARENA.load(Ordering::Acquire);
    a != 0 && (a..a + ARENA_BYTES).contains(&p)
}

fn class_of(bytes: usize) -> Option<usize> {
    let shift = bytes.checked_next_power_of_two()?.trailing_zeros().max(MIN_SHIFT);
    let c = (shift - MIN_SHIFT) as usize;
    (c < CLASSES).then_some(c)
}

fn class_bytes(c: usize) -> usize {
    1 << (c as u32 + MIN_SHIFT)
}

/// Carves a block of class `c` (aligned to its size) from the current region, reserving the
/// arena when the bootstrap region cannot hold it.
fn carve(st: &mut State, c: usize) -> Option<usize> {
    let size = class_bytes(c);
    if st.end == 0 {
        (st.bump, st.end) = boot_range();
    }
    let at = st.bump.checked_next_multiple_of(size)?;
    if at.checked_add(size)? <= st.end {
        st.bump = at + size;
        return Some(at);
    }
    if ARENA.load(Ordering::Relaxed) != 0 {
        return None;
    }
    // SAFETY: a fresh private anonymous mapping at a kernel-chosen address touches no memory of
    // ours; MAP_NORESERVE: only pages used count.
    let raw = unsafe {
        libc::mmap(
            ptr::null_mut(),
            ARENA_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    // Release: `owns` on another thread sees the range only once it is mapped.
    ARENA.store(raw as usize, Ordering::Release);
    (st.bump, st.end) = (raw as usize, raw as usize + ARENA_BYTES);
    carve(st, c)
}

/// Allocates `size` bytes aligned to `align` (a power of two); null when out of memory.
pub(crate) fn alloc(size: usize, align: usize) -> *mut u8 {
    let align = align.max(HEADER);
    // An over-aligned payload sits at the first aligned address past the header: the block
    // needs `align - HEADER` bytes of slack for it.
    let Some(c) = size.checked_add(align).and_then(class_of) else { return ptr::null_mut() };
    let block = with_state(|st| match st.free[c] {
        0 => carve(st, c),
        head => {
            // SAFETY: a free block of ours: its first word links the next one.
            st.free[c] = unsafe { *(head as *const usize) };
            Some(head)
        }
    });
    let Some(block) = block else { return ptr::null_mut() };
    let payload = (block + HEADER).next_multiple_of(align);
    // SAFETY: [block, block + class size) is ours, and the header lies in it, before payload,
    // 8-byte aligned (block and payload are 16-aligned).
    unsafe {
        let h = (payload - HEADER) as *mut u32;
        h.write(MAGIC);
        h.add(1).write(c as u32);
        ((payload - 8) as *mut usize).write(payload - block);
    }
    payload as *mut u8
}

/// The block and class of payload `p`, if its header is intact.
///
/// # Safety
/// `p` must satisfy [`owns`].
unsafe fn header(p: usize) -> Option<(usize, usize)> {
    // The header must lie in our ranges too (a stray pointer at a range's very start).
    if p % HEADER != 0 || !owns(p - HEADER) {
        return None;
    }
    // SAFETY: p and p - HEADER lie in our ranges, which are mapped read/write; a stray p is
    // at worst read as garbage, which the checks below reject.
    let (magic, c, back) =
        unsafe { (*((p - HEADER) as *const u32), *((p - HEADER + 4) as *const u32), *((p - 8) as *const usize)) };
    let c = c as usize;
    (magic == MAGIC && c < CLASSES && back >= HEADER && back < class_bytes(c)).then_some((p - back, c))
}

/// Bytes usable at payload `p`, 0 if `p` is not a live payload.
///
/// # Safety
/// `p` must satisfy [`owns`].
pub(crate) unsafe fn usable(p: *mut u8) -> usize {
    // SAFETY: forwarded.
    unsafe { header(p as usize) }.map_or(0, |(block, c)| block + class_bytes(c) - p as usize)
}

/// Frees payload `p`; a pointer whose header is not intact (a double or interior free) is left
/// alone and `false` returned.
///
/// # Safety
/// `p` must satisfy [`owns`].
pub(crate) unsafe fn free(p: *mut u8) -> bool {
    // SAFETY: forwarded.
    let Some((block, c)) = (unsafe { header(p as usize) }) else { return false };
    let size = class_bytes(c);
    if size >= TRIM {
        // A big block (a huge request the heap could not serve, docs/design.md §17.1) gives its
        // pages back, as an unmapped huge block would, but for the first: it holds the free
        // list's link. Done before the block is on the list, where another thread may take it.
        // SAFETY: [block + PAGE, block + size) is part of this live block (aligned to its size,
        // so page-aligned), which nobody else uses now; MADV_DONTNEED refills it with zeroes.
        unsafe { libc::madvise((block + PAGE) as *mut libc::c_void, size - PAGE, libc::MADV_DONTNEED) };
    }
    with_state(|st| {
        // SAFETY: the header is ours (checked under no lock, but a racing double free of one
        // block is undefined for malloc too); clearing the magic makes a second free fail.
        unsafe {
            *((p as usize - HEADER) as *mut u32) = 0;
            *(block as *mut usize) = st.free[c];
        }
        st.free[c] = block;
    });
    true
}

/// The `#[global_allocator]` of the library: Rust allocations never reach the exported
/// `malloc`, so the heap's own bookkeeping cannot recurse into it.
pub(crate) struct Meta;

// SAFETY: `alloc` returns null or a fresh block of at least `size` bytes aligned to `align`;
// `dealloc` takes back only such blocks.
unsafe impl std::alloc::GlobalAlloc for Meta {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        alloc(layout.size(), layout.align())
    }

    unsafe fn dealloc(&self, p: *mut u8, _: std::alloc::Layout) {
        // SAFETY: p came from `alloc` above, so it is ours.
        unsafe { free(p) };
    }
}
