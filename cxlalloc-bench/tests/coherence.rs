//! cxlalloc's coherence models through the harness end to end: threadtest (mostly local frees)
//! and xmalloc (every free remote, across processes at P = 2) with coherence `limited` and
//! `none`, the latter against the software mCAS device the coordinator runs for the run (small
//! parameters; not a measurement).

mod common;

use common::{text, Scratch};

const MODELS: &str = r#"
[run]
processes = [1, 2]
threads = [2]
allocators = [
  { name = "cxlalloc", settings = { coherence = "limited", capacity_mib = 256, thread_slots = 8 } },
  { name = "cxlalloc", settings = { coherence = "none", capacity_mib = 256, thread_slots = 8 } },
]
seed = 1
timeout_s = 120

[[benchmark]]
name = "threadtest"
size = 64
total_pairs = 20_000

[[benchmark]]
name = "xmalloc"
containers = 40
"#;

#[test]
fn threadtest_and_xmalloc_run_clean_in_the_limited_and_no_hwcc_models() {
    let s = Scratch::new("coherence", "models");
    let (o, records) = s.run(MODELS);
    assert!(o.status.success(), "{}", text(&o));
    // Two models x two benchmarks x (P=1: one line, P=2: two lines).
    assert_eq!(records.len(), 2 * 2 * 3, "{}", text(&o));
    for r in &records {
        let model = r.allocator_settings["coherence"].as_str().unwrap();
        let what = format!("{} {model} P={}", r.benchmark, r.processes);
        assert!(r.ops > 0 && r.throughput > 0.0, "{what}");
        assert_eq!(r.heap_check["problems"], 0, "{what}: {}", r.heap_check);
        assert_eq!(r.heap_check["live_blocks"], 0, "{what}: {}", r.heap_check);
        assert_eq!(r.allocator_stats["coherence"], model, "{what}: the heap's own model is recorded");
        assert!(r.memory.end.hwcc_bytes > 0, "{what}: the region table found no HWcc memory");
        let device = &r.allocator_stats["mcas_device"];
        if model == "none" {
            // Every HWcc CAS of the run went through the device the coordinator ran.
            assert!(device["requests"].as_u64().unwrap() > 0, "{what}: {device}");
            assert_eq!(device["errors"], 0, "{what}: {device}");
            assert_eq!(device["latency_ns"], 2300, "{what}: the paper's latency by default");
        } else {
            assert!(device.is_null(), "{what}: no device outside the no-HWcc model");
        }
    }
    // xmalloc frees every object remotely, and every consumer verified what it freed.
    for r in records.iter().filter(|r| r.benchmark == "xmalloc") {
        assert!(r.allocator_stats["remote_frees"].as_u64().unwrap() > 0, "{}", r.allocator_stats);
    }
    let verified: u64 = records.iter().filter(|r| r.benchmark == "xmalloc").map(|r| r.verified).sum();
    assert!(verified > 0, "xmalloc verified nothing");
    assert_eq!(s.leftovers(), 0, "run directories (heaps, windows) left behind");
}

#[test]
fn a_no_hwcc_run_with_an_anonymous_heap_is_refused_before_anything_runs() {
    let s = Scratch::new("coherence", "anon");
    let (o, records) = s.run(
        r#"
        [run]
        allocators = [{ name = "cxlalloc", settings = { coherence = "none", backend = "anon" } }]
        threads = 2
        [[benchmark]]
        name = "threadtest"
        total_pairs = 1000
        "#,
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("shm"), "the reason is not shown: {}", text(&o));
    assert!(records.is_empty());
}
