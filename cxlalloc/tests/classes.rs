//! Size classes: every size maps to the smallest class that fits, waste is bounded, block
//! geometry is exact, and aligned classes honour their alignment.

use cxlalloc::class::{class_aligned, class_of, Bracket, LARGE_MAX, SMALL_MAX};

#[test]
fn every_size_maps_to_the_smallest_class_that_fits() {
    for size in 1..=LARGE_MAX {
        let (b, c) = class_of(size).unwrap();
        let got = b.spec().class(c).unwrap().size as usize;
        assert!(got >= size, "size {size} got class {got}");
        let smaller = if c > 1 {
            b.spec().class(c - 1).unwrap().size as usize
        } else if b == Bracket::Large {
            SMALL_MAX
        } else {
            0
        };
        assert!(smaller < size, "size {size}: class {c} is not the smallest");
    }
}

#[test]
fn zero_and_huge_sizes_have_no_slab_class() {
    assert!(class_of(0).is_none());
    assert!(class_of(LARGE_MAX + 1).is_none());
}

#[test]
fn large_classes_waste_at_most_a_quarter() {
    for size in SMALL_MAX + 1..=LARGE_MAX {
        let (b, c) = class_of(size).unwrap();
        let got = b.spec().class(c).unwrap().size as usize;
        assert!((got - size) * 4 <= got, "size {size} → {got}");
    }
}

#[test]
fn reciprocal_division_is_exact_for_every_in_slab_offset() {
    for spec in Bracket::ALL.map(Bracket::spec) {
        for info in spec.classes {
            for off in (0..spec.slab_size() as u64).step_by(7).chain([spec.slab_size() as u64 - 1]) {
                assert_eq!((off * info.recip) >> 40, off / u64::from(info.size), "{info:?} {off}");
            }
        }
    }
}

#[test]
fn bitsets_cover_the_densest_class() {
    for spec in Bracket::ALL.map(Bracket::spec) {
        let max = spec.classes.iter().map(|c| c.blocks).max().unwrap() as usize;
        assert!(max <= spec.bitset_words * 64);
    }
}

#[test]
fn aligned_classes_honour_alignment() {
    for align in [8, 16, 64, 256, 4096, 32768, 1 << 19] {
        for size in [1, 24, 100, 1000, 5000, 70000] {
            let (b, c) = class_aligned(size, align).unwrap();
            let s = b.spec().class(c).unwrap().size as usize;
            assert!(s >= size && s % align == 0, "size {size} align {align} → {s}");
        }
    }
    assert!(class_aligned(8, 1 << 20).is_none());
}
