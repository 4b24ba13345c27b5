//! A thread's free huge address space: process-private, rebuilt from shared state whenever a
//! thread (re)attaches, so it never needs to be persistent or crash-consistent itself.

use std::collections::BTreeMap;

/// Disjoint, coalesced free ranges (`start → length`, heap offsets) inside the huge slots one
/// thread slot has claimed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FreeRanges {
    ranges: BTreeMap<u64, u64>,
}

impl FreeRanges {
    /// Adds `[start, start + len)`, merging with its neighbours. The range must not overlap a
    /// free one (callers add only ranges they took out, or newly claimed slots).
    pub(crate) fn insert(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (mut start, mut len) = (start, len);
        if let Some((&s, &l)) = self.ranges.range(..start).next_back() {
            if s + l == start {
                self.ranges.remove(&s);
                start = s;
                len += l;
            }
        }
        if let Some(l) = self.ranges.remove(&(start + len)) {
            len += l;
        }
        self.ranges.insert(start, len);
    }

    /// Takes the first (lowest) `len` bytes aligned to `align` (a power of two) that fit;
    /// the leftovers on either side stay free.
    pub(crate) fn take(&mut self, len: u64, align: u64) -> Option<u64> {
        let at = self.ranges.iter().find_map(|(&s, &l)| {
            let at = s.checked_next_multiple_of(align)?;
            (at.checked_add(len)? <= s + l).then_some(at)
        })?;
        self.remove(at, len).then_some(at)
    }

    /// Whether `[start, start + len)` is wholly free.
    pub(crate) fn covers(&self, start: u64, len: u64) -> bool {
        self.ranges.range(..=start).next_back().is_some_and(|(&s, &l)| s + l >= start + len)
    }

    /// Removes `[start, start + len)`, which must be wholly free ([`FreeRanges::covers`]).
    pub(crate) fn remove(&mut self, start: u64, len: u64) -> bool {
        let Some((&s, &l)) = self.ranges.range(..=start).next_back() else { return false };
        if s + l < start + len {
            return false;
        }
        self.ranges.remove(&s);
        self.insert(s, start - s);
        self.insert(start + len, s + l - (start + len));
        true
    }

    /// Free bytes in all.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.ranges.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_ranges_coalesce() {
        let mut f = FreeRanges::default();
        f.insert(0, 10);
        f.insert(20, 10);
        f.insert(10, 10);
        assert_eq!(f.ranges.len(), 1);
        assert!(f.covers(0, 30));
    }

    #[test]
    fn take_is_first_fit_and_aligned() {
        let mut f = FreeRanges::default();
        f.insert(4096, 3 * 4096);
        f.insert(1 << 20, 1 << 20);
        assert_eq!(f.take(4096, 4096), Some(4096));
        assert_eq!(f.take(4096, 1 << 20), Some(1 << 20));
        assert_eq!(f.total(), 2 * 4096 + (1 << 20) - 4096);
        assert_eq!(f.take(2 << 20, 4096), None);
    }

    #[test]
    fn remove_splits_a_range() {
        let mut f = FreeRanges::default();
        f.insert(0, 100);
        assert!(f.remove(40, 20));
        assert!(f.covers(0, 40) && f.covers(60, 40) && !f.covers(40, 1));
        assert!(!f.remove(30, 20));
    }
}
