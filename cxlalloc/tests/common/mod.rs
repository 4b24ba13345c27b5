//! Helpers for tests that run real processes against one shared heap: unique heap names that
//! unlink themselves, a fork helper whose child never returns into the test harness, a wait with
//! a deadline that kills a hung child, and pipes for readiness and start barriers.
//!
//! Children report through their exit status only. A child runs its closure under
//! `catch_unwind`, writes any failure to fd 2 with a raw `write` (the harness's output capture
//! does not follow a fork) and leaves with `_exit`, so it never runs the parent's destructors or
//! returns into the harness.

#![allow(dead_code)]

use std::os::fd::{AsFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

/// How long any child may run before the test calls it hung and kills it.
pub const CHILD_DEADLINE: Duration = Duration::from_secs(30);

/// Exit status of a child whose closure returned an error.
pub const EXIT_FAILED: i32 = 1;
/// Exit status of a child whose closure panicked.
pub const EXIT_PANICKED: i32 = 101;

static SERIAL: Mutex<()> = Mutex::new(());

/// Serializes the fork-based tests of one test binary. The harness runs tests on several
/// threads; holding this while forking means every other test thread is parked on this mutex
/// (holding no lock of its own) when the address space is copied.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A heap name unique to this process and call; unlinks the heap when dropped.
pub struct HeapName(pub String);

impl HeapName {
    /// A fresh name `mp-<pid>-<counter>-<tag>`; any stale heap of that name is removed.
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("mp-{}-{n}-{tag}", std::process::id());
        let _ = cxlalloc::Heap::unlink(&name);
        HeapName(name)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Drop for HeapName {
    fn drop(&mut self) {
        let _ = cxlalloc::Heap::unlink(&self.0);
    }
}

/// Writes `msg` to fd 2 without locks or allocation beyond what `msg` already holds.
pub fn raw_eprint(msg: &str) {
    let mut bytes = msg.as_bytes();
    while !bytes.is_empty() {
        // SAFETY: writing initialized bytes from a live slice to fd 2.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// A forked child process. Dropping it without waiting kills and reaps it.
pub struct Child {
    pub pid: Pid,
    reaped: bool,
}

/// Forks; the child runs `body` and exits with the status it returns (or [`EXIT_PANICKED`]).
pub fn fork_code(what: &str, body: impl FnOnce() -> i32) -> Child {
    // SAFETY: the child only runs `body` and then `_exit`s; the tests that call this hold
    // `serial()`, and the allocator under test is lock-free, so no lock is held by a thread
    // that does not exist in the child.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Parent { child } => Child { pid: child, reaped: false },
        ForkResult::Child => {
            let code = match catch_unwind(AssertUnwindSafe(body)) {
                Ok(code) => code,
                Err(payload) => {
                    let msg = payload
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| payload.downcast_ref::<&str>().copied())
                        .unwrap_or("(non-string panic)");
                    raw_eprint(&format!("child {what} (pid {}) panicked: {msg}\n", std::process::id()));
                    EXIT_PANICKED
                }
            };
            // SAFETY: _exit ends the process without running the parent's destructors or atexit
            // handlers; always sound.
            unsafe { libc::_exit(code) }
        }
    }
}

/// Forks; the child runs `body` and exits 0 on `Ok`, [`EXIT_FAILED`] (after printing the error)
/// on `Err`.
pub fn fork_child(what: &str, body: impl FnOnce() -> Result<(), String>) -> Child {
    let what_owned = what.to_string();
    fork_code(what, move || match body() {
        Ok(()) => 0,
        Err(e) => {
            raw_eprint(&format!("child {what_owned} (pid {}) failed: {e}\n", std::process::id()));
            EXIT_FAILED
        }
    })
}

impl Child {
    /// Waits for the child to end, at most `deadline`; a child still running then is killed
    /// and the test fails.
    pub fn wait(&mut self, deadline: Duration) -> WaitStatus {
        assert!(!self.reaped, "child {} already reaped", self.pid);
        let start = Instant::now();
        loop {
            match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                Ok(status) => {
                    self.reaped = true;
                    return status;
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => panic!("waitpid {}: {e}", self.pid),
            }
            if start.elapsed() > deadline {
                let _ = kill(self.pid, Signal::SIGKILL);
                let _ = waitpid(self.pid, None);
                self.reaped = true;
                panic!("child {} still running after {deadline:?}: killed", self.pid);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits (see [`Child::wait`]) and returns the exit code; fails the test if the child was
    /// killed by a signal.
    pub fn exit_code(&mut self) -> i32 {
        match self.wait(CHILD_DEADLINE) {
            WaitStatus::Exited(_, code) => code,
            other => panic!("child {} did not exit normally: {other:?}", self.pid),
        }
    }

    /// Waits and asserts the child exited 0.
    pub fn succeeds(&mut self) {
        let pid = self.pid;
        assert_eq!(self.exit_code(), 0, "child {pid} failed (its stderr above says why)");
    }

    /// Waits; true if the child died by `SIGKILL` (the crash point `point` it armed fired),
    /// false if it exited 0 (it never reached the point). Any other end fails the test.
    pub fn killed_at_point(&mut self, point: &str) -> bool {
        match self.wait(CHILD_DEADLINE) {
            WaitStatus::Signaled(_, Signal::SIGKILL, _) => true,
            WaitStatus::Exited(_, 0) => false,
            other => panic!("{point}: child {} ended {other:?}", self.pid),
        }
    }

    /// Waits and returns the signal that killed the child; fails the test if it exited.
    pub fn killed_by(&mut self) -> Signal {
        match self.wait(CHILD_DEADLINE) {
            WaitStatus::Signaled(_, sig, _) => sig,
            other => panic!("child {} was not killed by a signal: {other:?}", self.pid),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = kill(self.pid, Signal::SIGKILL);
            let _ = waitpid(self.pid, None);
        }
    }
}

/// A pipe; both ends are inherited by children forked after it is made.
pub struct Pipe {
    pub read: OwnedFd,
    pub write: OwnedFd,
}

impl Pipe {
    pub fn new() -> Self {
        let (read, write) = nix::unistd::pipe().expect("pipe");
        Pipe { read, write }
    }

    /// Writes all of `bytes`.
    pub fn send(&self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            match nix::unistd::write(self.write.as_fd(), rest) {
                Ok(n) => rest = &rest[n..],
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => panic!("pipe write: {e}"),
            }
        }
    }

    /// Reads exactly `buf.len()` bytes, waiting at most `deadline` in all; `false` on timeout
    /// or end of file.
    pub fn recv(&self, buf: &mut [u8], deadline: Duration) -> bool {
        let start = Instant::now();
        let mut got = 0;
        while got < buf.len() {
            let left = deadline.saturating_sub(start.elapsed());
            if left.is_zero() {
                return false;
            }
            let mut pfd =
                libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(&self.read), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            if r < 0 {
                if nix::errno::Errno::last() == nix::errno::Errno::EINTR {
                    continue;
                }
                return false;
            }
            if r == 0 {
                continue;
            }
            match nix::unistd::read(self.read.as_fd(), &mut buf[got..]) {
                Ok(0) => return false,
                Ok(n) => got += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Sends one `u64`.
    pub fn send_u64(&self, v: u64) {
        self.send(&v.to_le_bytes());
    }

    /// Receives one `u64` within `deadline`.
    pub fn recv_u64(&self, deadline: Duration) -> Option<u64> {
        let mut b = [0u8; 8];
        self.recv(&mut b, deadline).then(|| u64::from_le_bytes(b))
    }
}

impl Default for Pipe {
    fn default() -> Self {
        Self::new()
    }
}

/// A 64-bit value derived from `offset` and `salt`, never 0: what a test writes into a block so
/// another process can tell the block's bytes are the ones it expects.
pub fn pattern(offset: u64, salt: u64) -> u64 {
    let mut x = offset ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x | 1
}

/// Fills the `len` bytes at `p` (8-aligned, `len` a multiple of 8) with [`pattern`] words keyed
/// by each word's heap offset `base_offset + i * 8`.
///
/// # Safety
/// `p .. p + len` must be writable memory exclusively ours.
pub unsafe fn fill(p: *mut u8, len: usize, base_offset: u64, salt: u64) {
    let words = p.cast::<u64>();
    for i in 0..len / 8 {
        // SAFETY: inside the caller's range, 8-aligned.
        unsafe { words.add(i).write_volatile(pattern(base_offset + i as u64 * 8, salt)) };
    }
}

/// Checks a range written by [`fill`]; returns the first mismatching word's index.
///
/// # Safety
/// `p .. p + len` must be readable memory.
pub unsafe fn verify(p: *const u8, len: usize, base_offset: u64, salt: u64) -> Result<(), String> {
    let words = p.cast::<u64>();
    for i in 0..len / 8 {
        // SAFETY: inside the caller's range, 8-aligned.
        let got = unsafe { words.add(i).read_volatile() };
        let want = pattern(base_offset + i as u64 * 8, salt);
        if got != want {
            return Err(format!("block at offset {base_offset:#x}: word {i} is {got:#x}, expected {want:#x}"));
        }
    }
    Ok(())
}

/// A small deterministic generator (xorshift64*), for fixed-seed stress tests.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(pattern(seed, 0x5eed))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `Err(msg)` unless `cond`: the child-side assertion.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!("{}:{}: {}", file!(), line!(), format!($($fmt)+)));
        }
    };
}

/// Turns any `Result` into the child-side `Result<T, String>` with a note of what failed.
pub trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T, E: std::fmt::Debug> Ctx<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e:?}"))
    }
}

impl<T> Ctx<T> for Option<T> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.ok_or_else(|| format!("{what}: none"))
    }
}

/// A software mCAS device serving a no-HWcc heap's window from a thread of this process, for
/// as long as the guard lives.
pub struct Device {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Device {
    /// Serves the window of the heap named `name`, `latency` per CAS.
    pub fn serve(name: &str, latency: Duration) -> Self {
        let path = cxlalloc::Heap::path_of(name).unwrap().join(cxlalloc::internal::WINDOW_FILE);
        Self::serve_window(latency, move || cxlalloc::internal::mcas::Window::open(&path).ok())
    }

    /// Serves the window carved in the no-HWcc heap device `path`, `latency` per CAS.
    pub fn serve_device(path: &std::path::Path, latency: Duration) -> Self {
        let path = path.to_path_buf();
        Self::serve_window(latency, move || cxlalloc::internal::mcas::device_window(&path).ok())
    }

    /// Serves the window `open` maps; returns once a fresh mapping of it names its server, so
    /// threads attached after this see the window served.
    fn serve_window(latency: Duration, open: impl Fn() -> Option<cxlalloc::internal::mcas::Window>) -> Self {
        let window = open().expect("the heap's mCAS window");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            cxlalloc::internal::mcas::device::serve(&window, latency, &s).map(|served| served.requests).unwrap_or(0)
        });
        while open().and_then(|w| w.served_by()).is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        Device { stop, thread: Some(thread) }
    }

    /// Stops the device; the number of requests it answered.
    pub fn stop(mut self) -> u64 {
        self.halt()
    }

    fn halt(&mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Threads allocate and hand every block to the next thread, which frees it remotely: every
/// counter decrement, claim, global push and pop goes through the device.
pub fn remote_free_ring(heap: &cxlalloc::Heap, threads: usize, per_thread: usize) {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads).map(|_| std::sync::mpsc::channel::<usize>()).unzip();
    std::thread::scope(|s| {
        for (i, rx) in receivers.into_iter().enumerate() {
            let tx = senders[(i + 1) % threads].clone();
            let heap = heap.clone();
            s.spawn(move || {
                let t = heap.attach().unwrap();
                for n in 0..per_thread {
                    let size = [24, 64, 200, 1024, 4096][n % 5];
                    let p = t.alloc(size).unwrap();
                    // SAFETY: a fresh block of `size` bytes.
                    unsafe { p.as_ptr().write_bytes(i as u8, size) };
                    tx.send(p.as_ptr() as usize).unwrap();
                }
                drop(tx);
                for addr in rx {
                    t.free(std::ptr::NonNull::new(addr as *mut u8).unwrap()).unwrap();
                }
            });
        }
        drop(senders);
    });
}

/// Frees the blocks that roots `0..n` name (left there by child processes), remotely from a
/// thread of this process, then asserts the heap checks clean with no block live.
pub fn free_roots_and_check_empty(heap: &cxlalloc::Heap, n: usize) {
    let t = heap.attach().unwrap();
    for i in 0..n {
        let off = heap.root(i).unwrap().load(Ordering::Acquire);
        t.free(heap.pointer(cxlalloc::Offset::<u8>::from_raw(off)).unwrap()).unwrap();
    }
    drop(t);
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(cxlalloc::Bracket::ALL.iter().map(|&b| report.bracket(b).live_blocks()).sum::<u64>(), 0);
}

/// Which compare-and-swap [`mcas_increment`] retries with.
#[derive(Clone, Copy, Debug)]
pub enum Cas {
    /// `compare_exchange_weak`: one request; a spurious failure reports the value expected.
    Weak,
    /// `compare_exchange`: fails only when the word differs, and reports it.
    Strong,
}

/// Adds 1 to mCAS target `target` `times` times through `c`: load, then CAS `cur → cur + 1`,
/// retrying from the word each lost CAS reports. With other clients doing the same, the word
/// ends `times` higher per client only if no CAS that lost was taken for a success.
pub fn mcas_increment(
    c: &mut cxlalloc::internal::mcas::McasClient,
    target: u64,
    times: u64,
    cas: Cas,
) -> Result<(), String> {
    for _ in 0..times {
        let mut cur = c.load(target).map_err(|e| format!("load {target}: {e}"))?;
        loop {
            cur = match cas {
                Cas::Weak => match c.compare_exchange_weak(target, cur, cur + 1) {
                    Ok(a) if a.success => break,
                    Ok(a) => a.prev,
                    Err(e) => return Err(format!("weak CAS on {target}: {e}")),
                },
                Cas::Strong => match c.compare_exchange(target, cur, cur + 1) {
                    Ok(_) => break,
                    Err(Ok(seen)) => seen,
                    Err(Err(e)) => return Err(format!("CAS on {target}: {e}")),
                },
            };
        }
    }
    Ok(())
}
