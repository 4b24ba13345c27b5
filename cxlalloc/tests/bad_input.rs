//! docs/design.md §11: every kind of bad input gets a clear, typed error and leaves the heap intact
//! (the checker stays clean and earlier blocks keep their contents).

use std::path::PathBuf;
use std::ptr::NonNull;

use cxlalloc::Bracket;
use cxlalloc::{
    AllocError, AttachError, Config, FreeError, HandOverError, Heap, OffsetError, OpenError, ReallocError, ThreadHandle,
};

fn small_heap() -> Heap {
    Heap::anonymous(&Config::with_capacity(32 << 20)).unwrap()
}

fn assert_clean(heap: &Heap) {
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

/// A unique heap directory under the system temp dir, removed on drop.
struct TempHeapDir(PathBuf);

impl TempHeapDir {
    fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("cxlalloc-bad-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempHeapDir(p)
    }
}

impl Drop for TempHeapDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_pointer_outside_the_heap_is_foreign() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    let mut on_stack = 0u64;
    let boxed = Box::new(7u64);
    assert_eq!(t.free(NonNull::from(&mut on_stack).cast()), Err(FreeError::ForeignPointer));
    assert_eq!(t.free(NonNull::from(&*boxed).cast()), Err(FreeError::ForeignPointer));
    assert_clean(&heap);
}

#[test]
fn a_pointer_beyond_the_heap_length_is_foreign() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    let p = t.alloc(16).unwrap();
    let beyond = unsafe { p.as_ptr().add(16 << 20) };
    assert_eq!(t.free(NonNull::new(beyond).unwrap()), Err(FreeError::ForeignPointer));
    t.free(p).unwrap();
    assert_clean(&heap);
}

/// The quick free tests no heap length (docs/design.md §4.5, "No length test"): a slab the
/// length never reached is refused by its all-zero descriptor (no class, no blocks), at a slab's
/// start (where the interior check of a size-0 slab passes) as well as inside it, in both
/// brackets, and in the data region's padding past the capacity's last slab.
#[test]
fn a_pointer_into_a_slab_past_the_length_is_foreign_at_every_offset() {
    // One slab over 32 MiB: the data region is rounded up to 34 MiB, so slabs 1025.. of the
    // small bracket lie past the capacity.
    let heap = Heap::anonymous(&Config::with_capacity((32 << 20) + (32 << 10))).unwrap();
    let t = heap.attach().unwrap();
    for (size, slab_bytes) in [(16usize, 32usize << 10), (4096, 512 << 10)] {
        let p = t.alloc(size).unwrap();
        unsafe { p.as_ptr().write_bytes(0x5a, size) };
        for slabs in [8usize, 9, 63, 1025, 1030] {
            if slabs * slab_bytes >= 34 << 20 {
                continue;
            }
            for in_slab in [0usize, 8, 16, 64, size] {
                let q = NonNull::new(p.as_ptr().wrapping_add(slabs * slab_bytes + in_slab)).unwrap();
                assert_eq!(t.free(q), Err(FreeError::ForeignPointer), "size {size}, {slabs} slabs on, +{in_slab}");
            }
        }
        assert_eq!(unsafe { *p.as_ptr().add(size - 1) }, 0x5a);
        t.free(p).unwrap();
    }
    assert_clean(&heap);
}

#[test]
fn an_interior_pointer_is_refused_and_the_block_survives() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    for size in [24, 1000, 5000] {
        let p = t.alloc(size).unwrap();
        unsafe { p.as_ptr().write_bytes(0x5a, size) };
        let inner = unsafe { NonNull::new_unchecked(p.as_ptr().add(8)) };
        assert_eq!(t.free(inner), Err(FreeError::InteriorPointer));
        assert_eq!(unsafe { *p.as_ptr().add(size - 1) }, 0x5a);
        t.free(p).unwrap();
    }
    assert_clean(&heap);
}

#[test]
fn a_pointer_into_an_empty_slab_is_not_allocated() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    // 32 blocks of 1 KiB fill one slab; the 33rd moves allocation to a new slab.
    let first: Vec<_> = (0..32).map(|_| t.alloc(1024).unwrap()).collect();
    let other = t.alloc(1024).unwrap();
    for &p in &first {
        t.free(p).unwrap();
    }
    // The first slab is entirely free and back on the unsized list: it has no class.
    assert_eq!(t.free(first[0]), Err(FreeError::NotAllocated));
    assert_eq!(t.usable_size(first[5]), Err(FreeError::NotAllocated));
    t.free(other).unwrap();
    assert_clean(&heap);
}

#[test]
fn a_local_double_free_is_detected() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    let keep = t.alloc(32).unwrap();
    let p = t.alloc(32).unwrap();
    t.free(p).unwrap();
    assert_eq!(t.free(p), Err(FreeError::DoubleFree));
    t.free(keep).unwrap();
    assert_clean(&heap);
}

/// 200 blocks of 32 B fill four bitset words of one slab; allocation has moved on to the
/// fourth, so the first word's blocks are freed through the bitset, not the cached word (the
/// full model's quick local free, docs/design.md §4.5).
fn blocks_past_the_cached_word(t: &cxlalloc::ThreadHandle) -> Vec<NonNull<u8>> {
    (0..200).map(|_| t.alloc(32).unwrap()).collect()
}

#[test]
fn a_local_double_free_in_the_bitset_is_detected() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    let blocks = blocks_past_the_cached_word(&t);
    // Neither the slab's first free block nor its last: no list moves, no log.
    t.free(blocks[10]).unwrap();
    t.free(blocks[11]).unwrap();
    assert_eq!(t.free(blocks[10]), Err(FreeError::DoubleFree));
    for &p in blocks.iter().filter(|&&p| p != blocks[10] && p != blocks[11]) {
        t.free(p).unwrap();
    }
    assert_clean(&heap);
}

#[test]
fn the_owner_freeing_a_block_in_its_mailbox_outside_the_cached_word_is_a_double_free() {
    let heap = small_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let blocks = blocks_past_the_cached_word(&owner);
    owner.free(blocks[20]).unwrap();
    other.free(blocks[10]).unwrap();
    assert_eq!(owner.free(blocks[10]), Err(FreeError::DoubleFree));
    for &p in blocks.iter().filter(|&&p| p != blocks[10] && p != blocks[20]) {
        owner.free(p).unwrap();
    }
    assert_clean(&heap);
}

#[test]
fn a_remote_double_free_is_detected() {
    let heap = small_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let keep = owner.alloc(48).unwrap();
    let p = owner.alloc(48).unwrap();
    other.free(p).unwrap();
    assert_eq!(other.free(p), Err(FreeError::DoubleFree));
    assert_eq!(owner.free(p), Err(FreeError::DoubleFree), "the owner must not re-add a remotely freed block");
    owner.free(keep).unwrap();
    assert_clean(&heap);
}

#[test]
fn a_remote_free_of_a_locally_freed_block_is_a_double_free() {
    let heap = small_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let keep = owner.alloc(48).unwrap();
    let p = owner.alloc(48).unwrap();
    owner.free(p).unwrap();
    assert_eq!(other.free(p), Err(FreeError::DoubleFree));
    owner.free(keep).unwrap();
    assert_clean(&heap);
}

#[test]
fn zero_and_overflowing_sizes_are_errors() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    assert_eq!(t.alloc(0), Err(AllocError::ZeroSize));
    assert_eq!(t.alloc_array_zeroed(usize::MAX / 2, 3), Err(AllocError::Overflow));
    assert_eq!(t.alloc(usize::MAX), Err(AllocError::Overflow));
    assert_eq!(t.alloc(1 << 50), Err(AllocError::HugeExhausted));
    assert_clean(&heap);
}

#[test]
fn a_non_power_of_two_alignment_is_an_error() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    assert_eq!(t.alloc_aligned(64, 48), Err(AllocError::BadAlignment(48)));
    assert_eq!(t.alloc_aligned(64, 0), Err(AllocError::BadAlignment(0)));
    assert_clean(&heap);
}

#[test]
fn aligned_allocations_are_aligned_without_padding() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    for align in [8usize, 16, 64, 512, 4096, 65536, 512 << 10] {
        for size in [1usize, 24, 1000, 3000] {
            let p = t.alloc_aligned(size, align).unwrap();
            assert_eq!(p.as_ptr() as usize % align, 0, "size {size} align {align}");
            t.free(p).unwrap();
        }
    }
    assert_clean(&heap);
}

#[test]
fn an_alignment_above_one_gib_is_refused_naming_the_limit() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    let e = t.alloc_aligned(8, 1 << 31).unwrap_err();
    assert_eq!(e, AllocError::AlignmentTooLarge { align: 1 << 31, max: 1 << 30 });
    assert_eq!(cxlalloc::MAX_ALIGN, 1 << 30);
    let msg = e.to_string();
    assert!(msg.contains("1 GiB") && !msg.contains("power of two"), "{msg}");
    assert_eq!(cxlalloc::ErrorCode::from(&e), cxlalloc::ErrorCode::InvalidArgument);
    assert_clean(&heap);
}

#[test]
fn realloc_of_a_bad_pointer_copies_nothing_and_fails() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    let mut x = 0u64;
    assert_eq!(t.realloc(NonNull::from(&mut x).cast(), 100), Err(ReallocError::Free(FreeError::ForeignPointer)));
    let p = t.alloc(16).unwrap();
    t.free(p).unwrap();
    assert!(t.realloc(p, 100).is_err());
    assert_clean(&heap);
}

#[test]
fn realloc_preserves_contents_across_classes_and_brackets() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    let mut p = t.alloc(10).unwrap();
    unsafe { p.as_ptr().copy_from_nonoverlapping(b"0123456789".as_ptr(), 10) };
    for size in [12, 100, 2000, 300_000, 40, 10] {
        p = t.realloc(p, size).unwrap();
        assert_eq!(unsafe { std::slice::from_raw_parts(p.as_ptr(), 10) }, b"0123456789");
    }
    assert_eq!(t.realloc(p, 0), Err(ReallocError::Alloc(AllocError::ZeroSize)));
    t.free(p).unwrap();
    assert_clean(&heap);
}

#[test]
fn an_exhausted_heap_returns_out_of_memory_and_recovers_after_frees() {
    let heap =
        Heap::anonymous(&Config { small_capacity: 4 << 15, large_capacity: 2 << 19, ..Config::default() }).unwrap();
    let t = heap.attach().unwrap();
    let mut blocks = Vec::new();
    let err = loop {
        match t.alloc(1024) {
            Ok(p) => blocks.push(p),
            Err(e) => break e,
        }
    };
    assert_eq!(err, AllocError::OutOfMemory(Bracket::Small));
    assert_eq!(blocks.len(), 4 * 32);
    assert_eq!(t.alloc(8), Err(AllocError::OutOfMemory(Bracket::Small)));
    assert!(t.alloc(4096).is_ok(), "the large bracket is independent");
    for p in blocks.drain(..32) {
        t.free(p).unwrap();
    }
    assert!(t.alloc(8).is_ok(), "a slab freed entirely serves another class");
    assert_clean(&heap);
}

#[test]
fn exhausted_thread_slots_are_a_clear_error() {
    let heap = Heap::anonymous(&Config { thread_slots: 2, ..Config::with_capacity(8 << 20) }).unwrap();
    let a = heap.attach().unwrap();
    let _b = heap.attach().unwrap();
    assert_eq!(heap.attach().unwrap_err(), AttachError::SlotsExhausted { slots: 2, dead: 0 });
    drop(a);
    assert!(heap.attach().is_ok(), "a detached slot can be leased again");
}

#[test]
fn offsets_outside_the_heap_are_refused() {
    let heap = small_heap();
    let t = heap.attach().unwrap();
    let p = t.alloc(8).unwrap();
    let off = heap.offset_of(p.as_ptr()).unwrap();
    assert_eq!(heap.pointer(off).unwrap(), p);
    let x = 0u64;
    assert_eq!(heap.offset_of(&x as *const u64), Err(OffsetError::OutOfBounds));
    assert_eq!(heap.pointer(cxlalloc::Offset::<u8>::NULL), Err(OffsetError::Null));
    assert_eq!(heap.pointer(cxlalloc::Offset::<u8>::from_raw(u64::MAX)), Err(OffsetError::OutOfBounds));
    assert_eq!(
        heap.pointer(cxlalloc::Offset::<u8>::from_raw(8)),
        Err(OffsetError::OutOfBounds),
        "the header is not data"
    );
    assert_eq!(heap.pointer(off.cast::<u64>().cast::<u8>()), Ok(p));
    let odd = cxlalloc::Offset::<u64>::from_raw(off.raw() + 1);
    assert_eq!(heap.pointer(odd), Err(OffsetError::OutOfBounds), "misaligned for u64");
    assert!(heap.root(Heap::ROOTS).is_none());
    t.free(p).unwrap();
}

#[test]
fn a_missing_heap_is_not_found() {
    let dir = TempHeapDir::new("missing");
    assert!(matches!(Heap::open_at(&dir.0), Err(OpenError::NotFound(_))));
    assert!(matches!(Heap::open("no-such-heap-cxlalloc-test"), Err(OpenError::NotFound(_))));
}

#[test]
fn invalid_names_are_refused() {
    for name in ["", "a/b", ".hidden"] {
        assert!(matches!(Heap::open(name), Err(OpenError::InvalidName { .. })), "{name:?}");
    }
}

#[test]
fn creating_an_existing_heap_fails() {
    let dir = TempHeapDir::new("exists");
    let cfg = Config::with_capacity(8 << 20);
    let _h = Heap::create_at(&dir.0, &cfg).unwrap();
    assert!(matches!(Heap::create_at(&dir.0, &cfg), Err(OpenError::AlreadyExists(_))));
}

#[test]
fn a_truncated_region_file_is_refused_at_open() {
    let dir = TempHeapDir::new("trunc");
    drop(Heap::create_at(&dir.0, &Config::with_capacity(8 << 20)).unwrap());
    let data = dir.0.join("data");
    std::fs::OpenOptions::new().write(true).open(&data).unwrap().set_len(4096).unwrap();
    match Heap::open_at(&dir.0) {
        Err(OpenError::Truncated { path, actual, .. }) => {
            assert_eq!(path, data);
            assert_eq!(actual, 4096);
        }
        r => panic!("expected Truncated, got {r:?}"),
    }
}

#[test]
fn a_file_that_is_not_a_heap_has_bad_magic() {
    let dir = TempHeapDir::new("magic");
    drop(Heap::create_at(&dir.0, &Config::with_capacity(8 << 20)).unwrap());
    std::fs::write(dir.0.join("header"), b"definitely not a heap header").unwrap();
    assert!(matches!(Heap::open_at(&dir.0), Err(OpenError::BadMagic(_))));
}

#[test]
fn a_corrupted_header_fails_its_checksum() {
    let dir = TempHeapDir::new("sum");
    drop(Heap::create_at(&dir.0, &Config::with_capacity(8 << 20)).unwrap());
    let path = dir.0.join("header");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[40] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    assert!(matches!(Heap::open_at(&dir.0), Err(OpenError::Checksum(_))));
}

#[test]
fn a_zero_length_header_is_refused() {
    let dir = TempHeapDir::new("empty");
    drop(Heap::create_at(&dir.0, &Config::with_capacity(8 << 20)).unwrap());
    std::fs::write(dir.0.join("header"), b"").unwrap();
    assert!(matches!(Heap::open_at(&dir.0), Err(OpenError::BadMagic(_))));
}

#[test]
fn opening_with_a_different_configuration_names_the_field() {
    let dir = TempHeapDir::new("mismatch");
    let cfg = Config::with_capacity(8 << 20);
    let _h = Heap::create_at(&dir.0, &cfg).unwrap();
    let other = Config { thread_slots: 7, ..cfg.clone() };
    match Heap::open_or_create_at(&dir.0, &other) {
        Err(OpenError::Mismatch { field, found, expected }) => {
            assert_eq!((field, found, expected), ("thread_slots", 1024, 7));
        }
        r => panic!("expected Mismatch, got {r:?}"),
    }
    assert!(Heap::open_or_create_at(&dir.0, &cfg).is_ok());
}

#[test]
fn an_invalid_configuration_is_refused_at_create() {
    let dir = TempHeapDir::new("badcfg");
    let bad = Config { thread_slots: 0, ..Config::with_capacity(8 << 20) };
    assert!(matches!(Heap::create_at(&dir.0, &bad), Err(OpenError::InvalidConfig(_))));
    assert!(!dir.0.exists(), "nothing is left behind");
}

#[test]
fn realloc_of_a_block_freed_by_another_thread_fails_without_leaking() {
    let heap = small_heap();
    let a = heap.attach().unwrap();
    let b = heap.attach().unwrap();
    let keep = a.alloc(64).unwrap();
    let p = a.alloc(64).unwrap();
    b.free(p).unwrap();
    assert_eq!(a.realloc(p, 2000), Err(ReallocError::Free(FreeError::NotAllocated)));
    assert_eq!(a.usable_size(p), Err(FreeError::NotAllocated));
    a.free(keep).unwrap();
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    assert_eq!(Bracket::ALL.iter().map(|&b| r.bracket(b).live_blocks()).sum::<u64>(), 0, "{r}");
}

#[test]
fn corrupted_descriptor_metadata_is_an_error_not_a_crash() {
    use std::os::unix::fs::FileExt;
    let dir = TempHeapDir::new("corrupt");
    let heap = Heap::create_at(&dir.0, &Config::with_capacity(8 << 20)).unwrap();
    let t = heap.attach().unwrap();
    let p = t.alloc(64).unwrap();
    // Slab 0's descriptor starts the local region file; its class is the second u32, the
    // block count sits at byte 44.
    let local = std::fs::OpenOptions::new().write(true).open(dir.0.join("local")).unwrap();
    local.write_all_at(&9999u32.to_ne_bytes(), 4).unwrap();
    // The message comes back whole through the free's out-of-line entry (docs/design.md §4.5).
    assert_eq!(t.free(p), Err(FreeError::Corrupt("descriptor class out of range")));
    local.write_all_at(&8u32.to_ne_bytes(), 4).unwrap();
    local.write_all_at(&u32::MAX.to_ne_bytes(), 44).unwrap();
    assert_eq!(t.free(p), Err(FreeError::Corrupt("descriptor block count out of range")));
    assert!(!heap.check().is_clean(), "the checker points at the damage");
}

#[test]
fn a_creation_abandoned_by_a_dead_process_is_cleaned_up() {
    let dir = TempHeapDir::new("abandoned");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = dir.0.with_file_name(format!(".cxlalloc.creating-{dead}-0-123"));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("header"), b"half").unwrap();
    let live = dir.0.with_file_name(format!(".cxlalloc.creating-{}-0-456", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    let _heap = Heap::create_at(&dir.0, &Config::with_capacity(8 << 20)).unwrap();
    assert!(!stale.exists(), "the dead creator's directory is gone");
    assert!(live.exists(), "a live creator's directory is left alone");
    std::fs::remove_dir(&live).unwrap();
}

fn limited_heap() -> Heap {
    Heap::anonymous(&Config {
        coherence: cxlalloc::Coherence::Limited,
        huge_capacity: 0,
        ..Config::with_capacity(64 << 20)
    })
    .unwrap()
}

/// Huge blocks need full coherence; there a hand-over flushes nothing but checks its range all
/// the same.
fn huge_heap() -> Heap {
    Heap::anonymous(&Config::with_capacity(64 << 20)).unwrap()
}

#[test]
fn a_hand_over_range_straddling_two_slabs_is_refused_and_one_ending_at_the_slab_end_is_not() {
    let heap = limited_heap();
    let t = heap.attach().unwrap();
    // 32 blocks of 1 KiB: one small slab of a fresh heap, in address order.
    let mut blocks: Vec<NonNull<u8>> = (0..32).map(|_| t.alloc(1024).unwrap()).collect();
    blocks.sort();
    let (first, last) = (blocks[0], blocks[31]);
    assert_eq!(last.as_ptr() as usize - first.as_ptr() as usize, 31 * 1024, "one slab of 32 blocks");
    assert_eq!(t.write_back(last, 1024), Ok(()));
    assert_eq!(t.write_back(last, 1025), Err(HandOverError::PastEnd { len: 1025, room: 1024 }));
    assert_eq!(t.invalidate(last, 1025), Err(HandOverError::PastEnd { len: 1025, room: 1024 }));
    assert_eq!(t.write_back(first, 32 << 10), Ok(()), "a whole slab is one range");
    assert_eq!(
        t.write_back(first, (32 << 10) + 1),
        Err(HandOverError::PastEnd { len: (32 << 10) + 1, room: 32 << 10 })
    );
    assert_clean(&heap);
}

#[test]
fn a_hand_over_length_near_the_top_of_the_address_space_is_refused() {
    let heap = limited_heap();
    let t = heap.attach().unwrap();
    let p = t.alloc(64).unwrap();
    for len in [usize::MAX, usize::MAX / 2, isize::MAX as usize + 1] {
        assert!(matches!(t.write_back(p, len), Err(HandOverError::PastEnd { .. })), "write-back of {len} bytes");
        assert!(matches!(t.invalidate(p, len), Err(HandOverError::PastEnd { .. })), "invalidation of {len} bytes");
    }
    assert_clean(&heap);
    let heap = huge_heap();
    let t = heap.attach().unwrap();
    let huge = t.alloc(4 << 20).unwrap();
    let size = t.usable_size(huge).unwrap();
    assert!(matches!(t.write_back(huge, usize::MAX), Err(HandOverError::PastEnd { .. })));
    assert_eq!(t.write_back(huge, size + 1), Err(HandOverError::PastEnd { len: size + 1, room: size }));
    assert_eq!(t.write_back(huge, size), Ok(()));
    assert_clean(&heap);
}

#[test]
fn a_hand_over_from_inside_a_huge_block_or_of_a_freed_one_is_refused() {
    let heap = huge_heap();
    let t = heap.attach().unwrap();
    let huge = t.alloc(4 << 20).unwrap();
    // SAFETY: 4096 bytes into a live block of 4 MiB.
    let inside = unsafe { NonNull::new_unchecked(huge.as_ptr().add(4096)) };
    assert!(matches!(t.write_back(inside, 8), Err(HandOverError::Block(_))), "interior of a huge block");
    t.free(huge).unwrap();
    assert!(matches!(t.invalidate(huge, 8), Err(HandOverError::Block(_))), "a freed huge block");
    assert_clean(&heap);
}

/// A block its owner freed into its cached word, freed again by another thread, is a double
/// free, in the first word the owner cached and in one cached after a refill: the remote check
/// reads the owner's cached word, not only its bitset (docs/design.md §4.6, "The double-free
/// check's lines").
#[test]
fn a_remote_free_of_a_block_in_its_owners_cached_word_is_a_double_free() {
    let heap = small_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    // 70 blocks of 32 B: the first 64 fill bitset word 0, the rest come from word 1, which the
    // owner cached at the refill.
    let blocks: Vec<_> = (0..70).map(|_| owner.alloc(32).unwrap()).collect();
    owner.free(blocks[66]).unwrap();
    assert_eq!(other.free(blocks[66]), Err(FreeError::DoubleFree));
    let fresh = owner.alloc(32).unwrap();
    assert_eq!(fresh, blocks[66], "the refused free left the block in the cached word");
    for &p in blocks.iter().filter(|&&p| p != blocks[66]) {
        other.free(p).unwrap();
    }
    other.free(fresh).unwrap();
    drop(owner);
    drop(other);
    assert_clean(&heap);
}

/// Makes `owner` a slot that remote frees come back to (docs/design.md §4.6): `other` frees one
/// of its 1 KiB blocks, and the allocation of the slab's last block harvests it. (A build that
/// took the bitset words of such a slot with marks was measured and not kept: §15.1,
/// "Cached-word marks".) Returns the 32 blocks `owner` holds (the harvested one allocated
/// again), for the caller to free.
fn remote_frees_come_back_to(owner: &ThreadHandle, other: &ThreadHandle) -> Vec<NonNull<u8>> {
    let mut blocks: Vec<_> = (0..31).map(|_| owner.alloc(1024).unwrap()).collect();
    other.free(blocks[5]).unwrap();
    let last = owner.alloc(1024).unwrap();
    assert_eq!(last.as_ptr(), blocks[30].as_ptr().wrapping_add(1024), "one slab of 32 blocks");
    let again = owner.alloc(1024).unwrap();
    assert_eq!(again, blocks[5], "the harvest put the block back into the cached word");
    blocks.push(last);
    blocks
}

/// A block its owner never handed out, in the owner's cached word, freed by another thread is
/// refused: in the word cached when the slab was sized and in one cached at a refill, by an
/// owner no remote free has come back to and by one that has harvested (docs/design.md §4.6,
/// "The double-free check's lines": the remote free reads the owner's cached word).
#[test]
fn a_remote_free_of_a_block_never_handed_out_from_its_owners_cached_word_is_refused() {
    let heap = small_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let mut held = Vec::new();
    for harvested in [false, true] {
        if harvested {
            held.extend(remote_frees_come_back_to(&owner, &other));
        }
        let size = if harvested { 48 } else { 32 };
        let first = owner.alloc(size).unwrap();
        // Block 1 of word 0, cached at the sizing, never handed out.
        let next = first.as_ptr().wrapping_add(size);
        // SAFETY: a block of the slab just sized (inside the heap mapping); freeing it must fail.
        assert_eq!(
            other.free(unsafe { NonNull::new_unchecked(next) }),
            Err(FreeError::DoubleFree),
            "harvested {harvested}"
        );
        // 64 more: word 0 drained, word 1 cached by a refill with its first block handed out.
        let more: Vec<_> = (0..64).map(|_| owner.alloc(size).unwrap()).collect();
        assert_eq!(more[0].as_ptr(), next, "blocks are handed out in order");
        let past = more[63].as_ptr().wrapping_add(size);
        // SAFETY: as above (block 65 of the same slab, in the refilled cached word).
        assert_eq!(
            other.free(unsafe { NonNull::new_unchecked(past) }),
            Err(FreeError::DoubleFree),
            "harvested {harvested}"
        );
        held.extend(more);
        held.push(first);
    }
    for p in held {
        other.free(p).unwrap();
    }
    drop(owner);
    drop(other);
    assert_clean(&heap);
}

/// A block freed remotely and harvested back into its owner's cached word, freed remotely
/// again, is a double free (docs/design.md §4.6): the harvest clears the block's link, so only
/// the owner's cached word says the block is free. A slab of 32 blocks of 1 KiB is one bitset
/// word; the allocation of its last block harvests the mailbox before retiring it.
#[test]
fn a_remote_free_of_a_block_harvested_into_its_owners_cached_word_is_a_double_free() {
    let heap = small_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let mut held = remote_frees_come_back_to(&owner, &other);
    // A second slab of the class, sized after the first harvest.
    let blocks: Vec<_> = (0..31).map(|_| owner.alloc(1024).unwrap()).collect();
    other.free(blocks[5]).unwrap();
    let last = owner.alloc(1024).unwrap();
    assert_eq!(last.as_ptr(), blocks[30].as_ptr().wrapping_add(1024), "one slab of 32 blocks");
    assert_eq!(other.free(blocks[5]), Err(FreeError::DoubleFree));
    let again = owner.alloc(1024).unwrap();
    assert_eq!(again, blocks[5], "the harvest put the block back into the cached word");
    held.extend(blocks.iter().copied().filter(|&p| p != blocks[5]));
    held.extend([last, again]);
    for p in held {
        other.free(p).unwrap();
    }
    drop(owner);
    drop(other);
    assert_clean(&heap);
}

/// A block its owner freed into its cached word, freed again by another thread, is a double
/// free also where remote frees come back to the owner (docs/design.md §4.6).
#[test]
fn a_remote_free_of_a_block_its_harvesting_owner_freed_into_the_cached_word_is_a_double_free() {
    let heap = small_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let held = remote_frees_come_back_to(&owner, &other);
    let keep = owner.alloc(48).unwrap();
    let p = owner.alloc(48).unwrap();
    owner.free(p).unwrap();
    assert_eq!(other.free(p), Err(FreeError::DoubleFree));
    assert_eq!(owner.alloc(48).unwrap(), p, "the refused free left the block in the cached word");
    for q in held.into_iter().chain([keep, p]) {
        other.free(q).unwrap();
    }
    drop(owner);
    drop(other);
    assert_clean(&heap);
}

// The limited model in one process: every free block carries its slab's mark (docs/design.md
// §4.1), which is what a non-owner's free checks, so the reduced models' quick local free
// (§4.5) must write it.

#[test]
fn a_remote_free_of_a_block_freed_into_the_cached_word_is_refused_in_the_limited_model() {
    let heap = limited_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let keep = owner.alloc(48).unwrap();
    let p = owner.alloc(48).unwrap();
    owner.free(p).unwrap();
    assert_eq!(other.free(p), Err(FreeError::DoubleFree));
    owner.free(keep).unwrap();
    assert_clean(&heap);
}

#[test]
fn a_remote_free_of_a_block_freed_into_the_bitset_is_refused_in_the_limited_model() {
    let heap = limited_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let blocks = blocks_past_the_cached_word(&owner);
    // Neither the slab's first free block nor its last: the quick path's bitset store.
    owner.free(blocks[10]).unwrap();
    owner.free(blocks[11]).unwrap();
    assert_eq!(other.free(blocks[10]), Err(FreeError::DoubleFree));
    for &p in blocks.iter().filter(|&&p| p != blocks[10] && p != blocks[11]) {
        owner.free(p).unwrap();
    }
    assert_clean(&heap);
}

// The full model's remote free refuses a block its owner holds free by asking the owner's
// bitset and cached word (docs/design.md §4.6, "The double-free check's lines"); any cheaper
// check must keep refusing these (§15.1: free marks in the full model, measured and not kept).

#[test]
fn a_remote_free_of_a_block_freed_into_the_bitset_is_a_double_free() {
    let heap = small_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    let blocks = blocks_past_the_cached_word(&owner);
    // Neither the slab's first free block nor its last: the quick path's bitset store.
    owner.free(blocks[10]).unwrap();
    owner.free(blocks[11]).unwrap();
    assert_eq!(other.free(blocks[10]), Err(FreeError::DoubleFree));
    for &p in blocks.iter().filter(|&&p| p != blocks[10] && p != blocks[11]) {
        owner.free(p).unwrap();
    }
    assert_clean(&heap);
}

#[test]
fn a_remote_free_of_a_block_never_handed_out_is_a_double_free() {
    let heap = small_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    // A fresh slab of 32-byte blocks: blocks 0..3 handed out, block 10 free in the cached word
    // and block 130 free in the bitset, neither ever handed out.
    let blocks: Vec<_> = (0..3).map(|_| owner.alloc(32).unwrap()).collect();
    for i in [10, 130] {
        let p = blocks[0].as_ptr().wrapping_add(i * 32);
        assert_eq!(other.free(NonNull::new(p).unwrap()), Err(FreeError::DoubleFree), "block {i}");
    }
    for (i, &p) in blocks.iter().enumerate() {
        assert_eq!(p.as_ptr(), blocks[0].as_ptr().wrapping_add(i * 32), "a fresh slab hands out blocks in order");
        other.free(p).unwrap();
    }
    drop(owner);
    drop(other);
    assert_clean(&heap);
}

/// Limited model (docs/design.md §4.1, "Marks kept at re-sizing"): a slab emptied by its
/// owner's local frees (T7) and sized again for the same class keeps its mark and writes no
/// block, so the marks its blocks carry from the local frees are what a remote free checks: a
/// block of the new sizing never handed out is still refused, and no refused free writes into
/// a block that is handed out.
#[test]
fn a_slab_sized_again_with_its_marks_kept_refuses_remote_frees_of_blocks_never_handed_out() {
    let heap = limited_heap();
    let owner = heap.attach().unwrap();
    let other = heap.attach().unwrap();
    // Slab A: 32 blocks of 1 KiB, filled (detached); the 33rd allocation sizes slab B.
    let a: Vec<_> = (0..32).map(|_| owner.alloc(1024).unwrap()).collect();
    let slab = a[0].as_ptr() as usize >> 15;
    assert!(a.iter().all(|p| p.as_ptr() as usize >> 15 == slab), "not one slab");
    let mut b = vec![owner.alloc(1024).unwrap()];
    // Every block of A back by local frees: T7, A unsized with its marks.
    for &p in &a {
        owner.free(p).unwrap();
    }
    // B filled; the next allocation sizes A again for the same class and takes its block 0.
    b.extend((0..31).map(|_| owner.alloc(1024).unwrap()));
    let again = owner.alloc(1024).unwrap();
    assert_eq!(again, a[0], "slab A was not the one sized again");
    // SAFETY: a live 1 KiB block of ours.
    unsafe { std::ptr::write_bytes(again.as_ptr(), 0x5a, 1024) };
    for i in [1, 5, 31] {
        assert_eq!(other.free(a[i]), Err(FreeError::DoubleFree), "block {i} of the new sizing, never handed out");
    }
    // SAFETY: as above.
    assert!(unsafe { std::slice::from_raw_parts(again.as_ptr(), 1024) }.iter().all(|&x| x == 0x5a));
    // Handed out again afterwards, and freed remotely like any block.
    let later: Vec<_> = (0..31).map(|_| owner.alloc(1024).unwrap()).collect();
    assert_eq!(later, a[1..].to_vec(), "the refused blocks were still free, in order");
    for p in later.into_iter().chain([again]).chain(b) {
        other.free(p).unwrap();
    }
    drop(owner);
    drop(other);
    assert_clean(&heap);
}
