//! The small and large slab heaps: one state machine, generic over the bracket at run time.
//!
//! | state | list | owner |
//! | --- | --- | --- |
//! | Untouched | none (index ≥ length) | 0 |
//! | Global | global free list | 0 |
//! | Local-unsized | owner's unsized list | owner |
//! | Local-sized | owner's `sized[class]` | owner |
//! | Detached | none (full, no remote free yet) | owner |
//! | Disowned | none (full, some remote frees) | 0 |
//!
//! Transitions T1–T10 are documented where they are implemented, in [`ops`].

pub(crate) mod descriptor;
pub(crate) mod ops;
