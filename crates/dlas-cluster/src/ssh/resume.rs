//! Resuming SSH devices: the `dlas cluster submit --executor ssh` command
//! that reruns exactly the incomplete devices, rebuilt from the manifest.
//! Rerunning skips complete shards and each board's append-only store
//! continues the rest, so the command is the same submission again.

use crate::manifest::{DeviceJob, Manifest, SshPlacement};
use crate::shell::shell_word;
use std::path::Path;

/// An incomplete SSH device: its job and where it ran.
pub type Incomplete<'a> = (&'a DeviceJob, &'a SshPlacement);

/// The submit commands that resume exactly the incomplete SSH devices (a
/// rerun skips their complete shards): one per shard count, since
/// `--shards` applies to every device of a command.
pub fn resubmit_commands(
    manifest: &Manifest,
    results_dir: &Path,
    incomplete: &[Incomplete],
) -> Vec<String> {
    let mut groups: Vec<(usize, &SshPlacement, Vec<Incomplete>)> = Vec::new();
    for &(job, placement) in incomplete {
        match groups.iter_mut().find(|(n, p, _)| {
            *n == job.shards
                && (&p.remote_dir, &p.transport, &p.binary)
                    == (
                        &placement.remote_dir,
                        &placement.transport,
                        &placement.binary,
                    )
        }) {
            Some((_, _, jobs)) => jobs.push((job, placement)),
            None => groups.push((job.shards, placement, vec![(job, placement)])),
        }
    }
    groups
        .into_iter()
        .map(|(shards, placement, jobs)| {
            let mut words: Vec<String> = vec![
                "dlas".into(),
                "cluster".into(),
                "submit".into(),
                "--executor".into(),
                "ssh".into(),
                "--study".into(),
                shell_word(&manifest.study_path.display().to_string()),
            ];
            if !manifest.filter.is_empty() {
                words.extend(["--filter".into(), shell_word(&manifest.filter)]);
            }
            words.extend([
                "--results-dir".into(),
                shell_word(&results_dir.display().to_string()),
            ]);
            for (job, p) in jobs {
                for host in &p.hosts {
                    words.extend([
                        "--host".into(),
                        shell_word(&format!("{}={host}", job.device)),
                    ]);
                }
            }
            words.extend(["--shards".into(), shards.to_string()]);
            words.extend(["--remote-dir".into(), shell_word(&placement.remote_dir)]);
            words.extend([
                "--dlas".into(),
                shell_word(&placement.binary.display().to_string()),
            ]);
            let transport = &placement.transport;
            if let Some(identity) = &transport.identity {
                words.extend([
                    "--identity".into(),
                    shell_word(&identity.display().to_string()),
                ]);
            }
            for option in &transport.options {
                words.extend(["--ssh-option".into(), shell_word(option)]);
            }
            words.extend([
                "--connect-timeout".into(),
                transport.connect_timeout_s.to_string(),
            ]);
            if !manifest.run_args.is_empty() {
                words.push("--run-args".into());
                words.extend(manifest.run_args.iter().map(|a| shell_word(a)));
            }
            words.join(" ")
        })
        .collect()
}
