//! `cxlkv --port PORT --workers N [--heap NAME] [--memory-limit SIZE]`: a memcached (text
//! protocol) whose N worker processes share one table in the cxlalloc heap NAME; runs in the
//! foreground until SIGTERM/SIGINT, then exits 0 (docs/design.md §16). The command line is in
//! `cli.rs`.

#[cfg(not(loom))]
mod cli;

#[cfg(not(loom))]
fn main() -> std::process::ExitCode {
    cli::main()
}

// Under `--cfg loom` the library holds only the model-checked protocol (see lib.rs).
#[cfg(loom)]
fn main() {}
