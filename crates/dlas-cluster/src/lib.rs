//! The coordinator: plans once, hands each device its share of the matrix
//! to an existing engine (Slurm job arrays on a cluster, OpenSSH to edge
//! boards), and merges what comes back into one results set, refusing
//! results it cannot vouch for.
//!
//! The coordinator never schedules anything itself: Slurm decides where and
//! when each array task runs, and every task, local or remote, is an
//! ordinary `dlas run --shard i/n` whose append-only store makes it
//! resumable. One module per executor; [`manifest`] is what they share.

pub mod collect;
pub mod manifest;
pub mod slurm;
pub mod ssh;

pub use collect::{Collected, collect};
pub use manifest::{DeviceJob, Manifest, Placement};
pub use slurm::DeviceMap;
pub use ssh::SshHost;

use anyhow::{Result, bail};
use dlas_core::{Combination, Filter, Plan, Study};
use std::path::{Path, PathBuf};

/// How the shards reach their devices.
#[derive(Debug, Clone)]
pub enum Executor {
    Slurm(slurm::SlurmConfig),
    Ssh(ssh::SshConfig),
}

/// Everything `submit` needs beyond the study.
#[derive(Debug, Clone)]
pub struct SubmitConfig {
    /// The `dlas` binary the tasks run: on a shared file system for Slurm,
    /// copied to each board for SSH.
    pub dlas: PathBuf,
    pub project_root: PathBuf,
    pub study_path: PathBuf,
    pub filter: String,
    /// Shards per device; or derived from `runs_per_task`.
    pub shards: Option<usize>,
    /// Combinations per task, when `shards` is not given.
    pub runs_per_task: Option<usize>,
    /// The results folder every shard's results end up in.
    pub results_dir: PathBuf,
    /// Extra `dlas run` arguments (e.g. `--runs 20`).
    pub run_args: Vec<String>,
    pub executor: Executor,
}

/// Plans the study and sends every device its shards; returns the manifest
/// written to `cluster.json`.
pub fn submit(study: &Study, config: &SubmitConfig) -> Result<Manifest> {
    match &config.executor {
        Executor::Slurm(slurm) => slurm::submit(study, config, slurm),
        Executor::Ssh(ssh) => ssh::submit(study, config, ssh),
    }
}

/// One device's share of the plan, split into shards exactly as
/// `dlas run --shard i/n` splits it.
#[derive(Debug, Clone)]
pub struct DevicePlan {
    pub device: String,
    pub shards: Vec<Vec<Combination>>,
}

impl DevicePlan {
    pub fn ids(&self) -> Vec<Vec<String>> {
        self.shards
            .iter()
            .map(|shard| shard.iter().map(Combination::id).collect())
            .collect()
    }
}

/// Expands the study once and splits each device's combinations into
/// shards: `--shards`, else `--runs-per-task`, else `default_shards(device)`.
/// Each device's plan is the one `dlas run --device D --filter F` computes.
pub fn plan_devices(
    study: &Study,
    config: &SubmitConfig,
    devices: &[String],
    default_shards: impl Fn(&str) -> usize,
) -> Result<Vec<DevicePlan>> {
    let filter = Filter::parse(&config.filter)?;
    filter.check(study)?;
    if filter.names("device") {
        bail!(
            "--filter must not name the device axis: the devices are the ones given with --map or --host"
        );
    }
    let plan = Plan::expand(study).filtered(&filter);
    let mut plans = Vec::new();
    for device in devices {
        study
            .check_value("device", device)
            .map_err(|e| anyhow::anyhow!("device `{device}`: {e}"))?;
        let combinations: Vec<&Combination> = plan
            .combinations
            .iter()
            .filter(|c| &c.device == device)
            .collect();
        let total = combinations.len();
        if total == 0 {
            bail!("the plan has no combination for device `{device}` under this filter");
        }
        let count = match (config.shards, config.runs_per_task) {
            (Some(n), _) => n.clamp(1, total),
            (None, Some(k)) => total.div_ceil(k.max(1)),
            (None, None) => default_shards(device).clamp(1, total),
        };
        // Shard i holds every count-th combination from position i, as
        // `Plan::shard` keeps it; one pass, whatever the number of shards.
        let mut shards = vec![Vec::new(); count];
        for (position, c) in combinations.into_iter().enumerate() {
            shards[position % count].push(c.clone());
        }
        plans.push(DevicePlan {
            device: device.clone(),
            shards,
        });
    }
    Ok(plans)
}

/// Quotes `text` for a POSIX shell (job scripts, remote commands).
pub(crate) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The state of every device's shards: from the scheduler while Slurm holds
/// them, from the results in the shared folder otherwise.
pub fn status(results_dir: &Path) -> Result<Vec<(String, usize, String)>> {
    let manifest = Manifest::load(results_dir)?;
    let queued = slurm::queued(&manifest)?;
    let mut out = Vec::new();
    for job in &manifest.jobs {
        for shard in 0..job.shards {
            let state = match &job.placement {
                Placement::Slurm { job_id, .. } => {
                    let task = job_id.as_ref().map(|j| format!("{j}_{shard}"));
                    match task.and_then(|t| queued.get(&t)) {
                        Some(state) => state.clone(),
                        None => match collect::shard_progress(results_dir, job, shard) {
                            (done, planned) if done == planned => "done".into(),
                            _ => "failed or not started".into(),
                        },
                    }
                }
                Placement::Ssh(placement) => ssh::shard_state(results_dir, job, placement, shard),
            };
            out.push((job.device.clone(), shard, state));
        }
    }
    Ok(out)
}
