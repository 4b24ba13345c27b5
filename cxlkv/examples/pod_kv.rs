//! The KV store across a pod (`script/pod.sh`, pod test 2): one cxlkv table in one heap device,
//! a worker on every host (QEMU guests and the machine itself), running YCSB workload A (half
//! reads, half updates, Zipf-like skew) over one shared key space. Every value names its key
//! and version and its body is a pattern of both, so every read checks the bytes another host
//! wrote. Exits 0 only if every check held; a failed check says why on stderr. Not a benchmark.
//!
//! ```text
//! pod_kv DEVICE load KEYS             worker 0 sets keys 0..KEYS (version 0)
//! pod_kv DEVICE ycsb-a K KEYS SECS    worker index K runs YCSB A for SECS seconds, checking every
//!                                      value it reads; prints "ops N reads R updates U"
//! pod_kv DEVICE verify KEYS           every key is present and holds a well-formed value
//! pod_kv DEVICE drain KEYS            deletes every key and lets the epoch free the values
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use cxlalloc::Heap;
use cxlkv::store::{Mode, Store, Worker};

type Res<T> = Result<T, String>;

/// Buckets of the pod's table: small, the key space is small.
const BUCKETS_LOG2: u32 = 10;

/// The value of `key` at `version`: key, version, then a body of 64..1024 bytes whose every byte
/// depends on both.
fn value(key: u64, version: u64) -> Vec<u8> {
    let len = 64 + ((key * 131 + version * 17) % 960) as usize;
    let mut v = Vec::with_capacity(16 + len);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend((0..len).map(|i| (key.wrapping_mul(31) ^ version.wrapping_mul(7)).wrapping_add(i as u64) as u8));
    v
}

/// Whether `data` is a value [`value`] wrote for `key` (any version).
fn check_value(key: u64, data: &[u8]) -> Res<()> {
    let word = |at: usize| data.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let (Some(k), Some(version)) = (word(0), word(8)) else {
        return Err(format!("key {key}: value of {} bytes is too short", data.len()));
    };
    if k != key || value(key, version) != data {
        return Err(format!("key {key}: value (key {k}, version {version}, {} bytes) is corrupt", data.len()));
    }
    Ok(())
}

fn key_bytes(key: u64) -> Vec<u8> {
    format!("pod-key-{key}").into_bytes()
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Res<T> {
    args.get(i).and_then(|a| a.parse().ok()).ok_or_else(|| format!("argument {i}: {what} expected"))
}

/// A key drawn with YCSB's skew, approximated: 80 % of draws go to the first fifth of the keys.
fn draw(rng: &mut u64, keys: u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let hot = (keys / 5).max(1);
    if *rng % 10 < 8 {
        (*rng >> 8) % hot
    } else {
        (*rng >> 8) % keys
    }
}

fn get(w: &mut Worker<'_>, key: u64) -> Res<Option<Res<()>>> {
    w.get(&key_bytes(key), |it| check_value(key, it.data)).map_err(|e| format!("get {key}: {e}"))
}

fn set(w: &mut Worker<'_>, key: u64, version: u64) -> Res<()> {
    w.store_item(Mode::Set, &key_bytes(key), 0, 0, &value(key, version)).map_err(|e| format!("set {key}: {e}"))?;
    Ok(())
}

fn ycsb_a(store: &Store, k: usize, keys: u64, secs: u64) -> Res<()> {
    let (mut w, _) = Worker::start(store, k).map_err(|e| format!("worker {k}: {e}"))?;
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ (k as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let (mut reads, mut updates, mut version) = (0u64, 0u64, (k as u64) << 40);
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        for _ in 0..64 {
            let key = draw(&mut rng, keys);
            if rng & 1 == 0 {
                get(&mut w, key)?.ok_or_else(|| format!("key {key} missing"))??;
                reads += 1;
            } else {
                version += 1;
                set(&mut w, key, version)?;
                updates += 1;
            }
        }
    }
    w.finish().map_err(|e| format!("finish: {e}"))?;
    println!("worker {k}: ops {} reads {reads} updates {updates} in {secs} s", reads + updates);
    Ok(())
}

fn run(args: &[String]) -> Res<()> {
    let device = args.get(1).ok_or("usage: pod_kv DEVICE COMMAND ...")?;
    let heap = Heap::open_device(Path::new(device)).map_err(|e| format!("open {device}: {e}"))?;
    let store = Store::on_heap(heap, BUCKETS_LOG2).map_err(|e| format!("table: {e}"))?;
    match args.get(2).map(String::as_str) {
        Some("load") => {
            let keys: u64 = arg(args, 3, "keys")?;
            let (mut w, _) = Worker::start(&store, 0).map_err(|e| format!("worker 0: {e}"))?;
            (0..keys).try_for_each(|key| set(&mut w, key, 0))?;
            w.finish().map_err(|e| format!("finish: {e}"))?;
            println!("loaded {keys} keys");
        }
        Some("ycsb-a") => {
            ycsb_a(&store, arg(args, 3, "worker index")?, arg(args, 4, "keys")?, arg(args, 5, "seconds")?)?
        }
        Some("verify") => {
            let keys: u64 = arg(args, 3, "keys")?;
            let (mut w, _) = Worker::start(&store, 0).map_err(|e| format!("worker 0: {e}"))?;
            for key in 0..keys {
                get(&mut w, key)?.ok_or_else(|| format!("key {key} missing"))??;
            }
            w.finish().map_err(|e| format!("finish: {e}"))?;
            println!("verified {keys} keys");
        }
        Some("drain") => {
            let keys: u64 = arg(args, 3, "keys")?;
            let (mut w, _) = Worker::start(&store, 0).map_err(|e| format!("worker 0: {e}"))?;
            for key in 0..keys {
                if !w.delete(&key_bytes(key)).map_err(|e| format!("delete {key}: {e}"))? {
                    return Err(format!("key {key} missing at drain"));
                }
            }
            w.finish().map_err(|e| format!("finish: {e}"))?;
            println!("drained {keys} keys");
        }
        other => return Err(format!("unknown command {other:?}")),
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pod_kv: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
