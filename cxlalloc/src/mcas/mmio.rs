//! The hardware transport of mCAS (docs/design.md §9.2, the published prototype's): a request is one
//! 64-byte line written to the requester's spwr slot with `movdir64b` and fenced; the answer is
//! one 16-byte uncached load from its sprd slot, and that load is what makes the unit execute
//! the CAS. No doorbells or sequence numbers: the bus orders the write before the read.
//!
//! The answer's second word carries the success flag in bit 0 and, where the device's bus
//! adapter reports one, the unit's error code in bits 8–15 (`fpga/rtl/mcas_pkg.sv`: 1 bad
//! requester, 2 no operands, 3 bad target; the published 16-byte answer has no room elsewhere).
//!
//! [`Device`] maps the ranges a [`DeviceSpec`] names. With `registers = "stand-in"` the ranges
//! are instead served in this process by `mcas::standin` (feature `mcas-standin`),
//! which traps the same instructions with userfaultfd.

use std::fs::OpenOptions;

use memmap2::{MmapOptions, MmapRaw};

use crate::mcas::answer::{Answer, McasError};
use crate::mcas::spec::{DeviceSpec, MmioError, SpecError};
use crate::sync::AtomicU64;

/// The request line, aligned as `movdir64b`'s source may be and its destination must be.
#[repr(C, align(64))]
struct Line([u64; 8]);

/// The register ranges as mapped in this process.
enum Registers {
    /// The device's ranges, from its file.
    File(MmapRaw),
    /// The in-process stand-in's ranges.
    #[cfg(feature = "mcas-standin")]
    StandIn(crate::mcas::standin::StandIn),
}

impl Registers {
    /// Address of the mapping's first byte.
    fn base(&self) -> usize {
        match self {
            Registers::File(m) => m.as_mut_ptr() as usize,
            #[cfg(feature = "mcas-standin")]
            Registers::StandIn(s) => s.base(),
        }
    }
}

/// A hardware mCAS device as mapped in this process. Requests on distinct slots may run on
/// different threads at once; one slot carries one request at a time (its owner's).
pub struct Device {
    spec: DeviceSpec,
    registers: Registers,
    memory: MmapRaw,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("spec", &self.spec).finish()
    }
}

// SAFETY: the mappings are shared memory reached only through atomics and the request
// instructions; the stand-in's server state is itself Send + Sync.
unsafe impl Send for Device {}
// SAFETY: as above; concurrent requests use distinct slots (the caller's contract).
unsafe impl Sync for Device {}

/// Whether this CPU has `movdir64b` (cpuid leaf 7, ECX bit 28).
pub fn has_movdir64b() -> bool {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        std::arch::x86_64::__cpuid_count(7, 0).ecx & (1 << 28) != 0
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        false
    }
}

fn map_file(path: &std::path::Path, offset: u64, len: u64) -> Result<MmapRaw, MmioError> {
    let io = |source| MmioError::Io { path: path.into(), source };
    let file = OpenOptions::new().read(true).write(true).open(path).map_err(io)?;
    let len = usize::try_from(len).map_err(|_| io(std::io::Error::other("range larger than the address space")))?;
    // Device files (a BAR's resourceN, a dax device) report no useful length; a regular file
    // must be long enough, or a touch beyond its end would raise SIGBUS.
    let meta = file.metadata().map_err(io)?;
    if meta.is_file() && meta.len() < offset + len as u64 {
        return Err(io(std::io::Error::other(format!(
            "{} bytes, the range needs {}",
            meta.len(),
            offset + len as u64
        ))));
    }
    MmapOptions::new().offset(offset).len(len).map_raw(&file).map_err(io)
}

impl Device {
    /// Maps the device `spec` describes.
    pub fn open(spec: &DeviceSpec) -> Result<Self, MmioError> {
        // The request path trusts the offsets, stride and slot count: never map a description
        // that was built in code without the checks `DeviceSpec::parse` runs.
        spec.check().map_err(|what| SpecError::Invalid { path: spec.registers.clone(), what })?;
        if !has_movdir64b() {
            return Err(MmioError::Unsupported(
                "this CPU has no movdir64b: a request must reach the device as one 64-byte write".into(),
            ));
        }
        let memory = map_file(&spec.memory, spec.memory_offset, spec.memory_bytes)?;
        let registers = if spec.is_stand_in() {
            Self::stand_in(spec, &memory)?
        } else {
            Registers::File(map_file(&spec.registers, 0, spec.register_bytes())?)
        };
        Ok(Self { spec: spec.clone(), registers, memory })
    }

    #[cfg(feature = "mcas-standin")]
    fn stand_in(spec: &DeviceSpec, memory: &MmapRaw) -> Result<Registers, MmioError> {
        let words = memory.as_mut_ptr() as usize;
        crate::mcas::standin::StandIn::start(spec, words).map(Registers::StandIn)
    }

    #[cfg(not(feature = "mcas-standin"))]
    fn stand_in(_: &DeviceSpec, _: &MmapRaw) -> Result<Registers, MmioError> {
        Err(MmioError::Unsupported("registers = \"stand-in\" needs a build with feature mcas-standin".into()))
    }

    /// The description the device was opened with.
    pub fn spec(&self) -> &DeviceSpec {
        &self.spec
    }

    /// The word at byte offset `target` of the device memory, if it is one.
    pub fn target(&self, target: u64) -> Option<&AtomicU64> {
        (target % 8 == 0 && target < self.spec.memory_bytes).then(|| {
            // SAFETY: 8-aligned and inside the mapping, which lives as long as `self`; device
            // words are accessed atomically by every party.
            unsafe { &*(self.memory.as_mut_ptr().add(target as usize) as *const AtomicU64) }
        })
    }

    /// One weak CAS by requester `slot` of the word at byte offset `target` of the device
    /// memory. The caller owns `slot`: no other thread issues a request on it meanwhile.
    pub fn compare_exchange_weak(&self, slot: u32, target: u64, expected: u64, new: u64) -> Result<Answer, McasError> {
        if slot >= self.spec.slots {
            return Err(McasError::NoSuchSlot { slot, slots: self.spec.slots });
        }
        if self.target(target).is_none() {
            return Err(McasError::BadTarget(target));
        }
        #[cfg(feature = "mcas-standin")]
        if let Registers::StandIn(s) = &self.registers {
            s.check_process()?;
        }
        let base = self.registers.base();
        let stride = self.spec.slot_stride as usize;
        let spwr = base + self.spec.spwr_offset as usize + slot as usize * stride;
        let sprd = base + self.spec.sprd_offset as usize + slot as usize * stride;
        let line = Line([expected, new, self.spec.target_base + target, u64::from(slot), 0, 0, 0, 0]);
        // SAFETY: both slots lie inside the register mapping (slot < slots, validated offsets
        // and stride) and are 64-byte aligned (offsets and stride are multiples of 64).
        let [prev, flags] = unsafe {
            request(spwr as *mut u8, &line);
            answer(sprd as *const u8)
        };
        match (flags >> 8) & 0xff {
            0 => Ok(Answer { prev, success: flags & 1 == 1 }),
            error => Err(McasError::Device(error)),
        }
    }
}

/// Writes `line` to the spwr slot at `dst` as one 64-byte write, then fences it out.
///
/// # Safety
/// `dst` is a 64-byte aligned, writable address of a mapped register range.
#[cfg(all(target_arch = "x86_64", not(miri)))]
unsafe fn request(dst: *mut u8, line: &Line) {
    // SAFETY: the caller's contract; `Device::open` checked the CPU has movdir64b.
    unsafe {
        std::arch::asm!(
            "movdir64b {dst}, zmmword ptr [{src}]",
            "sfence",
            dst = in(reg) dst,
            src = in(reg) line as *const Line,
            options(nostack, preserves_flags),
        );
    }
}

/// Reads the 16-byte answer at `src` with one load (a second load would be a second request).
///
/// # Safety
/// `src` is a 16-byte aligned, readable address of a mapped register range.
#[cfg(all(target_arch = "x86_64", not(miri)))]
unsafe fn answer(src: *const u8) -> [u64; 2] {
    let mut out = [0u64; 2];
    // SAFETY: the caller's contract; `out` is 16 writable bytes.
    unsafe {
        std::arch::asm!(
            "movdqa {x}, xmmword ptr [{src}]",
            "movdqu xmmword ptr [{out}], {x}",
            src = in(reg) src,
            out = in(reg) out.as_mut_ptr(),
            x = out(xmm_reg) _,
            options(nostack, preserves_flags),
        );
    }
    out
}

// Elsewhere `Device::open` refuses (no movdir64b), so no request is ever made.
#[cfg(not(all(target_arch = "x86_64", not(miri))))]
unsafe fn request(_: *mut u8, _: &Line) {}

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
unsafe fn answer(_: *const u8) -> [u64; 2] {
    [0, 1 << 8]
}

#[cfg(all(test, feature = "mcas-standin"))]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A stand-in device with two requesters over a fresh memory file.
    fn stand_in(tag: &str) -> (Device, PathBuf) {
        let memory = PathBuf::from(format!("/dev/shm/cxlalloc-mmio-unit-{tag}-{}", std::process::id()));
        std::fs::File::create(&memory).and_then(|f| f.set_len(4096)).expect("memory file");
        let spec = DeviceSpec {
            registers: crate::mcas::spec::STAND_IN.into(),
            spwr_offset: 0,
            sprd_offset: 2 * 4096,
            slot_stride: 4096,
            slots: 2,
            memory: memory.clone(),
            memory_offset: 0,
            memory_bytes: 4096,
            target_base: 0x1000,
        };
        (Device::open(&spec).expect("stand-in"), memory)
    }

    /// The raw answer of slot 0 after `line` (or none) was written to its spwr.
    fn exchange(device: &Device, line: Option<Line>) -> [u64; 2] {
        let base = device.registers.base();
        // SAFETY: slot 0 of both ranges of the stand-in's mapping, page-aligned.
        unsafe {
            if let Some(line) = line {
                request(base as *mut u8, &line);
            }
            answer((base + 2 * 4096) as *const u8)
        }
    }

    #[test]
    fn the_stand_in_answers_the_units_error_codes() {
        if !has_movdir64b() {
            // `Device::open` refuses such a CPU (tests/mcas_device.rs checks that).
            eprintln!("SKIPPED: this CPU has no movdir64b, so the stand-in cannot be opened here");
            return;
        }
        let (device, memory) = stand_in("errors");
        assert_eq!(exchange(&device, None)[1] >> 8, 2, "an answer read with nothing parked");
        assert_eq!(exchange(&device, Some(Line([0, 1, 0x1000, 1, 0, 0, 0, 0])))[1] >> 8, 1, "requester 1 in slot 0");
        assert_eq!(exchange(&device, Some(Line([0, 1, 0x0ff8, 0, 0, 0, 0, 0])))[1] >> 8, 3, "below target_base");
        assert_eq!(exchange(&device, Some(Line([0, 1, 0x1004, 0, 0, 0, 0, 0])))[1] >> 8, 3, "misaligned");
        assert_eq!(exchange(&device, Some(Line([0, 9, 0x1008, 0, 0, 0, 0, 0]))), [0, 1], "a good request swaps");
        assert_eq!(device.target(8).map(|w| w.load(crate::sync::Ordering::Acquire)), Some(9));
        drop(device);
        let _ = std::fs::remove_file(memory);
    }
}
