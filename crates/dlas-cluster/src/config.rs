//! What a submission asks for: the study's shards, the `dlas run`
//! arguments, and per executor the devices and how to reach them (Slurm
//! partitions from `--map`, boards from `--host`). Plain data, parsed from
//! the command line; the executors read it and the manifest records what
//! they did with it.

use crate::ssh::address::{SshHost, Transport};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How the shards reach their devices.
#[derive(Debug, Clone)]
pub enum Executor {
    Slurm(SlurmConfig),
    Ssh(SshConfig),
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

/// `device=partition[,constraint]` from `--map`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceMap {
    pub device: String,
    pub partition: String,
    pub constraint: Option<String>,
}

impl std::str::FromStr for DeviceMap {
    type Err = String;
    fn from_str(text: &str) -> Result<DeviceMap, String> {
        let (device, rest) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}` is not device=partition[,constraint]"))?;
        let mut parts = rest.splitn(2, ',');
        let partition = parts.next().unwrap_or_default().trim();
        if device.trim().is_empty() || partition.is_empty() {
            return Err(format!("`{text}` is not device=partition[,constraint]"));
        }
        Ok(DeviceMap {
            device: device.trim().into(),
            partition: partition.into(),
            constraint: parts
                .next()
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty()),
        })
    }
}

/// The Slurm side of a submission.
#[derive(Debug, Clone)]
pub struct SlurmConfig {
    /// One entry per device to run.
    pub map: Vec<DeviceMap>,
    /// Time limit per task, Slurm syntax.
    pub time_limit: String,
    /// Only write the scripts; do not call sbatch.
    pub dry_run: bool,
}

/// The SSH side of a submission.
#[derive(Debug, Clone)]
pub struct SshConfig {
    pub hosts: Vec<SshHost>,
    pub transport: Transport,
    /// The folder on each board (relative paths start at the login's home).
    pub remote_dir: String,
    /// The ONNX Runtime library copied to boards of the same architecture.
    pub ort_library: Option<OrtLibrary>,
}

/// The ONNX Runtime library a board's host shards load. The version names
/// the folder the board's `dlas` looks in, so the coordinator needs no
/// runtime of its own to place it.
#[derive(Debug, Clone)]
pub struct OrtLibrary {
    pub path: PathBuf,
    pub version: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_maps() {
        let m: DeviceMap = "xavier-gpu=gpu,volta".parse().unwrap();
        assert_eq!(m.partition, "gpu");
        assert_eq!(m.constraint.as_deref(), Some("volta"));
        let m: DeviceMap = "host=cpu".parse().unwrap();
        assert_eq!(m.constraint, None);
        assert!("host".parse::<DeviceMap>().is_err());
        assert!("host=".parse::<DeviceMap>().is_err());
    }
}
