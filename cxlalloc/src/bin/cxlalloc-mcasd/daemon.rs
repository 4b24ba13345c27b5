//! The daemon proper (see `main.rs`).

use cxlalloc::sync::{AtomicBool, Ordering};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use cxlalloc::mcas::device;
use cxlalloc::mcas::{Geometry, Window};
use nix::sys::signal::{signal, SigHandler, Signal};

/// Serve an mCAS window from shared memory.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The window file (e.g. /dev/shm/my-heap.mcas).
    #[arg(long)]
    window: PathBuf,
    /// Requester slots of a new window (at least the heap's thread slots).
    #[arg(long, default_value_t = 64)]
    slots: u32,
    /// Bytes of a new window's target area (a multiple of 8).
    #[arg(long, default_value_t = 1 << 20)]
    target_bytes: u64,
    /// Device time per CAS, in nanoseconds (the paper's device: 2300).
    #[arg(long, default_value_t = 0)]
    latency_ns: u64,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: i32) {
    STOP.store(true, Ordering::Relaxed);
}

/// Parses the command line and serves the window.
pub fn main() -> ExitCode {
    let args = Args::parse();
    let window =
        match Window::create_or_open(&args.window, Geometry { slots: args.slots, target_bytes: args.target_bytes }) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("cxlalloc-mcasd: {e}");
                return ExitCode::from(2);
            }
        };
    for s in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        if let Err(e) = unsafe { signal(s, SigHandler::Handler(on_signal)) } {
            eprintln!("cxlalloc-mcasd: cannot handle {s}: {e}");
            return ExitCode::from(2);
        }
    }
    eprintln!("cxlalloc-mcasd: serving {} ({} slots)", args.window.display(), window.geometry().slots);
    match device::serve(&window, Duration::from_nanos(args.latency_ns), &STOP) {
        Ok(s) => {
            eprintln!(
                "cxlalloc-mcasd: {} requests, {} swapped, {} conflicts, {} errors",
                s.requests, s.successes, s.conflicts, s.errors
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cxlalloc-mcasd: {e}");
            ExitCode::from(2)
        }
    }
}
