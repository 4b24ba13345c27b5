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
//! 1. `sync` (atomics facade), `word` (packed-word decoders), `class` (size classes), `error`
//!    (the error enums), `offset`, `identity` (slot holders and their liveness)
//! 2. `protocol` — the lock-free CAS protocols, model-checked with loom
//! 3. `persist` — every type that lives in heap memory (descriptors, thread records, redo
//!    words, slot leases, globals, huge descriptors)
//! 4. `layout` (header and offsets) → `map` (mmap) → `mcas` (the mCAS window, client and
//!    software device) → `coherence` (the coherence models: SWcc flushes, HWcc words through
//!    mCAS) → `backing` (region storage) → `host` (the host table: domains and their liveness)
//! 5. `mem` — a mapped heap and its checked accessors (the raw-memory boundary)
//! 6. `slab` (the state machine) and `huge` (its `huge::view` sits at layer 5: the fault
//!    handler reaches it through `mem`); `crash` marks their crash points
//! 7. `signal` (SIGSEGV handler for growth and huge blocks), `check` and `stats`; `recovery`
//!    (adoption and repair of a dead slot)
//! 8. `heap` (public API: [`Heap`], and [`ThreadHandle`], a thread's lease on a slot with the
//!    allocation fast paths) → `survey` (slot holders, recovery plans, a read-only look at a
//!    heap directory) → `ffi` (C API)
//!
//! `tests/layers.rs` reads the sources and fails on an import against this order or on a
//! dependency cycle between files.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, unreachable_pub, unnameable_types, clippy::undocumented_unsafe_blocks)]
// Under loom only `sync`, `word` and `protocol` are built, for the models: the decoders that
// serve the other modules are unused there.
#![cfg_attr(loom, allow(dead_code))]

/// The user guide: the repository's `README.md`, rendered here so that `cargo doc` has a
/// guide-level page. Its Rust examples are compiled as doctests.
#[doc = include_str!("../../README.md")]
pub mod guide {}

/// The design document, `docs/design.md`: what the code does and why, with the section numbers
/// that comments cite (`docs/design.md §N`).
#[doc = include_str!("../../docs/design.md")]
pub mod design {}

// Every module is private: the crate's API is the re-exports below (and, for the crate's own
// tools and tests, the hidden `internal` module). A `pub` item inside a module is not
// reachable from outside unless it is re-exported here; `unreachable_pub` keeps the two apart.
mod sync;
mod word;

mod protocol;

#[cfg(not(loom))]
mod backing;
#[cfg(not(loom))]
mod check;
#[cfg(not(loom))]
mod class;
#[cfg(not(loom))]
mod coherence;
#[cfg(not(loom))]
mod crash;
#[cfg(not(loom))]
mod error;
// The C API: its `#[no_mangle]` functions are exported by symbol name, whatever their Rust
// visibility, so they keep the `pub` that says what they are.
#[cfg(not(loom))]
#[allow(unreachable_pub)]
mod ffi;
#[cfg(not(loom))]
mod heap;
#[cfg(not(loom))]
mod host;
#[cfg(not(loom))]
mod huge;
#[cfg(not(loom))]
mod identity;
#[cfg(not(loom))]
mod layout;
#[cfg(not(loom))]
mod map;
#[cfg(not(loom))]
mod mcas;
#[cfg(not(loom))]
mod mem;
#[cfg(not(loom))]
mod offset;
#[cfg(not(loom))]
mod persist;
#[cfg(not(loom))]
mod recovery;
#[cfg(not(loom))]
mod signal;
#[cfg(not(loom))]
mod slab;
#[cfg(not(loom))]
mod stats;
#[cfg(not(loom))]
mod survey;

// The curated API, and the types its public fields and methods expose.
#[cfg(not(loom))]
pub use crate::{
    check::{huge::HugeCensus, BracketCensus, ClassCensus, InFlight, Problem, Report, SlabState},
    class::Bracket,
    error::{
        AdoptError, AllocError, AttachError, ErrorCode, FreeError, HandOverError, MaintenanceError, OffsetError,
        OpenError, RecoverHostError,
    },
    heap::{Heap, HostInfo, HostRecovery, HugeMaintenance, ReallocError, ThreadHandle, MAX_ALIGN},
    layout::{Coherence, Config},
    offset::Offset,
    persist::redo::{Op as RedoOp, Pending, PendingKind, Redo},
    recovery::{PendingOutcome, Rebuilt, RecoveryReport, Resolution},
    stats::{OpCounters, Stats},
    survey::{HeapInfo, Interrupted, McasInfo, RecoveryPlan, RegionInfo, SlotInfo},
    word::Holder,
};

// Support for the crate's own tools (CLI, daemon, bench) and tests; not part of the API.
#[doc(hidden)]
pub mod internal;

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
