//! The destination word of a detectable allocation or free (`alloc_into`, `free_from`) is
//! checked against what this process really has mapped before it is read or written
//! (docs/design.md §8.4, §11): a word beyond the heap's length, in the huge span where no live
//! block is, misaligned or outside the heap is refused with the documented error, and nothing
//! changes. The first three crashed with SIGSEGV when only the span was checked. (A misaligned
//! `&AtomicU64` cannot be formed in Rust; the C API's misaligned `dest` is tested in
//! `tests/c/api_test.c`.)
#![cfg(not(miri))]

mod common;

use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use common::{serial, HeapName};
use cxlalloc::{AllocError, Config, FreeError, Heap, ThreadHandle};

const MIB: usize = 1 << 20;

/// A file-backed heap (so that memory beyond the length and outside live huge blocks is
/// reserved `PROT_NONE`, as in every process that shares a heap) with a huge heap.
fn create(name: &HeapName) -> (Heap, ThreadHandle) {
    let config = Config { huge_capacity: 4 << 30, ..Config::with_capacity(64 << 20) };
    let heap = Heap::create(name.as_str(), &config).unwrap();
    let t = heap.attach().unwrap();
    (heap, t)
}

/// The word at `p`, as a caller holding a raw pointer into the heap would name it.
///
/// # Safety
/// None to uphold beyond what the call under test checks: the reference is only passed to
/// `alloc_into`/`free_from`, which must check it before touching it.
unsafe fn word<'a>(p: *mut u8) -> &'a AtomicU64 {
    // SAFETY: see above; never dereferenced by the test itself.
    unsafe { &*p.cast::<AtomicU64>() }
}

/// Live blocks and a clean check: what "nothing changed" is measured by.
fn live_blocks(heap: &Heap) -> u64 {
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    r.live_blocks()
}

/// Asserts that both detectable operations refuse `dest` and that the heap is unchanged.
fn assert_refused(heap: &Heap, t: &ThreadHandle, dest: *mut u8) {
    let before = live_blocks(heap);
    // SAFETY: the word is only named, and must be checked before use.
    let w = unsafe { word(dest) };
    assert_eq!(t.alloc_into(64, w).err(), Some(AllocError::BadDestination), "alloc_into at {dest:p}");
    assert_eq!(t.alloc_into(4 * MIB, w).err(), Some(AllocError::BadDestination), "huge alloc_into at {dest:p}");
    assert_eq!(t.free_from(w), Err(FreeError::ForeignPointer), "free_from at {dest:p}");
    assert_eq!(live_blocks(heap), before, "a refused destination allocated or freed something");
}

#[test]
fn a_destination_beyond_the_heap_length_is_refused() {
    let _serial = serial();
    let name = HeapName::new("dest-beyond");
    let (heap, t) = create(&name);
    let p = t.alloc(64).unwrap();
    // 16 MiB on: still small-slab data (64 MiB capacity), far beyond the few slabs in use.
    // SAFETY: address arithmetic only.
    let beyond = unsafe { p.as_ptr().add(16 * MIB) };
    assert!(heap.offset_of(beyond).is_ok(), "the word must lie in the data span for this test");
    assert_refused(&heap, &t, beyond);
    t.free(p).unwrap();
}

#[test]
fn a_destination_in_the_huge_span_where_no_block_lies_is_refused() {
    let _serial = serial();
    let name = HeapName::new("dest-unmapped-huge");
    let (heap, t) = create(&name);
    let p = t.alloc(4 * MIB).unwrap();
    // SAFETY: address arithmetic only: 64 MiB past the block, inside its huge slot.
    let unmapped = unsafe { p.as_ptr().add(64 * MIB) };
    assert!(heap.offset_of(unmapped).is_ok(), "the word must lie in the huge span for this test");
    assert_refused(&heap, &t, unmapped);
    t.free(p).unwrap();
}

#[test]
fn a_destination_in_a_freed_huge_block_is_refused() {
    let _serial = serial();
    let name = HeapName::new("dest-freed-huge");
    let (heap, t) = create(&name);
    let keep = t.alloc(2 * MIB).unwrap();
    let p = t.alloc(4 * MIB).unwrap();
    t.free(p).unwrap();
    // SAFETY: address arithmetic only.
    assert_refused(&heap, &t, unsafe { p.as_ptr().add(8) });
    t.free(keep).unwrap();
}

#[test]
fn a_destination_outside_the_heap_is_refused() {
    let _serial = serial();
    let name = HeapName::new("dest-foreign");
    let (heap, t) = create(&name);
    let mut on_stack = 7u64;
    assert_refused(&heap, &t, (&mut on_stack as *mut u64).cast());
    assert_eq!(on_stack, 7);
}

#[test]
fn a_destination_in_a_live_huge_block_this_instance_never_mapped_is_accepted() {
    let _serial = serial();
    let name = HeapName::new("dest-live-huge");
    let (heap, t) = create(&name);
    // A second instance of the heap maps only what it touches, as another process would.
    let other = Heap::open(name.as_str()).unwrap();
    let table = t.alloc(2 * MIB).unwrap();
    let off = heap.offset_of(table.as_ptr()).unwrap();
    let there: NonNull<u8> = other.pointer(off).unwrap();
    let u = other.attach().unwrap();
    // SAFETY: 8 bytes into a live 2 MiB block (zero-filled: a fresh backing object).
    let dest = unsafe { word(there.as_ptr().add(8)) };
    let block = u.alloc_into(100, dest).unwrap();
    assert_eq!(dest.load(std::sync::atomic::Ordering::Acquire), other.offset_of(block.as_ptr()).unwrap().raw());
    u.free_from(dest).unwrap();
    assert_eq!(dest.load(std::sync::atomic::Ordering::Acquire), 0);
    drop(u);
    drop(other);
    t.free(table).unwrap();
    assert_eq!(live_blocks(&heap), 0);
}
