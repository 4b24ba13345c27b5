//! The software mCAS device (docs/design.md §9.2): a process that serves a window's requests the way the
//! near-memory unit does (paper Figure 6, `fpga/rtl/mcas_unit.sv`), over shared memory.
//!
//! - **One CAS at a time**: requests are executed one after another, so each word's CASes are
//!   serialized and a success's swap is written before any later request reads the word.
//! - **Conflict rule**: requests found pending together that target the same word compete; the
//!   first (lowest slot) executes, the others fail without comparing (`success = 0`, `prev` =
//!   the word as they would have read it, so `prev == expected` marks a spurious failure).
//! - **Latency**: each answer waits an injectable device time first (the paper's device:
//!   2.3 µs p50 per mCAS at one thread; see [`PAPER_MCAS_LATENCY`]).
//! - **Errors**: a requester id that is not its slot (1) or a misaligned or out-of-range target
//!   (3) is answered with the error code, the target untouched.
//! - **Parking**: idle, the device sleeps on a futex that its own kernel's clients wake; while
//!   another kernel holds a host number in the window (docs/design.md §9.2), whose clients'
//!   wakes cannot reach it, it sleeps only [`BRIEF_PARK_TIMEOUT`] at a time.
//! - The window is served by one process at a time (its pid in the header, claimed by CAS; a
//!   dead server's claim is taken over) and never zeroed.

use std::time::{Duration, Instant};

use crate::mcas::window::{sprd, spwr, Window};
use crate::sync::{AtomicBool, Ordering};

/// How long the device spins with nothing to do before it parks: sleeps on the window's parked
/// word until a client's doorbell wakes it (`Window::wake_server`). A device that polled on
/// (or slept and polled, as it did before) took a CPU from the requesters on a machine with
/// few cores; parked, it costs nothing while idle and a futex wake when the next request
/// comes. Short, because on two cores the spinning itself is what slows the requesters down.
pub(crate) const PARK_AFTER: Duration = Duration::from_micros(20);

/// Longest park: a client that never wakes the device (one written before the parked word,
/// such as `fpga/cosim/test_client.c`) is answered at most this late, and `stop` is seen.
/// (Backing it off while idle, with a spin after sparse requests cut to a few µs, was tried
/// and measured worse: docs/design.md §15.1, "The software device's spin".)
pub(crate) const PARK_TIMEOUT: Duration = Duration::from_millis(1);

/// Longest park while a kernel other than the device's own holds a host number in the window
/// (`Window::claimed_by_other_kernels`, docs/design.md §9.2): that kernel's clients ring
/// doorbells in the shared window, but their futex wake reaches only waiters of their own
/// kernel, so the device wakes by itself this often to look. Their request then waits this
/// long at most (plus the kernel's timer slack) after the device parked, where a long park
/// would keep it [`PARK_TIMEOUT`]; the cost is one futex timeout per period on the serving
/// host while it is idle, far from the CPU a spinning device would take.
pub(crate) const BRIEF_PARK_TIMEOUT: Duration = Duration::from_micros(50);

/// Tells the device serving `window` to stop (sets `stop`, the flag given to [`serve`]) and
/// wakes it if it is parked, so it answers what is pending and returns at once.
pub fn stop(window: &Window, stop: &AtomicBool) {
    // Relaxed: `serve` polls the flag; nothing else is published through it.
    stop.store(true, Ordering::Relaxed);
    window.wake_server();
}

/// The paper's measured mCAS latency at one thread (p50), for calibrated runs.
pub const PAPER_MCAS_LATENCY: Duration = Duration::from_nanos(2300);

/// The paper's device: a CXL read takes 357 ns against 112 ns from local DRAM (§5.1); the
/// difference is what latency injection adds to each HWcc access on a machine without one.
pub const PAPER_CXL_READ_EXTRA: Duration = Duration::from_nanos(357 - 112);

/// The device time to inject so that one thread's mCAS takes `target` (p50) end to end here:
/// `target` less the round trip measured through a scratch window served with none (client
/// write, doorbell, server poll, answer), so that calibrated runs match the paper's 2.3 µs
/// rather than 2.3 µs plus this machine's polling overhead.
pub fn calibrate(target: Duration) -> Result<Duration, CalibrationError> {
    static NEXT: crate::sync::AtomicU32 = crate::sync::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("cxlalloc-mcas-calibrate-{}-{n}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let window = Window::create_or_open(&path, crate::mcas::Geometry { slots: 1, target_bytes: 8 })
        .map_err(|e| CalibrationError(e.to_string()));
    let _ = std::fs::remove_file(&path);
    let window = std::sync::Arc::new(window?);
    let stop = AtomicBool::new(false);
    let round_trip = std::thread::scope(|s| {
        let server = s.spawn(|| serve(&window, Duration::ZERO, &stop));
        let measured = (|| {
            let mut client =
                crate::mcas::McasClient::new(window.clone(), 0).map_err(|e| CalibrationError(e.to_string()))?;
            // The least median of five batches: a busy machine only ever slows a batch down.
            let mut best = Duration::MAX;
            for batch in 0..6u64 {
                let mut samples = Vec::with_capacity(400);
                for i in 0..400u64 {
                    let t0 = Instant::now();
                    let v = batch * 400 + i;
                    client.compare_exchange_weak(0, v, v + 1).map_err(|e| CalibrationError(e.to_string()))?;
                    samples.push(t0.elapsed());
                }
                samples.sort_unstable();
                if batch > 0 {
                    best = best.min(samples[samples.len() / 2]);
                }
            }
            Ok(best)
        })();
        self::stop(&window, &stop);
        let _ = server.join();
        measured
    })?;
    Ok(target.saturating_sub(round_trip))
}

/// Calibration could not measure the round trip.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("mCAS calibration: {0}")]
pub struct CalibrationError(String);

/// Why the device could not serve.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    /// Another live process serves the window.
    #[error("the window is served by live process {0}")]
    Served(u64),
}

/// What a serving session did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// Requests answered.
    pub requests: u64,
    /// Of which swapped.
    pub successes: u64,
    /// Of which failed by the conflict rule.
    pub conflicts: u64,
    /// Of which refused with an error code.
    pub errors: u64,
    /// CPU time (user + system) of the serving thread: what the stand-in takes from the
    /// requesters' cores, which a hardware device does not.
    pub cpu: Duration,
    /// Times the device parked (slept on the parked word).
    pub parks: u64,
    /// Of which ended by their timeout with nothing to answer (idle wake-ups).
    pub idle_wakeups: u64,
    /// Parks of up to 1 ms: no other kernel held a host number.
    pub long_parks: u64,
    /// Parks of up to 50 µs (`BRIEF_PARK_TIMEOUT`): another kernel's clients could not have woken a
    /// long one.
    pub brief_parks: u64,
}

/// How long the device may park on `window` now, as a process of kernel `kernel`: briefly
/// while another kernel holds a host number in it, else up to [`PARK_TIMEOUT`].
pub(crate) fn park_timeout(window: &Window, kernel: u64) -> Duration {
    if window.claimed_by_other_kernels(kernel) {
        BRIEF_PARK_TIMEOUT
    } else {
        PARK_TIMEOUT
    }
}

/// CPU time the calling thread has used, user and system; zero where the kernel will not say.
fn thread_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64) + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    getrusage(UsageWho::RUSAGE_THREAD).map_or(Duration::ZERO, |u| tv(u.user_time()) + tv(u.system_time()))
}

/// Claims the window for this process; `Err` if a live process serves it.
fn claim(window: &Window) -> Result<u64, DeviceError> {
    let me = u64::from(std::process::id());
    let word = window.server();
    let mut cur = word.load(Ordering::Acquire);
    loop {
        if cur != 0 && cur != me && crate::mcas::window::alive(cur) {
            return Err(DeviceError::Served(cur));
        }
        match word.compare_exchange(cur, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(me),
            Err(seen) => cur = seen,
        }
    }
}

/// One pending request.
struct Request {
    slot: u32,
    seq: u64,
    expected: u64,
    swap: u64,
    target: u64,
    requester: u64,
}

/// Whether a doorbell has rung that the device has not answered yet.
fn rung(window: &Window, slots: u32) -> bool {
    (0..slots).any(|slot| {
        window.spwr(slot, spwr::SEQ).load(Ordering::Relaxed)
            != window.sprd(slot, sprd::DONE_SEQ).load(Ordering::Relaxed)
    })
}

/// Sleeps on the window's parked word unless a doorbell rings meanwhile; at most `timeout`
/// ([`park_timeout`]).
fn park(window: &Window, slots: u32, timeout: Duration) {
    let parked = window.parked();
    parked.store(1, Ordering::Relaxed);
    // SeqCst: pairs with the client's fence between its doorbell and its look at the parked
    // word (`Window::wake_server`): either we see its doorbell below, or it sees 1 and wakes us.
    crate::sync::fence(Ordering::SeqCst);
    if !rung(window, slots) {
        crate::mcas::window::futex_wait(parked, 1, timeout);
    }
    // Relaxed: the flag only says whether a doorbell must wake us; the next scan reads the
    // doorbells with Acquire.
    parked.store(0, Ordering::Relaxed);
}

/// Serves `window` until `stop` is set, answering every request with the device time
/// `latency` first. Answers what is pending when `stop` is seen, then releases the window.
pub fn serve(window: &Window, latency: Duration, stop: &AtomicBool) -> Result<Served, DeviceError> {
    let me = claim(window)?;
    let kernel = crate::identity::kernel();
    let cpu = thread_cpu();
    let slots = window.geometry().slots;
    let mut served = Served::default();
    let mut idle_since: Option<Instant> = None;
    let mut batch = Vec::new();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if !stopping && idle_since.is_some_and(|t| t.elapsed() >= PARK_AFTER) {
            // Decided at each park: a host of another kernel may claim a number at any time.
            let timeout = park_timeout(window, kernel);
            if timeout == PARK_TIMEOUT {
                served.long_parks += 1;
            } else {
                served.brief_parks += 1;
            }
            park(window, slots, timeout);
            served.parks += 1;
            served.idle_wakeups += u64::from(!rung(window, slots));
            idle_since = None;
        }
        batch.clear();
        for slot in 0..slots {
            // Acquire: the request's fields, written before its doorbell, are visible.
            let seq = window.spwr(slot, spwr::SEQ).load(Ordering::Acquire);
            if seq != window.sprd(slot, sprd::DONE_SEQ).load(Ordering::Relaxed) {
                let field = |f| window.spwr(slot, f).load(Ordering::Relaxed);
                batch.push(Request {
                    slot,
                    seq,
                    expected: field(spwr::EXPECTED),
                    swap: field(spwr::SWAP),
                    target: field(spwr::TARGET),
                    requester: field(spwr::REQUESTER),
                });
            }
        }
        if batch.is_empty() {
            if stopping {
                break;
            }
            idle_since.get_or_insert_with(Instant::now);
            std::hint::spin_loop();
            continue;
        }
        idle_since = None;
        // The words as the batch's requests read them, before any of the batch executes.
        let before: Vec<Option<u64>> =
            batch.iter().map(|r| window.target(r.target).map(|w| w.load(Ordering::Acquire))).collect();
        for (i, r) in batch.iter().enumerate() {
            let started = Instant::now();
            let (prev, success, error) = match (r.requester == u64::from(r.slot), window.target(r.target)) {
                (false, _) => (0, false, 1),
                (true, None) => (0, false, 3),
                (true, Some(word)) => {
                    let competes = batch[..i].iter().any(|o| o.target == r.target && window.target(o.target).is_some());
                    if competes {
                        served.conflicts += 1;
                        (before[i].unwrap_or(0), false, 0)
                    } else {
                        // AcqRel: the swap is published before the answer (Release below too).
                        match word.compare_exchange(r.expected, r.swap, Ordering::AcqRel, Ordering::Acquire) {
                            Ok(p) => (p, true, 0),
                            Err(p) => (p, false, 0),
                        }
                    }
                }
            };
            while started.elapsed() < latency {
                std::hint::spin_loop();
            }
            window.sprd(r.slot, sprd::PREV).store(prev, Ordering::Relaxed);
            window.sprd(r.slot, sprd::SUCCESS).store(u64::from(success), Ordering::Relaxed);
            window.sprd(r.slot, sprd::ERROR).store(error, Ordering::Relaxed);
            // Release: the answer's fields (and the swap) before the completion sequence.
            window.sprd(r.slot, sprd::DONE_SEQ).store(r.seq, Ordering::Release);
            served.requests += 1;
            served.successes += u64::from(success);
            served.errors += u64::from(error != 0);
        }
    }
    let _ = window.server().compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed);
    served.cpu = thread_cpu().saturating_sub(cpu);
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcas::Geometry;

    /// A fresh window file of two requesters (removed at once: the mapping keeps it).
    fn scratch_window(tag: &str) -> Window {
        let path = std::env::temp_dir().join(format!("cxlalloc-park-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let window = Window::create_or_open(&path, Geometry { slots: 2, target_bytes: 64 });
        let _ = std::fs::remove_file(&path);
        window.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Serves `window` idle for `idle`, then stops: what the device did meanwhile.
    fn serve_idle(window: &Window, idle: Duration) -> Served {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let server = s.spawn(|| serve(window, Duration::ZERO, &stop));
            std::thread::sleep(idle);
            stop.store(true, Ordering::Relaxed);
            server.join().map_or_else(|_| panic!("the device panicked"), |r| r.unwrap_or_else(|e| panic!("{e}")))
        })
    }

    const NAME: [u64; 4] = [0; 4];

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot map files or sleep on a futex")]
    fn the_device_parks_long_while_no_other_kernel_holds_a_host_number() {
        let window = scratch_window("own");
        let me = crate::identity::kernel();
        assert_eq!(park_timeout(&window, me), PARK_TIMEOUT, "no claims");
        assert_eq!(window.claim_host(3, me, NAME), Ok(true));
        assert_eq!(park_timeout(&window, me), PARK_TIMEOUT, "a claim of the device's own kernel");
        let served = serve_idle(&window, Duration::from_millis(30));
        assert!(served.long_parks > 0 && served.brief_parks == 0, "{served:?}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot map files or sleep on a futex")]
    fn the_device_parks_only_briefly_while_another_kernel_holds_a_host_number() {
        let window = scratch_window("foreign");
        let me = crate::identity::kernel();
        let other = crate::identity::kernel_of("another kernel's boot id");
        assert_eq!(window.claim_host(3, me, NAME), Ok(true));
        assert_eq!(window.claim_host(5, other, NAME), Ok(true));
        assert_eq!(park_timeout(&window, me), BRIEF_PARK_TIMEOUT);
        // Its clients' futex wakes cannot reach this kernel: the device must wake by itself.
        let served = serve_idle(&window, Duration::from_millis(30));
        assert!(served.brief_parks > 0 && served.long_parks == 0, "{served:?}");
        // Once that kernel's host has gone (its claim freed), long parks again.
        assert!(window.release_host(5, other));
        assert_eq!(park_timeout(&window, me), PARK_TIMEOUT);
    }
}
