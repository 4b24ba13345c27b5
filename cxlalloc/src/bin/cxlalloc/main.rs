//! `cxlalloc`: list, create, inspect, check, show statistics of, recover and unlink heaps.
//!
//! A heap is named by `NAME` (the heap `/dev/shm/cxlalloc.NAME`, see `Heap::check_name`) or by
//! `--at DIR` (a heap directory anywhere); a name is never read as a path.

// Under `--cfg loom` the library holds only the model-checked protocols (see `lib.rs`), so the
// CLI is compiled out; cargo still builds this binary for `tests/loom.rs`.
#[cfg(not(loom))]
mod cli;
#[cfg(not(loom))]
mod json;
#[cfg(not(loom))]
mod out;

#[cfg(not(loom))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(loom)]
fn main() {}
