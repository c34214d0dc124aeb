//! Slurm: one job script per device (an `sbatch --array` over its shards),
//! submitted with `sbatch`, watched with `squeue`.

use crate::config::{DeviceMap, SlurmConfig, SubmitConfig};
use crate::manifest::{DeviceJob, Follow, Manifest, Placement, Rerun, SlurmPlacement};
use crate::shell::quote;
use anyhow::{Context, Result, bail};
use dlas_core::Study;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

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
    let plans = crate::plan::plan_devices(study, config, &devices, |_| 1)?;
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
            placement: Placement::Slurm(SlurmPlacement {
                partition: map.partition.clone(),
                constraint: map.constraint.clone(),
                script,
                job_id,
            }),
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
        .filter_map(|j| j.placement.follow().queued_job())
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

impl Follow for SlurmPlacement {
    fn whereabouts(&self) -> String {
        format!(
            "job {} ({})",
            self.job_id.as_deref().unwrap_or("not submitted"),
            self.script.display()
        )
    }

    fn queued_job(&self) -> Option<&str> {
        self.job_id.as_deref()
    }

    /// Slurm's state while it holds the task; once it lets go, the results
    /// in the shared folder tell a finished task from a failed one.
    fn shard_state(
        &self,
        job: &DeviceJob,
        results_dir: &Path,
        shard: usize,
        queued: &HashMap<String, String>,
    ) -> String {
        let task = self.job_id.as_ref().map(|j| format!("{j}_{shard}"));
        match task.and_then(|t| queued.get(&t)) {
            Some(state) => state.clone(),
            None => match job.progress(results_dir, shard) {
                (done, planned) if done == planned => "done".into(),
                _ => "failed or not started".into(),
            },
        }
    }

    fn rerun(&self, incomplete: &[usize]) -> Rerun<'_> {
        let list: Vec<String> = incomplete.iter().map(usize::to_string).collect();
        Rerun::Command(format!(
            "sbatch --array={} {}",
            list.join(","),
            self.script.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slurm's own state while it holds a task; afterwards the shard's
    /// results decide; the rerun names exactly the incomplete tasks.
    #[test]
    fn follows_array_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let placement = SlurmPlacement {
            partition: "debug".into(),
            constraint: None,
            script: "/r/jobs/i7.sbatch".into(),
            job_id: Some("12".into()),
        };
        let job = DeviceJob {
            device: "i7".into(),
            shards: 2,
            exclusive: false,
            planned: vec![vec!["a".into()], vec!["b".into()]],
            placement: Placement::Slurm(placement.clone()),
        };
        let follow = job.placement.follow();
        assert_eq!(follow.queued_job(), Some("12"));
        let queued = HashMap::from([("12_1".to_string(), "running".to_string())]);
        assert_eq!(
            follow.shard_state(&job, dir.path(), 0, &queued),
            "failed or not started"
        );
        assert_eq!(follow.shard_state(&job, dir.path(), 1, &queued), "running");
        assert_eq!(
            follow.rerun(&[0, 1]),
            Rerun::Command("sbatch --array=0,1 /r/jobs/i7.sbatch".into())
        );
        assert_eq!(follow.whereabouts(), "job 12 (/r/jobs/i7.sbatch)");
    }
}
