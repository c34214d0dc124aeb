//! `cluster.json`: what was submitted, per device, whatever the executor.
//! `status` and `collect` work from it alone, so they need neither the
//! study file nor the executor's own bookkeeping.
//!
//! Each executor records a placement of its own; what `status`, `collect`
//! and the submit summary ask of one is the [`Follow`] trait, which each
//! executor implements (`slurm`, `ssh::status`), and [`Placement::follow`] is
//! the one place that tells them apart.

use crate::ssh::address::{Destination, Transport};
use anyhow::{Context, Result, bail};
use dlas_core::results::read_results;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Where one device's shards were sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "executor", rename_all = "lowercase")]
pub enum Placement {
    /// One `sbatch --array` job over the device's shards.
    Slurm(SlurmPlacement),
    /// Boards reached over SSH; shard `i` runs on `hosts[i % hosts.len()]`.
    Ssh(SshPlacement),
}

impl Placement {
    /// The executor's view of this device.
    pub fn follow(&self) -> &dyn Follow {
        match self {
            Placement::Slurm(placement) => placement,
            Placement::Ssh(placement) => placement,
        }
    }
}

/// What the manifest records for a device run as a Slurm job array.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmPlacement {
    pub partition: String,
    pub constraint: Option<String>,
    pub script: PathBuf,
    /// `None` for a dry run (the script was written, not submitted).
    pub job_id: Option<String>,
}

/// What the manifest records for a device run over SSH.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SshPlacement {
    /// Shard `i` runs on `hosts[i % hosts.len()]`.
    pub hosts: Vec<Destination>,
    pub remote_dir: String,
    pub transport: Transport,
    /// The local binary that was copied.
    pub binary: PathBuf,
    /// Each shard's results file on its board, relative to `remote_dir`.
    /// The name is a hash of the shard's plan and run arguments, so a rerun
    /// of the same shard resumes it and a different plan never mixes in.
    pub remote_results: Vec<String>,
}

/// What `status`, `collect` and the submit summary need from an executor
/// once its placement is recorded.
pub trait Follow {
    /// Where the shards went, for the submit summary.
    fn whereabouts(&self) -> String;
    /// The scheduler job whose array tasks `squeue` reports, if any.
    fn queued_job(&self) -> Option<&str> {
        None
    }
    /// The state of one shard; `queued` maps the scheduler's `jobid_task`
    /// names to their states (see [`Follow::queued_job`]).
    fn shard_state(
        &self,
        job: &DeviceJob,
        results_dir: &Path,
        shard: usize,
        queued: &HashMap<String, String>,
    ) -> String;
    /// How to rerun exactly the `incomplete` shards of the device.
    fn rerun(&self, incomplete: &[usize]) -> Rerun<'_>;
}

/// How incomplete shards are run again.
#[derive(Debug, Clone, PartialEq)]
pub enum Rerun<'a> {
    /// A command of the device's own (`sbatch --array=… script`).
    Command(String),
    /// A resuming `dlas cluster submit --executor ssh`, one for all the
    /// devices that share these settings (`ssh::resume`).
    Ssh(&'a SshPlacement),
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

impl DeviceJob {
    /// How many of a shard's planned ids its results hold, and how many were planned.
    pub fn progress(&self, results_dir: &Path, shard: usize) -> (usize, usize) {
        let planned = &self.planned[shard];
        let done = read_results(&shard_results(results_dir, &self.device, shard))
            .map(|rows| {
                let present: HashSet<&str> = rows.iter().map(|r| r.id.as_str()).collect();
                planned
                    .iter()
                    .filter(|id| present.contains(id.as_str()))
                    .count()
            })
            .unwrap_or(0);
        (done, planned.len())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `cluster.json` files written before placements became structs of
    /// their own still load, and new ones read the same.
    #[test]
    fn placements_keep_their_json() {
        let slurm = r#"{"executor":"slurm","partition":"debug","constraint":null,"script":"/r/jobs/host.sbatch","job_id":"12"}"#;
        let placement: Placement = serde_json::from_str(slurm).unwrap();
        assert_eq!(
            placement,
            Placement::Slurm(SlurmPlacement {
                partition: "debug".into(),
                constraint: None,
                script: "/r/jobs/host.sbatch".into(),
                job_id: Some("12".into()),
            })
        );
        assert_eq!(serde_json::to_string(&placement).unwrap(), slurm);
        let ssh = r#"{"executor":"ssh","hosts":[{"user":"pi","addr":"10.0.0.5","port":22}],"remote_dir":"dlas","transport":{"identity":null,"options":[],"connect_timeout_s":10},"binary":"/bin/dlas","remote_results":["results/host/shard-0-00.csv"]}"#;
        let placement: Placement = serde_json::from_str(ssh).unwrap();
        assert!(
            matches!(&placement, Placement::Ssh(p) if p.hosts[0].to_string() == "pi@10.0.0.5:22")
        );
        assert_eq!(serde_json::to_string(&placement).unwrap(), ssh);
    }
}
