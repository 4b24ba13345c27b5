//! `icount`: the allocator's fast paths, one scenario per run, for instruction counting under
//! `valgrind --tool=callgrind` (`script/icount.sh`). Not a timing benchmark: it only gives each
//! path a fixed, repeatable amount of work.
//!
//! ```text
//! icount MODEL SCENARIO      MODEL: full | limited | none; SCENARIO: see `Scenario`
//! ```
//!
//! One thread holds two handles of one heap, `a` and `b`: `a` allocates, and `b` freeing `a`'s
//! blocks is a remote free. Each scenario's measured work runs inside one `#[inline(never)]`
//! function named `measure_<scenario>`, whose inclusive instruction count the script reads; it
//! prints the number of operations that work performed, the script's divisor. In the no-HWcc
//! model a software mCAS device serves the heap's window from a second thread; the time a client
//! waits for its answers (`McasClient`'s `answer_wait`) depends on scheduling and is subtracted
//! by the script.

use std::path::PathBuf;
use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use cxlalloc::internal::mcas::{device, Window};
use cxlalloc::internal::WINDOW_FILE;
use cxlalloc::{Coherence, Config, Heap, ThreadHandle};

/// Blocks of the local and batched scenarios (64 B blocks, 512 per slab): seven bitset words of
/// one slab, so the work stays in the slab that the warm-up made current.
const LOCAL_BLOCKS: usize = 448;
/// Slabs of the scattered remote-free scenario (512 B blocks, 64 per slab): in the batching
/// models, 40 batches open at once, as xmalloc's consumer holds them. With the 32-entry batch
/// of earlier versions every free evicted another batch (one subtraction per free, 1 622.6
/// instructions without HWcc); the table of 256 (docs/design.md §4.5) holds them all.
const SCATTER_SLABS: usize = 40;
/// Blocks freed of each of those slabs (fewer than 64: no slab is claimed).
const SCATTER_DEPTH: usize = 50;
/// Slabs taken by the refill scenario (1024 B blocks, 32 per slab).
const REFILL_SLABS: usize = 16;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(model), Some(scenario)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: icount full|limited|none local_alloc|local_free|remote_free|remote_free_batched|refill");
        return ExitCode::from(2);
    };
    let coherence = match model.as_str() {
        "full" => Coherence::Full,
        "limited" => Coherence::Limited,
        "none" => Coherence::NoHwcc,
        other => {
            eprintln!("icount: unknown model {other}");
            return ExitCode::from(2);
        }
    };
    match run(coherence, scenario) {
        Ok(ops) => {
            println!("ops {ops}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("icount: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A heap in `/dev/shm` for one run, with its mCAS device when it has no HWcc; removed on drop.
struct Fixture {
    heap: Heap,
    dir: PathBuf,
    device: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl Fixture {
    fn new(coherence: Coherence) -> Result<Self> {
        let dir = PathBuf::from(format!("/dev/shm/cxlalloc-icount-{}", std::process::id()));
        let config = Config { coherence, huge_capacity: 0, thread_slots: 4, ..Config::with_capacity(64 << 20) };
        let heap = Heap::create_at(&dir, &config)?;
        let mut device = None;
        if coherence == Coherence::NoHwcc {
            let window = Window::open(&dir.join(WINDOW_FILE))?;
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let thread = std::thread::spawn(move || {
                let _ = device::serve(&window, Duration::ZERO, &s);
            });
            let path = dir.join(WINDOW_FILE);
            while Window::open(&path)?.served_by().is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            device = Some((stop, thread));
        }
        Ok(Self { heap, dir, device })
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.device.take() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = thread.join();
        }
        let _ = Heap::unlink_at(&self.dir);
    }
}

fn run(coherence: Coherence, scenario: &str) -> Result<usize> {
    let fx = Fixture::new(coherence)?;
    let a = fx.heap.attach()?;
    let b = fx.heap.attach()?;
    let mut blocks = Vec::with_capacity(SCATTER_SLABS * 64);
    let ops = match scenario {
        "local_alloc" => {
            // The warm-up sizes the class's current slab.
            blocks.push(a.alloc(64)?);
            measure_local_alloc(&a, &mut blocks)
        }
        "local_free" => {
            blocks.push(a.alloc(64)?);
            alloc_n(&a, 64, LOCAL_BLOCKS, &mut blocks)?;
            measure_local_free(&a, &blocks[1..])
        }
        "remote_free_batched" => {
            blocks.push(a.alloc(64)?);
            alloc_n(&a, 64, LOCAL_BLOCKS, &mut blocks)?;
            measure_remote_free_batched(&b, &blocks[1..])
        }
        "remote_free" => {
            // Every block of SCATTER_SLABS slabs, slab after slab; freed depth-first.
            alloc_n(&a, 512, SCATTER_SLABS * 64, &mut blocks)?;
            let order: Vec<NonNull<u8>> = (0..SCATTER_DEPTH)
                .flat_map(|j| (0..SCATTER_SLABS).map(move |s| s * 64 + j))
                .map(|i| blocks[i])
                .collect();
            measure_remote_free(&b, &order)
        }
        "refill" => {
            // Slabs sized once and emptied by local frees: the measured refills take them back
            // from the thread's unsized list and the global list and size them again.
            alloc_n(&a, 1024, REFILL_SLABS * 32, &mut blocks)?;
            for &p in &blocks {
                a.free(p)?;
            }
            blocks.clear();
            measure_refill(&a, &mut blocks)
        }
        other => return Err(format!("unknown scenario {other}").into()),
    };
    let ops = ops?;
    drop(b);
    drop(a);
    Ok(ops)
}

fn alloc_n(t: &ThreadHandle, size: usize, n: usize, out: &mut Vec<NonNull<u8>>) -> Result<()> {
    for _ in 0..n {
        out.push(t.alloc(size)?);
    }
    Ok(())
}

/// Allocations of 64 B in the current slab (amortizes a cached-word refill per 64).
#[inline(never)]
fn measure_local_alloc(a: &ThreadHandle, out: &mut Vec<NonNull<u8>>) -> Result<usize> {
    alloc_n(a, 64, LOCAL_BLOCKS, out)?;
    Ok(LOCAL_BLOCKS)
}

/// Frees by the owner of blocks of its current slab.
#[inline(never)]
fn measure_local_free(a: &ThreadHandle, blocks: &[NonNull<u8>]) -> Result<usize> {
    for &p in blocks {
        a.free(p)?;
    }
    Ok(blocks.len())
}

/// Remote frees of consecutive blocks of one slab (batched in the limited and no-HWcc models).
#[inline(never)]
fn measure_remote_free_batched(b: &ThreadHandle, blocks: &[NonNull<u8>]) -> Result<usize> {
    for &p in blocks {
        b.free(p)?;
    }
    Ok(blocks.len())
}

/// Remote frees that each name another slab than the last SCATTER_SLABS - 1 (in the batching
/// models, each joins the open batch of its slab: no subtraction, as no slab is completed).
#[inline(never)]
fn measure_remote_free(b: &ThreadHandle, blocks: &[NonNull<u8>]) -> Result<usize> {
    for &p in blocks {
        b.free(p)?;
    }
    Ok(blocks.len())
}

/// Allocations of 1024 B through REFILL_SLABS slab refills; one operation per slab.
#[inline(never)]
fn measure_refill(a: &ThreadHandle, out: &mut Vec<NonNull<u8>>) -> Result<usize> {
    alloc_n(a, 1024, REFILL_SLABS * 32, out)?;
    Ok(REFILL_SLABS)
}
