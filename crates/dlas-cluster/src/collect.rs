//! Merging shards: every planned combination present exactly once, failures
//! and gaps reported with the command that reruns exactly those shards,
//! and no merge of results whose environment or protocol disagree within a
//! device. Linear in the number of rows: lookups go through hash maps, so a
//! 10,000-combination study merges in the time it takes to read its CSVs.

use crate::manifest::{DeviceJob, Manifest, Rerun, SshPlacement, shard_results};
use anyhow::{Context, Result, bail};
use dlas_core::results::{read_results, to_csv};
use dlas_core::{Environment, ResultRow, Status};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The outcome of a collection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collected {
    /// Every row, in plan order (complete only when `missing` is empty).
    pub rows: Vec<ResultRow>,
    /// (device, shard, planned ids absent from its results).
    pub missing: Vec<(String, usize, Vec<String>)>,
    /// (device, id, reason) of rows whose status is `failed`.
    pub failed: Vec<(String, String, String)>,
    /// Commands that rerun exactly the incomplete shards: `sbatch --array=…`
    /// for Slurm devices, the resuming `dlas cluster submit` for SSH boards.
    pub resubmit: Vec<String>,
}

/// Collects every shard; writes the merged CSV to `out` when nothing is missing.
pub fn collect(results_dir: &Path, out: Option<&Path>) -> Result<Collected> {
    let manifest = Manifest::load(results_dir)?;
    let mut collected = Collected::default();
    let mut incomplete_ssh: Vec<(&DeviceJob, &SshPlacement)> = Vec::new();
    for job in &manifest.jobs {
        let device = &job.device;
        let mut by_position: BTreeMap<usize, ResultRow> = BTreeMap::new();
        let mut incomplete = Vec::new();
        for shard in 0..job.shards {
            let path = shard_results(results_dir, device, shard);
            let rows = if path.exists() {
                read_results(&path)?
            } else {
                Vec::new()
            };
            let planned: HashMap<&str, usize> = job.planned[shard]
                .iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), i))
                .collect();
            let mut found: HashMap<&str, ResultRow> = HashMap::with_capacity(rows.len());
            for row in rows {
                let Some((&id, _)) = planned.get_key_value(row.id.as_str()) else {
                    bail!(
                        "{}: row {} was not planned for this shard",
                        path.display(),
                        row.id
                    );
                };
                if found.insert(id, row).is_some() {
                    bail!(
                        "{}: combination {id} appears more than once",
                        path.display()
                    );
                }
            }
            let mut missing = Vec::new();
            for (i, id) in job.planned[shard].iter().enumerate() {
                match found.remove(id.as_str()) {
                    Some(row) => {
                        if row.status == Status::Failed {
                            collected
                                .failed
                                .push((device.clone(), id.clone(), row.reason.clone()));
                        }
                        by_position.insert(shard + i * job.shards, row);
                    }
                    None => missing.push(id.clone()),
                }
            }
            if !missing.is_empty() {
                incomplete.push(shard);
                collected.missing.push((device.clone(), shard, missing));
            }
        }
        check_consistent(results_dir, device, by_position.values())?;
        if !incomplete.is_empty() {
            match job.placement.follow().rerun(&incomplete) {
                Rerun::Command(command) => collected.resubmit.push(command),
                Rerun::Ssh(placement) => incomplete_ssh.push((job, placement)),
            }
        }
        collected.rows.extend(by_position.into_values());
    }
    collected
        .resubmit
        .extend(crate::ssh::resume::resubmit_commands(
            &manifest,
            results_dir,
            &incomplete_ssh,
        ));
    if let (Some(out), true) = (out, collected.missing.is_empty()) {
        dlas_core::atomic::write_atomic(out, &to_csv(&collected.rows)?)?;
    }
    Ok(collected)
}

/// Refuses rows of one device that come from different environments or
/// protocols (the load average and git revision may differ; nothing else).
fn check_consistent<'a>(
    results_dir: &Path,
    device: &str,
    rows: impl Iterator<Item = &'a ResultRow>,
) -> Result<()> {
    let mut sources: Vec<&str> = rows.map(|r| r.source.as_str()).collect();
    sources.sort();
    sources.dedup();
    let envs: Vec<&str> = sources
        .iter()
        .copied()
        .filter(|s| s.starts_with("env-"))
        .collect();
    let mocked: Vec<&str> = sources
        .iter()
        .copied()
        .filter(|s| !s.starts_with("env-"))
        .collect();
    if mocked.len() > 1 {
        bail!(
            "refusing to merge device {device}: its shards come from different mocked models ({})",
            mocked.join(", ")
        );
    }
    let mut reference: Option<(String, Environment)> = None;
    for id in envs {
        let path = results_dir.join(device).join(format!("{id}.json"));
        let env = Environment::load(&path).with_context(|| format!("device {device}"))?;
        let key = |e: &Environment| {
            (
                e.cpu_model.clone(),
                e.logical_cpus,
                e.os.clone(),
                e.rustc.clone(),
                e.tract_version.clone(),
                e.ort_crate_version.clone(),
                e.protocol.clone(),
            )
        };
        match &reference {
            None => reference = Some((id.to_string(), env)),
            Some((first, first_env)) if key(first_env) != key(&env) => bail!(
                "refusing to merge device {device}: {first} ({}, protocol {:?}) and {id} ({}, protocol {:?}) disagree",
                first_env.cpu_model,
                first_env.protocol,
                env.cpu_model,
                env.protocol
            ),
            Some(_) => {}
        }
    }
    Ok(())
}
