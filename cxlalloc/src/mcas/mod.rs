//! mCAS (docs/design.md §9.2): compare-and-swap executed by a near-memory unit, for devices without
//! hardware cache coherence. A requester writes its operands to a request slot and reads the
//! answer from its answer slot; the unit serializes CASes per word and fails competing ones.
//!
//! - [`window`]: the shared-memory window format (shared with the RTL co-simulation, `fpga/`);
//! - [`answer`]: what a request comes back with (an answer or an error), for every transport;
//! - [`client`]: one requester's CAS through a window or a device;
//! - [`device`]: the software mCAS device that serves a window (binary `cxlalloc-mcasd`);
//! - [`spec`] and [`mmio`]: a hardware device, described by a file and driven through its
//!   uncachable register ranges (`movdir64b` request, 16-byte answer load);
//! - `standin` (feature `mcas-standin`): those registers served in-process by trapping the
//!   request writes and answer reads, for machines without the device.
//!
//! The same client speaks to the software device, to the RTL under co-simulation
//! (`fpga/cosim/mcas-cosim`), and to hardware.

pub(crate) mod answer;
pub(crate) mod client;
pub(crate) mod device;
pub(crate) mod mmio;
pub(crate) mod spec;
#[cfg(feature = "mcas-standin")]
pub(crate) mod standin;
pub(crate) mod window;

pub use answer::{Answer, McasError};
pub use client::{Link, McasClient};
pub use mmio::Device;
pub use spec::{DeviceSpec, MmioError, SpecError};
pub use window::{Geometry, HostClaim, Window, WindowError};
