//! The benchmark programs run end to end (small parameters; not a benchmark).

use std::process::Command;

#[test]
fn demo_workers_free_each_others_blocks_and_leave_a_clean_empty_heap() {
    let ndjson = std::env::temp_dir().join(format!("cxlalloc-demo-test-{}.ndjson", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(["--processes", "3", "--threads", "2", "--blocks", "600", "--ndjson"])
        .arg(&ndjson)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("no inconsistencies"), "{stdout}");
    assert!(stdout.contains("demo: OK"), "{stdout}");
    assert!(stdout.contains("(cross-process)"), "workers did not report: {stdout}");
    let lines = std::fs::read_to_string(&ndjson).unwrap();
    let _ = std::fs::remove_file(&ndjson);
    let records: Vec<serde_json::Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), 4, "one line per worker plus the run: {lines}");
    let total = &records[3]["total"];
    assert_eq!(total["allocs"], 1800);
    assert_eq!(total["frees"], 1800);
    assert_eq!(total["sent"], total["remote_frees"]);
    assert!(total["remote_frees"].as_u64().unwrap() > 0);
    assert_eq!(records[3]["live_blocks"], 0);
}

#[test]
fn demo_refuses_a_single_process() {
    let out = Command::new(env!("CARGO_BIN_EXE_demo")).args(["--processes", "1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 2 processes"));
}

#[test]
fn micro_quick_prints_a_row_per_configuration_and_an_ndjson_line_per_allocator() {
    let ndjson = std::env::temp_dir().join(format!("cxlalloc-micro-test-{}.ndjson", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_micro"))
        .args(["--quick", "--sizes", "8,65536", "--threads", "1,2", "--ndjson"])
        .arg(&ndjson)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "micro failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("anon/mim") && stdout.contains("shm/sys"), "{stdout}");
    assert!(stdout.contains("geo-mean"), "{stdout}");
    let lines = std::fs::read_to_string(&ndjson).unwrap();
    let _ = std::fs::remove_file(&ndjson);
    let records: Vec<serde_json::Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), 2 * 2 * 4);
    for name in ["cxlalloc-anon", "cxlalloc-shm", "mimalloc", "system"] {
        assert_eq!(records.iter().filter(|r| r["allocator"] == name).count(), 4, "{name}");
    }
    assert!(records.iter().all(|r| r["mops"].as_f64().unwrap() > 0.0));
}

#[test]
fn micro_rejects_sizes_the_library_does_not_support() {
    let out = Command::new(env!("CARGO_BIN_EXE_micro")).args(["--quick", "--sizes", "1048576"]).output().unwrap();
    assert!(!out.status.success());
}
