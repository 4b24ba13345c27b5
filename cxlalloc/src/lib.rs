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
//! # Layers
//!
//! Each module uses only modules above it in this list:
//!
//! 1. `sync` (atomics facade), `word` (packed-word decoders), `class` (size classes)
//! 2. `protocol` — the lock-free CAS protocols, model-checked with loom
//! 3. `map` (mmap) → `backing` (region storage) → `layout` (header and offsets);
//!    `mcas` (the mCAS window, client and software device) → `coherence` (the coherence
//!    models: SWcc flushes, HWcc words through mCAS)
//! 4. `mem` — a mapped heap and its checked accessors (the raw-memory boundary)
//! 5. `slab` (the state machine), `thread` (slots, records, redo log) and `huge` (its
//!    `huge::view` sits at layer 4: the fault handler reaches it through `mem`); `crash`
//!    marks their crash points
//! 6. `signal` (SIGSEGV handler for growth and huge blocks), `check` and `stats`;
//!    `recovery` (adoption and repair of a dead slot)
//! 7. `heap` (public API) → `ffi` (C API)
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, unreachable_pub, unnameable_types, clippy::undocumented_unsafe_blocks)]
// Under loom only `sync`, `word` and `protocol` are built, for the models: the decoders that
// serve the other modules are unused there.
#![cfg_attr(loom, allow(dead_code))]

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
mod huge;
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
mod recovery;
#[cfg(not(loom))]
mod signal;
#[cfg(not(loom))]
mod slab;
#[cfg(not(loom))]
mod stats;
#[cfg(not(loom))]
mod thread;

// The curated API, and the types its public fields and methods expose.
#[cfg(not(loom))]
pub use crate::{
    check::{huge::HugeCensus, BracketCensus, ClassCensus, InFlight, Problem, Report, SlabState},
    class::Bracket,
    error::{AdoptError, AllocError, AttachError, ErrorCode, FreeError, OffsetError, OpenError},
    heap::Heap,
    layout::{Coherence, Config},
    offset::Offset,
    recovery::{PendingOutcome, Rebuilt, RecoveryReport, Resolution},
    stats::{OpCounters, Stats},
    thread::{
        redo::{Op as RedoOp, Pending, PendingKind, Redo},
        ReallocError, ThreadHandle,
    },
    word::Holder,
};

// Support for the crate's own tools (CLI, daemon, bench) and tests; not part of the API.
#[doc(hidden)]
pub mod internal;

#[cfg(not(loom))]
impl Heap {
    /// Walks all metadata and reports inconsistencies and a census by slab state.
    pub fn check(&self) -> Report {
        check::check(self)
    }

    /// Statistics: census, counters, HWcc/SWcc bytes.
    pub fn stats(&self) -> Stats {
        stats::stats(self)
    }
}
