//! Size classes: every size maps to the smallest class that fits, waste is bounded,
//! and aligned classes honour their alignment. (The block geometry itself is checked by the
//! unit tests in `src/class.rs`.)

use cxlalloc::internal::{class_aligned, class_of, LARGE_MAX, SMALL_MAX};
use cxlalloc::Bracket;

#[test]
fn every_size_maps_to_the_smallest_class_that_fits() {
    for size in 1..=LARGE_MAX {
        let (b, c) = class_of(size).unwrap();
        let got = b.class_size(c).unwrap();
        assert!(got >= size, "size {size} got class {got}");
        let smaller = if c > 1 {
            b.class_size(c - 1).unwrap()
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
        let got = b.class_size(c).unwrap();
        assert!((got - size) * 4 <= got, "size {size} → {got}");
    }
}

#[test]
fn aligned_classes_honour_alignment() {
    for align in [8, 16, 64, 256, 4096, 32768, 1 << 19] {
        for size in [1, 24, 100, 1000, 5000, 70000] {
            let (b, c) = class_aligned(size, align).unwrap();
            let s = b.class_size(c).unwrap();
            assert!(s >= size && s % align == 0, "size {size} align {align} → {s}");
        }
    }
    assert!(class_aligned(8, 1 << 20).is_none());
}
