//! The coordinator: plans once, hands each device its share of the matrix
//! to an existing engine (Slurm job arrays on a cluster, OpenSSH to edge
//! boards), and merges what comes back into one results set, refusing
//! results it cannot vouch for.
//!
//! The coordinator never schedules anything itself: Slurm decides where and
//! when each array task runs, and every task, local or remote, is an
//! ordinary `dlas run --shard i/n` whose append-only store makes it
//! resumable. One module per executor; [`manifest`] is what they share, and
//! [`config`] what they are asked. It reads results but runs nothing: the
//! model files boards need come from the caller ([`ModelFiles`]), so no
//! runtime is built into it.

pub mod collect;
pub mod config;
pub mod manifest;
pub mod plan;
mod shell;
pub mod slurm;
pub mod ssh;

pub use collect::{Collected, collect};
pub use config::{DeviceMap, Executor, OrtLibrary, SlurmConfig, SshConfig, SubmitConfig};
pub use manifest::{DeviceJob, Follow, Manifest, Placement};
pub use plan::{DevicePlan, plan_devices};
pub use ssh::{ModelFiles, SshHost, Transport};

use anyhow::Result;
use dlas_core::Study;
use std::path::Path;

/// Plans the study and sends every device its shards; returns the manifest
/// written to `cluster.json`. `models` gives the model files of host
/// combinations that boards run (Slurm tasks find their own).
pub fn submit(
    study: &Study,
    config: &SubmitConfig,
    models: &mut dyn ModelFiles,
) -> Result<Manifest> {
    match &config.executor {
        Executor::Slurm(slurm) => slurm::submit(study, config, slurm),
        Executor::Ssh(ssh) => ssh::submit(study, config, ssh, models),
    }
}

/// The state of every device's shards: from the scheduler while Slurm holds
/// them, from the results in the shared folder otherwise.
pub fn status(results_dir: &Path) -> Result<Vec<(String, usize, String)>> {
    let manifest = Manifest::load(results_dir)?;
    let queued = slurm::queued(&manifest)?;
    let mut out = Vec::new();
    for job in &manifest.jobs {
        let follow = job.placement.follow();
        for shard in 0..job.shards {
            let state = follow.shard_state(job, results_dir, shard, &queued);
            out.push((job.device.clone(), shard, state));
        }
    }
    Ok(out)
}
