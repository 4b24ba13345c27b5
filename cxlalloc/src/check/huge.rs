//! The huge heap's part of the checker: claims, descriptor lists, hazards, backing objects.

use std::collections::{BTreeMap, HashSet};

use crate::huge::descriptor::HugeState;
use crate::huge::view::{HugeView, MAX_WALK};
use crate::mem::HeapMem;
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
    /// done huge work since).
    pub freed: u64,
    /// Small blocks serving as descriptors (one per live or freed huge block).
    pub descriptors: u64,
    /// Published hazard entries, over all processes.
    pub hazards: u64,
    /// Hazard sets leased by processes that are gone (cleared by the next reclaim).
    pub dead_hazard_sets: u64,
    /// Backing objects present (`None`: anonymous heap, no objects).
    pub objects: Option<u64>,
}

struct Block {
    slot: u32,
    offset: u64,
    size: u64,
    generation: u64,
}

/// Checks the huge heap of `mem`, appending problems to `problems`.
pub fn check(mem: &HeapMem, problems: &mut Vec<String>) -> HugeCensus {
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
    blocks.sort_by_key(|b| b.offset);
    for w in blocks.windows(2) {
        if w[0].offset + w[0].size > w[1].offset {
            problems.push(format!(
                "huge blocks at {:#x} (slot {}) and {:#x} (slot {}) overlap",
                w[0].offset, w[0].slot, w[1].offset, w[1].slot
            ));
        }
    }
    check_hazards(view, &mut census, problems);
    if mem.backing().huge_dir().is_some() {
        let objects: HashSet<(u64, u64)> = mem.backing().huge_objects().into_iter().collect();
        census.objects = Some(objects.len() as u64);
        let named: HashSet<(u64, u64)> = blocks.iter().map(|b| (b.offset, b.generation)).collect();
        for b in &blocks {
            if !objects.contains(&(b.offset, b.generation)) {
                problems.push(format!("huge block at {:#x} has no backing object", b.offset));
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
    blocks: &mut Vec<Block>,
    problems: &mut Vec<String>,
) {
    let Some(rec) = view.record(slot) else { return };
    let mut at = rec.head.load(Ordering::Acquire);
    let mut seen = HashSet::new();
    while at != 0 {
        if !seen.insert(at) || seen.len() > MAX_WALK {
            problems.push(format!("slot {slot}: huge descriptor list has a cycle at {at:#x}"));
            return;
        }
        let (Some(b), Some(d)) = (view.read(at), view.descriptor(at)) else {
            problems.push(format!("slot {slot}: huge descriptor link {at:#x} outside the small heap"));
            return;
        };
        census.descriptors += 1;
        match b.state {
            Some(HugeState::Live) => {
                census.live += 1;
                census.live_bytes += b.size;
            }
            Some(HugeState::Freed | HugeState::Reclaiming) => census.freed += 1,
            None => problems.push(format!("slot {slot}: huge descriptor {at:#x} has no valid state")),
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
            blocks.push(Block { slot, offset: b.offset, size: b.size, generation: b.generation });
        }
        at = d.next.load(Ordering::Acquire);
    }
}

fn check_hazards(view: &HugeView, census: &mut HugeCensus, problems: &mut Vec<String>) {
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
            Some(h) if !crate::thread::identity::is_alive(h) => census.dead_hazard_sets += 1,
            Some(_) => {}
        }
    }
}
