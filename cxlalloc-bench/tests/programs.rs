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
