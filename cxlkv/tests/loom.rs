//! loom models of cxlkv's detectable publish (`cxlkv::detect`, docs/design.md §16.3), run by
//! `script/loom.sh` (`RUSTFLAGS="--cfg loom"`). Each model drives the real `publish` and
//! `was_published`.
//!
//! A writer W publishes array 2 over array 1 and dies at a chosen point (before its CAS, or
//! right after it); its recovery, in the same model thread (a replacement starts only after the
//! death), must answer exactly whether W's CAS happened, while a second writer R concurrently
//! replaces whatever array it finds with array 3. A wrong "no" frees a published array (a
//! use-after-free for readers, a double free with R's retirement); a wrong "yes" leaks.
//!
//! | model                                               | thr | bound | time   |
//! | --------------------------------------------------- | --- | ----- | ------ |
//! | recovery_knows_whether_a_dead_writers_cas_happened  | 2   | none  | <0.1 s |
//! | a_replacer_marking_after_its_cas_is_caught (−)      | 2   | none  | <0.1 s |
//! | recovery_reading_the_mark_first_is_caught (−)       | 2   | none  | <0.1 s |
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Arrays 1, 2, 3 and their `seen` words (index = array id).
struct Table {
    bucket: AtomicU64,
    seen: [AtomicU64; 4],
}

/// Where W dies.
#[derive(Clone, Copy, Debug)]
enum Death {
    BeforeCas,
    AfterCas,
}

fn model(death: Death, replace: fn(&Table, u64, u64) -> bool, recover: fn(&Table, u64) -> bool) {
    loom::model(move || {
        let t = Arc::new(Table { bucket: AtomicU64::new(1), seen: Default::default() });
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                // R replaces whatever it finds (1 or 2) with 3, retrying once on a lost race.
                for _ in 0..2 {
                    let cur = t.bucket.load(Ordering::SeqCst);
                    if cur == 3 || replace(&t, cur, 3) {
                        break;
                    }
                }
            })
        };
        let won = match death {
            Death::BeforeCas => false,
            Death::AfterCas => replace(&t, 1, 2),
        };
        let answer = recover(&t, 2);
        assert_eq!(answer, won, "recovery's answer is wrong ({death:?})");
        r.join().unwrap();
    });
}

fn replace_real(t: &Table, old: u64, new: u64) -> bool {
    cxlkv::detect::publish(&t.bucket, old, Some(&t.seen[old as usize]), new)
}

fn recover_real(t: &Table, new: u64) -> bool {
    cxlkv::detect::was_published(&t.bucket, new, &t.seen[new as usize])
}

#[test]
fn recovery_knows_whether_a_dead_writers_cas_happened() {
    model(Death::BeforeCas, replace_real, recover_real);
    model(Death::AfterCas, replace_real, recover_real);
}

/// Broken: the replacer marks the array it replaced only after its CAS.
#[test]
#[should_panic(expected = "recovery's answer is wrong")]
fn a_replacer_marking_after_its_cas_is_caught() {
    model(
        Death::AfterCas,
        |t, old, new| {
            let won = t.bucket.compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst).is_ok();
            t.seen[old as usize].store(1, Ordering::SeqCst);
            won
        },
        recover_real,
    );
}

/// Broken: recovery reads the mark before the bucket.
#[test]
#[should_panic(expected = "recovery's answer is wrong")]
fn recovery_reading_the_mark_first_is_caught() {
    model(Death::AfterCas, replace_real, |t, new| {
        let seen = t.seen[new as usize].load(Ordering::SeqCst) != 0;
        seen || t.bucket.load(Ordering::SeqCst) == new
    });
}
