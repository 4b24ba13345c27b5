//! Hosts and domains (docs/design.md §8.6): holders whose pids mean something only in another
//! pid namespace are never judged from this `/proc`. The foreign holders here run in fresh pid
//! namespaces with their own `/proc` (`unshare --pid --fork --mount-proc`), as a container or
//! another host of a pod would; each namespace is a domain of its own.
//!
//! A helper is this test binary run again in the namespace (`holder_in_namespace`, which does
//! nothing unless `CXLALLOC_HOST_HELPER` is set): it opens the heap, attaches several threads,
//! allocates small, large and huge blocks from each, fills them with a pattern, publishes their
//! offsets in roots, says `ready HOST`, and waits for its stdin to close; then it checks every
//! byte and frees every block. Not a benchmark.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::HeapName;
use cxlalloc::{AdoptError, AttachError, Config, Heap, RecoverHostError};

/// Threads per helper, and blocks per thread (one small, one large, one huge).
const THREADS: usize = 4;
const SIZES: [usize; 3] = [200, 100 << 10, 3 << 20];
const HELPER_ENV: &str = "CXLALLOC_HOST_HELPER";

fn config() -> Config {
    Config { thread_slots: 8, huge_capacity: 8 << 30, ..Config::with_capacity(64 << 20) }
}

/// The byte of block `root` at position `i`: a pattern a wrong or moved block cannot match.
fn pattern(root: usize, i: usize) -> u8 {
    (root as u8).wrapping_mul(31) ^ (i as u8).wrapping_add((i >> 8) as u8)
}

/// The root that holds block `block` of thread `thread` of the helper whose roots start at
/// `base`.
fn root_of(base: usize, thread: usize, block: usize) -> usize {
    base + thread * SIZES.len() + block
}

/// Roots one helper uses.
const HELPER_ROOTS: usize = THREADS * SIZES.len();

fn check_block(heap: &Heap, root: usize) -> Result<(), String> {
    let raw = heap.root(root).ok_or("no root")?.load(std::sync::atomic::Ordering::Acquire);
    let size = SIZES[root % SIZES.len()];
    let p = heap.pointer::<u8>(cxlalloc::Offset::from_raw(raw)).map_err(|e| format!("root {root}: {e}"))?;
    // SAFETY: the block is `size` bytes, allocated by the helper and not freed.
    let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), size) };
    match bytes.iter().enumerate().find(|&(i, &b)| b != pattern(root, i)) {
        Some((i, b)) => Err(format!("root {root}: byte {i} is {b:#x}, wrote {:#x}", pattern(root, i))),
        None => Ok(()),
    }
}

/// The helper's body, run in a foreign pid namespace.
fn helper(name: &str, base: usize) -> Result<(), String> {
    let heap = Heap::open(name).map_err(|e| e.to_string())?;
    let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::new();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Arc::new(std::sync::Mutex::new(go_rx));
    for t in 0..THREADS {
        let heap = heap.clone();
        let tx = tx.clone();
        let go_rx = go_rx.clone();
        threads.push(std::thread::spawn(move || -> Result<(), String> {
            let th = match heap.attach() {
                Ok(th) => th,
                Err(e) => {
                    let _ = tx.send(Err(format!("attach: {e}")));
                    return Err(e.to_string());
                }
            };
            let filled = (|| -> Result<(), String> {
                for (b, &size) in SIZES.iter().enumerate() {
                    let root = root_of(base, t, b);
                    let p = th.alloc(size).map_err(|e| e.to_string())?;
                    // SAFETY: a fresh block of `size` bytes.
                    let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), size) };
                    for (i, byte) in bytes.iter_mut().enumerate() {
                        *byte = pattern(root, i);
                    }
                    let off = heap.offset_of(p.as_ptr()).map_err(|e| e.to_string())?;
                    heap.root(root).ok_or("no root")?.store(off.raw(), std::sync::atomic::Ordering::Release);
                }
                Ok(())
            })();
            let _ = tx.send(filled.clone());
            filled?;
            // Hold the slot until the parent lets go.
            let _ = go_rx.lock().map_err(|e| e.to_string())?.recv();
            for b in 0..SIZES.len() {
                let root = root_of(base, t, b);
                check_block(&heap, root)?;
                let raw = heap.root(root).ok_or("no root")?.swap(0, std::sync::atomic::Ordering::AcqRel);
                let p = heap.pointer::<u8>(cxlalloc::Offset::from_raw(raw)).map_err(|e| e.to_string())?;
                th.free(p).map_err(|e| e.to_string())?;
            }
            Ok(())
        }));
    }
    drop(tx);
    for _ in 0..THREADS {
        rx.recv_timeout(Duration::from_secs(60)).map_err(|e| format!("a thread did not get ready: {e}"))??;
    }
    println!("ready {}", heap.host_id().map_or(u16::MAX, |h| h));
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    for _ in 0..THREADS {
        go_tx.send(()).map_err(|e| e.to_string())?;
    }
    for t in threads {
        t.join().map_err(|_| "a thread panicked".to_string())??;
    }
    Ok(())
}

/// Not a test of its own: the helper's entry when `CXLALLOC_HOST_HELPER` names a heap.
#[test]
fn holder_in_namespace() {
    if let Ok(arg) = std::env::var(HELPER_ENV) {
        let (name, base) = arg.rsplit_once(':').unwrap_or((&arg, "0"));
        if let Err(e) = helper(name, base.parse().unwrap_or(0)) {
            eprintln!("helper: {e}");
            std::process::exit(1);
        }
    }
}

/// A helper holding `THREADS` slots of heap `name` from a fresh pid namespace; `host` is its
/// host id once it is ready.
struct Foreign {
    child: Child,
    host: u16,
}

impl Foreign {
    fn start(name: &str, root_base: usize) -> Foreign {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new("unshare");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            cmd.args(["--user", "--map-root-user"]);
        }
        cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .arg(exe)
            .args(["--exact", "holder_in_namespace", "--nocapture", "--test-threads=1"])
            .env(HELPER_ENV, format!("{name}:{root_base}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("unshare (util-linux) runs");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // The harness prints the test's name on the same line first.
                if let Some((_, id)) = line.split_once("ready ") {
                    let _ = tx.send(id.trim().parse::<u16>().ok());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(host)) => Foreign { child, host },
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the helper in a fresh pid namespace did not get ready: {other:?}");
            }
        }
    }

    /// Lets the helper check and free its blocks and exit; true if it succeeded.
    fn finish(mut self) -> bool {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return false;
                }
            }
        }
    }

    /// Kills the whole namespace: `unshare --kill-child` takes its child (the namespace's
    /// init) down with it, and the kernel kills the rest of the namespace.
    fn kill(mut self) {
        // Keep its stdin open until it is dead: `Child::wait` closes stdin first, and the
        // helper takes end of input as "check and free your blocks".
        let stdin = self.child.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
        // unshare has exited, so the kernel has queued the helper's SIGKILL: it runs no more
        // user code, whatever it reads now.
        drop(stdin);
    }
}

#[test]
fn holders_in_another_pid_namespace_are_never_listed_dead_adopted_or_recovered() {
    let _serial = common::serial();
    let name = HeapName::new("hosts-foreign");
    let heap = Heap::create(name.as_str(), &config()).expect("create");
    // Two foreign domains fill every slot.
    let a = Foreign::start(name.as_str(), 0);
    let b = Foreign::start(name.as_str(), HELPER_ROOTS);
    assert_ne!(a.host, b.host, "two pid namespaces are two hosts");
    assert_ne!(a.host, heap.host_id().expect("registered at open"));
    assert!(heap.dead_slots().is_empty(), "a foreign holder was listed dead");
    assert!(heap.recovery_plan().is_empty(), "a foreign holder was planned for recovery");
    assert!(heap.recover_dead().is_empty(), "a foreign holder was recovered");
    match heap.attach() {
        Err(AttachError::SlotsExhausted { slots: 8, dead: 0 }) => {}
        other => panic!("attach with every slot held by live foreign holders gave {other:?}"),
    }
    let slots = heap.slots();
    assert_eq!(slots.len(), 8);
    for s in &slots {
        assert!(s.alive && !s.local, "slot {} listed as {s:?}", s.slot);
        assert!(s.host == a.host || s.host == b.host);
        match heap.adopt(s.slot) {
            Err(AdoptError::ForeignHost { host, .. }) if host == s.host => {}
            other => panic!("adopt of a foreign holder's slot {} gave {:?}", s.slot, other.map(|(_, r)| r)),
        }
    }
    let info = Heap::info(name.as_str()).expect("info");
    assert_eq!(info.dead_holders(), 0, "the read-only survey listed a foreign holder dead");
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    assert!(a.finish() && b.finish(), "a helper found its blocks changed");
    let report = heap.check();
    assert!(report.is_clean() && report.live_blocks() == 0, "{report}");
}

#[test]
fn a_dead_hosts_slots_are_recovered_only_once_it_is_declared_dead() {
    let _serial = common::serial();
    let name = HeapName::new("hosts-dead");
    let heap = Heap::create(name.as_str(), &config()).expect("create");
    let foreign = Foreign::start(name.as_str(), 0);
    let host = foreign.host;
    foreign.kill();
    // Its holders are gone, but this host cannot see that: they stay alive until declared dead.
    assert!(heap.dead_slots().is_empty());
    assert!(heap.recover_dead().is_empty());
    assert_eq!(heap.slots().len(), THREADS);
    let own = heap.host_id().expect("registered at open");
    assert_eq!(heap.recover_host(own, domain_of(&heap, own)).err(), Some(RecoverHostError::OwnHost(own)));
    let domain = domain_of(&heap, host);
    let done = heap.recover_host(host, domain).expect("recover_host");
    assert_eq!(done.declared, vec![host]);
    assert_eq!(done.reports.len(), THREADS, "{done:?}");
    assert!(done.remaining.is_empty(), "{done:?}");
    assert_eq!(done.released, vec![host], "the empty host's entry is freed");
    assert!(heap.slots().is_empty());
    assert!(heap.hosts().iter().all(|h| h.id != host));
    // Nothing lost: every block the dead host allocated is intact, and frees cleanly.
    let t = heap.attach().expect("attach");
    for root in 0..HELPER_ROOTS {
        check_block(&heap, root).unwrap_or_else(|e| panic!("{e}"));
        let raw = heap.root(root).expect("root").swap(0, std::sync::atomic::Ordering::AcqRel);
        t.free(heap.pointer::<u8>(cxlalloc::Offset::from_raw(raw)).expect("pointer")).expect("free");
    }
    drop(t);
    let report = heap.check();
    assert!(report.is_clean() && report.live_blocks() == 0, "{report}");
    assert_eq!(heap.recover_host(host, domain).err(), Some(RecoverHostError::NoSuchHost(host)));
}

/// The domain fingerprint `heap` lists for host `id` (0 if it lists none).
fn domain_of(heap: &Heap, id: u16) -> u64 {
    heap.hosts().iter().find(|h| h.id == id).map_or(0, |h| h.domain)
}

#[test]
fn a_recovered_hosts_entry_claimed_again_is_not_declared_by_its_old_name() {
    let _serial = common::serial();
    let name = HeapName::new("hosts-reused");
    let heap = Heap::create(name.as_str(), &config()).expect("create");
    let gone = Foreign::start(name.as_str(), 0);
    let (host, domain) = (gone.host, domain_of(&heap, gone.host));
    gone.kill();
    assert_eq!(heap.recover_host(host, domain).expect("recover_host").released, vec![host]);
    // Another namespace (another host) claims the freed entry; the operator repeats the
    // recovery with the name listed before.
    let innocent = Foreign::start(name.as_str(), HELPER_ROOTS);
    assert_eq!(innocent.host, host, "the freed entry is the first free one");
    let found = domain_of(&heap, host);
    assert_ne!(found, domain);
    assert_eq!(heap.recover_host(host, domain).err(), Some(RecoverHostError::Reused { host, named: domain, found }));
    assert!(heap.hosts().iter().any(|h| h.id == host && !h.declared_dead), "the innocent host stays live");
    assert!(innocent.finish(), "the innocent host's workload ran undisturbed");
}

#[test]
fn a_host_sees_itself_and_the_others_in_the_host_table() {
    let _serial = common::serial();
    let name = HeapName::new("hosts-table");
    let heap = Heap::create(name.as_str(), &config()).expect("create");
    let again = Heap::open(name.as_str()).expect("open");
    assert_eq!(
        heap.host_id().expect("registered at open"),
        again.host_id().expect("registered at open"),
        "one domain registers once"
    );
    let foreign = Foreign::start(name.as_str(), 0);
    let hosts = heap.hosts();
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    let me = hosts.iter().find(|h| h.id == heap.host_id().expect("registered at open")).expect("own entry");
    let other = hosts.iter().find(|h| h.id == foreign.host).expect("foreign entry");
    assert!(me.own && !other.own && !other.declared_dead);
    assert!(other.silent_for.is_some_and(|s| s < 60), "{other:?}");
    assert!(foreign.finish());
}

/// A recoverer that dies after declaring the host dead, or after recovering some of its slots,
/// is followed by another run that recovers the rest (each step is idempotent). Needs the
/// `crash-points` feature: `cargo test -p cxlalloc --features crash-points --test hosts`.
#[cfg(feature = "crash-points")]
#[test]
fn a_host_recovery_cut_short_by_a_crash_is_finished_by_the_next_run() {
    let _serial = common::serial();
    for point in ["RecoveryHostDeclared", "RecoveryHostSlot@1"] {
        let name = HeapName::new("hosts-crash");
        let heap = Heap::create(name.as_str(), &config()).expect("create");
        let foreign = Foreign::start(name.as_str(), 0);
        let host = foreign.host;
        let domain = domain_of(&heap, host);
        foreign.kill();
        let heap_name = name.as_str().to_string();
        let mut child = common::fork_code(point, move || {
            cxlalloc::internal::crash::arm(point);
            match Heap::open(&heap_name) {
                Ok(h) => {
                    let _ = h.recover_host(host, domain);
                    0
                }
                Err(_) => common::EXIT_FAILED,
            }
        });
        assert_eq!(child.killed_by(), nix::sys::signal::Signal::SIGKILL, "{point} not reached");
        assert!(heap.hosts().iter().any(|h| h.id == host && h.declared_dead), "{point}: not declared");
        // The next run recovers what is left: every slot, or all but the one recovered (and
        // released) before the crash.
        let done = heap.recover_host(host, domain).expect("recover_host again");
        let expected = if point.starts_with("RecoveryHostSlot") { THREADS - 2 } else { THREADS };
        assert_eq!(done.reports.len(), expected, "{point}: {done:?}");
        assert!(done.remaining.is_empty() && done.released == vec![host], "{point}: {done:?}");
        assert!(heap.recover_dead().is_empty(), "{point}: the dead recoverer left a slot");
        let t = heap.attach().expect("attach");
        for root in 0..HELPER_ROOTS {
            check_block(&heap, root).unwrap_or_else(|e| panic!("{point}: {e}"));
            let raw = heap.root(root).expect("root").swap(0, std::sync::atomic::Ordering::AcqRel);
            t.free(heap.pointer::<u8>(cxlalloc::Offset::from_raw(raw)).expect("pointer")).expect("free");
        }
        drop(t);
        let report = heap.check();
        assert!(report.is_clean() && report.live_blocks() == 0, "{point}: {report}");
    }
}
