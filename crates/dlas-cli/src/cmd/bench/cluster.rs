//! `dlas bench cluster`: the coordinator at scale, measured rather than
//! estimated (`docs/scaling.md` quotes it).
//!
//! A synthetic project is written to a folder: `--devices` mocked devices
//! (copies of this project's specifications under new ids) and a study of
//! the eight networks x five compressions x `--batches` batch sizes on the
//! native engine's GEMM, so each device gets 40 x B combinations. It is
//! planned, submitted to Slurm as a dry run (scripts and `cluster.json`,
//! no `sbatch`), every array task is run in this process exactly as
//! `dlas run --shard i/n` would run it (a few also as real processes, to
//! time a task as Slurm starts it and to check both give the same bytes),
//! and the shards are read by `status` and merged by `collect`.

use crate::project::Project;
use anyhow::{Context, Result, bail};
use dlas_cluster::{Executor, SlurmConfig, SubmitConfig};
use dlas_core::{Plan, results};
use dlas_devices::{MockProtocol, run_mocked};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Mocked devices in the synthetic fleet.
    #[arg(long, default_value_t = 50)]
    devices: usize,
    /// Batch sizes 1..=B: each device gets 40 x B combinations.
    #[arg(long, default_value_t = 5)]
    batches: usize,
    /// Combinations per array task.
    #[arg(long, default_value_t = 25)]
    runs_per_task: usize,
    /// Array tasks also run as separate `dlas run` processes.
    #[arg(long, default_value_t = 3)]
    process_tasks: usize,
    /// Write the synthetic project here and keep it (default: a temporary folder).
    #[arg(long)]
    dir: Option<PathBuf>,
}

const NETWORKS: [(&str, [&str; 4]); 2] = [
    (
        "cifar10",
        ["resnet18", "mobilenetv1", "mobilenetv2", "vgg16"],
    ),
    (
        "imagenet",
        ["resnet50", "mobilenetv2", "densenet161", "efficientnet_b0"],
    ),
];

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    if args.devices == 0 || args.batches == 0 || args.runs_per_task == 0 {
        bail!("--devices, --batches and --runs-per-task must be at least 1");
    }
    let temporary = tempfile::tempdir()?;
    let root = args
        .dir
        .clone()
        .unwrap_or_else(|| temporary.path().to_path_buf());
    if root.join("data").exists() {
        bail!(
            "{} already holds a project; give an empty or new --dir",
            root.display()
        );
    }
    let devices = write_project(project, &root, args)?;
    let synthetic = Project { root: root.clone() };
    let specs = synthetic.specs()?;
    let study = synthetic.study("scale", &specs)?;

    let started = Instant::now();
    let plan = Plan::expand(&study);
    let expand_s = started.elapsed().as_secs_f64();
    let combinations = plan.combinations.len();
    dlas_core::outln!(
        "fleet: {} devices, {combinations} combinations ({} per device, {} before rules); plan expanded in {:.3} s",
        devices.len(),
        combinations / devices.len(),
        plan.total_before_rules,
        expand_s
    );

    let results_dir = root.join("results");
    let config = SubmitConfig {
        dlas: std::env::current_exe()?,
        project_root: root.clone(),
        study_path: study.path.clone(),
        filter: String::new(),
        shards: None,
        runs_per_task: Some(args.runs_per_task),
        results_dir: results_dir.clone(),
        run_args: Vec::new(),
        executor: Executor::Slurm(SlurmConfig {
            map: devices
                .iter()
                .map(|d| format!("{d}=debug").parse())
                .collect::<Result<_, String>>()
                .map_err(anyhow::Error::msg)?,
            time_limit: "01:00:00".into(),
            dry_run: true,
        }),
    };
    let started = Instant::now();
    // A dry run on Slurm: the tasks would find their own model files.
    let mut models = crate::cmd::cluster::RunnerModels::new(&root);
    let manifest = dlas_cluster::submit(&study, &config, &mut models)?;
    let submit_s = started.elapsed().as_secs_f64();
    let tasks: usize = manifest.jobs.iter().map(|j| j.shards).sum();
    let manifest_bytes = size(&dlas_cluster::Manifest::path(&results_dir));
    let scripts_bytes: u64 = std::fs::read_dir(results_dir.join("jobs"))?
        .filter_map(|e| Some(size(&e.ok()?.path())))
        .sum();
    dlas_core::outln!(
        "submit (dry run): {} jobs, {tasks} array tasks of up to {} combinations; cluster.json {} bytes, \
         job scripts {scripts_bytes} bytes; {submit_s:.3} s",
        manifest.jobs.len(),
        args.runs_per_task,
        manifest_bytes
    );

    // The array tasks, in process: what `dlas run --device D --shard i/n` computes.
    let protocol = MockProtocol {
        warmup: study.protocol.warmup,
        runs: study.protocol.runs,
        seed: study.protocol.seed,
    };
    let plans = dlas_cluster::plan_devices(&study, &config, &devices, |_| 1)?;
    let started = Instant::now();
    let mut rows = 0;
    let mut bytes = 0u64;
    for plan in &plans {
        for (shard, combinations) in plan.shards.iter().enumerate() {
            let shard_rows = run_mocked(combinations, &specs, protocol)?;
            let csv = results::to_csv(&shard_rows)?;
            rows += shard_rows.len();
            bytes += csv.len() as u64;
            let path = dlas_cluster::manifest::shard_results(&results_dir, &plan.device, shard);
            dlas_core::atomic::write_atomic(&path, &csv)?;
        }
    }
    let tasks_s = started.elapsed().as_secs_f64();
    dlas_core::outln!(
        "tasks in process: {tasks} tasks, {rows} rows in {tasks_s:.2} s ({:.1} ms per task); \
         results {bytes} bytes, {:.0} bytes per row",
        tasks_s * 1e3 / tasks as f64,
        bytes as f64 / rows.max(1) as f64
    );

    // A few tasks as Slurm would start them: one process each.
    let mut process_s = Vec::new();
    for (shard, plan) in (0..args.process_tasks).zip(plans.iter().cycle()) {
        let shard = shard % plan.shards.len();
        let out = root.join(format!("process-task-{}-{shard}.csv", plan.device));
        let started = Instant::now();
        let status = std::process::Command::new(std::env::current_exe()?)
            .arg("--root")
            .arg(&root)
            .args(["run", "--study", "scale", "--device", &plan.device])
            .arg("--shard")
            .arg(format!("{shard}/{}", plan.shards.len()))
            .arg("--out")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .context("cannot run dlas")?;
        process_s.push(started.elapsed().as_secs_f64());
        let in_process = dlas_cluster::manifest::shard_results(&results_dir, &plan.device, shard);
        if !status.success() || std::fs::read(&out)? != std::fs::read(&in_process)? {
            bail!(
                "the task run as a process ({}) differs from the same task in process ({})",
                out.display(),
                in_process.display()
            );
        }
    }
    if !process_s.is_empty() {
        dlas_core::outln!(
            "tasks as processes: {} tasks, {:.2} s each on average (same bytes as in process)",
            process_s.len(),
            process_s.iter().sum::<f64>() / process_s.len() as f64
        );
    }

    let started = Instant::now();
    let states = dlas_cluster::status(&results_dir)?;
    let status_s = started.elapsed().as_secs_f64();
    let done = states.iter().filter(|(_, _, s)| s == "done").count();
    dlas_core::outln!(
        "status: {done} of {} shards done; {status_s:.3} s",
        states.len()
    );

    let merged = root.join("merged.csv");
    let started = Instant::now();
    let collected = dlas_cluster::collect(&results_dir, Some(&merged))?;
    let collect_s = started.elapsed().as_secs_f64();
    if !collected.missing.is_empty() {
        bail!("collect found missing shards: {:?}", collected.missing);
    }
    dlas_core::outln!(
        "collect: {} rows checked and merged, {} bytes; {collect_s:.3} s",
        collected.rows.len(),
        size(&merged)
    );

    // Real host rows for comparison: a measured row also names an
    // environment record and has its samples beside it.
    let host = project.root.join("data/results/dlas/host.csv");
    if let Ok(host_rows) = results::read_results(&host) {
        let samples = results::samples_path(&host);
        let header = std::fs::read_to_string(&host)?
            .lines()
            .next()
            .map_or(0, |l| l.len() + 1) as u64;
        let n = host_rows.len().max(1) as f64;
        dlas_core::outln!(
            "recorded host results ({}): {} rows, {:.0} bytes per row, samples {:.0} bytes per row",
            host.display(),
            host_rows.len(),
            (size(&host) - header) as f64 / n,
            size(&samples) as f64 / n
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the synthetic study and device specifications; returns the device ids.
fn write_project(project: &Project, root: &Path, args: &Args) -> Result<Vec<String>> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(project.root.join("data/devices"))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    sources.sort();
    if sources.is_empty() {
        bail!("no device specifications in {}", project.root.display());
    }
    std::fs::create_dir_all(root.join("data/devices"))?;
    std::fs::create_dir_all(root.join("data/studies"))?;
    let width = (args.devices - 1).to_string().len();
    let mut devices = Vec::new();
    for i in 0..args.devices {
        let id = format!("dev-{i:0width$}");
        let text = std::fs::read_to_string(&sources[i % sources.len()])?;
        let spec: String = text
            .lines()
            .map(|l| {
                if l.starts_with("id ") || l.starts_with("id=") {
                    format!("id = \"{id}\"\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(root.join("data/devices").join(format!("{id}.toml")), spec)?;
        devices.push(id);
    }
    let quoted = |items: &[&str]| {
        items
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let ids: Vec<&str> = devices.iter().map(String::as_str).collect();
    let batches: Vec<String> = (1..=args.batches).map(|b| b.to_string()).collect();
    let mut study = format!(
        "# Written by `dlas bench cluster`: 8 networks x 5 compressions x {b} batch sizes per device.\n\
         name = \"scale\"\ntitle = \"The coordinator at scale (synthetic)\"\n\
         algorithms = [\"gemm\"]\nformats = [\"dense\", \"csr\"]\nlayouts = [\"nchw\"]\n\
         devices = [{devices}]\n\n[protocol]\nbatch = [{batch}]\nwarmup = 1\nruns = 150\nthreads = 0\nseed = 2023\n",
        b = args.batches,
        devices = quoted(&ids),
        batch = batches.join(", ")
    );
    for (dataset, models) in NETWORKS {
        study += &format!(
            "\n[[dataset]]\nid = \"{dataset}\"\nmodels = [{}]\n",
            quoted(&models)
        );
    }
    for (id, level) in [
        ("dense", None),
        ("weight-pruning", Some(0.8)),
        ("channel-pruning", Some(0.5)),
        ("fp16", None),
        ("int8", None),
    ] {
        study += &format!("\n[[compression]]\nid = \"{id}\"\n");
        if let Some(level) = level {
            study += &format!("level = {level}\n");
        }
    }
    study += "\n[[compiler]]\nid = \"native\"\ntuned = [false]\nalgorithms = true\n\n\
              [[rule]]\nname = \"sparse-needs-pruning\"\nreason = \"sparse formats need pruned weights\"\n\
              exclude = { format = [\"csr\"], compression = [\"dense\", \"fp16\", \"int8\"] }\n\n\
              [[rule]]\nname = \"pruned-runs-sparse\"\nreason = \"pruned models run sparse\"\n\
              exclude = { format = [\"dense\"], compression = [\"weight-pruning\", \"channel-pruning\"] }\n";
    std::fs::write(root.join("data/studies/scale.toml"), study)?;
    Ok(devices)
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}
