//! The `crash` benchmark through the real harness binary: worker processes killed with SIGKILL
//! under load and replaced (small parameters; not a benchmark, and no timing is asserted
//! beyond the bound that makes a wedged allocator a reported time-out instead of a hung test).

mod common;

use std::time::{Duration, Instant};

use common::{text, Scratch};
use cxlalloc_bench::allocator::boost;
use cxlalloc_bench::harness::record::Record;
use serde_json::Value;

/// The run-wide numbers of `records`' crash runs, one per run: (label, params, extra of
/// process 0, lines in the run).
fn runs(records: &[Record]) -> Vec<(String, String, serde_json::Map<String, Value>, usize)> {
    let heads: Vec<&Record> = records.iter().filter(|r| r.process == 0).collect();
    heads
        .iter()
        .map(|h| {
            let lines = records.iter().filter(|r| r.run_id == h.run_id).count();
            (h.allocator_label.clone(), serde_json::to_string(&h.params).unwrap(), h.extra.clone(), lines)
        })
        .collect()
}

#[test]
fn cxlalloc_survives_kills_with_no_inconsistency_and_no_leak() {
    let s = Scratch::new("crash", "cxlalloc");
    let (o, records) = s.run(
        r#"
        [run]
        processes = 3
        threads = 3
        allocators = ["cxlalloc"]
        timeout_s = 120
        [[benchmark]]
        name = "crash"
        kills = 10
        warmup_ms = 100
        duration_ms = 1000
        settle_ms = 200
        replace = ["fresh", "adopt"]
        slots = 64
        "#,
    );
    assert!(o.status.success(), "{}", text(&o));
    let runs = runs(&records);
    assert_eq!(runs.len(), 2, "{}", text(&o));
    for (label, params, e, lines) in &runs {
        let what = format!("{label} {params}: {e:?}");
        assert_eq!(*lines, 3, "one line per process index: {what}");
        assert_eq!(e["outcome"], "clean", "{what}");
        assert_eq!(e["kills"], 10, "{what}");
        assert_eq!(e["inconsistencies"], 0, "{what}");
        assert_eq!(e["leaked_blocks"], 0, "{what}");
        assert_eq!(e["timed_out"], false, "{what}");
        assert!(e["recoveries"].as_u64().unwrap() >= 1, "no slot was adopted: {what}");
        assert!(e["recovery_ms_max"].as_f64().is_some(), "{what}");
        assert!(e["longest_stall_ms"].as_f64().is_some(), "{what}");
        assert!(e["blocks_named_at_end"].as_u64().unwrap() > 0, "the table was empty at the end: {what}");
    }
    for r in &records {
        assert_eq!(r.heap_check["problems"], 0);
        assert_eq!(r.heap_check["live_blocks"], 0);
        assert!(r.ops > 0 && r.verified > 0, "process {} did nothing", r.process);
        assert!(r.extra["timeline"].as_array().is_some_and(|t| !t.is_empty()));
    }
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("crash run") && table.contains("clean"), "no crash table: {table}");
    assert_eq!(s.leftovers(), 0, "run directories left behind");
}

#[test]
fn boost_wedged_by_a_killed_mutex_holder_is_a_time_out_not_a_hang() {
    if !boost::AVAILABLE {
        eprintln!("SKIPPED: {}", boost::UNAVAILABLE);
        return;
    }
    let s = Scratch::new("crash", "boost");
    let started = Instant::now();
    // Survivors and replacements block forever on the segment's mutex once a worker dies
    // holding it; enough kills that one lands there (the run stops at the first).
    let (o, records) = s.run(
        r#"
        [run]
        processes = 3
        threads = 3
        allocators = [{ name = "boost", settings = { segment_mib = 64 } }]
        timeout_s = 120
        [[benchmark]]
        name = "crash"
        kills = 200
        warmup_ms = 100
        duration_ms = 4000
        settle_ms = 200
        timeout_ms = 1000
        slots = 64
        "#,
    );
    assert!(o.status.success(), "a non-recoverable allocator's outcome is recorded, not failed: {}", text(&o));
    assert!(started.elapsed() < Duration::from_secs(60), "the wedge was not bounded");
    let runs = runs(&records);
    assert_eq!(runs.len(), 1, "{}", text(&o));
    let e = &runs[0].2;
    assert_eq!(e["outcome"], "time-out", "{e:?}");
    assert_eq!(e["timed_out"], true);
    assert_eq!(e["stalled"], true, "{e:?}");
    assert!(e["longest_stall_ms"].as_f64().unwrap() > e["stall_threshold_ms"].as_f64().unwrap(), "{e:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("time-out"), "{}", text(&o));
    assert_eq!(s.leftovers(), 0, "run directories left behind");
}
