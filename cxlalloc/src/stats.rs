//! Heap statistics: census by state and class, operation counters, HWcc vs SWcc bytes.

use crate::check::huge::HugeCensus;
use crate::check::{self, BracketCensus};
use crate::class::Bracket;
use crate::mem::HeapMem;
use crate::persist::record::ThreadRecord;
use crate::protocol::hazard;
use crate::sync::Ordering;

/// Slow-path operation counts summed over all thread slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpCounters {
    /// Remote frees (T10 + T8).
    pub remote_frees: u64,
    /// Slabs taken by extending the heap (T1).
    pub slabs_bumped: u64,
    /// Slabs popped from the global list (T2).
    pub global_pops: u64,
    /// Slabs pushed to the global list (T9).
    pub global_pushes: u64,
    /// Slabs claimed by their last remote free (T8).
    pub claims: u64,
    /// Slabs detached when full (T4).
    pub detaches: u64,
    /// Slabs disowned when full (T5).
    pub disowns: u64,
    /// Blocks taken back from mailboxes (docs/design.md §4.6): remote frees reused before
    /// their slab drained.
    pub harvested: u64,
}

/// A snapshot of a heap's use.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Census of the small and large brackets.
    pub brackets: Vec<BracketCensus>,
    /// Operation counters.
    pub counters: OpCounters,
    /// Bytes of hardware-coherent metadata in use: the shared region's fixed words and host
    /// table, the lease, help word and mailbox heads of each slot ever leased, the claims
    /// region (with a huge heap), and the remote counters of existing slabs. Slots never
    /// leased are not counted (their bytes are never touched).
    pub hwcc_bytes: u64,
    /// Bytes of software-coherent metadata in use: the records of slots ever leased and the
    /// descriptors of existing slabs.
    pub swcc_metadata_bytes: u64,
    /// Bytes of slab data in the heap (length × slab size).
    pub data_bytes: u64,
    /// Leased thread slots.
    pub leased_slots: u32,
    /// Census of the huge heap: claimed slots, live and freed blocks and bytes, hazards.
    pub huge: HugeCensus,
    /// Huge blocks this heap instance has mapped (its published hazards).
    pub huge_mapped_here: u64,
    /// HWcc bytes that crash recovery costs: the detectable-CAS help words, one per slot ever
    /// leased (part of `hwcc_bytes`; 0 with recovery off, which never writes them).
    pub recovery_hwcc_bytes: u64,
}

/// Collects statistics (walks the heap like the checker; see its caveats on concurrency).
pub(crate) fn stats(mem: &HeapMem) -> Stats {
    let report = check::check(mem);
    let mut counters = OpCounters::default();
    for slot in mem.used_slots() {
        let c = &mem.record(slot).counters;
        let read = |x: &crate::sync::AtomicU64| x.load(Ordering::Relaxed);
        counters.remote_frees += read(&c.remote_frees);
        counters.slabs_bumped += read(&c.slabs_bumped);
        counters.global_pops += read(&c.global_pops);
        counters.global_pushes += read(&c.global_pushes);
        counters.claims += read(&c.claims);
        counters.detaches += read(&c.detaches);
        counters.disowns += read(&c.disowns);
        counters.harvested += read(&c.harvested);
    }
    let used_slots = mem.used_slots().count() as u32;
    // A corrupt length word can exceed the capacity (the check reports it): count only slabs
    // the heap can have.
    let lengths = Bracket::ALL.map(|b| report.bracket(b).length.min(report.bracket(b).capacity));
    let descriptors: u64 =
        Bracket::ALL.iter().map(|&b| u64::from(lengths[b as usize]) * b.spec().descriptor_size() as u64).sum();
    let data_bytes = Bracket::ALL.iter().map(|&b| u64::from(lengths[b as usize]) << b.spec().slab_shift).sum();
    Stats {
        hwcc_bytes: mem.layout.hwcc_bytes(lengths, used_slots),
        swcc_metadata_bytes: u64::from(used_slots) * std::mem::size_of::<ThreadRecord>() as u64 + descriptors,
        data_bytes,
        leased_slots: report.leased_slots,
        brackets: report.brackets,
        counters,
        huge: report.huge,
        huge_mapped_here: mem.huge().map_or(0, |v| v.my_sets().map(|s| hazard::entries(v.set(s)).count() as u64).sum()),
        recovery_hwcc_bytes: if mem.recoverable() { u64::from(used_slots) * 8 } else { 0 },
    }
}
