//! Planning a submission: the study expanded once, each device's
//! combinations split into shards exactly as `dlas run --shard i/n` splits
//! them, so a task's own plan and the coordinator's agree.

use crate::config::SubmitConfig;
use anyhow::{Result, bail};
use dlas_core::{Combination, Filter, Plan, Study};

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
