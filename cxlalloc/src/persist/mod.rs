//! Every type that lives in the heap's memory (`repr(C)`, made only of atomics and integers,
//! links stored as offsets or indices), in one layer below the code that maps and uses them.
//!
//! Each type's doc names its region and coherence class and who writes each field; each is
//! pinned in size by `const` assertions, because every process of every host must agree on it.
//!
//! - [`shared`]: the shared region (HWcc): per-bracket globals, thread-slot leases, roots.
//! - [`descriptor`]: a slab's local descriptor (SWcc): owner, class, links, free-block bitset.
//! - [`record`]: a thread slot's record (SWcc): slab lists, current slabs, counters, batches.
//! - [`redo`]: the redo and pending words inside the record, and their decoders.
//! - [`huge`]: a huge block's descriptor (a small-heap block).

pub(crate) mod descriptor;
pub(crate) mod huge;
pub(crate) mod record;
pub(crate) mod redo;
pub(crate) mod shared;
