//! Support for the workspace's own tools and tests: the `cxlalloc` CLI and the `cxlalloc-mcasd`
//! daemon (package `cxlalloc-cli`), `cxlalloc-bench` and the integration and loom tests. Not part of the API: it may
//! change in any release, and applications should not use it.
//!
//! Every safe function reachable from here is safe to call with any argument: an index,
//! offset or slot number is checked against what is really mapped and refused with an error
//! (or `None`), never trusted. Nothing here hands out a reference into a heap's metadata; the
//! heap's internals (its mapped memory, descriptors and thread records) are not nameable from
//! outside the crate at all:
//!
//! ```compile_fail,E0603
//! // The soundness hole this closes (issue 15): with the internals public, safe code could map
//! // a heap and read a thread record at an unchecked index, far outside the mapping.
//! use cxlalloc::{backing::anon::AnonBacking, layout::Header, mem::HeapMem, Config};
//! let header = Header::new(&Config::with_capacity(32 << 20), 1);
//! let mem = HeapMem::map(header, Box::new(AnonBacking), None).unwrap();
//! let _dangling = mem.record(u32::MAX / 4);
//! ```
//!
//! ```compile_fail,E0432
//! // Nor are those types re-exported anywhere.
//! use cxlalloc::internal::HeapMem;
//! ```
//!
//! Under `--cfg loom` only [`sync`], [`word`] and [`protocol`] exist (the loom models).

/// The atomics facade: `std`'s atomics, or loom's under `--cfg loom`.
pub mod sync {
    pub use crate::sync::{AtomicBool, AtomicU64, Ordering};
}

/// Decoders of the packed words several threads update with one CAS.
pub mod word {
    pub use crate::word::{Holder, HostWord, Tag, Tagged};
}

/// The lock-free CAS protocols (the loom models' subjects). They touch only the atomics they
/// are given: safe with any argument.
pub mod protocol {
    pub use crate::protocol::{
        cached_word, detectable, free_mark, global_list, hazard, host, host_number, lease, length, mailbox, registry,
        remote, HwWord,
    };
}

#[cfg(not(loom))]
pub use self::not_loom::*;

#[cfg(not(loom))]
mod not_loom {
    pub use crate::backing::files::UNLINKED_PREFIX;
    pub use crate::class::{class_aligned, class_of, LARGE_MAX, SMALL_MAX};
    pub use crate::coherence::{
        hwcc::inject_latency, Site, DEVICE_FILE, HOST_ENV, HOST_NUMBERS, PROCESS_REQUESTERS, WINDOW_FILE,
    };
    pub use crate::layout::{RegionId, REGIONS};

    /// `(start, len)`: the address range `heap` reserves in this process (every region, slab
    /// data and the huge span). Every block of the heap lies in it and nothing else is ever
    /// mapped there, so a range check tells the heap's pointers from any others (the
    /// `LD_PRELOAD` library's `free`, docs/design.md §17).
    pub fn reserved_span(heap: &crate::Heap) -> (usize, usize) {
        (heap.base_address(), heap.mem().layout.total)
    }

    /// The address where `heap`'s huge span starts in this process (the span runs to the end
    /// of [`reserved_span`]); `usize::MAX` when the heap has no huge heap. Every block at or
    /// above it is a huge block, every block below it a slab block.
    pub fn huge_start(heap: &crate::Heap) -> usize {
        match heap.mem().huge() {
            Some(view) => heap.base_address() + view.span.offset,
            None => usize::MAX,
        }
    }

    /// Byte offset of `heap`'s fixed shared header (bracket globals first, the small bracket's
    /// length word first in them) inside its shared region (layout version 10 puts the slot
    /// records before it, docs/design.md §2.1); in a no-HWcc heap's mCAS window, the target
    /// area starts with the shared region, so this is also the length word's target offset.
    pub fn shared_header_offset(heap: &crate::Heap) -> u64 {
        let layout = &heap.mem().layout;
        (layout.shared_header - layout.region(RegionId::Shared).offset) as u64
    }

    /// The mCAS window, its client, the software device and hardware device descriptions.
    pub mod mcas {
        pub use crate::mcas::mmio::has_movdir64b;
        pub use crate::mcas::{
            answer::ANSWER_TIMEOUT, window::HEADER_WAIT, Answer, Device, DeviceSpec, Geometry, HostClaim, Link,
            McasClient, McasError, MmioError, SpecError, Window, WindowError,
        };

        /// Tests only: this process reports the kernel fingerprint of boot id `boot_id` instead
        /// of its kernel's, so that a forked child plays a host of another kernel when it
        /// claims a host number in a window (docs/design.md §9.2). Call it before opening a heap.
        pub fn pretend_kernel(boot_id: &str) {
            crate::identity::pretend_kernel(boot_id);
        }

        /// The fingerprint of this process's kernel, as a window's host-number claims record it
        /// (its boot id, hashed), or the one [`pretend_kernel`] set.
        pub fn kernel() -> u64 {
            crate::identity::kernel()
        }

        /// The software mCAS device (what `cxlalloc-mcasd` runs).
        pub mod device {
            pub use crate::mcas::device::{
                calibrate, serve, stop, CalibrationError, DeviceError, Served, PAPER_CXL_READ_EXTRA, PAPER_MCAS_LATENCY,
            };
        }

        /// The mCAS window carved in the no-HWcc heap device at `path` (what
        /// `cxlalloc-mcasd --device PATH` serves).
        pub fn device_window(path: &std::path::Path) -> Result<Window, crate::OpenError> {
            crate::backing::device::DeviceBacking::window(path)
        }

        /// Hardware device descriptions.
        pub mod spec {
            pub use crate::mcas::spec::STAND_IN;
        }
    }

    /// The non-coherence simulator's switches (feature `noncoherent-sim`).
    #[cfg(feature = "noncoherent-sim")]
    pub mod sim {
        pub use crate::coherence::sim::{enable, skip};

        /// The platform's Global Persistent Flush of a simulated host going down: every dirty
        /// line of this process's caches of `heap` reaches memory, so that a process on
        /// another host can adopt its slots (docs/design.md §9.1).
        pub fn global_flush(heap: &crate::Heap) {
            heap.mem().swcc.global_flush();
        }

        /// The application's write-back of `len` bytes at `p` (heap memory) on a simulated
        /// host, as before it hands them to another host: never removed by [`skip`].
        pub fn app_write_back(heap: &crate::Heap, p: *const u8, len: usize) {
            heap.mem().swcc.app_write_back(p, len);
        }

        /// The application's invalidation of `len` bytes at `p` (heap memory) on a simulated
        /// host, before it reads what another host wrote there: a dirty line of this host is
        /// written back first (over whatever memory held), as a CPU does.
        pub fn app_invalidate(heap: &crate::Heap, p: *const u8, len: usize) {
            heap.mem().swcc.app_invalidate(p, len);
        }

        /// The sizing of the slab holding the allocated slab block at `ptr`, as `thread`
        /// reads it: `(bracket, slab index, generation, block size)`; `None` outside sized
        /// slabs. A slab's generation grows with every sizing, so what one host observes of a
        /// slab over time never goes back.
        pub fn sizing_of(
            thread: &crate::ThreadHandle,
            ptr: std::ptr::NonNull<u8>,
        ) -> Option<(crate::Bracket, u32, u32, u32)> {
            thread.sizing_of(ptr)
        }
    }

    /// White-box crash points (feature `crash-points`).
    pub mod crash {
        pub use crate::crash::POINTS;
        #[cfg(feature = "crash-points")]
        pub use crate::crash::{arm, pause_at, paused, resume};
    }
}
