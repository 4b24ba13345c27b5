//! The CPU's cache-line write-back and invalidate instructions (x86-64): `clwb` writes a line
//! back and may keep it, `clflushopt` writes back and evicts, both weakly ordered until an
//! `sfence`; `clflush` (every x86-64 CPU) does the same, strongly ordered and slower.
//!
//! On other architectures, and under miri (which cannot run inline assembly), the
//! operations are fences only: the limited and no-HWcc models then rely on the memory being
//! coherent after all (true of `/dev/shm`).

/// Bytes of a cache line.
pub(crate) const LINE: usize = 64;

/// Which flush instructions this CPU has (detected once per heap mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Instructions {
    /// `clflushopt`, and `clwb` when `clwb` is true.
    Optimized {
        /// Whether `clwb` (write back, keep the line) is available.
        clwb: bool,
    },
    /// Only `clflush`.
    Legacy,
}

/// The cache lines covering `[p, p + len)`.
fn lines(p: *const u8, len: usize) -> impl Iterator<Item = usize> {
    let start = p as usize & !(LINE - 1);
    let end = p as usize + len.max(1);
    (start..end).step_by(LINE)
}

impl Instructions {
    /// Asks the CPU (cpuid leaf 7: `clflushopt` is EBX bit 23, `clwb` bit 24).
    pub(crate) fn detect() -> Self {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            // A CPU without leaf 7 answers zeros: Legacy.
            let ebx = std::arch::x86_64::__cpuid_count(7, 0).ebx;
            if ebx & (1 << 23) != 0 {
                return Instructions::Optimized { clwb: ebx & (1 << 24) != 0 };
            }
        }
        Instructions::Legacy
    }

    /// Writes every line of `[p, p + len)` back to memory, keeping it cached where `clwb`
    /// allows. Weakly ordered: follow with [`store_fence`].
    #[inline]
    pub(crate) fn write_back(self, p: *const u8, len: usize) {
        match self {
            Instructions::Optimized { clwb: true } => lines(p, len).for_each(clwb),
            _ => self.evict(p, len),
        }
    }

    /// [`Instructions::write_back`] of the one line holding `p`. Weakly ordered.
    #[inline(always)]
    pub(crate) fn write_back_line(self, p: *const u8) {
        let line = p as usize & !(LINE - 1);
        match self {
            Instructions::Optimized { clwb: true } => clwb(line),
            Instructions::Optimized { clwb: false } => clflushopt(line),
            Instructions::Legacy => clflush(line),
        }
    }

    /// [`Instructions::write_back_line`] of the line holding each pointer `lines` yields, with
    /// the instruction chosen once for the whole run. Weakly ordered.
    #[inline]
    pub(crate) fn for_each_line_written_back(self, lines: impl Iterator<Item = *const u8>) {
        match self {
            Instructions::Optimized { clwb: true } => lines.for_each(|p| clwb(p as usize & !(LINE - 1))),
            Instructions::Optimized { clwb: false } => lines.for_each(|p| clflushopt(p as usize & !(LINE - 1))),
            Instructions::Legacy => lines.for_each(|p| clflush(p as usize & !(LINE - 1))),
        }
    }

    /// Writes every line of `[p, p + len)` back if dirty and evicts it, so the next read
    /// comes from memory. Weakly ordered: follow with [`store_fence`] or [`full_fence`].
    #[inline]
    pub(crate) fn evict(self, p: *const u8, len: usize) {
        match self {
            Instructions::Optimized { .. } => lines(p, len).for_each(clflushopt),
            Instructions::Legacy => lines(p, len).for_each(clflush),
        }
    }
}

#[inline]
fn clwb(_line: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: clwb only writes a line back; it never faults on a mapped address, and every
    // caller passes lines of heap memory this process has mapped. Detected before use.
    unsafe {
        std::arch::asm!("clwb [{0}]", in(reg) _line, options(nostack, preserves_flags))
    };
}

#[inline]
fn clflushopt(_line: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: as for clwb: a mapped line, an instruction detected before use.
    unsafe {
        std::arch::asm!("clflushopt [{0}]", in(reg) _line, options(nostack, preserves_flags))
    };
}

#[inline]
fn clflush(_line: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: clflush exists on every x86-64 CPU; the line is mapped.
    unsafe {
        std::arch::x86_64::_mm_clflush(_line as *const u8)
    };
}

/// Orders earlier stores and flushes before later stores and flushes (`sfence`).
#[inline]
pub(crate) fn store_fence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: sfence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    crate::sync::fence(crate::sync::Ordering::Release);
}

/// Orders earlier flushes before later loads too (`mfence`): an evicted line is re-read from
/// memory.
#[inline]
pub(crate) fn full_fence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: mfence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_mfence()
    };
    crate::sync::fence(crate::sync::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_cover_every_byte_of_an_unaligned_range() {
        let v: Vec<usize> = lines(100 as *const u8, 100).collect();
        assert_eq!(v, vec![64, 128, 192]);
        assert_eq!(lines(128 as *const u8, 64).count(), 1);
        assert_eq!(lines(128 as *const u8, 0).count(), 1);
    }

    #[test]
    fn flushing_keeps_the_bytes() {
        let ins = Instructions::detect();
        let mut buf = vec![7u8; 300];
        buf[150] = 9;
        ins.write_back(buf.as_ptr(), buf.len());
        ins.evict(buf.as_ptr(), buf.len());
        full_fence();
        assert_eq!(buf[150], 9);
        assert_eq!(buf.iter().filter(|&&b| b == 7).count(), 299);
    }
}
