//! YCSB on the shared KV store (docs/design.md §12.2): 8-byte keys (the record id, little-endian),
//! `value_size`-byte values (default 960) behind an 8-byte check header, zipfian constant
//! `zipf` (default 0.99).
//!
//! Workloads (`workload`):
//!
//! - `load`: the timed phase inserts `records` keys, ids split into contiguous ranges over all
//!   threads. An op is one insert.
//! - `a`: `records` keys are preloaded untimed (split the same way), then `ops` operations in
//!   all (split evenly over threads): 50 % read, 25 % insert, 25 % delete. Reads and deletes
//!   pick keys by YCSB's scrambled zipfian: a zipfian rank over a fixed range of
//!   `records + 2 × expected inserts` (YCSB's sizing), hashed into that range so hot keys are
//!   spread over every thread's preload range, and redrawn while it names a key not inserted
//!   yet.
//! - `d`: preload, then 95 % read / 5 % insert; reads pick by YCSB's "latest": the newest key
//!   id minus a zipfian rank over the current key count (ζ grows incrementally as keys are
//!   added).
//!
//! Inserts (`insert`): `new` (default) inserts a fresh key whose id comes from a counter in
//! the control area shared by every process; `overwrite` stores a fresh value under a key
//! picked like a read. The published harness changed between the two, so the mode is recorded
//! in the NDJSON line (`extra.insert`).
//!
//! A read checks every value byte and the value's length; a read of a deleted or not yet
//! inserted key is a miss. Each thread's operation stream is a function of the run's seed and
//! its global thread id. After the stop barrier the table is torn down untimed (see
//! [`super::kv`]).
//!
//! Parameters: `workload` (`load`/`a`/`d`, default `a`), `records` (100 000), `ops`
//! (200 000), `value_size` (960), `key_size` (only 8), `zipf` (0.99), `insert`
//! (`new`/`overwrite`), `buckets_log2` (20; the paper used 25).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::kv::dist::{mix64, stream_seed, Rng, Zipfian};
use super::kv::{Kv, KvThread, MAX_BUCKETS_LOG2};
use super::{Benchmark, Ctx, Params, Phases, Report};
use crate::allocator::{Allocator, ThreadAlloc};
use crate::shm::Carver;
use crate::Error;

/// Workload A's read share.
const A_READ: f64 = 0.50;
/// Workload A's insert share (the rest are deletes).
const A_INSERT: f64 = 0.25;
/// Workload D's read share (the rest are inserts).
const D_READ: f64 = 0.95;
/// Redraws of a scrambled zipfian key beyond the inserted range before falling back to a
/// uniform pick (only reachable when far fewer keys exist than the range was sized for).
const MAX_REDRAWS: u32 = 64;

/// Which YCSB workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Inserts only, timed.
    Load,
    /// 50 % read, 25 % insert, 25 % delete, zipfian.
    A,
    /// 95 % read, 5 % insert, latest.
    D,
}

impl Workload {
    /// The parameter value naming it.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Load => "load",
            Workload::A => "a",
            Workload::D => "d",
        }
    }
}

/// What an insert stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertMode {
    /// A fresh key from the shared id counter.
    New,
    /// A fresh value under an existing key, picked like a read.
    Overwrite,
}

impl InsertMode {
    /// The parameter value naming it.
    pub fn name(self) -> &'static str {
        match self {
            InsertMode::New => "new",
            InsertMode::Overwrite => "overwrite",
        }
    }
}

/// One YCSB configuration.
#[derive(Clone, Debug)]
pub struct Ycsb {
    /// The workload.
    pub workload: Workload,
    /// Keys loaded (timed for `load`, untimed preload otherwise).
    pub records: u64,
    /// Timed operations over all threads (`a`, `d`).
    pub ops: u64,
    /// Value body bytes.
    pub value_size: u32,
    /// Zipfian constant.
    pub zipf: f64,
    /// What inserts do.
    pub insert: InsertMode,
    /// log2 of the bucket count.
    pub buckets_log2: u32,
    /// Threads of the run.
    pub threads: usize,
    /// Workload A's key chooser: zipfian ranks over the fixed scramble range.
    scrambled: Option<Zipfian>,
    /// Workload D's rank distribution, over the preloaded keys (grown per thread).
    latest: Option<Zipfian>,
}

/// Thread `i`'s share of `total` items over `n` threads: (first index, count); contiguous,
/// the first `total % n` threads get one more.
fn share(total: u64, n: usize, i: usize) -> (u64, u64) {
    let (n, i) = (n as u64, i as u64);
    let count = total / n + u64::from(i < total % n);
    (i * (total / n) + i.min(total % n), count)
}

/// The key of record `id`.
#[inline]
fn key(id: u64) -> [u8; 8] {
    id.to_le_bytes()
}

impl Benchmark for Ycsb {
    fn new(params: &Params, _processes: usize, threads: usize) -> Result<Self, Error> {
        params.only(
            "ycsb",
            &["workload", "records", "ops", "value_size", "key_size", "zipf", "insert", "buckets_log2"],
        )?;
        let workload = match params.str("workload", "a")? {
            "load" => Workload::Load,
            "a" | "A" => Workload::A,
            "d" | "D" => Workload::D,
            other => return Err(format!("ycsb: workload must be load, a or d, got {other:?}").into()),
        };
        let insert = match params.str("insert", "new")? {
            "new" => InsertMode::New,
            "overwrite" => InsertMode::Overwrite,
            other => return Err(format!("ycsb: insert must be new or overwrite, got {other:?}").into()),
        };
        if params.u64("key_size", 8)? != 8 {
            return Err("ycsb: key_size is fixed at 8 bytes (the record id)".into());
        }
        let records = params.u64("records", 100_000)?;
        if records == 0 {
            return Err("ycsb: records must be at least 1".into());
        }
        let ops = params.u64("ops", 200_000)?;
        let value_size = u32::try_from(params.u64("value_size", 960)?).map_err(|_| "ycsb: value_size above 4 GiB")?;
        let zipf = params.f64("zipf", 0.99)?;
        if !(0.0..1.0).contains(&zipf) {
            return Err(format!("ycsb: zipf must be in [0, 1), got {zipf}").into());
        }
        let buckets_log2 = params.u64("buckets_log2", 20)?;
        if buckets_log2 > u64::from(MAX_BUCKETS_LOG2) {
            return Err(format!("ycsb: buckets_log2 must be at most {MAX_BUCKETS_LOG2}").into());
        }
        if threads == 0 {
            return Err("ycsb: needs at least one thread".into());
        }
        let scrambled = match workload {
            Workload::A => Some(Zipfian::new(records + expected_new_keys(ops, insert), zipf)?),
            _ => None,
        };
        let latest = match workload {
            Workload::D => Some(Zipfian::new(records, zipf)?),
            _ => None,
        };
        Ok(Self {
            workload,
            records,
            ops,
            value_size,
            zipf,
            insert,
            buckets_log2: buckets_log2 as u32,
            threads,
            scrambled,
            latest,
        })
    }

    fn shared_words(&self) -> usize {
        let [a, b, c] = Kv::word_sizes(self.threads, self.buckets_log2);
        Carver::words_for(&[a, b, c, 1])
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

/// Inserts YCSB sizes its key range for: twice the expected number (YCSB's `expectednewkeys`).
fn expected_new_keys(ops: u64, insert: InsertMode) -> u64 {
    match insert {
        InsertMode::New => (ops as f64 * A_INSERT * 2.0) as u64,
        InsertMode::Overwrite => 0,
    }
}

/// Operation counts of one thread.
#[derive(Debug, Default)]
struct Counts {
    reads: u64,
    hits: u64,
    inserts: u64,
    deletes: u64,
    deleted: u64,
}

/// One thread's key choosers and the shared id counter.
struct Keys<'a> {
    rng: Rng,
    next_id: &'a AtomicU64,
    records: u64,
    scrambled: Option<Zipfian>,
    latest: Option<Zipfian>,
}

impl Keys<'_> {
    /// Keys whose ids have been handed out (preloaded or claimed by an insert).
    fn count(&self) -> u64 {
        // Relaxed: a count slightly behind only changes which key is picked.
        self.records + self.next_id.load(Ordering::Relaxed)
    }

    /// A fresh key id, unique over every thread of every process.
    fn fresh(&self) -> u64 {
        // Relaxed: only uniqueness matters, which the RMW gives.
        self.records + self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Workload A's pick: scrambled zipfian, redrawn while beyond the keys handed out.
    fn zipfian(&mut self) -> u64 {
        let count = self.count();
        if let Some(z) = &self.scrambled {
            for _ in 0..MAX_REDRAWS {
                let id = mix64(z.next(&mut self.rng)) % z.items();
                if id < count {
                    return id;
                }
            }
        }
        self.rng.below(count)
    }

    /// Workload D's pick: the newest key minus a zipfian rank.
    fn latest(&mut self) -> u64 {
        let count = self.count();
        match &mut self.latest {
            Some(z) => {
                z.grow(count);
                count - 1 - z.next(&mut self.rng).min(count - 1)
            }
            None => self.rng.below(count),
        }
    }
}

impl Ycsb {
    fn run<A: Allocator>(&self, ctx: &Ctx<'_, A>, t: &mut A::Thread, phases: &mut Phases<'_>) -> Result<Report, Error> {
        let shape = ctx.shape;
        if shape.threads != self.threads {
            return Err(format!("ycsb: built for {} threads, run with {}", self.threads, shape.threads).into());
        }
        let mut carver = Carver::new(ctx.shared);
        let kv = Kv::carve(&mut carver, self.threads, self.buckets_log2)?;
        let next_id = &carver.take(1)?[0];
        let mut kt = KvThread::new(kv, ctx.handles, t, shape.thread)?;
        let mut keys = Keys {
            rng: Rng::new(stream_seed(ctx.seed, shape.thread)),
            next_id,
            records: self.records,
            scrambled: self.scrambled.clone(),
            latest: self.latest.clone(),
        };
        let mut c = Counts::default();
        let (first, mine) = share(self.records, self.threads, shape.thread);
        let ops = if self.workload == Workload::Load {
            phases.start()?;
            for id in first..first + mine {
                kt.set(&key(id), self.value_size)?;
            }
            phases.stop()?;
            c.inserts = mine;
            mine
        } else {
            for id in first..first + mine {
                kt.set(&key(id), self.value_size)?;
            }
            let (_, ops) = share(self.ops, self.threads, shape.thread);
            phases.start()?;
            for _ in 0..ops {
                self.op(&mut kt, &mut keys, &mut c)?;
            }
            phases.stop()?;
            ops
        };
        // Untimed tear-down: own retired values first, then (once every thread has done
        // that) this thread's buckets.
        kt.free_retired()?;
        phases.sync()?;
        kt.teardown(shape.thread, self.threads)?;
        let mut report =
            Report { ops, allocated: kt.allocated, freed: kt.freed, verified: kt.verified, ..Report::default() };
        let extra = &mut report.extra;
        extra.insert("workload".into(), Value::from(self.workload.name()));
        extra.insert("insert".into(), Value::from(self.insert.name()));
        extra.insert("reads".into(), Value::from(c.reads));
        extra.insert("read_hits".into(), Value::from(c.hits));
        extra.insert("read_misses".into(), Value::from(c.reads - c.hits));
        extra.insert("inserts".into(), Value::from(c.inserts));
        extra.insert("deletes".into(), Value::from(c.deletes));
        extra.insert("deletes_found".into(), Value::from(c.deleted));
        Ok(report)
    }

    /// One timed operation of workload A or D.
    #[inline]
    fn op<T: ThreadAlloc>(&self, kt: &mut KvThread<'_, T>, keys: &mut Keys<'_>, c: &mut Counts) -> Result<(), Error> {
        let u = keys.rng.next_f64();
        let (read, insert) = match self.workload {
            Workload::A => (u < A_READ, u < A_READ + A_INSERT),
            _ => (u < D_READ, true),
        };
        let pick = |keys: &mut Keys<'_>| if self.workload == Workload::A { keys.zipfian() } else { keys.latest() };
        if read {
            c.reads += 1;
            if let Some(len) = kt.get(&key(pick(keys)))? {
                if len != self.value_size {
                    return Err(format!("ycsb: read a {len}-byte value, all are {} bytes", self.value_size).into());
                }
                c.hits += 1;
            }
        } else if insert {
            c.inserts += 1;
            let id = match self.insert {
                InsertMode::New => keys.fresh(),
                InsertMode::Overwrite => pick(keys),
            };
            kt.set(&key(id), self.value_size)?;
        } else {
            c.deletes += 1;
            c.deleted += u64::from(kt.delete(&key(pick(keys)))?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_range_contiguously() {
        let parts: Vec<_> = (0..3).map(|i| share(10, 3, i)).collect();
        assert_eq!(parts, [(0, 4), (4, 3), (7, 3)]);
    }

    #[test]
    fn defaults_follow_the_paper_except_the_scale() {
        let y = Ycsb::new(&Params::default(), 1, 2).unwrap();
        assert_eq!(
            (y.workload, y.records, y.ops, y.value_size, y.insert),
            (Workload::A, 100_000, 200_000, 960, InsertMode::New)
        );
        assert_eq!((y.zipf, y.buckets_log2), (0.99, 20));
        assert_eq!(y.scrambled.as_ref().map(Zipfian::items), Some(200_000));
    }

    #[test]
    fn bad_values_are_refused() {
        for (k, v) in [
            ("workload", Value::from("b")),
            ("insert", Value::from("upsert")),
            ("key_size", Value::from(16)),
            ("zipf", Value::from(1.0)),
            ("records", Value::from(0)),
            ("buckets_log2", Value::from(31)),
        ] {
            assert!(Ycsb::new(&Params::of(&[(k, v.clone())]), 1, 1).is_err(), "{k} = {v}");
        }
    }
}
