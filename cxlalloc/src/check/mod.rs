//! The heap checker: walks every list, descriptor and counter — and the huge heap's claims,
//! descriptors, hazards and backing objects ([`huge`]) — reports each inconsistency and a census
//! by state. It is the oracle of every test and the `cxlalloc check` command.
//!
//! Run it on a quiescent heap: while other threads allocate, slabs move between states and the
//! report is only advisory. Every walk is bounded by the heap length, so a corrupt link or a
//! cycle becomes a reported problem, never a hang.

pub(crate) mod huge;

use std::fmt;

use crate::class::{Bracket, LARGE_CLASSES, SMALL_CLASSES};
use crate::mem::{HeapMem, Slab};
use crate::persist::redo::{Pending, Redo};
use crate::protocol::mailbox::{self, BlockId, Link};
use crate::slab::ops::remote_count;
use crate::sync::Ordering;
use crate::word::{Holder, Tagged};

/// The state of a slab, as found by the checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlabState {
    /// On the global free list.
    Global,
    /// On a thread's unsized list.
    Unsized,
    /// On a thread's sized list.
    Sized,
    /// Full, owned, off-list.
    Detached,
    /// Full, unowned, waiting for its last remote free.
    Disowned,
    /// Not reachable by any rule (leaked, or mid-operation in a live or dead thread).
    Unreachable,
}

const STATES: usize = 6;

impl SlabState {
    /// Every state, in census order.
    pub const ALL: [SlabState; STATES] = [
        SlabState::Global,
        SlabState::Unsized,
        SlabState::Sized,
        SlabState::Detached,
        SlabState::Disowned,
        SlabState::Unreachable,
    ];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            SlabState::Global => "global",
            SlabState::Unsized => "unsized",
            SlabState::Sized => "sized",
            SlabState::Detached => "detached",
            SlabState::Disowned => "disowned",
            SlabState::Unreachable => "unreachable",
        }
    }
}

/// Per-class occupancy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassCensus {
    /// Block size of the class, bytes.
    pub block_bytes: u32,
    /// Slabs holding this class (sized, detached or disowned).
    pub slabs: u64,
    /// Blocks in those slabs.
    pub blocks: u64,
    /// Blocks free in owners' bitsets.
    pub free_blocks: u64,
    /// Blocks freed remotely and not yet reclaimed.
    pub remote_freed: u64,
    /// Blocks freed remotely and waiting in their owner's mailbox (docs/design.md §4.6).
    pub mailbox_blocks: u64,
}

impl ClassCensus {
    /// Blocks handed out and not freed. Saturating: on a heap whose metadata is inconsistent
    /// (which the report's issues name) the counts may exceed the blocks, and a census must
    /// not panic.
    pub fn live_blocks(&self) -> u64 {
        self.blocks
            .saturating_sub(self.free_blocks)
            .saturating_sub(self.remote_freed)
            .saturating_sub(self.mailbox_blocks)
    }
}

/// Census of one bracket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BracketCensus {
    /// The bracket's name ("small", "large").
    pub name: &'static str,
    /// Bytes of one slab of the bracket.
    pub slab_bytes: u64,
    /// Heap length, slabs.
    pub length: u32,
    /// Capacity, slabs.
    pub capacity: u32,
    /// Slab count per [`SlabState`] (in `SlabState::ALL` order).
    pub by_state: [u64; STATES],
    /// Per class (index = class id − 1).
    pub classes: Vec<ClassCensus>,
}

impl BracketCensus {
    /// Slab count by state, with each state's name, in [`SlabState::ALL`] order.
    pub fn states(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        SlabState::ALL.iter().map(|&s| (s.name(), self.slabs(s)))
    }

    /// Slabs in `state`.
    pub fn slabs(&self, state: SlabState) -> u64 {
        self.by_state[state as usize]
    }

    /// Live (allocated, not freed) blocks over all classes.
    pub fn live_blocks(&self) -> u64 {
        self.classes.iter().map(ClassCensus::live_blocks).sum()
    }
}

/// One inconsistency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Bracket concerned.
    pub bracket: Bracket,
    /// Slab concerned, if one.
    pub slab: Option<u32>,
    /// What is wrong.
    pub what: String,
}

/// A thread slot with an operation in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The slot.
    pub slot: u32,
    /// Its decoded record (`None`: idle, or the record word is not a valid record).
    pub record: Option<Redo>,
    /// Its decoded pending (outer) record, if one is in flight.
    pub pending: Option<Pending>,
    /// Whether the slot's holder is alive.
    pub holder_alive: bool,
}

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Small and large census.
    pub brackets: Vec<BracketCensus>,
    /// Inconsistencies (at most the first 1000 are listed).
    pub problems: Vec<Problem>,
    /// Slots whose redo or pending record is not idle.
    pub in_flight: Vec<InFlight>,
    /// Leased slots.
    pub leased_slots: u32,
    /// Census of the huge heap.
    pub huge: huge::HugeCensus,
    /// Inconsistencies of the huge heap.
    pub huge_problems: Vec<String>,
}

/// Most problems a report lists.
pub(crate) const MAX_PROBLEMS: usize = 1000;

impl Report {
    /// True when no inconsistency was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.huge_problems.is_empty()
    }

    /// Blocks the application holds: live small and large blocks (less the small blocks that
    /// serve as huge descriptors) plus live huge blocks. 0 once every block is freed.
    pub fn live_blocks(&self) -> u64 {
        let slab: u64 = self.brackets.iter().map(BracketCensus::live_blocks).sum();
        slab.saturating_sub(self.huge.descriptors) + self.huge.live
    }

    /// Census of `b`.
    pub fn bracket(&self, b: Bracket) -> &BracketCensus {
        &self.brackets[b as usize]
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in Bracket::ALL {
            let c = self.bracket(b);
            write!(f, "{:>5}: length {}/{} slabs;", b.name(), c.length, c.capacity)?;
            for s in SlabState::ALL {
                write!(f, " {} {}", s.name(), c.slabs(s))?;
            }
            write!(f, "; live blocks {}", c.live_blocks())?;
            // The huge heap's descriptors are small blocks, but bookkeeping, not the
            // application's: said apart.
            if b == Bracket::Small && self.huge.descriptors > 0 {
                write!(f, " ({} of them huge descriptors)", self.huge.descriptors)?;
            }
            writeln!(f)?;
        }
        let h = &self.huge;
        if h.slots > 0 {
            write!(
                f,
                " huge: {}/{} slots claimed; live {} ({} bytes); freed awaiting reclaim {} ({} objects \
                 released); cached {} ({} bytes); hazards {}",
                h.claimed_slots,
                h.slots,
                h.live,
                h.live_bytes,
                h.freed,
                h.released,
                h.cached,
                h.cached_bytes,
                h.hazards
            )?;
            if let Some(o) = h.objects {
                write!(f, "; backing objects {o}")?;
            }
            writeln!(f)?;
        }
        writeln!(f, "leased slots: {}", self.leased_slots)?;
        for i in &self.in_flight {
            writeln!(
                f,
                "slot {} has an operation in flight: {:?} / {:?} (holder alive: {})",
                i.slot, i.record, i.pending, i.holder_alive
            )?;
        }
        if self.is_clean() {
            writeln!(f, "no inconsistencies")
        } else {
            writeln!(f, "{} inconsistencies:", self.problems.len() + self.huge_problems.len())?;
            for p in &self.huge_problems {
                writeln!(f, "  huge: {p}")?;
            }
            for p in &self.problems {
                match p.slab {
                    Some(s) => writeln!(f, "  {} slab {s}: {}", p.bracket.name(), p.what)?,
                    None => writeln!(f, "  {}: {}", p.bracket.name(), p.what)?,
                }
            }
            Ok(())
        }
    }
}

struct Walker<'a> {
    mem: &'a HeapMem,
    b: Bracket,
    len: u32,
    state: Vec<Option<SlabState>>,
    problems: &'a mut Vec<Problem>,
}

impl Walker<'_> {
    fn problem(&mut self, slab: Option<u32>, what: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(Problem { bracket: self.b, slab, what });
        }
    }

    fn slab(&self, index: u32) -> Option<Slab> {
        if index < self.len {
            self.mem.slab(self.b, index)
        } else {
            None
        }
    }

    /// Marks the slab with list link `link` as `state`; `None` (and a problem) if the link is
    /// out of range or the slab was already seen.
    fn visit(&mut self, link: u32, state: SlabState, name: &str) -> Option<Slab> {
        let Some(slab) = link.checked_sub(1).and_then(|i| self.slab(i)) else {
            self.problem(None, format!("{name}: link {link} beyond heap length {}", self.len));
            return None;
        };
        if let Some(prev) = self.state[slab.index() as usize] {
            self.problem(Some(slab.index()), format!("{name}: already {} (cycle or on two lists)", prev.name()));
            return None;
        }
        self.state[slab.index() as usize] = Some(state);
        Some(slab)
    }

    /// Walks a list from `head`, marking each slab `state`; returns the slabs in order.
    fn walk(&mut self, head: u32, state: SlabState, name: &str) -> Vec<Slab> {
        let mut out = Vec::new();
        let mut link = head;
        while link != 0 {
            let Some(slab) = self.visit(link, state, name) else {
                break;
            };
            out.push(slab);
            link = self.mem.desc(self.b, slab).head.next.load(Ordering::Relaxed);
        }
        out
    }

    /// Checks that a slab on one of `slot`'s lists is owned by it and has class `class`.
    fn expect_owned(&mut self, slab: Slab, slot: u32, class: u32, what: &str) {
        let d = self.mem.desc(self.b, slab).head;
        let owner = d.owner.load(Ordering::Relaxed);
        if owner != slot + 1 {
            self.problem(Some(slab.index()), format!("slot {slot}'s {what} but owned by {owner}"));
        }
        let found = d.class.load(Ordering::Relaxed);
        if found != class {
            self.problem(Some(slab.index()), format!("slot {slot}'s {what} (class {class}) but class {found}"));
        }
    }
}

/// Checks the heap mapped at `mem` (see the module docs for when the result is exact).
pub(crate) fn check(mem: &HeapMem) -> Report {
    let mut report = Report::default();
    // Without coherence the checker reads what hosts wrote back, not stale copies of its own.
    for b in Bracket::ALL {
        mem.refresh_descriptors(b, crate::coherence::Site::Scan);
    }
    for slot in mem.used_slots() {
        let (record, len) = mem.record_bytes(slot);
        mem.swcc.refresh(crate::coherence::Site::Scan, record, len);
    }
    for slot in mem.used_slots() {
        let holder = Holder::unpack(mem.lease(slot).holder.load(Ordering::Acquire));
        report.leased_slots += u32::from(holder.is_some());
        let rec = mem.record(slot);
        let word = rec.redo.load(Ordering::Acquire);
        let pending = rec.pending.word.load(Ordering::Acquire);
        if word != 0 || pending != 0 {
            let holder_alive = holder.is_some_and(|h| mem.holder_alive(h));
            report.in_flight.push(InFlight {
                slot,
                record: Redo::unpack(word),
                pending: Pending::unpack(pending),
                holder_alive,
            });
        }
    }
    for b in Bracket::ALL {
        let census = check_bracket(mem, b, &mut report.problems);
        report.brackets.push(census);
    }
    report.huge = huge::check(mem, &mut report.huge_problems);
    report
}

fn check_bracket(mem: &HeapMem, b: Bracket, problems: &mut Vec<Problem>) -> BracketCensus {
    let spec = b.spec();
    let len = Tagged::unpack(mem.globals(b).length.load(Ordering::Acquire)).payload;
    let capacity = mem.layout.bracket(b).capacity;
    let class_count = match b {
        Bracket::Small => SMALL_CLASSES,
        Bracket::Large => LARGE_CLASSES,
    };
    let classes = (1..=class_count as u32)
        .map(|c| ClassCensus { block_bytes: spec.class(c).map_or(0, |i| i.size), ..Default::default() })
        .collect();
    let mut census = BracketCensus {
        name: b.name(),
        slab_bytes: spec.slab_size() as u64,
        length: len,
        capacity,
        classes,
        ..Default::default()
    };
    let mut w = Walker { mem, b, len: len.min(capacity), state: vec![None; len.min(capacity) as usize], problems };
    let mut cached = vec![0u32; w.len as usize];
    let mut waiting = vec![0u32; w.len as usize];
    walk_mailboxes(&mut w, &mut waiting);
    if len > capacity {
        w.problem(None, format!("length {len} exceeds capacity {capacity}"));
    }

    let head = Tagged::unpack(mem.globals(b).global_head.load(Ordering::Acquire)).payload;
    for slab in w.walk(head, SlabState::Global, "global list") {
        let d = mem.desc(b, slab).head;
        if d.owner.load(Ordering::Relaxed) != 0 {
            w.problem(Some(slab.index()), "on the global list but owned".into());
        }
        if d.class.load(Ordering::Relaxed) != 0 {
            w.problem(Some(slab.index()), "on the global list but sized".into());
        }
    }

    for slot in mem.used_slots() {
        let lists = mem.record(slot).lists(b);
        let unsized_slabs = w.walk(lists.unsized_head.load(Ordering::Relaxed), SlabState::Unsized, "unsized list");
        let recorded = lists.unsized_len.load(Ordering::Relaxed);
        if unsized_slabs.len() as u32 != recorded {
            w.problem(None, format!("slot {slot}: unsized length {recorded} but {} on the list", unsized_slabs.len()));
        }
        for slab in unsized_slabs {
            w.expect_owned(slab, slot, 0, "unsized slab");
        }
        for (ci, head) in lists.sized.iter().enumerate() {
            let class = ci as u32 + 1;
            let mut prev_link = 0;
            for slab in w.walk(head.load(Ordering::Relaxed), SlabState::Sized, "sized list") {
                w.expect_owned(slab, slot, class, "sized slab");
                let d = mem.desc(b, slab).head;
                if d.prev.load(Ordering::Relaxed) != prev_link {
                    w.problem(Some(slab.index()), "sized list back link broken".into());
                }
                if d.free.load(Ordering::Relaxed) == 0 {
                    w.problem(Some(slab.index()), "on a sized list with no free block".into());
                }
                prev_link = slab.link();
            }
        }
        for (ci, cur) in lists.current.iter().enumerate() {
            let class = ci as u32 + 1;
            let bits = cur.bits.load(Ordering::Relaxed);
            let link = cur.slab();
            if link == 0 {
                if bits != 0 {
                    w.problem(None, format!("slot {slot}: class {class} has cached bits but no current slab"));
                }
                continue;
            }
            let Some(slab) = w.visit(link, SlabState::Sized, "current slab") else {
                continue;
            };
            w.expect_owned(slab, slot, class, "current slab");
            let word = cur.id().word;
            let d = mem.desc(b, slab);
            if bits == 0 {
                w.problem(Some(slab.index()), "current slab with an empty cached word".into());
            }
            match (d.bits.get(word as usize), spec.class(class)) {
                (Some(in_bitset), Some(info)) => {
                    if in_bitset.load(Ordering::Relaxed) & bits != 0 {
                        w.problem(Some(slab.index()), "cached blocks are also free in the bitset".into());
                    }
                    let expected = mem.data_offset(b, slab, word as usize * 64 * info.size as usize) as u64;
                    if cur.block0.load(Ordering::Relaxed) != expected {
                        w.problem(Some(slab.index()), "cached word's block offset is wrong".into());
                    }
                }
                _ => w.problem(Some(slab.index()), format!("cached word {word} or class {class} out of range")),
            }
            cached[slab.index() as usize] += bits.count_ones();
        }
    }

    for index in 0..w.len {
        let Some(slab) = w.slab(index) else { continue };
        let d = mem.desc(b, slab);
        let owner = d.head.owner.load(Ordering::Relaxed);
        let class = d.head.class.load(Ordering::Relaxed);
        let free = d.head.free.load(Ordering::Relaxed);
        let cached_here = cached[index as usize];
        let waiting_here = waiting[index as usize];
        let state = match w.state[index as usize] {
            Some(s) => s,
            None if class != 0 && free == 0 && owner != 0 => SlabState::Detached,
            // A slab abandoned at detach keeps its free bits as tombstones.
            None if class != 0 && owner == 0 => SlabState::Disowned,
            None => {
                w.problem(Some(index), format!("unreachable: owner {owner}, class {class}, free {free}"));
                SlabState::Unreachable
            }
        };
        census.by_state[state as usize] += 1;
        if class == 0 {
            continue;
        }
        let Some(info) = spec.class(class) else {
            w.problem(Some(index), format!("class {class} does not exist"));
            continue;
        };
        let geometry = (
            d.head.size.load(Ordering::Relaxed),
            d.head.blocks.load(Ordering::Relaxed),
            d.head.recip.load(Ordering::Relaxed),
        );
        if geometry != (info.size, info.blocks, info.recip) {
            w.problem(Some(index), format!("class {class} but block geometry {geometry:?}"));
        }
        if free != d.count_free() {
            w.problem(Some(index), format!("free count {free} but {} bits set", d.count_free()));
        }
        if !d.summary_consistent() {
            w.problem(Some(index), "summary word disagrees with bitset".into());
        }
        let counter = remote_count(mem, b, slab);
        if counter > info.blocks {
            w.problem(Some(index), format!("remote counter {counter} above block count {}", info.blocks));
        }
        // Owned slabs: their free blocks are still counted by the remote counter. Disowned
        // slabs: their free bits were subtracted when they were abandoned.
        let disowned = state == SlabState::Disowned;
        if free + cached_here + waiting_here > info.blocks {
            w.problem(Some(index), format!("{waiting_here} blocks in mailboxes but {free} free of {}", info.blocks));
        }
        if !disowned && free + cached_here > counter {
            w.problem(Some(index), format!("{} free blocks but remote counter {counter}", free + cached_here));
        }
        if disowned && counter + free > info.blocks {
            w.problem(Some(index), format!("abandoned {free} free blocks but remote counter {counter}"));
        }
        if disowned && counter == 0 {
            w.problem(Some(index), "disowned with remote counter 0 (never claimed)".into());
        }
        let abandoned = if disowned { free } else { 0 };
        let c = &mut census.classes[class as usize - 1];
        c.slabs += 1;
        c.blocks += u64::from(info.blocks);
        c.free_blocks += u64::from(free + cached_here);
        c.mailbox_blocks += u64::from(waiting_here);
        // Saturating: a live heap can be read between a disown and the subtraction it precedes.
        c.remote_freed += u64::from(info.blocks.saturating_sub(counter).saturating_sub(abandoned));
    }
    census
}

/// Walks every used slot's mailbox of the walker's bracket (docs/design.md §4.6): each entry must
/// name a block of a sized slab below the length, carry that slab's link mark, not be free in
/// the slab's bitset, and appear once; and a slot with no holder must hold none (they would be
/// stranded). Counts the entries per slab into `waiting`. Bounded by
/// the bracket's block count, so a cycle is a problem, never a hang.
fn walk_mailboxes(w: &mut Walker<'_>, waiting: &mut [u32]) {
    let (mem, b) = (w.mem, w.b);
    let mut seen = std::collections::HashSet::new();
    let limit = u64::from(w.len) * 64 * b.bitset_words() as u64;
    for slot in mem.used_slots() {
        let Some(head) = mem.mailbox(b, slot) else { continue };
        let held = || Holder::unpack(mem.lease(slot).holder.load(Ordering::Acquire)).is_some();
        // Read before and after the walk: a slot let go during it closed its mailbox first.
        let held_before = held();
        let mut payload = Tagged::unpack(head.load(Ordering::Acquire)).payload;
        if payload == mailbox::CLOSED {
            continue;
        }
        let mut entries = 0u32;
        let mut steps = 0u64;
        while payload != mailbox::EMPTY {
            steps += 1;
            let bad = |what: String| format!("slot {slot}'s mailbox: {what}");
            if steps > limit || !seen.insert(payload) {
                w.problem(None, bad(format!("entry {payload} seen twice (cycle or shared chain)")));
                break;
            }
            let Some(id) = BlockId::from_payload(payload, b.block_shift()) else {
                w.problem(None, bad(format!("entry {payload} is not a block name")));
                break;
            };
            let Some(slab) = w.slab(id.slab) else {
                w.problem(None, bad(format!("slab {} beyond the heap length", id.slab)));
                break;
            };
            let d = mem.desc(b, slab);
            let size = d.head.size.load(Ordering::Relaxed);
            if size == 0 || id.block >= d.head.blocks.load(Ordering::Relaxed) {
                w.problem(Some(id.slab), bad(format!("block {} of a slab without it", id.block)));
                break;
            }
            if d.is_free(id.block) {
                w.problem(Some(id.slab), bad(format!("block {} is also free in the bitset", id.block)));
            }
            let off = mem.data_offset(b, slab, id.block as usize * size as usize) as u64;
            let link = mem.word_at(off).and_then(|x| {
                // Written back by its pusher, maybe on another host.
                mem.swcc.refresh(crate::coherence::Site::Scan, (x as *const crate::sync::AtomicU64).cast(), 8);
                Link::unpack(x.load(Ordering::Relaxed), d.head.mark.load(Ordering::Relaxed))
            });
            let Some(link) = link else {
                w.problem(Some(id.slab), bad(format!("block {} does not carry a link", id.block)));
                break;
            };
            waiting[id.slab as usize] += 1;
            entries += 1;
            payload = link.next;
        }
        // A holder closes its mailboxes before it lets the slot go, and a new holder opens them
        // (docs/design.md §4.6); a dead holder's are harvested by its adopter. Blocks waiting
        // in the mailbox of a slot nobody holds are stranded: freed by the application, never
        // harvested, and their slabs can never drain. Not live, and not reusable either.
        if entries > 0 && !held_before && !held() {
            w.problem(None, format!("slot {slot} has no holder but {entries} blocks wait in its mailbox (stranded)"));
        }
    }
}
