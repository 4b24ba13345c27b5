//! White-box crash points (cargo feature `crash-points`, off in normal builds, where every
//! point compiles to nothing).
//!
//! A point is a named step between an operation's log write and its completion. A process
//! arms one point, by `arm` (with the feature) or by the environment variable `CXLALLOC_CRASH_AT`
//! (`SITE[/OP[+]][@SKIP]`: the site, the logged operation it must be inside, `+` for the
//! flagged form of that record, and how many hits to let pass first). The armed hit kills the
//! process with `SIGKILL`: a real process death at that instruction, no unwinding, no
//! destructor, no flush. [`POINTS`] lists every point, for tests that enumerate them.

#[cfg(feature = "crash-points")]
use std::sync::OnceLock;

#[cfg(feature = "crash-points")]
use crate::sync::{AtomicPtr, AtomicU64, Ordering};

/// Every crash point, as `SITE` or `SITE/OP` (`+`: the flagged record). Sites inside every
/// logged operation (`Logged`, `BeforeClear`) appear once per operation form.
pub const POINTS: &[&str] = &[
    "Logged/Bump",
    "Bumped",
    "BeforeClear/Bump",
    "Logged/GlobalPop",
    "GlobalPopped",
    "PopChainOwned",
    "BeforeClear/GlobalPop",
    "Logged/Size",
    "SizeMarked",
    "SizeCounted",
    "Logged/TakeWord",
    "BeforeClear/TakeWord",
    "Logged/TakeWord+",
    "BeforeClear/TakeWord+",
    "LocalFreeBitSet",
    "Logged/LocalFree",
    "BeforeClear/LocalFree",
    "Logged/Retire",
    "Logged/Retire+",
    "BeforeClear/Retire",
    "BeforeClear/Retire+",
    "Logged/RemoteFree",
    "RemoteFreeMarked",
    "BeforeClear/RemoteFree",
    "Logged/RemoteFree+",
    "BeforeClear/RemoteFree+",
    "RemoteBatched",
    "RemoteBatchMarked",
    "Logged/MailboxPush",
    "MailboxClaimed",
    "BeforeClear/MailboxPush",
    "Logged/Harvest",
    "HarvestTaken",
    "BeforeClear/Harvest",
    "HarvestReturned",
    "HarvestCleared",
    "Logged/Harvest+",
    "BeforeClear/Harvest+",
    "Logged/GlobalPush",
    "PushDisowned",
    "PushChainDisowned",
    "BeforeClear/GlobalPush",
    "Logged/Abandon",
    "AbandonDisowned",
    "BeforeClear/Abandon",
    "Logged/Abandon+",
    "BeforeClear/Abandon+",
    "Logged/Reclaim",
    "BeforeClear/Reclaim",
    "AllocAnnounced",
    "AllocTaken",
    "AllocStored",
    "FreeAnnounced",
    "FreeCleared",
    "FreeDone",
    "HugeAnnounced",
    "HugeLinked",
    "HugeBacked",
    "HugeFreeAnnounced",
    "HugeFreeMarked",
    "HugeReclaimAnnounced",
    "HugeObjectRemoved",
    "HugeUnlinked",
    "HugeCached",
    "HugeReuseAnnounced",
    "HugeReused",
    "HugeReleasing",
    "HugeObjectReleased",
    "RecoveryResolved",
    "RecoveryRebuilt",
    "RecoveryHostDeclared",
    "RecoveryHostSlot",
];

/// Marks a crash point (see the module docs); nothing unless the `crash-points` feature is on.
macro_rules! crash_point {
    ($site:ident) => {
        #[cfg(feature = "crash-points")]
        $crate::crash::hit(stringify!($site), "", false)
    };
    ($site:ident, $op:expr, $flag:expr) => {
        #[cfg(feature = "crash-points")]
        $crate::crash::hit(stringify!($site), $op, $flag)
    };
}
pub(crate) use crash_point;

#[cfg(feature = "crash-points")]
struct Armed {
    site: String,
    op: String,
    flag: bool,
}

/// The point armed by the environment, read at the first hit.
#[cfg(feature = "crash-points")]
static FROM_ENV: OnceLock<Option<Armed>> = OnceLock::new();
/// The point armed by [`arm`], which takes precedence (a forked child arms after its parent
/// has read the environment).
#[cfg(feature = "crash-points")]
static ARMED: AtomicPtr<Armed> = AtomicPtr::new(std::ptr::null_mut());
#[cfg(feature = "crash-points")]
static SKIP: AtomicU64 = AtomicU64::new(0);

#[cfg(feature = "crash-points")]
fn parse(spec: &str) -> Armed {
    let (point, skip) = spec.split_once('@').unwrap_or((spec, "0"));
    SKIP.store(skip.parse().unwrap_or(0), Ordering::Relaxed);
    let (site, op) = point.split_once('/').unwrap_or((point, ""));
    let flag = op.ends_with('+');
    Armed { site: site.to_string(), op: op.trim_end_matches('+').to_string(), flag }
}

/// A pause armed by [`pause_at`] (one-shot: the first matching hit takes it), or null.
#[cfg(feature = "crash-points")]
static PAUSE: AtomicPtr<Armed> = AtomicPtr::new(std::ptr::null_mut());
/// [`PAUSE_IDLE`], [`PAUSE_HELD`] while a thread waits at the paused point, [`PAUSE_GO`] once
/// [`resume`] lets it go.
#[cfg(feature = "crash-points")]
static PAUSE_STATE: AtomicU64 = AtomicU64::new(PAUSE_IDLE);
#[cfg(feature = "crash-points")]
const PAUSE_IDLE: u64 = 0;
#[cfg(feature = "crash-points")]
const PAUSE_HELD: u64 = 1;
#[cfg(feature = "crash-points")]
const PAUSE_GO: u64 = 2;

/// Whether the armed `a` is this hit's point.
#[cfg(feature = "crash-points")]
fn names(a: &Armed, site: &str, op: &str, flag: bool) -> bool {
    a.site == site && (a.op.is_empty() || (a.op == op && a.flag == flag))
}

/// Arms a pause at `spec` (`SITE[/OP[+]]`) for this process: the first thread to hit that
/// point waits there until [`resume`], so that a test can run another thread's steps inside
/// the window the point names (a deterministic interleaving). One-shot; the kill armed by
/// [`arm`] is unaffected.
#[cfg(feature = "crash-points")]
pub fn pause_at(spec: &str) {
    let (site, op) = spec.split_once('/').unwrap_or((spec, ""));
    let flag = op.ends_with('+');
    let a = Armed { site: site.to_string(), op: op.trim_end_matches('+').to_string(), flag };
    PAUSE_STATE.store(PAUSE_IDLE, Ordering::Release);
    // Leaked on purpose, as `arm`'s: a hit may be reading the previous one.
    PAUSE.store(Box::into_raw(Box::new(a)), Ordering::Release);
}

/// Whether a thread waits at the point armed by [`pause_at`].
#[cfg(feature = "crash-points")]
pub fn paused() -> bool {
    PAUSE_STATE.load(Ordering::Acquire) == PAUSE_HELD
}

/// Lets the thread waiting at the paused point go on.
#[cfg(feature = "crash-points")]
pub fn resume() {
    // Release: what the test did meanwhile is visible to the resumed thread.
    PAUSE_STATE.store(PAUSE_GO, Ordering::Release);
}

/// The pause of [`pause_at`], if this hit is its point: waits for [`resume`].
#[cfg(feature = "crash-points")]
fn pause(site: &str, op: &str, flag: bool) {
    let p = PAUSE.load(Ordering::Acquire);
    // SAFETY: a non-null PAUSE points to a leaked, never freed Armed.
    let Some(a) = (unsafe { p.as_ref() }) else { return };
    // One-shot: taken by one CAS, so a nested hit (the test's own steps) or another thread
    // passes on.
    if !names(a, site, op, flag)
        || PAUSE.compare_exchange(p, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Relaxed).is_err()
    {
        return;
    }
    PAUSE_STATE.store(PAUSE_HELD, Ordering::Release);
    while PAUSE_STATE.load(Ordering::Acquire) != PAUSE_GO {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Arms `spec` (`SITE[/OP[+]][@SKIP]`) for this process, replacing any point armed before.
#[cfg(feature = "crash-points")]
pub fn arm(spec: &str) {
    // Leaked on purpose: a test process arms a handful of points, and a hit may be reading
    // the previous one.
    ARMED.store(Box::into_raw(Box::new(parse(spec))), Ordering::Release);
}

/// A crash point was reached: dies here if it is the armed one and its skips are used up.
#[cfg(feature = "crash-points")]
pub(crate) fn hit(site: &str, op: &str, flag: bool) {
    pause(site, op, flag);
    let set = ARMED.load(Ordering::Acquire);
    // SAFETY: a non-null ARMED points to a leaked, never freed Armed.
    let a = match unsafe { set.as_ref() } {
        Some(a) => a,
        None => match FROM_ENV.get_or_init(|| std::env::var("CXLALLOC_CRASH_AT").ok().map(|s| parse(&s))) {
            Some(a) => a,
            None => return,
        },
    };
    if !names(a, site, op, flag) {
        return;
    }
    if SKIP.load(Ordering::Relaxed) > 0 {
        SKIP.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: kill and getpid have no memory preconditions; SIGKILL cannot be caught, so the
    // process ends here.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}
