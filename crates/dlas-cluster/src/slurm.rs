//! Slurm: one job script per device (an `sbatch --array` over its shards),
//! submitted with `sbatch`, watched with `squeue`.

use anyhow::{Context, Result, bail};
use dlas_core::{Filter, Plan, Shard, Study};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
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

/// Everything `submit` needs beyond the study.
#[derive(Debug, Clone)]
pub struct SubmitConfig {
    /// The `dlas` binary the tasks run (on a shared file system).
    pub dlas: PathBuf,
    pub project_root: PathBuf,
    pub study_path: PathBuf,
    pub filter: String,
    pub map: Vec<DeviceMap>,
    /// Shards per device; or derived from `runs_per_task`.
    pub shards: Option<usize>,
    /// Combinations per array task, when `shards` is not given.
    pub runs_per_task: Option<usize>,
    /// Shared results folder.
    pub results_dir: PathBuf,
    /// Extra `dlas run` arguments (e.g. `--runs 20`).
    pub run_args: Vec<String>,
    /// Time limit per task, Slurm syntax.
    pub time_limit: String,
    /// Only write the scripts; do not call sbatch.
    pub dry_run: bool,
}

/// One device's job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceJob {
    pub map: DeviceMap,
    pub shards: usize,
    pub script: PathBuf,
    pub job_id: Option<String>,
    /// Timing runs own their node (exclusive allocation).
    pub exclusive: bool,
    /// Planned combination ids per shard.
    pub planned: Vec<Vec<String>>,
}

/// What was submitted: the record `status` and `collect` work from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub study: String,
    pub filter: String,
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
}

/// The results file of one shard.
pub fn shard_results(results_dir: &Path, device: &str, shard: usize) -> PathBuf {
    results_dir.join(device).join(format!("shard-{shard}.csv"))
}

/// Writes one job script per mapped device and submits it.
pub fn submit(study: &Study, config: &SubmitConfig) -> Result<Manifest> {
    let filter = Filter::parse(&config.filter)?;
    filter.check(study)?;
    std::fs::create_dir_all(config.results_dir.join("jobs"))?;
    std::fs::create_dir_all(config.results_dir.join("logs"))?;
    let mut jobs = Vec::new();
    for map in &config.map {
        study
            .check_value("device", &map.device)
            .map_err(|e| anyhow::anyhow!("in --map: {e}"))?;
        let device_filter = Filter::parse(&format!("{},device={}", config.filter, map.device))?;
        let plan = Plan::expand(study).filtered(&device_filter);
        let total = plan.combinations.len();
        if total == 0 {
            bail!(
                "the plan has no combination for device `{}` under this filter",
                map.device
            );
        }
        let shards = match (config.shards, config.runs_per_task) {
            (Some(n), _) => n.clamp(1, total),
            (None, Some(k)) => total.div_ceil(k.max(1)),
            (None, None) => 1,
        };
        let planned = (0..shards)
            .map(|index| {
                plan.clone()
                    .shard(Shard {
                        index,
                        count: shards,
                    })
                    .combinations
                    .iter()
                    .map(|c| c.id())
                    .collect()
            })
            .collect();
        let exclusive = map.device == "host";
        let script = config
            .results_dir
            .join("jobs")
            .join(format!("{}.sbatch", map.device));
        std::fs::write(&script, job_script(study, config, map, shards, exclusive))
            .with_context(|| format!("cannot write {}", script.display()))?;
        let job_id = if config.dry_run {
            None
        } else {
            Some(sbatch(&script)?)
        };
        jobs.push(DeviceJob {
            map: map.clone(),
            shards,
            script,
            job_id,
            exclusive,
            planned,
        });
    }
    let manifest = Manifest {
        study: study.name.clone(),
        filter: config.filter.clone(),
        jobs,
    };
    let json = serde_json::to_string_pretty(&manifest)?;
    dlas_core::atomic::write_atomic(&Manifest::path(&config.results_dir), json.as_bytes())?;
    Ok(manifest)
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn job_script(
    study: &Study,
    config: &SubmitConfig,
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
    s += &format!("#SBATCH --time={}\n", config.time_limit);
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

/// State of each device's shards: from `squeue` while queued or running,
/// from the shard's results file afterwards.
pub fn status(results_dir: &Path) -> Result<Vec<(String, usize, String)>> {
    let manifest = Manifest::load(results_dir)?;
    let ids: Vec<&str> = manifest
        .jobs
        .iter()
        .filter_map(|j| j.job_id.as_deref())
        .collect();
    let mut queued: Vec<(String, String)> = Vec::new();
    if !ids.is_empty() {
        let output = Command::new("squeue")
            .args(["-h", "-r", "-o", "%i %T", "-j", &ids.join(",")])
            .output()
            .context("cannot run squeue")?;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some((id, state)) = line.split_once(' ') {
                queued.push((id.to_string(), state.to_lowercase()));
            }
        }
    }
    let mut out = Vec::new();
    for job in &manifest.jobs {
        for shard in 0..job.shards {
            let task = job.job_id.as_ref().map(|j| format!("{j}_{shard}"));
            let state = match queued.iter().find(|(id, _)| Some(id) == task.as_ref()) {
                Some((_, state)) => state.clone(),
                None => {
                    let done = crate::collect::shard_done(
                        results_dir,
                        &job.map.device,
                        shard,
                        &job.planned[shard],
                    );
                    if done {
                        "done".into()
                    } else {
                        "failed or not started".into()
                    }
                }
            };
            out.push((job.map.device.clone(), shard, state));
        }
    }
    Ok(out)
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
