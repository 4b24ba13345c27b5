//! memcached trace replay on the shared KV store (docs/design.md §12.2).
//!
//! The request stream is either a deterministic synthetic trace of a Twitter cluster
//! (`cluster` = `MC-12`, `MC-15`, `MC-31` or `MC-37`, seeded with the run's seed; see
//! [`crate::trace::synthetic`]) or the first `requests` lines of a real 7-column CSV trace
//! (`trace` = its path; `requests` = 0 replays the whole file). Request `i` of the stream goes
//! to global thread `i % threads`, so every allocator sees the same stream split the same way,
//! and every thread's requests stay spread over the whole trace. Each thread reads its share
//! into memory before the start barrier: parsing and key generation are not timed.
//!
//! Operations, timed, one op per request:
//!
//! - `get`, `gets`: look the key up and check every value byte (a miss is counted).
//! - `set`: allocate `8 + value size` bytes (the 8-byte check header is there even for an
//!   empty value), fill, insert or replace; the old value is retired.
//! - `add`: store only if the key has no value.
//! - `replace`, `cas`: store only if it has one (no CAS tokens are kept: `cas` always matches).
//! - `append`, `prepend`: store a value `value size` bytes longer, only if it has one.
//! - `incr`, `decr`: store a value of the same length, only if it has one.
//! - `delete`: tombstone the key (counted as a delete when it had a value).
//!
//! TTLs are ignored: nothing expires within a replay of this length, and expiry would need a
//! clock shared by every process. After the stop barrier the table is torn down untimed.
//!
//! Parameters: `cluster` (default `MC-12`) or `trace`, `requests` (200 000), `buckets_log2`
//! (20).

use std::path::PathBuf;

use serde_json::{json, Value};

use super::kv::{Kv, KvThread, Resize, MAX_BUCKETS_LOG2};
use super::{Benchmark, Ctx, Params, Phases, Report};
use crate::allocator::{Allocator, ThreadAlloc};
use crate::shm::Carver;
use crate::trace::{self, Cluster, Generator, Op, Request};
use crate::Error;

/// Where the requests come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The synthetic trace of a cluster, seeded with the run's seed.
    Synthetic(Cluster),
    /// A real trace file in the 7-column CSV format.
    File(PathBuf),
}

/// One memcached configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Memcached {
    /// The request stream.
    pub source: Source,
    /// Requests replayed over all threads (0 = the whole file, for a trace file).
    pub requests: u64,
    /// log2 of the bucket count.
    pub buckets_log2: u32,
    /// Threads of the run.
    pub threads: usize,
}

const KNOWN: [&str; 4] = ["cluster", "trace", "requests", "buckets_log2"];

/// Reads the stream parameters (`cluster` / `trace`, `requests`).
fn source(params: &Params) -> Result<(Source, u64), Error> {
    params.only("memcached", &KNOWN)?;
    let requests = params.u64("requests", 200_000)?;
    let source = match (params.0.get("cluster"), params.0.get("trace")) {
        (Some(_), Some(_)) => return Err("memcached: give either cluster or trace, not both".into()),
        (_, Some(_)) => {
            let path = PathBuf::from(params.str("trace", "")?);
            if !path.is_file() {
                return Err(format!("memcached: trace file {} not found", path.display()).into());
            }
            Source::File(path)
        }
        (_, None) => {
            let name = params.str("cluster", "MC-12")?;
            Source::Synthetic(name.parse::<Cluster>().map_err(|e| format!("memcached: {e}"))?)
        }
    };
    if requests == 0 && matches!(source, Source::Synthetic(_)) {
        return Err("memcached: a synthetic trace needs requests ≥ 1".into());
    }
    Ok((source, requests))
}

impl Memcached {
    /// What the NDJSON line records about the trace of a run with `seed`:
    /// `{"synthetic", "cluster", "seed", "path", "requests"}` (cluster and seed are null for a
    /// file, path for a synthetic trace).
    pub fn trace_info(&self, seed: u64) -> Value {
        let requests = self.requests;
        match &self.source {
            Source::Synthetic(c) => {
                json!({ "synthetic": true, "cluster": c.name(), "seed": seed, "path": null, "requests": requests })
            }
            Source::File(p) => json!({
                "synthetic": false, "cluster": null, "seed": null, "path": p.display().to_string(), "requests": requests,
            }),
        }
    }
}

impl Benchmark for Memcached {
    fn trace(&self, seed: u64) -> Value {
        self.trace_info(seed)
    }

    fn new(params: &Params, _processes: usize, threads: usize) -> Result<Self, Error> {
        let (source, requests) = source(params)?;
        let buckets_log2 = params.u64("buckets_log2", 20)?;
        if buckets_log2 > u64::from(MAX_BUCKETS_LOG2) {
            return Err(format!("memcached: buckets_log2 must be at most {MAX_BUCKETS_LOG2}").into());
        }
        if threads == 0 {
            return Err("memcached: needs at least one thread".into());
        }
        Ok(Self { source, requests, buckets_log2: buckets_log2 as u32, threads })
    }

    fn shared_words(&self) -> usize {
        Carver::words_for(&Kv::word_sizes(self.threads, self.buckets_log2))
    }

    fn thread<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
    ) -> Result<Report, Error> {
        self.run(ctx, t, phases)
    }
}

/// Replay counts of one thread.
#[derive(Debug, Default)]
struct Counts {
    hits: u64,
    misses: u64,
    sets: u64,
    stored: u64,
    not_stored: u64,
    deletes: u64,
    delete_misses: u64,
}

impl Memcached {
    /// Thread `thread`'s requests: stream requests `i` with `i % threads == thread`.
    pub fn requests_of(&self, seed: u64, thread: usize) -> Result<Vec<Request>, Error> {
        let mine = |i: usize| i % self.threads == thread;
        match &self.source {
            Source::Synthetic(c) => Ok(Generator::new(*c, seed, self.requests)
                .enumerate()
                .filter_map(|(i, r)| mine(i).then_some(r))
                .collect()),
            Source::File(path) => {
                let limit = if self.requests == 0 { usize::MAX } else { self.requests as usize };
                let mut out = Vec::new();
                for (i, r) in trace::open(path)?.take(limit).enumerate() {
                    let r = r.map_err(|e| format!("{}: {e}", path.display()))?;
                    if mine(i) {
                        out.push(r);
                    }
                }
                Ok(out)
            }
        }
    }

    fn run<A: Allocator>(&self, ctx: &Ctx<'_, A>, t: &mut A::Thread, phases: &mut Phases<'_>) -> Result<Report, Error> {
        let shape = ctx.shape;
        if shape.threads != self.threads {
            return Err(format!("memcached: built for {} threads, run with {}", self.threads, shape.threads).into());
        }
        let requests = self.requests_of(ctx.seed, shape.thread)?;
        let kv = Kv::carve(&mut Carver::new(ctx.shared), self.threads, self.buckets_log2)?;
        let mut kt = KvThread::new(kv, ctx.handles, t, shape.thread)?;
        let mut c = Counts::default();
        phases.start()?;
        for r in &requests {
            replay(&mut kt, r, &mut c)?;
        }
        phases.stop()?;
        // Untimed tear-down: own retired values first, then (once every thread has done
        // that) this thread's buckets.
        kt.free_retired()?;
        phases.sync()?;
        kt.teardown(shape.thread, self.threads)?;
        let mut report = Report {
            ops: requests.len() as u64,
            allocated: kt.allocated,
            freed: kt.freed,
            verified: kt.verified,
            ..Report::default()
        };
        for (k, v) in [
            ("hits", c.hits),
            ("misses", c.misses),
            ("sets", c.sets),
            ("stored", c.stored),
            ("not_stored", c.not_stored),
            ("deletes", c.deletes),
            ("delete_misses", c.delete_misses),
        ] {
            report.extra.insert(k.into(), Value::from(v));
        }
        Ok(report)
    }
}

/// Replays one request.
#[inline]
fn replay<T: ThreadAlloc>(kt: &mut KvThread<'_, T>, r: &Request, c: &mut Counts) -> Result<(), Error> {
    let stored = match r.op {
        Op::Get | Op::Gets => {
            match kt.get(&r.key)? {
                Some(_) => c.hits += 1,
                None => c.misses += 1,
            }
            return Ok(());
        }
        Op::Set => {
            kt.set(&r.key, r.value_size)?;
            c.sets += 1;
            return Ok(());
        }
        Op::Delete => {
            match kt.delete(&r.key)? {
                true => c.deletes += 1,
                false => c.delete_misses += 1,
            }
            return Ok(());
        }
        Op::Add => kt.add(&r.key, r.value_size)?,
        Op::Replace | Op::Cas => kt.replace(&r.key, Resize::To(r.value_size))?,
        Op::Append | Op::Prepend => kt.replace(&r.key, Resize::Grow(r.value_size))?,
        Op::Incr | Op::Decr => kt.replace(&r.key, Resize::Keep)?,
    };
    if stored {
        c.stored += 1;
    } else {
        c.not_stored += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_parameters_are_refused() {
        for p in [
            Params::of(&[("clusters", Value::from("MC-12"))]),
            Params::of(&[("cluster", Value::from("MC-99"))]),
            Params::of(&[("cluster", Value::from("MC-12")), ("trace", Value::from("/nonexistent"))]),
            Params::of(&[("trace", Value::from("/nonexistent/trace.csv"))]),
            Params::of(&[("requests", Value::from(0))]),
            Params::of(&[("buckets_log2", Value::from(40))]),
        ] {
            assert!(Memcached::new(&p, 1, 1).is_err(), "{p:?}");
        }
    }

    #[test]
    fn trace_info_names_the_synthetic_cluster_and_seed() {
        let info = Memcached::new(&Params::of(&[("cluster", Value::from("mc37"))]), 1, 1).unwrap().trace_info(9);
        assert_eq!(info["synthetic"], true);
        assert_eq!(info["cluster"], "MC-37");
        assert_eq!(info["seed"], 9);
        assert!(info["path"].is_null());
    }

    #[test]
    fn every_request_goes_to_exactly_one_thread() {
        let m =
            Memcached::new(&Params::of(&[("cluster", Value::from("MC-15")), ("requests", Value::from(1000))]), 1, 3)
                .unwrap();
        let all: Vec<Request> = Generator::new(Cluster::Mc15, 5, 1000).collect();
        let shares: Vec<Vec<Request>> = (0..3).map(|t| m.requests_of(5, t).unwrap()).collect();
        assert_eq!(shares.iter().map(Vec::len).sum::<usize>(), 1000);
        for (i, r) in all.iter().enumerate() {
            assert_eq!(&shares[i % 3][i / 3], r);
        }
    }
}
