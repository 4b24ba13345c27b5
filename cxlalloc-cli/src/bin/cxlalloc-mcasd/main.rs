//! `cxlalloc-mcasd`: the software mCAS device (docs/design.md §9.3). Serves one mCAS window until
//! SIGTERM or SIGINT, answers what is in flight, releases the window and exits 0.
//!
//! What it serves:
//!
//! - `--heap NAME`: the window of the no-HWcc heap `NAME` in `/dev/shm`
//!   (`/dev/shm/cxlalloc.NAME/mcas-window`, made when the heap was created with coherence
//!   `none`); threads of such a heap cannot attach while no device serves it.
//! - `--heap-dir PATH`: the same for a heap directory anywhere.
//! - `--device PATH`: the window carved in the no-HWcc heap device `PATH` (`cxlalloc format PATH
//!   --coherence none`).
//! - `--window FILE`: any window file; created if absent (`--slots`, `--target-bytes`, or 64
//!   slots and 1 MiB), never reshaped or zeroed if present.
//!
//! An existing window is served with the geometry in its header; `--slots` / `--target-bytes`
//! given for one must match it. `--latency-ns` injects device time per CAS (the paper's device:
//! 2300).

mod daemon;

fn main() -> std::process::ExitCode {
    daemon::main()
}
