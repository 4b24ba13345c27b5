//! The lock-free protocols on HWcc words, written against [`crate::sync`] only so that the
//! `loom` models in `tests/loom.rs` check exactly the code the allocator runs.
//!
//! Each protocol is one CAS on one tagged word (the hazard entries: one CAS per publication). Callers supply closures for the parts that touch
//! SWcc descriptors (list links) and for writing the redo record before each CAS attempt.

pub mod cached_word;
pub mod detectable;
pub mod free_mark;
pub mod global_list;
pub mod hazard;
pub mod host;
pub mod host_number;
pub(crate) mod hw_word;
pub mod lease;
pub mod length;
pub mod mailbox;
pub mod registry;
pub mod remote;

pub use hw_word::HwWord;
