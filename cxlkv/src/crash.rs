//! Crash points: named places in a write and in recovery where a test can have a worker kill
//! itself (`CXLKV_CRASH_POINT=NAME[:N]`: `SIGKILL` at the `N`th pass, default the first), so
//! that each recovery step is reached by a real crash (docs/design.md §16.4).
//!
//! Unarmed, a point costs one relaxed load. The supervisor gives the variable to the first
//! process of each worker index only, so a replacement does not crash at the same place; with
//! `A+B` the first process is armed with `A` and its replacement with `B` (recovery's own point
//! is reached that way: `swapped:20+recover-marked`).

use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms a point.
pub const ENV: &str = "CXLKV_CRASH_POINT";

/// The crash points, in the order a write passes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Point {
    /// The new item and array are allocated into the staged words; the log still says idle.
    Staged = 1,
    /// The log says prepared; the bucket CAS has not run.
    Prepared,
    /// The bucket CAS succeeded; the log still says prepared.
    Swapped,
    /// The log says published; nothing is retired yet.
    Published,
    /// The replaced blocks are on the retire ring; the staged words still hold the new blocks.
    Pushed,
    /// The bucket CAS failed and the log went back to idle; the staged blocks are not freed.
    Failed,
    /// A retired block was freed; the ring's head has not moved past it.
    Reclaimed,
    /// Recovery found the write published and marked the log so; nothing is retired yet.
    RecoverMarked,
}

impl Point {
    /// Every point.
    pub const ALL: [Point; 8] = [
        Point::Staged,
        Point::Prepared,
        Point::Swapped,
        Point::Published,
        Point::Pushed,
        Point::Failed,
        Point::Reclaimed,
        Point::RecoverMarked,
    ];

    /// The point's name in [`ENV`].
    pub fn name(self) -> &'static str {
        match self {
            Point::Staged => "staged",
            Point::Prepared => "prepared",
            Point::Swapped => "swapped",
            Point::Published => "published",
            Point::Pushed => "pushed",
            Point::Failed => "failed",
            Point::Reclaimed => "reclaimed",
            Point::RecoverMarked => "recover-marked",
        }
    }
}

/// The armed point (0 = none).
static ARMED: AtomicU64 = AtomicU64::new(0);
/// Passes left before the armed point fires.
static LEFT: AtomicU64 = AtomicU64::new(0);

/// Arms the point named in [`ENV`], if any; an unknown name is an error naming the known ones.
pub fn arm_from_env() -> Result<(), String> {
    let Ok(spec) = std::env::var(ENV) else { return Ok(()) };
    let (name, count) = spec.split_once(':').unwrap_or((&spec, "1"));
    let count: u64 = count.parse().map_err(|_| format!("{ENV}: bad count in '{spec}'"))?;
    let Some(p) = Point::ALL.iter().find(|p| p.name() == name) else {
        let known: Vec<_> = Point::ALL.iter().map(|p| p.name()).collect();
        return Err(format!("{ENV}: unknown point '{name}' (known: {})", known.join(", ")));
    };
    LEFT.store(count.max(1), Ordering::Relaxed);
    ARMED.store(*p as u64, Ordering::Relaxed);
    Ok(())
}

/// Passes point `p`: kills the process if it is armed and its count is reached.
#[inline]
pub fn hit(p: Point) {
    // Relaxed: one thread per worker process arms and passes the points.
    if ARMED.load(Ordering::Relaxed) == p as u64 && LEFT.fetch_sub(1, Ordering::Relaxed) == 1 {
        // SAFETY: getpid and kill have no memory-safety preconditions.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}
