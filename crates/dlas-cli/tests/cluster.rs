//! A real one-node Slurm cluster on this machine (slurmctld and slurmd on
//! localhost, no munge): submit a small study of mocked and host
//! combinations, wait, collect, and compare with a local run of the same
//! plan. The test starts and stops its own daemons and leaves nothing
//! running. Where Slurm is not installed it is skipped, except in CI
//! (`.ci/run` installs `slurm-wlm`).

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
    if !installed {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install slurm-wlm (see .ci/run)"
        );
        eprintln!("skipped: Slurm is not installed (apt-get install slurm-wlm)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(tmp.path());
    let results = tmp.path().join("results");
    let filter = "dataset=cifar10,model=mobilenetv1,compression=dense,tuned=false";
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
    assert_eq!(i7(&local_text).len(), 3);
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
