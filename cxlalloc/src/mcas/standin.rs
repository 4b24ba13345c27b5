//! A software stand-in for a hardware mCAS device's registers (feature `mcas-standin`), so that
//! [`crate::mcas::mmio`]'s transport — the real `movdir64b` request and 16-byte answer load —
//! runs on a machine without the device.
//!
//! The register ranges are anonymous memory watched with userfaultfd: every spwr page is
//! write-protected and every sprd page absent, so the CPU traps each request write and each
//! answer read into a server thread, which acts as the unit does (`fpga/rtl/mcas_unit.sv`):
//!
//! - a trapped **spwr** write parks the slot's operands: the server discards the slot's last
//!   answer page and lets the write through;
//! - a trapped **sprd** read executes the parked CAS on the device memory (a CPU CAS on the
//!   shared memory file, so processes each with a stand-in still serialize per word), installs
//!   the answer page and re-protects the spwr page. A read with nothing parked answers error 2,
//!   a line whose requester is not its slot error 1, a bad target error 3.
//!
//! Each slot needs pages of its own in both ranges (`slot_stride` and both offsets multiples of
//! 4096), and the stand-in serves the process that started it only: a forked child's mappings
//! are not watched, so its requests are refused rather than read as zero answers.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use memmap2::{MmapMut, MmapOptions};
use userfaultfd::{Event, FaultKind, RegisterMode, Uffd, UffdBuilder};

use crate::mcas::answer::McasError;
use crate::mcas::spec::{DeviceSpec, MmioError};
use crate::sync::{AtomicBool, AtomicU64, Ordering};

const PAGE: usize = 4096;

/// A running stand-in: the register mapping and the thread that serves its traps.
pub(crate) struct StandIn {
    registers: MmapMut,
    pid: u32,
    stop: Arc<AtomicBool>,
    server: Option<std::thread::JoinHandle<()>>,
}

/// What the server thread needs to act as the unit.
struct Server {
    uffd: Uffd,
    spwr: usize,
    sprd: usize,
    stride: usize,
    slots: usize,
    memory: usize,
    memory_bytes: u64,
    target_base: u64,
    parked: Vec<bool>,
    answer: Box<Page>,
}

#[repr(C, align(4096))]
struct Page([u64; PAGE / 8]);

fn uffd_error(what: &str) -> impl FnOnce(userfaultfd::Error) -> MmioError + '_ {
    move |e| MmioError::Unsupported(format!("mCAS stand-in: {what}: {e}"))
}

impl StandIn {
    /// Maps `spec`'s register ranges and starts serving them over the device memory mapped at
    /// address `memory` (`spec.memory_bytes` long, kept mapped by the caller while this runs).
    pub(crate) fn start(spec: &DeviceSpec, memory: usize) -> Result<Self, MmioError> {
        let stride = spec.slot_stride as usize;
        if stride % PAGE != 0 || spec.spwr_offset as usize % PAGE != 0 || spec.sprd_offset as usize % PAGE != 0 {
            return Err(MmioError::Unsupported(format!(
                "mCAS stand-in: slot_stride and both offsets must be multiples of {PAGE} (a page per slot)"
            )));
        }
        let len = spec.register_bytes() as usize;
        let mut registers = MmapOptions::new()
            .len(len)
            .map_anon()
            .map_err(|source| MmioError::Io { path: spec.registers.clone(), source })?;
        registers.fill(0);
        let base = registers.as_mut_ptr() as usize;
        let slots = spec.slots as usize;
        let (spwr, sprd) = (base + spec.spwr_offset as usize, base + spec.sprd_offset as usize);
        let uffd = UffdBuilder::new()
            .close_on_exec(true)
            .non_blocking(true)
            .user_mode_only(true)
            .create()
            .map_err(uffd_error("userfaultfd"))?;
        uffd.register_with_mode(spwr as *mut _, slots * stride, RegisterMode::WRITE_PROTECT)
            .map_err(uffd_error("register spwr"))?;
        uffd.write_protect(spwr as *mut _, slots * stride).map_err(uffd_error("protect spwr"))?;
        // The answer pages start absent: the first read of each traps.
        // SAFETY: the sprd range lies inside our private mapping.
        unsafe { libc::madvise(sprd as *mut _, slots * stride, libc::MADV_DONTNEED) };
        uffd.register_with_mode(sprd as *mut _, slots * stride, RegisterMode::MISSING)
            .map_err(uffd_error("register sprd"))?;
        let server = Server {
            uffd,
            spwr,
            sprd,
            stride,
            slots,
            memory,
            memory_bytes: spec.memory_bytes,
            target_base: spec.target_base,
            parked: vec![false; slots],
            answer: Box::new(Page([0; PAGE / 8])),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let server = std::thread::Builder::new()
            .name("mcas-standin".into())
            .spawn(move || server.run(&thread_stop))
            .map_err(|source| MmioError::Io { path: spec.registers.clone(), source })?;
        Ok(Self { registers, pid: std::process::id(), stop, server: Some(server) })
    }

    /// Base address of the register ranges.
    pub(crate) fn base(&self) -> usize {
        self.registers.as_ptr() as usize
    }

    /// Refuses a request from a process the stand-in does not watch (a forked child).
    pub(crate) fn check_process(&self) -> Result<(), McasError> {
        match std::process::id() {
            pid if pid == self.pid => Ok(()),
            _ => Err(McasError::ForeignProcess(self.pid)),
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A forked child has no server thread to join (only the parent's handle to it).
        if let Some(server) = self.server.take().filter(|_| std::process::id() == self.pid) {
            let _ = server.join();
        }
    }
}

impl Server {
    fn run(mut self, stop: &AtomicBool) {
        let mut poll = libc::pollfd { fd: self.uffd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut poll, 1, 20) } <= 0 {
                continue;
            }
            while let Ok(Some(event)) = self.uffd.read_event() {
                if let Event::Pagefault { kind, addr, .. } = event {
                    match kind {
                        FaultKind::WriteProtected => self.parked_write(addr as usize),
                        FaultKind::Missing => self.answer_read(addr as usize),
                    }
                }
            }
        }
    }

    fn slot_of(&self, addr: usize, range: usize) -> Option<usize> {
        let slot = addr.checked_sub(range)? / self.stride;
        (slot < self.slots).then_some(slot)
    }

    /// A request write: the slot's operands are replaced, its last answer discarded.
    fn parked_write(&mut self, addr: usize) {
        let Some(slot) = self.slot_of(addr, self.spwr) else { return };
        self.parked[slot] = true;
        let answer = self.sprd + slot * self.stride;
        // SAFETY: the slot's answer page lies inside the register mapping.
        unsafe { libc::madvise(answer as *mut _, PAGE, libc::MADV_DONTNEED) };
        let _ = self.uffd.remove_write_protection((self.spwr + slot * self.stride) as *mut _, PAGE, true);
    }

    /// An answer read: the parked CAS executes and its answer page is installed.
    fn answer_read(&mut self, addr: usize) {
        let Some(slot) = self.slot_of(addr, self.sprd) else { return };
        let request = self.spwr + slot * self.stride;
        let _ = self.uffd.write_protect(request as *mut _, PAGE);
        // SAFETY: the request line is the first 64 bytes of the slot's present spwr page.
        let line: [u64; 4] =
            std::array::from_fn(|i| unsafe { std::ptr::read_volatile((request as *const u64).add(i)) });
        let [expected, swap, target, requester] = line;
        let (prev, success, error) = if !std::mem::take(&mut self.parked[slot]) {
            (0, false, 2)
        } else if requester != slot as u64 {
            (0, false, 1)
        } else {
            match self.word(target) {
                None => (0, false, 3),
                Some(word) => match word.compare_exchange(expected, swap, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(p) => (p, true, 0),
                    Err(p) => (p, false, 0),
                },
            }
        };
        self.answer.0[0] = prev;
        self.answer.0[1] = u64::from(success) | error << 8;
        let dst = (self.sprd + slot * self.stride) as *mut _;
        // SAFETY: `dst` is the slot's absent, page-aligned answer page inside the registered
        // range; the source is one page of ours.
        if unsafe { self.uffd.copy(self.answer.0.as_ptr().cast(), dst, PAGE, true) }.is_err() {
            // The page is there after all (a repeated trap): the reader must not sleep on.
            let _ = self.uffd.wake(dst, PAGE);
        }
    }

    /// The device word the unit's address `target` names.
    fn word(&self, target: u64) -> Option<&AtomicU64> {
        let off = target.checked_sub(self.target_base)?;
        (off % 8 == 0 && off < self.memory_bytes).then(|| {
            // SAFETY: 8-aligned and inside the device memory mapping, which outlives the server.
            unsafe { &*((self.memory + off as usize) as *const AtomicU64) }
        })
    }
}
