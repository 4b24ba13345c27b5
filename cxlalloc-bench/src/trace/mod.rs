//! Twitter cache-trace input for the memcached benchmark (docs/design.md §12.2).
//!
//! - [`record`]: one [`Request`] (timestamp, key bytes, key size, value size, client id, [`Op`],
//!   TTL) — one line of the public traces' 7-column CSV.
//! - [`reader`]: a streaming reader of that CSV with typed, line-numbered errors; [`open`] refuses
//!   zstd-compressed files with a message saying to decompress them first.
//! - [`writer`]: writes the same CSV, so a synthetic trace can be saved and read back.
//! - [`synthetic`]: a deterministic, seeded [`Generator`] per [`Cluster`] (MC-12, MC-15, MC-31,
//!   MC-37) calibrated to the table of docs/design.md §12.2; the model and its calibration are in that
//!   module's docs.
//! - [`stats`]: [`TraceStats`], the table's quantities measured over any trace.
//!
//! Layers, lowest first: `rng` (a private xoshiro256** PRNG), [`calibrate`], [`record`] →
//! [`reader`], [`writer`], [`stats`], [`synthetic`].

pub mod calibrate;
pub mod reader;
pub mod record;
mod rng;
pub mod stats;
pub mod synthetic;
pub mod writer;

pub use reader::{open, OpenError, ReadError, TraceReader};
pub use record::{Op, Request};
pub use stats::TraceStats;
pub use synthetic::{Calibration, Cluster, Generator, Profile};
pub use writer::TraceWriter;
