//! Model-based tests: random allocate / free / stale-free sequences over several logical threads
//! (thread slots driven from one OS thread), across both slab brackets, against a reference model
//! of live blocks. Frees of another slot's blocks take the remote path, so every slab state is
//! exercised. Run with `--features validate` to also check descriptor invariants inside every
//! operation.

use std::collections::BTreeMap;
use std::ptr::NonNull;

use cxlalloc::Bracket;
use cxlalloc::{Config, Heap, ThreadHandle};
use proptest::prelude::*;

const THREADS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    Alloc { thread: usize, size: usize },
    Free { thread: usize, pick: usize },
    StaleFree { thread: usize, pick: usize },
    Reattach { thread: usize },
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 1usize..=128,
        3 => 129usize..=1024,
        2 => 1025usize..=16384,
        1 => 16385usize..=(512 << 10),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let t = 0..THREADS;
    prop_oneof![
        10 => (t.clone(), size()).prop_map(|(thread, size)| Op::Alloc { thread, size }),
        8 => (t.clone(), any::<usize>()).prop_map(|(thread, pick)| Op::Free { thread, pick }),
        1 => (t.clone(), any::<usize>()).prop_map(|(thread, pick)| Op::StaleFree { thread, pick }),
        1 => t.prop_map(|thread| Op::Reattach { thread }),
    ]
}

struct Live {
    size: usize,
    fill: u8,
}

fn run(ops: Vec<Op>, config: Config) -> Result<(), TestCaseError> {
    let heap = Heap::anonymous(&config).unwrap();
    let mut threads: Vec<ThreadHandle> = (0..THREADS).map(|_| heap.attach().unwrap()).collect();
    let mut live: BTreeMap<usize, Live> = BTreeMap::new();
    let mut freed: Vec<usize> = Vec::new();
    let mut counter = 0u8;
    for op in ops {
        match op {
            Op::Alloc { thread, size } => {
                let p = match threads[thread].alloc(size) {
                    Ok(p) => p,
                    Err(cxlalloc::AllocError::OutOfMemory(_)) => continue,
                    Err(e) => return Err(TestCaseError::fail(format!("alloc {size}: {e}"))),
                };
                let addr = p.as_ptr() as usize;
                let usable = threads[thread].usable_size(p).unwrap();
                prop_assert!(usable >= size);
                if let Some((&a, l)) = live.range(..addr + size).next_back() {
                    prop_assert!(a + l.size <= addr, "block {addr:#x}+{size} overlaps {a:#x}+{}", l.size);
                }
                counter = counter.wrapping_add(1);
                unsafe { p.as_ptr().write_bytes(counter, size) };
                live.insert(addr, Live { size, fill: counter });
                freed.retain(|&f| f != addr);
            }
            Op::Free { thread, pick } => {
                if live.is_empty() {
                    continue;
                }
                let addr = *live.keys().nth(pick % live.len()).unwrap();
                let l = live.remove(&addr).unwrap();
                let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, l.size) };
                prop_assert!(bytes.iter().all(|&b| b == l.fill), "block {addr:#x} was overwritten");
                threads[thread]
                    .free(NonNull::new(addr as *mut u8).unwrap())
                    .map_err(|e| TestCaseError::fail(format!("free: {e}")))?;
                freed.push(addr);
            }
            Op::StaleFree { thread, pick } => {
                if freed.is_empty() {
                    continue;
                }
                let addr = freed[pick % freed.len()];
                if live.contains_key(&addr) {
                    continue;
                }
                let r = threads[thread].free(NonNull::new(addr as *mut u8).unwrap());
                prop_assert!(r.is_err(), "stale free of {addr:#x} was accepted");
            }
            Op::Reattach { thread } => {
                threads[thread] = heap.attach().unwrap();
            }
        }
    }
    let report = heap.check();
    prop_assert!(report.is_clean(), "{report}");
    let census_live: u64 = Bracket::ALL.iter().map(|&b| report.bracket(b).live_blocks()).sum();
    prop_assert_eq!(census_live, live.len() as u64, "census disagrees with the model");
    for &addr in live.keys() {
        threads[0].free(NonNull::new(addr as *mut u8).unwrap()).unwrap();
    }
    let report = heap.check();
    prop_assert!(report.is_clean(), "{report}");
    prop_assert_eq!(Bracket::ALL.iter().map(|&b| report.bracket(b).live_blocks()).sum::<u64>(), 0);
    Ok(())
}

fn soak_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

proptest! {
    // PROPTEST_CASES=n runs a longer soak.
    #![proptest_config(ProptestConfig { cases: soak_cases(48), ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_match_the_model(ops in proptest::collection::vec(op(), 1..400)) {
        run(ops, Config { cache_local: 2, ..Config::with_capacity(64 << 20) })?;
    }

    #[test]
    fn random_sequences_match_the_model_with_no_slab_cache(ops in proptest::collection::vec(op(), 1..400)) {
        run(ops, Config { cache_local: 0, small_batch: 1, ..Config::with_capacity(64 << 20) })?;
    }

    #[test]
    fn random_sequences_match_the_model_in_a_tiny_heap(ops in proptest::collection::vec(op(), 1..400)) {
        run(ops, Config { small_capacity: 4 << 15, large_capacity: 4 << 19, cache_local: 1, ..Config::default() })?;
    }
}
