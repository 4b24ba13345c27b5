//! HWcc words in the no-HWcc model: the heap's shared, claims and remote regions live in the
//! target area of an mCAS window (mapped at their usual offsets, so loads are plain reads of
//! device memory), and every CAS on them is sent to the device's near-memory unit through a
//! requester slot ([`McasPort`]). [`Hw`] is the word as the protocols see it.

use std::sync::Mutex;
use std::time::Duration;

use crate::mcas::{Link, McasClient, McasError};
use crate::protocol::HwWord;
use crate::sync::{AtomicU64, Ordering};

/// Nanoseconds added to every HWcc access of this process (0: none).
static INJECTED_NS: AtomicU64 = AtomicU64::new(0);

/// Latency injection (docs/design.md §9.3): every HWcc load, CAS and store of this process afterwards
/// first waits `extra`, modelling device memory slower than local DRAM on a machine without a
/// CXL device ([`crate::mcas::device::PAPER_CXL_READ_EXTRA`] is the paper's device). Process-
/// wide, for benchmarks; `Duration::ZERO` turns it off.
pub fn inject_latency(extra: Duration) {
    INJECTED_NS.store(u64::try_from(extra.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// Waits the injected latency, if any. The test stays inline and the wait out of line, so
/// that every HWcc access of the fast paths inlines (a call per access cost the full model's
/// remote free 18 instructions, script/icount.sh).
#[inline(always)]
fn device_access() {
    let ns = INJECTED_NS.load(Ordering::Relaxed);
    if ns != 0 {
        injected_wait(ns);
    }
}

/// Spins `ns` nanoseconds: the injected device latency.
#[cold]
#[inline(never)]
fn injected_wait(ns: u64) {
    let until = std::time::Instant::now() + Duration::from_nanos(ns);
    while std::time::Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Where the HWcc regions of one process's mapping sit in the window's target area.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Targets {
    /// Per region: first address in this process, length, and target offset of that address.
    spans: [(usize, usize, u64); 3],
}

impl Targets {
    /// The translation for regions mapped at `spans` (address, length), which follow each
    /// other in the target area in this order.
    pub(crate) fn new(spans: [(usize, usize); 3]) -> Self {
        let mut base = 0u64;
        Self {
            spans: spans.map(|(addr, len)| {
                let t = (addr, len, base);
                base += len as u64;
                t
            }),
        }
    }

    /// The target offset of `word`, if it lies in one of the regions.
    #[inline]
    pub(crate) fn of(&self, word: &AtomicU64) -> Option<u64> {
        let a = word as *const AtomicU64 as usize;
        self.spans.iter().find_map(|&(start, len, base)| {
            let rel = a.wrapping_sub(start);
            (rel < len).then_some(base + rel as u64)
        })
    }
}

/// One requester slot of the heap's mCAS window, owned by a thread slot (or by the process,
/// for the lease operations that run before a thread has a slot).
#[derive(Debug)]
pub(crate) struct McasPort {
    client: Mutex<McasClient>,
    targets: Targets,
}

impl McasPort {
    /// The port of requester `slot` over `link`.
    pub(crate) fn new(link: Link, slot: u32, targets: Targets) -> Result<Self, McasError> {
        Ok(Self { client: Mutex::new(McasClient::on(link, slot)?), targets })
    }

    /// One weak CAS of `word` executed by the device. A device that stops answering stalls the
    /// caller, as memory that stops answering would: the wait is reported once, then retried.
    fn cas_weak(&self, word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        let Some(target) = self.targets.of(word) else {
            // Every HWcc word is in the window by construction; a CPU CAS keeps a caller that
            // broke that rule correct among the threads of this host.
            debug_assert!(false, "HWcc word outside the mCAS window");
            return word.compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire);
        };
        let mut client = self.client.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut reported = false;
        loop {
            match client.compare_exchange_weak(target, current, new) {
                Ok(a) if a.success => return Ok(a.prev),
                Ok(a) => return Err(a.prev),
                Err(e) => {
                    if !reported {
                        eprintln!("cxlalloc: mCAS device ({}): {e}; retrying", client.link().describe());
                        reported = true;
                    }
                    if let McasError::Timeout(_) = e {
                        continue;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

/// An HWcc word as one thread reaches it: a CPU atomic, or a word of the mCAS window whose
/// CASes go through `port`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hw<'a> {
    word: &'a AtomicU64,
    port: Option<&'a McasPort>,
}

impl<'a> Hw<'a> {
    /// `word`, CASed through `port` when there is one.
    #[inline]
    pub(crate) fn new(word: &'a AtomicU64, port: Option<&'a McasPort>) -> Self {
        Self { word, port }
    }
}

impl HwWord for Hw<'_> {
    #[inline]
    fn load(&self, order: Ordering) -> u64 {
        // Device memory is read directly (uncachable in hardware): the unit writes a swap
        // before it answers.
        device_access();
        self.word.load(order)
    }

    #[inline]
    fn compare_exchange_weak(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64> {
        match self.port {
            None => {
                device_access();
                self.word.compare_exchange_weak(current, new, success, failure)
            }
            Some(port) => {
                // The device does not order this CPU's earlier stores: fence them out first.
                crate::sync::fence(Ordering::SeqCst);
                let r = port.cas_weak(self.word, current, new);
                crate::sync::fence(Ordering::SeqCst);
                r
            }
        }
    }

    #[inline]
    fn store(&self, value: u64, order: Ordering) {
        match self.port {
            None => {
                device_access();
                self.word.store(value, order)
            }
            Some(_) => {
                // Only the unit writes device words: a store is a CAS from what is there.
                let mut cur = self.word.load(Ordering::Acquire);
                while let Err(seen) = self.compare_exchange_weak(cur, value, order, Ordering::Acquire) {
                    cur = seen;
                }
            }
        }
    }
}
