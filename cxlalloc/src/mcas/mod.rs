//! mCAS (DESIGN §9.2): compare-and-swap executed by a near-memory unit, for devices without
//! hardware cache coherence. A requester writes its operands to a request slot and reads the
//! answer from its answer slot; the unit serializes CASes per word and fails competing ones.
//!
//! - [`window`]: the shared-memory window format (shared with the RTL co-simulation, `fpga/`);
//! - [`client`]: one requester's CAS through a window;
//! - [`device`]: the software mCAS device that serves a window (binary `cxlalloc-mcasd`).
//!
//! The same client speaks to the software device, to the RTL under co-simulation
//! (`fpga/cosim/mcas-cosim`), and — with the window's roles mapped onto a device's uncachable
//! ranges — to hardware.

pub mod client;
pub mod device;
pub mod window;

pub use client::{Answer, McasClient, McasError};
pub use window::{Geometry, Window, WindowError};
