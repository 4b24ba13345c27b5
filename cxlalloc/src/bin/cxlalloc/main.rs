//! `cxlalloc`: list, create, inspect, check, show statistics of, recover and unlink heaps.
//!
//! A HEAP argument containing `/` is a heap directory path; anything else is a heap name in
//! `/dev/shm`.

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
