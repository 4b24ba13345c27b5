//! What one mCAS request comes back with: an answer, or why there is none. Shared by the
//! client and every transport (window, registers, stand-in).

use std::time::Duration;

/// How long a client waits for an answer before reporting the device gone.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an mCAS failed (a compare mismatch is not an error: see [`Answer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McasError {
    /// The slot index is not one of the window's requesters.
    #[error("requester slot {slot} beyond the window's {slots}")]
    NoSuchSlot {
        /// The slot asked for.
        slot: u32,
        /// Requesters of the window.
        slots: u32,
    },
    /// The target is not an 8-aligned offset inside the target area.
    #[error("target {0:#x} is not an aligned word of the target area")]
    BadTarget(u64),
    /// The device answered with an error code (1: requester id, 3: target).
    #[error("device error {0}")]
    Device(u64),
    /// No answer within [`ANSWER_TIMEOUT`]: the server is gone or stuck.
    #[error("no answer from the mCAS device within {0:?}")]
    Timeout(Duration),
    /// The device's registers are the stand-in of another process (this one was forked from
    /// it): open the device again in this process.
    #[error("the mCAS stand-in serves process {0} only: open the device in this process")]
    ForeignProcess(u32),
}

/// A device's answer to one weak CAS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The word before the operation.
    pub prev: u64,
    /// Whether the swap happened. `!success && prev == expected` is a spurious failure (the
    /// conflict rule: another requester's CAS on the same word went first).
    pub success: bool,
}
