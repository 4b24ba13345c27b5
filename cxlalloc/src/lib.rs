//! cxlalloc: a memory allocator for processes that share one CXL memory device — or, on a
//! machine without one, a directory in `/dev/shm`.
//!
//! Memory allocated by any thread of any process is usable from every process at once (through
//! [`Offset`]s, which name the same bytes everywhere), may be freed by any of them, and every
//! multi-writer structure is lock-free so a crashed thread never blocks the others.
//!
//! ```no_run
//! use cxlalloc::{Config, Heap};
//! let heap = Heap::open_or_create("demo", &Config::default())?;
//! let thread = heap.attach()?;
//! let block = thread.alloc(64)?;
//! let offset = heap.offset_of(block.as_ptr())?; // store this in shared memory
//! thread.free(heap.pointer(offset)?)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Documentation
//!
//! - [`guide`]: the repository's README — building, running the benchmarks and tests, using the
//!   heap from Rust, C and the command line, coherence models, recovery.
//! - [`design`]: `docs/design.md`, how the allocator works (layout, size classes, the slab state
//!   machine T1–T10, thread slots, the fault handler, the huge heap, recovery, coherence and
//!   mCAS, the harness, tests, targets). Comments cite it as `docs/design.md §N`.
//!
//! # Layers
//!
//! Each module uses only modules above it in this list:
//!
//! 1. [`sync`] (atomics facade), [`word`] (packed-word decoders), [`class`] (size classes),
//!    [`error`] (the error enums), [`offset`], [`identity`] (slot holders and their liveness)
//! 2. [`protocol`] — the lock-free CAS protocols, model-checked with loom
//! 3. [`persist`] — every type that lives in heap memory (descriptors, thread records, redo
//!    words, slot leases, globals, huge descriptors)
//! 4. [`map`] (mmap) → [`backing`] (region storage) → [`layout`] (header and offsets);
//!    [`mcas`] (the mCAS window, client and software device) → [`coherence`] (the coherence
//!    models: SWcc flushes, HWcc words through mCAS)
//! 5. [`mem`] — a mapped heap and its checked accessors (the raw-memory boundary)
//! 6. [`slab`] (the state machine) and [`huge`] (its [`huge::view`] sits at layer 5: the fault
//!    handler reaches it through [`mem`]); [`crash`] marks their crash points
//! 7. [`signal`] (SIGSEGV handler for growth and huge blocks), [`check`] and [`stats`];
//!    [`recovery`] (adoption and repair of a dead slot)
//! 8. [`heap`] (public API: [`Heap`], and [`ThreadHandle`], a thread's lease on a slot with
//!    the allocation fast paths) → [`ffi`] (C API)
//!
//! `tests/layers.rs` reads the sources and fails on an import against this order or on a
//! dependency cycle between files.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

/// The user guide: the repository's `README.md`, rendered here so that `cargo doc` has a
/// guide-level page. Its Rust examples are compiled as doctests.
#[doc = include_str!("../../README.md")]
pub mod guide {}

/// The design document, `docs/design.md`: what the code does and why, with the section numbers
/// that comments cite (`docs/design.md §N`).
#[doc = include_str!("../../docs/design.md")]
pub mod design {}

pub mod sync;
pub mod word;

pub mod protocol;

#[cfg(not(loom))]
pub mod backing;
#[cfg(not(loom))]
pub mod check;
#[cfg(not(loom))]
pub mod class;
#[cfg(not(loom))]
pub mod coherence;
#[cfg(not(loom))]
pub mod crash;
#[cfg(not(loom))]
pub mod error;
#[cfg(not(loom))]
pub mod ffi;
#[cfg(not(loom))]
pub mod heap;
#[cfg(not(loom))]
pub mod huge;
#[cfg(not(loom))]
pub mod identity;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
pub mod map;
#[cfg(not(loom))]
pub mod mcas;
#[cfg(not(loom))]
pub mod mem;
#[cfg(not(loom))]
pub mod offset;
#[cfg(not(loom))]
pub mod persist;
#[cfg(not(loom))]
pub mod recovery;
#[cfg(not(loom))]
pub mod signal;
#[cfg(not(loom))]
pub mod slab;
#[cfg(not(loom))]
pub mod stats;

#[cfg(not(loom))]
pub use crate::{
    check::Report,
    error::{AdoptError, AllocError, AttachError, ErrorCode, FreeError, OffsetError, OpenError},
    heap::{Heap, ReallocError, ThreadHandle},
    layout::{Coherence, Config},
    offset::Offset,
    recovery::RecoveryReport,
    stats::Stats,
};

#[cfg(not(loom))]
impl Heap {
    /// Walks all metadata and reports inconsistencies and a census by slab state.
    pub fn check(&self) -> Report {
        check::check(self.mem())
    }

    /// Statistics: census, counters, HWcc/SWcc bytes.
    pub fn stats(&self) -> Stats {
        stats::stats(self.mem())
    }
}
