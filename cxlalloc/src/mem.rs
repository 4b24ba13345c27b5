//! A heap mapped into this process: the reservation, its regions, and checked accessors that
//! turn slab indices and offsets into references. All raw-pointer arithmetic on heap memory
//! lives here.

use std::ptr::NonNull;

use nix::errno::Errno;

use crate::backing::Backing;
use crate::class::Bracket;
use crate::coherence::hwcc::{Hw, Targets};
use crate::coherence::{window_geometry, HubError, McasHub, Site, Swcc};
use crate::error::OpenError;
use crate::host::HostTable;
use crate::huge::view::HugeView;
use crate::layout::{Coherence, Header, Layout, RegionId, Span, HEADER_BYTES};
use crate::map;
use crate::persist::descriptor::{Descriptor, DescriptorHead};
use crate::persist::huge::HugeState;
use crate::persist::record::ThreadRecord;
use crate::persist::shared::{BracketGlobals, HostEntry, SharedHeader, SlotLease, MAX_HOSTS};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::word::Tagged;

/// A slab index checked against the heap's length: its descriptor, counter and data exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slab(u32);

impl Slab {
    /// The raw index.
    #[inline]
    pub(crate) fn index(self) -> u32 {
        self.0
    }

    /// The index + 1 encoding used by list links (0 = none).
    #[inline]
    pub(crate) fn link(self) -> u32 {
        self.0 + 1
    }
}

/// Everything needed to map a chunk of slab data from a signal handler: plain data and raw
/// pointers into the owning [`HeapMem`], so the handler touches nothing that allocates.
///
/// Only slab data is mapped lazily, one chunk (2 MiB) at a time; the per-slab metadata arrays
/// are mapped whole at open (their files are sized to capacity and stay sparse), so a chunk's
/// mapping never overlaps another's and a mapped chunk is never mapped again: each chunk has a
/// bit in this process's bitmap, set once mapped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LazyMap {
    base: usize,
    total: usize,
    fd: i32,
    /// Per bracket: the data span and its offset inside the data region file.
    data: [Span; 2],
    file_offset: [usize; 2],
    chunk_bytes: [usize; 2],
    chunk_slabs: [u32; 2],
    slab_shift: [u32; 2],
    /// Per bracket: the mapped-chunk bitmap (pointer to its first word, and its word count).
    mapped_bits: [(*const AtomicU64, usize); 2],
    /// Address of each bracket's length word.
    length_word: [usize; 2],
    /// The huge heap, if the heap has one.
    huge: Option<HugeView>,
}

impl LazyMap {
    fn mapped_word(&self, b: usize, chunk: usize) -> Option<&AtomicU64> {
        let (words, len) = self.mapped_bits[b];
        // SAFETY: the bitmap is owned by the HeapMem that owns this LazyMap and lives as long
        // as it; the index is checked against its length.
        (chunk / 64 < len).then(|| unsafe { &*words.add(chunk / 64) })
    }

    /// Maps the data chunk of bracket `b` that holds `slab`, unless this process already has.
    /// Async-signal-safe.
    pub(crate) fn map_chunk(&self, b: usize, slab: u32) -> Result<(), Errno> {
        let chunk = (slab / self.chunk_slabs[b]) as usize;
        let word = self.mapped_word(b, chunk).ok_or(Errno::EINVAL)?;
        let bit = 1u64 << (chunk % 64);
        // Relaxed: the bit only avoids redundant mmaps; two threads racing both map, harmlessly.
        if word.load(Ordering::Relaxed) & bit != 0 {
            return Ok(());
        }
        let start = self.data[b].offset + chunk * self.chunk_bytes[b];
        let len = self.chunk_bytes[b].min(self.data[b].end() - start);
        let file_off = self.file_offset[b] + chunk * self.chunk_bytes[b];
        // SAFETY: [start, start + len) lies inside the bracket's data span, inside our
        // reservation; start, len and file_off are multiples of the 2 MiB chunk or the span end,
        // all page-aligned.
        unsafe { map::map_shared_fixed((self.base + start) as *mut u8, len, self.fd, file_off, true)? };
        word.fetch_or(bit, Ordering::Relaxed);
        Ok(())
    }

    /// If `addr` is in this heap's slab data at a slab below the current length, maps its
    /// chunk and returns true; if it is in a live huge block, maps that (see
    /// [`HugeView::handle_fault`]). Async-signal-safe: reads atomic words, no allocation.
    pub(crate) fn handle_fault(&self, addr: usize) -> bool {
        let off = addr.wrapping_sub(self.base);
        if off >= self.total {
            return false;
        }
        if let Some(h) = self.huge.as_ref().filter(|h| h.span.contains(off)) {
            // Descriptors are read only after their small chunk is mapped here, so serving this
            // fault never depends on a nested one.
            let small = Bracket::Small as usize;
            let map_descriptor = |desc: u64| {
                let slab = ((desc as usize - self.data[small].offset) >> self.slab_shift[small]) as u32;
                self.map_chunk(small, slab).is_ok()
            };
            return h.handle_fault(addr, &map_descriptor);
        }
        for b in 0..2 {
            let rel = off.wrapping_sub(self.data[b].offset);
            if rel < self.data[b].size {
                let slab = (rel >> self.slab_shift[b]) as u32;
                // SAFETY: the length word is in the shared region, mapped for the life of the
                // registration, and suitably aligned (asserted layout).
                let word = unsafe { &*(self.length_word[b] as *const AtomicU64) };
                // Acquire: pairs with the Release CAS that extended the heap.
                let len = Tagged::unpack(word.load(Ordering::Acquire)).payload;
                return slab < len && self.map_chunk(b, slab).is_ok();
            }
        }
        false
    }
}

/// One bracket's slab geometry as the full model's quick free reads it (docs/design.md §4.5),
/// copied into each thread's view by [`HeapMem::quick_geometry`]: fields private, so that a
/// descriptor address is only ever formed from a mapping's own array.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QuickGeometry {
    /// Address of the bracket's first slab data byte.
    start: usize,
    /// Bytes of the bracket's slab data, up to its capacity's last slab (the data region is
    /// rounded up to whole 2 MiB units; the descriptor array covers the capacity): a pointer
    /// `rel` bytes in, with `rel < size`, lies in a slab whose descriptor is mapped, whatever
    /// the heap's length (docs/design.md §4.5, "No length test").
    size: usize,
    /// Address of the bracket's local descriptor array.
    local: usize,
}

impl QuickGeometry {
    /// Offset of `ptr` into the bracket's slab data, if it lies there.
    #[inline(always)]
    pub(crate) fn rel(&self, ptr: *const u8) -> Option<usize> {
        // Wrapping: a pointer below the data becomes a huge offset that the size refuses.
        let rel = (ptr as usize).wrapping_sub(self.start);
        (rel < self.size).then_some(rel)
    }

    /// This geometry with no slab data: [`QuickGeometry::rel`] refuses every pointer, the
    /// descriptor array stays. The reduced models' copy for the full model's quick free, which
    /// then sends each of their frees to the general entry without a test of the model
    /// (docs/design.md §4.5).
    pub(crate) fn refusing(self) -> Self {
        Self { size: 0, ..self }
    }
}

/// Absolute addresses of one bracket's arrays in this process, precomputed for the fast paths.
#[derive(Clone, Copy, Debug, Default)]
struct Arrays {
    remote: usize,
    local: usize,
    /// Offset range of the bracket's slab data.
    data: Span,
}

/// A heap mapped in this process.
#[derive(Debug)]
pub(crate) struct HeapMem {
    base: NonNull<u8>,
    arrays: [Arrays; 2],
    /// Region and array offsets.
    pub layout: Layout,
    /// The validated header.
    pub header: Header,
    backing: Box<dyn Backing>,
    lazy: Option<LazyMap>,
    /// Per bracket: largest length this process has seen (private cache of the HWcc word).
    known_len: [AtomicU32; 2],
    /// Per bracket: bitmap of data chunks this process has mapped (set by `ensure_mapped` and
    /// by the fault handler, through `lazy`).
    mapped_chunks: [Box<[AtomicU64]>; 2],
    /// Per bracket: chunks below this index are all mapped (a hint for `ensure_mapped`).
    mapped_prefix: [AtomicU32; 2],
    /// The huge heap in this process, if the heap has one.
    huge: Option<HugeView>,
    /// Which hazard sets this instance leased (read through `huge`).
    _hazard_sets: Box<[AtomicU64]>,
    /// The heap's coherence model.
    pub coherence: Coherence,
    /// How this process keeps SWcc memory coherent under that model.
    pub swcc: Swcc,
    /// No-HWcc model: this process's connection to the heap's mCAS window.
    mcas: Option<McasHub>,
    /// The heap offsets of the last [`RECENT_HUGE_FREES`] huge blocks freed through this
    /// instance (0 = empty), so that a second free of one that its owner already reclaimed (its
    /// descriptor is gone) is still known as a double free.
    recent_huge_frees: [AtomicU64; RECENT_HUGE_FREES],
    /// Next entry of `recent_huge_frees` to overwrite (wraps).
    recent_huge_next: AtomicU32,
    /// This process's entry in the heap's host table (docs/design.md §8.6), once registered:
    /// at open, or for a no-HWcc heap whose mCAS window nobody serves yet, at the first attach
    /// (registering is a CAS the device executes; `cxlalloc-mcasd` itself opens the heap).
    host: std::sync::OnceLock<u16>,
    /// Wall-clock second of this process's last heartbeat for `host` (so a beat writes the
    /// HWcc word at most once a second).
    last_beat: AtomicU64,
}

/// Huge frees this process remembers per heap, to tell a double free from a never-allocated
/// address after the block was reclaimed.
pub(crate) const RECENT_HUGE_FREES: usize = 64;

// SAFETY: HeapMem hands out only shared references to atomics inside the mapping, which stays
// mapped until drop; the backing is Send + Sync.
unsafe impl Send for HeapMem {}
// SAFETY: as above.
unsafe impl Sync for HeapMem {}

impl HeapMem {
    /// Maps a heap described by `header` from `backing` and registers the calling process's
    /// host in its host table when it can. For a fresh anonymous heap, writes the header into the mapping.
    /// `host` is the host number the configuration gives (`Config::host`), used (with
    /// `CXLALLOC_HOST`) to lease a no-HWcc heap's mCAS requesters (docs/design.md §9.2).
    pub(crate) fn map(header: Header, backing: Box<dyn Backing>, host: Option<u32>) -> Result<Self, OpenError> {
        Self::map_as(header, backing, host, false)
    }

    /// [`HeapMem::map`] for a heap this process has just created: its host claims the first
    /// free entry of the host table ([`HostTable::claim`]) instead of first looking for a live
    /// entry of its domain in every entry. In a fresh table the lookup finds nothing and reads
    /// all 64 entries, whose pages other processes' first read of the region then map with
    /// it (the kernel's fault-around): one HWcc page more in every process of a one-host heap
    /// (docs/design.md §9.1, "HWcc bytes").
    pub(crate) fn map_created(header: Header, backing: Box<dyn Backing>, host: Option<u32>) -> Result<Self, OpenError> {
        Self::map_as(header, backing, host, true)
    }

    fn map_as(header: Header, backing: Box<dyn Backing>, host: Option<u32>, created: bool) -> Result<Self, OpenError> {
        let mut mem = Self::map_regions(header, backing, host)?;
        if mem.mcas.as_ref().is_some_and(|hub| hub.served().is_err()) {
            // No huge heap without full coherence: nothing below needs the host yet.
            return Ok(mem);
        }
        // A full (or damaged) host table does not keep the heap from opening: inspecting and
        // checking it need no host. Attaching a thread registers again and reports the error;
        // until then this process leases no hazard set (its holder stays 0).
        let registered = if created { mem.claim_host() } else { mem.register_host() };
        let Ok(host) = registered else { return Ok(mem) };
        let holder = crate::identity::current(host);
        if let Some(view) = mem.huge.as_mut() {
            view.holder = holder.pack();
            view.pid = holder.pid;
        }
        if let Some(lazy) = mem.lazy.as_mut() {
            lazy.huge = mem.huge;
        }
        mem.last_beat.store(crate::host::now_secs(), Ordering::Relaxed);
        Ok(mem)
    }

    fn map_regions(header: Header, backing: Box<dyn Backing>, host: Option<u32>) -> Result<Self, OpenError> {
        // The holder is known once the host table is mapped (see `map`).
        let holder = 0;
        let layout = Layout::from_header(&header);
        let base = map::reserve(layout.total, layout.base_align()).map_err(OpenError::Map)?;
        let arrays = Bracket::ALL.map(|b| {
            let bl = layout.bracket(b);
            Arrays {
                remote: base.as_ptr() as usize + bl.remote.offset,
                local: base.as_ptr() as usize + bl.local.offset,
                data: bl.data,
            }
        });
        let mapped_chunks = Bracket::ALL.map(|b| {
            let chunks = layout.bracket(b).capacity.div_ceil(b.spec().chunk_slabs) as usize;
            (0..chunks.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
        });
        // One bit per hazard set this instance leased, then the eviction hand and the unmap
        // count (HugeView::new).
        let hazard_sets: Box<[AtomicU64]> =
            (0..layout.hazard_sets.div_ceil(64) + 2).map(|_| AtomicU64::new(0)).collect();
        let huge = (layout.huge.size > 0).then(|| {
            let dir_fd = backing.huge_dir().unwrap_or(-1);
            let page = (header.page_size as usize).max(backing.map_align());
            let device = backing.huge_device();
            HugeView::new(&layout, base.as_ptr() as usize, page, hazard_sets.as_ptr(), holder, dir_fd, device)
        });
        let mut mem = HeapMem {
            base,
            arrays,
            layout,
            header,
            backing,
            lazy: None,
            known_len: [AtomicU32::new(0), AtomicU32::new(0)],
            mapped_chunks,
            mapped_prefix: [AtomicU32::new(0), AtomicU32::new(0)],
            huge,
            _hazard_sets: hazard_sets,
            coherence: header.config().coherence,
            swcc: Swcc::for_model(header.config().coherence),
            mcas: None,
            recent_huge_frees: [const { AtomicU64::new(0) }; RECENT_HUGE_FREES],
            recent_huge_next: AtomicU32::new(0),
            host: std::sync::OnceLock::new(),
            last_beat: AtomicU64::new(0),
        };
        // If anything below fails, dropping `mem` releases the reservation.
        if mem.backing.fd(RegionId::Header).is_none() {
            if mem.coherence == Coherence::NoHwcc {
                return Err(OpenError::Mcas("a no-HWcc heap needs a heap directory (its mCAS window)".into()));
            }
            // The huge span stays reserved: each huge block maps its own memory.
            let total = if mem.huge.is_some() { mem.layout.huge.offset } else { mem.layout.total };
            // SAFETY: the whole range is our fresh reservation.
            unsafe { map::map_private_fixed(base.as_ptr(), total) }.map_err(OpenError::Map)?;
            // SAFETY: the header region is mapped writable and at least HEADER_BYTES long.
            unsafe {
                std::ptr::copy_nonoverlapping(header.as_bytes().as_ptr(), base.as_ptr(), header.as_bytes().len())
            };
            return Ok(mem);
        }
        // Everything but slab data, which maps lazily.
        for r in RegionId::ALL.into_iter().filter(|&r| r != RegionId::Data) {
            #[cfg(feature = "noncoherent-sim")]
            if mem.simulated(r) {
                mem.simulate(r)?;
                continue;
            }
            mem.map_whole(r)?;
        }
        #[cfg(feature = "noncoherent-sim")]
        if mem.simulated(RegionId::Data) {
            // Slab data is a simulated host's cache too, mapped whole: every chunk counts as
            // mapped, so that neither a fault nor `ensure_mapped` maps the file over it.
            mem.simulate(RegionId::Data)?;
            for bits in &mem.mapped_chunks {
                bits.iter().for_each(|w| w.store(u64::MAX, Ordering::Relaxed));
            }
        }
        mem.lazy = Some(mem.lazy_map());
        mem.mcas = mem.connect_mcas(host)?;
        for b in Bracket::ALL {
            let len = mem.refresh_length(b);
            mem.ensure_mapped(b, len).map_err(OpenError::Map)?;
        }
        Ok(mem)
    }

    fn map_whole(&self, r: RegionId) -> Result<(), OpenError> {
        let span = self.layout.region(r);
        let fd = self.backing.fd(r).ok_or(OpenError::Map(Errno::EBADF))?;
        let len = if r == RegionId::Header { HEADER_BYTES } else { span.size };
        // A DAX device maps whole units: the rounding stays inside the region's 2 MiB-aligned
        // slot of the reservation (and of the device).
        let len = len.next_multiple_of(self.backing.map_align().max(1));
        let at = self.backing.region_offset(r) as usize;
        // SAFETY: the span lies inside our reservation and is page-aligned (layout invariant);
        // the file offset is page-aligned (a region's place in its file); rounded up to the
        // mapping unit, the length stays below the next region's 2 MiB-aligned offset.
        unsafe { map::map_shared_fixed(self.addr(span.offset), len, fd, at, r != RegionId::Header) }
            .map_err(OpenError::Map)
    }

    /// Whether region `r` is one of the SWcc regions a simulated host caches (slab data
    /// included: docs/design.md §9.3).
    #[cfg(feature = "noncoherent-sim")]
    fn simulated(&self, r: RegionId) -> bool {
        crate::coherence::sim::enabled()
            && self.coherence != Coherence::Full
            && matches!(r, RegionId::Owned | RegionId::Hazard | RegionId::Local | RegionId::Data)
    }

    /// Maps region `r` as this simulated host's private cache of its file.
    #[cfg(feature = "noncoherent-sim")]
    fn simulate(&mut self, r: RegionId) -> Result<(), OpenError> {
        let span = self.layout.region(r);
        let fd = self.backing.fd(r).ok_or(OpenError::Map(Errno::EBADF))?;
        let at = self.backing.region_offset(r) as usize;
        let addr = self.addr(span.offset);
        if !matches!(self.swcc, Swcc::Sim(_)) {
            self.swcc = Swcc::Sim(crate::coherence::sim::Host::new());
        }
        let Swcc::Sim(host) = &mut self.swcc else { return Err(OpenError::Map(Errno::EINVAL)) };
        // SAFETY: the span lies inside our reservation and is page-aligned (layout invariant).
        unsafe { host.add(addr, span.size, fd, at) }.map_err(OpenError::Map)
    }

    /// No-HWcc model: connects to the mCAS window or device that holds the HWcc regions just
    /// mapped.
    fn connect_mcas(&self, host: Option<u32>) -> Result<Option<McasHub>, OpenError> {
        let Some(home) = self.backing.mcas_home() else {
            return match self.coherence {
                Coherence::NoHwcc => Err(OpenError::Mcas("a no-HWcc heap needs a heap directory".into())),
                _ => Ok(None),
            };
        };
        let hwcc = [RegionId::Shared, RegionId::Claims, RegionId::Remote].map(|r| self.layout.region(r));
        let targets = Targets::new(hwcc.map(|s| (self.addr(s.offset) as usize, s.size)));
        let geometry = window_geometry(self.layout.slots, hwcc.iter().map(|s| s.size as u64).sum());
        McasHub::open(&home, geometry, targets, host).map(Some).map_err(|e| match e {
            HubError::HostNumber(why) => OpenError::HostNumber(why),
            HubError::HostTaken { number, holder, kernel } => OpenError::HostNumberTaken {
                number,
                claimant: holder.kernel,
                claimant_name: holder.name,
                since: holder.since,
                kernel,
            },
            e => OpenError::Mcas(e.to_string()),
        })
    }

    /// No-HWcc model: the mCAS window connection (`None` in the other models).
    pub(crate) fn mcas(&self) -> Option<&McasHub> {
        self.mcas.as_ref()
    }

    /// `word` reached through this process's own requester (lease operations, which run before
    /// a thread holds a slot).
    pub(crate) fn hw_process<'a>(&'a self, word: &'a AtomicU64) -> Hw<'a> {
        Hw::new(word, self.mcas.as_ref().map(McasHub::process_port))
    }

    fn lazy_map(&self) -> LazyMap {
        let data_region = self.layout.region(RegionId::Data);
        let spans = Bracket::ALL.map(|b| self.layout.bracket(b).data);
        LazyMap {
            base: self.base.as_ptr() as usize,
            total: self.layout.total,
            fd: self.backing.fd(RegionId::Data).unwrap_or(-1),
            data: spans,
            // The data region's place in its file (a heap device holds every region).
            file_offset: spans
                .map(|s| s.offset - data_region.offset + self.backing.region_offset(RegionId::Data) as usize),
            chunk_bytes: Bracket::ALL.map(|b| (b.spec().chunk_slabs as usize) << b.slab_shift()),
            chunk_slabs: Bracket::ALL.map(|b| b.spec().chunk_slabs),
            slab_shift: Bracket::ALL.map(|b| b.slab_shift()),
            mapped_bits: [0, 1].map(|b| (self.mapped_chunks[b].as_ptr(), self.mapped_chunks[b].len())),
            length_word: Bracket::ALL.map(|b| &self.globals(b).length as *const AtomicU64 as usize),
            huge: self.huge,
        }
    }

    /// The huge heap in this process, if the heap has one.
    pub(crate) fn huge(&self) -> Option<&HugeView> {
        self.huge.as_ref()
    }

    /// The heap's backing store.
    pub(crate) fn backing(&self) -> &dyn Backing {
        self.backing.as_ref()
    }

    /// The signal-handler view of this heap, if it maps anything lazily.
    pub(crate) fn lazy(&self) -> Option<&LazyMap> {
        self.lazy.as_ref()
    }

    /// Where the heap lives.
    pub(crate) fn location(&self) -> String {
        self.backing.location()
    }

    /// Maps (in this process) every data chunk of `b` below `len` slabs not mapped yet. Saves
    /// the faults that would otherwise map them on first touch.
    pub(crate) fn ensure_mapped(&self, b: Bracket, len: u32) -> Result<(), Errno> {
        let Some(lazy) = &self.lazy else { return Ok(()) };
        let chunk = b.spec().chunk_slabs;
        let prefix = &self.mapped_prefix[b as usize];
        let first = prefix.load(Ordering::Relaxed);
        let end = len.div_ceil(chunk);
        for c in first..end {
            lazy.map_chunk(b as usize, c * chunk)?;
        }
        // Relaxed: only a hint; map_chunk itself skips chunks already mapped.
        prefix.fetch_max(end, Ordering::Relaxed);
        Ok(())
    }

    /// Faults in the data of slabs `from..to` of `b` in this process with one system call (a
    /// file-backed heap's pages otherwise fault one at a time on first touch, which dominated
    /// insert-heavy runs). Only an optimization: on error the pages fault in lazily.
    pub(crate) fn populate(&self, b: Bracket, from: u32, to: u32) -> Result<(), Errno> {
        if self.lazy.is_none() || from >= to {
            return Ok(());
        }
        let start = self.arrays[b as usize].data.offset + ((from as usize) << b.slab_shift());
        let len = ((to - from) as usize) << b.slab_shift();
        // SAFETY: slabs `from..to` lie below the heap length and their chunks were mapped by
        // `ensure_mapped` (a chunk not mapped yet makes madvise fail, harmlessly).
        unsafe { map::populate_write(self.addr(start), len) }
    }

    /// Reserves backing store for slabs `from..to` of `b` in all three arrays.
    pub(crate) fn commit(&self, b: Bracket, from: u32, to: u32) -> Result<(), Errno> {
        let bl = self.layout.bracket(b);
        let spec = b.spec();
        for (r, span, stride) in [
            (RegionId::Remote, bl.remote, self.layout.hwcc_stride),
            (RegionId::Local, bl.local, spec.descriptor_size()),
            (RegionId::Data, bl.data, spec.slab_size()),
        ] {
            let start = span.offset - self.layout.region(r).offset + from as usize * stride;
            self.backing.commit(r, start, (to - from) as usize * stride)?;
        }
        Ok(())
    }

    /// Gives the data pages of empty `slab` back to the system (docs/design.md §4.7).
    pub(crate) fn release_slab(&self, b: Bracket, slab: Slab) -> Result<(), Errno> {
        let (off, size) = self.slab_data(b, slab);
        self.backing.release(RegionId::Data, off, size)
    }

    /// Reserves the data pages of `slab` again after [`HeapMem::release_slab`] (its descriptor
    /// and counter were never given back).
    pub(crate) fn recommit_slab(&self, b: Bracket, slab: Slab) -> Result<(), Errno> {
        let (off, size) = self.slab_data(b, slab);
        self.backing.commit(RegionId::Data, off, size)
    }

    /// Offset in the data region's file and size of `slab`'s data.
    fn slab_data(&self, b: Bracket, slab: Slab) -> (usize, usize) {
        let size = b.spec().slab_size();
        let start = self.layout.bracket(b).data.offset - self.layout.region(RegionId::Data).offset;
        (start + slab.index() as usize * size, size)
    }

    /// Reserves backing store for `len` bytes at offset `off` of a whole-mapped region
    /// (header, shared, owned).
    pub(crate) fn commit_region(&self, r: RegionId, off: usize, len: usize) -> Result<(), Errno> {
        self.backing.commit(r, off, len)
    }

    #[inline]
    fn addr(&self, off: usize) -> *mut u8 {
        // SAFETY: callers pass offsets inside the reservation (< layout.total), so the result
        // stays inside one allocation.
        unsafe { self.base.as_ptr().add(off) }
    }

    /// The reservation base.
    #[inline]
    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The shared region's fixed part.
    #[inline]
    pub(crate) fn shared(&self) -> &SharedHeader {
        // SAFETY: the shared region is mapped for the life of self, 64-byte aligned (region
        // alignment), and SharedHeader is all atomics, valid for any bit pattern.
        unsafe { &*(self.addr(self.layout.shared_header) as *const SharedHeader) }
    }

    /// Global words of bracket `b`.
    #[inline]
    pub(crate) fn globals(&self, b: Bracket) -> &BracketGlobals {
        &self.shared().brackets[b as usize]
    }

    /// The lease of thread slot `slot`; callers pass only indices below the slot count.
    pub(crate) fn lease(&self, slot: u32) -> &SlotLease {
        debug_assert!(slot < self.layout.slots, "slot index out of range");
        // SAFETY: the slot table lies in the mapped shared region, 8-byte aligned, with
        // `slots` entries; SlotLease is all atomics.
        unsafe { &*(self.addr(self.layout.slot_record(slot)) as *const SlotLease) }
    }

    /// The heap's host table (docs/design.md §8.6).
    pub(crate) fn hosts(&self) -> HostTable<'_> {
        // SAFETY: the host table lies in the mapped shared region, 64-byte aligned (layout),
        // with MAX_HOSTS entries; HostEntry is all atomics, valid for any bit pattern.
        let entries = unsafe {
            std::slice::from_raw_parts(self.addr(self.layout.host_table) as *const HostEntry, MAX_HOSTS as usize)
        };
        HostTable::new(entries, self.mcas.as_ref().map(McasHub::process_port))
    }

    /// This process's host, its entry in the host table, if registered yet.
    pub(crate) fn host(&self) -> Option<u16> {
        self.host.get().copied()
    }

    /// Registers this process's domain in the host table, once: its entry's index, or
    /// `Err(entries)` when the table is full. In the no-HWcc model the caller has checked that
    /// the mCAS device serves the window.
    pub(crate) fn register_host(&self) -> Result<u16, u32> {
        if let Some(&id) = self.host.get() {
            return Ok(id);
        }
        let id = self.hosts().register(crate::identity::domain(), &crate::identity::host_name()).ok_or(MAX_HOSTS)?;
        // A racing thread of this process may have registered first: both found or claimed an
        // entry of this domain, and either serves (liveness compares domains).
        Ok(*self.host.get_or_init(|| id))
    }

    /// [`HeapMem::register_host`] for the creator of a heap: claims the first free entry (or
    /// joins a live entry of its domain met on the way, as a racing opener of the same host
    /// may have claimed one), without scanning the table for a live entry first. Sound in any
    /// table (a second entry for a domain is harmless, docs/design.md §8.6); used where the
    /// table is fresh, so that it touches entry 0 only.
    fn claim_host(&self) -> Result<u16, u32> {
        if let Some(&id) = self.host.get() {
            return Ok(id);
        }
        let id = self.hosts().claim(crate::identity::domain(), &crate::identity::host_name()).ok_or(MAX_HOSTS)?;
        Ok(*self.host.get_or_init(|| id))
    }

    /// This process's holder identity on host `host` (its registered entry).
    pub(crate) fn holder_on(&self, host: u16) -> crate::word::Holder {
        crate::identity::current(host)
    }

    /// Whether `holder` is alive, as this process can judge it (docs/design.md §8.6): from
    /// `/proc` for its own domain, by the host table's verdict for every other.
    pub(crate) fn holder_alive(&self, holder: crate::word::Holder) -> bool {
        self.hosts().holder_alive(holder, crate::identity::domain())
    }

    /// Records a sign of life of this process's host, at most once a second (cold paths only:
    /// it reads the clock).
    pub(crate) fn beat(&self) {
        let now = crate::host::now_secs();
        // Relaxed: a process-local rate limit; two threads racing both write the same second.
        if let Some(host) = self.host() {
            if self.last_beat.swap(now, Ordering::Relaxed) != now {
                self.hosts().beat(host, now);
            }
        }
    }

    /// The detectable-CAS help word of slot `slot`; `None` for an index a corrupt word could
    /// name beyond the slot count.
    pub(crate) fn help(&self, slot: u32) -> Option<&AtomicU64> {
        (slot < self.layout.slots).then(|| {
            // SAFETY: every slot record lies in the mapped shared region, 8-byte aligned, its
            // help word `help_table - slot_table` bytes in, and the slot was checked;
            // AtomicU64 is valid for any bits. Records run downwards from slot 0's (layout).
            unsafe {
                &*(self.addr(self.layout.help_table - slot as usize * self.layout.lease_stride) as *const AtomicU64)
            }
        })
    }

    /// The remote-free mailbox head of slot `slot` in bracket `b` (docs/design.md §4.6); `None`
    /// for an index beyond the slot count (a corrupt descriptor's owner field could name one).
    #[inline]
    pub(crate) fn mailbox(&self, b: Bracket, slot: u32) -> Option<&AtomicU64> {
        (slot < self.layout.slots).then(|| {
            // Records run downwards from slot 0's (layout version 10).
            let at = self.layout.mailboxes[b as usize] - slot as usize * self.layout.lease_stride;
            // SAFETY: every slot record lies in the mapped shared region, 8-byte aligned, its
            // mailbox head of bracket `b` `mailboxes[b] - slot_table` bytes in, and the slot was
            // checked; AtomicU64 is valid for any bits.
            unsafe { &*(self.addr(at) as *const AtomicU64) }
        })
    }

    /// Whether the heap runs with crash recovery (logging and detectable-CAS help).
    pub(crate) fn recoverable(&self) -> bool {
        self.header.config().recovery
    }

    /// Slots that have ever been leased, in index order. The others' records are still all zero
    /// (an empty slot), and readers skip them: touching a never-used record could allocate
    /// backing store on a full device, which for a mapping means SIGBUS.
    pub(crate) fn used_slots(&self) -> impl Iterator<Item = u32> + '_ {
        // Relaxed: `tid` is written once at a slot's first attach, after its record is committed.
        (0..self.layout.slots).filter(|&s| self.lease(s).tid.load(Ordering::Relaxed) != 0)
    }

    /// The record of thread slot `slot`; callers pass only indices below the slot count.
    pub(crate) fn record(&self, slot: u32) -> &ThreadRecord {
        debug_assert!(slot < self.layout.slots, "slot index out of range");
        // SAFETY: the owned region is mapped for the life of self, holds `slots` records, and is
        // 64-byte aligned; ThreadRecord is all atomics and padding.
        unsafe { &*(self.addr(self.layout.region(RegionId::Owned).offset) as *const ThreadRecord).add(slot as usize) }
    }

    /// Reads the HWcc length of `b` and raises this process's cached length to it.
    pub(crate) fn refresh_length(&self, b: Bracket) -> u32 {
        // Acquire: pairs with the Release CAS in the bump, so the new slabs' metadata written
        // before that CAS is visible.
        let len = Tagged::unpack(self.globals(b).length.load(Ordering::Acquire)).payload;
        let len = len.min(self.layout.bracket(b).capacity);
        self.known_len[b as usize].fetch_max(len, Ordering::Relaxed);
        len
    }

    /// Slab `index` of bracket `b` if it lies below the length this process knows of (one
    /// load, no refresh: the quick free's range check, docs/design.md §4.5; `None` sends it to
    /// [`HeapMem::slab`]).
    #[inline(always)]
    pub(crate) fn known_slab(&self, b: Bracket, index: u32) -> Option<Slab> {
        (index < self.known_len[b as usize].load(Ordering::Relaxed)).then_some(Slab(index))
    }

    /// Slab `index` of bracket `b`, if it lies below the heap's length (refreshed from the
    /// shared length when it lies past the one this process knows).
    #[inline]
    pub(crate) fn slab(&self, b: Bracket, index: u32) -> Option<Slab> {
        if index < self.known_len[b as usize].load(Ordering::Relaxed) || index < self.refresh_length(b) {
            Some(Slab(index))
        } else {
            None
        }
    }

    /// Decodes a list link (index + 1, 0 = none) into a checked slab.
    #[inline]
    pub(crate) fn link(&self, b: Bracket, link: u32) -> Result<Option<Slab>, &'static str> {
        match link {
            0 => Ok(None),
            l => self.slab(b, l - 1).map(Some).ok_or("list link beyond heap length"),
        }
    }

    /// Limited and no-HWcc models: invalidates this process's copy of every descriptor of `b`
    /// below the heap length, so that a reader that scans them all (recovery, the checker)
    /// sees what other hosts wrote back; also a slot's new holder ([`Site::SlotDescriptors`]).
    pub(crate) fn refresh_descriptors(&self, b: Bracket, site: Site) {
        if self.swcc.is_coherent() {
            return;
        }
        let len = self.refresh_length(b) as usize;
        let local = self.arrays[b as usize].local;
        self.swcc.refresh(site, local as *const u8, len * b.descriptor_size());
    }

    /// Limited and no-HWcc models: invalidates (`refresh`) or writes back (`persist`) the whole
    /// record of `slot`, when a slot changes hands.
    pub(crate) fn record_bytes(&self, slot: u32) -> (*const u8, usize) {
        ((self.record(slot) as *const ThreadRecord).cast(), std::mem::size_of::<ThreadRecord>())
    }

    /// The remote-free counter word of `slab`.
    #[inline]
    pub(crate) fn remote(&self, b: Bracket, slab: Slab) -> &AtomicU64 {
        let addr = self.arrays[b as usize].remote + slab.0 as usize * self.layout.hwcc_stride;
        // SAFETY: slab < length ≤ capacity, so the word is inside the remote array; it is mapped
        // (eagerly or by the fault handler, which maps any slab below the length) and 8-aligned.
        unsafe { &*(addr as *const AtomicU64) }
    }

    /// Bracket `b`'s geometry for the full model's quick free (docs/design.md §4.5): fixed for
    /// the life of the mapping, so a thread copies it once and its frees do not wait for a
    /// load of this struct before the loads of the descriptor.
    pub(crate) fn quick_geometry(&self, b: Bracket) -> QuickGeometry {
        let a = &self.arrays[b as usize];
        let slabs = (self.layout.bracket(b).capacity as usize) << b.slab_shift();
        QuickGeometry { start: self.base() as usize + a.data.offset, size: a.data.size.min(slabs), local: a.local }
    }

    /// The local descriptor of slab `index` of bracket `b`, addressed through `g` (this heap's
    /// [`HeapMem::quick_geometry`] of `b`) instead of this struct: as [`HeapMem::desc`], for a
    /// slab index that need not lie below the heap's length, only below its capacity (the quick
    /// free's locate, docs/design.md §4.5, "No length test"). A slab never reached by the
    /// length has an all-zero descriptor (§2.3: the heap is created and formatted zero, and only
    /// a thread that grew the length over a slab writes its descriptor), which no check of the
    /// quick free accepts.
    ///
    /// # Safety
    ///
    /// `index` is `rel >> b.slab_shift()` for some `rel` that `g.rel` returned.
    #[inline(always)]
    pub(crate) unsafe fn desc_quick(&self, g: &QuickGeometry, b: Bracket, index: u32) -> Descriptor<'_> {
        debug_assert_eq!(g.local, self.arrays[b as usize].local);
        debug_assert!(index < self.layout.bracket(b).capacity);
        let p = g.local + index as usize * b.descriptor_size();
        // SAFETY: `g.local` is bracket `b`'s local array of this mapping (the only constructor,
        // `quick_geometry`, copies it), mapped whole at open for the bracket's capacity, which
        // `index` is below (`g.size` stops at the capacity's last slab, and the caller's index
        // comes from an offset below it); 64-aligned as in `desc`; the head and bitset are
        // atomics, valid for any bit pattern.
        unsafe {
            Descriptor {
                head: &*(p as *const DescriptorHead),
                bits: std::slice::from_raw_parts((p + 64) as *const AtomicU64, b.bitset_words()),
            }
        }
    }

    /// The local descriptor of `slab`.
    #[inline]
    pub(crate) fn desc(&self, b: Bracket, slab: Slab) -> Descriptor<'_> {
        let p = self.arrays[b as usize].local + slab.0 as usize * b.descriptor_size();
        // SAFETY: slab < length ≤ capacity puts the descriptor inside the local array; it is
        // mapped (eagerly or on fault) and 64-aligned (descriptor sizes are multiples of 64);
        // the head and bitset are atomics, valid for any bit pattern.
        unsafe {
            Descriptor {
                head: &*(p as *const DescriptorHead),
                bits: std::slice::from_raw_parts((p + 64) as *const AtomicU64, b.bitset_words()),
            }
        }
    }

    /// The bracket whose slab data holds heap offset `offset`, and the offset into that
    /// bracket's data.
    #[inline(always)]
    pub(crate) fn bracket_at(&self, offset: usize) -> Option<(Bracket, usize)> {
        Bracket::ALL.into_iter().find_map(|b| {
            let span = self.arrays[b as usize].data;
            let rel = offset.wrapping_sub(span.offset);
            (rel < span.size).then_some((b, rel))
        })
    }

    /// The offset range of bracket `b`'s slab data.
    #[inline]
    pub(crate) fn data_span(&self, b: Bracket) -> Span {
        self.arrays[b as usize].data
    }

    /// The heap offset of byte `in_slab` of `slab`'s data.
    #[inline]
    pub(crate) fn data_offset(&self, b: Bracket, slab: Slab, in_slab: usize) -> usize {
        self.arrays[b as usize].data.offset + ((slab.0 as usize) << b.slab_shift()) + in_slab
    }

    /// The heap offset of `word` if an application may name it as the destination of a
    /// detectable operation; checked as for [`HeapMem::word_at`].
    pub(crate) fn word_offset(&self, word: *const AtomicU64) -> Option<u64> {
        let off = (word as usize).wrapping_sub(self.base() as usize);
        self.word_at(off as u64).map(|_| off as u64)
    }

    /// The word at heap offset `off`, if it is one that this process can read and write without
    /// faulting for good (docs/design.md §8.4): 8-aligned, and either an application root, or
    /// in the slab data of a slab below the bracket's current length (mapped, or mapped by the
    /// fault handler on first touch), or inside a live huge block (mapped, or mapped by the
    /// handler). Address space beyond the length, or in the huge span with no live block
    /// there, is reserved `PROT_NONE`: a word there is refused rather than touched.
    ///
    /// The check holds when it is made. A huge block freed afterwards by another thread of this
    /// process is unmapped here at once, so the word is only as valid as the block holding
    /// it: callers name words the caller's own structure owns (which it must not free while an
    /// operation on it runs), as every use of heap memory must.
    pub(crate) fn word_at(&self, off: u64) -> Option<&AtomicU64> {
        let off = usize::try_from(off).ok()?;
        if off % 8 != 0 {
            return None;
        }
        let roots = self.layout.shared_header + std::mem::offset_of!(SharedHeader, roots);
        let in_roots = off >= roots && off < roots + std::mem::size_of::<[AtomicU64; crate::persist::shared::ROOTS]>();
        let valid = in_roots || self.in_live_slab(off) || self.in_live_huge_block(off);
        // SAFETY: the offset is 8-aligned and names memory that is mapped, or that the fault
        // handler maps on first touch (a root, a slab below the length, a live huge block),
        // all inside the reservation; AtomicU64 is valid for any bits.
        valid.then(|| unsafe { &*(self.addr(off) as *const AtomicU64) })
    }

    /// Whether heap offset `off` lies in the data of a slab below its bracket's current length.
    fn in_live_slab(&self, off: usize) -> bool {
        self.bracket_at(off)
            .is_some_and(|(b, rel)| u32::try_from(rel >> b.slab_shift()).is_ok_and(|slab| self.slab(b, slab).is_some()))
    }

    /// Whether heap offset `off` lies inside a live huge block of this heap.
    fn in_live_huge_block(&self, off: usize) -> bool {
        self.huge().is_some_and(|h| {
            h.span.contains(off)
                && h.in_own_process()
                && h.find(off as u64).is_some_and(|b| b.state == Some(HugeState::Live) && b.contains(off as u64))
        })
    }

    /// Remembers that this process freed the huge block at heap offset `off`.
    pub(crate) fn note_huge_freed(&self, off: u64) {
        // Relaxed: a diagnosis hint read by threads of this process; a race between two
        // frees may overwrite one entry, which only loses a hint.
        let i = self.recent_huge_next.fetch_add(1, Ordering::Relaxed) as usize % RECENT_HUGE_FREES;
        self.recent_huge_frees[i].store(off, Ordering::Relaxed);
    }

    /// Whether this process freed a huge block at heap offset `off` recently (among the last
    /// [`RECENT_HUGE_FREES`] huge frees through this instance).
    pub(crate) fn huge_freed_recently(&self, off: u64) -> bool {
        // Relaxed: see `note_huge_freed`; a free in this thread is seen by program order.
        off != 0 && self.recent_huge_frees.iter().any(|w| w.load(Ordering::Relaxed) == off)
    }

    /// The address of a block at heap offset `offset` (an offset this heap computed itself).
    #[inline]
    pub(crate) fn block(&self, offset: usize) -> NonNull<u8> {
        debug_assert!(offset > 0 && offset < self.layout.total);
        // SAFETY: callers pass offsets inside a data span (data_offset on a checked slab, or an
        // offset checked with bracket_at), so they lie inside the reservation, and base + offset
        // is never null.
        unsafe { NonNull::new_unchecked(self.addr(offset)) }
    }
}

impl Drop for HeapMem {
    fn drop(&mut self) {
        // SAFETY: the reservation is ours and every handle into it (Arc'd) is gone.
        unsafe { map::release(self.base, self.layout.total) };
    }
}
