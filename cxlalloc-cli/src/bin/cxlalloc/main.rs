//! `cxlalloc`: list, create, inspect, check, show statistics of, recover and unlink heaps.
//!
//! A heap is named by `NAME` (the heap `/dev/shm/cxlalloc.NAME`, see `Heap::check_name`) or by
//! `--at DIR` (a heap directory anywhere); a name is never read as a path.

mod cli;
mod json;
mod out;

fn main() -> std::process::ExitCode {
    cli::main()
}
