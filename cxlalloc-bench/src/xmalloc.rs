//! xmalloc (DESIGN §12.2): even threads produce, odd threads consume, through one shared bounded
//! LIFO of containers; every free is a remote free.
//!
//! A producer fills a container with [`OBJECTS_PER_CONTAINER`] objects whose sizes are drawn from
//! [`SIZES`] by a seeded generator ([`SizeStream`]), writes the first `min(size, 64)` bytes of
//! each with a pattern derived from its address and size, and pushes the container onto the LIFO
//! (blocking while it holds [`LIFO_LIMIT`] containers). A consumer pops a container, reads back
//! and verifies the bytes the producer wrote, and frees every object — on a thread other than the
//! one that allocated it. A fixed total of containers is split evenly over the producers
//! (total work fixed across thread counts); consumers run until every producer is done and the
//! LIFO is empty.
//!
//! **Transport.** The LIFO and its containers are benchmark machinery, not the allocator under
//! test: a `Mutex<Vec<Container>>` with two condition variables (not empty / not full), where a
//! container is a fixed inline array of (pointer, size) pairs moved by value, so the transport
//! itself never calls any allocator (the Vec's capacity is reserved up front). It is identical for
//! every allocator; a thread that finds the LIFO empty (consumer) or full (producer) blocks on a
//! condition variable, and wake-ups are issued only when someone waits. [`Outcome::waits`]
//! reports how often threads blocked.
//!
//! **Timing.** As in [`crate::threadtest`]: an untimed warm-up phase (its own LIFO, a smaller
//! number of containers), a start barrier, each thread's timed phase, an end barrier before any
//! handle is released. Throughput is Σ over threads of `objects_t / time_t`, where a producer's
//! objects are its allocations and a consumer's are its frees — so it counts *operations*
//! (an allocation or a free), each object contributing two.
//!
//! **Checks.** [`run`] fails unless the producers allocated and the consumers freed exactly the
//! planned number of objects, and every object's bytes read back as written. The heap-level check
//! for cxlalloc (`Heap::check`, zero live blocks) is the caller's, since [`run`] is generic.

use std::ptr::NonNull;
use std::sync::{Barrier, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::allocator::{Allocator, ThreadAlloc};
use crate::demo::Rng;
use crate::Error;

/// The object sizes, drawn uniformly.
pub const SIZES: [usize; 14] = [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768];

/// Objects per container.
pub const OBJECTS_PER_CONTAINER: usize = 120;

/// Containers the LIFO holds at most; producers block beyond it.
pub const LIFO_LIMIT: usize = 100;

/// Bytes written (and verified) per object: the first `min(size, TOUCH)`.
pub const TOUCH: usize = 64;

/// The default seed of the size generator.
pub const DEFAULT_SEED: u64 = 0x0078_6d61_6c6c_6f63; // "xmalloc"

/// A deterministic stream of object sizes from [`SIZES`]: one per producer and phase, so a run's
/// sizes depend only on the seed, the thread count and the container count.
#[derive(Clone, Debug)]
pub struct SizeStream(Rng);

impl SizeStream {
    /// The stream numbered `stream` of generator seed `seed`.
    pub fn new(seed: u64, stream: u64) -> Self {
        Self(Rng::new(seed, stream.wrapping_add(1)))
    }

    /// The next size.
    #[inline]
    pub fn next_size(&mut self) -> usize {
        // Multiply-shift of the high 32 bits: uniform up to a bias of 14 / 2^32.
        let i = ((self.0.next_u64() >> 32) * SIZES.len() as u64) >> 32;
        SIZES[i as usize]
    }
}

impl Iterator for SizeStream {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        Some(self.next_size())
    }
}

/// One xmalloc configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Threads (at least 2): even-numbered ones produce, odd-numbered ones consume.
    pub threads: usize,
    /// Timed containers, over all producers.
    pub containers: u64,
    /// Untimed warm-up containers, over all producers.
    pub warmup_containers: u64,
    /// Seed of the size generator.
    pub seed: u64,
}

impl Params {
    /// `containers` timed containers on `threads` threads, a warm-up of 1/20 of that (at least
    /// one container per producer), and the default seed.
    pub fn new(threads: usize, containers: u64) -> Self {
        let producers = threads.div_ceil(2) as u64;
        Self { threads, containers, warmup_containers: (containers / 20).max(producers), seed: DEFAULT_SEED }
    }

    /// Producer threads (the even-numbered ones).
    pub fn producers(&self) -> usize {
        self.threads.div_ceil(2)
    }

    /// Consumer threads (the odd-numbered ones).
    pub fn consumers(&self) -> usize {
        self.threads / 2
    }

    /// Objects allocated and freed in the timed phase.
    pub fn objects(&self) -> u64 {
        self.containers * OBJECTS_PER_CONTAINER as u64
    }

    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), Error> {
        if self.threads < 2 {
            return Err(
                format!("xmalloc needs at least 2 threads (1 producer + 1 consumer), got {}", self.threads).into()
            );
        }
        if self.containers == 0 {
            return Err("xmalloc needs at least one container".into());
        }
        Ok(())
    }
}

/// Producer `producer`'s share of `total` containers.
fn share(total: u64, producers: usize, producer: usize) -> u64 {
    let n = producers as u64;
    total / n + u64::from((producer as u64) < total % n)
}

/// A thread's part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Allocates, writes and pushes containers; its number among the producers.
    Producer(usize),
    /// Pops, verifies and frees containers.
    Consumer,
}

/// What one thread measured in the timed phase.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThreadTime {
    /// Producer or consumer.
    pub role: Role,
    /// Objects allocated (producer) or freed (consumer).
    pub objects: u64,
    /// Seconds between leaving the start barrier and finishing the phase.
    pub secs: f64,
    /// Times the thread blocked on the LIFO (full for a producer, empty for a consumer).
    pub waits: u64,
}

/// What one run of a configuration measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// One entry per thread, in thread order.
    pub threads: Vec<ThreadTime>,
}

impl Outcome {
    /// Million operations (allocations + frees) per second: Σ over threads of objects / seconds.
    pub fn mops(&self) -> f64 {
        self.threads.iter().map(|t| t.objects as f64 / t.secs.max(1e-9)).sum::<f64>() / 1e6
    }

    /// Objects the producers allocated.
    pub fn allocated(&self) -> u64 {
        self.threads.iter().filter(|t| matches!(t.role, Role::Producer(_))).map(|t| t.objects).sum()
    }

    /// Objects the consumers freed.
    pub fn freed(&self) -> u64 {
        self.threads.iter().filter(|t| t.role == Role::Consumer).map(|t| t.objects).sum()
    }

    /// Times any thread blocked on the LIFO.
    pub fn waits(&self) -> u64 {
        self.threads.iter().map(|t| t.waits).sum()
    }
}

/// One object in transport.
#[derive(Clone, Copy)]
struct Obj {
    ptr: NonNull<u8>,
    size: usize,
}

/// A container: a fixed inline array, moved by value through the LIFO (no allocation).
struct Container {
    objs: [Obj; OBJECTS_PER_CONTAINER],
    len: usize,
}

impl Container {
    fn new() -> Self {
        Self { objs: [Obj { ptr: NonNull::dangling(), size: 0 }; OBJECTS_PER_CONTAINER], len: 0 }
    }

    fn objs(&self) -> &[Obj] {
        &self.objs[..self.len]
    }
}

// SAFETY: a container owns the blocks it points to exclusively (the producer gives them up when
// it pushes the container), and the allocators compared allow any thread to free any block.
unsafe impl Send for Container {}

struct State {
    stack: Vec<Container>,
    producers_left: usize,
    aborted: bool,
    producers_waiting: usize,
    consumers_waiting: usize,
}

/// The bounded LIFO of containers (transport; see the module documentation).
struct Lifo {
    state: Mutex<State>,
    not_empty: Condvar,
    not_full: Condvar,
}

impl Lifo {
    fn new(producers: usize) -> Self {
        Self {
            state: Mutex::new(State {
                stack: Vec::with_capacity(LIFO_LIMIT),
                producers_left: producers,
                aborted: false,
                producers_waiting: 0,
                consumers_waiting: 0,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pushes `c`, blocking while the LIFO is full; gives `c` back if the run was aborted.
    #[must_use]
    fn push(&self, c: Container, waits: &mut u64) -> Option<Container> {
        let mut s = self.lock();
        while s.stack.len() >= LIFO_LIMIT && !s.aborted {
            *waits += 1;
            s.producers_waiting += 1;
            s = self.not_full.wait(s).unwrap_or_else(PoisonError::into_inner);
            s.producers_waiting -= 1;
        }
        if s.aborted {
            return Some(c);
        }
        s.stack.push(c);
        if s.consumers_waiting > 0 {
            self.not_empty.notify_one();
        }
        None
    }

    /// Pops the newest container, blocking while the LIFO is empty and a producer is still at
    /// work; `None` once all producers are done and the LIFO is empty, or the run was aborted.
    fn pop(&self, waits: &mut u64) -> Option<Container> {
        let mut s = self.lock();
        loop {
            if s.aborted {
                return None;
            }
            if let Some(c) = s.stack.pop() {
                if s.producers_waiting > 0 {
                    self.not_full.notify_one();
                }
                return Some(c);
            }
            if s.producers_left == 0 {
                return None;
            }
            *waits += 1;
            s.consumers_waiting += 1;
            s = self.not_empty.wait(s).unwrap_or_else(PoisonError::into_inner);
            s.consumers_waiting -= 1;
        }
    }

    /// A producer has pushed its last container.
    fn producer_done(&self) {
        let mut s = self.lock();
        s.producers_left -= 1;
        if s.producers_left == 0 {
            self.not_empty.notify_all();
        }
    }

    /// Wakes everyone and makes every later push and pop fail (a thread failed).
    fn abort(&self) {
        self.lock().aborted = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }

    /// Takes the containers left behind by an aborted run.
    fn drain(&self) -> Vec<Container> {
        std::mem::take(&mut self.lock().stack)
    }
}

/// Runs `p` once on `alloc`. Fails if the configuration is invalid, any thread's handle or any
/// operation fails, an object's bytes do not read back as written, or the allocation and free
/// counts differ from the plan. A failing thread aborts both LIFOs and still passes both
/// barriers, so no thread waits forever; containers left in a LIFO are freed afterwards.
pub fn run<A: Allocator>(alloc: &A, p: &Params) -> Result<Outcome, Error> {
    p.validate()?;
    let warm = Lifo::new(p.producers());
    let timed = Lifo::new(p.producers());
    let barrier = Barrier::new(p.threads);
    let results: Vec<Result<ThreadTime, Error>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..p.threads)
            .map(|i| {
                s.spawn({
                    let (warm, timed, barrier) = (&warm, &timed, &barrier);
                    move || thread_main(alloc, p, i, warm, timed, barrier)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err("benchmark thread panicked".into()))).collect()
    });
    let leftovers: Vec<Container> = warm.drain().into_iter().chain(timed.drain()).collect();
    if !leftovers.is_empty() {
        let mut t = alloc.thread()?;
        for c in &leftovers {
            free_all(&mut t, c)?;
        }
    }
    let outcome = Outcome { threads: results.into_iter().collect::<Result<_, _>>()? };
    let (allocated, freed) = (outcome.allocated(), outcome.freed());
    if allocated != p.objects() || freed != p.objects() {
        return Err(format!("planned {} objects, allocated {allocated}, freed {freed}", p.objects()).into());
    }
    Ok(outcome)
}

fn thread_main<A: Allocator>(
    alloc: &A,
    p: &Params,
    index: usize,
    warm: &Lifo,
    timed: &Lifo,
    barrier: &Barrier,
) -> Result<ThreadTime, Error> {
    let role = if index % 2 == 0 { Role::Producer(index / 2) } else { Role::Consumer };
    let abort = || {
        warm.abort();
        timed.abort();
    };
    let mut handle = alloc.thread();
    let warmed = match &mut handle {
        Ok(t) => phase(t, p, role, warm, p.warmup_containers, 0),
        Err(e) => Err(e.to_string().into()),
    };
    if warmed.is_err() {
        abort();
    }
    barrier.wait();
    let timed_result = match (&mut handle, warmed) {
        (Ok(t), Ok(_)) => {
            let start = Instant::now();
            let r = phase(t, p, role, timed, p.containers, 1);
            let secs = start.elapsed().as_secs_f64();
            r.map(|(objects, waits)| ThreadTime { role, objects, secs, waits })
        }
        (_, Err(e)) => Err(e),
        (Err(e), _) => Err(e.to_string().into()),
    };
    if timed_result.is_err() {
        abort();
    }
    barrier.wait();
    drop(handle);
    timed_result
}

/// One phase of one thread: `(objects allocated or freed, waits)`.
fn phase<T: ThreadAlloc>(
    t: &mut T,
    p: &Params,
    role: Role,
    lifo: &Lifo,
    total: u64,
    phase: u64,
) -> Result<(u64, u64), Error> {
    let mut waits = 0;
    match role {
        Role::Producer(j) => {
            let mut sizes = SizeStream::new(p.seed, phase << 32 | j as u64);
            let n = share(total, p.producers(), j);
            for _ in 0..n {
                let c = fill(t, &mut sizes)?;
                if let Some(c) = lifo.push(c, &mut waits) {
                    free_all(t, &c)?;
                    return Err("aborted: another thread failed".into());
                }
            }
            lifo.producer_done();
            Ok((n * OBJECTS_PER_CONTAINER as u64, waits))
        }
        Role::Consumer => {
            let mut objects = 0;
            while let Some(c) = lifo.pop(&mut waits) {
                for o in c.objs() {
                    // SAFETY: the producer wrote `min(size, TOUCH)` bytes of this live block.
                    if !unsafe { check_prefix(o.ptr, o.size) } {
                        return Err(
                            format!("object of {} bytes at {:p} does not read back as written", o.size, o.ptr).into()
                        );
                    }
                    // SAFETY: allocated by a producer with `o.size`, handed over in this
                    // container, freed exactly once here.
                    unsafe { t.free(o.ptr, o.size)? };
                }
                objects += c.len as u64;
            }
            Ok((objects, waits))
        }
    }
}

/// Allocates and writes one container; on failure frees what it had allocated.
#[inline]
fn fill<T: ThreadAlloc>(t: &mut T, sizes: &mut SizeStream) -> Result<Container, Error> {
    let mut c = Container::new();
    for k in 0..OBJECTS_PER_CONTAINER {
        let size = sizes.next_size();
        match t.alloc(size) {
            Ok(ptr) => {
                // SAFETY: the block is `size` bytes and ours until freed.
                unsafe { write_prefix(ptr, size) };
                c.objs[k] = Obj { ptr, size };
                c.len = k + 1;
            }
            Err(e) => {
                free_all(t, &c)?;
                return Err(e);
            }
        }
    }
    Ok(c)
}

fn free_all<T: ThreadAlloc>(t: &mut T, c: &Container) -> Result<(), Error> {
    for o in c.objs() {
        // SAFETY: every object of a container is a live block of `o.size` bytes owned by it.
        unsafe { t.free(o.ptr, o.size)? };
    }
    Ok(())
}

/// The pattern word `i` of a block at `p` of `size` bytes.
#[inline(always)]
fn pattern(p: *const u8, size: usize, i: usize) -> u64 {
    (p as u64 ^ (size as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) ^ i as u64
}

/// Writes the first `min(size, TOUCH)` bytes of a block with words that vary by address, size and
/// position (so the compiler cannot turn it into a `memset`, and a block handed out twice shows).
///
/// # Safety
///
/// `ptr` is valid for writes of `size` bytes.
#[inline(always)]
unsafe fn write_prefix(ptr: NonNull<u8>, size: usize) {
    let n = size.min(TOUCH);
    let p = ptr.as_ptr();
    for i in 0..n / 8 {
        // SAFETY: word `i` lies within the first `n` bytes; unaligned writes are allowed.
        unsafe { p.add(8 * i).cast::<u64>().write_unaligned(pattern(p, size, i)) };
    }
    for i in n / 8 * 8..n {
        // SAFETY: byte `i < n`.
        unsafe { p.add(i).write(pattern(p, size, i) as u8) };
    }
}

/// Whether the first `min(size, TOUCH)` bytes hold what [`write_prefix`] wrote.
///
/// # Safety
///
/// `ptr` is valid for reads of `size` bytes, and those bytes were written by `write_prefix`.
#[inline(always)]
unsafe fn check_prefix(ptr: NonNull<u8>, size: usize) -> bool {
    let n = size.min(TOUCH);
    let p = ptr.as_ptr();
    let mut diff = 0u64;
    for i in 0..n / 8 {
        // SAFETY: as in `write_prefix`.
        diff |= unsafe { p.add(8 * i).cast::<u64>().read_unaligned() } ^ pattern(p, size, i);
    }
    for i in n / 8 * 8..n {
        // SAFETY: byte `i < n`.
        diff |= u64::from(unsafe { p.add(i).read() } ^ pattern(p, size, i) as u8);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_split_over_producers() {
        assert_eq!((0..3).map(|j| share(10, 3, j)).collect::<Vec<_>>(), [4, 3, 3]);
        let p = Params::new(4, 1000);
        assert_eq!((p.producers(), p.consumers(), p.objects()), (2, 2, 120_000));
        assert_eq!(Params::new(3, 10).producers(), 2);
        assert_eq!(Params::new(2, 10).warmup_containers, 1);
        assert!(Params::new(1, 10).validate().is_err());
        assert!(Params::new(2, 0).validate().is_err());
    }

    #[test]
    fn lifo_is_last_in_first_out_and_ends_when_producers_are_done() {
        let lifo = Lifo::new(1);
        let mut waits = 0;
        for len in 1..=3 {
            let mut c = Container::new();
            c.len = len;
            assert!(lifo.push(c, &mut waits).is_none());
        }
        lifo.producer_done();
        let lens: Vec<usize> = std::iter::from_fn(|| lifo.pop(&mut waits)).map(|c| c.len).collect();
        assert_eq!((lens, waits), (vec![3, 2, 1], 0));
    }

    #[test]
    fn a_corrupted_object_is_detected() {
        let mut buf = [0u64; 8];
        let ptr = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
        for size in [12, 64] {
            // SAFETY: `buf` is 64 bytes.
            unsafe { write_prefix(ptr, size) };
            // SAFETY: as above.
            assert!(unsafe { check_prefix(ptr, size) });
            // SAFETY: byte 9 < 12 lies in the checked prefix.
            unsafe { *ptr.as_ptr().add(9) ^= 1 };
            // SAFETY: as above.
            assert!(!unsafe { check_prefix(ptr, size) });
        }
    }
}
