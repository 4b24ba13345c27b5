//! A thread's free huge address space and its cache of backing objects: process-private,
//! rebuilt from shared state whenever a thread (re)attaches, so it never needs to be
//! persistent or crash-consistent itself (the descriptors are: docs/design.md §7.6).

use std::collections::BTreeMap;

#[cfg(test)]
use crate::layout::DEFAULT_HUGE_CACHE_BYTES;
use crate::persist::huge::HugeBlock;

/// Huge operations between two asks of the system's free memory at most ([`Pressure`]).
pub(crate) const PRESSURE_CALLS: u32 = 64;
/// Bytes that may enter the cache between two asks of the system's free memory at most.
pub(crate) const PRESSURE_STRIDE: u64 = 256 << 20;

/// The cache's sense of memory pressure, kept cheap: the system's free memory (`sysinfo`, a
/// system call) is asked at the first check, then again after [`PRESSURE_CALLS`] checks or
/// once [`PRESSURE_STRIDE`] bytes have entered the cache, whichever comes first — not at every
/// huge operation. In between, the last answer stands, less every byte that entered the cache
/// since (counted as if it were taken from the free memory: a cache can only err towards
/// trimming). A 1 GiB block thus asks at each admission, a 16 MiB one every 16th.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pressure {
    /// Checks since the last ask.
    calls: u32,
    /// Bytes that entered the cache since the last ask.
    entered: u64,
    /// Free bytes at the last ask (`u64::MAX` when the ask failed: never short); `None` before
    /// the first.
    free: Option<u64>,
}

impl Pressure {
    /// Whether `cached` bytes of cached objects leave the system short of memory: less than
    /// twice that is free. `entering` of them enter the cache with this check (0 for a check of
    /// what is cached already); `probe` asks the system for its free bytes when an ask is due.
    pub(crate) fn short(&mut self, cached: u64, entering: u64, probe: impl FnOnce() -> Option<u64>) -> bool {
        self.calls += 1;
        self.entered = self.entered.saturating_add(entering);
        let free = match self.free {
            Some(free) if self.calls < PRESSURE_CALLS && self.entered < PRESSURE_STRIDE => free,
            _ => {
                let free = probe().unwrap_or(u64::MAX);
                *self = Pressure { calls: 0, entered: 0, free: Some(free) };
                free
            }
        };
        free.saturating_sub(self.entered) < cached.saturating_mul(2)
    }
}

/// Disjoint, coalesced free ranges (`start → length`, heap offsets) inside the huge slots one
/// thread slot has claimed, and the slot's cached blocks (descriptors in state
/// [`crate::persist::huge::HugeState::Cached`], whose ranges are not free: each keeps its
/// object at its offset).
///
/// Cache invariant: `cached == Σ size` over `by_size`, `by_size` and `by_age` name the same
/// blocks, and `cached <= limit` after every admission ([`FreeRanges::cache_admits`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FreeRanges {
    ranges: BTreeMap<u64, u64>,
    /// Cached blocks by `(size, offset)`: an allocation takes the smallest that fits without
    /// a scan, however many the byte bound lets in.
    by_size: BTreeMap<(u64, u64), (u64, HugeBlock)>,
    /// The same blocks by age (`sequence → (size, offset)`): a trim discards the oldest first.
    by_age: BTreeMap<u64, (u64, u64)>,
    /// The next block's age.
    sequence: u64,
    /// Bytes of the cached blocks.
    cached: u64,
    /// Bytes the cache may hold ([`crate::Config::huge_cache_bytes`]).
    limit: u64,
    /// When the cache last asked the system for its free memory, and the answer.
    pressure: Pressure,
    /// Whether a range came back ([`FreeRanges::insert`]) since the last
    /// [`FreeRanges::take_grown`]: only then can a huge slot have become wholly free, so only
    /// then is the claim array worth reading (docs/design.md §7.6).
    grown: bool,
    /// The slot's blocks this thread mapped at allocation, by offset: the generation of that
    /// allocation and this process's unmap count ([`crate::huge::view::HugeView::unmap_count`])
    /// read before the mapping was made or checked. A reuse whose count is unchanged skips its
    /// `mincore` (docs/design.md §7.6).
    mapped: BTreeMap<u64, (u64, u64)>,
}

impl FreeRanges {
    /// No free ranges, and an empty cache that may hold `limit` bytes.
    pub(crate) fn new(limit: u64) -> Self {
        Self { limit, ..Self::default() }
    }

    /// Whether a block of `size` bytes fits in the cache as it is (the caller trims first when
    /// it wants room).
    pub(crate) fn cache_admits(&self, size: u64) -> bool {
        self.cached.saturating_add(size) <= self.limit
    }

    /// Whether a freed block of `size` bytes may enter the cache now: it fits the byte bound,
    /// and the system keeps at least twice the cached bytes (this block's included) free
    /// ([`Pressure`]; `probe` asks the system when an ask is due).
    pub(crate) fn admits(&mut self, size: u64, probe: impl FnOnce() -> Option<u64>) -> bool {
        self.cache_admits(size) && !self.pressure.short(self.cached + size, size, probe)
    }

    /// Whether the system has run short of memory for what is cached (less than twice it
    /// free), so that the cache must be emptied now. Never for an empty cache, which asks
    /// nothing.
    pub(crate) fn must_trim(&mut self, probe: impl FnOnce() -> Option<u64>) -> bool {
        self.cached > 0 && self.pressure.short(self.cached, 0, probe)
    }

    /// Enters a cached block.
    pub(crate) fn cache_push(&mut self, b: HugeBlock) {
        let age = self.sequence;
        self.sequence += 1;
        if let Some((old, _)) = self.by_size.insert((b.size, b.offset), (age, b)) {
            // The same range entered twice (never, by the callers): keep the count exact.
            self.by_age.remove(&old);
            self.cached -= b.size;
        }
        self.by_age.insert(age, (b.size, b.offset));
        self.cached += b.size;
    }

    /// Bytes of the cached blocks.
    pub(crate) fn cached_bytes(&self) -> u64 {
        self.cached
    }

    /// Takes the smallest cached block that serves `len` bytes aligned to `align` without
    /// wasting more than a quarter of `len`.
    pub(crate) fn take_cached(&mut self, len: u64, align: u64) -> Option<HugeBlock> {
        let most = len.saturating_add(len / 4);
        let key = self
            .by_size
            .range((len, 0)..=(most, u64::MAX))
            .find(|(&(_, offset), _)| offset % align == 0)
            .map(|(&key, _)| key)?;
        self.remove_cached(key)
    }

    /// Takes the oldest cached block (to trim it).
    pub(crate) fn pop_cached(&mut self) -> Option<HugeBlock> {
        let (_, &key) = self.by_age.first_key_value()?;
        self.remove_cached(key)
    }

    fn remove_cached(&mut self, key: (u64, u64)) -> Option<HugeBlock> {
        let (age, b) = self.by_size.remove(&key)?;
        self.by_age.remove(&age);
        self.cached -= b.size;
        Some(b)
    }

    /// Records that this thread mapped (or found mapped) its block at `offset`, allocation
    /// `generation`, with the process's unmap count `unmaps` read before.
    pub(crate) fn note_mapped(&mut self, offset: u64, generation: u64, unmaps: u64) {
        self.mapped.insert(offset, (generation, unmaps));
    }

    /// Whether block `b` (cached, its last allocation's generation) still maps its object in
    /// this process for certain: this thread mapped it at that allocation and the process has
    /// unmapped no huge range since (`unmaps` is the count now). "No" when not known, which
    /// costs the caller a `mincore`. Forgets the record either way.
    pub(crate) fn kept_mapping(&mut self, b: &HugeBlock, unmaps: u64) -> bool {
        self.mapped.remove(&b.offset) == Some((b.generation, unmaps))
    }

    /// Forgets what [`FreeRanges::note_mapped`] recorded for the block at `offset` (its range
    /// is being given back).
    pub(crate) fn forget_mapped(&mut self, offset: u64) {
        self.mapped.remove(&offset);
    }

    /// Whether a range came back since the last call (and forget it): a huge slot can turn
    /// wholly free only when a range comes back, so a reuse from the cache, which returns
    /// none, leaves nothing to unclaim (docs/design.md §7.6).
    pub(crate) fn take_grown(&mut self) -> bool {
        std::mem::take(&mut self.grown)
    }

    /// Adds `[start, start + len)`, merging with its neighbours. The range must not overlap a
    /// free one (callers add only ranges they took out, or newly claimed slots).
    pub(crate) fn insert(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        self.grown = true;
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
    fn a_range_coming_back_is_the_only_thing_that_makes_a_claim_scan_due() {
        let mut f = FreeRanges::new(1 << 30);
        assert!(!f.take_grown(), "nothing free yet");
        f.insert(0, 1 << 30);
        assert!(f.take_grown(), "a range came back");
        assert!(!f.take_grown(), "asked once");
        // A cached block entering and leaving (threadtest's reuse round) returns no range.
        f.cache_push(cached(0, 16 << 20));
        assert_eq!(f.take_cached(16 << 20, 4096).map(|b| b.offset), Some(0));
        assert!(!f.take_grown(), "a reuse from the cache frees no huge slot");
        f.insert(1 << 30, 1 << 30);
        assert!(f.take_grown(), "a second range came back");
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

    fn cached(offset: u64, size: u64) -> HugeBlock {
        HugeBlock {
            desc: 0x40,
            offset,
            size,
            generation: 1,
            state: Some(crate::persist::huge::HugeState::Cached),
            next: 0,
            object: 1,
        }
    }

    #[test]
    fn the_cache_serves_the_smallest_fitting_block_wasting_at_most_a_quarter() {
        let mut f = FreeRanges::new(DEFAULT_HUGE_CACHE_BYTES);
        f.cache_push(cached(1 << 30, 16 << 20));
        f.cache_push(cached(2 << 30, 12 << 20));
        f.cache_push(cached(3 << 30, 11 << 20));
        assert_eq!(f.take_cached(16 << 20, 4096), Some(cached(1 << 30, 16 << 20)));
        assert_eq!(f.take_cached(8 << 20, 4096), None, "12 MiB wastes more than a quarter of 8");
        assert_eq!(f.take_cached(10 << 20, 4096), Some(cached(3 << 30, 11 << 20)));
        assert_eq!(f.take_cached(10 << 20, 1 << 32), None, "misaligned");
    }

    #[test]
    fn the_cache_is_bounded_in_bytes_only_and_trims_the_oldest_first() {
        let mut f = FreeRanges::new(DEFAULT_HUGE_CACHE_BYTES);
        assert!(!f.cache_admits(DEFAULT_HUGE_CACHE_BYTES + 4096));
        // A burst of 16 MiB blocks: 128 of them fit the default, far more than a count bound
        // of a few objects would keep.
        for i in 0..128 {
            assert!(f.cache_admits(16 << 20), "block {i} refused");
            f.cache_push(cached((i + 1) << 30, 16 << 20));
        }
        assert_eq!(f.cached_bytes(), DEFAULT_HUGE_CACHE_BYTES);
        assert!(!f.cache_admits(4096));
        assert_eq!(f.pop_cached().map(|b| b.offset), Some(1 << 30), "the oldest goes first");
        assert_eq!(f.pop_cached().map(|b| b.offset), Some(2 << 30));
        assert_eq!(f.cached_bytes(), DEFAULT_HUGE_CACHE_BYTES - (32 << 20));
        assert!(f.cache_admits(32 << 20) && !f.cache_admits((32 << 20) + 4096));
    }

    #[test]
    fn a_cache_under_memory_pressure_admits_nothing_and_is_emptied() {
        let mut f = FreeRanges::new(DEFAULT_HUGE_CACHE_BYTES);
        assert!(!f.must_trim(|| panic!("an empty cache asks nothing")));
        // 1 GiB free: two 16 MiB blocks are welcome (64 MiB wanted free).
        assert!(f.admits(16 << 20, || Some(1 << 30)));
        f.cache_push(cached(1 << 30, 16 << 20));
        assert!(!f.must_trim(|| Some(1 << 30)));
        // Then the system runs short: 24 MiB free, under twice the 16 cached.
        let mut short = FreeRanges::new(DEFAULT_HUGE_CACHE_BYTES);
        short.cache_push(cached(1 << 30, 16 << 20));
        assert!(short.must_trim(|| Some(24 << 20)), "the cache is not trimmed under pressure");
        let mut short = FreeRanges::new(DEFAULT_HUGE_CACHE_BYTES);
        assert!(!short.admits(16 << 20, || Some(24 << 20)), "a block enters a cache under pressure");
    }

    #[test]
    fn a_cache_limit_of_zero_keeps_nothing() {
        let f = FreeRanges::new(0);
        assert!(!f.cache_admits(4096));
    }

    #[test]
    fn taking_a_cached_block_keeps_the_byte_count_and_the_age_order() {
        let mut f = FreeRanges::new(1 << 40);
        f.cache_push(cached(1 << 30, 16 << 20));
        f.cache_push(cached(2 << 30, 8 << 20));
        f.cache_push(cached(3 << 30, 16 << 20));
        assert_eq!(f.take_cached(16 << 20, 4096).map(|b| b.offset), Some(1 << 30));
        assert_eq!(f.cached_bytes(), 24 << 20);
        assert_eq!(f.pop_cached().map(|b| b.offset), Some(2 << 30), "the oldest left");
        assert_eq!(f.pop_cached().map(|b| b.offset), Some(3 << 30));
        assert_eq!((f.pop_cached(), f.cached_bytes()), (None, 0));
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_system_is_asked_for_its_free_memory_once_per_stride_of_cached_bytes_not_at_every_operation() {
        let mut p = Pressure::default();
        let mut asks = 0;
        for _ in 0..1000 {
            // 16 MiB blocks entering the cache: an ask every 16th.
            assert!(!p.short(64 * MIB, 16 * MIB, || {
                asks += 1;
                Some(1 << 40)
            }));
        }
        assert_eq!(asks, 1000_u32.div_ceil((PRESSURE_STRIDE / (16 * MIB)) as u32));
        let mut idle = Pressure::default();
        let mut asks = 0;
        for _ in 0..1000 {
            idle.short(64 * MIB, 0, || {
                asks += 1;
                Some(1 << 40)
            });
        }
        assert_eq!(asks, 1000_u32.div_ceil(PRESSURE_CALLS), "checks of a cache that takes nothing in");
    }

    #[test]
    fn bytes_entering_the_cache_between_asks_count_against_the_last_free_memory_reported() {
        let mut p = Pressure::default();
        assert!(!p.short(40 * MIB, 0, || Some(100 * MIB)), "80 MiB wanted free, 100 free");
        // No new ask: 100 MiB less the 16 that entered is 84, under twice 44 (100 is not).
        assert!(p.short(44 * MIB, 16 * MIB, || panic!("asked again within the stride")));
        // A failed ask is never short.
        let mut blind = Pressure::default();
        assert!(!blind.short(1 << 40, 0, || None));
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
