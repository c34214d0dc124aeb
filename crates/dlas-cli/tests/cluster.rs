//! The coordinator against real engines started by the tests themselves:
//! a one-node Slurm cluster (slurmctld and slurmd on localhost, no munge)
//! and an OpenSSH server on loopback standing in for an edge board. Each
//! test submits a small study of mocked and host combinations, collects it,
//! and compares it with a local run of the same plan; each starts and stops
//! its own daemons and leaves nothing running. Where Slurm or sshd is not
//! installed the test fails saying which package it needs; `cargo xtask
//! test` leaves it out then and counts it as skipped (`.ci/run` installs
//! both and may skip nothing).

mod common;

use common::root;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The daemons of the test cluster; stopped on drop, even when the test fails.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let conf = dir.join("slurm.conf");
        for sub in ["state", "spool"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let d = dir.display();
        std::fs::write(
            &conf,
            format!(
                "ClusterName=dlastest\nSlurmctldHost=localhost\nAuthType=auth/none\nCredType=cred/none\n\
                 SlurmUser=root\nSlurmdUser=root\nSlurmctldPort=6817\nSlurmdPort=6818\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_CPU\nSchedulerType=sched/backfill\n\
                 AccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none\n\
                 JobCompType=jobcomp/none\nMpiDefault=none\nReturnToService=2\n\
                 NodeName=localhost CPUs={} RealMemory=4000 State=UNKNOWN\n\
                 PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        )
        .unwrap();
        let cluster = Cluster {
            dir: dir.to_path_buf(),
            conf: conf.clone(),
        };
        assert!(
            Command::new("slurmctld")
                .arg("-f")
                .arg(&conf)
                .status()
                .unwrap()
                .success()
        );
        assert!(
            Command::new("slurmd")
                .arg("-f")
                .arg(&conf)
                .args(["-N", "localhost"])
                .status()
                .unwrap()
                .success()
        );
        let started = Instant::now();
        loop {
            let out = cluster
                .command("sinfo")
                .args(["-h", "-o", "%T"])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&out.stdout).contains("idle") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the test cluster did not come up"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        cluster
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    fn idle(&self) -> bool {
        let out = self
            .command("squeue")
            .args(["-h", "-o", "%i"])
            .output()
            .unwrap();
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim().is_empty()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for daemon in ["slurmd", "slurmctld"] {
            let pid_file = self.dir.join(format!("{daemon}.pid"));
            if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                let pid = pid.trim().to_string();
                let _ = Command::new("kill").arg(&pid).status();
                let started = Instant::now();
                while Path::new(&format!("/proc/{pid}")).exists()
                    && started.elapsed() < Duration::from_secs(10)
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}

fn dlas(cluster: &Cluster, args: &[&str]) -> std::process::Output {
    let mut cmd = cluster.command(env!("CARGO_BIN_EXE_dlas"));
    cmd.arg("--root").arg(root()).args(args);
    cmd.output().unwrap()
}

#[test]
fn slurm_cluster_runs_and_merges_a_study() {
    let installed = Command::new("slurmctld").arg("-V").output().is_ok();
    assert!(
        installed,
        "needs Slurm: `sudo apt-get install slurm-wlm`; \
         `cargo xtask test` skips this test without it"
    );
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(tmp.path());
    let results = tmp.path().join("results");
    // Only runtimes every node has (see the SSH test below).
    let filter = "dataset=cifar10,model=mobilenetv1,compression=dense,tuned=false,layout=nchw,\
                  compiler=native|tract-plain|tract-opt|ort-noopt|ort-opt";
    let out = dlas(
        &cluster,
        &[
            "cluster",
            "submit",
            "--study",
            "dlas",
            "--map",
            "i7=debug",
            "--map",
            "host=debug",
            "--shards",
            "2",
            "--filter",
            filter,
            "--results-dir",
            results.to_str().unwrap(),
            "--time",
            "00:10:00",
            "--run-args",
            "--runs",
            "5",
            "--warmup",
            "1",
            "--threads",
            "1",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = std::fs::read_to_string(results.join("jobs/host.sbatch")).unwrap();
    assert!(
        script.contains("#SBATCH --exclusive") && script.contains("#SBATCH --array=0-1"),
        "{script}"
    );
    let started = Instant::now();
    while !cluster.idle() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "jobs did not finish"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let status = dlas(
        &cluster,
        &[
            "cluster",
            "status",
            "--results-dir",
            results.to_str().unwrap(),
        ],
    );
    let status = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.matches(": done").count(), 4, "{status}");
    let merged = tmp.path().join("merged.csv");
    let out = dlas(
        &cluster,
        &[
            "cluster",
            "collect",
            "--results-dir",
            results.to_str().unwrap(),
            "--out",
            merged.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same plan run locally: mocked rows must be identical byte for byte.
    let local = tmp.path().join("local.csv");
    let out = dlas(
        &cluster,
        &[
            "run",
            "--device",
            "i7",
            "--filter",
            filter,
            "--out",
            local.to_str().unwrap(),
            "--runs",
            "5",
            "--warmup",
            "1",
            "--threads",
            "1",
        ],
    );
    assert!(out.status.success());
    let merged_text = std::fs::read_to_string(&merged).unwrap();
    let local_text = std::fs::read_to_string(&local).unwrap();
    let i7 = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(",i7,"))
            .map(String::from)
            .collect()
    };
    assert_eq!(i7(&merged_text), i7(&local_text));
    assert_eq!(i7(&local_text).len(), 4, "one i7 row per algorithm");
    let planned = dlas(
        &cluster,
        &[
            "plan",
            "--format",
            "ids",
            "--filter",
            &format!("{filter},device=host"),
        ],
    );
    let planned = String::from_utf8_lossy(&planned.stdout).lines().count();
    let host_rows = dlas_core::results::read_results(&merged)
        .unwrap()
        .into_iter()
        .filter(|r| r.device == "host")
        .collect::<Vec<_>>();
    assert_eq!(host_rows.len(), planned);
    assert!(
        host_rows.iter().all(|r| r.status.has_timing()),
        "{host_rows:?}"
    );
}

/// An OpenSSH server on 127.0.0.1 at a free, non-standard port, with a host
/// key, a user key and `known_hosts` made for the test. Stopped on drop with
/// every session it forked, even when the test fails.
struct Sshd {
    dir: PathBuf,
    port: u16,
    server: std::process::Child,
}

impl Sshd {
    fn start(dir: &Path) -> Sshd {
        for key in ["host_key", "user_key", "stranger_key"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key))
                .status()
                .unwrap();
            assert!(made.success(), "ssh-keygen failed");
        }
        std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).unwrap();
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let d = dir.display();
        std::fs::write(
            dir.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
                 AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPidFile {d}/sshd.pid\nMaxSessions 50\n"
            ),
        )
        .unwrap();
        let host_key = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
        let host_key: Vec<&str> = host_key.split_whitespace().take(2).collect();
        std::fs::write(
            dir.join("known_hosts"),
            format!("[127.0.0.1]:{port} {}\n", host_key.join(" ")),
        )
        .unwrap();
        // sshd running as root insists on its privilege separation folder,
        // which Debian's service (not started here) would create.
        if !Path::new("/run/sshd").exists() {
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let server = Command::new("/usr/sbin/sshd")
            .arg("-D")
            .arg("-f")
            .arg(dir.join("sshd_config"))
            .arg("-E")
            .arg(dir.join("sshd.log"))
            .spawn()
            .unwrap();
        let mut sshd = Sshd {
            dir: dir.to_path_buf(),
            port,
            server,
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = sshd.server.try_wait().unwrap() {
                panic!(
                    "sshd exited ({status}): {}",
                    std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "sshd did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sshd
    }

    /// `--host` for `device` on this server, as the current user.
    fn host(&self, device: &str) -> String {
        let user = Command::new("id").arg("-un").output().unwrap();
        let user = String::from_utf8(user.stdout).unwrap();
        format!("{device}={}@127.0.0.1:{}", user.trim(), self.port)
    }

    /// The options that log in with the test's key and trust only its host key.
    fn options(&self, key: &str) -> Vec<String> {
        vec![
            "--identity".into(),
            self.dir.join(key).display().to_string(),
            "--ssh-option".into(),
            format!(
                "UserKnownHostsFile={}",
                self.dir.join("known_hosts").display()
            ),
            "--ssh-option".into(),
            "StrictHostKeyChecking=yes".into(),
            "--connect-timeout".into(),
            "5".into(),
        ]
    }

    /// Cuts every connection, as a network failure would: the server's
    /// session processes die, what they started is left to notice it.
    fn drop_connections(&self) {
        for pid in descendants(self.server.id()) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "sshd" {
                kill(pid);
            }
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        for pid in descendants(self.server.id()) {
            kill(pid);
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn kill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}

/// The processes below `pid`, children before grandchildren.
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            // The parent pid is the second field after the parenthesised name.
            let after = &stat[stat.rfind(')')? + 2..];
            Some((p, after.split(' ').nth(1)?.parse().ok()?))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Processes whose command line mentions `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != std::process::id())
        .filter_map(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

fn dlas_command(args: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlas"));
    cmd.arg("--root").arg(root()).args(args);
    cmd
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The remote results file of a device's shard (its name hashes the shard's plan).
fn remote_results(remote: &Path, device: &str, shard: usize) -> Option<PathBuf> {
    std::fs::read_dir(remote.join("results").join(device))
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&format!("shard-{shard}-")) && name.ends_with(".csv")
        })
}

#[test]
fn ssh_boards_run_resume_and_merge_a_study() {
    assert!(
        Path::new("/usr/sbin/sshd").exists(),
        "needs sshd: `sudo apt-get install openssh-server \
         openssh-client`; `cargo xtask test` skips this test without it"
    );
    let tmp = tempfile::tempdir().unwrap();
    let sshd = Sshd::start(tmp.path());
    let results = tmp.path().join("results");
    let remote = tmp.path().join("board");
    // The runtimes a board may lack (OpenVINO, TVM) are left out: this test
    // is about shards, connections and resuming, and needs rows that every
    // board can measure in a second.
    let filter = "dataset=cifar10,model=mobilenetv1,compression=dense,tuned=false,layout=nchw,\
                  compiler=native|tract-plain|tract-opt|ort-noopt|ort-opt";
    let submit = |key: &str| -> Vec<String> {
        let mut args: Vec<String> = [
            "cluster",
            "submit",
            "--study",
            "dlas",
            "--executor",
            "ssh",
            "--shards",
            "2",
            "--filter",
            filter,
            "--results-dir",
            results.to_str().unwrap(),
            "--remote-dir",
            remote.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        args.extend([
            "--host".into(),
            sshd.host("i7"),
            "--host".into(),
            sshd.host("host"),
        ]);
        args.extend(sshd.options(key));
        args.extend(
            [
                "--run-args",
                "--runs",
                "5",
                "--warmup",
                "1",
                "--threads",
                "1",
            ]
            .map(String::from),
        );
        args
    };
    let board = format!("127.0.0.1:{}", sshd.port);

    // A key the board does not know: a clear error naming the board, at once.
    let out = dlas_command(&submit("stranger_key")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("ssh to ")
            && stderr.contains(&board)
            && stderr.contains("Permission denied (publickey)"),
        "{stderr}"
    );

    // The first submission loses its connection while the host shard runs.
    let mut first = dlas_command(&submit("user_key"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let measured =
            remote_results(&remote, "host", 0).map_or(0, |p| lines(&p).len().saturating_sub(1));
        if measured >= 1 {
            break;
        }
        assert!(
            first.try_wait().unwrap().is_none(),
            "the submission ended before the host shard measured anything"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the host shard did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sshd.drop_connections();
    let out = first.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("host shard 0/2") && stderr.contains("did not complete"),
        "{stderr}"
    );
    // The board's next shard went through a new connection.
    assert!(
        stderr.contains("connection lost; connecting again")
            && stderr.contains("host shard 1/2: running"),
        "{stderr}"
    );
    // The board's run died with its connection: nothing is left running there.
    let shard0 = remote_results(&remote, "host", 0).unwrap();
    let shard0_name = shard0.file_name().unwrap().to_string_lossy().into_owned();
    let started = Instant::now();
    while !processes_with(&shard0_name).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a remote run outlived its connection: {:?}",
            processes_with(&shard0_name)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let measured_before = lines(&shard0);
    assert!(measured_before.len() >= 2, "{measured_before:?}");
    let status = common::ok(&[
        "cluster",
        "status",
        "--results-dir",
        results.to_str().unwrap(),
    ]);
    assert!(
        status.contains("host shard 0: partial") || status.contains("host shard 0: not fetched"),
        "{status}"
    );

    // Submitting again copies nothing, resumes the shard where it stopped
    // and leaves the complete shards alone.
    let out = dlas_command(&submit("user_key")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("files already there"), "{stderr}");
    assert!(
        stderr.contains(&format!("{} already done", measured_before.len() - 1)),
        "{stderr}"
    );
    assert!(stderr.contains("i7 shard 0/2: complete in"), "{stderr}");
    let fetched = lines(&results.join("host/shard-0.csv"));
    assert_eq!(
        fetched[..measured_before.len()],
        measured_before[..],
        "measured rows were re-measured"
    );

    // A board that lost its results (wiped, replaced) starts again from the
    // rows fetched before: only the others are measured.
    let local1 = results.join("host/shard-1.csv");
    let kept = lines(&local1)[..2].to_vec();
    std::fs::write(&local1, kept.join("\n") + "\n").unwrap();
    let samples1 = results.join("host/shard-1.samples.jsonl");
    std::fs::write(&samples1, lines(&samples1)[0].clone() + "\n").unwrap();
    let remote1 = remote_results(&remote, "host", 1).unwrap();
    std::fs::remove_file(&remote1).unwrap();
    std::fs::remove_file(remote1.with_extension("samples.jsonl")).unwrap();
    let out = dlas_command(&submit("user_key")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("1 already done"), "{stderr}");
    assert_eq!(
        lines(&local1)[..2],
        kept[..],
        "a fetched row was re-measured"
    );
    assert_eq!(lines(&samples1).len(), lines(&local1).len() - 1);

    let status = common::ok(&[
        "cluster",
        "status",
        "--results-dir",
        results.to_str().unwrap(),
    ]);
    assert_eq!(status.matches(": done").count(), 4, "{status}");

    let merged = tmp.path().join("merged.csv");
    common::ok(&[
        "cluster",
        "collect",
        "--results-dir",
        results.to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ]);
    // The same plan run locally: mocked rows must be identical byte for byte.
    let local = tmp.path().join("local.csv");
    common::ok(&[
        "run",
        "--device",
        "i7",
        "--filter",
        filter,
        "--out",
        local.to_str().unwrap(),
        "--runs",
        "5",
        "--warmup",
        "1",
        "--threads",
        "1",
    ]);
    let i7 = |path: &Path| -> Vec<String> {
        lines(path)
            .into_iter()
            .filter(|l| l.contains(",i7,"))
            .collect()
    };
    assert_eq!(i7(&merged), i7(&local));
    assert_eq!(i7(&local).len(), 4, "one i7 row per algorithm");
    let planned = common::ok(&[
        "plan",
        "--format",
        "ids",
        "--filter",
        &format!("{filter},device=host"),
    ]);
    let host_rows: Vec<_> = dlas_core::results::read_results(&merged)
        .unwrap()
        .into_iter()
        .filter(|r| r.device == "host")
        .collect();
    assert_eq!(host_rows.len(), planned.lines().count());
    assert!(
        host_rows.iter().all(|r| r.status.has_timing()),
        "{host_rows:?}"
    );
    // Every row's environment record was fetched beside it.
    for row in &host_rows {
        assert!(
            results
                .join("host")
                .join(format!("{}.json", row.source))
                .is_file(),
            "{}",
            row.source
        );
    }

    drop(sshd);
    assert!(processes_with(&tmp.path().display().to_string()).is_empty());
}
