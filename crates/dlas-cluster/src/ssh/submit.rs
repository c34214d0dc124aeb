//! The SSH executor's submission: plan, record the manifest, work out each
//! board's shards (skipping those complete in the results folder, which is
//! how a rerun resumes) and files, then run every board at once, each on a
//! thread of its own with its shards one after another.

use super::address::{Destination, check_remote_path};
use super::session::{Assignment, Session};
use super::upload::{ModelFiles, Upload, common_uploads, model_uploads, sha256_file};
use crate::config::{SshConfig, SubmitConfig};
use crate::manifest::{DeviceJob, Manifest, Placement, SshPlacement, shard_results};
use crate::plan::DevicePlan;
use anyhow::{Context, Result, bail};
use dlas_core::{Combination, Study};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Sends each device's shards to its boards, runs them, fetches the results.
/// Shards whose results are already complete in the results folder are
/// skipped, so running the same command again resumes a submission.
pub fn submit(
    study: &Study,
    config: &SubmitConfig,
    ssh: &SshConfig,
    models: &mut dyn ModelFiles,
) -> Result<Manifest> {
    if ssh.hosts.is_empty() {
        bail!("--executor ssh needs --host device=[user@]addr[:port], once per board");
    }
    ssh.transport.check()?;
    check_remote_path("--remote-dir", &ssh.remote_dir)?;
    let mut devices: Vec<String> = Vec::new();
    for host in &ssh.hosts {
        if !devices.contains(&host.device) {
            devices.push(host.device.clone());
        }
    }
    let boards = |device: &str| -> Vec<Destination> {
        ssh.hosts
            .iter()
            .filter(|h| h.device == device)
            .map(|h| h.destination.clone())
            .collect()
    };
    let plans = crate::plan::plan_devices(study, config, &devices, |d| boards(d).len())?;
    let placements: Vec<SshPlacement> = plans
        .iter()
        .map(|plan| SshPlacement {
            hosts: boards(&plan.device),
            remote_dir: ssh.remote_dir.clone(),
            transport: ssh.transport.clone(),
            binary: config.dlas.clone(),
            remote_results: remote_results(study, config, plan),
        })
        .collect();
    let jobs: Vec<DeviceJob> = plans
        .iter()
        .zip(&placements)
        .map(|(plan, placement)| DeviceJob {
            device: plan.device.clone(),
            shards: plan.shards.len(),
            exclusive: plan.device == "host",
            planned: plan.ids(),
            placement: Placement::Ssh(placement.clone()),
        })
        .collect();
    // The manifest comes first: `status` and `collect` work even if this
    // submission is interrupted.
    let manifest = Manifest {
        study: study.name.clone(),
        study_path: config.study_path.clone(),
        filter: config.filter.clone(),
        run_args: config.run_args.clone(),
        jobs: jobs.clone(),
    }
    .save_merged(&config.results_dir)?;

    // Each board's work, in plan order; complete shards are skipped.
    let mut work: Vec<(Destination, Vec<Assignment>)> = Vec::new();
    for ((plan, placement), job) in plans.iter().zip(&placements).zip(&jobs) {
        for (shard, combinations) in plan.shards.iter().enumerate() {
            let destination = &placement.hosts[shard % placement.hosts.len()];
            let (done, planned) = job.progress(&config.results_dir, shard);
            if done == planned {
                dlas_core::errln!(
                    "[{destination}] {} shard {shard}/{}: complete in {}, not run again",
                    plan.device,
                    plan.shards.len(),
                    config.results_dir.display()
                );
                continue;
            }
            let assignment = Assignment {
                device: &plan.device,
                shard,
                count: plan.shards.len(),
                combinations,
                remote_results: placement.remote_results[shard].clone(),
                local_results: shard_results(&config.results_dir, &plan.device, shard),
            };
            match work.iter_mut().find(|(d, _)| d == destination) {
                Some((_, list)) => list.push(assignment),
                None => work.push((destination.clone(), vec![assignment])),
            }
        }
    }
    if work.is_empty() {
        return Ok(manifest);
    }

    // Every file any board needs, resolved and hashed once, before any
    // connection: a missing or mismatched model stops the submission here.
    let common = common_uploads(study, config)?;
    let mut hashes: HashMap<PathBuf, String> = HashMap::new();
    let mut board_files: Vec<Vec<Upload>> = Vec::new();
    for (_, assignments) in &work {
        let host_combinations: Vec<Combination> = assignments
            .iter()
            .filter(|a| a.device == "host")
            .flat_map(|a| a.combinations.iter().cloned())
            .collect();
        let mut files = common.clone();
        if !host_combinations.is_empty() {
            files.extend(model_uploads(study, config, models, &host_combinations)?);
            if let Some(library) = ssh.ort_library.as_ref().filter(|l| l.path.is_file()) {
                let version = &library.version;
                files.push(Upload {
                    local: library.path.clone(),
                    remote: format!(".cache/onnxruntime/{version}/libonnxruntime.so.{version}"),
                    sha256: String::new(),
                });
            }
        }
        for file in &mut files {
            if !hashes.contains_key(&file.local) {
                hashes.insert(file.local.clone(), sha256_file(&file.local)?);
            }
            file.sha256 = hashes[&file.local].clone();
        }
        board_files.push(files);
    }

    let control = tempfile::Builder::new()
        .prefix("dlas-ssh-")
        .tempdir()
        .context("cannot create a folder for the SSH control sockets")?;
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = work
            .iter()
            .zip(&board_files)
            .enumerate()
            .map(|(i, ((destination, assignments), files))| {
                let socket = control.path().join(i.to_string());
                scope.spawn(move || {
                    run_board(destination, assignments, files, ssh, config, study, &socket)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec!["a board's thread panicked".into()])
            })
            .collect()
    });
    if !failures.is_empty() {
        bail!(
            "{} shard(s) did not complete; rows already measured are kept, and running the same command again resumes them:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    Ok(manifest)
}

/// The remote results file of each shard of a device (see [`SshPlacement`]).
fn remote_results(study: &Study, config: &SubmitConfig, plan: &DevicePlan) -> Vec<String> {
    plan.shards
        .iter()
        .enumerate()
        .map(|(shard, combinations)| {
            let mut hasher = Sha256::new();
            hasher.update(study.name.as_bytes());
            hasher.update(format!("\0{}/{}\0", shard, plan.shards.len()));
            for arg in &config.run_args {
                hasher.update(arg.as_bytes());
                hasher.update(b"\0");
            }
            for c in combinations {
                hasher.update(c.id().as_bytes());
            }
            let key = hex::encode(&hasher.finalize()[..8]);
            format!("results/{}/shard-{shard}-{key}.csv", plan.device)
        })
        .collect()
}

/// Everything one board does: connect, copy what is missing, run its
/// shards one after another (a timing run owns the board), fetch each.
/// Returns one line per shard that did not complete.
fn run_board(
    destination: &Destination,
    assignments: &[Assignment],
    files: &[Upload],
    ssh: &SshConfig,
    config: &SubmitConfig,
    study: &Study,
    socket: &Path,
) -> Vec<String> {
    let all_failed = |error: anyhow::Error| -> Vec<String> {
        assignments
            .iter()
            .map(|a| format!("{} shard {}/{}: {error:#}", a.device, a.shard, a.count))
            .collect()
    };
    let started = Instant::now();
    let mut session = match Session::open(destination, &ssh.transport, &ssh.remote_dir, socket) {
        Ok(s) => s,
        Err(e) => return all_failed(e),
    };
    if let Err(e) = session.prepare(files, assignments) {
        return all_failed(e);
    }
    session.say(&format!(
        "ready in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let mut failures = Vec::new();
    for (i, assignment) in assignments.iter().enumerate() {
        let label = format!(
            "{} shard {}/{}",
            assignment.device, assignment.shard, assignment.count
        );
        if let Err(e) = session.reconnect_if_lost() {
            failures.extend(all_failed(e).into_iter().skip(i));
            break;
        }
        let started = Instant::now();
        let ran = session.run_shard(assignment, study, config);
        // Whatever the run did, what it measured is fetched.
        let fetched = session
            .reconnect_if_lost()
            .and_then(|()| session.fetch_shard(assignment, &config.results_dir));
        match (ran, fetched) {
            (Ok(()), Ok(rows)) => session.say(&format!(
                "{label}: {rows} rows fetched in {:.1} s",
                started.elapsed().as_secs_f64()
            )),
            (Err(e), Ok(rows)) => {
                failures.push(format!("{label}: {e:#} ({rows} rows fetched)"));
            }
            (Ok(()), Err(e)) => failures.push(format!("{label}: {e:#}")),
            (Err(run), Err(fetch)) => failures.push(format!("{label}: {run:#}; {fetch:#}")),
        }
    }
    failures
}
