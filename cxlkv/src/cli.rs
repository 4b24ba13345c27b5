//! The command line: the supervisor, or (with the hidden `--worker-index`) one worker.

use std::os::fd::RawFd;
use std::process::ExitCode;

use clap::Parser;
use cxlkv::protocol::ServerInfo;
use cxlkv::store::{self, Store, Worker};
use cxlkv::{crash, server, supervisor};

/// A crash-tolerant multi-process memcached on a cxlalloc heap.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// TCP port to serve.
    #[arg(long, default_value_t = 11211)]
    port: u16,
    /// Worker processes (each one thread, all on one table).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=cxlkv::layout::MAX_WORKERS as u64))]
    workers: u64,
    /// Heap name (`/dev/shm/cxlalloc.NAME`); created with the table when absent, reused (with
    /// its data) when present.
    #[arg(long, default_value = "cxlkv")]
    heap: String,
    /// Memory limit for items and bucket arrays: bytes, or with a K/M/G suffix; 0 = none.
    /// Above it a store evicts (sampled LRU: of 5 items in the buckets from a random one on, an
    /// expired one, else the least recently read).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    memory_limit: u64,
    /// IPv4 address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    listen: String,
    /// Log2 of the bucket count (used when the table is created).
    #[arg(long, default_value_t = 20)]
    buckets_log2: u32,
    /// Internal: run as worker K (started by the supervisor).
    #[arg(long, hide = true, requires = "listen_fd")]
    worker_index: Option<usize>,
    /// Internal: the listening socket inherited from the supervisor.
    #[arg(long, hide = true)]
    listen_fd: Option<RawFd>,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().and_then(|n| n.checked_mul(mult)).ok_or_else(|| format!("'{s}' is not a size"))
}

pub(crate) fn main() -> ExitCode {
    let args = Args::parse();
    server::handle_stop_signals();
    let result = match (args.worker_index, args.listen_fd) {
        (Some(k), Some(fd)) => worker(&args, k, fd),
        _ => supervise(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cxlkv: {e}");
            ExitCode::FAILURE
        }
    }
}

fn supervise(args: &Args) -> Result<(), String> {
    let store = Store::open_or_create(&args.heap, args.buckets_log2).map_err(|e| e.to_string())?;
    store.set_memory_limit(args.memory_limit);
    // Thread slots left by processes of an earlier run that died (a worker's slot is adopted
    // by its next holder anyway; this also covers any other dead user of the heap).
    for r in store.heap().recover_dead() {
        eprintln!("cxlkv: recovered thread slot {} of a dead process", r.slot);
    }
    // Worker indexes this run will not start, used by an earlier run: one that died in a write
    // (or pinned) would hold the epoch back for good. Recover each here and let it go.
    for k in args.workers as usize..cxlkv::layout::MAX_WORKERS {
        let used = store.record(k).is_ok_and(|r| r.pid.load(std::sync::atomic::Ordering::Relaxed) != 0);
        if used {
            let (w, rec) = Worker::start(&store, k).map_err(|e| format!("recovering worker index {k}: {e}"))?;
            if rec != Default::default() {
                eprintln!("cxlkv: recovered unused worker index {k}: {rec:?}");
            }
            w.finish().map_err(|e| e.to_string())?;
        }
    }
    let fd = server::bind(&args.listen, args.port)?;
    let o = supervisor::Options {
        listen: args.listen.clone(),
        port: args.port,
        workers: args.workers as usize,
        heap: args.heap.clone(),
        buckets_log2: args.buckets_log2,
    };
    eprintln!("cxlkv: serving {}:{} with {} workers on heap {}", args.listen, args.port, args.workers, args.heap);
    supervisor::run(&o, &store, fd)
}

fn worker(args: &Args, k: usize, fd: RawFd) -> Result<(), String> {
    // The worker follows its supervisor: SIGTERM when it dies.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number; no memory is involved.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
    crash::arm_from_env()?;
    let store = Store::open_or_create(&args.heap, args.buckets_log2).map_err(|e| e.to_string())?;
    let (mut w, rec) = Worker::start(&store, k).map_err(|e| format!("worker {k}: {e}"))?;
    if rec != Default::default() {
        eprintln!("cxlkv: worker {k} recovered its index: {rec:?}");
    }
    let info = ServerInfo { started: store::now(), workers: args.workers as usize };
    server::serve(&mut w, fd, info)?;
    w.finish().map_err(|e| e.to_string())
}
