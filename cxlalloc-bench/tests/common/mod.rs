//! What the harness tests share: a scratch directory with its own run root in /dev/shm (so
//! leftovers are attributable), and runs of the real `cxlalloc-bench` binary in it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cxlalloc_bench::harness::driver::read_records;
use cxlalloc_bench::harness::record::Record;

/// A test's files and its own run root, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// `/dev/shm/cxlbench-SUITE-test-NAME-PID`, emptied, with a `runs` root.
    pub fn new(suite: &str, name: &str) -> Self {
        let dir = PathBuf::from(format!("/dev/shm/cxlbench-{suite}-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("runs")).unwrap();
        Self(dir)
    }

    /// Run directories left behind.
    pub fn leftovers(&self) -> usize {
        std::fs::read_dir(self.0.join("runs")).unwrap().count()
    }

    /// Writes the workload file `text`; its path.
    pub fn workload(&self, text: &str) -> PathBuf {
        let path = self.0.join("w.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The NDJSON output file.
    pub fn out(&self) -> PathBuf {
        self.0.join("out.ndjson")
    }

    /// `cxlalloc-bench run WORKLOAD` with this output and run root, plus `extra` arguments.
    pub fn command(&self, workload: &Path, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_cxlalloc-bench"))
            .arg("run")
            .arg(workload)
            .arg("--out")
            .arg(self.out())
            .arg("--run-root")
            .arg(self.0.join("runs"))
            .args(extra)
            .output()
            .unwrap()
    }

    /// Runs the workload `text`; its output and the records written (none without a file).
    pub fn run(&self, text: &str) -> (Output, Vec<Record>) {
        let o = self.command(&self.workload(text), &[]);
        let records = if self.out().exists() { read_records(&self.out()).unwrap() } else { Vec::new() };
        (o, records)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A run's stdout and stderr, for failure messages.
pub fn text(o: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}
