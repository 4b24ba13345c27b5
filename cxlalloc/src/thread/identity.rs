//! Who holds a thread slot, and whether that holder is still alive.
//!
//! A holder is `{pid, process start time}`; the start time (clock ticks since boot) tells a live
//! holder from an unrelated process that reused its pid.

use crate::word::Holder;

/// Start time of process `pid` in clock ticks since boot (`/proc/PID/stat` field 22).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses; fields resume after the
    // last ')'. Field 3 is the first after it, so field 22 is the 20th.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The identity of the calling process.
pub fn current() -> Holder {
    let pid = std::process::id();
    let start = start_time(pid).map_or(1, |t| (t as u32).max(1));
    Holder { pid, start }
}

/// The kernel thread id of the calling thread.
pub fn current_tid() -> u64 {
    nix::unistd::gettid().as_raw() as u64
}

/// Whether `holder` still names a live process (the one that took the lease).
pub fn is_alive(holder: Holder) -> bool {
    let pid = nix::unistd::Pid::from_raw(holder.pid as i32);
    match nix::sys::signal::kill(pid, None) {
        Err(nix::errno::Errno::ESRCH) => false,
        _ => start_time(holder.pid).is_some_and(|t| (t as u32).max(1) == holder.start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn an_exited_child_is_dead() {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let holder = Holder { pid, start: start_time(pid).map_or(1, |t| (t as u32).max(1)) };
        let mut child = child;
        child.wait().unwrap();
        assert!(!is_alive(holder));
    }
}
