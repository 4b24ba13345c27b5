//! The description of a hardware mCAS device (docs/design.md §9.2; `fpga/README.md`, "A real device"):
//! where its request/answer registers and its device-biased memory are mapped from, read from a
//! small TOML file.
//!
//! ```toml
//! # The unit's two register ranges, in one file mapped uncachable (a PCI BAR's `resourceN`).
//! registers = "/sys/bus/pci/devices/0000:17:00.0/resource2"
//! spwr_offset = 0          # request (spwr) slot 0, from the start of that file
//! sprd_offset = 0x40000    # answer (sprd) slot 0
//! slot_stride = 128        # bytes from one requester's slot to the next
//! slots = 1056             # requesters the unit has (the heap's thread slots + 32)
//! # The device-biased memory the unit's CASes operate on, also mapped uncachable.
//! memory = "/sys/bus/pci/devices/0000:17:00.0/resource4"
//! memory_offset = 0        # the part of that file given to this heap
//! memory_bytes = 0x100000
//! target_base = 0          # the unit's address of memory_offset's first byte
//! ```
//!
//! `registers = "stand-in"` names no file: the registers are served in-process by the software
//! stand-in (`mcas::standin`, feature `mcas-standin`), which traps the answer read the
//! way the device does. The memory is then an ordinary shared file.

use std::path::{Path, PathBuf};

/// The `registers` value that selects the in-process stand-in.
pub const STAND_IN: &str = "stand-in";

/// Bytes of a page: file offsets of mappings are multiples of it.
const PAGE: u64 = 4096;

/// Why a device description was refused.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The file could not be read.
    #[error("mCAS device description {path}: {source}")]
    Io {
        /// The description file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a valid description.
    #[error("mCAS device description {path}: {what}")]
    Invalid {
        /// The description file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

/// Where one host reaches a hardware mCAS device.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// The file mapped for the register ranges (uncachable), or [`STAND_IN`].
    pub registers: PathBuf,
    /// Offset of spwr slot 0 in `registers` (a multiple of 64).
    pub spwr_offset: u64,
    /// Offset of sprd slot 0 in `registers` (a multiple of 64).
    pub sprd_offset: u64,
    /// Bytes between consecutive slots of each range (a multiple of 64).
    pub slot_stride: u64,
    /// Requesters of the unit: slot `i` of both ranges is requester `i`.
    pub slots: u32,
    /// The file mapped for the device-biased memory (uncachable).
    pub memory: PathBuf,
    /// Offset in `memory` of the first byte given to the heap (a multiple of 4096).
    pub memory_offset: u64,
    /// Bytes given to the heap from `memory_offset` (a multiple of 4096).
    pub memory_bytes: u64,
    /// The address the unit knows `memory_offset`'s first byte by: a request's target is
    /// `target_base` plus the word's offset from there (a multiple of 8).
    pub target_base: u64,
}

impl DeviceSpec {
    /// Reads and validates the description in `path`.
    pub fn load(path: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Io { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates a description; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, SpecError> {
        let invalid = |what: String| SpecError::Invalid { path: path.into(), what };
        let spec: Self = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        spec.check().map_err(invalid)?;
        Ok(spec)
    }

    /// The description as TOML (what [`DeviceSpec::parse`] reads back).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Whether the registers are the in-process stand-in's.
    pub fn is_stand_in(&self) -> bool {
        self.registers == Path::new(STAND_IN)
    }

    /// Bytes of `registers` that must be mapped: both slot ranges.
    pub fn register_bytes(&self) -> u64 {
        // Saturating: a description that overflows here is refused by `check`.
        let span = u64::from(self.slots).saturating_mul(self.slot_stride);
        self.spwr_offset.max(self.sprd_offset).saturating_add(span).saturating_add(PAGE - 1) / PAGE * PAGE
    }

    /// Why the description cannot be used, if it cannot. Run by [`DeviceSpec::parse`] and again
    /// by [`Device::open`](crate::mcas::Device::open): the fields are public, so a description
    /// built in code is checked too before any register is touched.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.slots == 0 || self.slots > crate::mcas::window::MAX_SLOTS {
            return Err(format!("slots {} not in 1..={}", self.slots, crate::mcas::window::MAX_SLOTS));
        }
        if self.slot_stride < 64 || self.slot_stride % 64 != 0 {
            return Err(format!(
                "slot_stride {} is not a positive multiple of 64 (one request line)",
                self.slot_stride
            ));
        }
        for (name, off) in [("spwr_offset", self.spwr_offset), ("sprd_offset", self.sprd_offset)] {
            if off % 64 != 0 {
                return Err(format!("{name} {off:#x} is not a multiple of 64"));
            }
        }
        let span = u64::from(self.slots)
            .checked_mul(self.slot_stride)
            .ok_or_else(|| format!("{} slots of {} bytes overflow", self.slots, self.slot_stride))?;
        let (lo, hi) = if self.spwr_offset <= self.sprd_offset {
            (self.spwr_offset, self.sprd_offset)
        } else {
            (self.sprd_offset, self.spwr_offset)
        };
        if hi.checked_add(span).and_then(|end| end.checked_next_multiple_of(PAGE)).is_none() {
            return Err(format!("the register ranges end beyond 2^64 ({:#x} + {span:#x})", hi));
        }
        if lo + span > hi {
            return Err(format!(
                "the spwr and sprd ranges overlap ({} slots of {} bytes)",
                self.slots, self.slot_stride
            ));
        }
        if self.memory_offset % PAGE != 0 || self.memory_bytes == 0 || self.memory_bytes % PAGE != 0 {
            return Err(format!(
                "memory_offset {:#x} and memory_bytes {:#x} must be multiples of {PAGE} (memory_bytes > 0)",
                self.memory_offset, self.memory_bytes
            ));
        }
        if self.memory_offset.checked_add(self.memory_bytes).is_none() {
            return Err(format!("memory_offset {:#x} + memory_bytes overflows", self.memory_offset));
        }
        if self.target_base % 8 != 0 || self.target_base.checked_add(self.memory_bytes).is_none() {
            return Err(format!("target_base {:#x} is not 8-aligned or the memory overflows it", self.target_base));
        }
        if self.registers.as_os_str().is_empty() || self.memory.as_os_str().is_empty() {
            return Err("registers and memory must name files".into());
        }
        if self.registers.to_string_lossy().ends_with("_wc") || self.memory.to_string_lossy().ends_with("_wc") {
            return Err(
                "a write-combining mapping (resourceN_wc) would let the CPU merge and reorder device accesses: \
                 name the uncachable resourceN"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Why a device could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum MmioError {
    /// The description was refused.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A range could not be opened or mapped.
    #[error("mCAS device {path}: {source}")]
    Io {
        /// The file mapped.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// This build or CPU cannot drive the device.
    #[error("mCAS device: {0}")]
    Unsupported(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        registers = "/sys/bus/pci/devices/0000:17:00.0/resource2"
        spwr_offset = 0
        sprd_offset = 0x40000
        slot_stride = 128
        slots = 1056
        memory = "/sys/bus/pci/devices/0000:17:00.0/resource4"
        memory_offset = 0
        memory_bytes = 0x100000
        target_base = 0x4000_0000
    "#;

    fn parse(text: &str) -> Result<DeviceSpec, SpecError> {
        DeviceSpec::parse(text, Path::new("spec.toml"))
    }

    #[test]
    fn a_complete_description_round_trips_through_toml() {
        let spec = parse(GOOD).expect("valid");
        assert_eq!(spec.sprd_offset, 0x40000);
        assert_eq!(spec.register_bytes(), 0x40000 + 1056 * 128);
        assert!(!spec.is_stand_in());
        assert_eq!(parse(&spec.to_toml()).expect("round trip"), spec);
    }

    #[test]
    fn overlapping_slot_ranges_are_refused() {
        let text = GOOD.replace("0x40000", "0x1000");
        assert!(matches!(parse(&text), Err(SpecError::Invalid { what, .. }) if what.contains("overlap")));
    }

    #[test]
    fn a_stride_shorter_than_a_request_line_is_refused() {
        assert!(parse(&GOOD.replace("slot_stride = 128", "slot_stride = 32")).is_err());
        assert!(parse(&GOOD.replace("slot_stride = 128", "slot_stride = 96")).is_err());
    }

    #[test]
    fn unaligned_memory_and_targets_are_refused() {
        assert!(parse(&GOOD.replace("memory_offset = 0", "memory_offset = 100")).is_err());
        assert!(parse(&GOOD.replace("memory_bytes = 0x100000", "memory_bytes = 0")).is_err());
        assert!(parse(&GOOD.replace("target_base = 0x4000_0000", "target_base = 4")).is_err());
    }

    #[test]
    fn ranges_that_overflow_the_address_space_are_refused() {
        let huge_stride = GOOD.replace("slot_stride = 128", &format!("slot_stride = {}", u64::MAX / 64 * 64));
        assert!(matches!(parse(&huge_stride), Err(SpecError::Invalid { what, .. }) if what.contains("overflow")));
        let far_sprd = GOOD.replace("sprd_offset = 0x40000", &format!("sprd_offset = {}", u64::MAX / 64 * 64));
        assert!(matches!(parse(&far_sprd), Err(SpecError::Invalid { what, .. }) if what.contains("2^64")));
        let far_memory = GOOD.replace("memory_offset = 0", &format!("memory_offset = {}", u64::MAX / 4096 * 4096));
        assert!(matches!(parse(&far_memory), Err(SpecError::Invalid { what, .. }) if what.contains("overflows")));
    }

    #[test]
    fn write_combining_mappings_are_refused() {
        assert!(parse(&GOOD.replace("resource2\"", "resource2_wc\"")).is_err());
    }

    #[test]
    fn unknown_and_missing_keys_are_refused() {
        assert!(parse(&format!("{GOOD}\nlatency = 3")).is_err());
        assert!(parse(&GOOD.replace("slots = 1056", "")).is_err());
    }
}
