//! huge (docs/design.md §12.2): threadtest and xmalloc with very large objects (1 GiB by default).
//!
//! `mode = "threadtest"`: each thread repeatedly allocates one object, stamps it and frees it.
//! `mode = "xmalloc"`: even threads allocate and stamp objects and pass their handles through
//! the shared LIFO; odd threads pop, verify and free them — across processes when P > 1, which
//! needs an allocator whose large objects are shared (cxlalloc's huge heap, Boost).
//!
//! A stamp is the first 64 bytes plus one word per 4 KiB page ([`stress::write_stamp`]), so
//! every page of the object is faulted in — the cost that dominates objects this size and that
//! a huge heap must make cheap. An op is one object allocated and freed.
//!
//! Parameters: `mode` (default "threadtest"), `size_mib` (default 1024), `objects` (total over
//! all threads for threadtest, over producers for xmalloc; default 8).

use std::sync::atomic::AtomicU64;

use super::queue::Lifo;
use super::stress::{self, share, Backoff};
use super::{Benchmark, Ctx, Params, Phases, Report};
use crate::allocator::{Allocator, Handles, ThreadAlloc};
use crate::shm::Carver;
use crate::Error;

/// Objects in flight between producers and consumers at most.
const LIFO_LIMIT: usize = 4;

/// What the threads do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Allocate, stamp, free, on each thread.
    Threadtest,
    /// Producers allocate and stamp, consumers verify and free.
    Xmalloc,
}

/// One huge configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Huge {
    /// What the threads do.
    pub mode: Mode,
    /// Bytes per object.
    pub size: usize,
    /// Objects, over all threads (threadtest) or producers (xmalloc).
    pub objects: u64,
    /// Threads in the run.
    pub threads: usize,
}

const LAYOUT: [usize; 2] = [1, Lifo::words(LIFO_LIMIT)];

struct Shared<'a> {
    /// The run's abort word ([`Phases::abort_word`]).
    abort: &'a AtomicU64,
    done: &'a AtomicU64,
    lifo: Lifo<'a>,
}

impl<'a> Shared<'a> {
    fn carve(words: &'a [AtomicU64], abort: &'a AtomicU64) -> Result<Self, Error> {
        let mut c = Carver::new(words);
        let done = &c.take(LAYOUT[0])?[0];
        let lifo = Lifo::new(c.take(LAYOUT[1])?, abort)?;
        Ok(Self { abort, done, lifo })
    }
}

impl Benchmark for Huge {
    fn new(params: &Params, _processes: usize, threads: usize) -> Result<Self, Error> {
        params.only("huge", &["mode", "size_mib", "objects"])?;
        let mode = match params.str("mode", "threadtest")? {
            "threadtest" => Mode::Threadtest,
            "xmalloc" => Mode::Xmalloc,
            other => return Err(format!("huge: mode must be \"threadtest\" or \"xmalloc\", got {other:?}").into()),
        };
        let mib = params.u64("size_mib", 1024)?;
        let size = usize::try_from(mib.checked_mul(1 << 20).ok_or("huge: size_mib overflows")?)
            .map_err(|_| "huge: size_mib too large for this machine")?;
        if size == 0 {
            return Err("huge: size_mib must be at least 1".into());
        }
        if mode == Mode::Xmalloc && threads < 2 {
            return Err(format!("huge xmalloc needs at least 2 threads, got {threads}").into());
        }
        Ok(Self { mode, size, objects: params.u64("objects", 8)?, threads })
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
        match self.mode {
            Mode::Threadtest => self.threadtest(ctx, t, phases),
            Mode::Xmalloc => {
                let shared = Shared::carve(ctx.shared, phases.abort_word())?;
                self.xmalloc(ctx, t, phases, &shared)
            }
        }
    }
}

impl Huge {
    fn threadtest<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
    ) -> Result<Report, Error> {
        let mine = share(self.objects, self.threads, ctx.shape.thread);
        let mut report = Report::default();
        phases.start()?;
        for _ in 0..mine {
            let p = t.alloc(self.size)?;
            report.allocated += 1;
            let h = ctx.handles.handle(p);
            // SAFETY: `p` is a fresh block of `self.size` bytes.
            unsafe { stress::write_stamp(p, h, self.size) };
            // SAFETY: as above, for reads.
            if !unsafe { stress::check_stamp(p, h, self.size) } {
                return Err(stress::corrupt(h, self.size));
            }
            report.verified += 1;
            // SAFETY: allocated above with this size, freed once.
            unsafe { t.free(p, self.size)? };
            report.freed += 1;
        }
        phases.stop()?;
        report.ops = mine;
        Ok(report)
    }

    fn xmalloc<A: Allocator>(
        &self,
        ctx: &Ctx<'_, A>,
        t: &mut A::Thread,
        phases: &mut Phases<'_>,
        shared: &Shared<'_>,
    ) -> Result<Report, Error> {
        let producers = self.threads.div_ceil(2);
        let mut report = Report::default();
        phases.start()?;
        if ctx.shape.thread % 2 == 0 {
            let mine = share(self.objects, producers, ctx.shape.thread / 2);
            for _ in 0..mine {
                let p = t.alloc(self.size)?;
                report.allocated += 1;
                let h = ctx.handles.handle(p);
                // SAFETY: `p` is a fresh block of `self.size` bytes.
                unsafe { stress::write_stamp(p, h, self.size) };
                let mut wait = Backoff::new(shared.abort);
                while !shared.lifo.try_push(h)? {
                    wait.snooze()?;
                }
                report.ops += 1;
            }
            shared.done.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        } else {
            self.consume(ctx.handles, t, shared, producers as u64, &mut report)?;
        }
        phases.stop()?;
        Ok(report)
    }

    fn consume<T: ThreadAlloc>(
        &self,
        handles: Handles,
        t: &mut T,
        shared: &Shared<'_>,
        producers: u64,
        report: &mut Report,
    ) -> Result<(), Error> {
        let mut wait = Backoff::new(shared.abort);
        loop {
            // Read `done` before popping: a LIFO found empty after every producer was done
            // stays empty.
            let all_done = shared.done.load(std::sync::atomic::Ordering::Acquire) == producers;
            match shared.lifo.try_pop()? {
                Some(h) => {
                    wait.reset();
                    let p = handles.block(h).ok_or("huge: a null handle in the LIFO")?;
                    // SAFETY: a live object of `self.size` bytes, now owned by this thread.
                    if !unsafe { stress::check_stamp(p, h, self.size) } {
                        return Err(stress::corrupt(h, self.size));
                    }
                    report.verified += 1;
                    // SAFETY: allocated by a producer with this size, popped exactly once.
                    unsafe { t.free(p, self.size)? };
                    report.freed += 1;
                    report.ops += 1;
                }
                None if all_done => return Ok(()),
                None => wait.snooze()?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn defaults_are_eight_one_gib_objects() {
        let h = Huge::new(&Params::default(), 1, 1).unwrap();
        assert_eq!((h.mode, h.size, h.objects), (Mode::Threadtest, 1 << 30, 8));
    }

    #[test]
    fn xmalloc_mode_needs_two_threads_and_bad_modes_are_refused() {
        assert!(Huge::new(&Params::of(&[("mode", Value::from("xmalloc"))]), 1, 1).is_err());
        assert!(Huge::new(&Params::of(&[("mode", Value::from("larson"))]), 1, 2).is_err());
        assert!(Huge::new(&Params::of(&[("size", Value::from(1))]), 1, 1).is_err());
    }
}
