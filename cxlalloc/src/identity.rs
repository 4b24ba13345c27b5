//! Who holds a thread slot, and whether that holder is still alive.
//!
//! A holder is `{pid, host, process start time}`; the start time (clock ticks since boot) tells
//! a live holder from an unrelated process that reused its pid. This module judges only holders
//! of the calling process's own domain ([`domain`]), from its `/proc`; which holders those are
//! is the host table's business (docs/design.md §8.6).

use crate::sync::{AtomicU64, Ordering};

use crate::word::Holder;

/// A process as `/proc/PID/stat` shows it.
struct ProcStat {
    /// Field 3: R, S, D, Z (zombie), X (dead), ...
    state: char,
    /// Field 22: start time in clock ticks since boot.
    start: u64,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses; fields resume after the
    // last ')'. Field 3 is the first after it, so field 22 is the 20th.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let start = rest.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start })
}

fn start_low(start: u64) -> u32 {
    (start as u32).max(1)
}

/// The identity of the calling process, on host `host` (its entry in the heap's host table).
pub(crate) fn current(host: u16) -> Holder {
    let pid = std::process::id();
    let start = proc_stat(pid).map_or(1, |p| start_low(p.start));
    Holder { pid, host, start }
}

/// FNV-1a, 64-bit: a fingerprint that every build computes the same way (unlike std's
/// `DefaultHasher`), so that processes built apart agree on a domain.
fn fnv1a(bytes: &[u8], mut hash: u64) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    hash
}

/// The fingerprint of a domain from its parts: the kernel's boot id, the machine id and the
/// pid namespace (as `readlink /proc/self/ns/pid` shows it). Each part is length-prefixed so
/// that no two different triples run together into the same bytes.
pub(crate) fn fingerprint(boot_id: &str, machine_id: &str, pid_ns: &str) -> u64 {
    [boot_id, machine_id, pid_ns].iter().fold(0xcbf2_9ce4_8422_2325, |h, part| {
        let h = fnv1a(&(part.len() as u64).to_le_bytes(), h);
        fnv1a(part.as_bytes(), h)
    })
}

/// The calling process's domain (docs/design.md §8.6): the set of processes whose liveness its
/// `/proc` can judge. Two processes share it when they run on one kernel boot of one machine in
/// one pid namespace; a container with a pid namespace of its own is a domain of its own, and so
/// is each virtual host of a pod. Computed once per process and cached under its pid: a process
/// cannot change its own pid namespace (`unshare(CLONE_NEWPID)` changes only its children's),
/// but a child forked after such an `unshare` inherits the cache and lives in another domain, and
/// its new pid tells it to compute its own.
pub(crate) fn domain() -> u64 {
    // The pid is stored after the value (Release) and read before it (Acquire), so a matching
    // pid guarantees the value beside it; two threads that race both compute the same value.
    static CACHED_PID: AtomicU64 = AtomicU64::new(0);
    static CACHED: AtomicU64 = AtomicU64::new(0);
    let pid = u64::from(std::process::id());
    if CACHED_PID.load(Ordering::Acquire) == pid {
        return CACHED.load(Ordering::Relaxed);
    }
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let pid_ns = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default();
    let machine = match read("/etc/machine-id") {
        m if m.is_empty() => read("/var/lib/dbus/machine-id"),
        m => m,
    };
    let domain = fingerprint(&read("/proc/sys/kernel/random/boot_id"), &machine, &pid_ns);
    CACHED.store(domain, Ordering::Relaxed);
    CACHED_PID.store(pid, Ordering::Release);
    domain
}

/// The fingerprint of the running kernel: its boot id (`/proc/sys/kernel/random/boot_id`),
/// hashed as [`fingerprint`] hashes it, never 0. Two processes share it exactly when their byte
/// locks on a file see each other (one kernel, one boot); the mCAS window's host-number claims
/// record it (docs/design.md §9.2). A forked child may [`pretend_kernel`] to be another (tests).
pub(crate) fn kernel() -> u64 {
    // Relaxed: set once by a test before the process opens any heap.
    match PRETEND_KERNEL.load(Ordering::Relaxed) {
        0 => kernel_of(&std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default()),
        fake => fake,
    }
}

/// The kernel fingerprint of boot id `boot_id` (surrounding white space ignored): never 0, which
/// marks a free claim.
pub(crate) fn kernel_of(boot_id: &str) -> u64 {
    fnv1a(boot_id.trim().as_bytes(), 0xcbf2_9ce4_8422_2325).max(1)
}

/// A kernel fingerprint this process uses instead of its kernel's (0: none).
static PRETEND_KERNEL: AtomicU64 = AtomicU64::new(0);

/// Tests only: makes this process report kernel fingerprint [`kernel_of`]`(boot_id)` instead of
/// its kernel's, so that a forked child plays a host with another kernel (whose byte locks,
/// on a real pod, would not see this kernel's). Production code never calls it.
pub(crate) fn pretend_kernel(boot_id: &str) {
    PRETEND_KERNEL.store(kernel_of(boot_id), Ordering::Relaxed);
}

/// `name`, cut to 32 bytes (at a character boundary), as four little-endian words: a host's
/// name as the host table and the mCAS window's claims keep it (advice).
pub(crate) fn name_words(name: &str) -> [u64; 4] {
    let mut end = name.len().min(32);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let mut bytes = [0u8; 32];
    bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
    std::array::from_fn(|i| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    })
}

/// The name that [`name_words`] stored (up to its first zero byte; invalid UTF-8 replaced).
pub(crate) fn name_of(words: [u64; 4]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// This machine's name (`uname -n`), for the host table's advice.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The kernel thread id of the calling thread.
pub(crate) fn current_tid() -> u64 {
    nix::unistd::gettid().as_raw() as u64
}

/// Whether `holder`, a holder of the calling process's own domain, still names a live process
/// (the one that took the lease). A zombie — killed but not yet reaped by its parent — is dead:
/// it will never touch the heap again. Meaningless for a holder of another domain: its pid
/// names nothing in this `/proc`.
pub(crate) fn is_alive_here(holder: Holder) -> bool {
    proc_stat(holder.pid).is_some_and(|p| {
        start_low(p.start) == holder.start && (!matches!(p.state, 'Z' | 'X' | 'x') || other_threads_run(holder.pid))
    })
}

/// Whether a process whose leader thread is a zombie still has running threads: a leader that
/// called `pthread_exit` shows `Z` while the rest of the process goes on.
fn other_threads_run(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|d| d.count() > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn holder_of(pid: u32) -> Holder {
        Holder { pid, host: 0, start: proc_stat(pid).map_or(1, |p| start_low(p.start)) }
    }

    #[test]
    fn this_process_is_alive() {
        assert!(is_alive_here(current(0)));
    }

    #[test]
    fn a_reused_pid_with_another_start_time_is_dead() {
        let mut me = current(0);
        me.start = me.start.wrapping_add(12345).max(1);
        assert!(!is_alive_here(me));
    }

    #[test]
    fn domain_parts_do_not_run_together() {
        assert_ne!(fingerprint("ab", "c", "d"), fingerprint("a", "bc", "d"));
        assert_ne!(fingerprint("b", "m", "pid:[1]"), fingerprint("b", "m", "pid:[2]"));
        assert_eq!(fingerprint("b", "m", "pid:[1]"), fingerprint("b", "m", "pid:[1]"));
    }

    #[test]
    fn a_kernel_fingerprint_ignores_white_space_and_is_never_zero() {
        assert_eq!(kernel_of("abc\n"), kernel_of("abc"));
        assert_ne!(kernel_of("abc"), kernel_of("abd"));
        assert_ne!(kernel_of(""), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot read /proc")]
    fn the_domain_is_stable_within_a_process() {
        assert_eq!(domain(), domain());
    }

    /// Runs in a grandchild forked after its parent moved its children into a new pid
    /// namespace; exit status 0 when its domain differs from the one the parent cached.
    fn domain_after_unshare_differs() -> i32 {
        let parent = domain();
        // SAFETY: unshare only changes the namespace this process's later children get.
        if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
            return 2;
        }
        // SAFETY: the child only computes a fingerprint and exits without returning.
        match unsafe { libc::fork() } {
            0 => {
                let code = if domain() != parent { 0 } else { 1 };
                // SAFETY: _exit ends the forked child at once, running no test-harness code.
                unsafe { libc::_exit(code) }
            }
            -1 => 3,
            child => {
                let mut status = 0;
                // SAFETY: `child` is this process's own child; `status` is writable.
                if unsafe { libc::waitpid(child, &mut status, 0) } != child || !libc::WIFEXITED(status) {
                    return 4;
                }
                libc::WEXITSTATUS(status)
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot spawn processes")]
    fn a_child_forked_into_a_new_pid_namespace_has_a_domain_of_its_own() -> TestResult {
        // The unshare happens in a process of its own (this test binary again, with the
        // environment variable set), so that the test process keeps its namespace.
        const ENV: &str = "CXLALLOC_DOMAIN_UNSHARE";
        if std::env::var_os(ENV).is_some() {
            std::process::exit(domain_after_unshare_differs());
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: creating a pid namespace needs root");
            return Ok(());
        }
        let status = std::process::Command::new(std::env::current_exe()?)
            .args(["--exact", "identity::tests::a_child_forked_into_a_new_pid_namespace_has_a_domain_of_its_own"])
            .args(["--nocapture", "--test-threads=1"])
            .env(ENV, "1")
            .status()?;
        assert_eq!(status.code(), Some(0), "0: new domain, 1: the parent's domain, 2..4: setup failed");
        Ok(())
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot spawn processes")]
    fn an_exited_child_is_dead() -> TestResult {
        let mut child = std::process::Command::new("true").spawn()?;
        let holder = holder_of(child.id());
        child.wait()?;
        assert!(!is_alive_here(holder));
        Ok(())
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot spawn processes")]
    fn a_zombie_is_dead() -> TestResult {
        let mut child = std::process::Command::new("true").spawn()?;
        let pid = child.id();
        let holder = holder_of(pid);
        // Wait for it to exit without reaping it.
        while proc_stat(pid).is_some_and(|p| p.state != 'Z') {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!is_alive_here(holder));
        child.wait()?;
        Ok(())
    }
}
