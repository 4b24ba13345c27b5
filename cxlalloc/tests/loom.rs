//! `loom` models of the lock-free protocols in `cxlalloc::protocol` (DESIGN §4, §5, §13).
//!
//! Every model drives the *real* protocol functions (`global_list`, `length`, `remote`, `lease`),
//! which `cxlalloc::sync` compiles against loom's atomics under `--cfg loom`. The SWcc parts the
//! protocols take as closures (list links, owner fields, bitset counts) are modelled here with
//! loom atomics, or with `loom::cell::UnsafeCell` where the design says "written only by the
//! owner" — loom then also reports any access to that data that the protocol does not order by
//! happens-before (i.e. two threads that both believe they own it).
//!
//! Run with `script/loom.sh`. Preemption bounds and measured runtimes (release build, 2 cores,
//! tests run in parallel by the harness; "iters" = executions explored):
//!
//! | model                                     | threads | bound | iters   | runtime |
//! | ----------------------------------------- | ------- | ----- | ------- | ------- |
//! | global_list_pop_push_pop_aba              | 2       | none  | TBD     | TBD     |
//! | global_list_three_threads                 | 3       | 3     | TBD     | TBD     |
//! | global_list_untagged_head_loses_slabs (−) | 2       | none  | -       | TBD     |
//! | length_bump_truncates_and_fills           | 3       | 3     | TBD     | TBD     |
//! | remote_two_blocks_owner_keeps_one         | 2       | none  | TBD     | TBD     |
//! | remote_two_blocks_both_remote             | 3       | 3     | TBD     | TBD     |
//! | remote_three_blocks                       | 3       | 3     | TBD     | TBD     |
//! | lease_three_threads_two_slots             | 3       | 3     | TBD     | TBD     |
//! | lease_load_then_store_claim_is_caught (−) | 3       | 3     | -       | TBD     |
//!
//! (−) = negative control: a deliberately broken variant that the model must reject
//! (`#[should_panic]`), showing the models are able to fail.
//!
//! `LOOM_MAX_PREEMPTIONS=n` overrides the bounds below for experiments.
#![cfg(loom)]
#![allow(clippy::disallowed_types)] // std's counter below lives outside the model, on purpose

use std::sync::atomic::AtomicUsize as StdAtomicUsize;
use std::time::Instant;

use cxlalloc::protocol::{global_list, lease, length, remote};
use cxlalloc::word::{Holder, Tag, Tagged};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Runs `f` under loom with preemption `bound` (unless `LOOM_MAX_PREEMPTIONS` is set) and prints
/// the wall time, so `script/loom.sh` output documents the cost of each model.
fn check<F>(name: &str, bound: Option<usize>, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = bound;
    }
    let bound = builder.preemption_bound;
    let iterations = std::sync::Arc::new(StdAtomicUsize::new(0));
    let counter = iterations.clone();
    let start = Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom model {name}: preemption bound {bound:?}, {} executions, {:.2?}",
        iterations.load(Ordering::Relaxed),
        start.elapsed()
    );
}

/// A thread's tag source: every protocol operation is stamped with a fresh `{slot, version}`,
/// as `ThreadRecord::next_version` does in the allocator.
struct Tags {
    slot: u32,
    version: u32,
}

impl Tags {
    fn new(slot: u32) -> Self {
        Self { slot, version: 0 }
    }

    fn next(&mut self) -> Tag {
        self.version = Tag::next_version(self.version);
        Tag::new(self.slot, self.version)
    }
}

// ------------------------------------------------------------------------------------------------
// (a) Global free list (T2 pop, T9 push)
// ------------------------------------------------------------------------------------------------

/// The global list plus the two descriptor fields the protocol touches: `next` (slab index + 1,
/// the intrusive link) and `owner` (slot + 1, 0 = none), both SWcc words written with Relaxed
/// stores in the allocator and published by the head CAS.
struct List {
    head: AtomicU64,
    next: Vec<AtomicU32>,
    owner: Vec<AtomicU32>,
    /// When false every operation uses the same tag: the head degenerates to an untagged
    /// pointer (negative control for ABA).
    tagged: bool,
}

impl List {
    /// `slabs` descriptors; links `1..=listed` form the initial list `1 → 2 → … → listed`, and
    /// the rest are held by the threads named in `held_by` (slot per unlisted slab).
    fn new(slabs: u32, listed: u32, held_by: &[u32], tagged: bool) -> Self {
        assert_eq!(slabs, listed + held_by.len() as u32);
        let next = (1..=slabs).map(|link| AtomicU32::new(if link < listed { link + 1 } else { 0 })).collect();
        let owner = (1..=slabs)
            .map(|link| AtomicU32::new(if link <= listed { 0 } else { held_by[(link - listed - 1) as usize] + 1 }))
            .collect();
        let head = if listed == 0 { 0 } else { Tagged::new(1, Tag::default()).pack() };
        Self { head: AtomicU64::new(head), next, owner, tagged }
    }

    fn slabs(&self) -> u32 {
        self.next.len() as u32
    }

    fn tag(&self, tags: &mut Tags) -> Tag {
        if self.tagged {
            tags.next()
        } else {
            Tag::default()
        }
    }

    /// T2 as `SlabOps::global_pop` does it: pop, then take ownership of the slab.
    fn pop(&self, tags: &mut Tags) -> Option<u32> {
        let tag = self.tag(tags);
        let slabs = self.slabs();
        let popped = global_list::pop(
            &self.head,
            tag,
            |link| {
                if (1..=slabs).contains(&link) {
                    Ok(self.next[link as usize - 1].load(Ordering::Relaxed))
                } else {
                    Err(link)
                }
            },
            |_| {},
        )
        .unwrap_or_else(|link| panic!("global list reached corrupt link {link}"));
        if let Some(link) = popped {
            // The pusher cleared `owner` before its Release CAS; our Acquire must see it.
            let owner = self.owner[link as usize - 1].load(Ordering::Relaxed);
            assert_eq!(owner, 0, "popped slab {link} still names owner {owner}");
            self.owner[link as usize - 1].store(tags.slot + 1, Ordering::Relaxed);
        }
        popped
    }

    /// T9 as `SlabOps::release_unsized` does it: clear the owner, then push.
    fn push(&self, tags: &mut Tags, link: u32) {
        let i = link as usize - 1;
        let owner = self.owner[i].load(Ordering::Relaxed);
        assert_eq!(owner, tags.slot + 1, "thread {} pushes slab {link} owned by {owner}", tags.slot);
        self.owner[i].store(0, Ordering::Relaxed);
        let tag = self.tag(tags);
        global_list::push(&self.head, tag, link, |next| self.next[i].store(next, Ordering::Relaxed));
    }

    /// After every thread has joined: each slab is on the list exactly once or held by exactly
    /// one thread (its `owner`), never both, never neither; the list is acyclic.
    fn check_final(&self, held: &[(u32, Vec<u32>)]) {
        let slabs = self.slabs();
        let mut listed = Vec::new();
        let mut link = Tagged::unpack(self.head.load(Ordering::Acquire)).payload;
        while link != 0 {
            assert!((1..=slabs).contains(&link), "list holds corrupt link {link}");
            assert!(listed.len() < slabs as usize, "global list is cyclic");
            listed.push(link);
            link = self.next[link as usize - 1].load(Ordering::Relaxed);
        }
        let mut seen = vec![0u32; slabs as usize];
        for &link in listed.iter().chain(held.iter().flat_map(|(_, links)| links)) {
            seen[link as usize - 1] += 1;
        }
        for (i, &n) in seen.iter().enumerate() {
            assert!(n != 0, "slab {} lost: neither listed nor held (list {listed:?}, held {held:?})", i + 1);
            assert!(n == 1, "slab {} duplicated: listed/held {n} times (list {listed:?}, held {held:?})", i + 1);
        }
        for &link in &listed {
            assert_eq!(self.owner[link as usize - 1].load(Ordering::Relaxed), 0, "listed slab {link} names an owner");
        }
        for (slot, links) in held {
            for &link in links {
                let owner = self.owner[link as usize - 1].load(Ordering::Relaxed);
                assert_eq!(owner, slot + 1, "slab {link} held by slot {slot} names owner {owner}");
            }
        }
    }
}

/// One thread's script over the list.
#[derive(Clone, Copy)]
enum Step {
    Pop,
    /// Push back the slab this thread popped `k` pops ago (0 = most recent) — or a slab it
    /// held from the start, which counts as popped before everything else.
    Push(usize),
}

fn run_list_thread(list: &List, slot: u32, initially: Vec<u32>, script: &[Step]) -> (u32, Vec<u32>) {
    let mut tags = Tags::new(slot);
    let mut held = initially;
    for step in script {
        match *step {
            Step::Pop => {
                if let Some(link) = list.pop(&mut tags) {
                    held.push(link);
                }
            }
            Step::Push(k) => {
                if held.len() > k {
                    let link = held.remove(held.len() - 1 - k);
                    list.push(&mut tags, link);
                }
            }
        }
    }
    (slot, held)
}

/// Threads run `scripts[t]` as slot `t`; slot 0 runs on loom's main thread.
fn list_model(slabs: u32, listed: u32, held_by: &[u32], tagged: bool, scripts: &[&'static [Step]]) {
    let list = Arc::new(List::new(slabs, listed, held_by, tagged));
    let initially = |slot: u32| -> Vec<u32> {
        held_by.iter().enumerate().filter(|(_, &s)| s == slot).map(|(k, _)| listed + 1 + k as u32).collect()
    };
    let handles: Vec<_> = (1..scripts.len() as u32)
        .map(|slot| {
            let list = list.clone();
            let init = initially(slot);
            let script = scripts[slot as usize];
            thread::spawn(move || run_list_thread(&list, slot, init, script))
        })
        .collect();
    let mut held = vec![run_list_thread(&list, 0, initially(0), scripts[0])];
    held.extend(handles.into_iter().map(|h| h.join().unwrap()));
    list.check_final(&held);
}

/// Pop–push–pop ABA: thread 0 loads head = 1 and reads `next(1) = 2`; thread 1 pops 1, pops 2
/// and pushes 1 back (head is 1 again, now `1 → 3`). Without the tag, thread 0's CAS would
/// install 2 — a slab thread 1 holds. The tag makes it fail and retry.
#[test]
fn global_list_pop_push_pop_aba() {
    check("global_list_pop_push_pop_aba", None, || {
        list_model(3, 3, &[], true, &[&[Step::Pop], &[Step::Pop, Step::Pop, Step::Push(1)]]);
    });
}

/// Negative control: the same scenario with every CAS stamped with one constant tag (an
/// untagged head). The model must find the ABA interleaving and report a duplicated slab.
#[test]
#[should_panic(expected = "duplicated")]
fn global_list_untagged_head_loses_slabs() {
    check("global_list_untagged_head_loses_slabs", None, || {
        list_model(3, 3, &[], false, &[&[Step::Pop], &[Step::Pop, Step::Pop, Step::Push(1)]]);
    });
}

/// Three threads over three slabs (two listed, one held by thread 2): pops, pushes and
/// re-pushes interleave, including pop-push-pop by thread 1 against thread 0's pop.
#[test]
fn global_list_three_threads() {
    check("global_list_three_threads", Some(3), || {
        list_model(
            3,
            2,
            &[2],
            true,
            &[&[Step::Pop, Step::Push(0)], &[Step::Pop, Step::Pop, Step::Push(1)], &[Step::Push(0), Step::Pop]],
        );
    });
}

// ------------------------------------------------------------------------------------------------
// (b) Heap growth: length bump (T1)
// ------------------------------------------------------------------------------------------------

/// What one thread got from its bumps: the ranges, and how many bumps found the heap full.
struct Bumps {
    ranges: Vec<(u32, u32)>,
    full: u32,
    aborted: u32,
}

/// `bumps` calls to `length::bump`; when `fail_first`, the first call's `before` fails (a failed
/// reservation), which must abort that call without moving the length — unless the heap is
/// already full, when `before` is never called. An aborted bump that moved the length would show
/// up as a gap in the final coverage check.
fn run_bumps(word: &AtomicU64, slot: u32, bumps: u32, fail_first: bool, batch: u32, capacity: u32) -> Bumps {
    let mut tags = Tags::new(slot);
    let mut out = Bumps { ranges: Vec::new(), full: 0, aborted: 0 };
    for i in 0..bumps {
        let mut last = None;
        let fail = fail_first && i == 0;
        let got = length::bump(word, tags.next(), batch, capacity, |from, to| {
            last = Some((from, to));
            if fail {
                Err("reservation failed")
            } else {
                Ok(())
            }
        });
        match got {
            Err(_) => {
                assert!(fail, "bump failed without a failing `before`");
                out.aborted += 1;
            }
            Ok(None) => out.full += 1,
            Ok(Some((from, to))) => {
                assert!(!fail, "bump succeeded although `before` failed");
                assert_eq!(last, Some((from, to)), "`before` was not told the range that was taken");
                assert!(from < to && to <= capacity && to - from <= batch, "bad range {from}..{to}");
                out.ranges.push((from, to));
            }
        }
    }
    out
}

/// Three threads make six bumps of batch 2 into capacity 5, one of them with a failing
/// `before`: exactly three succeed — [0,2) [2,4) and the truncated [4,5), in some order — and
/// the other three find the heap full (or, for the failing one, abort). The ranges are disjoint, contiguous, cover [0, final length), and the
/// final length is the capacity.
#[test]
fn length_bump_truncates_and_fills() {
    const BATCH: u32 = 2;
    const CAPACITY: u32 = 5;
    check("length_bump_truncates_and_fills", Some(3), || {
        let word = Arc::new(AtomicU64::new(0));
        let w1 = word.clone();
        let t1 = thread::spawn(move || run_bumps(&w1, 1, 2, false, BATCH, CAPACITY));
        let w2 = word.clone();
        let t2 = thread::spawn(move || run_bumps(&w2, 2, 2, true, BATCH, CAPACITY));
        let mine = run_bumps(&word, 0, 2, false, BATCH, CAPACITY);
        let all = [mine, t1.join().unwrap(), t2.join().unwrap()];

        let mut ranges: Vec<_> = all.iter().flat_map(|b| b.ranges.iter().copied()).collect();
        let full: u32 = all.iter().map(|b| b.full).sum();
        let aborted: u32 = all.iter().map(|b| b.aborted).sum();
        ranges.sort_unstable();
        let mut end = 0;
        for &(from, to) in &ranges {
            assert_eq!(from, end, "ranges overlap or leave a gap: {ranges:?}");
            end = to;
        }
        let length = Tagged::unpack(word.load(Ordering::Acquire)).payload;
        assert_eq!(end, length, "ranges {ranges:?} do not cover [0, {length})");
        assert!(length <= CAPACITY);
        assert_eq!(length, CAPACITY, "demand exceeded capacity, so the heap must be full");
        assert_eq!(ranges, [(0, 2), (2, 4), (4, 5)], "expected two full batches and one truncated");
        assert!(aborted <= 1);
        assert!(full >= 2, "at least two bumps must have found the heap full");
        assert_eq!(full + aborted, 3, "every bump but the three successes is full or aborted");
    });
}

// ------------------------------------------------------------------------------------------------
// (c) Remote-free counter with detach / disown / claim (T3, T4, T5, T6, T8, T10)
// ------------------------------------------------------------------------------------------------

/// Where a slab stands, from its current owner's private view (SWcc, owner-only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// On the owner's sized list (Local-sized), ≥ 1 free block.
    Sized,
    /// Full, kept by the owner off-list (T4).
    Detached,
    /// Full, ownership given up (T5).
    Disowned,
    /// Empty and on an unsized list: after T7 for the owner, or after the claim (T8).
    Unsized,
}

/// The owner-only SWcc part of the descriptor: the bitset (as its free count) and list state.
struct Local {
    free: u32,
    state: State,
}

/// One slab, as the allocator sees it.
///
/// Invariant (checked after every thread has joined, when no block is outstanding any more, and
/// in parts along the way):
///
/// * **conservation**: `free_in_bitset + outstanding + remotely_freed == blocks`, where
///   `outstanding` counts allocated blocks not yet freed and `remotely_freed` counts successful
///   `remote::decrement`s (Counted or Claimed). A block freed locally goes back to the bitset; a
///   block freed remotely never does.
/// * **counter**: `count == blocks − remotely_freed`: every remote free took exactly one off,
///   and `decrement` never reported `Underflow`.
/// * **ownership**: exactly one of
///   1. *kept*: no claim, `owner` still names the original owner and the slab is on its lists
///      (Sized with `free == blocks − remotely_freed ≥ 1`, or Unsized if every free was local);
///   2. *claimed*: exactly one `Claimed`, by the thread that `owner` now names, with
///      `count == 0`, `remotely_freed == blocks`, `free == 0`, state Unsized.
///
///   So the slab is never lost (nobody owns it and it cannot be claimed any more) and never
///   owned twice (`Claimed` at most once, and only when the owner can no longer free locally,
///   checked by loom as a race on the owner-only `Local` cell otherwise).
struct RemoteSlab {
    blocks: u32,
    /// HWcc remote word: the real protocol operates on this.
    counter: AtomicU64,
    /// SWcc descriptor owner (slot + 1, 0 = none): written by the owner, read racily by freers.
    owner: AtomicU32,
    /// Owner-only state; an UnsafeCell so loom flags two threads that both act as owner.
    local: UnsafeCell<Local>,
    // Bookkeeping for the invariant; not part of the protocol.
    outstanding: AtomicU32,
    remotely_freed: AtomicU32,
    claims: AtomicU32,
    claimer: AtomicU32,
}

/// The original owner's slot; its id (slot + 1) is what `owner` holds.
const OWNER_SLOT: u32 = 0;

impl RemoteSlab {
    fn new(blocks: u32) -> Self {
        Self {
            blocks,
            counter: AtomicU64::new(0),
            // Local-unsized, owned by slot 0.
            owner: AtomicU32::new(OWNER_SLOT + 1),
            local: UnsafeCell::new(Local { free: 0, state: State::Unsized }),
            outstanding: AtomicU32::new(0),
            remotely_freed: AtomicU32::new(0),
            claims: AtomicU32::new(0),
            claimer: AtomicU32::new(0),
        }
    }

    fn with_local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> R {
        // SAFETY: loom checks that every access to the cell is ordered by happens-before with
        // every other; that exclusivity is exactly what the model asserts.
        self.local.with_mut(|p| f(unsafe { &mut *p }))
    }

    /// T3: the owner gives the slab a class: fill the bitset, set the counter.
    fn size(&self, tags: &mut Tags) {
        self.with_local(|l| {
            assert_eq!(l.state, State::Unsized);
            l.free = self.blocks;
            l.state = State::Sized;
        });
        remote::reset(&self.counter, self.blocks, tags.next());
    }

    /// The owner allocates one block; taking the last one runs T4/T5.
    fn alloc(&self) {
        let last = self.with_local(|l| {
            assert_eq!(l.state, State::Sized, "allocating from a slab not on the sized list");
            assert!(l.free > 0);
            l.free -= 1;
            l.free == 0
        });
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        if last {
            // Unlink from sized[c], then decide (SlabOps::retire).
            self.with_local(|l| l.state = State::Detached);
            match remote::retire(&self.counter, self.blocks) {
                remote::Retire::Detach => {}
                remote::Retire::Disown => {
                    self.with_local(|l| l.state = State::Disowned);
                    self.owner.store(0, Ordering::Release);
                }
            }
        }
    }

    /// `SlabOps::free`: local iff `owner == me`, otherwise remote.
    fn free(&self, tags: &mut Tags) {
        let me = tags.slot + 1;
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
        if self.owner.load(Ordering::Relaxed) == me {
            // Local free: the block returns to the bitset (T6 re-attaches, T7 unsizes).
            self.with_local(|l| {
                assert!(matches!(l.state, State::Sized | State::Detached), "local free into {:?}", l.state);
                l.free += 1;
                assert!(l.free <= self.blocks);
                if l.free == self.blocks {
                    l.state = State::Unsized;
                } else if l.free == 1 {
                    assert_eq!(l.state, State::Detached, "free 0 → 1 on a slab that was not detached");
                    l.state = State::Sized;
                }
            });
            return;
        }
        match remote::decrement(&self.counter, tags.next()) {
            Ok(remote::Decrement::Counted) => {
                self.remotely_freed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(remote::Decrement::Claimed) => {
                self.remotely_freed.fetch_add(1, Ordering::Relaxed);
                let before = self.claims.fetch_add(1, Ordering::Relaxed);
                assert_eq!(before, 0, "slab claimed twice");
                self.claimer.store(me, Ordering::Relaxed);
                // T8: the slab is ours, empty. The previous owner must be done with it.
                self.owner.store(me, Ordering::Relaxed);
                self.with_local(|l| {
                    assert_eq!(l.free, 0, "claimed a slab with blocks in its owner's bitset");
                    assert!(
                        matches!(l.state, State::Detached | State::Disowned),
                        "claimed a slab its owner still lists ({:?})",
                        l.state
                    );
                    l.state = State::Unsized;
                });
            }
            Err(remote::Underflow) => {
                panic!("remote counter underflow (double free or lost count)")
            }
        }
    }

    fn check_final(&self) {
        let blocks = self.blocks;
        let outstanding = self.outstanding.load(Ordering::Relaxed);
        let remotely_freed = self.remotely_freed.load(Ordering::Relaxed);
        let count = remote::count(&self.counter);
        let claims = self.claims.load(Ordering::Relaxed);
        let owner = self.owner.load(Ordering::Relaxed);
        let (free, state) = self.with_local(|l| (l.free, l.state));
        assert_eq!(outstanding, 0);
        assert_eq!(free + outstanding + remotely_freed, blocks, "blocks not conserved");
        assert_eq!(count, blocks - remotely_freed, "counter differs from blocks − remote frees");
        assert!(claims <= 1, "slab claimed {claims} times");
        if claims == 1 {
            let claimer = self.claimer.load(Ordering::Relaxed);
            assert_eq!(owner, claimer, "claimed slab names another owner");
            assert_eq!((count, remotely_freed, free, state), (0, blocks, 0, State::Unsized));
        } else {
            assert_eq!(owner, OWNER_SLOT + 1, "unclaimed slab lost its owner (lost slab)");
            if free == blocks {
                assert_eq!(state, State::Unsized);
            } else {
                assert!(free >= 1, "unclaimed slab with no free block and nothing outstanding (lost)");
                assert_eq!(state, State::Sized, "unclaimed slab with free blocks is off its owner's lists");
            }
        }
    }
}

/// Slot 0 owns the slab and runs on loom's main thread: it sizes the slab, allocates blocks
/// `0..blocks` in order (the last allocation retires the slab) and passes block `i` to slot
/// `plan[i]` right after allocating it; then it frees the blocks `plan` left to it.
///
/// Passing a block is spawning the thread that frees it: the spawn orders the allocation before
/// everything that thread does, exactly as the application's own hand-off of a pointer must
/// (a Release/Acquire flag with a spinning receiver models the same thing but makes loom's
/// branch count explode).
fn remote_model(blocks: u32, plan: &'static [u32]) {
    assert_eq!(plan.len(), blocks as usize);
    let mut others: Vec<u32> = plan.iter().copied().filter(|&who| who != OWNER_SLOT).collect();
    others.sort_unstable();
    others.dedup();
    assert_eq!(others.len(), plan.iter().filter(|&&who| who != OWNER_SLOT).count(), "one block per freer");

    let slab = Arc::new(RemoteSlab::new(blocks));
    let mut tags = Tags::new(OWNER_SLOT);
    slab.size(&mut tags);
    let mut handles = Vec::new();
    for &who in plan {
        slab.alloc();
        if who != OWNER_SLOT {
            let slab = slab.clone();
            handles.push(thread::spawn(move || slab.free(&mut Tags::new(who))));
        }
    }
    for &who in plan {
        if who == OWNER_SLOT {
            slab.free(&mut tags);
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    slab.check_final();
}

/// Two blocks: block 0 goes to thread 1 (its remote free races with the owner's retire), block
/// 1 stays with the owner. Reaches Detach + local re-attach (T4, T6) and Disown + the owner's own
/// remote free claiming the slab (T5, T8).
#[test]
fn remote_two_blocks_owner_keeps_one() {
    check("remote_two_blocks_owner_keeps_one", None, || remote_model(2, &[1, 0]));
}

/// Two blocks, both freed remotely by threads 1 and 2: Detach is possible and then the last
/// remote freer claims a slab whose `owner` still names the (off-list) owner; or Disown.
#[test]
fn remote_two_blocks_both_remote() {
    check("remote_two_blocks_both_remote", Some(3), || remote_model(2, &[1, 2]));
}

/// Three blocks: to thread 1, to thread 2, and one the owner keeps. Every thread can end up
/// the claimer.
#[test]
fn remote_three_blocks() {
    check("remote_three_blocks", Some(3), || remote_model(3, &[1, 2, 0]));
}

// ------------------------------------------------------------------------------------------------
// (d) Thread-slot lease (§5)
// ------------------------------------------------------------------------------------------------

struct Slots {
    word: [AtomicU64; 2],
    /// Holders currently inside the slot (bookkeeping): must never exceed 1.
    occupancy: [AtomicUsize; 2],
    /// The slot's record, written by its holder: loom reports a race if a claimer is not
    /// ordered after the previous holder's release.
    record: [UnsafeCell<u64>; 2],
}

impl Slots {
    fn new() -> Self {
        Self {
            word: [AtomicU64::new(0), AtomicU64::new(0)],
            occupancy: [AtomicUsize::new(0), AtomicUsize::new(0)],
            record: [UnsafeCell::new(0), UnsafeCell::new(0)],
        }
    }
}

fn holder(t: u32) -> u64 {
    Holder { pid: 100 + t, start: 7 }.pack()
}

/// One thread: claim the first free slot (as `ThreadHandle::attach` does: a Relaxed pre-check,
/// then the CAS), use it, release it; then check that releasing slots it does not hold fails.
///
/// `strict` is false only for the negative control: a broken claim also makes the release
/// checks and the record race fail, so only the occupancy assertion is kept there and the panic
/// names the double holder.
fn lease_thread(slots: &Slots, t: u32, claim: fn(&AtomicU64, u64) -> bool, strict: bool) {
    let me = holder(t);
    for s in 0..2 {
        if slots.word[s].load(Ordering::Relaxed) == 0 && claim(&slots.word[s], me) {
            let before = slots.occupancy[s].fetch_add(1, Ordering::SeqCst);
            assert_eq!(before, 0, "two holders in slot {s}");
            if strict {
                slots.record[s].with_mut(|r| {
                    // SAFETY: loom checks this access is exclusive (ordered after the previous
                    // holder's) — the property under test.
                    unsafe { *r = me };
                });
            }
            let stranger = lease::release(&slots.word[s], holder(t + 10));
            slots.occupancy[s].fetch_sub(1, Ordering::SeqCst);
            let released = lease::release(&slots.word[s], me);
            if strict {
                assert!(!stranger, "a non-holder released slot {s}");
                assert!(released, "holder could not release slot {s}");
            }
            break;
        }
    }
    if strict {
        for s in 0..2 {
            assert!(!lease::release(&slots.word[s], me), "thread {t} released slot {s} it does not hold");
        }
    }
}

fn lease_model(claim: fn(&AtomicU64, u64) -> bool, strict: bool) {
    let slots = Arc::new(Slots::new());
    let handles: Vec<_> = (1..3)
        .map(|t| {
            let slots = slots.clone();
            thread::spawn(move || lease_thread(&slots, t, claim, strict))
        })
        .collect();
    lease_thread(&slots, 0, claim, strict);
    for h in handles {
        h.join().unwrap();
    }
    for s in 0..2 {
        if strict {
            assert_eq!(slots.word[s].load(Ordering::Relaxed), 0, "slot {s} left held");
        }
        assert_eq!(slots.occupancy[s].load(Ordering::Relaxed), 0);
    }
}

/// Three threads race for two slots: never two holders in one slot, a non-holder's release
/// always fails, and every claimer sees the previous holder's record writes.
#[test]
fn lease_three_threads_two_slots() {
    check("lease_three_threads_two_slots", Some(3), || lease_model(lease::try_claim, true));
}

/// Negative control: a claim that loads, sees 0, then stores (no CAS) lets two threads hold one
/// slot; the model must catch it.
#[test]
#[should_panic(expected = "two holders")]
fn lease_load_then_store_claim_is_caught() {
    fn broken_claim(word: &AtomicU64, holder: u64) -> bool {
        if word.load(Ordering::Acquire) == 0 {
            word.store(holder, Ordering::Relaxed);
            true
        } else {
            false
        }
    }
    check("lease_load_then_store_claim_is_caught", Some(3), || lease_model(broken_claim, false));
}
