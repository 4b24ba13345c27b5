//! The evaluation harness (docs/design.md §12.1): a driver expands a workload file into configurations
//! and runs one coordinator per configuration, which starts the worker processes that run the
//! benchmark threads and print one [`record::Record`] each.

pub mod backing;
pub mod coordinator;
pub mod crash;
pub mod driver;
pub mod job;
pub mod record;
pub mod table;
pub mod worker;
pub mod workload;
