//! Slurm: one job script per device (an `sbatch --array` over its shards),
//! submitted with `sbatch`, watched with `squeue`.

use crate::manifest::{DeviceJob, Manifest, Placement};
use crate::{SubmitConfig, quote};
use anyhow::{Context, Result, bail};
use dlas_core::Study;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

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

/// Writes one job script per mapped device and submits it.
pub fn submit(study: &Study, config: &SubmitConfig, slurm: &SlurmConfig) -> Result<Manifest> {
    let devices: Vec<String> = slurm.map.iter().map(|m| m.device.clone()).collect();
    if let Some(twice) = devices
        .iter()
        .enumerate()
        .find_map(|(i, d)| devices[..i].contains(d).then_some(d))
    {
        bail!("--map names device `{twice}` twice; give each device one partition");
    }
    let plans = crate::plan_devices(study, config, &devices, |_| 1)?;
    std::fs::create_dir_all(config.results_dir.join("jobs"))?;
    std::fs::create_dir_all(config.results_dir.join("logs"))?;
    let mut jobs = Vec::new();
    for (map, plan) in slurm.map.iter().zip(&plans) {
        let shards = plan.shards.len();
        let exclusive = map.device == "host";
        let script = config
            .results_dir
            .join("jobs")
            .join(format!("{}.sbatch", map.device));
        std::fs::write(
            &script,
            job_script(study, config, slurm, map, shards, exclusive),
        )
        .with_context(|| format!("cannot write {}", script.display()))?;
        let job_id = if slurm.dry_run {
            None
        } else {
            Some(sbatch(&script)?)
        };
        jobs.push(DeviceJob {
            device: map.device.clone(),
            shards,
            exclusive,
            planned: plan.ids(),
            placement: Placement::Slurm {
                partition: map.partition.clone(),
                constraint: map.constraint.clone(),
                script,
                job_id,
            },
        });
    }
    Manifest {
        study: study.name.clone(),
        study_path: config.study_path.clone(),
        filter: config.filter.clone(),
        run_args: config.run_args.clone(),
        jobs,
    }
    .save_merged(&config.results_dir)
}

fn job_script(
    study: &Study,
    config: &SubmitConfig,
    slurm: &SlurmConfig,
    map: &DeviceMap,
    shards: usize,
    exclusive: bool,
) -> String {
    let dir = &config.results_dir;
    let mut s = String::from("#!/bin/bash\n");
    s += &format!("#SBATCH --job-name=dlas-{}-{}\n", study.name, map.device);
    s += &format!("#SBATCH --partition={}\n", map.partition);
    if let Some(constraint) = &map.constraint {
        s += &format!("#SBATCH --constraint={constraint}\n");
    }
    s += &format!("#SBATCH --array=0-{}\n", shards - 1);
    s += &format!("#SBATCH --time={}\n", slurm.time_limit);
    s += &format!(
        "#SBATCH --output={}/logs/{}-%a.log\n",
        dir.display(),
        map.device
    );
    if exclusive {
        s += "# A timing run owns its node: no other job shares its cores or memory bandwidth.\n";
        s += "#SBATCH --exclusive\n";
    } else {
        s += "# Mocked devices compute their numbers: tasks may share nodes.\n";
        s += "#SBATCH --cpus-per-task=1\n";
    }
    s += "set -euo pipefail\n";
    let device = if map.device == "host" {
        "host"
    } else {
        map.device.as_str()
    };
    let mut args = vec![
        quote(&config.dlas.display().to_string()),
        "--root".into(),
        quote(&config.project_root.display().to_string()),
        "run".into(),
        "--study".into(),
        quote(&config.study_path.display().to_string()),
        "--device".into(),
        quote(device),
        "--filter".into(),
        quote(&config.filter),
        "--shard".into(),
        format!("\"${{SLURM_ARRAY_TASK_ID}}/{shards}\""),
        "--out".into(),
        format!(
            "{}\"/shard-${{SLURM_ARRAY_TASK_ID}}.csv\"",
            quote(&dir.join(&map.device).display().to_string())
        ),
    ];
    args.extend(config.run_args.iter().map(|a| quote(a)));
    s += &format!(
        "mkdir -p {}\n",
        quote(&dir.join(&map.device).display().to_string())
    );
    s += &format!("exec {}\n", args.join(" "));
    s
}

fn sbatch(script: &Path) -> Result<String> {
    let output = Command::new("sbatch")
        .arg("--parsable")
        .arg(script)
        .output()
        .context("cannot run sbatch; is Slurm installed and SLURM_CONF set?")?;
    if !output.status.success() {
        bail!(
            "sbatch {} failed: {}",
            script.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .trim()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string())
}

/// The array tasks Slurm still holds (`squeue`), by `jobid_task`, with
/// their state in lower case; empty when no Slurm job was submitted.
pub fn queued(manifest: &Manifest) -> Result<HashMap<String, String>> {
    let ids: Vec<&str> = manifest
        .jobs
        .iter()
        .filter_map(|j| match &j.placement {
            Placement::Slurm { job_id, .. } => job_id.as_deref(),
            Placement::Ssh(_) => None,
        })
        .collect();
    let mut queued = HashMap::new();
    if ids.is_empty() {
        return Ok(queued);
    }
    let output = Command::new("squeue")
        .args(["-h", "-r", "-o", "%i %T", "-j", &ids.join(",")])
        .output()
        .context("cannot run squeue")?;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if let Some((id, state)) = line.split_once(' ') {
            queued.insert(id.to_string(), state.to_lowercase());
        }
    }
    Ok(queued)
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
