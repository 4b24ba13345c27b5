//! `cxlalloc-mcasd` serving a no-HWcc heap (`--heap NAME`, `--heap-dir PATH`, `--device
//! PATH`): threads attach only while it serves the heap's window, which it opens with the
//! window's own geometry.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cxlalloc::internal::mcas::Window;
use cxlalloc::internal::WINDOW_FILE;
use cxlalloc::{AttachError, Coherence, Config, Heap};

fn no_hwcc() -> Config {
    Config { coherence: Coherence::NoHwcc, huge_capacity: 0, thread_slots: 4, ..Config::with_capacity(16 << 20) }
}

/// A daemon process, killed on drop.
struct Daemon(Child);

impl Daemon {
    /// Starts `cxlalloc-mcasd ARGS` and waits until it serves `window`.
    fn serve(args: &[&str], window: &Path) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_cxlalloc-mcasd"))
            .args(args)
            .args(["--latency-ns", "0"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let daemon = Daemon(child);
        let w = Window::open(window).unwrap();
        let started = Instant::now();
        while w.served_by() != Some(daemon.0.id()) {
            assert!(started.elapsed() < Duration::from_secs(10), "the daemon never served {}", window.display());
            std::thread::sleep(Duration::from_millis(5));
        }
        daemon
    }

    fn stop(mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        self.0.wait().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Removes a heap directory on drop.
struct Remove(std::path::PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = Heap::unlink_at(&self.0);
    }
}

fn allocate_and_free(heap: &Heap) {
    let t = heap.attach().unwrap();
    let p = t.alloc(100).unwrap();
    t.free(p).unwrap();
}

#[test]
fn threads_attach_to_a_no_hwcc_heap_only_while_the_daemon_serves_it_by_name() {
    let name = format!("mcasd-test-{}", std::process::id());
    let dir = Heap::path_of(&name).unwrap();
    let _ = Heap::unlink_at(&dir);
    let _remove = Remove(dir.clone());
    let heap = Heap::create(&name, &no_hwcc()).unwrap();
    assert!(matches!(heap.attach(), Err(AttachError::DeviceUnserved(_))));
    // No --slots / --target-bytes: the window is served with the geometry the heap gave it.
    let daemon = Daemon::serve(&["--heap", &name], &dir.join(WINDOW_FILE));
    allocate_and_free(&heap);
    assert!(heap.check().is_clean());
    assert!(daemon.stop().success(), "SIGTERM: a clean exit");
    assert!(matches!(heap.attach(), Err(AttachError::DeviceUnserved(_))), "served after the daemon left");
}

#[test]
fn a_heap_directory_is_served_and_a_reshaping_geometry_is_refused() {
    let dir = std::path::PathBuf::from(format!("/dev/shm/cxlalloc-mcasd-test-dir-{}", std::process::id()));
    let _ = Heap::unlink_at(&dir);
    let _remove = Remove(dir.clone());
    let heap = Heap::create_at(&dir, &no_hwcc()).unwrap();
    let window = dir.join(WINDOW_FILE);
    let slots = Window::open(&window).unwrap().geometry().slots;
    let d = dir.to_str().unwrap();
    let refused = run(&["--heap-dir", d, "--slots", &(slots + 1).to_string()]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("never reshaped"), "{refused:?}");
    // The matching count is accepted.
    let daemon = Daemon::serve(&["--heap-dir", d, "--slots", &slots.to_string()], &window);
    allocate_and_free(&heap);
    assert!(daemon.stop().success());
}

#[test]
fn a_heap_without_a_window_is_an_error_not_a_new_window() {
    let name = format!("mcasd-test-full-{}", std::process::id());
    let dir = Heap::path_of(&name).unwrap();
    let _ = Heap::unlink_at(&dir);
    let _remove = Remove(dir.clone());
    Heap::create(&name, &Config { huge_capacity: 0, ..Config::with_capacity(16 << 20) }).unwrap();
    let o = run(&["--heap", &name]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("coherence none"), "{o:?}");
    assert!(!dir.join(WINDOW_FILE).exists(), "the daemon made a window in a full-coherence heap");
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cxlalloc-mcasd")).args(args).output().unwrap()
}

#[test]
fn the_daemon_serves_the_window_carved_in_a_heap_device() {
    let dev = std::path::PathBuf::from(format!("/dev/shm/cxlalloc-mcasd-dev-{}", std::process::id()));
    let _remove = RemoveFile(dev.clone());
    // A window in a device is shared by hosts: this process opens it as host 0.
    std::env::set_var(cxlalloc::internal::HOST_ENV, "0");
    let f = std::fs::File::create(&dev).unwrap();
    f.set_len(Heap::device_bytes(&no_hwcc()).unwrap()).unwrap();
    let heap = Heap::format_device(&dev, &no_hwcc()).unwrap();
    assert!(matches!(heap.attach(), Err(AttachError::DeviceUnserved(_))));
    let mut child = Command::new(env!("CARGO_BIN_EXE_cxlalloc-mcasd"))
        .args(["--device", dev.to_str().unwrap(), "--latency-ns", "0"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let window = cxlalloc::internal::mcas::device_window(&dev).unwrap();
    let started = Instant::now();
    while window.served_by() != Some(child.id()) {
        assert!(started.elapsed() < Duration::from_secs(10), "the daemon never served the device's window");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t = heap.attach().unwrap();
    let blocks: Vec<_> = (0..100).map(|i| t.alloc(16 + i).unwrap()).collect();
    for b in blocks {
        t.free(b).unwrap();
    }
    drop(t);
    assert!(heap.check().is_clean());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
}

/// Removes a file on drop.
struct RemoveFile(std::path::PathBuf);

impl Drop for RemoveFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
