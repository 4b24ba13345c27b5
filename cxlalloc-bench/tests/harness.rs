//! The harness end to end: the driver, coordinator and worker processes of the real binary
//! (small parameters; not a measurement).

mod common;

use std::path::Path;

use common::{text, Scratch};
use cxlalloc_bench::harness::driver::read_records;

const THREADTEST: &str = r#"
[run]
processes = [1, 2]
threads = [2]
allocators = ["cxlalloc", "mimalloc"]
repeats = 2
timeout_s = 60

[[benchmark]]
name = "threadtest"
size = [8, 1024]
total_pairs = 20000
"#;

#[test]
fn a_workload_runs_every_configuration_and_writes_one_line_per_process() {
    let s = Scratch::new("harness", "lines");
    let o = s.command(&s.workload(THREADTEST), &[]);
    assert!(o.status.success(), "{}", text(&o));
    // cxlalloc: P=1 and P=2; mimalloc: P=1 (P=2 skipped); two sizes, two repeats.
    let records = read_records(&s.out()).unwrap();
    assert_eq!(records.len(), (1 + 2 + 1) * 2 * 2, "{}", text(&o));
    for r in &records {
        assert_eq!(r.schema, 1);
        assert_eq!(r.per_thread.len(), 2 / r.processes);
        assert!(r.throughput > 0.0 && r.ops > 0);
        assert!(r.memory.end.total_bytes > 0 && r.memory.samples >= 1);
        if r.allocator == "cxlalloc" {
            assert_eq!(r.heap_check["problems"], 0);
            assert_eq!(r.heap_check["live_blocks"], 0);
            assert!(r.memory.end.hwcc_bytes > 0, "the region table found no HWcc memory");
        }
    }
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("/ mimalloc") && out.contains("threadtest size=8"), "no results table: {out}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("process-local"), "skips are not reported");
    assert_eq!(s.leftovers(), 0, "run directories left behind");
}

#[test]
fn resume_runs_only_what_is_missing() {
    let s = Scratch::new("harness", "resume");
    let w = s.workload(THREADTEST);
    assert!(s.command(&w, &["--only", "mimalloc"]).status.success());
    let first = read_records(&s.out()).unwrap().len();
    let o = s.command(&w, &["--resume"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("{first} already in")), "{}", text(&o));
    let all = read_records(&s.out()).unwrap();
    assert_eq!(all.len(), 16);
    let again = s.command(&w, &["--resume"]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("0 runs now"), "{}", text(&again));
    assert_eq!(read_records(&s.out()).unwrap().len(), 16);
}

#[test]
fn a_failing_run_is_reported_and_the_others_still_run() {
    let s = Scratch::new("harness", "fail");
    // 1 MiB per bracket cannot hold 64 blocks of 64 KiB at once: the worker fails with
    // OutOfMemory; mimalloc still runs.
    let w = s.workload(
        r#"
        [run]
        allocators = [{ name = "cxlalloc", settings = { capacity_mib = 1 } }, "mimalloc"]
        threads = 1
        timeout_s = 60
        [[benchmark]]
        name = "threadtest"
        size = 65536
        total_pairs = 640
        "#,
    );
    let o = s.command(&w, &[]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("FAIL") && t.contains("1 run(s) failed"), "{t}");
    assert!(t.contains("large heap exhausted"), "the cause is not shown: {t}");
    let records = read_records(&s.out()).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].allocator, "mimalloc");
    assert_eq!(s.leftovers(), 0, "run directories left behind");
}

#[test]
fn a_run_past_its_time_limit_is_killed_and_reported() {
    let s = Scratch::new("harness", "timeout");
    let w = s.workload(
        r#"
        [run]
        allocators = ["system"]
        threads = 1
        timeout_s = 1
        [[benchmark]]
        name = "threadtest"
        size = 64
        total_pairs = 100_000_000_000
        "#,
    );
    let started = std::time::Instant::now();
    let o = s.command(&w, &[]);
    assert!(!o.status.success());
    assert!(text(&o).contains("limit"), "{}", text(&o));
    assert!(started.elapsed().as_secs() < 30, "the time limit was not enforced");
    assert_eq!(s.leftovers(), 0, "the killed run's directory was left behind");
}

#[test]
fn a_bad_parameter_fails_the_workload_before_anything_runs() {
    let s = Scratch::new("harness", "badparam");
    let w = s.workload("[run]\nallocators=['system']\n[[benchmark]]\nname='threadtest'\nsise=8\n");
    let o = s.command(&w, &[]);
    assert!(!o.status.success());
    assert!(text(&o).contains("sise"), "{}", text(&o));
    assert!(!s.out().exists(), "something ran");
}

#[test]
fn dry_run_lists_runs_without_running() {
    let s = Scratch::new("harness", "dry");
    let o = s.command(&s.workload(THREADTEST), &["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    // cxlalloc at P=1 and P=2, mimalloc at P=1; two sizes; two repeats.
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with("run ")).count(), 12);
    assert!(!s.out().exists());
}

#[test]
fn every_shipped_workload_parses_and_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        // A `[kvserver]` workload is the server comparison, which script/run.sh hands to
        // script/kvserver.sh (tested by the kvserver step), not to this harness.
        if std::fs::read_to_string(&path).unwrap().lines().any(|l| l == "[kvserver]") {
            continue;
        }
        let s = Scratch::new("harness", &format!("shipped-{seen}"));
        let o = s.command(&path, &["--dry-run"]);
        assert!(o.status.success(), "{}: {}", path.display(), text(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("run "), "{} runs nothing", path.display());
        seen += 1;
    }
    assert!(seen >= 5, "mini, main, process, huge and ablation are all there");
}

/// Issue 19: a single process's sampled peak PSS never exceeds its peak RSS. A growing heap's
/// data mapping is printed more than once by a torn smaps read; the harness once summed every
/// print (MC-37 at two threads: a peak PSS of 1.6–3.6 GiB against a peak RSS of 0.7–1.25 GiB).
#[test]
fn a_single_process_peak_pss_never_exceeds_its_peak_rss() {
    let s = Scratch::new("harness", "peak");
    let w = s.workload(
        r#"
[run]
processes = [1]
threads = [2]
allocators = ["cxlalloc"]
repeats = 2
timeout_s = 120

[[benchmark]]
name = "memcached"
cluster = ["MC-37"]
requests = 60000
"#,
    );
    let o = s.command(&w, &[]);
    assert!(o.status.success(), "{}", text(&o));
    for r in read_records(&s.out()).unwrap() {
        let (pss, rss) = (r.memory.peak.total_bytes, r.memory.peak_rss_bytes);
        assert!(pss <= rss, "peak PSS {pss} B above peak RSS {rss} B ({} samples)", r.memory.samples);
    }
}

/// Every thread's record carries the CPU time of its own timed section: more than nothing for a
/// thread that did work, and never more than the section's wall-clock (one thread runs on at
/// most one core). On a shared machine this, not wall-clock or the process's rusage (which
/// also counts untimed set-up and tear-down), is what compares two allocators (docs/design.md
/// §12.4, §15.1).
#[test]
fn each_thread_records_the_cpu_time_of_its_timed_section() {
    let s = Scratch::new("harness", "cpu");
    let w = s.workload(
        r#"
[run]
processes = [1, 2]
threads = [2]
allocators = ["cxlalloc", "mimalloc"]
repeats = 1
timeout_s = 120

[[benchmark]]
name = "ycsb"
workload = ["load"]
records = 20000
"#,
    );
    let o = s.command(&w, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let records = read_records(&s.out()).unwrap();
    assert_eq!(records.len(), 1 + 2 + 1, "{}", text(&o));
    for r in records {
        for t in &r.per_thread {
            let cpu = t.cpu_user_s + t.cpu_system_s;
            assert!(t.cpu_user_s >= 0.0 && t.cpu_system_s >= 0.0, "negative CPU time: {t:?}");
            assert!(cpu > 0.0, "{} thread {}: no CPU time recorded ({t:?})", r.allocator, t.thread);
            // getrusage has microsecond fields and a tick's granularity on some kernels.
            assert!(cpu <= t.secs + 0.02, "{} thread {}: CPU {cpu} s above wall {} s", r.allocator, t.thread, t.secs);
        }
    }
}

/// A record's end-of-run HWcc PSS comes with its split by region, which adds up to it; and a
/// KV run of one host maps one page of the shared region in all (docs/design.md §9.1, "HWcc
/// bytes": the fixed header, host entry 0 and the first slots' records share a page; at P = 2
/// the two processes' PSS of it add up to the page).
#[test]
fn the_hwcc_pss_is_split_by_region_and_a_kv_run_maps_one_shared_page() {
    let s = Scratch::new("harness", "hwcc");
    let w = s.workload(
        r#"
[run]
processes = [1, 2]
threads = [2]
allocators = ["cxlalloc"]
repeats = 1
timeout_s = 120

[[benchmark]]
name = "ycsb"
workload = ["a"]
records = 20000
ops = 40000
"#,
    );
    let o = s.command(&w, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let records = read_records(&s.out()).unwrap();
    assert_eq!(records.len(), 1 + 2, "{}", text(&o));
    let mut shared_per_run = std::collections::BTreeMap::<String, u64>::new();
    for r in &records {
        let h = r.memory.end_hwcc;
        assert_eq!(h.shared_bytes + h.claims_bytes + h.remote_bytes + h.window_bytes, r.memory.end.hwcc_bytes, "{h:?}");
        assert!(h.remote_bytes > 0, "no remote counter page resident: {h:?}");
        *shared_per_run.entry(r.run_id.clone()).or_default() += h.shared_bytes;
    }
    for (run, shared) in shared_per_run {
        // PSS rounds each process's share down to whole kilobytes.
        assert!((4094..=4096).contains(&shared), "run {run}: {shared} B of shared-region PSS, not one page");
    }
}

/// Huge blocks on and off a huge-page run root (docs/design.md §12.1): cxlalloc and Boost, whose
/// memory is files under the run root, at both; mimalloc only once (anonymous memory: the root
/// changes nothing for it).
const HUGE_PAGES: &str = r#"
[run]
processes = [1]
threads = [1]
allocators = ["cxlalloc", "mimalloc", { name = "boost", settings = { segment_mib = 64 } }]
huge_pages = [false, true]
timeout_s = 120

[[benchmark]]
name = "huge"
size_mib = 16
objects = 4
"#;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The mount points of this process's mount table that lie under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
        .filter(|p| Path::new(p).starts_with(dir))
        .collect()
}

#[test]
fn a_huge_pages_run_goes_to_a_huge_tmpfs_it_records_and_unmounts_after() {
    let s = Scratch::new("harness", "hugepages");
    let mount_parent = s.0.join("mnt");
    std::fs::create_dir_all(&mount_parent).unwrap();
    let parent = mount_parent.to_str().unwrap();
    let o = s.command(&s.workload(HUGE_PAGES), &["--huge-mount", parent, "--huge-size", "512m"]);
    assert!(o.status.success(), "{}", text(&o));
    let records = read_records(&s.out()).unwrap();
    // cxlalloc and Boost on each root, mimalloc once (skipped on the huge root, saying why).
    assert_eq!(records.len(), 5, "{}", text(&o));
    assert!(text(&o).contains("huge_pages changes nothing"), "{}", text(&o));
    let runs = s.0.join("runs");
    for r in &records {
        let asked = r.backing.requested;
        assert!(!(asked && r.allocator == "mimalloc"), "mimalloc ran on the huge root");
        if !asked {
            assert_eq!(r.backing.run_root, runs.display().to_string());
            assert_eq!((r.backing.fs.as_str(), r.backing.huge.as_str()), ("tmpfs", "never"), "{:?}", r.backing);
            assert!(!r.backing.huge_pages);
            assert_eq!(r.memory.peak.region_huge_bytes + r.memory.peak.other_huge_bytes, 0, "{:?}", r.memory);
        } else if is_root() {
            assert!(Path::new(&r.backing.run_root).starts_with(&mount_parent), "{:?}", r.backing);
            assert_eq!(r.backing.mount_point, r.backing.run_root, "{:?}", r.backing);
            // huge=advise: the huge blocks, advised MADV_HUGEPAGE, are mapped by 2 MiB pages;
            // the heap's region files stay on 4 KiB pages (docs/design.md §7.6). A
            // huge=within_size mount gives the region files 2 MiB pages too, and without the
            // advice the blocks get none.
            assert_eq!(r.memory.peak.region_huge_bytes, 0, "{} region files on 2 MiB pages", r.allocator);
            // cxlalloc advises its huge blocks, Boost its segment (as mimalloc its arenas).
            assert!(
                r.memory.peak.other_huge_bytes >= 16 << 20,
                "{}: no 16 MiB block on 2 MiB pages: {:?}",
                r.allocator,
                r.memory
            );
            assert_eq!((r.backing.huge.as_str(), r.backing.huge_pages), ("advise", true), "{:?}", r.backing);
            assert!(r.backing.fallback.is_empty(), "{:?}", r.backing);
        } else {
            // Only root may mount: the fallback, said in the record.
            assert!(!r.backing.huge_pages && !r.backing.fallback.is_empty(), "{:?}", r.backing);
        }
    }
    assert_eq!(records.iter().filter(|r| r.backing.requested).count(), 2, "cxlalloc and Boost on the huge root");
    let out = String::from_utf8_lossy(&o.stdout);
    if is_root() {
        assert!(out.lines().any(|l| l.contains("huge=advise") && l.contains("cxlalloc")), "{out}");
    }
    assert_eq!(mounts_under(&s.0), Vec::<String>::new(), "the huge-page tmpfs is still mounted");
    assert_eq!(std::fs::read_dir(&mount_parent).unwrap().count(), 0, "its mount point is left behind");
    assert_eq!(s.leftovers(), 0, "run directories left behind");
}

#[test]
fn a_huge_tmpfs_left_by_a_dead_driver_is_unmounted_by_the_next_drive() {
    if !is_root() {
        eprintln!("SKIPPED: mounting a tmpfs needs root");
        return;
    }
    let s = Scratch::new("harness", "hugestale");
    let mount_parent = s.0.join("mnt");
    // A driver killed before it could unmount: its process is gone, its mount is not.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    dead.wait().unwrap();
    let stale = mount_parent.join(format!("cxlbench-huge.{pid}"));
    std::fs::create_dir_all(&stale).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m,huge=advise", "cxlbench-huge"])
        .arg(&stale)
        .status()
        .unwrap();
    assert!(mounted.success());
    assert_eq!(mounts_under(&s.0), vec![stale.display().to_string()]);
    let o = s.command(
        &s.workload(HUGE_PAGES),
        &["--huge-mount", mount_parent.to_str().unwrap(), "--huge-size", "512m", "--only", "cxlalloc"],
    );
    let left = mounts_under(&s.0);
    // Never leave a mount behind in the scratch directory, whatever the drive did.
    let _ = std::process::Command::new("umount").arg("--lazy").arg(&stale).stderr(std::process::Stdio::null()).status();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(left, Vec::<String>::new(), "the dead driver's tmpfs is still mounted");
    assert_eq!(std::fs::read_dir(&mount_parent).unwrap().count(), 0, "its mount point is left behind");
}

#[test]
fn a_huge_pages_run_that_cannot_mount_stays_on_the_run_root_and_says_why() {
    let s = Scratch::new("harness", "hugefallback");
    // Nothing can be created under /proc: the mount point cannot be made, as on a machine where
    // the harness may not mount.
    let o = s.command(&s.workload(HUGE_PAGES), &["--huge-mount", "/proc/cxlbench-none", "--only", "cxlalloc"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("cannot mount a huge-page tmpfs"), "{}", text(&o));
    let records = read_records(&s.out()).unwrap();
    assert_eq!(records.len(), 2, "{}", text(&o));
    let asked = records.iter().find(|r| r.backing.requested).expect("the huge_pages run");
    assert_eq!(asked.backing.run_root, s.0.join("runs").display().to_string());
    assert!(!asked.backing.huge_pages && asked.backing.huge == "never", "{:?}", asked.backing);
    assert!(asked.backing.fallback.contains("/proc/cxlbench-none"), "{:?}", asked.backing);
    assert!(String::from_utf8_lossy(&o.stdout).contains("no huge pages (fallback)"), "{}", text(&o));
}

#[test]
fn the_recorded_backing_is_the_mount_of_the_run_root() {
    if !is_root() {
        eprintln!("SKIPPED: mounting a tmpfs needs root");
        return;
    }
    let s = Scratch::new("harness", "backing");
    let root = s.0.join("runs");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256m,huge=advise", "cxlbench-test"])
        .arg(&root)
        .status()
        .unwrap();
    assert!(mounted.success());
    let o = s.command(
        &s.workload(
            "[run]\nallocators=['cxlalloc']\ntimeout_s=60\n[[benchmark]]\nname='huge'\nsize_mib=4\nobjects=2\n",
        ),
        &[],
    );
    let records = read_records(&s.out());
    let unmounted = std::process::Command::new("umount").arg(&root).status().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(unmounted.success());
    let records = records.unwrap();
    assert_eq!(records.len(), 1);
    let b = &records[0].backing;
    assert_eq!((b.mount_point.as_str(), b.fs.as_str(), b.huge.as_str()), (root.to_str().unwrap(), "tmpfs", "advise"));
    assert!(b.huge_pages && !b.requested && b.fallback.is_empty(), "{b:?}");
}
