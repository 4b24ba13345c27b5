//! xmalloc (docs/design.md §12.2): even global threads produce, odd ones consume, through one shared
//! bounded LIFO of containers; every object is freed by a thread other than the one that
//! allocated it — in another process when the two run in different ones.
//!
//! A container is one allocated block of [`CONTAINER_BYTES`]: word 0 a key naming the producer,
//! phase and sequence number, words 1..=120 the handles of its [`OBJECTS_PER_CONTAINER`]
//! objects. Object sizes are drawn uniformly from [`SIZES`] by a random stream seeded with
//! (`seed`, key), so the consumer re-derives every size from the key instead of carrying it. A
//! producer allocates the objects, stamps each (the first `min(size, 64)` bytes, see
//! [`stress::write_stamp`]), fills a container and pushes its handle onto the LIFO
//! ([`Lifo`], at most [`LIFO_LIMIT`] containers; a producer waits while it is full). A
//! consumer pops a container from any producer, verifies every object's stamp, frees the
//! objects and the container.
//!
//! Work is fixed across thread counts: `containers` timed containers split evenly over the
//! producers. An untimed warm-up (`warmup_containers`, default 1/20 of that and at least one per
//! producer) runs the same way before the start barrier, so every allocator is timed warm.
//! Termination: each producer adds one to the phase's `done` word after its last push;
//! a consumer leaves once it has seen every producer done and then found the LIFO empty.
//!
//! **An op** is one object allocation (counted by producers) or one object free (counted by
//! consumers), in the timed phase — each object contributes two, as in the earlier in-process
//! module. Containers are transport and not counted as ops, but are counted in
//! `allocated`/`freed`. `verified` counts objects whose stamp read back.
//!
//! Parameters: `containers` (default 20 000), `warmup_containers` (default above), `seed`
//! (size streams; default the configuration's seed). Needs at least 2 threads.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::queue::Lifo;
use super::stress::{self, share, Backoff, Rng};
use super::{Benchmark, Ctx, Params, Phases, Report};
use crate::allocator::{Allocator, Handles, ThreadAlloc};
use crate::shm::Carver;
use crate::Error;

/// The object sizes, drawn uniformly.
pub const SIZES: [usize; 14] = [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768];

/// Objects per container.
pub const OBJECTS_PER_CONTAINER: usize = 120;

/// Bytes of a container block: the key word, then one handle word per object.
pub const CONTAINER_BYTES: usize = 8 * (1 + OBJECTS_PER_CONTAINER);

// A container is a small block in cxlalloc (up to 1 KiB), like the objects it carries.
const _: () = assert!(CONTAINER_BYTES <= 1024);

/// Containers the LIFO holds at most; producers wait beyond it.
pub const LIFO_LIMIT: usize = 100;

/// One xmalloc configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xmalloc {
    /// Threads in the run, over all processes.
    pub threads: usize,
    /// Timed containers, over all producers.
    pub containers: u64,
    /// Untimed warm-up containers, over all producers.
    pub warmup_containers: u64,
    /// Seed of the size streams; `None`: the configuration's seed.
    pub seed: Option<u64>,
}

/// The sizes of one container's objects, in order: the stream its key names.
fn sizes(seed: u64, key: u64) -> impl Iterator<Item = usize> {
    let mut rng = Rng::new(seed, key);
    std::iter::repeat_with(move || SIZES[rng.below(SIZES.len() as u64) as usize])
}

/// A container's key: bit 63 the phase (1 = timed), bits 32..63 the producer's number, bits
/// 0..32 its sequence number in the phase. Only ever used as a stream number, never decoded.
fn container_key(timed: bool, producer: usize, seq: u64) -> u64 {
    u64::from(timed) << 63 | (producer as u64) << 32 | seq
}

/// This benchmark's control-area words, carved the same way in every process.
struct Shared<'a> {
    /// The run's abort word ([`Phases::abort_word`]); ends every wait.
    abort: &'a AtomicU64,
    /// Producers done, per phase (0 warm-up, 1 timed).
    done: &'a [AtomicU64],
    lifo: Lifo<'a>,
}

const LAYOUT: [usize; 2] = [2, Lifo::words(LIFO_LIMIT)];

impl<'a> Shared<'a> {
    fn carve(words: &'a [AtomicU64], abort: &'a AtomicU64) -> Result<Self, Error> {
        let mut c = Carver::new(words);
        let done = c.take(LAYOUT[0])?;
        let lifo = Lifo::new(c.take(LAYOUT[1])?, abort)?;
        Ok(Self { abort, done, lifo })
    }
}

/// What one thread does in one phase.
struct Phase<'s, 'a> {
    shared: &'s Shared<'a>,
    handles: Handles,
    seed: u64,
    producers: usize,
    timed: bool,
}

impl Benchmark for Xmalloc {
    fn new(params: &Params, _processes: usize, threads: usize) -> Result<Self, Error> {
        params.only("xmalloc", &["containers", "warmup_containers", "seed"])?;
        if threads < 2 {
            return Err(format!("xmalloc needs at least 2 threads (a producer and a consumer), got {threads}").into());
        }
        let producers = threads.div_ceil(2) as u64;
        let containers = params.u64("containers", 20_000)?;
        if containers == 0 {
            return Err("xmalloc: containers must be at least 1".into());
        }
        let warmup_containers = params.u64("warmup_containers", (containers / 20).max(producers))?;
        if containers.max(warmup_containers).div_ceil(producers) >= 1 << 32 {
            return Err("xmalloc: more than 2^32 containers per producer".into());
        }
        let seed = params.0.contains_key("seed").then(|| params.u64("seed", 0)).transpose()?;
        Ok(Self { threads, containers, warmup_containers, seed })
    }

    fn shared_words(&self) -> usize {
        Carver::words_for(&LAYOUT)
    }

    fn thread<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
    ) -> Result<Report, Error> {
        let shared = Shared::carve(ctx.shared, phases.abort_word())?;
        self.run(ctx, &shared, t, phases)
    }
}

impl Xmalloc {
    /// Producer threads (the even-numbered ones).
    pub fn producers(&self) -> usize {
        self.threads.div_ceil(2)
    }

    /// Objects allocated (and freed) in the timed phase.
    pub fn objects(&self) -> u64 {
        self.containers * OBJECTS_PER_CONTAINER as u64
    }

    fn run<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        shared: &Shared<'_>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
    ) -> Result<Report, Error> {
        let thread = ctx.shape.thread;
        let producer = (thread % 2 == 0).then_some(thread / 2);
        let mut report = Report::default();
        let mut waits = 0;
        let phase = |timed| Phase {
            shared,
            handles: ctx.handles,
            seed: self.seed.unwrap_or(ctx.seed),
            producers: self.producers(),
            timed,
        };
        let mut work = |timed: bool, total: u64, report: &mut Report| match producer {
            Some(j) => phase(timed).produce(t, j, share(total, self.producers(), j), report, &mut waits),
            None => phase(timed).consume(t, report, &mut waits),
        };
        work(false, self.warmup_containers, &mut report)?;
        phases.start()?;
        let containers = work(true, self.containers, &mut report)?;
        phases.stop()?;
        // Every container moves whole: its objects are the phase's allocations or frees.
        report.ops = containers * OBJECTS_PER_CONTAINER as u64;
        let role = if producer.is_some() { "producer" } else { "consumer" };
        report.extra.insert("role".into(), Value::from(role));
        report.extra.insert("containers".into(), Value::from(containers));
        report.extra.insert("waits".into(), Value::from(waits));
        Ok(report)
    }
}

impl Phase<'_, '_> {
    fn done(&self) -> &AtomicU64 {
        &self.shared.done[usize::from(self.timed)]
    }

    /// Producer `j`: fills and pushes `n` containers; returns `n`.
    fn produce<T: ThreadAlloc>(
        &self,
        t: &mut T,
        j: usize,
        n: u64,
        report: &mut Report,
        waits: &mut u64,
    ) -> Result<u64, Error> {
        let mut backoff = Backoff::new(self.shared.abort);
        for seq in 0..n {
            let c = self.fill(t, container_key(self.timed, j, seq), report)?;
            let h = self.handles.handle(c);
            backoff.reset();
            loop {
                match self.shared.lifo.try_push(h) {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => return Err(self.give_up(t, c, report, e)),
                }
                if let Err(e) = backoff.snooze() {
                    return Err(self.give_up(t, c, report, e));
                }
            }
            *waits += u64::from(backoff.waited());
        }
        // Release: every push above happens before a consumer sees this producer done; pairs
        // with the Acquire in `consume`.
        self.done().fetch_add(1, Ordering::Release);
        Ok(n)
    }

    /// Frees an unpushed container on the way out of a failed producer (best effort: the
    /// original error is what gets reported).
    fn give_up<T: ThreadAlloc>(&self, t: &mut T, c: NonNull<u8>, report: &mut Report, e: Error) -> Error {
        let _ = self.free_objects(t, c, OBJECTS_PER_CONTAINER, false, report);
        e
    }

    /// Pops, verifies and frees containers until every producer is done and the LIFO is
    /// empty; returns the number of containers.
    fn consume<T: ThreadAlloc>(&self, t: &mut T, report: &mut Report, waits: &mut u64) -> Result<u64, Error> {
        let mut backoff = Backoff::new(self.shared.abort);
        let mut containers = 0;
        loop {
            // Read before popping. Acquire: pairs with the producers' Release, so once all are
            // seen done their pushes are visible, and an empty LIFO stays empty.
            let all_done = self.done().load(Ordering::Acquire) >= self.producers as u64;
            match self.shared.lifo.try_pop()? {
                Some(h) => {
                    *waits += u64::from(backoff.waited());
                    backoff.reset();
                    let c = self.handles.block(h).ok_or("LIFO held handle 0")?;
                    self.empty(t, c, report)?;
                    containers += 1;
                }
                None if all_done => return Ok(containers),
                None => backoff.snooze()?,
            }
        }
    }

    /// Allocates a container with key `key` and its objects, stamping each; on failure frees
    /// what it had allocated.
    fn fill<T: ThreadAlloc>(&self, t: &mut T, key: u64, report: &mut Report) -> Result<NonNull<u8>, Error> {
        let c = t.alloc(CONTAINER_BYTES)?;
        report.allocated += 1;
        let words = c.as_ptr().cast::<u64>();
        // SAFETY: the container is `CONTAINER_BYTES` bytes and ours; blocks of 8 bytes or more
        // are 8-aligned.
        unsafe { words.write(key) };
        for (k, size) in sizes(self.seed, key).take(OBJECTS_PER_CONTAINER).enumerate() {
            let p = match t.alloc(size) {
                Ok(p) => p,
                Err(e) => {
                    // Free the first `k` objects, then the container.
                    let _ = self.free_objects(t, c, k, false, report);
                    return Err(e);
                }
            };
            report.allocated += 1;
            let h = self.handles.handle(p);
            // SAFETY: the block is `size` bytes and ours until a consumer frees it.
            unsafe { stress::write_stamp(p, h, size) };
            // SAFETY: word `1 + k` lies within the container.
            unsafe { words.add(1 + k).write(h) };
        }
        Ok(c)
    }

    /// Verifies and frees every object of container `c`, then `c`.
    fn empty<T: ThreadAlloc>(&self, t: &mut T, c: NonNull<u8>, report: &mut Report) -> Result<(), Error> {
        self.free_objects(t, c, OBJECTS_PER_CONTAINER, true, report)
    }

    /// Frees the first `n` objects of container `c` (verifying their stamps if `verify`), then
    /// `c`. On a failed check the remaining objects and the container are left allocated: they
    /// may be what is corrupt.
    fn free_objects<T: ThreadAlloc>(
        &self,
        t: &mut T,
        c: NonNull<u8>,
        n: usize,
        verify: bool,
        report: &mut Report,
    ) -> Result<(), Error> {
        let words = c.as_ptr().cast::<u64>();
        // SAFETY: a live container (ours, or popped from the LIFO, whose lock ordered the
        // producer's writes before this read); 8-aligned as in `fill`.
        let key = unsafe { words.read() };
        for (k, size) in sizes(self.seed, key).take(n).enumerate() {
            // SAFETY: word `1 + k` lies within the container.
            let h = unsafe { words.add(1 + k).read() };
            let p = self.handles.block(h).ok_or("a container held handle 0")?;
            // SAFETY: a live object of `size` bytes (its size re-derived from the key).
            if verify && !unsafe { stress::check_stamp(p, h, size) } {
                return Err(stress::corrupt(h, size));
            }
            report.verified += u64::from(verify);
            // SAFETY: allocated with `size` by the container's producer, handed over with the
            // container, freed exactly once here.
            unsafe { t.free(p, size)? };
            report.freed += 1;
        }
        // SAFETY: allocated with `CONTAINER_BYTES` in `fill`; its objects are gone.
        unsafe { t.free(c, CONTAINER_BYTES)? };
        report.freed += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_warm_up_follow_the_producer_count() {
        let x = Xmalloc::new(&Params::default(), 1, 4).unwrap();
        assert_eq!((x.containers, x.warmup_containers, x.producers(), x.seed), (20_000, 1000, 2, None));
        let tiny = Xmalloc::new(&Params::of(&[("containers", 10), ("seed", 3)]), 1, 6).unwrap();
        assert_eq!((tiny.warmup_containers, tiny.seed), (3, Some(3)));
    }

    #[test]
    fn one_thread_zero_containers_and_unknown_parameters_are_refused() {
        assert!(Xmalloc::new(&Params::default(), 1, 1).unwrap_err().to_string().contains("2 threads"));
        assert!(Xmalloc::new(&Params::of(&[("containers", 0)]), 1, 2).is_err());
        assert!(Xmalloc::new(&Params::of(&[("container", 5)]), 1, 2).is_err());
    }

    #[test]
    fn sizes_come_from_the_list_and_depend_only_on_the_key() {
        let drawn: Vec<usize> = sizes(1, container_key(true, 3, 9)).take(10_000).collect();
        assert!(drawn.iter().all(|s| SIZES.contains(s)));
        assert!(SIZES.iter().all(|s| drawn.contains(s)), "every size occurs");
        assert_eq!(drawn[..50], sizes(1, container_key(true, 3, 9)).take(50).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn container_keys_differ_by_phase_producer_and_sequence() {
        let keys = [
            container_key(false, 0, 0),
            container_key(true, 0, 0),
            container_key(false, 1, 0),
            container_key(false, 0, 1),
        ];
        for (i, a) in keys.iter().enumerate() {
            assert!(keys[i + 1..].iter().all(|b| a != b));
        }
    }
}
