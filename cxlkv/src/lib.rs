//! cxlkv: a memcached whose worker processes all serve one table in one cxlalloc heap, so that
//! any worker can be killed at any instruction while the others go on serving every write it
//! acknowledged (docs/design.md §16).
//!
//! Modules, lowest first (each uses only those above it): [`detect`] (the detectable publish,
//! model-checked with loom), [`epoch`] (the epoch step of reclamation, shared with the
//! benchmark's KV table), [`error`], [`crash`] (crash points), [`layout`] (what lives in the heap, and checked access to it), [`store`] (the table's
//! operations, reclamation and recovery), [`protocol`] (the memcached text protocol),
//! [`server`] (a worker's event loop), [`supervisor`] (starts and restarts the workers).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

// Under `--cfg loom` only the model-checked protocol is built (tests/loom.rs).
pub mod detect;
pub mod epoch;

#[cfg(not(loom))]
pub mod crash;
#[cfg(not(loom))]
pub mod error;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
pub mod protocol;
#[cfg(not(loom))]
pub mod server;
#[cfg(not(loom))]
pub mod store;
#[cfg(not(loom))]
pub mod supervisor;
