//! Merging shards: every planned combination present exactly once, failures
//! and gaps reported with the command that resubmits exactly those shards,
//! and no merge of results whose environment or protocol disagree within a
//! device.

use crate::slurm::{Manifest, shard_results};
use anyhow::{Context, Result, bail};
use dlas_core::results::{read_results, to_csv};
use dlas_core::{ResultRow, Status};
use dlas_runner::environment::Environment;
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
    /// `sbatch --array=…` commands that rerun exactly the incomplete shards.
    pub resubmit: Vec<String>,
}

/// Whether a shard's results hold every planned id.
pub fn shard_done(results_dir: &Path, device: &str, shard: usize, planned: &[String]) -> bool {
    read_results(&shard_results(results_dir, device, shard))
        .map(|rows| planned.iter().all(|id| rows.iter().any(|r| &r.id == id)))
        .unwrap_or(false)
}

/// Collects every shard; writes the merged CSV to `out` when nothing is missing.
pub fn collect(results_dir: &Path, out: Option<&Path>) -> Result<Collected> {
    let manifest = Manifest::load(results_dir)?;
    let mut collected = Collected::default();
    for job in &manifest.jobs {
        let device = &job.map.device;
        let mut by_position: BTreeMap<usize, ResultRow> = BTreeMap::new();
        let mut incomplete = Vec::new();
        for shard in 0..job.shards {
            let path = shard_results(results_dir, device, shard);
            let rows = if path.exists() {
                read_results(&path)?
            } else {
                Vec::new()
            };
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for row in &rows {
                *seen.entry(row.id.as_str()).or_default() += 1;
                if !job.planned[shard].contains(&row.id) {
                    bail!(
                        "{}: row {} was not planned for this shard",
                        path.display(),
                        row.id
                    );
                }
            }
            if let Some((id, n)) = seen.iter().find(|(_, n)| **n > 1) {
                bail!("{}: combination {id} appears {n} times", path.display());
            }
            let mut missing = Vec::new();
            for (i, id) in job.planned[shard].iter().enumerate() {
                match rows.iter().find(|r| &r.id == id) {
                    Some(row) => {
                        if row.status == Status::Failed {
                            collected
                                .failed
                                .push((device.clone(), id.clone(), row.reason.clone()));
                        }
                        by_position.insert(shard + i * job.shards, row.clone());
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
            let list: Vec<String> = incomplete.iter().map(usize::to_string).collect();
            collected.resubmit.push(format!(
                "sbatch --array={} {}",
                list.join(","),
                job.script.display()
            ));
        }
        collected.rows.extend(by_position.into_values());
    }
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
