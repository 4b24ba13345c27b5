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
//! 1. [`sync`] (atomics facade), [`word`] (packed-word decoders), [`class`] (size classes)
//! 2. [`protocol`] — the lock-free CAS protocols, model-checked with loom
//! 3. [`map`] (mmap) → [`backing`] (region storage) → [`layout`] (header and offsets);
//!    [`mcas`] (the mCAS window, client and software device) → [`coherence`] (the coherence
//!    models: SWcc flushes, HWcc words through mCAS)
//! 4. [`mem`] — a mapped heap and its checked accessors (the raw-memory boundary)
//! 5. [`slab`] (the state machine), [`thread`] (slots, records, redo log) and [`huge`] (its
//!    [`huge::view`] sits at layer 4: the fault handler reaches it through [`mem`]); [`crash`]
//!    marks their crash points
//! 6. [`signal`] (SIGSEGV handler for growth and huge blocks), [`check`] and [`stats`];
//!    [`recovery`] (adoption and repair of a dead slot)
//! 7. [`heap`] (public API) → [`ffi`] (C API)
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

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
pub mod recovery;
#[cfg(not(loom))]
pub mod signal;
#[cfg(not(loom))]
pub mod slab;
#[cfg(not(loom))]
pub mod stats;
#[cfg(not(loom))]
pub mod thread;

#[cfg(not(loom))]
pub use crate::{
    check::Report,
    error::{AdoptError, AllocError, AttachError, ErrorCode, FreeError, OffsetError, OpenError},
    heap::Heap,
    layout::{Coherence, Config},
    offset::Offset,
    recovery::RecoveryReport,
    stats::Stats,
    thread::{ReallocError, ThreadHandle, MAX_ALIGN},
};

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
