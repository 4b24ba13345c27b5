//! `cxlalloc-mcasd`: the software mCAS device. Creates the window file if none exists (never
//! reshaping or zeroing an existing one), serves it until SIGTERM or SIGINT, answers what is in
//! flight, releases the window and exits 0.

// Under `--cfg loom` the library holds only the model-checked protocols (see `lib.rs`), so the
// daemon is compiled out; cargo still builds this binary for `tests/loom.rs`.
#[cfg(not(loom))]
mod daemon;

#[cfg(not(loom))]
fn main() -> std::process::ExitCode {
    daemon::main()
}

#[cfg(loom)]
fn main() {}
