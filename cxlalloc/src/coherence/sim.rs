//! The non-coherence simulator (docs/design.md §9.3), for tests: a process that calls [`enable`] before
//! opening a limited or no-HWcc heap becomes a simulated *host* whose SWcc regions (records,
//! hazard sets, descriptors) are a private write-back cache of the shared files. Nothing it
//! writes there reaches other hosts until a write-back, and nothing other hosts write back
//! reaches it until it invalidates the line: a missing flush or invalidate in the protocol
//! shows up as a stale read or a lost write instead of passing silently on coherent hardware.
//!
//! Each simulated region has three views of the same bytes:
//! - the *cache*: private memory mapped where the region belongs, which the allocator uses;
//! - the *memory*: a shared mapping of the region's file elsewhere, what other hosts see;
//! - the *snapshot*: private memory holding each line as it was last filled or written back,
//!   so that a line is *dirty* exactly when cache and snapshot differ.
//!
//! Write-back and eviction work on whole 64-byte lines, like a CPU cache: a host writing back
//! a line also writes back its stale copy of the bytes it did not change. A simulated host
//! must run one allocator thread (the simulation does not make a line's fill atomic with
//! respect to another thread's stores on the same host).
//!
//! Slab data is simulated like the metadata: the allocator's own words in it (free marks) and
//! the application's bytes alike reach other hosts only through write-backs. The application
//! hands a block to another host the way it would on hardware, writing its lines back before
//! and invalidating them on the receiving host ([`app_write_back`], [`app_invalidate`]); those
//! two are the application's, never a protocol [`Site`], so [`skip`] leaves them alone.
//!
//! A host's cache is filled once, when the region is added: as if the host had cached every
//! line then, which a real cache may have done. Pages that memory has never held (holes of
//! the file) are zero in every view and are not touched, so that a large sparse region
//! (slab data) costs only the pages in use.

use std::ptr::NonNull;

use nix::errno::Errno;

use super::flush::LINE;
use super::Site;
use crate::layout::REGION_ALIGN;
use crate::map;
use crate::sync::{AtomicBool, AtomicU64, Ordering};

/// Bytes the line operations compare at once before going line by line (a page or less,
/// aligned: regions are page-aligned).
const CHUNK: usize = 4096;

static ENABLED: AtomicBool = AtomicBool::new(false);
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Makes this process a simulated host for every limited or no-HWcc heap it opens afterwards.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether [`enable`] was called.
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Removes the coherence operation at `site` from this process's protocol: the test proving
/// that the simulator catches a missing flush.
pub fn skip(site: Site) {
    SKIPPED.fetch_or(1 << site as u32, Ordering::Relaxed);
}

/// Whether the operation at `site` was removed with [`skip`].
pub(crate) fn skipped(site: Site) -> bool {
    SKIPPED.load(Ordering::Relaxed) & (1 << site as u32) != 0
}

/// One simulated region.
#[derive(Debug)]
struct Region {
    cache: usize,
    memory: NonNull<u8>,
    snapshot: NonNull<u8>,
    len: usize,
}

/// A simulated host's caches of one heap's SWcc regions.
#[derive(Debug)]
pub(crate) struct Host {
    regions: Vec<Region>,
}

// SAFETY: the raw pointers name mappings owned by the Host until drop; all accesses through
// them are atomic or volatile (the memory view is shared with other processes).
unsafe impl Send for Host {}
// SAFETY: as above.
unsafe impl Sync for Host {}

fn word(base: usize, off: usize) -> &'static AtomicU64 {
    // SAFETY: callers pass offsets of 8-aligned words inside one of the host's mappings, which
    // live until the Host (and the heap holding it) is dropped; AtomicU64 is valid for any bits.
    unsafe { &*((base + off) as *const AtomicU64) }
}

impl Host {
    /// A host with no simulated region yet.
    pub(crate) fn new() -> Self {
        Host { regions: Vec::new() }
    }

    /// Simulates the region at `cache` (`len` bytes, page-aligned, inside the caller's
    /// reservation, not mapped yet) backed by `fd` at `file_offset`: maps the memory and
    /// snapshot views and fills the cache from memory.
    ///
    /// # Safety
    /// `[cache, cache + len)` must lie inside the caller's heap reservation, page-aligned.
    pub(crate) unsafe fn add(&mut self, cache: *mut u8, len: usize, fd: i32, file_offset: usize) -> Result<(), Errno> {
        let memory = map::reserve(len, REGION_ALIGN)?;
        let snapshot = map::reserve(len, REGION_ALIGN).inspect_err(|_| {
            // SAFETY: the reservation was just made and nothing uses it.
            unsafe { map::release(memory, len) }
        })?;
        let region = Region { cache: cache as usize, memory, snapshot, len };
        // SAFETY: the views are our fresh reservations; the cache range is the caller's
        // (this function's contract); all are page-aligned.
        let mapped = unsafe {
            map::map_shared_fixed(memory.as_ptr(), len, fd, file_offset, true)
                .and_then(|()| map::map_private_fixed(snapshot.as_ptr(), len))
                .and_then(|()| map::map_private_fixed(cache, len))
        };
        // Pushed first, so that the views are released on every path (drop).
        self.regions.push(region);
        mapped?;
        let r = &self.regions[self.regions.len() - 1];
        // A page memory has never held reads as zero, as the cache's untouched pages do.
        for (page, size) in resident_pages(r.memory.as_ptr() as usize, len) {
            for off in (page..page + size).step_by(8) {
                let v = word(r.memory.as_ptr() as usize, off).load(Ordering::Relaxed);
                if v != 0 {
                    word(r.cache, off).store(v, Ordering::Relaxed);
                    word(r.snapshot.as_ptr() as usize, off).store(v, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    fn region_of(&self, addr: usize) -> Option<(&Region, usize)> {
        self.regions.iter().find_map(|r| {
            let off = addr.wrapping_sub(r.cache);
            (off < r.len).then_some((r, off))
        })
    }

    /// Copies one line between two views.
    fn copy(from: usize, to: usize, off: usize) {
        store_line(to, off, load_line(from, off));
    }

    fn dirty(r: &Region, off: usize) -> bool {
        load_line(r.cache, off) != load_line(r.snapshot.as_ptr() as usize, off)
    }

    /// The line-aligned range `[p, p + len)` as chunks of at most a page, each inside one
    /// region and one page: `(region, offset in it, bytes)`.
    fn chunks(&self, p: *const u8, len: usize) -> Vec<(&Region, usize, usize)> {
        let mut out = Vec::new();
        let mut at = p as usize & !(LINE - 1);
        let end = (p as usize + len.max(1)).next_multiple_of(LINE);
        while at < end {
            let next = (at + CHUNK).min(end) & !(CHUNK - 1);
            let next = if next <= at { end.min(at + CHUNK) } else { next };
            if let Some((r, off)) = self.region_of(at) {
                out.push((r, off, (next - at).min(r.len - off)));
            }
            at = next;
        }
        out
    }

    /// Whether `n` bytes at `off` read the same in the views at `a` and `b`. A hint where one
    /// view is memory, which other hosts may be writing: a page found equal is left alone,
    /// which the line-by-line path would have done too (refilled with the same bytes).
    fn same(a: usize, b: usize, off: usize, n: usize) -> bool {
        // SAFETY: both views map the whole region, and `off + n` stays inside it (`chunks`);
        // the bytes are only compared.
        unsafe {
            std::slice::from_raw_parts((a + off) as *const u8, n)
                == std::slice::from_raw_parts((b + off) as *const u8, n)
        }
    }

    /// Writes the dirty lines of `[p, p + len)` back to memory (keeping them cached).
    pub(crate) fn write_back(&self, p: *const u8, len: usize) {
        for (r, start, n) in self.chunks(p, len) {
            // A chunk whose cache and snapshot agree has no dirty line.
            if Self::same(r.cache, r.snapshot.as_ptr() as usize, start, n) {
                continue;
            }
            for off in (start..start + n).step_by(LINE) {
                if Self::dirty(r, off) {
                    Self::copy(r.cache, r.memory.as_ptr() as usize, off);
                    Self::copy(r.cache, r.snapshot.as_ptr() as usize, off);
                }
            }
        }
        crate::sync::fence(Ordering::SeqCst);
    }

    /// Writes the dirty lines of `[p, p + len)` back, then refills them from memory: the next
    /// read sees what other hosts wrote back.
    pub(crate) fn evict(&self, p: *const u8, len: usize) {
        for (r, start, n) in self.chunks(p, len) {
            // Clean and equal to memory: refilling would change nothing.
            if Self::same(r.cache, r.snapshot.as_ptr() as usize, start, n)
                && Self::same(r.cache, r.memory.as_ptr() as usize, start, n)
            {
                continue;
            }
            for off in (start..start + n).step_by(LINE) {
                if Self::dirty(r, off) {
                    Self::copy(r.cache, r.memory.as_ptr() as usize, off);
                }
                let line = Self::read_line(r.memory.as_ptr() as usize, off);
                store_line(r.cache, off, line);
                store_line(r.snapshot.as_ptr() as usize, off, line);
            }
        }
        crate::sync::fence(Ordering::SeqCst);
    }

    /// Reads one line of memory as a CPU fills it: whole. Another host may be writing the
    /// line back word by word meanwhile (a line transfer is atomic on hardware, not here), so
    /// the line is read until two reads agree. One copy goes to both the cache and the
    /// snapshot: two separate reads could differ, and the line would look dirty with bytes
    /// this host never wrote, which a later write-back would put over another host's.
    fn read_line(memory: usize, off: usize) -> [u64; LINE / 8] {
        let mut line = load_line(memory, off);
        for _ in 0..1000 {
            crate::sync::fence(Ordering::SeqCst);
            let again = load_line(memory, off);
            if again == line {
                break;
            }
            line = again;
        }
        line
    }
}

impl Host {
    /// Writes every dirty line of every simulated region back to memory: what the platform's
    /// Global Persistent Flush does for a host going down (see [`crate::coherence`], "Crashes").
    pub(crate) fn write_back_all(&self) {
        for r in &self.regions {
            // A cache page never written is zero in the cache and in the snapshot: clean.
            for (page, size) in resident_pages(r.cache, r.len) {
                self.write_back((r.cache + page) as *const u8, size);
            }
        }
    }
}

/// One line of a view, read with one volatile access: the memory view is written by other
/// processes (hosts), which the compiler cannot see.
fn load_line(base: usize, off: usize) -> [u64; LINE / 8] {
    // SAFETY: callers pass line-aligned offsets inside one of the host's mappings, which live
    // until the Host is dropped; any bits are a valid array of integers.
    unsafe { std::ptr::read_volatile((base + off) as *const [u64; LINE / 8]) }
}

/// Writes one line of a view with one volatile access.
fn store_line(base: usize, off: usize, line: [u64; LINE / 8]) {
    // SAFETY: as for `load_line`; the views are writable.
    unsafe { std::ptr::write_volatile((base + off) as *mut [u64; LINE / 8], line) }
}

/// The pages of `[addr, addr + len)` (page-aligned) that are resident, as `(offset, bytes)`
/// from `addr`; every page when the kernel cannot say (`mincore` fails).
fn resident_pages(addr: usize, len: usize) -> Vec<(usize, usize)> {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(LINE);
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `[addr, addr + len)` is one of this host's mappings (callers' contract), and the
    // vector holds one byte per page of it.
    let ok = unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) } == 0;
    (0..vec.len()).filter(|&i| !ok || vec[i] & 1 != 0).map(|i| (i * page, page.min(len - i * page))).collect()
}

impl Default for Host {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for r in &self.regions {
            // SAFETY: the memory and snapshot views are reservations this Host made and only
            // it used; the cache range belongs to the heap reservation, released by its owner.
            unsafe {
                map::release(r.memory, r.len);
                map::release(r.snapshot, r.len);
            }
        }
    }
}
