//! The SSH executor's answers for `status`, `collect` and the submit
//! summary: a shard's state is what the results folder holds of it (a
//! board is not asked), and the incomplete ones are rerun by submitting
//! again (see `resume`).

use crate::manifest::{DeviceJob, Follow, Rerun, SshPlacement, shard_results};
use std::collections::HashMap;
use std::path::Path;

impl Follow for SshPlacement {
    fn whereabouts(&self) -> String {
        let hosts: Vec<String> = self.hosts.iter().map(ToString::to_string).collect();
        format!("on {}", hosts.join(", "))
    }

    fn shard_state(
        &self,
        job: &DeviceJob,
        results_dir: &Path,
        shard: usize,
        _queued: &HashMap<String, String>,
    ) -> String {
        let host = &self.hosts[shard % self.hosts.len()];
        if !shard_results(results_dir, &job.device, shard).exists() {
            return format!("not fetched (runs on {host})");
        }
        match job.progress(results_dir, shard) {
            (done, planned) if done == planned => format!("done ({done} rows fetched from {host})"),
            (done, planned) => {
                format!(
                    "partial: {done} of {planned} rows fetched from {host}; submit again to resume"
                )
            }
        }
    }

    fn rerun(&self, _incomplete: &[usize]) -> Rerun<'_> {
        Rerun::Ssh(self)
    }
}
