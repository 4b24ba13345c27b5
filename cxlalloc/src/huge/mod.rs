//! The huge heap (docs/design.md §7): allocations above the largest slab class (512 KiB), each backed
//! by its own object and mapped at the same offset in every process.
//!
//! - [`view`]: the process's view of the shared structures (claim array, descriptor lists,
//!   hazard sets) and the mapping system calls; async-signal-safe, used by the fault handler.
//! - [`crate::persist::huge`]: the per-allocation descriptor (a small-heap block).
//! - [`space`]: a thread's private free ranges, rebuilt at attach.
//! - [`ops`]: allocate, free, reclaim, sweep.
//!
//! Address space is claimed in 1 GiB huge slots (one HWcc word each, CAS'd by the claiming
//! thread slot), so two processes can never place allocations at the same offset (PC-S).
//! A process maps another's allocation on first touch, in the SIGSEGV handler (PC-T).
//! The threads of a process share its mappings: the hazard entries it published are its table
//! of installed ranges, and a thread changes a range's mapping only while it owns an entry
//! naming the block there, or while the block is live and it allocates or frees it
//! ([`crate::protocol::hazard`], docs/design.md §7.4).

pub(crate) mod ops;
pub(crate) mod space;
pub(crate) mod view;
