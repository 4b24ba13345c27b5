//! Evaluation programs for cxlalloc.
//!
//! Binaries:
//!
//! - `micro` — the threadtest micro benchmark (DESIGN §12.2) comparing cxlalloc (anonymous and
//!   `/dev/shm` heaps) with mimalloc and the system allocator, in one process.
//! - `demo` — several processes sharing one `/dev/shm` heap, passing blocks to each other through
//!   offset rings and freeing each other's blocks; the parent checks the heap afterwards.
//!
//! The full evaluation harness (driver → coordinator → workers reading `workloads/*.toml`,
//! DESIGN §12.1) is a later piece of work; the modules here are the parts it will reuse.
//!
//! Modules, lowest first: [`allocator`] (one per-thread interface over every allocator compared)
//! → [`threadtest`] (the workload and its timing); [`ring`] (a single-producer single-consumer
//! queue of offsets laid out in heap memory) → [`demo`] (the demo's parameters and block stamps).

pub mod allocator;
pub mod barrier;
pub mod bench;
pub mod demo;
pub mod harness;
pub mod memory;
pub mod ring;
pub mod shm;
pub mod threadtest;
pub mod trace;
pub mod xmalloc;

/// The error type of the benchmark programs: anything printable, sendable between threads.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
