//! Who holds a thread slot, and whether that holder is still alive.
//!
//! A holder is `{pid, process start time}`; the start time (clock ticks since boot) tells a live
//! holder from an unrelated process that reused its pid.

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

/// The identity of the calling process.
pub(crate) fn current() -> Holder {
    let pid = std::process::id();
    let start = proc_stat(pid).map_or(1, |p| start_low(p.start));
    Holder { pid, start }
}

/// The kernel thread id of the calling thread.
pub(crate) fn current_tid() -> u64 {
    nix::unistd::gettid().as_raw() as u64
}

/// Whether `holder` still names a live process (the one that took the lease). A zombie — killed
/// but not yet reaped by its parent — is dead: it will never touch the heap again.
pub(crate) fn is_alive(holder: Holder) -> bool {
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
        Holder { pid, start: proc_stat(pid).map_or(1, |p| start_low(p.start)) }
    }

    #[test]
    fn this_process_is_alive() {
        assert!(is_alive(current()));
    }

    #[test]
    fn a_reused_pid_with_another_start_time_is_dead() {
        let mut me = current();
        me.start = me.start.wrapping_add(12345).max(1);
        assert!(!is_alive(me));
    }

    #[test]
    #[cfg_attr(miri, ignore = "miri cannot spawn processes")]
    fn an_exited_child_is_dead() -> TestResult {
        let mut child = std::process::Command::new("true").spawn()?;
        let holder = holder_of(child.id());
        child.wait()?;
        assert!(!is_alive(holder));
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
        assert!(!is_alive(holder));
        child.wait()?;
        Ok(())
    }
}
