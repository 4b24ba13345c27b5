//! `libcxlalloc_preload.so` under real processes: `tests/c/workout.c`, a C program that knows
//! nothing of cxlalloc, compiled with the system's `cc` and run with the library preloaded
//! (docs/design.md §17). The Debian programs (redis, memcached, python3, sqlite3, shell
//! pipelines) run in `script/preload.sh`. Not a benchmark.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The library cargo built for this test: next to it (`target/<profile>/deps/`; the rlib
/// crate type makes cargo build the cdylib for the tests too).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let lib = exe.parent().expect("target directory").join("libcxlalloc_preload.so");
    assert!(lib.exists(), "{} is missing: cargo builds it with this test", lib.display());
    lib
}

/// The workout, compiled once per test run.
fn workout() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("workout");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/workout.c");
        let status = Command::new("cc")
            .args(["-O2", "-Wall", "-pthread", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("run cc (package build-essential)");
        assert!(status.success(), "cc failed on {}", src.display());
        out
    })
}

/// Runs the workout with `args` under the library, with `env` on top of a clean `CXLALLOC_*`
/// environment and the report at exit turned on.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(workout());
    cmd.args(args).env("LD_PRELOAD", library()).env("CXLALLOC_VERBOSE", "1");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("CXLALLOC_") && k != "CXLALLOC_VERBOSE") {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the workout")
}

/// Asserts the run passed: exit 0, `ok MODE` on stdout, and every process's report (one line
/// per process that exited normally) says the heap checked clean.
fn passes(out: &Output, mode: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "workout {mode}: {}\nstdout: {stdout}\nstderr: {stderr}", out.status);
    assert!(stdout.contains(&format!("ok {mode}")), "workout {mode} printed {stdout:?}");
    let reports: Vec<&str> = stderr.lines().filter(|l| l.starts_with("cxlalloc:")).collect();
    assert!(!reports.is_empty(), "no report at exit: {stderr}");
    for r in &reports {
        assert!(r.ends_with("check clean"), "{r}");
    }
    stderr
}

#[test]
fn every_entry_point_follows_the_c_library_contract() {
    passes(&run(&["api"], &[]), "api");
}

#[test]
fn pointers_no_allocator_handed_out_are_left_alone_and_counted() {
    let err = passes(&run(&["api"], &[]), "api");
    // The workout frees a static array and an mmap'd page once each.
    assert!(err.contains(" 2 foreign frees ignored"), "{err}");
}

#[test]
fn more_threads_than_cores_allocate_and_free_across_threads_with_bytes_intact() {
    passes(&run(&["threads", "24", "1500"], &[]), "threads");
}

#[test]
fn threads_beyond_the_slots_share_the_spare_slot_and_lose_no_free() {
    let err = passes(&run(&["threads", "12", "1000"], &[("CXLALLOC_SLOTS", "3")]), "threads");
    assert!(err.contains(" 0 leaked"), "{err}");
}

#[test]
fn forked_children_own_a_copy_of_the_heap_huge_blocks_included() {
    let err = passes(&run(&["fork", "8"], &[]), "fork");
    // The parent and its eight children each report.
    assert_eq!(err.lines().filter(|l| l.starts_with("cxlalloc: heap anonymous")).count(), 9, "{err}");
}

#[test]
fn an_exhausted_heap_gives_null_with_enomem_and_serves_again_after_frees() {
    passes(&run(&["exhaust"], &[("CXLALLOC_CAPACITY", "4M")]), "exhaust");
}

#[test]
fn a_shared_heap_outlives_the_process_unless_unlink_is_asked() {
    let name = format!("preload-test-{}", std::process::id());
    let dir = PathBuf::from(format!("/dev/shm/cxlalloc.{name}"));
    let err = passes(&run(&["api"], &[("CXLALLOC_HEAP", &name)]), "api");
    assert!(err.contains(&format!("cxlalloc: heap {}", dir.display())), "{err}");
    assert!(dir.exists(), "the shared heap should stay for other processes");
    // Another process opens it and finds it consistent.
    let heap = cxlalloc::Heap::open(&name).expect("open the shared heap");
    assert!(heap.check().is_clean());
    drop(heap);
    passes(&run(&["api"], &[("CXLALLOC_HEAP", &name), ("CXLALLOC_UNLINK", "1")]), "api");
    assert!(!dir.exists(), "CXLALLOC_UNLINK=1 removes the heap at exit");
}

#[test]
fn a_malformed_variable_is_named_and_the_program_runs_without_the_heap() {
    let out = run(&["api"], &[("CXLALLOC_CAPACITY", "lots")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("cxlalloc: CXLALLOC_CAPACITY=\"lots\" is not a size"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok api"));
}

#[test]
fn the_library_exports_mallocs_interface_and_no_other_symbol() {
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(library()).output().expect("run nm (binutils)");
    assert!(out.status.success(), "nm: {}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect();
    names.sort();
    let mut want = [
        "aligned_alloc",
        "calloc",
        "cfree",
        "free",
        "malloc",
        "malloc_usable_size",
        "memalign",
        "posix_memalign",
        "pvalloc",
        "realloc",
        "reallocarray",
        "valloc",
    ];
    want.sort();
    assert_eq!(names, want, "exported dynamic symbols");
}

#[test]
fn a_private_heap_serves_huge_requests_with_and_without_a_huge_heap() {
    // `none` needs a named heap and an mCAS daemon; it turns the huge heap off as `limited`
    // does, which is what sends huge requests elsewhere.
    for model in ["full", "limited"] {
        let err = passes(&run(&["huge"], &[("CXLALLOC_COHERENCE", model)]), "huge");
        assert!(err.contains("cxlalloc: heap anonymous"), "{model}: {err}");
    }
}

#[test]
fn a_shared_heap_without_a_huge_heap_serves_huge_requests_from_process_memory() {
    let name = format!("preload-huge-{}", std::process::id());
    let env = [("CXLALLOC_HEAP", name.as_str()), ("CXLALLOC_COHERENCE", "limited"), ("CXLALLOC_UNLINK", "1")];
    let err = passes(&run(&["huge"], &env), "huge");
    assert!(err.contains(&format!("cxlalloc: heap /dev/shm/cxlalloc.{name}")) && err.contains(" 0 refused"), "{err}");
}

#[test]
fn calloc_of_a_huge_block_the_shared_heap_reuses_from_its_cache_is_zeroed() {
    let name = format!("preload-calloc-{}", std::process::id());
    let env = [("CXLALLOC_HEAP", name.as_str()), ("CXLALLOC_UNLINK", "1")];
    passes(&run(&["callocreuse"], &env), "callocreuse");
}

#[test]
fn a_freed_huge_block_of_process_memory_gives_its_pages_back() {
    // 272 MiB is more than the cache of huge blocks keeps (256 MiB), so it is freed either way.
    for model in ["full", "limited"] {
        passes(&run(&["trim"], &[("CXLALLOC_COHERENCE", model)]), "trim");
    }
}

#[test]
fn a_forked_child_of_a_shared_heap_shares_its_parents_blocks_and_gets_huge_blocks_of_its_own() {
    let name = format!("preload-fork-{}", std::process::id());
    let err = passes(&run(&["sharedfork"], &[("CXLALLOC_HEAP", &name), ("CXLALLOC_UNLINK", "1")]), "sharedfork");
    // The child and the parent each report: the child's free of its parent's huge block was
    // refused, and nothing of the parent's.
    let reports: Vec<&str> = err.lines().filter(|l| l.starts_with("cxlalloc: heap ")).collect();
    assert_eq!(reports.len(), 2, "{err}");
    assert_eq!(reports.iter().filter(|r| r.contains(" 1 refused")).count(), 1, "{err}");
    assert_eq!(reports.iter().filter(|r| r.contains(" 0 refused")).count(), 1, "{err}");
}

#[test]
fn children_forked_while_threads_allocate_free_those_threads_blocks_and_allocate_without_hanging() {
    // Four slots for six threads: some share the spare slot, under its lock, at every fork.
    let err = passes(&run(&["forkbusy", "5", "6"], &[("CXLALLOC_SLOTS", "4")]), "forkbusy");
    // The parent and its six children each report.
    assert_eq!(err.lines().filter(|l| l.starts_with("cxlalloc: heap anonymous")).count(), 7, "{err}");
}
