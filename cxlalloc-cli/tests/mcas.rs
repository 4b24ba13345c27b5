//! The mCAS client against the software mCAS device (`cxlalloc-mcasd`, a separate process, and
//! `mcas::device::serve` in a thread): success, failure, errors, contention on one word from
//! many threads and processes, and a window that survives its server.

// The library's process helpers (fork, heap names, pipes), shared rather than copied.
#[path = "../../cxlalloc/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fork_child, mcas_increment, serial, Cas};
use cxlalloc::internal::mcas::device::{self, DeviceError};
use cxlalloc::internal::mcas::{Geometry, McasClient, McasError, Window, WindowError};
use cxlalloc::internal::sync::{AtomicBool, Ordering};

fn window_path(tag: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/cxlalloc-test-mcas-{tag}-{}", std::process::id()))
}

/// A `cxlalloc-mcasd` process serving a window; killed and its file removed on drop.
struct Server {
    child: Child,
    path: PathBuf,
}

impl Server {
    fn start(path: &Path, slots: u32, latency_ns: u64) -> Self {
        Self::start_bin(env!("CARGO_BIN_EXE_cxlalloc-mcasd"), path, slots, &["--latency-ns", &latency_ns.to_string()])
    }

    /// Starts `bin` (`cxlalloc-mcasd`, or `mcas-cosim`: the same options) on a new window.
    fn start_bin(bin: &str, path: &Path, slots: u32, extra: &[&str]) -> Self {
        let child = Command::new(bin)
            .args(["--window", path.to_str().unwrap(), "--slots", &slots.to_string()])
            .args(["--target-bytes", "4096"])
            .args(extra)
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {bin}: {e}"));
        let started = Instant::now();
        while Window::open(path).map_or(true, |w| w.geometry().slots != slots) {
            assert!(started.elapsed() < Duration::from_secs(10), "the server never published its window");
            std::thread::sleep(Duration::from_millis(10));
        }
        Server { child, path: path.to_path_buf() }
    }

    fn window(&self) -> Arc<Window> {
        Arc::new(Window::open(&self.path).unwrap())
    }

    fn stop(&mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn a_cas_that_matches_swaps_and_one_that_does_not_reports_the_word() {
    let path = window_path("basic");
    let server = Server::start(&path, 4, 0);
    let mut c = McasClient::new(server.window(), 2).unwrap();
    assert_eq!(c.compare_exchange(64, 0, 7), Ok(0));
    assert_eq!(c.load(64), Ok(7));
    assert_eq!(c.compare_exchange(64, 0, 9), Err(Ok(7)), "mismatch: the current word, no swap");
    assert_eq!(c.load(64), Ok(7));
    let a = c.compare_exchange_weak(64, 7, 8).unwrap();
    assert!(a.success && a.prev == 7);
}

#[test]
fn bad_targets_and_slots_are_errors_that_touch_nothing() {
    let path = window_path("errors");
    let server = Server::start(&path, 4, 0);
    let w = server.window();
    assert_eq!(McasClient::new(w.clone(), 4).err(), Some(McasError::NoSuchSlot { slot: 4, slots: 4 }));
    let mut c = McasClient::new(w, 0).unwrap();
    assert_eq!(c.compare_exchange_weak(3, 0, 1), Err(McasError::BadTarget(3)));
    assert_eq!(c.compare_exchange_weak(4096, 0, 1), Err(McasError::BadTarget(4096)));
    assert_eq!(c.compare_exchange(0, 0, 5), Ok(0), "the slot still works after refused requests");
}

#[test]
fn threads_contending_on_one_word_lose_no_update() {
    let path = window_path("threads");
    let server = Server::start(&path, 8, 0);
    contend(server.window(), 500);
}

/// Co-simulation: the same client drives the RTL (`mcas-cosim`, the Verilated unit behind a
/// window), one request per thread at a time from six threads on one word. `script/fpga.sh`
/// builds the server and runs this with `MCAS_COSIM` set.
#[test]
#[ignore = "needs MCAS_COSIM=path/to/mcas-cosim (script/fpga.sh builds it and runs this)"]
fn threads_contending_through_the_rtl_lose_no_update() {
    let bin = std::env::var("MCAS_COSIM").expect("MCAS_COSIM names the mcas-cosim binary");
    let path = window_path("cosim");
    let server = Server::start_bin(&bin, &path, 8, &["--latency", "4"]);
    contend(server.window(), 300);
    let mut c = McasClient::new(server.window(), 7).unwrap();
    assert_eq!(c.compare_exchange_weak(3, 0, 1), Err(McasError::BadTarget(3)));
    assert_eq!(c.compare_exchange(0, 0, 5), Ok(0));
    assert_eq!(c.compare_exchange(0, 0, 6), Err(Ok(5)));
}

/// Six client threads add `per` each to target word 8 with weak CASes; none is lost.
fn contend(w: Arc<Window>, per: u64) {
    let base = McasClient::new(w.clone(), 7).unwrap().load(8).unwrap();

    std::thread::scope(|s| {
        for slot in 0..6 {
            let w = w.clone();
            s.spawn(move || {
                let mut c = McasClient::new(w, slot).unwrap();
                mcas_increment(&mut c, 8, per, Cas::Weak).unwrap();
            });
        }
    });
    let c = McasClient::new(w, 7).unwrap();
    assert_eq!(c.load(8), Ok(base + 6 * per));
}

#[test]
fn processes_contending_on_one_word_lose_no_update() {
    let _serial = serial();
    let path = window_path("procs");
    let server = Server::start(&path, 8, 0);
    const PER: u64 = 400;
    let children: Vec<_> = (0..4u32)
        .map(|slot| {
            let path = path.clone();
            fork_child("mcas client", move || {
                let w = Arc::new(Window::open(&path).map_err(|e| e.to_string())?);
                let mut c = McasClient::new(w, slot).map_err(|e| e.to_string())?;
                mcas_increment(&mut c, 16, PER, Cas::Strong)
            })
        })
        .collect();
    for mut child in children {
        child.succeeds();
    }
    assert_eq!(McasClient::new(server.window(), 7).unwrap().load(16), Ok(4 * PER));
}

#[test]
fn the_window_survives_its_server_and_is_never_zeroed_or_reshaped() {
    let path = window_path("restart");
    let mut server = Server::start(&path, 4, 0);
    let mut c = McasClient::new(server.window(), 1).unwrap();
    assert_eq!(c.compare_exchange(24, 0, 99), Ok(0));
    assert!(server.stop().success(), "SIGTERM: a clean exit");
    drop(c);
    // A new server of the same window sees the word; asking for another shape is refused.
    let geometry = Window::open(&path).unwrap().geometry();
    assert!(matches!(
        Window::create_or_open(&path, Geometry { slots: geometry.slots + 1, ..geometry }),
        Err(WindowError::Invalid { .. })
    ));
    let child = Command::new(env!("CARGO_BIN_EXE_cxlalloc-mcasd"))
        .args(["--window", path.to_str().unwrap(), "--slots", "4", "--target-bytes", "4096"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let again = Server { child, path: path.clone() };
    let mut c = McasClient::new(again.window(), 1).unwrap();
    assert_eq!(c.load(24), Ok(99));
    assert_eq!(c.compare_exchange(24, 99, 100), Ok(99));
    drop(server);
}

#[test]
fn a_second_server_of_a_served_window_is_refused() {
    let path = window_path("twice");
    let server = Server::start(&path, 2, 0);
    let stop = AtomicBool::new(true);
    let w = server.window();
    let pid = u64::from(server.child.id());
    assert_eq!(device::serve(&w, Duration::ZERO, &stop), Err(DeviceError::Served(pid)));
}

#[test]
fn a_file_that_is_not_a_window_is_refused_at_once_and_left_alone() {
    let path = window_path("garbage");
    std::fs::write(&path, vec![0xab; 8192]).unwrap();
    let before = std::fs::read(&path).unwrap();
    assert!(matches!(Window::open(&path), Err(WindowError::Invalid { .. })));
    assert!(matches!(
        Window::create_or_open(&path, Geometry { slots: 1, target_bytes: 8 }),
        Err(WindowError::Invalid { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_window_whose_creator_died_before_its_header_is_refused_after_the_wait() {
    let path = window_path("headerless");
    std::fs::write(&path, vec![0; 8192]).unwrap();
    let started = Instant::now();
    assert!(matches!(Window::open(&path), Err(WindowError::NoHeader(_))));
    assert!(started.elapsed() >= Duration::from_secs(4), "an opener waits for a creator first");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn injected_latency_is_the_floor_of_every_answer() {
    let path = window_path("latency");
    let server = Server::start(&path, 2, 50_000);
    let mut c = McasClient::new(server.window(), 0).unwrap();
    let started = Instant::now();
    for i in 0..20 {
        assert_eq!(c.compare_exchange(0, i, i + 1), Ok(i));
    }
    assert!(started.elapsed() >= Duration::from_millis(1), "20 answers of at least 50 µs each");
}

#[test]
fn a_device_serving_in_a_thread_answers_until_stopped() {
    let path = window_path("thread");
    let w = Arc::new(Window::create_or_open(&path, Geometry { slots: 2, target_bytes: 64 }).unwrap());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let served = s.spawn(|| device::serve(&w, Duration::ZERO, &stop));
        let mut c = McasClient::new(w.clone(), 1).unwrap();
        for i in 0..100 {
            assert_eq!(c.compare_exchange(56, i, i + 1), Ok(i));
        }
        stop.store(true, Ordering::Relaxed);
        let served = served.join().unwrap().unwrap();
        assert_eq!((served.requests, served.successes, served.errors), (100, 100, 0));
    });
    std::fs::remove_file(&path).unwrap();
}
