//! `crash`: a keyed table of blocks kept by detectable allocation while worker processes are
//! killed with `SIGKILL` at random points (docs/design.md §8.4, §12.2; the run itself is driven by
//! [`crate::harness::crash`]). Not a throughput benchmark: its numbers are kills survived,
//! inconsistencies, leaked blocks, the survivors' longest stall and the recovery times.
//!
//! # The application
//!
//! Every benchmark thread is a *lane* (its global thread id) that owns [`Crash::slots`] words of
//! a slot array, allocated in the allocator's own memory before the workers start (so, for
//! cxlalloc, every word is a word of the heap, as detectable allocation requires). A lane
//! repeatedly picks one of its words at random: an empty word gets a new block through
//! [`ThreadAlloc::alloc_into`] (the allocator stores the block's handle in the word), which the
//! lane then stamps; a full word's block is verified against its stamp and freed through
//! [`ThreadAlloc::free_from`] (which clears the word). Block sizes are log-uniform over
//! `min_size..=max_size`, so small and large blocks both occur.
//!
//! A word is only ever touched by its lane, one thread at a time: by the lane's current
//! incarnation, or by the recovery of its dead predecessor's thread slot, which the replacement
//! adopts before it touches any word. A word shared between lanes could not be recovered
//! soundly: recovery decides whether a detectable store happened by reading the word, and
//! another lane could have emptied it in between.
//!
//! # What a crash can leave, and who repairs it
//!
//! - The allocator's metadata half updated, and a block allocated but not yet stored (or
//!   cleared but not yet freed): recovery of the dead slot, when the replacement adopts it
//!   (`Allocator::adopt`). Allocators without recovery leak the block, or wedge.
//! - A block stored but not yet stamped: the lane's `pending` word names the slot and size
//!   being allocated; the replacement stamps that block (the application's own repair).
//!
//! # The control area
//!
//! Words after the harness's, in cache lines of 8 words ([`Control`]): a header line, two lines
//! per lane (progress counter, slot held, pending allocation, longest gap, counts), one line per
//! process (its end-of-run PSS), then the recovery log (slot and duration of every adoption by a
//! replacement). The coordinator reads all of it; a worker writes only its own lines and the log.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::stress::{mix, Rng};
use super::{Benchmark, Ctx, Params, Phases, Report};
use crate::allocator::{Allocator, Handles, Recovered, ThreadAlloc};
use crate::Error;

/// The benchmark's name in workload files.
pub const NAME: &str = "crash";

/// Largest block: the large bracket's limit (huge blocks, each its own backing object, are
/// out of scope here).
const MAX_BLOCK: usize = 512 << 10;

/// Smallest block: the stamp needs two words.
const MIN_BLOCK: usize = 16;

/// How a replacement worker takes over its dead predecessor's thread slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replace {
    /// Adopt the slot and keep allocating from it (the slot's slabs stay the lane's).
    Adopt,
    /// Adopt the slot to repair it, attach a fresh one, then release the adopted slot: the
    /// predecessor's blocks are then freed remotely, into slabs of a released slot.
    Fresh,
}

/// The parameters of one crash run.
#[derive(Clone, Debug, PartialEq)]
pub struct Crash {
    /// Worker processes (at least 2: there must be survivors).
    pub processes: usize,
    /// Lanes over all processes.
    pub threads: usize,
    /// `SIGKILL`s over the run.
    pub kills: u64,
    /// Milliseconds before the first kill.
    pub warmup_ms: u64,
    /// Milliseconds over which the kills are spread (uniformly at random).
    pub duration_ms: u64,
    /// Milliseconds of quiet after the last kill before the run stops.
    pub settle_ms: u64,
    /// Words of the slot array per lane.
    pub slots: usize,
    /// Smallest block, bytes.
    pub min_size: usize,
    /// Largest block, bytes.
    pub max_size: usize,
    /// How replacements take over.
    pub replace: Replace,
    /// One replacement in this many is killed again while it starts (opening the heap,
    /// adopting, repairing); 0: never.
    pub startup_kill_one_in: u64,
    /// The coordinator's sampling period, milliseconds.
    pub sample_ms: u64,
    /// A survivor's gap between two operations longer than this is a stall, milliseconds.
    pub stall_ms: u64,
    /// No progress of some live worker for this long ends the run as a time-out (a wedged
    /// allocator), milliseconds.
    pub timeout_ms: u64,
}

impl Crash {
    /// Parameters this benchmark knows.
    pub const PARAMS: [&'static str; 12] = [
        "kills",
        "warmup_ms",
        "duration_ms",
        "settle_ms",
        "slots",
        "min_size",
        "max_size",
        "replace",
        "startup_kill_one_in",
        "sample_ms",
        "stall_ms",
        "timeout_ms",
    ];

    /// Processes lane `lane` runs in.
    pub fn process_of(&self, lane: usize) -> usize {
        (0..self.processes)
            .find(|&p| {
                let first = super::Shape::first_thread_of(self.threads, self.processes, p);
                (first..first + super::Shape::threads_of(self.threads, self.processes, p)).contains(&lane)
            })
            .unwrap_or(0)
    }

    /// The lanes of process `process`.
    pub fn lanes_of(&self, process: usize) -> std::ops::Range<usize> {
        let first = super::Shape::first_thread_of(self.threads, self.processes, process);
        first..first + super::Shape::threads_of(self.threads, self.processes, process)
    }

    /// Entries of the recovery log: one per replacement lane, the most there can be.
    pub fn log_capacity(&self) -> usize {
        let per_process = self.threads.div_ceil(self.processes);
        (self.kills as usize).saturating_mul(per_process).saturating_add(self.threads)
    }

    /// Bytes of the slot array.
    pub fn array_bytes(&self) -> usize {
        self.threads * self.slots * 8
    }
}

impl Benchmark for Crash {
    fn new(params: &Params, processes: usize, threads: usize) -> Result<Self, Error> {
        params.only(NAME, &Self::PARAMS)?;
        let replace = match params.str("replace", "fresh")? {
            "adopt" => Replace::Adopt,
            "fresh" => Replace::Fresh,
            other => return Err(format!("crash: replace must be \"adopt\" or \"fresh\", got {other:?}").into()),
        };
        let c = Crash {
            processes,
            threads,
            kills: params.u64("kills", 50)?,
            warmup_ms: params.u64("warmup_ms", 200)?,
            duration_ms: params.u64("duration_ms", 3000)?,
            settle_ms: params.u64("settle_ms", 300)?,
            slots: params.u64("slots", 256)? as usize,
            min_size: params.u64("min_size", MIN_BLOCK as u64)? as usize,
            max_size: params.u64("max_size", 16 << 10)? as usize,
            replace,
            startup_kill_one_in: params.u64("startup_kill_one_in", 8)?,
            sample_ms: params.u64("sample_ms", 10)?,
            stall_ms: params.u64("stall_ms", 500)?,
            timeout_ms: params.u64("timeout_ms", 3000)?,
        };
        if processes < 2 {
            return Err("crash: needs at least 2 processes (a killed worker needs survivors)".into());
        }
        if c.slots == 0 || c.slots > 1 << 20 {
            return Err(format!("crash: slots must be in 1..=1048576, got {}", c.slots).into());
        }
        if c.min_size < MIN_BLOCK || c.min_size > c.max_size || c.max_size > MAX_BLOCK {
            return Err(format!(
                "crash: need {MIN_BLOCK} <= min_size <= max_size <= {MAX_BLOCK}, got {}..={}",
                c.min_size, c.max_size
            )
            .into());
        }
        if c.sample_ms == 0 || c.timeout_ms < 10 * c.sample_ms {
            return Err("crash: sample_ms must be positive and timeout_ms at least 10 samples".into());
        }
        if c.kills > 100_000 {
            return Err("crash: at most 100000 kills".into());
        }
        Ok(c)
    }

    fn shared_words(&self) -> usize {
        Control::words_for(self)
    }

    fn thread<A: Allocator>(
        &self,
        _ctx: &Ctx<'_, A>,
        _t: &mut A::Thread,
        _phases: &mut Phases<'_>,
    ) -> Result<Report, Error> {
        Err("crash: runs only under its own coordinator (harness::crash), not as a timed benchmark".into())
    }
}

/// Words per line of the control area: one cache line.
const LINE: usize = 8;

/// Words per lane: two lines.
const LANE_WORDS: usize = 2 * LINE;

// Header line.
/// Nonzero: every lane stops after its current operation.
const STOP: usize = 0;
/// Handle of the slot array (0 before set-up and after clean-up).
const ARRAY: usize = 1;
/// Free bytes of the allocator's segment before set-up, plus one (0: not measured).
const BASELINE: usize = 2;
/// Entries appended to the recovery log (may exceed its capacity; the excess is not kept).
const LOG_LEN: usize = 3;
/// Nonzero once every worker runs and the kill schedule started: lanes measure their gaps from
/// then on (the start-up of every process at once is not a survivor's stall).
const STARTED: usize = 4;

// Lane lines (two per lane). Written by the lane's current incarnation only; read by the
// coordinator and by the lane's next incarnation.
/// Operations completed, over all incarnations.
const OPS: usize = 0;
/// The thread slot the lane's incarnation holds, plus one (0: none yet).
const SLOT: usize = 1;
/// The allocation in progress, [`Pending`] packed (0: none).
const PENDING: usize = 2;
/// Longest gap between two consecutive operations of one incarnation, nanoseconds.
const MAX_GAP_NS: usize = 3;
/// Incarnations started.
const INCARNATIONS: usize = 4;
/// Blocks allocated (approximate across kills: a killed operation is not counted).
const ALLOCS: usize = 5;
/// Blocks freed (approximate likewise).
const FREES: usize = 6;
/// Blocks verified against their stamp.
const VERIFIED: usize = 7;
/// When the longest gap ended, nanoseconds of the system clock since the Unix epoch (the one
/// clock every process reads alike).
const MAX_GAP_END_NS: usize = 8;

// Process lines: the last incarnation's PSS at its exit.
/// PSS of HWcc heap regions.
const PSS_HWCC: usize = 0;
/// PSS of SWcc heap regions.
const PSS_SWCC: usize = 1;
/// PSS of everything else.
const PSS_OTHER: usize = 2;
/// PSS of the whole process.
const PSS_TOTAL: usize = 3;

/// The allocation a lane has in progress: slot index and size, so a replacement can stamp a
/// block its predecessor stored but did not stamp.
///
/// ```text
/// 63            32 31             0
/// +---------------+----------------+
/// |  size (bytes) |  slot index + 1|
/// +---------------+----------------+
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    index: usize,
    size: usize,
}

impl Pending {
    fn pack(self) -> u64 {
        (self.size as u64) << 32 | (self.index as u64 + 1)
    }

    fn unpack(word: u64) -> Option<Self> {
        let low = word & 0xffff_ffff;
        (low != 0).then(|| Pending { index: low as usize - 1, size: (word >> 32) as usize })
    }
}

/// The crash run's words of the control area.
#[derive(Clone, Copy, Debug)]
pub struct Control<'a> {
    words: &'a [AtomicU64],
    lanes: usize,
    processes: usize,
    log_capacity: usize,
}

impl<'a> Control<'a> {
    /// Words the control area needs for `c`.
    pub fn words_for(c: &Crash) -> usize {
        LINE + c.threads * LANE_WORDS + c.processes * LINE + 2 * c.log_capacity()
    }

    /// The layout of `c` over `words` (at least [`Control::words_for`]).
    pub fn new(c: &Crash, words: &'a [AtomicU64]) -> Result<Self, Error> {
        let need = Self::words_for(c);
        let words = words.get(..need).ok_or_else(|| format!("crash: control area has fewer than {need} words"))?;
        Ok(Self { words, lanes: c.threads, processes: c.processes, log_capacity: c.log_capacity() })
    }

    fn header(&self, field: usize) -> &'a AtomicU64 {
        &self.words[field]
    }

    fn lane(&self, lane: usize, field: usize) -> &'a AtomicU64 {
        debug_assert!(lane < self.lanes && field < LANE_WORDS);
        &self.words[LINE + lane * LANE_WORDS + field]
    }

    fn process(&self, process: usize, field: usize) -> &'a AtomicU64 {
        debug_assert!(process < self.processes && field < LINE);
        &self.words[LINE + self.lanes * LANE_WORDS + process * LINE + field]
    }

    /// Tells every lane to stop after its current operation.
    pub fn stop(&self) {
        // Relaxed: a flag with no data behind it; lanes poll it between operations.
        self.header(STOP).store(1, Ordering::Relaxed);
    }

    /// Starts the measured part of the run: lanes measure their gaps from now on (the start-up
    /// of every process at once is not a survivor's stall).
    pub fn start(&self) {
        // Relaxed: a flag with no data behind it.
        self.header(STARTED).store(1, Ordering::Relaxed);
    }

    fn started(&self) -> bool {
        // Relaxed: see `start`.
        self.header(STARTED).load(Ordering::Relaxed) != 0
    }

    fn stopped(&self) -> bool {
        // Relaxed: see `stop`.
        self.header(STOP).load(Ordering::Relaxed) != 0
    }

    /// Operations lane `lane` has completed, over all its incarnations.
    pub fn ops(&self, lane: usize) -> u64 {
        // Relaxed: a progress counter; nothing is read through it.
        self.lane(lane, OPS).load(Ordering::Relaxed)
    }

    /// Lane `lane`'s counters: (allocated, freed, verified, incarnations).
    pub fn counts(&self, lane: usize) -> (u64, u64, u64, u64) {
        // Relaxed: statistics, read after the lane's process exited.
        let get = |f| self.lane(lane, f).load(Ordering::Relaxed);
        (get(ALLOCS), get(FREES), get(VERIFIED), get(INCARNATIONS))
    }

    /// The longest gap between two operations of one incarnation of lane `lane`.
    pub fn max_gap(&self, lane: usize) -> Duration {
        // Relaxed: a statistic.
        Duration::from_nanos(self.lane(lane, MAX_GAP_NS).load(Ordering::Relaxed))
    }

    /// When lane `lane`'s longest gap ended, as time since the Unix epoch (0: no gap yet).
    pub fn max_gap_end(&self, lane: usize) -> Duration {
        // Relaxed: a statistic, written with the gap.
        Duration::from_nanos(self.lane(lane, MAX_GAP_END_NS).load(Ordering::Relaxed))
    }

    /// The end-of-run PSS process `process` wrote: (HWcc, SWcc, other, total) bytes.
    pub fn pss(&self, process: usize) -> (u64, u64, u64, u64) {
        // Relaxed: written before the process exited, read after it was reaped.
        let get = |f| self.process(process, f).load(Ordering::Relaxed);
        (get(PSS_HWCC), get(PSS_SWCC), get(PSS_OTHER), get(PSS_TOTAL))
    }

    fn set_pss(&self, process: usize, pss: (u64, u64, u64, u64)) {
        // Relaxed: read by the coordinator after this process exits (the exit orders it).
        self.process(process, PSS_HWCC).store(pss.0, Ordering::Relaxed);
        self.process(process, PSS_SWCC).store(pss.1, Ordering::Relaxed);
        self.process(process, PSS_OTHER).store(pss.2, Ordering::Relaxed);
        self.process(process, PSS_TOTAL).store(pss.3, Ordering::Relaxed);
    }

    fn log_base(&self) -> usize {
        LINE + self.lanes * LANE_WORDS + self.processes * LINE
    }

    /// Appends an adoption to the recovery log (dropped when the log is full).
    fn log(&self, lane: usize, r: &Recovered) {
        // Relaxed: the index is only claimed; the entry is read after the writer exited.
        let i = self.header(LOG_LEN).fetch_add(1, Ordering::Relaxed) as usize;
        if i < self.log_capacity {
            let base = self.log_base() + 2 * i;
            let nanos = u64::try_from(r.duration.as_nanos()).unwrap_or(u64::MAX);
            let id = Logged { lane, slot: r.slot, in_flight: r.in_flight, duration: r.duration }.pack();
            self.words[base].store(id, Ordering::Relaxed);
            self.words[base + 1].store(nanos, Ordering::Relaxed);
        }
    }

    /// The recovery log: every adoption recorded.
    pub fn recoveries(&self) -> Vec<Logged> {
        // Relaxed: read after every writer exited.
        let n = (self.header(LOG_LEN).load(Ordering::Relaxed) as usize).min(self.log_capacity);
        let base = self.log_base();
        (0..n)
            .filter_map(|i| {
                let id = self.words[base + 2 * i].load(Ordering::Relaxed);
                let nanos = self.words[base + 2 * i + 1].load(Ordering::Relaxed);
                // An entry whose writer died between claiming and filling it reads 0.
                Logged::unpack(id, Duration::from_nanos(nanos))
            })
            .collect()
    }

    /// Adoptions claimed in the log, including any beyond its capacity.
    pub fn recoveries_claimed(&self) -> u64 {
        // Relaxed: read after every writer exited.
        self.header(LOG_LEN).load(Ordering::Relaxed)
    }

    /// Free bytes recorded before set-up ([`Allocator::free_bytes`]).
    pub fn baseline(&self) -> Option<u64> {
        // Relaxed: written by the coordinator itself.
        self.header(BASELINE).load(Ordering::Relaxed).checked_sub(1)
    }
}

/// One adoption by a replacement, as the recovery log keeps it.
///
/// ```text
///   63     62           32 31         0
/// +-----------+-----------+------------+
/// | in flight | lane + 1  |    slot    |
/// +-----------+-----------+------------+
/// ```
/// followed by a word of nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Logged {
    /// The lane whose replacement adopted.
    pub lane: usize,
    /// The slot adopted.
    pub slot: u32,
    /// The dead holder was inside an allocator operation.
    pub in_flight: bool,
    /// How long the repair took.
    pub duration: Duration,
}

impl Logged {
    fn pack(self) -> u64 {
        u64::from(self.in_flight) << 63 | ((self.lane as u64 + 1) & 0x7fff_ffff) << 32 | u64::from(self.slot)
    }

    /// `None` for an entry whose writer died between claiming and filling it (still 0).
    fn unpack(word: u64, duration: Duration) -> Option<Self> {
        let lane = (word >> 32 & 0x7fff_ffff) as usize;
        (lane != 0).then(|| Logged { lane: lane - 1, slot: word as u32, in_flight: word >> 63 != 0, duration })
    }
}

/// The stamp's first word for global slot `index` and a block of `size` bytes; the block's last
/// word holds it too (with `size >= 24`), its second word the size.
fn tag(index: usize, size: usize) -> u64 {
    mix((index as u64) << 24 ^ size as u64 ^ 0xc4a5_11ed) | 1
}

/// Word `i` of the block at `block`.
///
/// # Safety
///
/// `block` is a live block of at least `8 * (i + 1)` bytes, 8-aligned, that only this thread
/// uses now.
unsafe fn word<'b>(block: NonNull<u8>, i: usize) -> &'b AtomicU64 {
    // SAFETY: in bounds and aligned (the caller's contract); the block's words are only
    // accessed through atomics, by one thread at a time.
    unsafe { &*block.as_ptr().cast::<AtomicU64>().add(i) }
}

/// Writes the stamp of global slot `index` into `block` of `size` bytes.
///
/// # Safety
///
/// `block` is a live, 8-aligned block of `size >= 16` bytes that only this thread uses now.
unsafe fn stamp(block: NonNull<u8>, index: usize, size: usize) {
    let t = tag(index, size);
    // SAFETY: words 0 and 1 and the last whole word are inside the block (size >= 16).
    // Relaxed: the block is published by a later Release (the `pending` clear, or the exit of
    // this process), which a reader acquires.
    unsafe {
        word(block, 0).store(t, Ordering::Relaxed);
        word(block, 1).store(size as u64, Ordering::Relaxed);
        if size >= 24 {
            word(block, size / 8 - 1).store(t, Ordering::Relaxed);
        }
    }
}

/// Checks the stamp of global slot `index`'s block and returns its size.
///
/// # Safety
///
/// `block` is a live, 8-aligned block of at least `min_size` bytes that only this thread uses
/// now, stamped (or, if the allocator is broken, not) by [`stamp`].
unsafe fn verify(c: &Crash, block: NonNull<u8>, handle: u64, index: usize) -> Result<usize, Error> {
    // SAFETY: the block has at least `min_size >= 16` bytes (caller's contract).
    let (first, size) =
        unsafe { (word(block, 0).load(Ordering::Relaxed), word(block, 1).load(Ordering::Relaxed) as usize) };
    let bad = |what: String| -> Error {
        format!("crash: slot {index}'s block {handle:#x} does not read back as stamped: {what}").into()
    };
    if size < c.min_size || size > c.max_size {
        return Err(bad(format!("size word {size} outside {}..={}", c.min_size, c.max_size)));
    }
    if first != tag(index, size) {
        return Err(bad(format!("first word {first:#x}, expected {:#x}", tag(index, size))));
    }
    if size >= 24 {
        // SAFETY: the size word read back as this block's size, so the last word is inside it.
        let last = unsafe { word(block, size / 8 - 1).load(Ordering::Relaxed) };
        if last != first {
            return Err(bad(format!("last word {last:#x}, expected {first:#x}")));
        }
    }
    Ok(size)
}

/// A size log-uniform over `min..=max`.
fn pick_size(c: &Crash, rng: &mut Rng) -> usize {
    let lo = c.min_size.ilog2();
    let hi = c.max_size.ilog2();
    let e = rng.range(u64::from(lo), u64::from(hi)) as u32;
    let size = rng.range(1 << e, (2u64 << e) - 1) as usize;
    size.clamp(c.min_size, c.max_size)
}

/// The slot array: `threads * slots` words in the allocator's memory.
fn array<'b>(ctl: &Control<'_>, handles: Handles, words: usize) -> Result<&'b [AtomicU64], Error> {
    // Acquire: pairs with the Release in `set_up`; the array's zeroed words are visible.
    let handle = ctl.header(ARRAY).load(Ordering::Acquire);
    let block = handles.block(handle).ok_or("crash: the slot array was never set up")?;
    // SAFETY: set_up allocated `words` 8-aligned words at this handle, zeroed them, and they
    // stay allocated until clean_up, after every worker exited; they are only accessed as
    // atomics.
    Ok(unsafe { std::slice::from_raw_parts(block.as_ptr().cast::<AtomicU64>(), words) })
}

/// Before any worker starts (in the coordinator): allocates and zeroes the slot array and
/// records its handle, and the free bytes before it. Returns whether the allocator recovers.
pub fn set_up<A: Allocator>(c: &Crash, ctl: &Control<'_>, alloc: &A) -> Result<bool, Error> {
    if let Some(free) = alloc.free_bytes() {
        // Relaxed: read back by this process.
        ctl.header(BASELINE).store(free + 1, Ordering::Relaxed);
    }
    let mut t = alloc.thread()?;
    let bytes = c.array_bytes();
    let block = t.alloc(bytes)?;
    // SAFETY: a fresh block of `bytes` bytes; nothing else knows it yet.
    unsafe { block.as_ptr().write_bytes(0, bytes) };
    // Release: the zeroes are visible to whoever reads the handle (the workers map the control
    // area after this, and acquire it in `array`).
    ctl.header(ARRAY).store(Handles::of(alloc).handle(block), Ordering::Release);
    Ok(alloc.recoverable())
}

/// What [`clean_up`] found.
#[derive(Clone, Debug, Default)]
pub struct CleanUp {
    /// Slots of dead processes adopted at the end (killed before they published a slot, or
    /// released by nobody).
    pub recovered: Vec<Recovered>,
    /// Adoptions that failed at the end, with why.
    pub adopt_errors: Vec<String>,
    /// Blocks the slot array still named, all freed.
    pub named: u64,
    /// Blocks whose stamp did not read back (left allocated), with why.
    pub corrupt: Vec<String>,
    /// Frees that failed, with why.
    pub free_errors: Vec<String>,
    /// The allocator's own check afterwards.
    pub audit: Option<crate::allocator::Audit>,
    /// Bytes the segment lost over the run (allocators with a fixed segment).
    pub leaked_bytes: Option<u64>,
}

/// After every worker exited (in the coordinator): adopts the slots dead processes still hold,
/// frees every block the slot array names and the array itself, then runs the allocator's
/// check. Misbehaving blocks are counted, not fatal.
pub fn clean_up<A: Allocator>(c: &Crash, ctl: &Control<'_>, alloc: &A) -> Result<CleanUp, Error> {
    let mut out = CleanUp::default();
    if alloc.recoverable() {
        for slot in alloc.dead_slots() {
            match alloc.adopt(slot) {
                Ok((handle, r)) => {
                    drop(handle);
                    out.recovered.push(r);
                }
                Err(e) => out.adopt_errors.push(format!("slot {slot}: {e}")),
            }
        }
    }
    let handles = Handles::of(alloc);
    let mut t = alloc.thread()?;
    let words = array(ctl, handles, c.threads * c.slots)?;
    for lane in 0..c.threads {
        // Relaxed: the lane's processes have exited.
        let pending = Pending::unpack(ctl.lane(lane, PENDING).load(Ordering::Relaxed));
        for i in 0..c.slots {
            let index = lane * c.slots + i;
            let dest = &words[index];
            // Acquire: the block's stamp, written before its last writer exited.
            let handle = dest.load(Ordering::Acquire);
            let Some(block) = handles.block(handle) else { continue };
            let size = match pending.filter(|p| p.index == i) {
                // Stored but perhaps never stamped: its size is the pending one.
                Some(p) => p.size,
                // SAFETY: the word names a live block of this lane of at least `min_size`
                // bytes, and no worker is left.
                None => match unsafe { verify(c, block, handle, index) } {
                    Ok(size) => size,
                    Err(e) => {
                        out.corrupt.push(e.to_string());
                        continue;
                    }
                },
            };
            // SAFETY: the word names a block of `size` bytes, freed only here.
            match unsafe { t.free_from(dest, size, handles) } {
                Ok(()) => out.named += 1,
                Err(e) => out.free_errors.push(format!("slot {index}'s block {handle:#x}: {e}")),
            }
        }
    }
    // Acquire: pairs with the Release in `set_up`.
    let array_handle = ctl.header(ARRAY).swap(0, Ordering::AcqRel);
    if let Some(block) = handles.block(array_handle) {
        // SAFETY: set_up allocated the array with this size; no worker is left to use it.
        if let Err(e) = unsafe { t.free(block, c.array_bytes()) } {
            out.free_errors.push(format!("the slot array: {e}"));
        }
    }
    drop(t);
    out.audit = alloc.audit()?;
    out.leaked_bytes = ctl.baseline().zip(alloc.free_bytes()).map(|(before, after)| before.saturating_sub(after));
    Ok(out)
}

/// One incarnation of lane `lane` (a worker thread): takes over the lane's thread slot, repairs
/// the lane's pending allocation, and runs operations until the coordinator stops the run or
/// `abort` is raised (another lane of this process failed).
pub fn run_lane<A: Allocator>(
    c: &Crash,
    ctl: &Control<'_>,
    alloc: &A,
    lane: usize,
    seed: u64,
    abort: &std::sync::atomic::AtomicBool,
) -> Result<(), Error> {
    // Relaxed: this lane's own counter; its previous incarnation is dead.
    let incarnation = ctl.lane(lane, INCARNATIONS).fetch_add(1, Ordering::Relaxed);
    let mut t = take_slot(c, ctl, alloc, lane)?;
    let handles = Handles::of(alloc);
    let words = array(ctl, handles, c.threads * c.slots)?;
    let mine = &words[lane * c.slots..(lane + 1) * c.slots];
    // The application's repair: a block stored but not stamped by the dead predecessor.
    // Acquire: the predecessor's stores before it died (it set `pending` before storing).
    if let Some(p) = Pending::unpack(ctl.lane(lane, PENDING).load(Ordering::Acquire)) {
        // Acquire: the allocator's store of the handle (or its recovery's).
        if let Some(block) = handles.block(mine[p.index].load(Ordering::Acquire)) {
            // SAFETY: the word names the block allocated with the pending size, which nothing
            // else uses (the lane is ours).
            unsafe { stamp(block, lane * c.slots + p.index, p.size) };
        }
        // Release: the stamp is written before; pairs with the Acquire above in a successor.
        ctl.lane(lane, PENDING).store(0, Ordering::Release);
    }
    let mut rng = Rng::new(seed, (lane as u64) << 32 | incarnation);
    // Relaxed (all counter loads and stores below): single-writer statistics of this lane.
    let mut ops = ctl.lane(lane, OPS).load(Ordering::Relaxed);
    let (mut allocs, mut frees, mut verified, _) = ctl.counts(lane);
    let mut max_gap = ctl.max_gap(lane);
    let mut last: Option<Instant> = None;
    while !ctl.stopped() && !abort.load(Ordering::Relaxed) {
        let i = rng.below(c.slots as u64) as usize;
        let index = lane * c.slots + i;
        let dest = &mine[i];
        // Acquire: the block's stamp, written before the handle's last publication.
        let handle = dest.load(Ordering::Acquire);
        if let Some(block) = handles.block(handle) {
            // SAFETY: the lane's word names a live block stamped by this lane.
            let size = unsafe { verify(c, block, handle, index)? };
            verified += 1;
            // SAFETY: the word holds a block of `size` bytes; this lane alone frees through it.
            unsafe { t.free_from(dest, size, handles)? };
            frees += 1;
        } else {
            let size = pick_size(c, &mut rng);
            // Relaxed: ordered before the handle's store by that store's Release (inside
            // `alloc_into`), which is what a successor needs to see it with the handle.
            ctl.lane(lane, PENDING).store(Pending { index: i, size }.pack(), Ordering::Relaxed);
            let block = t.alloc_into(size, dest, handles)?;
            // SAFETY: a fresh block of `size` bytes, 8-aligned, ours.
            unsafe { stamp(block, index, size) };
            // Release: the stamp is complete before `pending` reads 0; pairs with the Acquire
            // of a successor.
            ctl.lane(lane, PENDING).store(0, Ordering::Release);
            allocs += 1;
        }
        ops += 1;
        let lane_line = |f| ctl.lane(lane, f);
        lane_line(OPS).store(ops, Ordering::Relaxed);
        lane_line(ALLOCS).store(allocs, Ordering::Relaxed);
        lane_line(FREES).store(frees, Ordering::Relaxed);
        lane_line(VERIFIED).store(verified, Ordering::Relaxed);
        if !ctl.started() {
            continue;
        }
        let now = Instant::now();
        if let Some(gap) = last.map(|l| now - l).filter(|&g| g > max_gap) {
            max_gap = gap;
            lane_line(MAX_GAP_NS).store(u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
            lane_line(MAX_GAP_END_NS).store(unix_nanos(), Ordering::Relaxed);
        }
        last = Some(now);
    }
    drop(t);
    Ok(())
}

/// The lane's thread slot for this incarnation: the dead predecessor's slot adopted (and, with
/// [`Replace::Fresh`], released again for a fresh one) when the allocator recovers; a fresh
/// slot otherwise. The slot held is published before the lane touches any word, so that a
/// successor knows which slot's recovery repairs this lane.
fn take_slot<A: Allocator>(c: &Crash, ctl: &Control<'_>, alloc: &A, lane: usize) -> Result<A::Thread, Error> {
    let slot_word = ctl.lane(lane, SLOT);
    let publish = |t: &A::Thread| {
        // SeqCst: the slot is visible before any of this incarnation's words are written.
        slot_word.store(t.slot().map_or(0, |s| u64::from(s) + 1), Ordering::SeqCst);
    };
    // Acquire: the predecessor's publication.
    let previous = slot_word.load(Ordering::Acquire).checked_sub(1);
    let Some(previous) = previous.filter(|_| alloc.recoverable()) else {
        let t = alloc.thread()?;
        publish(&t);
        return Ok(t);
    };
    let slot = u32::try_from(previous).map_err(|_| "crash: slot word out of range")?;
    let (adopted, recovered) =
        alloc.adopt(slot).map_err(|e| format!("crash: lane {lane} adopting its predecessor's slot {slot}: {e}"))?;
    ctl.log(lane, &recovered);
    match c.replace {
        Replace::Adopt => {
            publish(&adopted);
            Ok(adopted)
        }
        Replace::Fresh => {
            let fresh = alloc.thread()?;
            // Published before the adopted slot is released: a crash in between leaves the
            // lane naming a slot that recovery can still find (the adopted one, repaired and
            // idle, is swept at the end).
            publish(&fresh);
            drop(adopted);
            Ok(fresh)
        }
    }
}

/// Now on the system clock, nanoseconds since the Unix epoch.
pub fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The calling process's end-of-run PSS into its control line.
pub fn record_pss(ctl: &Control<'_>, process: usize, dirs: &[std::path::PathBuf]) {
    if let Ok(m) = crate::memory::measure(dirs) {
        ctl.set_pss(process, (m.hwcc_pss_bytes, m.swcc_pss_bytes, m.other_pss_bytes, m.total_pss_bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn crash(pairs: &[(&str, Value)]) -> Result<Crash, Error> {
        let p = Params(pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect());
        Crash::new(&p, 3, 6)
    }

    #[test]
    fn defaults_are_valid_and_mistakes_are_refused() {
        let c = crash(&[]).unwrap();
        assert_eq!((c.kills, c.replace), (50, Replace::Fresh));
        assert!(crash(&[("kils", Value::from(3))]).unwrap_err().to_string().contains("kils"));
        assert!(crash(&[("max_size", Value::from(1 << 20))]).is_err(), "huge blocks are refused");
        assert!(crash(&[("min_size", Value::from(8))]).is_err(), "a stamp needs 16 bytes");
        assert!(crash(&[("replace", Value::from("reuse"))]).is_err());
        assert!(Crash::new(&Params::default(), 1, 1).unwrap_err().to_string().contains("2 processes"));
    }

    #[test]
    fn lanes_partition_the_threads_by_process() {
        let c = crash(&[]).unwrap();
        assert_eq!([c.lanes_of(0), c.lanes_of(1), c.lanes_of(2)], [0..2, 2..4, 4..6]);
        assert_eq!((0..6).map(|l| c.process_of(l)).collect::<Vec<_>>(), [0, 0, 1, 1, 2, 2]);
    }

    #[test]
    fn pending_words_round_trip_and_zero_is_none() {
        let p = Pending { index: 0, size: 16 };
        assert_eq!(Pending::unpack(p.pack()), Some(p));
        let p = Pending { index: 1 << 20, size: MAX_BLOCK };
        assert_eq!(Pending::unpack(p.pack()), Some(p));
        assert_eq!(Pending::unpack(0), None);
    }

    #[test]
    fn sizes_stay_in_range_and_cover_both_ends() {
        let c = crash(&[("min_size", Value::from(16)), ("max_size", Value::from(4096))]).unwrap();
        let mut rng = Rng::new(1, 2);
        let sizes: Vec<usize> = (0..10_000).map(|_| pick_size(&c, &mut rng)).collect();
        assert!(sizes.iter().all(|&s| (16..=4096).contains(&s)));
        assert!(sizes.iter().any(|&s| s < 32) && sizes.iter().any(|&s| s > 2048));
    }

    #[test]
    fn a_stamp_reads_back_and_another_slots_stamp_does_not() {
        let c = crash(&[]).unwrap();
        let mut buf = vec![0u64; 8];
        let block = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: 64 bytes, 8-aligned, ours.
        unsafe {
            stamp(block, 7, 64);
            assert_eq!(verify(&c, block, 0x40, 7).unwrap(), 64);
            assert!(verify(&c, block, 0x40, 8).is_err());
            word(block, 7).store(0, Ordering::Relaxed);
            assert!(verify(&c, block, 0x40, 7).unwrap_err().to_string().contains("last word"));
        }
    }

    #[test]
    fn the_recovery_log_keeps_what_fits() {
        let c = Crash::new(&Params::of(&[("kills", 1u64)]), 2, 2).unwrap();
        let words: Vec<AtomicU64> = (0..Control::words_for(&c)).map(|_| AtomicU64::new(0)).collect();
        let ctl = Control::new(&c, &words).unwrap();
        let r = Recovered { slot: 5, duration: Duration::from_micros(30), in_flight: true, summary: String::new() };
        for _ in 0..c.log_capacity() + 2 {
            ctl.log(1, &r);
        }
        assert_eq!(ctl.recoveries().len(), c.log_capacity());
        let first = Logged { lane: 1, slot: 5, in_flight: true, duration: Duration::from_micros(30) };
        assert_eq!(ctl.recoveries()[0], first);
        assert_eq!(ctl.recoveries_claimed(), c.log_capacity() as u64 + 2);
    }
}
