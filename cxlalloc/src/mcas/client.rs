//! The mCAS client (docs/design.md §9.2): one requester slot, owned by one thread, of a shared-memory
//! window (a CAS is a request written to the slot's spwr, a doorbell, and the answer read from
//! its sprd) or of a hardware device ([`crate::mcas::mmio`]: one request line, one answer load).

use std::sync::Arc;
use std::time::Instant;

use crate::mcas::answer::{Answer, McasError, ANSWER_TIMEOUT};
use crate::mcas::mmio::Device;
use crate::mcas::window::{sprd, spwr, Window};
use crate::sync::Ordering;

/// What a client's requests travel over.
#[derive(Clone, Debug)]
pub enum Link {
    /// A shared-memory window served by the software device or the RTL co-simulation.
    Window(Arc<Window>),
    /// A hardware device's registers.
    Device(Arc<Device>),
}

impl Link {
    /// Where the requests go, for messages.
    pub fn describe(&self) -> String {
        match self {
            Link::Window(w) => w.path().display().to_string(),
            Link::Device(d) => d.spec().registers.display().to_string(),
        }
    }

    /// Requester slots.
    pub fn slots(&self) -> u32 {
        match self {
            Link::Window(w) => w.geometry().slots,
            Link::Device(d) => d.spec().slots,
        }
    }

    /// Target word `target`, if it is one.
    pub fn target(&self, target: u64) -> Option<&crate::sync::AtomicU64> {
        match self {
            Link::Window(w) => w.target(target),
            Link::Device(d) => d.target(target),
        }
    }
}

/// One requester slot of a window or device. `Send`, not `Sync`: one thread per slot.
#[derive(Debug)]
pub struct McasClient {
    link: Link,
    slot: u32,
    /// Window only: the slot's last doorbell.
    seq: u64,
}

impl McasClient {
    /// The client of requester slot `slot`. The caller owns the slot exclusively (the
    /// allocator's thread slot, or a test's thread); more threads than slots is an error of the
    /// caller, never a wraparound.
    pub fn new(window: Arc<Window>, slot: u32) -> Result<Self, McasError> {
        Self::on(Link::Window(window), slot)
    }

    /// The client of requester slot `slot` over `link` (see [`McasClient::new`]).
    pub fn on(link: Link, slot: u32) -> Result<Self, McasError> {
        let slots = link.slots();
        if slot >= slots {
            return Err(McasError::NoSuchSlot { slot, slots });
        }
        // A previous client of the slot may have died with a request in flight: its doorbell
        // is where our sequence continues, and step 1 of each request waits for its answer.
        let seq = match &link {
            Link::Window(w) => w.spwr(slot, spwr::SEQ).load(Ordering::Acquire),
            Link::Device(_) => 0,
        };
        Ok(Self { link, slot, seq })
    }

    /// What the requests travel over.
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// Reads target word `target` (a plain acquire load: the device publishes a swap before it
    /// answers).
    pub fn load(&self, target: u64) -> Result<u64, McasError> {
        Ok(self.link.target(target).ok_or(McasError::BadTarget(target))?.load(Ordering::Acquire))
    }

    fn wait_done(w: &Window, slot: u32, seq: u64) -> Result<(), McasError> {
        let done = w.sprd(slot, sprd::DONE_SEQ);
        let mut spins = 0u32;
        let mut started = None;
        // Acquire: pairs with the server's release store of done_seq, after prev/success/error.
        while done.load(Ordering::Acquire) != seq {
            spins += 1;
            if spins % 64 == 0 {
                let t0 = *started.get_or_insert_with(Instant::now);
                if t0.elapsed() > ANSWER_TIMEOUT {
                    return Err(McasError::Timeout(ANSWER_TIMEOUT));
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// Rings for the answer to request `seq` and waits for it. Out of line so that instruction
    /// counts can leave out the wait, whose length depends on how the device is scheduled
    /// (`script/icount.sh`).
    #[inline(never)]
    fn answer_wait(w: &Window, slot: u32, seq: u64) -> Result<(), McasError> {
        // A software device that went idle sleeps until a doorbell wakes it.
        w.wake_server();
        Self::wait_done(w, slot, seq)
    }

    /// One weak CAS of target word `target` from `expected` to `new`.
    pub fn compare_exchange_weak(&mut self, target: u64, expected: u64, new: u64) -> Result<Answer, McasError> {
        let w = match &self.link {
            Link::Device(d) => return d.compare_exchange_weak(self.slot, target, expected, new),
            Link::Window(w) => w,
        };
        if w.target(target).is_none() {
            return Err(McasError::BadTarget(target));
        }
        Self::wait_done(w, self.slot, self.seq)?;
        w.spwr(self.slot, spwr::EXPECTED).store(expected, Ordering::Relaxed);
        w.spwr(self.slot, spwr::SWAP).store(new, Ordering::Relaxed);
        w.spwr(self.slot, spwr::TARGET).store(target, Ordering::Relaxed);
        w.spwr(self.slot, spwr::REQUESTER).store(u64::from(self.slot), Ordering::Relaxed);
        let seq = match self.seq.wrapping_add(1) {
            0 => 1,
            s => s,
        };
        // Release: the request's fields are visible to the server that sees the doorbell.
        w.spwr(self.slot, spwr::SEQ).store(seq, Ordering::Release);
        self.seq = seq;
        Self::answer_wait(w, self.slot, seq)?;
        let error = w.sprd(self.slot, sprd::ERROR).load(Ordering::Relaxed);
        if error != 0 {
            return Err(McasError::Device(error));
        }
        Ok(Answer {
            prev: w.sprd(self.slot, sprd::PREV).load(Ordering::Relaxed),
            success: w.sprd(self.slot, sprd::SUCCESS).load(Ordering::Relaxed) == 1,
        })
    }

    /// A strong CAS: retries spurious failures; `Ok(prev)` on success, `Err(Ok(current))` on a
    /// compare mismatch, `Err(Err(e))` on a device error.
    pub fn compare_exchange(&mut self, target: u64, expected: u64, new: u64) -> Result<u64, Result<u64, McasError>> {
        loop {
            match self.compare_exchange_weak(target, expected, new) {
                Ok(a) if a.success => return Ok(a.prev),
                Ok(a) if a.prev != expected => return Err(Ok(a.prev)),
                Ok(_) => continue,
                Err(e) => return Err(Err(e)),
            }
        }
    }
}
