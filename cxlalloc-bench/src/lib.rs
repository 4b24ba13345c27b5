//! Evaluation programs for cxlalloc (docs/design.md §12).
//!
//! Binaries:
//!
//! - `cxlalloc-bench` — the harness: `cxlalloc-bench run workloads/NAME.toml` expands a workload
//!   file into configurations and runs each as a coordinator process with worker processes,
//!   writing one NDJSON line per worker and printing a results table ([`harness`]).
//! - `demo` — several processes sharing one `/dev/shm` heap, passing blocks to each other through
//!   offset rings and freeing each other's blocks; the parent checks the heap afterwards.
//! - `tracegen` — writes or summarizes synthetic Twitter cache traces ([`trace`]).
//!
//! Modules, lowest first: [`shm`] (the run's shared control area) and [`barrier`] (a barrier
//! across processes in it); [`allocator`] (one per-thread interface over every allocator
//! compared, with block handles valid in every process); [`memory`] (PSS split by coherence
//! class); [`trace`] (trace reader and generator); [`bench`](mod@bench) (the benchmarks, one per-thread body
//! each); [`harness`] (driver, coordinator, worker, records, table). [`ring`] and [`demo`] serve
//! the demo program.

pub mod allocator;
pub mod barrier;
pub mod bench;
pub mod caslat;
pub mod demo;
pub mod harness;
pub mod memory;
pub mod ring;
pub mod shm;
pub mod trace;

/// The error type of the benchmark programs: anything printable, sendable between threads.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
