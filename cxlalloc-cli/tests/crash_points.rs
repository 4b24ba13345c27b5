//! `cxlalloc check` and `cxlalloc recover` on a slot killed at a white-box crash point
//! (`cxlalloc::internal::crash`): what the CLI reports about the interrupted step and what
//! `recover` then does. The crash points themselves are covered by the library's
//! `tests/crash_points.rs`.
//!
//! Needs `--features crash-points` (see `script/test.sh`).

// The library's process helpers (fork, heap names, pipes), shared rather than copied.
#[path = "../../cxlalloc/tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};
use std::sync::atomic::Ordering;

use common::{fork_child, serial, HeapName};
use cxlalloc::internal::crash;
use cxlalloc::{Config, Heap};

fn cxlalloc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cxlalloc")).args(args).output().expect("run cxlalloc")
}

/// Forks a child that arms `point`, opens heap `name` and allocates a block into root 1
/// detectably; returns whether it died at the point.
fn alloc_into_root_1_killed_at(name: &str, point: &str) -> bool {
    fork_child(point, || {
        crash::arm(point);
        let heap = Heap::open(name).map_err(|e| e.to_string())?;
        let t = heap.attach().map_err(|e| e.to_string())?;
        let word = heap.root(1).ok_or("no root 1")?;
        t.alloc_into(64, word).map(|_| ()).map_err(|e| e.to_string())
    })
    .killed_at_point(point)
}

/// A slot killed between taking a block and storing its offset: `check` names the dead holder,
/// the interrupted detectable allocation and what recovery will do with it, without changing
/// the word; `recover` then stores the block, and the heap checks clean.
#[test]
fn check_describes_an_interrupted_detectable_allocation_and_recover_completes_it() {
    let _serial = serial();
    let name = HeapName::new("cli-crash-AllocTaken");
    let heap = Heap::create(name.as_str(), &Config { thread_slots: 4, ..Config::with_capacity(16 << 20) }).unwrap();
    assert!(alloc_into_root_1_killed_at(name.as_str(), "AllocTaken"), "AllocTaken not reached");
    let check = cxlalloc(&["check", "--json", name.as_str()]);
    let v: serde_json::Value = serde_json::from_slice(&check.stdout).expect("check --json");
    let dead = &v["dead_holders"][0];
    let steps: Vec<&str> = dead["steps"].as_array().expect("steps").iter().filter_map(|s| s.as_str()).collect();
    let interrupted = steps.iter().find(|s| s.starts_with("interrupted: a detectable allocation of the block"));
    assert!(
        interrupted.is_some_and(|s| s.contains("store the block's offset into the word if the block was taken")),
        "{v}"
    );
    assert_eq!(heap.root(1).map(|w| w.load(Ordering::Acquire)), Some(0), "check changed the word");
    let recover = cxlalloc(&["recover", name.as_str()]);
    assert!(recover.status.success(), "{recover:?}");
    let said = String::from_utf8_lossy(&recover.stdout);
    assert!(said.contains("interrupted: a detectable allocation; the block's offset stored"), "{said}");
    assert_ne!(heap.root(1).map(|w| w.load(Ordering::Acquire)), Some(0), "recover did not store the block");
    let after = cxlalloc(&["check", name.as_str()]);
    assert_eq!(after.status.code(), Some(0), "{}", String::from_utf8_lossy(&after.stdout));
    let owner = heap.attach().unwrap();
    owner.free_from(heap.root(1).expect("root 1")).expect("free the recovered block");
    drop(owner);
    assert_eq!(heap.check().live_blocks(), 0, "{}", heap.check());
}
