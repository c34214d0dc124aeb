//! `cluster.json`: what was submitted, per device, whatever the executor.
//! `status` and `collect` work from it alone, so they need neither the
//! study file nor the executor's own bookkeeping.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where one device's shards were sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "executor", rename_all = "lowercase")]
pub enum Placement {
    /// One `sbatch --array` job over the device's shards.
    Slurm {
        partition: String,
        constraint: Option<String>,
        script: PathBuf,
        job_id: Option<String>,
    },
    /// Boards reached over SSH; shard `i` runs on `hosts[i % hosts.len()]`.
    Ssh(crate::ssh::SshPlacement),
}

/// One device's share of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceJob {
    pub device: String,
    pub shards: usize,
    /// Timing runs own their machine (exclusive allocation, one shard at a time).
    pub exclusive: bool,
    /// Planned combination ids per shard.
    pub planned: Vec<Vec<String>>,
    pub placement: Placement,
}

/// What was submitted: the record `status` and `collect` work from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub study: String,
    /// The study file the tasks run (absolute).
    pub study_path: PathBuf,
    pub filter: String,
    /// Extra `dlas run` arguments every task got.
    pub run_args: Vec<String>,
    pub jobs: Vec<DeviceJob>,
}

impl Manifest {
    pub fn path(results_dir: &Path) -> PathBuf {
        results_dir.join("cluster.json")
    }

    pub fn load(results_dir: &Path) -> Result<Manifest> {
        let path = Manifest::path(results_dir);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "cannot read {}; submit with `dlas cluster submit` first",
                path.display()
            )
        })?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a manifest", path.display()))
    }

    /// Records `self` in `results_dir`, keeping the jobs of devices that an
    /// earlier submission of the same study, filter and run arguments sent
    /// elsewhere (a fleet can be submitted one executor at a time), and
    /// replacing those of the devices submitted again.
    pub fn save_merged(mut self, results_dir: &Path) -> Result<Manifest> {
        let path = Manifest::path(results_dir);
        if path.exists() {
            let old = Manifest::load(results_dir)?;
            if (&old.study, &old.filter, &old.run_args)
                != (&self.study, &self.filter, &self.run_args)
            {
                bail!(
                    "{} records study `{}` with filter `{}` and run arguments {:?}; \
                     this submission (study `{}`, filter `{}`, run arguments {:?}) needs its own --results-dir",
                    path.display(),
                    old.study,
                    old.filter,
                    old.run_args,
                    self.study,
                    self.filter,
                    self.run_args
                );
            }
            // In place, so the merged results keep their row order whatever
            // the order of resubmissions.
            let mut jobs = old.jobs;
            for job in std::mem::take(&mut self.jobs) {
                match jobs.iter_mut().find(|j| j.device == job.device) {
                    Some(slot) => *slot = job,
                    None => jobs.push(job),
                }
            }
            self.jobs = jobs;
        }
        let json = serde_json::to_string_pretty(&self)?;
        dlas_core::atomic::write_atomic(&path, json.as_bytes())?;
        Ok(self)
    }
}

/// The results file of one shard in the shared results folder.
pub fn shard_results(results_dir: &Path, device: &str, shard: usize) -> PathBuf {
    results_dir.join(device).join(format!("shard-{shard}.csv"))
}
