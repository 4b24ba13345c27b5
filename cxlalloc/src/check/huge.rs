//! The huge heap's part of the checker: claims, descriptor lists, hazards, backing objects.

use std::collections::{BTreeMap, HashSet};

use crate::huge::view::{HugeView, MAX_WALK};
use crate::mem::HeapMem;
use crate::persist::huge::{HugeBlock, HugeState};
use crate::protocol::hazard;
use crate::sync::Ordering;
use crate::word::{HazardKey, Holder};

/// Census of the huge heap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HugeCensus {
    /// Huge slots (1 GiB each) of the heap; 0 = no huge heap.
    pub slots: u64,
    /// Huge slots claimed by some thread slot.
    pub claimed_slots: u64,
    /// Live huge blocks.
    pub live: u64,
    /// Bytes of live huge blocks.
    pub live_bytes: u64,
    /// Freed blocks not reclaimed yet (some process still maps them, or their owner has not
    /// done huge work since), their objects released already or not.
    pub freed: u64,
    /// Of the freed blocks, those whose backing object is gone already (released by the
    /// thread that freed them): only a descriptor and address space wait for the owner.
    pub released: u64,
    /// Blocks freed and hazard-free whose backing objects their owners keep for reuse
    /// (docs/design.md §7.6); not live, not leaked.
    pub cached: u64,
    /// Bytes of the cached blocks' objects.
    pub cached_bytes: u64,
    /// Small blocks serving as descriptors (one per live, freed or cached huge block):
    /// the huge heap's own bookkeeping, which [`crate::Report::live_blocks`] leaves out.
    pub descriptors: u64,
    /// Published hazard entries, over all processes.
    pub hazards: u64,
    /// Hazard sets leased by processes that are gone (cleared by the next reclaim).
    pub dead_hazard_sets: u64,
    /// Backing objects present (`None`: anonymous heap, no objects).
    pub objects: Option<u64>,
}

/// Checks the huge heap of `mem`, appending problems to `problems`.
pub(crate) fn check(mem: &HeapMem, problems: &mut Vec<String>) -> HugeCensus {
    let Some(view) = mem.huge() else { return HugeCensus::default() };
    let mut census = HugeCensus { slots: view.slot_count() as u64, ..Default::default() };
    let slots = mem.layout.slots;
    let mut claims = vec![0u64; view.slot_count()];
    for (i, c) in claims.iter_mut().enumerate() {
        *c = view.claim(i).map_or(0, |w| w.load(Ordering::Acquire));
        if *c > u64::from(slots) {
            problems.push(format!("huge slot {i} claimed by slot {} of {slots}", *c - 1));
        }
        census.claimed_slots += u64::from(*c != 0);
    }
    let mut blocks = Vec::new();
    for slot in mem.used_slots() {
        walk_list(view, slot, &claims, &mut census, &mut blocks, problems);
    }
    blocks.sort_by_key(|(_, b)| b.offset);
    for w in blocks.windows(2) {
        let ((s0, b0), (s1, b1)) = (&w[0], &w[1]);
        if b0.offset + b0.size > b1.offset {
            problems
                .push(format!("huge blocks at {:#x} (slot {s0}) and {:#x} (slot {s1}) overlap", b0.offset, b1.offset));
        }
    }
    check_hazards(mem, view, &mut census, problems);
    if mem.backing().huge_dir().is_some() {
        let objects: HashSet<(u64, u64)> = mem.backing().huge_objects().into_iter().collect();
        census.objects = Some(objects.len() as u64);
        // A released block's object is gone; one being released may or may not have it yet.
        let named: HashSet<(u64, u64)> = blocks.iter().map(|(_, b)| (b.offset, b.object)).collect();
        for (_, b) in &blocks {
            let gone = matches!(b.state, Some(HugeState::Released | HugeState::Releasing));
            if !objects.contains(&(b.offset, b.object)) {
                if !gone {
                    problems.push(format!("huge block at {:#x} has no backing object", b.offset));
                }
            } else if b.state == Some(HugeState::Released) {
                problems.push(format!("released huge block at {:#x} still has its backing object", b.offset));
            } else if let Some(why) = mem.backing().huge_object_problem(&crate::backing::HugeName::of_block(b)) {
                // A process the heap admits could not map it: its first touch would be a SIGSEGV.
                problems.push(format!("huge block at {:#x}: backing object {why}", b.offset));
            }
        }
        for (offset, generation) in objects.difference(&named) {
            problems.push(format!("leaked backing object for {offset:#x} generation {generation}"));
        }
    }
    census
}

fn walk_list(
    view: &HugeView,
    slot: u32,
    claims: &[u64],
    census: &mut HugeCensus,
    blocks: &mut Vec<(u32, HugeBlock)>,
    problems: &mut Vec<String>,
) {
    let Some(rec) = view.record(slot) else { return };
    let mut seen = HashSet::new();
    let mut next = 0;
    for item in view.chain(rec.head.load(Ordering::Acquire), &|_| true) {
        let b = match item {
            Ok(b) => b,
            Err(link) => {
                problems.push(format!("slot {slot}: huge descriptor link {link:#x} outside the small heap"));
                return;
            }
        };
        if !seen.insert(b.desc) {
            problems.push(format!("slot {slot}: huge descriptor list has a cycle at {:#x}", b.desc));
            return;
        }
        next = b.next;
        census.descriptors += 1;
        match b.state {
            Some(HugeState::Live) => {
                census.live += 1;
                census.live_bytes += b.size;
            }
            Some(HugeState::Freed | HugeState::Reclaiming | HugeState::Releasing) => census.freed += 1,
            Some(HugeState::Released) => {
                census.freed += 1;
                census.released += 1;
            }
            Some(HugeState::Cached) => {
                census.cached += 1;
                census.cached_bytes += b.size;
            }
            None => problems.push(format!("slot {slot}: huge descriptor {:#x} has no valid state", b.desc)),
        }
        let end = b.offset.checked_add(b.size);
        let inside = view.slot_of(b.offset).is_some() && end.is_some_and(|e| view.slot_of(e - 1).is_some());
        if !inside || b.size == 0 || b.offset % view.page as u64 != 0 {
            problems.push(format!("slot {slot}: huge block {:#x}+{:#x} outside the huge span", b.offset, b.size));
        } else {
            let first = view.slot_of(b.offset).unwrap_or(0);
            let last = view.slot_of(b.offset + b.size - 1).unwrap_or(0);
            if (first..=last).any(|i| claims[i] != u64::from(slot) + 1) {
                problems.push(format!("slot {slot}: huge block at {:#x} lies in slots it has not claimed", b.offset));
            }
            blocks.push((slot, b));
        }
    }
    if seen.len() >= MAX_WALK && next != 0 {
        problems.push(format!("slot {slot}: huge descriptor list longer than {MAX_WALK}"));
    }
}

fn check_hazards(mem: &HeapMem, view: &HugeView, census: &mut HugeCensus, problems: &mut Vec<String>) {
    let mut per_set: BTreeMap<u32, u64> = BTreeMap::new();
    for s in 0..view.sets() {
        for (_, word, _) in hazard::entries(view.set(s)) {
            *per_set.entry(s).or_default() += 1;
            if HazardKey::unpack(word).is_some_and(|k| view.slot_of(k.offset).is_none()) {
                problems.push(format!("hazard set {s}: entry {word:#x} names no huge offset"));
            }
        }
    }
    for (&s, &n) in &per_set {
        census.hazards += n;
        match Holder::unpack(view.lease(s).load(Ordering::Acquire)) {
            None => problems.push(format!("hazard set {s} holds {n} entries but is not leased")),
            Some(h) if !mem.holder_alive(h) => census.dead_hazard_sets += 1,
            Some(_) => {}
        }
    }
}
