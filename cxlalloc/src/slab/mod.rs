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
//! "Local-sized" includes the class's *current* slab, whose next free bits are cached in the
//! owner's record (`thread::record::Current`). Full description: docs/design.md §4.
//!
//! # Transitions
//!
//! ```text
//!                  T1                     T3                    T4
//!   Untouched ────────────▶ ┌─────────┐ ─────▶ ┌──────────┐ ─────▶ Detached ───┐
//!                           │ Local-  │        │  Local-  │ ◀───── Detached    │
//!   Global ──── T2 ───────▶ │ unsized │ ◀───── │ sized[c] │   T6               │
//!          ◀─── T9 ──────── └─────────┘   T7   └──────────┘ ─────▶ Disowned ───┤
//!                                ▲                          T5, abandon         │
//!                                └──────── T8: the last remote free ────────────┘
//!                                          claims the slab for the freer
//!   T10: a remote free that is not the last; no state change.
//! ```
//!
//! Every transition but T10 is logged in the slot's redo word first (the `Op` named; see
//! `thread::redo`). All functions are methods of [`ops::SlabThread`].
//!
//! | # | from → to | who | function (`Op`) |
//! | --- | --- | --- | --- |
//! | T1 | Untouched → Local-unsized | a refill finding no unsized, reclaimable or global slab | `bump` (`Bump`) |
//! | T2 | Global → Local-unsized | a refill finding no unsized slab | `global_pop` (`GlobalPop`) |
//! | T3 | Local-unsized → Local-sized | the owner, for a class with no current and no sized slab | `next_current` (`Size`) |
//! | T4 | Local-sized → Detached | the owner's allocation of the last free block, remote counter untouched | `retire` (`Retire`) |
//! | T5 | Local-sized → Disowned | the same, counter below the block count | `retire` (`Retire`, flagged) |
//! | T6 | Detached → Local-sized | the owner's free of a block of its full slab | `after_local_free` (`LocalFree`) |
//! | T7 | Local-sized → Local-unsized | the owner's free that returns the last block to the bitset; a refill finding a slab whose blocks all came back, some remotely | `after_local_free` (`LocalFree`), `reclaim_empty_sized` (`Reclaim`) |
//! | T8 | Detached / Disowned → freer's Local-unsized | the remote free (or batch) taking the counter to 0 | `free_remote`, `apply_batch` → `claim` (`RemoteFree`, flagged) |
//! | T9 | Local-unsized → Global | an owner caching more than `cache_local` empty slabs, or detaching | `trim_cache`, `drain_unsized` → `release_unsized` (`GlobalPush`) |
//! | T10 | none | a counted remote free that is not the last | `free_remote`, `free_batched` (`RemoteFree`) |
//! | T11 | none | a remote free to a live owner's mailbox; its harvest returns the block as a local free | `free_to_mailbox` (`MailboxPush`), `take_mailbox` (`Harvest`) |
//!
//! Outside the numbered transitions: `take_word` (`TakeWord`) moves a bitset word into the
//! current-slab cache and `return_cached_word` moves it back; `abandon` (`Abandon`) disowns a
//! partly used slab when its owner detaches, subtracting its free blocks from the remote counter
//! so that the last remote free claims it (T8).

pub(crate) mod ops;
