//! Recovery of a slot's slab state: finishing or undoing the one logged operation the redo
//! word names, then rebuilding the slot's lists from the descriptors it owns.
//!
//! Each resolution is idempotent (a recovery that dies is simply run again by the next
//! adopter), and every step that touches a shared word goes through the same protocols as a
//! live thread: a remote free whose CAS did not happen is redone as a new logged operation.

use crate::class::Bracket;
use crate::mem::Slab;
use crate::persist::descriptor::Descriptor;
use crate::persist::redo::{ChainArg, Op, Redo};
use crate::protocol::{detectable, remote};
use crate::slab::ops::SlabThread;
use crate::sync::{AtomicU64, Ordering};
use crate::word::Tagged;

/// What resolving the redo word did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The operation had taken effect (or got far enough): recovery completed it.
    Completed,
    /// The operation had not taken effect: recovery undid its partial steps.
    Undone,
    /// A remote free whose decrement had not happened: recovery performed it.
    Redone,
}

/// Counts from rebuilding a slot's lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Slabs the slot owns, both brackets.
    pub owned: u32,
    /// Descriptors whose free count or summary disagreed with the bitset and were corrected.
    pub recounted: u32,
    /// Current-slab caches emptied because they named a slab the slot does not own.
    pub caches_dropped: u32,
}

impl SlabThread<'_> {
    fn slab_of(&self, r: &Redo) -> Option<(Slab, Descriptor<'_>)> {
        let slab = self.mem.slab(r.bracket, r.slab)?;
        Some((slab, self.mem.desc(r.bracket, slab)))
    }

    /// Whether this slot's CAS of operation `version` on `word` took effect (docs/design.md §8.2).
    fn took_effect(&self, word: &AtomicU64, version: u32) -> bool {
        self.mem
            .help(self.slot)
            .is_some_and(|h| detectable::took_effect(&self.hw(word), &self.hw(h), self.tag(version)))
    }

    /// Whether this slot's subtraction of `version` took `word` to 0 (a claim): nobody else
    /// writes a counter at 0 until its claimer — this slot — sizes the slab again.
    fn claimed_by(&self, word: &AtomicU64, version: u32) -> bool {
        Tagged::unpack(word.load(Ordering::Acquire)) == Tagged::new(0, self.tag(version))
    }

    /// A slab this slot now owns, empty, with no class (the end of a claim); the list rebuild
    /// puts it on the unsized list.
    fn own_empty(&self, d: Descriptor<'_>) {
        d.head.owner.store(self.me(), Ordering::Relaxed);
        d.head.marked_class.store(0, Ordering::Relaxed);
        d.head.class.store(0, Ordering::Relaxed);
        d.head.size.store(0, Ordering::Relaxed);
    }

    /// [`Self::own_empty`] for the chain of `slabs` slabs that starts at `first` (a pop's or a
    /// push's, docs/design.md §4.3, "Chains"): neither operation changes the links between
    /// the chain's slabs, only the last one's `next`, which the walk does not follow. A link
    /// that does not name a slab ends the walk (a corrupt record; what it missed stays with
    /// whoever holds it).
    fn own_chain(&self, b: Bracket, first: Slab, slabs: u32) {
        let mut slab = first;
        for i in 0..slabs {
            let d = self.mem.desc(b, slab);
            let next = d.head.next.load(Ordering::Relaxed);
            self.own_empty(d);
            if i + 1 < slabs {
                match self.mem.link(b, next) {
                    Ok(Some(n)) => slab = n,
                    _ => return,
                }
            }
        }
    }

    /// Finishes or undoes the logged operation `r`; the caller clears the record after.
    pub(crate) fn resolve(&self, r: Redo) -> Resolution {
        let b = r.bracket;
        if r.op == Op::Harvest {
            // Took the chain: the record names it and `resume_harvest` returns it. Did not: the
            // record may name a chain an attempt announced, which still belongs to the mailbox.
            let took = self.mem.mailbox(b, self.slot).is_some_and(|head| self.took_effect(head, r.arg));
            if took {
                return Resolution::Completed;
            }
            self.rec.harvest.store(0, Ordering::Relaxed);
            return Resolution::Undone;
        }
        let Some((slab, d)) = self.slab_of(&r) else {
            // A slab beyond the heap length: a bump whose CAS never happened.
            return Resolution::Undone;
        };
        match (r.op, r.flag) {
            (Op::Bump, _) => {
                if !self.took_effect(&self.mem.globals(b).length, r.arg) {
                    return Resolution::Undone;
                }
                let to = (r.slab + self.mem.header.batch[b as usize]).min(self.mem.layout.bracket(b).capacity);
                self.mem.refresh_length(b);
                for i in r.slab..to {
                    if let Some(s) = self.mem.slab(b, i) {
                        self.own_empty(self.mem.desc(b, s));
                    }
                }
                Resolution::Completed
            }
            (Op::GlobalPop, _) => {
                let chain = ChainArg::unpack(r.arg);
                if !self.took_effect(&self.mem.globals(b).global_head, chain.version) {
                    return Resolution::Undone;
                }
                self.own_chain(b, slab, chain.slabs);
                Resolution::Completed
            }
            (Op::GlobalPush, _) => {
                let chain = ChainArg::unpack(r.arg);
                if self.took_effect(&self.mem.globals(b).global_head, chain.version) {
                    return Resolution::Completed;
                }
                // Still ours: nobody can reach a slab that is on no shared list.
                self.own_chain(b, slab, chain.slabs);
                Resolution::Undone
            }
            (Op::Size, _) => {
                // The cache was never filled (that is the next, separately logged step), so no
                // block was handed out: back to unsized.
                self.own_empty(d);
                Resolution::Undone
            }
            (Op::TakeWord, flagged) => {
                let w = r.arg as usize;
                let class = d.head.class.load(Ordering::Relaxed);
                let Some(cur) = self.rec.lists(b).current.get(class.wrapping_sub(1) as usize) else {
                    return Resolution::Undone;
                };
                let Some(word) = d.bits.get(w) else { return Resolution::Undone };
                let id = cur.id();
                if id.slab != slab.link() || id.word as usize != w {
                    // The cache never named this word (take), or was emptied after the bits went
                    // back (return): nothing is in two places.
                    return Resolution::Completed;
                }
                if flagged {
                    word.store(word.load(Ordering::Relaxed) | cur.bits.load(Ordering::Relaxed), Ordering::Relaxed);
                    cur.install(0, 0, 0, 0);
                } else {
                    let bits = cur.bits.load(Ordering::Relaxed) | word.load(Ordering::Relaxed);
                    cur.install(slab.link(), w as u32, cur.block0.load(Ordering::Relaxed), bits);
                    word.store(0, Ordering::Relaxed);
                }
                Resolution::Completed
            }
            (Op::LocalFree, _) => {
                // The caller asked for the free; finish it (the list move is the rebuild's).
                if let Some(word) = d.bits.get(r.arg as usize / 64) {
                    word.store(word.load(Ordering::Relaxed) | 1 << (r.arg % 64), Ordering::Relaxed);
                }
                Resolution::Completed
            }
            (Op::Retire, false) => {
                let class = d.head.class.load(Ordering::Relaxed);
                if let Some(cur) = self.rec.lists(b).current.get(class.wrapping_sub(1) as usize) {
                    if cur.slab() == slab.link() {
                        cur.install(0, 0, 0, 0);
                    }
                }
                // The decision is as sound now as then: the block the allocation took is still
                // out, so the counter cannot reach 0 under us.
                let blocks = d.head.blocks.load(Ordering::Relaxed);
                if remote::retire(&self.hw(self.mem.remote(b, slab)), blocks) == remote::Retire::Disown {
                    d.head.owner.store(0, Ordering::Release);
                }
                Resolution::Completed
            }
            (Op::Retire, true) => {
                // Disowning: clear the owner unless a claimer already took the slab.
                let _ = d.head.owner.compare_exchange(self.me(), 0, Ordering::Release, Ordering::Relaxed);
                Resolution::Completed
            }
            (Op::RemoteFree, true) | (Op::Abandon, true) => {
                self.own_empty(d);
                self.batch_applied(b, slab);
                Resolution::Completed
            }
            (Op::RemoteFree, false) => {
                let word = self.mem.remote(b, slab);
                if self.took_effect(word, r.arg) {
                    if self.claimed_by(word, r.arg) {
                        self.own_empty(d);
                    }
                    self.batch_applied(b, slab);
                    return Resolution::Completed;
                }
                // A batch being applied (no-HWcc): its blocks are marked already.
                if let Some((_, batch)) = self.batch_of(b, slab) {
                    let version = self.next_version();
                    self.log(Redo::new(Op::RemoteFree, b, slab.index(), version));
                    self.apply_batch(b, slab, batch.count, version);
                    return Resolution::Redone;
                }
                self.redo_counted_free(b, slab, d);
                Resolution::Redone
            }
            (Op::Abandon, false) => {
                let word = self.mem.remote(b, slab);
                if self.took_effect(word, r.arg) {
                    if self.claimed_by(word, r.arg) {
                        self.own_empty(d);
                    }
                    return Resolution::Completed;
                }
                // The counter still counts our free blocks, so nobody can have claimed it.
                d.head.owner.store(self.me(), Ordering::Relaxed);
                Resolution::Undone
            }
            (Op::Reclaim, _) => {
                self.own_empty(d);
                Resolution::Completed
            }
            (Op::MailboxPush, _) => {
                let owner = self.rec.remote_owner.load(Ordering::Relaxed);
                let pushed = owner
                    .checked_sub(1)
                    .and_then(|o| self.mem.mailbox(b, o))
                    .is_some_and(|head| self.took_effect(head, r.arg));
                if pushed {
                    return Resolution::Completed;
                }
                // Not pushed: counted instead, exactly as a remote free recovery redoes.
                self.redo_counted_free(b, slab, d);
                Resolution::Redone
            }
            // Answered above.
            (Op::Harvest, _) => Resolution::Completed,
        }
    }

    /// A remote free of the record's `remote_block` in `slab` that never counted: finish it,
    /// mark first (as the free does), so that a retry of the same free — a detectable free's —
    /// is seen as done.
    fn redo_counted_free(&self, b: Bracket, slab: Slab, d: Descriptor<'_>) {
        let word = self.mem.remote(b, slab);
        let block = self.rec.remote_block.load(Ordering::Relaxed);
        let size = d.head.size.load(Ordering::Relaxed) as usize;
        if block < d.head.blocks.load(Ordering::Relaxed) && size != 0 {
            let off = self.mem.data_offset(b, slab, block as usize * size);
            if let Some(w) = self.mem.word_at(off as u64) {
                w.store(d.head.mark.load(Ordering::Relaxed), Ordering::Relaxed);
                self.mem.swcc.publish(crate::coherence::Site::RemoteMark, (w as *const AtomicU64).cast(), size);
            }
        }
        let version = self.next_version();
        self.log(Redo::new(Op::RemoteFree, b, slab.index(), version));
        let tag = self.tag(version);
        if let Ok(remote::Decrement::Claimed) = remote::decrement(&self.hw(word), tag, self.helper(tag)) {
            self.log(Redo::new(Op::RemoteFree, b, slab.index(), version).flagged());
            self.own_empty(d);
        }
    }

    /// Rebuilds this slot's lists of bracket `b` from the descriptors that name it owner: the
    /// lists are single-writer, so only their dead writer can have torn them, and the
    /// descriptors are the truth. Free counts and summaries are recomputed from the bitsets;
    /// class-less slabs go to the unsized list, sized ones with a free block to their class's
    /// list unless they are its current slab, full ones stay detached.
    pub(crate) fn rebuild_lists(&self, b: Bracket, out: &mut Rebuilt) {
        let lists = self.rec.lists(b);
        for cur in lists.current {
            let id = cur.id();
            let owned = self.mem.link(b, id.slab).ok().flatten().is_some_and(|s| {
                let d = self.mem.desc(b, s);
                d.head.owner.load(Ordering::Relaxed) == self.me() && d.head.class.load(Ordering::Relaxed) != 0
            });
            if id.slab != 0 && !owned {
                cur.install(0, 0, 0, 0);
                out.caches_dropped += 1;
            }
        }
        lists.unsized_head.store(0, Ordering::Relaxed);
        lists.unsized_len.store(0, Ordering::Relaxed);
        for head in lists.sized {
            head.store(0, Ordering::Relaxed);
        }
        let len = self.mem.refresh_length(b);
        for i in (0..len).rev() {
            let Some(slab) = self.mem.slab(b, i) else { continue };
            let d = self.mem.desc(b, slab);
            if d.head.owner.load(Ordering::Relaxed) != self.me() {
                continue;
            }
            out.owned += 1;
            // A crash may have left a free block of any slab of ours without its mark (between
            // a bit and its mark, either way): none of them keeps its marks at its next sizing
            // (docs/design.md §4.1, "Marks kept at re-sizing").
            d.head.marked_class.store(0, Ordering::Relaxed);
            if d.recount() {
                out.recounted += 1;
            }
            let class = d.head.class.load(Ordering::Relaxed);
            let current = lists.current.get(class.wrapping_sub(1) as usize).is_some_and(|c| c.slab() == slab.link());
            if class == 0 || d.head.size.load(Ordering::Relaxed) == 0 || b.class(class).is_none() {
                d.head.class.store(0, Ordering::Relaxed);
                d.head.size.store(0, Ordering::Relaxed);
                self.push_unsized(b, slab, d);
            } else if !current && d.head.free.load(Ordering::Relaxed) > 0 {
                self.link_sized(b, class, slab, d);
            } else {
                d.head.prev.store(0, Ordering::Relaxed);
                d.head.next.store(0, Ordering::Relaxed);
            }
        }
    }
}
