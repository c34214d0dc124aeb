//! SSH: edge boards reached with the system's OpenSSH client, one
//! multiplexed connection per board.
//!
//! Each board gets a small project of its own under its remote folder: the
//! `dlas` binary, the study, the device specifications, `models.lock`, the
//! model files its shards read and the ONNX Runtime library (when the
//! architectures match). Every file is compared by sha256 with what is
//! already there and only missing or different ones are copied, to a
//! temporary name of this connection's own (boards may share a home folder
//! over NFS) that is renamed once its hash is checked on the board.
//! Each shard is then an ordinary `dlas run --shard i/n` over `ssh`, whose
//! append-only store makes a rerun continue where a broken connection
//! stopped; its results, samples and environment records are fetched into
//! the shared results folder with atomic renames, in the order that keeps a
//! visible row's samples and environment already in place.
//!
//! The transport is `ssh` alone (files travel through `cat` on the
//! connection), so a board needs a POSIX shell, `sha256sum` and `uname`,
//! not an SFTP server; `flock` is used when the board has it.

use crate::manifest::{DeviceJob, Manifest, Placement, shard_results};
use crate::{DevicePlan, SubmitConfig, quote};
use anyhow::{Context, Result, anyhow, bail};
use dlas_core::{Combination, Study};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `[user@]addr[:port]`: one board. IPv6 addresses go in brackets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Destination {
    pub user: Option<String>,
    pub addr: String,
    pub port: u16,
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(user) = &self.user {
            write!(f, "{user}@")?;
        }
        if self.addr.contains(':') {
            write!(f, "[{}]:{}", self.addr, self.port)
        } else {
            write!(f, "{}:{}", self.addr, self.port)
        }
    }
}

impl std::str::FromStr for Destination {
    type Err = String;
    fn from_str(text: &str) -> Result<Destination, String> {
        let bad = |why: &str| format!("`{text}` is not [user@]addr[:port]: {why}");
        let (user, rest) = match text.rsplit_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, text),
        };
        if let Some(user) = user
            && (user.is_empty()
                || !user
                    .chars()
                    .all(|c| c.is_alphanumeric() || "._-".contains(c)))
        {
            return Err(bad(
                "the user name is empty or has characters other than letters, digits, `.`, `_` and `-`",
            ));
        }
        let (addr, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let (addr, after) = bracketed
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address needs its closing `]`"))?;
            match after {
                "" => (addr, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (addr, Some(port)),
                    None => return Err(bad("write [addr]:port")),
                },
            }
        } else {
            match rest.split_once(':') {
                Some((addr, port)) => (addr, Some(port)),
                None => (rest, None),
            }
        };
        if addr.is_empty()
            || addr.starts_with('-')
            || !addr
                .chars()
                .all(|c| c.is_alphanumeric() || ".-_:%".contains(c))
        {
            return Err(bad(
                "the address is empty, starts with `-` or has characters not found in host names and IP addresses",
            ));
        }
        let port = match port {
            None => 22,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(bad(&format!("port `{p}` is not a number from 1 to 65535"))),
            },
        };
        Ok(Destination {
            user: user.map(String::from),
            addr: addr.to_string(),
            port,
        })
    }
}

/// `device=[user@]addr[:port]` from `--host`: a board that runs `device`'s
/// shards. A device may have several boards; its shards go round-robin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshHost {
    pub device: String,
    pub destination: Destination,
}

impl std::str::FromStr for SshHost {
    type Err = String;
    fn from_str(text: &str) -> Result<SshHost, String> {
        let (device, destination) = text
            .split_once('=')
            .filter(|(d, _)| !d.trim().is_empty())
            .ok_or_else(|| format!("`{text}` is not device=[user@]addr[:port]"))?;
        Ok(SshHost {
            device: device.trim().to_string(),
            destination: destination.trim().parse()?,
        })
    }
}

/// How `ssh` is called: what `--identity`, `--ssh-option` and
/// `--connect-timeout` say. `BatchMode=yes` is always on, so a board that
/// wants a password fails at once instead of waiting for one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transport {
    pub identity: Option<PathBuf>,
    /// `Key=Value` options passed with `-o`, before the defaults, so they win.
    pub options: Vec<String>,
    pub connect_timeout_s: u64,
}

/// Options the coordinator's connection handling depends on.
const RESERVED: [&str; 5] = [
    "BatchMode",
    "ControlMaster",
    "ControlPath",
    "ControlPersist",
    "ConnectTimeout",
];

/// The SSH side of a submission.
#[derive(Debug, Clone)]
pub struct SshConfig {
    pub hosts: Vec<SshHost>,
    pub transport: Transport,
    /// The folder on each board (relative paths start at the login's home).
    pub remote_dir: String,
    /// The ONNX Runtime library copied to boards of the same architecture.
    pub ort_library: Option<PathBuf>,
}

/// What the manifest records for a device run over SSH.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SshPlacement {
    /// Shard `i` runs on `hosts[i % hosts.len()]`.
    pub hosts: Vec<Destination>,
    pub remote_dir: String,
    pub transport: Transport,
    /// The local binary that was copied.
    pub binary: PathBuf,
    /// Each shard's results file on its board, relative to `remote_dir`.
    /// The name is a hash of the shard's plan and run arguments, so a rerun
    /// of the same shard resumes it and a different plan never mixes in.
    pub remote_results: Vec<String>,
}

impl Transport {
    /// Checks `--ssh-option` values and the timeout.
    fn check(&self) -> Result<()> {
        for option in &self.options {
            let valid = option.split_once('=').is_some_and(|(k, v)| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric()) && !v.is_empty()
            });
            if !valid {
                bail!(
                    "--ssh-option `{option}` is not Key=Value (e.g. StrictHostKeyChecking=accept-new)"
                );
            }
            let key = option.split('=').next().unwrap_or_default();
            if let Some(own) = RESERVED.iter().find(|r| r.eq_ignore_ascii_case(key)) {
                bail!(
                    "--ssh-option `{option}`: dlas sets {own} itself (one batch-mode connection per board); \
                     use --connect-timeout for the timeout"
                );
            }
        }
        if self.connect_timeout_s == 0 {
            bail!("--connect-timeout must be at least 1 second");
        }
        if let Some(identity) = &self.identity
            && !identity.is_file()
        {
            bail!("--identity {} is not a file", identity.display());
        }
        Ok(())
    }
}

/// Characters allowed in remote paths: they appear in shell commands, so
/// anything a shell would interpret is refused rather than escaped twice.
fn check_remote_path(what: &str, path: &str) -> Result<()> {
    if path.is_empty()
        || !path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/+".contains(c))
    {
        bail!(
            "{what} `{path}` may only use letters, digits and `._-/+` (relative paths start at the login's home folder)"
        );
    }
    Ok(())
}

/// A file the board needs, where it goes (relative to the remote folder)
/// and its sha256.
#[derive(Debug, Clone)]
struct Upload {
    local: PathBuf,
    remote: String,
    sha256: String,
}

/// One shard on its board.
struct Assignment<'a> {
    device: &'a str,
    shard: usize,
    count: usize,
    combinations: &'a [Combination],
    remote_results: String,
    /// The shard's results in the results folder (they seed a board that
    /// lost its copy).
    local_results: PathBuf,
}

/// Sends each device's shards to its boards, runs them, fetches the results.
/// Shards whose results are already complete in the results folder are
/// skipped, so running the same command again resumes a submission.
pub fn submit(study: &Study, config: &SubmitConfig, ssh: &SshConfig) -> Result<Manifest> {
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
    let plans = crate::plan_devices(study, config, &devices, |d| boards(d).len())?;
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
            let (done, planned) = crate::collect::shard_progress(&config.results_dir, job, shard);
            if done == planned {
                eprintln!(
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
    let mut models = dlas_runner::models::Models::new(&config.project_root)?;
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
            files.extend(model_uploads(
                study,
                config,
                &mut models,
                &host_combinations,
            )?);
            if let Some(library) = ssh.ort_library.as_ref().filter(|l| l.is_file()) {
                let version = dlas_backends::ort_runtime::VERSION;
                files.push(Upload {
                    local: library.clone(),
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

/// What every board needs: the binary, the study and the device specifications.
fn common_uploads(study: &Study, config: &SubmitConfig) -> Result<Vec<Upload>> {
    let study_file = study
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("{} has no file name", study.path.display()))?;
    check_remote_path("the study file name", study_file)?;
    let upload = |local: PathBuf, remote: String| Upload {
        local,
        remote,
        sha256: String::new(),
    };
    let mut files = vec![
        upload(config.dlas.clone(), "bin/dlas".into()),
        upload(
            config.study_path.clone(),
            format!("data/studies/{study_file}"),
        ),
    ];
    let devices_dir = config.project_root.join("data/devices");
    let mut specs: Vec<PathBuf> = std::fs::read_dir(&devices_dir)
        .with_context(|| format!("cannot read {}", devices_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    specs.sort();
    for spec in specs {
        let name = spec
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        check_remote_path("a device specification", name)?;
        files.push(upload(spec.clone(), format!("data/devices/{name}")));
    }
    Ok(files)
}

/// `models.lock` and the model files the host combinations read, at the
/// paths the board's `dlas run` looks for them: zoo models under `.cache/`,
/// a study's own models relative to the study file, which sits in
/// `data/studies/`.
fn model_uploads(
    study: &Study,
    config: &SubmitConfig,
    models: &mut dlas_runner::models::Models,
    combinations: &[Combination],
) -> Result<Vec<Upload>> {
    let mut files = vec![Upload {
        local: config.project_root.join("data/models.lock"),
        remote: "data/models.lock".into(),
        sha256: String::new(),
    }];
    let users: Vec<(PathBuf, &Path)> = study
        .onnx_models
        .iter()
        .map(|m| (study.onnx_model_path(m), m.path.as_path()))
        .collect();
    // Resolved (generated if absent) and hash-checked once per process by
    // `Models`, however many boards read the same file.
    let mut locals: Vec<PathBuf> = Vec::new();
    for c in combinations {
        let path = models.path(study, &dlas_runner::models::model_file_of(c))?;
        if !locals.contains(&path) {
            locals.push(path);
        }
    }
    for local in locals {
        let remote = match users.iter().find(|(path, _)| path == &local) {
            Some((_, written)) => {
                if written.is_absolute() {
                    bail!(
                        "onnx_model file {} has an absolute path in {}; a board gets the file at the \
                         same path relative to the study file, so give a relative path",
                        written.display(),
                        study.path.display()
                    );
                }
                normalise(&Path::new("data/studies").join(written)).ok_or_else(|| {
                    anyhow!(
                        "onnx_model file {} in {} lies too many folders above the study file for a board's copy",
                        written.display(),
                        study.path.display()
                    )
                })?
            }
            None => local
                .strip_prefix(&config.project_root)
                .map(|p| p.display().to_string())
                .map_err(|_| anyhow!("model {} is outside the project", local.display()))?,
        };
        check_remote_path("a model path", &remote)?;
        files.push(Upload {
            local,
            remote,
            sha256: String::new(),
        });
    }
    Ok(files)
}

/// `a/b/../c` → `a/c`; `None` when the path climbs above its start.
fn normalise(path: &Path) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(hex::encode(hasher.finalize()))
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

/// One multiplexed connection to a board: a master `ssh` of our own that
/// every command of the submission reuses, closed when dropped.
struct Session<'a> {
    destination: &'a Destination,
    transport: &'a Transport,
    root: &'a str,
    socket: PathBuf,
    master: Child,
    /// Names this connection's temporary files on the board.
    tag: String,
}

/// How many of a command's last error lines an error message quotes.
const ERROR_LINES: usize = 6;

impl<'a> Session<'a> {
    fn open(
        destination: &'a Destination,
        transport: &'a Transport,
        root: &'a str,
        socket: &Path,
    ) -> Result<Session<'a>> {
        let master = spawn_master(destination, transport, socket)?;
        let session = Session {
            destination,
            transport,
            root,
            socket: socket.to_path_buf(),
            master,
            tag: format!(
                "{}-{}-{:x}",
                std::process::id(),
                socket
                    .file_name()
                    .map_or("".into(), |n| n.to_string_lossy()),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos())
            ),
        };
        session.say("connected");
        Ok(session)
    }

    fn say(&self, message: &str) {
        eprintln!("[{}] {message}", self.destination);
    }

    /// Logs in again if the connection was lost (the master has exited), so
    /// one dropped link costs one shard, not the rest of the board's.
    fn reconnect_if_lost(&mut self) -> Result<()> {
        if self.master.try_wait()?.is_some() {
            self.say("connection lost; connecting again");
            self.master = spawn_master(self.destination, self.transport, &self.socket)?;
        }
        Ok(())
    }

    /// `ssh … target sh -c SCRIPT` through the master connection.
    fn command(&self, script: &str) -> Command {
        let mut command = ssh_command(self.destination, self.transport, &self.socket);
        command
            .args(["-o", "ControlMaster=no"])
            .arg(ssh_target(self.destination))
            .arg(format!("sh -c {}", quote(script)));
        command
    }

    /// Runs `script` on the board and returns its standard output; `step`
    /// names what failed.
    fn output(&self, step: &str, script: &str, stdin: Stdio) -> Result<Vec<u8>> {
        let output = self
            .command(script)
            .stdin(stdin)
            .output()
            .context("cannot run ssh")?;
        if !output.status.success() {
            bail!(self.failure(
                step,
                output.status.code(),
                &String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(output.stdout)
    }

    /// The message for a command that failed: a connection failure (ssh's
    /// own status 255) or the remote command's.
    fn failure(&self, step: &str, code: Option<i32>, stderr: &str) -> String {
        let detail = last_lines(stderr, ERROR_LINES).unwrap_or_else(|| "no message".into());
        match code {
            Some(255) => {
                // A lost connection is reported by the master, not by the
                // command that used it (whose output is the board's).
                let master = std::fs::read_to_string(self.socket.with_extension("log"))
                    .ok()
                    .and_then(|log| last_lines(&log, 1));
                let reason = match master {
                    Some(reason) => format!("{reason} (last output: {detail})"),
                    None => detail,
                };
                format!("ssh to {} failed while {step}: {reason}", self.destination)
            }
            Some(code) => format!(
                "{step} on {} failed (exit status {code}): {detail}",
                self.destination
            ),
            None => format!(
                "{step} on {} was stopped by a signal: {detail}",
                self.destination
            ),
        }
    }

    /// Creates the remote folders, checks the architecture, and copies the
    /// files that are missing or differ, verifying each by sha256 there.
    fn prepare(&self, files: &[Upload], assignments: &[Assignment]) -> Result<()> {
        let mut dirs: Vec<String> = files
            .iter()
            .map(|f| parent(&f.remote))
            .chain(assignments.iter().map(|a| parent(&a.remote_results)))
            .collect();
        dirs.sort();
        dirs.dedup();
        let probed: Vec<String> = files
            .iter()
            .map(|f| f.remote.clone())
            .chain(assignments.iter().map(|a| a.remote_results.clone()))
            .collect();
        let script = format!(
            "set -e; mkdir -p {root}; cd {root}; uname -m; mkdir -p {dirs}; \
             for f in {probed}; do if [ -f \"$f\" ]; then sha256sum \"$f\"; fi; done",
            root = quote(self.root),
            dirs = words(&dirs),
            probed = words(&probed),
        );
        let output = String::from_utf8_lossy(&self.output(
            "inspecting the remote folder",
            &script,
            Stdio::null(),
        )?)
        .into_owned();
        let mut lines = output.lines();
        let arch = lines.next().unwrap_or_default().trim().to_string();
        let present: HashMap<String, String> = lines
            .filter_map(|l| {
                let (hash, path) = l.split_once(char::is_whitespace)?;
                Some((
                    path.trim().trim_start_matches('*').to_string(),
                    hash.to_string(),
                ))
            })
            .collect();
        let mut send: Vec<&Upload> = Vec::new();
        for file in files {
            let family = elf_arch(&file.local);
            if let Some(built) = family
                && built != arch_family(&arch)
            {
                if file.remote == "bin/dlas" {
                    bail!(
                        "{} is a {arch} board, but {} is built for {built}; build dlas for the board \
                         (e.g. cargo build --release --target aarch64-unknown-linux-gnu) and pass it with --dlas",
                        self.destination,
                        file.local.display()
                    );
                }
                self.say(&format!(
                    "not copying {} (built for {built}, the board is {arch}); its combinations run only \
                     if the board has its own copy at {}/{}",
                    file.local.display(),
                    self.root,
                    file.remote
                ));
                continue;
            }
            if present.get(&file.remote) != Some(&file.sha256) {
                send.push(file);
            }
        }
        // A shard fetched earlier whose board lost its results (a wiped or
        // replaced board) starts from the rows fetched, not from nothing.
        let mut seeds = Vec::new();
        for a in assignments {
            if !present.contains_key(&a.remote_results) && a.local_results.exists() {
                seeds.push(Upload {
                    local: a.local_results.clone(),
                    remote: a.remote_results.clone(),
                    sha256: sha256_file(&a.local_results)?,
                });
                let samples = dlas_runner::store::samples_path(&a.local_results);
                if samples.exists() {
                    seeds.push(Upload {
                        sha256: sha256_file(&samples)?,
                        local: samples,
                        remote: dlas_runner::store::samples_path(Path::new(&a.remote_results))
                            .display()
                            .to_string(),
                    });
                }
            }
        }
        send.extend(seeds.iter());
        if send.is_empty() {
            self.say(&format!("{arch}; all {} files already there", files.len()));
            return Ok(());
        }
        let bytes: u64 = send
            .iter()
            .filter_map(|f| std::fs::metadata(&f.local).ok())
            .map(|m| m.len())
            .sum();
        let mut names: Vec<&str> = send.iter().take(4).map(|f| f.remote.as_str()).collect();
        let more = format!("and {} more", send.len().saturating_sub(4));
        if send.len() > 4 {
            names.push(&more);
        }
        self.say(&format!(
            "{arch}; copying {} of {} files ({:.1} MB): {}",
            send.len(),
            files.len() + seeds.len(),
            bytes as f64 / 1e6,
            names.join(", ")
        ));
        let part = |f: &Upload| format!("{}.{}.part", f.remote, self.tag);
        for file in &send {
            let source = std::fs::File::open(&file.local)
                .with_context(|| format!("cannot read {}", file.local.display()))?;
            let script = format!("cat > {}", quote(&format!("{}/{}", self.root, part(file))));
            self.output(
                &format!("copying {}", file.remote),
                &script,
                Stdio::from(source),
            )?;
        }
        let checks: Vec<String> = send
            .iter()
            .map(|f| format!("{}  {}", f.sha256, part(f)))
            .collect();
        let moves: Vec<String> = send
            .iter()
            .map(|f| format!("mv -f {} {}", quote(&part(f)), quote(&f.remote)))
            .collect();
        let script = format!(
            "set -e; cd {}; printf '%s\\n' {} | sha256sum -c - 1>&2; {}; chmod 755 bin/dlas",
            quote(self.root),
            words(&checks),
            moves.join("; ")
        );
        self.output("checking the copied files' sha256", &script, Stdio::null())?;
        Ok(())
    }

    /// Runs one shard on the board, streaming its progress. The run holds
    /// a lock on its results file (a run left over from a broken connection
    /// is waited for, not duplicated) and dies with the connection: a
    /// watcher kills it when the board sees the end of ssh's input.
    fn run_shard(&self, a: &Assignment, study: &Study, config: &SubmitConfig) -> Result<()> {
        let study_file = study
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let mut run = vec![
            "./bin/dlas".to_string(),
            "--root".into(),
            ".".into(),
            "run".into(),
            "--study".into(),
            quote(&format!("data/studies/{study_file}")),
            "--device".into(),
            quote(a.device),
            "--filter".into(),
            quote(&config.filter),
            "--shard".into(),
            format!("{}/{}", a.shard, a.count),
            "--out".into(),
            quote(&a.remote_results),
        ];
        run.extend(config.run_args.iter().map(|arg| quote(arg)));
        let lock = quote(&a.remote_results.replace(".csv", ".lock"));
        let script = format!(
            "set -e; cd {root}; \
             if command -v flock >/dev/null 2>&1; then exec 9>{lock}; \
             if ! flock -n 9; then echo 'a run of this shard from an earlier connection is still going; waiting for it' >&2; flock 9; fi; fi; \
             exec 3<&0; {run} </dev/null 3<&- & pid=$!; \
             ( exec 9>&-; cat <&3 >/dev/null 2>&1; kill $pid 2>/dev/null ) >/dev/null 2>&1 & \
             set +e; wait $pid; exit $?",
            root = quote(self.root),
            run = run.join(" "),
        );
        self.say(&format!(
            "{} shard {}/{}: running {} combination(s)",
            a.device,
            a.shard,
            a.count,
            a.combinations.len()
        ));
        let mut child = self
            .command(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run ssh")?;
        // Kept open until the run ends: its end is the board's signal that we are gone.
        let stdin = child.stdin.take();
        let prefix = format!(
            "[{}] {} {}/{}:",
            self.destination, a.device, a.shard, a.count
        );
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let tail = std::thread::scope(|scope| {
            scope.spawn(|| relay(stdout, &prefix, 0));
            relay(stderr, &prefix, ERROR_LINES)
        });
        let status = child.wait().context("cannot wait for ssh")?;
        drop(stdin);
        if !status.success() {
            bail!(self.failure(
                &format!("running {} shard {}/{}", a.device, a.shard, a.count),
                status.code(),
                &tail.join("\n")
            ));
        }
        Ok(())
    }

    /// Copies the shard's results, samples and the environment records its
    /// rows name into the results folder. Returns the number of rows.
    fn fetch_shard(&self, a: &Assignment, results_dir: &Path) -> Result<usize> {
        let step = format!("fetching {} shard {}/{}", a.device, a.shard, a.count);
        let csv_remote = &a.remote_results;
        let samples_remote = dlas_runner::store::samples_path(Path::new(csv_remote))
            .display()
            .to_string();
        let listing = self.output(
            &step,
            &format!(
                "cd {} && for f in {} {}; do if [ -f \"$f\" ]; then echo \"$f\"; fi; done",
                quote(self.root),
                quote(csv_remote),
                quote(&samples_remote)
            ),
            Stdio::null(),
        )?;
        let listing = String::from_utf8_lossy(&listing);
        if !listing.lines().any(|l| l == csv_remote) {
            return Ok(0);
        }
        let device_dir = results_dir.join(a.device);
        let staging = device_dir.join(".fetch");
        std::fs::create_dir_all(&staging)
            .with_context(|| format!("cannot create {}", staging.display()))?;
        let local_csv = &a.local_results;
        let staged_csv = staging.join(local_csv.file_name().expect("a file name"));
        let csv = whole_lines(self.download(&step, csv_remote)?);
        dlas_core::atomic::write_atomic(&staged_csv, &csv)?;
        let rows = dlas_core::results::read_results(&staged_csv)
            .with_context(|| format!("{step}: the fetched results are not valid"))?;
        // Rows fetched before must still be there: the board's copy only grows.
        if local_csv.exists() {
            let fetched: HashSet<&str> = rows.iter().map(|r| r.id.as_str()).collect();
            let lost = dlas_core::results::read_results(local_csv)?
                .into_iter()
                .filter(|r| !fetched.contains(r.id.as_str()))
                .count();
            if lost > 0 {
                bail!(
                    "{step}: {}:{}/{csv_remote} lacks {lost} rows of {}; keeping the local copy",
                    self.destination,
                    self.root,
                    local_csv.display()
                );
            }
        }
        let sources: BTreeMap<&str, ()> = rows
            .iter()
            .filter(|r| r.source.starts_with("env-"))
            .map(|r| (r.source.as_str(), ()))
            .collect();
        for env in sources.keys() {
            let local = device_dir.join(format!("{env}.json"));
            if !local.exists() {
                let remote = format!("{}/{env}.json", parent(csv_remote));
                dlas_core::atomic::write_atomic(&local, &self.download(&step, &remote)?)?;
            }
        }
        if listing.lines().any(|l| l == samples_remote) {
            let samples = whole_lines(self.download(&step, &samples_remote)?);
            dlas_core::atomic::write_atomic(
                &dlas_runner::store::samples_path(local_csv),
                &samples,
            )?;
        }
        std::fs::rename(&staged_csv, local_csv)
            .with_context(|| format!("cannot move {} into place", local_csv.display()))?;
        let _ = std::fs::remove_dir(&staging);
        Ok(rows.len())
    }

    fn download(&self, step: &str, remote: &str) -> Result<Vec<u8>> {
        self.output(
            step,
            &format!("cat {}", quote(&format!("{}/{remote}", self.root))),
            Stdio::null(),
        )
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let _ = ssh_command(self.destination, self.transport, &self.socket)
            .args(["-O", "exit"])
            .arg(ssh_target(self.destination))
            .stdin(Stdio::null())
            .output();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.master.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.master.kill();
        let _ = self.master.wait();
    }
}

/// Starts the master connection of a board and waits until it has logged
/// in (its control socket appears) or failed (its reason is in its log).
fn spawn_master(destination: &Destination, transport: &Transport, socket: &Path) -> Result<Child> {
    let log_path = socket.with_extension("log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut master = ssh_command(destination, transport, socket)
        .args(["-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-N"])
        .arg(ssh_target(destination))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot run ssh; install the OpenSSH client (openssh-client)")?;
    let patience = Duration::from_secs(transport.connect_timeout_s * 3 + 10);
    let deadline = Instant::now() + patience;
    while !socket.exists() {
        if let Some(status) = master.try_wait()? {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let hint = if log.contains("Host key verification failed") {
                format!(
                    "; add the board's key to known_hosts (ssh-keyscan -p {} {}) or pass \
                     --ssh-option StrictHostKeyChecking=accept-new",
                    destination.port, destination.addr
                )
            } else {
                String::new()
            };
            bail!(
                "ssh to {destination} failed: {}{hint}",
                last_lines(&log, 2).unwrap_or_else(|| format!("exit status {status}"))
            );
        }
        if Instant::now() > deadline {
            let _ = master.kill();
            let _ = master.wait();
            bail!(
                "ssh to {destination} failed: no session after {} s",
                patience.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(master)
}

/// `ssh` with the transport's options; the caller adds the target and command.
fn ssh_command(destination: &Destination, transport: &Transport, socket: &Path) -> Command {
    let mut command = Command::new("ssh");
    command.args(["-o", "BatchMode=yes"]);
    for option in &transport.options {
        command.arg("-o").arg(option);
    }
    if let Some(identity) = &transport.identity {
        command
            .arg("-i")
            .arg(identity)
            .args(["-o", "IdentitiesOnly=yes"]);
    }
    command
        .arg("-o")
        .arg(format!("ConnectTimeout={}", transport.connect_timeout_s))
        // A dead link is noticed within a minute instead of hanging a run.
        .args([
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "ServerAliveCountMax=4",
        ])
        .args(["-o", "LogLevel=ERROR"])
        .arg("-o")
        .arg(format!("ControlPath={}", socket.display()))
        .arg("-p")
        .arg(destination.port.to_string());
    if let Some(user) = &destination.user {
        command.arg("-l").arg(user);
    }
    command
}

fn ssh_target(destination: &Destination) -> &str {
    &destination.addr
}

/// Prints each line of `stream` with `prefix`; returns its last `keep` lines.
fn relay(stream: impl Read, prefix: &str, keep: usize) -> Vec<String> {
    let mut tail = std::collections::VecDeque::new();
    for line in BufReader::new(stream).lines().map_while(Result::ok) {
        eprintln!("{prefix} {line}");
        if keep > 0 {
            if tail.len() == keep {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
    tail.into()
}

fn last_lines(text: &str, n: usize) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    (!lines.is_empty()).then(|| lines[lines.len().saturating_sub(n)..].join(" / "))
}

/// Drops a last line cut short (a file read while it was being appended to).
fn whole_lines(mut bytes: Vec<u8>) -> Vec<u8> {
    let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    bytes.truncate(end);
    bytes
}

fn parent(path: &str) -> String {
    path.rsplit_once('/')
        .map_or(".", |(dir, _)| dir)
        .to_string()
}

fn words(items: &[String]) -> String {
    items.iter().map(|s| quote(s)).collect::<Vec<_>>().join(" ")
}

/// The architecture an ELF file is built for, in `uname -m`'s families.
fn elf_arch(path: &Path) -> Option<&'static str> {
    let mut header = [0u8; 20];
    std::fs::File::open(path)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    if &header[..4] != b"\x7fELF" {
        return None;
    }
    let machine = match header[5] {
        1 => u16::from_le_bytes([header[18], header[19]]),
        _ => u16::from_be_bytes([header[18], header[19]]),
    };
    Some(match machine {
        0x03 => "x86",
        0x3e => "x86_64",
        0x28 => "arm",
        0xb7 => "aarch64",
        0xf3 => "riscv64",
        _ => return None,
    })
}

/// `uname -m` reduced to the families of [`elf_arch`].
fn arch_family(uname: &str) -> &str {
    match uname {
        "x86_64" | "amd64" => "x86_64",
        "aarch64" | "arm64" => "aarch64",
        "i386" | "i486" | "i586" | "i686" => "x86",
        m if m.starts_with("arm") => "arm",
        m => m,
    }
}

/// The state of one shard of an SSH device, from the results fetched so far.
pub fn shard_state(
    results_dir: &Path,
    job: &DeviceJob,
    placement: &SshPlacement,
    shard: usize,
) -> String {
    let host = &placement.hosts[shard % placement.hosts.len()];
    if !shard_results(results_dir, &job.device, shard).exists() {
        return format!("not fetched (runs on {host})");
    }
    match crate::collect::shard_progress(results_dir, job, shard) {
        (done, planned) if done == planned => format!("done ({done} rows fetched from {host})"),
        (done, planned) => {
            format!("partial: {done} of {planned} rows fetched from {host}; submit again to resume")
        }
    }
}

/// The submit commands that resume exactly the incomplete SSH devices (a
/// rerun skips their complete shards): one per shard count, since
/// `--shards` applies to every device of a command.
pub fn resubmit_commands(
    manifest: &Manifest,
    results_dir: &Path,
    incomplete: &[(&DeviceJob, Vec<usize>)],
) -> Vec<String> {
    let mut groups: Vec<(usize, &SshPlacement, Vec<&DeviceJob>)> = Vec::new();
    for (job, _) in incomplete {
        let Placement::Ssh(placement) = &job.placement else {
            continue;
        };
        match groups.iter_mut().find(|(n, p, _)| {
            *n == job.shards
                && (&p.remote_dir, &p.transport, &p.binary)
                    == (
                        &placement.remote_dir,
                        &placement.transport,
                        &placement.binary,
                    )
        }) {
            Some((_, _, jobs)) => jobs.push(job),
            None => groups.push((job.shards, placement, vec![job])),
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
            for job in jobs {
                let Placement::Ssh(p) = &job.placement else {
                    continue;
                };
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

/// A word for a shell command line: quoted only when it needs to be.
fn shell_word(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/+=:@,".contains(c))
    {
        text.to_string()
    } else {
        quote(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts() {
        let h: SshHost = "hikey970-cpu=linaro@10.0.0.5".parse().unwrap();
        assert_eq!(h.device, "hikey970-cpu");
        assert_eq!(h.destination.user.as_deref(), Some("linaro"));
        assert_eq!(h.destination.port, 22);
        assert_eq!(h.destination.to_string(), "linaro@10.0.0.5:22");
        let h: SshHost = "host=root@127.0.0.1:2222".parse().unwrap();
        assert_eq!(h.destination.port, 2222);
        let h: SshHost = "host=[::1]:2022".parse().unwrap();
        assert_eq!(h.destination.addr, "::1");
        assert_eq!(h.destination.to_string(), "[::1]:2022");
        let h: SshHost = "host=board".parse().unwrap();
        assert_eq!((h.destination.user, h.destination.port), (None, 22));
        for bad in [
            "host",
            "=pi@x",
            "host=",
            "host=@x",
            "host=pi@x:port",
            "host=pi@x:0",
            "host=pi@x:70000",
            "host=-oProxyCommand=x",
            "host=pi@x y",
            "host=[::1",
            "host=[::1]2022",
        ] {
            let error = bad.parse::<SshHost>().unwrap_err();
            assert!(error.contains('`'), "{bad}: {error}");
        }
    }

    #[test]
    fn checks_transport_options() {
        let transport = |options: &[&str]| Transport {
            identity: None,
            options: options.iter().map(|s| s.to_string()).collect(),
            connect_timeout_s: 5,
        };
        assert!(
            transport(&["StrictHostKeyChecking=accept-new"])
                .check()
                .is_ok()
        );
        for bad in [
            "StrictHostKeyChecking",
            "=x",
            "Key=",
            "Proxy Command=x",
            "batchmode=no",
            "ControlPath=/tmp/x",
        ] {
            let error = transport(&[bad]).check().unwrap_err().to_string();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn normalises_and_checks_remote_paths() {
        assert_eq!(
            normalise(Path::new("data/studies/../../models/m.onnx")).as_deref(),
            Some("models/m.onnx")
        );
        assert_eq!(normalise(Path::new("data/studies/../../../m.onnx")), None);
        assert!(check_remote_path("x", "dlas/.cache/a-b_c+1.onnx").is_ok());
        for bad in ["", "a b", "a;rm", "$HOME/x", "~/x", "a'b"] {
            assert!(check_remote_path("x", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_architectures() {
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            elf_arch(&exe).map(|a| a == arch_family(std::env::consts::ARCH)),
            Some(true)
        );
        assert_eq!(arch_family("armv7l"), "arm");
        assert_eq!(arch_family("arm64"), "aarch64");
        assert_eq!(whole_lines(b"a\nb\nc".to_vec()), b"a\nb\n");
    }
}
