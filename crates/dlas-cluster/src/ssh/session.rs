//! The process session with one board: a master `ssh` connection of our
//! own that every command of a submission reuses (logged in again if it is
//! lost), the remote run of a shard whose life is tied to the connection,
//! and the fetch of its results, samples and environment records into the
//! results folder with atomic renames.

use super::address::{Destination, Transport};
use crate::config::SubmitConfig;
use crate::shell::quote;
use anyhow::{Context, Result, bail};
use dlas_core::results::samples_path;
use dlas_core::{Combination, Study};
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One shard on its board.
pub(super) struct Assignment<'a> {
    pub(super) device: &'a str,
    pub(super) shard: usize,
    pub(super) count: usize,
    pub(super) combinations: &'a [Combination],
    pub(super) remote_results: String,
    /// The shard's results in the results folder (they seed a board that
    /// lost its copy).
    pub(super) local_results: PathBuf,
}

/// One multiplexed connection to a board: a master `ssh` of our own that
/// every command of the submission reuses, closed when dropped.
pub(super) struct Session<'a> {
    pub(super) destination: &'a Destination,
    transport: &'a Transport,
    pub(super) root: &'a str,
    socket: PathBuf,
    master: Child,
    /// Names this connection's temporary files on the board.
    pub(super) tag: String,
}

/// How many of a command's last error lines an error message quotes.
const ERROR_LINES: usize = 6;

impl<'a> Session<'a> {
    pub(super) fn open(
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

    pub(super) fn say(&self, message: &str) {
        dlas_core::errln!("[{}] {message}", self.destination);
    }

    /// Logs in again if the connection was lost (the master has exited), so
    /// one dropped link costs one shard, not the rest of the board's.
    pub(super) fn reconnect_if_lost(&mut self) -> Result<()> {
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
    pub(super) fn output(&self, step: &str, script: &str, stdin: Stdio) -> Result<Vec<u8>> {
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

    /// Runs one shard on the board, streaming its progress. The run holds
    /// a lock on its results file (a run left over from a broken connection
    /// is waited for, not duplicated) and dies with the connection: a
    /// watcher kills it when the board sees the end of ssh's input.
    pub(super) fn run_shard(
        &self,
        a: &Assignment,
        study: &Study,
        config: &SubmitConfig,
    ) -> Result<()> {
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
    pub(super) fn fetch_shard(&self, a: &Assignment, results_dir: &Path) -> Result<usize> {
        let step = format!("fetching {} shard {}/{}", a.device, a.shard, a.count);
        let csv_remote = &a.remote_results;
        let samples_remote = samples_path(Path::new(csv_remote)).display().to_string();
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
            dlas_core::atomic::write_atomic(&samples_path(local_csv), &samples)?;
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
        dlas_core::errln!("{prefix} {line}");
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

pub(super) fn parent(path: &str) -> String {
    path.rsplit_once('/')
        .map_or(".", |(dir, _)| dir)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_whole_lines() {
        assert_eq!(whole_lines(b"a\nb\nc".to_vec()), b"a\nb\n");
        assert_eq!(whole_lines(b"a\n".to_vec()), b"a\n");
        assert_eq!(whole_lines(b"a".to_vec()), b"");
    }
}
