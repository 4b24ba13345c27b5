//! What the driver hands a coordinator and the coordinator hands its workers: one run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::workload::Config;
use crate::barrier::{self, Barrier};
use crate::shm::SharedArea;
use crate::Error;

/// Control-area words the harness keeps for itself (the barrier, padded to a cache line);
/// benchmark words follow.
pub const HARNESS_WORDS: usize = 8;

/// The job file in a run directory.
pub const JOB_FILE: &str = "job.json";

/// The control-area file in a run directory.
pub const CONTROL_FILE: &str = "control";

/// One run: a configuration and its repeat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The configuration.
    pub config: Config,
    /// Repeat index.
    pub repeat: u32,
    /// Groups the run's NDJSON lines.
    pub run_id: String,
    /// The driver's start time.
    pub date: String,
    /// Workload file stem.
    pub workload: String,
    /// Milliseconds between PSS samples in each worker.
    pub sample_ms: u64,
    /// Directory under which the run's directory is made (heap, control area): `/dev/shm`
    /// normally, a DAX file system's mount point for a real device, the driver's huge-page
    /// tmpfs for a configuration with `huge_pages = true` (docs/design.md §12.1).
    pub run_root: PathBuf,
    /// Why a configuration that asked for huge pages runs on the ordinary run root (the mount
    /// that failed); empty otherwise.
    #[serde(default)]
    pub huge_fallback: String,
}

impl Job {
    /// Reads the job of run directory `dir`.
    pub fn read(dir: &Path) -> Result<Job, Error> {
        let path = dir.join(JOB_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Ok(serde_json::from_str(&text)?)
    }

    /// Writes this job into run directory `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), Error> {
        let path = dir.join(JOB_FILE);
        std::fs::write(&path, serde_json::to_vec(self)?).map_err(|e| format!("writing {}: {e}", path.display()).into())
    }

    /// The run's barrier in `area`: every thread of every process is a party.
    pub fn barrier<'a>(&self, area: &'a SharedArea) -> Result<Barrier<'a>, Error> {
        let words = area.words().get(..barrier::WORDS).ok_or("control area has no barrier")?;
        Barrier::new(words, self.config.threads, Duration::from_secs(self.config.timeout_s))
    }
}
