//! Adoption and detectable allocation through the public API: bad input, and processes
//! killed at random moments while live threads keep working on the same blocks.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{fork_code, serial, HeapName, Pipe, Rng};
use std::os::unix::fs::FileExt;

use cxlalloc::{
    AdoptError, AllocError, AttachError, Config, FreeError, Heap, Offset, Pending, PendingKind, PendingOutcome,
};
use nix::sys::signal::{kill, Signal};

fn small() -> Config {
    Config { thread_slots: 4, huge_capacity: 0, ..Config::with_capacity(64 << 20) }
}

#[test]
fn alloc_into_refuses_a_destination_outside_the_heap() {
    let heap = Heap::anonymous(&small()).unwrap();
    let t = heap.attach().unwrap();
    let outside = AtomicU64::new(5);
    assert_eq!(t.alloc_into(64, &outside), Err(AllocError::BadDestination));
    assert_eq!(outside.load(Ordering::Relaxed), 5);
    assert_eq!(heap.check().live_blocks(), 0, "nothing was allocated");
}

#[test]
fn alloc_into_a_root_stores_the_blocks_offset() {
    let heap = Heap::anonymous(&small()).unwrap();
    let t = heap.attach().unwrap();
    let root = heap.root(3).unwrap();
    let p = t.alloc_into(100, root).unwrap();
    assert_eq!(root.load(Ordering::Acquire), heap.offset_of(p.as_ptr()).unwrap().raw());
    assert_eq!(t.alloc_into(100, root), Err(AllocError::DestinationInUse), "the word names a block");
    t.free_from(root).unwrap();
    assert_eq!(root.load(Ordering::Acquire), 0);
    assert_eq!(t.free_from(root), Err(FreeError::NotAllocated));
}

#[test]
fn free_from_validates_the_block_before_clearing_the_word() {
    let heap = Heap::anonymous(&small()).unwrap();
    let t = heap.attach().unwrap();
    let root = heap.root(0).unwrap();
    let p = t.alloc_into(64, root).unwrap();
    let interior = heap.offset_of(p.as_ptr()).unwrap().raw() + 8;
    root.store(interior, Ordering::Relaxed);
    assert_eq!(t.free_from(root), Err(FreeError::InteriorPointer));
    assert_eq!(root.load(Ordering::Relaxed), interior, "the word is untouched");
    root.store(1 << 50, Ordering::Relaxed);
    assert_eq!(t.free_from(root), Err(FreeError::ForeignPointer));
    root.store(interior - 8, Ordering::Relaxed);
    t.free_from(root).unwrap();
}

#[test]
fn adopting_a_free_a_live_or_a_missing_slot_is_refused() {
    let heap = Heap::anonymous(&small()).unwrap();
    let t = heap.attach().unwrap();
    let free = (t.slot() + 1) % 4;
    assert_eq!(heap.adopt(free).err(), Some(AdoptError::NotHeld(free)));
    assert_eq!(heap.adopt(t.slot()).err(), Some(AdoptError::HolderAlive { slot: t.slot(), pid: std::process::id() }));
    assert_eq!(heap.adopt(4).err(), Some(AdoptError::NoSuchSlot { slot: 4, slots: 4 }));
}

#[test]
fn a_heap_without_recovery_cannot_adopt_a_dead_slot() {
    let _serial = serial();
    let name = HeapName::new("norecovery");
    let heap = Heap::create(name.as_str(), &Config { thread_slots: 1, recovery: false, ..small() }).unwrap();
    let mut child = fork_code("holder", || {
        let heap = Heap::open(name.as_str()).unwrap();
        let t = heap.attach().unwrap();
        let _ = t.alloc(64);
        std::mem::forget(t);
        // SAFETY: kill and getpid have no preconditions; the process dies here.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        0
    });
    assert_eq!(child.killed_by(), Signal::SIGKILL);
    assert_eq!(heap.dead_slots(), vec![0]);
    assert_eq!(heap.adopt(0).err(), Some(AdoptError::RecoveryDisabled));
    assert_eq!(heap.attach().err(), Some(AttachError::SlotsExhausted { slots: 1, dead: 1 }));
}

/// Words of the shared table: each child owns a stripe, the parent's live thread frees from
/// any of them.
const WORDS: usize = 256;

fn table(heap: &Heap) -> &[AtomicU64] {
    let off = heap.root(0).unwrap().load(Ordering::Acquire);
    let p = heap.pointer(Offset::<AtomicU64>::from_raw(off)).unwrap();
    // SAFETY: the parent allocated WORDS words there and frees them only at the end.
    unsafe { std::slice::from_raw_parts(p.as_ptr(), WORDS) }
}

#[test]
fn processes_killed_at_random_lose_nothing_while_a_live_thread_frees_their_blocks() {
    let _serial = serial();
    let name = HeapName::new("randomkill");
    let config = Config { thread_slots: 8, small_batch: 2, cache_local: 2, huge_capacity: 0, ..small() };
    let heap = Heap::create(name.as_str(), &config).unwrap();
    let owner = heap.attach().unwrap();
    let t = owner.alloc_zeroed(WORDS * 8).unwrap();
    heap.root(0).unwrap().store(heap.offset_of(t.as_ptr()).unwrap().raw(), Ordering::Release);
    let words = table(&heap);
    let stop = AtomicBool::new(false);
    let mut rng = Rng::new(0x5eed);
    let mut recovered = 0;
    std::thread::scope(|s| {
        // A live thread of this process frees whatever the children allocated, remotely,
        // racing with the children's own frees and with recovery.
        s.spawn(|| {
            let live = heap.attach().unwrap();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let _ = live.free_from(&words[i % WORDS]);
                i += 7;
            }
        });
        for round in 0..24u64 {
            let seed = rng.next();
            let attached = Pipe::new();
            let mut child = fork_code("worker", || {
                let heap = Heap::open(name.as_str()).unwrap();
                let t = heap.attach().unwrap();
                attached.send(&[1]);
                let words = table(&heap);
                let mut rng = Rng::new(seed);
                loop {
                    let w = &words[rng.below(WORDS as u64) as usize];
                    if w.load(Ordering::Relaxed) == 0 {
                        let size = [8, 64, 640, 4000, 70_000][rng.below(5) as usize];
                        let _ = t.alloc_into(size, w);
                    } else {
                        let _ = t.free_from(w);
                    }
                }
            });
            // Killed only once it holds a slot: each round then has a slot to recover, however
            // slowly a loaded machine starts the child.
            assert!(attached.recv(&mut [0], Duration::from_secs(30)), "round {round}: the worker never attached");
            std::thread::sleep(Duration::from_micros(500 + rng.below(20_000)));
            kill(child.pid, Signal::SIGKILL).unwrap();
            assert_eq!(child.killed_by(), Signal::SIGKILL, "round {round}");
            // Adoption runs while the live thread goes on freeing.
            recovered += heap.recover_dead().len();
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(recovered >= 24, "every killed worker's slot was recovered ({recovered})");
    let r = heap.check();
    assert!(r.is_clean() && r.in_flight.is_empty(), "{r}");
    for w in words {
        if w.load(Ordering::Acquire) != 0 {
            owner.free_from(w).unwrap();
        }
    }
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.live_blocks(), 1, "only the table is left: {r}");
}

/// Kills a child that did one detectable allocation into root 0, then rewrites the dead slot's
/// pending record (in the heap's `owned` file) to name a `kind` operation on heap offset
/// `block`; returns the heap with the dead slot 0.
fn dead_slot_whose_pending_record_names(name: &HeapName, kind: PendingKind, block: u64) -> Heap {
    let heap = Heap::create(name.as_str(), &Config { thread_slots: 1, ..small() }).unwrap();
    let mut child = fork_code("holder", || {
        let heap = Heap::open(name.as_str()).unwrap();
        let t = heap.attach().unwrap();
        let _ = t.alloc_into(64, heap.root(0).unwrap());
        std::mem::forget(t);
        // SAFETY: kill and getpid have no preconditions; the process dies here.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        0
    });
    assert_eq!(child.killed_by(), Signal::SIGKILL);
    let stored = heap.root(0).unwrap().swap(0, Ordering::Relaxed);
    assert_ne!(stored, 0);
    // The settled record still names the block it stored: find it, then rewrite the record.
    let owned = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(Heap::path_of(name.as_str()).unwrap().join("owned"))
        .unwrap();
    let mut record = vec![0u8; 4096];
    owned.read_exact_at(&mut record, 0).unwrap();
    let words: Vec<u64> = record.chunks(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect();
    // The pending record: a settled (0) word, then the block, the destination, no descriptor.
    let at: Vec<usize> = (1..words.len() - 2)
        .filter(|&i| words[i - 1] == 0 && words[i] == stored && words[i + 1] != 0 && words[i + 2] == 0)
        .collect();
    assert_eq!(at.len(), 1, "one pending record names the block");
    let word = (at[0] - 1) * 8;
    owned.write_all_at(&Pending::new(kind, 0).pack().to_ne_bytes(), word as u64).unwrap();
    owned.write_all_at(&block.to_ne_bytes(), word as u64 + 8).unwrap();
    heap
}

#[test]
fn recovery_ignores_a_pending_allocation_naming_a_block_outside_the_heap() {
    let _serial = serial();
    let name = HeapName::new("pending-alloc-outside");
    let heap = dead_slot_whose_pending_record_names(&name, PendingKind::Alloc, 1 << 60);
    let (_t, report) = heap.adopt(0).unwrap();
    assert_eq!(report.pending.map(|(_, o)| o), Some(PendingOutcome::NotTaken));
    assert_eq!(heap.root(0).unwrap().load(Ordering::Relaxed), 0, "nothing stored");
}

#[test]
fn recovery_ignores_a_pending_free_naming_a_block_outside_the_heap() {
    let _serial = serial();
    let name = HeapName::new("pending-free-outside");
    let heap = dead_slot_whose_pending_record_names(&name, PendingKind::Free, 1 << 60);
    let (_t, report) = heap.adopt(0).unwrap();
    assert_eq!(report.pending.map(|(_, o)| o), Some(PendingOutcome::AlreadyFreed));
}
