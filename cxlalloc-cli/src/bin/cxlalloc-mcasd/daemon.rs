//! The daemon proper (see `main.rs`).

use cxlalloc::internal::sync::{AtomicBool, Ordering};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Parser};
use cxlalloc::internal::mcas::device;
use cxlalloc::internal::mcas::{Geometry, Window, WindowError};
use cxlalloc::internal::{DEVICE_FILE, WINDOW_FILE};
use cxlalloc::Heap;
use nix::sys::signal::{signal, SigHandler, Signal};

/// Requester slots of a window created without `--slots`.
const DEFAULT_SLOTS: u32 = 64;
/// Target bytes of a window created without `--target-bytes`.
const DEFAULT_TARGET_BYTES: u64 = 1 << 20;

/// Serve an mCAS window from shared memory: a no-HWcc heap's (`--heap`, `--heap-dir`, or the
/// window carved in a heap device, `--device`) or any window file (`--window`).
#[derive(Parser)]
#[command(version)]
#[command(group(ArgGroup::new("what").required(true).args(["window", "heap", "heap_dir", "device"])))]
struct Args {
    /// The window file (e.g. /dev/shm/my-heap.mcas); created if absent.
    #[arg(long)]
    window: Option<PathBuf>,
    /// A no-HWcc heap in /dev/shm by name: serves `/dev/shm/cxlalloc.NAME/mcas-window`, which
    /// the heap's creation made (start the daemon after `cxlalloc create NAME --coherence none`).
    #[arg(long)]
    heap: Option<String>,
    /// A no-HWcc heap by directory: serves `PATH/mcas-window`.
    #[arg(long, value_name = "PATH")]
    heap_dir: Option<PathBuf>,
    /// A no-HWcc heap on a device (`cxlalloc format PATH --coherence none`): serves the window
    /// carved in the device. On a pod, one host serves it for all.
    #[arg(long, value_name = "PATH")]
    device: Option<PathBuf>,
    /// Requester slots of a window created by `--window` (default 64). An existing window is
    /// served with its own; if given, it must match.
    #[arg(long)]
    slots: Option<u32>,
    /// Bytes of the target area of a window created by `--window` (a multiple of 8; default
    /// 1 MiB). An existing window is served with its own; if given, it must match.
    #[arg(long)]
    target_bytes: Option<u64>,
    /// Device time per CAS, in nanoseconds (the paper's device: 2300).
    #[arg(long, default_value_t = 0)]
    latency_ns: u64,
}

impl Args {
    /// The window file to serve, and whether it must already exist (a heap's window is made by
    /// the heap's creation, never by the daemon).
    fn target(&self) -> Result<(PathBuf, bool), String> {
        if let Some(w) = &self.window {
            return Ok((w.clone(), false));
        }
        let dir = match (&self.heap, &self.heap_dir) {
            (Some(name), _) => Heap::path_of(name).map_err(|e| e.to_string())?,
            (None, Some(dir)) => dir.clone(),
            // clap's group requires one of the three.
            (None, None) => return Err("one of --window, --heap, --heap-dir is needed".into()),
        };
        if dir.join(DEVICE_FILE).exists() {
            return Err(format!("{} is served by the hardware mCAS device it names in {DEVICE_FILE}", dir.display()));
        }
        Ok((dir.join(WINDOW_FILE), true))
    }
}

/// Opens the window at `path`. An existing window is served with its own geometry; a field
/// given on the command line must match it (a window is never reshaped). An absent one is an
/// error when `must_exist` (a heap's window), otherwise created with the given fields or the
/// defaults.
fn open_window(
    path: &Path,
    must_exist: bool,
    slots: Option<u32>,
    target_bytes: Option<u64>,
) -> Result<Window, WindowError> {
    match Window::open(path) {
        Ok(w) => {
            let g = w.geometry();
            let asked =
                Geometry { slots: slots.unwrap_or(g.slots), target_bytes: target_bytes.unwrap_or(g.target_bytes) };
            if asked != g {
                return Err(WindowError::Invalid {
                    path: path.to_path_buf(),
                    what: format!("exists with {g:?}, asked for {asked:?} (never reshaped)"),
                });
            }
            Ok(w)
        }
        Err(WindowError::Io { source, .. }) if !must_exist && source.kind() == std::io::ErrorKind::NotFound => {
            let geometry = Geometry {
                slots: slots.unwrap_or(DEFAULT_SLOTS),
                target_bytes: target_bytes.unwrap_or(DEFAULT_TARGET_BYTES),
            };
            // Another creator may win between the open above and this: then its window is
            // opened and must have this geometry.
            Window::create_or_open(path, geometry)
        }
        Err(e) => Err(e),
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: i32) {
    STOP.store(true, Ordering::Relaxed);
}

/// Parses the command line and serves the window.
pub fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(dev) = &args.device {
        return match cxlalloc::internal::mcas::device_window(dev) {
            Ok(window) => serve(&window, dev, args.latency_ns),
            Err(e) => {
                eprintln!("cxlalloc-mcasd: {e}");
                ExitCode::from(2)
            }
        };
    }
    let (path, must_exist) = match args.target() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cxlalloc-mcasd: {e}");
            return ExitCode::from(2);
        }
    };
    let window = match open_window(&path, must_exist, args.slots, args.target_bytes) {
        Ok(w) => w,
        Err(e) => {
            let absent = matches!(&e, WindowError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound);
            eprintln!("cxlalloc-mcasd: {e}");
            if must_exist && absent {
                eprintln!("cxlalloc-mcasd: (a heap's window exists only if the heap was created with coherence none)");
            }
            return ExitCode::from(2);
        }
    };
    serve(&window, &path, args.latency_ns)
}

/// Serves `window` (at `path`) until SIGTERM or SIGINT.
fn serve(window: &Window, path: &Path, latency_ns: u64) -> ExitCode {
    for s in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        if let Err(e) = unsafe { signal(s, SigHandler::Handler(on_signal)) } {
            eprintln!("cxlalloc-mcasd: cannot handle {s}: {e}");
            return ExitCode::from(2);
        }
    }
    let g = window.geometry();
    eprintln!("cxlalloc-mcasd: serving {} ({} slots, {} target bytes)", path.display(), g.slots, g.target_bytes);
    match device::serve(window, Duration::from_nanos(latency_ns), &STOP) {
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
