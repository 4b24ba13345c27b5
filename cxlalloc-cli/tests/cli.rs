//! The `cxlalloc` command line, run as a real binary against real heaps: `list` with live and
//! dead slot holders, `--json` on every read command, human sizes, `check` naming dead holders
//! and what `recover` would do, exit statuses, and output into a closed pipe.

// The library's process helpers (fork, heap names, pipes), shared rather than copied.
#[path = "../../cxlalloc/tests/common/mod.rs"]
mod common;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{fork_code, serial, HeapName};
use cxlalloc::{Config, Heap, ThreadHandle};
use nix::sys::signal::Signal;
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn cxlalloc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cxlalloc")).args(args).output().expect("run cxlalloc")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

fn small() -> Config {
    Config {
        small_capacity: 64 << 20,
        large_capacity: 64 << 20,
        thread_slots: 4,
        huge_capacity: 0,
        ..Config::default()
    }
}

/// A directory of its own under /dev/shm, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = PathBuf::from(format!("/dev/shm/cxlalloc-cli-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create test directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A heap whose slot 0 is held by this (live) process and slot 1 by a child killed with
/// `SIGKILL` while attached; returns the heap, the live handle and the dead child's pid.
fn heap_with_live_and_dead_holder(path: &Path) -> (Heap, ThreadHandle, u32) {
    let heap = Heap::create_at(path, &small()).expect("create heap");
    let live = heap.attach().expect("attach");
    let mut child = fork_code("holder", || {
        let Ok(heap) = Heap::open_at(path) else { return 1 };
        let Ok(t) = heap.attach() else { return 1 };
        let _ = t.alloc(64);
        std::mem::forget(t);
        // SAFETY: kill and getpid have no preconditions; the process dies here, attached.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        0
    });
    let pid = child.pid.as_raw() as u32;
    assert_eq!(child.killed_by(), Signal::SIGKILL);
    assert_eq!(heap.dead_slots(), vec![1]);
    (heap, live, pid)
}

#[test]
fn list_shows_each_slot_holder_alive_or_dead_and_advises_a_check() {
    let _serial = serial();
    let dir = TempDir::new("list-human");
    let (_heap, _live, dead) = heap_with_live_and_dead_holder(&dir.0.join("demo"));
    let o = cxlalloc(&["list", dir.0.to_str().unwrap()]);
    let text = stdout(&o);
    assert!(o.status.success(), "{o:?}");
    assert!(text.contains("demo"), "{text}");
    assert!(text.contains(&format!("pid {} (alive)", std::process::id())), "{text}");
    assert!(text.contains(&format!("pid {dead} (dead)")), "{text}");
    assert!(text.lines().any(|l| l.contains("slots leased:") && l.contains("2 of 4")), "{text}");
    assert!(text.lines().any(|l| l.contains("check advised:") && l.contains("yes")), "{text}");
}

#[test]
fn list_json_has_every_heap_with_its_holders_and_advice() {
    let _serial = serial();
    let dir = TempDir::new("list-json");
    let (_heap, _live, dead) = heap_with_live_and_dead_holder(&dir.0.join("demo"));
    let o = cxlalloc(&["list", "--json", dir.0.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
    let v = json(&o);
    let heap = &v["heaps"][0];
    assert_eq!(heap["name"], "demo");
    assert_eq!(heap["coherence"], "full");
    assert_eq!(heap["capacity_bytes"], 128u64 << 20);
    assert!(heap["stored_bytes"].as_u64().is_some_and(|b| b > 0), "{heap}");
    assert_eq!(heap["thread_slots"], 4);
    assert_eq!(heap["slots_leased"], 2);
    assert_eq!(heap["holders"][0]["pid"], std::process::id());
    assert_eq!(heap["holders"][0]["alive"], true);
    assert_eq!(heap["holders"][1]["slot"], 1);
    assert_eq!(heap["holders"][1]["pid"], dead);
    assert_eq!(heap["holders"][1]["alive"], false);
    assert_eq!(heap["check_advised"], true);
}

#[test]
fn list_without_a_directory_shows_named_heaps_in_dev_shm() -> TestResult {
    let name = HeapName::new("cli-list-named");
    let _heap = Heap::create(name.as_str(), &small())?;
    let v = json(&cxlalloc(&["list", "--json"]));
    assert_eq!(v["directory"], "/dev/shm");
    let heaps = v["heaps"].as_array().ok_or("no heaps array")?;
    let mine = heaps.iter().find(|h| h["name"] == name.as_str()).ok_or("named heap not listed")?;
    assert_eq!(mine["check_advised"], false);
    assert_eq!(mine["slots_leased"], 0);
    Ok(())
}

#[test]
fn list_names_a_foreign_or_damaged_directory_and_goes_on() -> TestResult {
    let dir = TempDir::new("list-foreign");
    std::fs::create_dir(dir.0.join("a-empty"))?;
    std::fs::create_dir(dir.0.join("b-bad-magic"))?;
    std::fs::write(dir.0.join("b-bad-magic/header"), b"NOTAHEAP and some more bytes")?;
    let _heap = Heap::create_at(&dir.0.join("c-good"), &small())?;
    let o = cxlalloc(&["list", "--json", dir.0.to_str().ok_or("path")?]);
    assert!(o.status.success(), "{o:?}");
    let v = json(&o);
    let heaps = v["heaps"].as_array().ok_or("no heaps array")?;
    assert_eq!(heaps.len(), 3, "{v}");
    assert!(heaps[0]["error"].as_str().is_some_and(|e| e.contains("no heap")), "{v}");
    assert!(heaps[1]["error"].as_str().is_some_and(|e| e.contains("bad magic")), "{v}");
    assert_eq!(heaps[2]["name"], "c-good");
    assert!(heaps[2]["error"].is_null(), "{v}");
    Ok(())
}

#[test]
fn list_and_inspect_leave_a_dead_holders_slot_to_recovery() {
    let _serial = serial();
    let dir = TempDir::new("list-readonly");
    let path = dir.0.join("demo");
    let (heap, _live, _dead) = heap_with_live_and_dead_holder(&path);
    let before: Vec<_> = ["shared", "owned", "local"].iter().map(|f| std::fs::read(path.join(f)).unwrap()).collect();
    for args in [vec!["list", dir.0.to_str().unwrap()], vec!["inspect", "--at", path.to_str().unwrap()]] {
        assert!(cxlalloc(&args).status.success(), "{args:?}");
    }
    assert_eq!(heap.dead_slots(), vec![1], "the dead slot was adopted");
    let after: Vec<_> = ["shared", "owned", "local"].iter().map(|f| std::fs::read(path.join(f)).unwrap()).collect();
    assert!(before == after, "list or inspect changed the heap's files");
}

#[test]
fn inspect_shows_sizes_in_binary_units_one_fact_a_line_and_no_debug_structs() -> TestResult {
    let dir = TempDir::new("inspect-human");
    let path = dir.0.join("demo");
    let _heap = Heap::create_at(&path, &small())?;
    let o = cxlalloc(&["inspect", "--at", path.to_str().ok_or("path")?]);
    let text = stdout(&o);
    assert!(o.status.success(), "{o:?}");
    let fact = |key: &str, value: &str| text.lines().any(|l| l.starts_with(key) && l.ends_with(value));
    assert!(fact("small capacity:", " 64 MiB"), "{text}");
    assert!(fact("large capacity:", " 64 MiB"), "{text}");
    assert!(fact("huge capacity:", " none"), "{text}");
    assert!(fact("coherence model:", " full"), "{text}");
    assert!(fact("thread slots:", " 4"), "{text}");
    assert!(!text.contains('{') && !text.contains("Config"), "Debug output: {text}");
    Ok(())
}

#[test]
fn inspect_and_stats_json_parse_and_do_not_overlap() -> TestResult {
    let dir = TempDir::new("inspect-stats-json");
    let path = dir.0.join("demo");
    let heap = Heap::create_at(&path, &small())?;
    let t = heap.attach()?;
    let _block = t.alloc(100)?;
    let p = path.to_str().ok_or("path")?;
    let inspect = json(&cxlalloc(&["inspect", "--json", "--at", p]));
    assert_eq!(inspect["small_capacity_bytes"], 64u64 << 20);
    assert_eq!(inspect["thread_slots"], 4);
    assert_eq!(inspect["holders"][0]["pid"], std::process::id());
    assert!(inspect["regions"].as_array().is_some_and(|r| r.iter().any(|r| r["name"] == "data")), "{inspect}");
    let stats = json(&cxlalloc(&["stats", "--json", "--at", p]));
    let small = &stats["brackets"][0];
    assert_eq!(small["name"], "small");
    assert_eq!(small["live_blocks"], 1);
    assert_eq!(small["classes"][0]["block_bytes"], 104);
    assert!(stats["counters"]["slabs_bumped"].as_u64().is_some_and(|n| n > 0), "{stats}");
    for key in ["small_capacity_bytes", "thread_slots", "holders", "regions"] {
        assert!(stats.get(key).is_none(), "stats repeats inspect's {key}");
    }
    for key in ["brackets", "counters", "data_bytes"] {
        assert!(inspect.get(key).is_none(), "inspect repeats stats' {key}");
    }
    Ok(())
}

#[test]
fn stats_shows_sizes_in_binary_units_and_no_debug_structs() -> TestResult {
    let dir = TempDir::new("stats-human");
    let path = dir.0.join("demo");
    let heap = Heap::create_at(&path, &small())?;
    let t = heap.attach()?;
    let _block = t.alloc(100)?;
    let o = cxlalloc(&["stats", "--at", path.to_str().ok_or("path")?]);
    let text = stdout(&o);
    assert!(o.status.success(), "{o:?}");
    assert!(text.lines().any(|l| l.starts_with("small slabs:") && l.ends_with("(32 KiB each)")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("small class") && l.contains("104 B blocks")), "{text}");
    assert!(!text.contains('{') && !text.contains("OpCounters"), "Debug output: {text}");
    Ok(())
}

#[test]
fn check_names_each_dead_holder_and_what_recover_would_do() {
    let _serial = serial();
    let dir = TempDir::new("check-dead");
    let path = dir.0.join("demo");
    let (_heap, _live, dead) = heap_with_live_and_dead_holder(&path);
    let o = cxlalloc(&["check", "--at", path.to_str().unwrap()]);
    let text = stdout(&o);
    assert!(
        text.lines().any(|l| l.starts_with("dead holder, slot 1:") && l.ends_with(&format!("pid {dead}"))),
        "{text}"
    );
    let steps: Vec<&str> =
        text.lines().filter_map(|l| l.trim().strip_prefix("recover would:")).map(str::trim).collect();
    assert_eq!(steps.first(), Some(&format!("adopt slot 1 from dead pid {dead}").as_str()), "{text}");
    assert!(steps.last().is_some_and(|s| s.starts_with("release the slot")), "{text}");
    assert_eq!(o.status.code(), Some(3), "consistent with a dead holder: {text}");

    let v = json(&cxlalloc(&["check", "--json", "--at", path.to_str().unwrap()]));
    assert_eq!(v["consistent"], true);
    assert_eq!(v["dead_holders"][0]["slot"], 1);
    assert_eq!(v["dead_holders"][0]["pid"], dead);
    let steps = v["dead_holders"][0]["steps"].as_array().expect("steps");
    assert!(steps[0].as_str().is_some_and(|s| s.starts_with("adopt slot 1")), "{v}");
}

#[test]
fn recover_says_in_words_what_it_did_for_each_dead_holder() {
    let _serial = serial();
    let dir = TempDir::new("recover");
    let path = dir.0.join("demo");
    let (heap, _live, dead) = heap_with_live_and_dead_holder(&path);
    let o = cxlalloc(&["recover", "--at", path.to_str().unwrap()]);
    let text = stdout(&o);
    assert!(o.status.success(), "{o:?}");
    let steps: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("recovery:")).map(str::trim).collect();
    assert_eq!(steps.first(), Some(&format!("adopted slot 1 from dead pid {dead}").as_str()), "{text}");
    assert!(steps.iter().any(|s| s.starts_with("rebuilt its slab lists")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("slots recovered:") && l.ends_with(" 1")), "{text}");
    assert!(!text.contains('{') && !text.contains("Completed"), "Debug output: {text}");
    assert!(heap.dead_slots().is_empty());
    let v = json(&cxlalloc(&["recover", "--json", "--at", path.to_str().unwrap()]));
    assert_eq!(v["recovered"].as_array().map(Vec::len), Some(0), "nothing left to recover: {v}");
    assert_eq!(v["still_dead"], 0);
}

#[test]
fn check_exit_status_is_0_on_a_clean_heap_and_2_on_a_missing_one() -> TestResult {
    let dir = TempDir::new("check-status");
    let path = dir.0.join("demo");
    let _heap = Heap::create_at(&path, &small())?;
    let o = cxlalloc(&["check", "--at", path.to_str().ok_or("path")?]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).lines().any(|l| l.starts_with("result:") && l.ends_with(" consistent")));
    let missing = cxlalloc(&["check", "--at", dir.0.join("nothing").to_str().ok_or("path")?]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no heap at"));
    Ok(())
}

/// Runs `cxlalloc args` with its standard output a pipe whose read end is already closed, as
/// after `| head -1` has read its line.
fn into_closed_pipe(args: &[&str]) -> Output {
    let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe().expect("pipe");
    drop(read);
    Command::new(env!("CARGO_BIN_EXE_cxlalloc"))
        .args(args)
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .expect("run cxlalloc")
}

#[test]
fn output_into_a_closed_pipe_ends_quietly_with_the_commands_status() -> TestResult {
    let dir = TempDir::new("pipe");
    let path = dir.0.join("demo");
    let _heap = Heap::create_at(&path, &small())?;
    let p = path.to_str().ok_or("path")?;
    for args in [
        vec!["check", "--at", p],
        vec!["list", dir.0.to_str().ok_or("path")?],
        vec!["stats", "--at", p],
        vec!["inspect", "--at", p],
    ] {
        let o = into_closed_pipe(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.is_empty(), "{args:?} wrote to stderr: {stderr}");
        assert_eq!(o.status.code(), Some(0), "{args:?}");
    }
    Ok(())
}

#[test]
fn output_that_cannot_be_written_is_an_error_not_a_panic() -> TestResult {
    let dir = TempDir::new("full");
    let path = dir.0.join("demo");
    let _heap = Heap::create_at(&path, &small())?;
    let o = Command::new(env!("CARGO_BIN_EXE_cxlalloc"))
        .args(["check", "--at", path.to_str().ok_or("path")?])
        .stdout(std::fs::OpenOptions::new().write(true).open("/dev/full")?)
        .output()?;
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot write output") && !stderr.contains("panicked"), "{stderr}");
    Ok(())
}

#[test]
fn check_and_stats_count_no_slab_beyond_the_capacity_when_the_length_word_is_corrupt() -> TestResult {
    let dir = TempDir::new("corrupt-length");
    let path = dir.0.join("demo");
    drop(Heap::create_at(&path, &small())?);
    // Every word of the shared region (lengths included) all ones; the file's trailer is kept.
    let shared = std::fs::OpenOptions::new().write(true).open(path.join("shared"))?;
    let region = shared.metadata()?.len() - 24;
    std::os::unix::fs::FileExt::write_all_at(&shared, &vec![0xff; region as usize], 0)?;
    let at = path.to_str().ok_or("path")?;
    let capacity_slabs = small().small_capacity >> 15; // 32 KiB small slabs
    let o = cxlalloc(&["check", "--at", at]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let checked: u64 = stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("small slabs checked:"))
        .ok_or("no small slabs checked line")?
        .trim()
        .parse()?;
    assert_eq!(checked, capacity_slabs);
    let stats = json(&cxlalloc(&["stats", "--json", "--at", at]));
    let data = stats["data_bytes"].as_u64().ok_or("data_bytes")?;
    assert!(data <= small().small_capacity + small().large_capacity, "data_bytes {data}");
    Ok(())
}

#[test]
fn list_writes_control_characters_in_a_directory_name_escaped() -> TestResult {
    let dir = TempDir::new("list-control");
    // Any local user can make such a directory in /dev/shm.
    std::fs::create_dir(dir.0.join("evil\u{1b}[2J\nslots leased: 0"))?;
    let o = cxlalloc(&["list", dir.0.to_str().ok_or("path")?]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    assert!(!text.contains('\u{1b}'), "an escape sequence reached the terminal: {text:?}");
    assert!(text.contains("evil\\u{1b}[2J\\nslots leased: 0"), "{text:?}");
    assert!(!text.lines().any(|l| l.starts_with("slots leased")), "a name split a fact: {text:?}");
    Ok(())
}

#[test]
fn errors_write_control_characters_in_a_path_escaped() -> TestResult {
    let dir = TempDir::new("error-control");
    let evil = dir.0.join("evil\u{1b}[2J");
    std::fs::create_dir(&evil)?;
    let o = cxlalloc(&["inspect", "--at", evil.to_str().ok_or("path")?]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains('\u{1b}'), "an escape sequence reached the terminal: {err:?}");
    assert!(err.contains("evil\\u{1b}[2J"), "{err:?}");
    Ok(())
}

/// A plain file standing in for a device, removed when dropped.
struct DevFile(PathBuf);

impl DevFile {
    fn new(tag: &str, bytes: u64) -> Self {
        let path = PathBuf::from(format!("/dev/shm/cxlalloc-cli-dev-{}-{tag}", std::process::id()));
        let f = std::fs::File::create(&path).expect("create device file");
        f.set_len(bytes).expect("size device file");
        DevFile(path)
    }

    fn arg(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for DevFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn format_carves_a_heap_that_every_read_command_opens_with_device() -> TestResult {
    let dev = DevFile::new("fmt", 3 << 30);
    let o = cxlalloc(&["format", dev.arg(), "--slots", "8"]);
    assert!(o.status.success(), "{o:?}");
    // With no sizes given, the brackets take a quarter of the device each, the huge range the
    // whole GiB left.
    assert!(stdout(&o).contains("huge 1 GiB"), "{}", stdout(&o));
    let heap = Heap::open_device(&dev.0)?;
    assert_eq!(heap.config().thread_slots, 8);
    let t = heap.attach()?;
    let _block = t.alloc(100)?;
    let info = json(&cxlalloc(&["inspect", "--device", dev.arg(), "--json"]));
    assert_eq!(info["holders"].as_array().map(Vec::len), Some(1), "{info}");
    assert_eq!(cxlalloc(&["check", "--device", dev.arg()]).status.code(), Some(0));
    let listed = json(&cxlalloc(&["list", dev.arg(), "--json"]));
    assert_eq!(listed["heaps"][0]["slots_leased"].as_u64(), Some(1), "{listed}");
    assert!(cxlalloc(&["stats", "--device", dev.arg()]).status.success());
    // A device that holds a heap is formatted again only with --force.
    let again = cxlalloc(&["format", dev.arg()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"), "{again:?}");
    drop(t);
    drop(heap);
    assert!(cxlalloc(&["format", dev.arg(), "--force", "--slots", "4"]).status.success());
    assert_eq!(Heap::open_device(&dev.0)?.config().thread_slots, 4);
    Ok(())
}

#[test]
fn format_refuses_a_device_too_small_and_unlink_refuses_a_device() {
    let dev = DevFile::new("tiny", 1 << 20);
    let o = cxlalloc(&["format", dev.arg()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("the heap needs"), "{o:?}");
    let dev = DevFile::new("unlink", 1 << 30);
    assert!(cxlalloc(&["format", dev.arg(), "--slots", "4"]).status.success());
    let o = cxlalloc(&["unlink", "--device", dev.arg()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(Heap::open_device(&dev.0).is_ok(), "unlink touched the device");
}
