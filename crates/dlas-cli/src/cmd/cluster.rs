//! `dlas cluster submit | status | collect`: a study across a fleet, a
//! Slurm cluster (`--executor slurm`) or edge boards over SSH (`--executor ssh`).

use crate::project::Project;
use anyhow::{Result, bail};
use dlas_cluster::{
    DeviceMap, Executor, ModelFiles, OrtLibrary, SlurmConfig, SshConfig, SshHost, SubmitConfig,
    Transport,
};
use dlas_core::{Combination, Study};
use dlas_runner::models::{Models, model_file_of};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorKind {
    /// One `sbatch --array` job per device (`--map`).
    Slurm,
    /// Boards reached with OpenSSH (`--host`); shards run there one after another.
    Ssh,
}

#[derive(clap::Args)]
pub struct SubmitArgs {
    #[arg(long, default_value = "dlas")]
    study: String,
    #[arg(long, value_enum, default_value_t = ExecutorKind::Slurm)]
    executor: ExecutorKind,
    /// Slurm: device=partition[,constraint], once per device to run.
    #[arg(long = "map")]
    map: Vec<DeviceMap>,
    /// SSH: device=[user@]addr[:port], once per board (several boards may share a device).
    #[arg(long = "host")]
    host: Vec<SshHost>,
    /// Shards per device (SSH default: one per board of the device; Slurm: 1).
    #[arg(long)]
    shards: Option<usize>,
    #[arg(long)]
    runs_per_task: Option<usize>,
    #[arg(long, default_value = "")]
    filter: String,
    /// The folder that receives job scripts, logs and every shard's results.
    #[arg(long)]
    results_dir: PathBuf,
    /// The dlas binary the tasks run (default: this one); for boards of
    /// another architecture, one built for them.
    #[arg(long)]
    dlas: Option<PathBuf>,
    /// Slurm: time limit per task [default: 04:00:00].
    #[arg(long)]
    time: Option<String>,
    /// Slurm: write the scripts without submitting them.
    #[arg(long)]
    dry_run: bool,
    /// SSH: the private key to log in with.
    #[arg(long)]
    identity: Option<PathBuf>,
    /// SSH: an ssh option as Key=Value (e.g. StrictHostKeyChecking=accept-new), repeatable.
    #[arg(long = "ssh-option")]
    ssh_option: Vec<String>,
    /// SSH: seconds to wait for a board to answer.
    #[arg(long, default_value_t = 10)]
    connect_timeout: u64,
    /// SSH: the working folder on each board (relative to the login's home).
    #[arg(long, default_value = "dlas")]
    remote_dir: String,
    /// Extra arguments for each task's `dlas run` (e.g. --runs 20); must come last.
    #[arg(long, allow_hyphen_values = true, num_args = 1..)]
    run_args: Vec<String>,
}

#[derive(clap::Subcommand)]
pub enum Command {
    /// Send each device its shards: Slurm job arrays, or runs on boards over SSH.
    Submit(Box<SubmitArgs>),
    /// Per device and shard: queued, running, done or failed (Slurm); fetched, partial or missing (SSH).
    Status {
        #[arg(long)]
        results_dir: PathBuf,
    },
    /// Merge the shards into one results file; report gaps and how to resubmit them.
    Collect {
        #[arg(long)]
        results_dir: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
}

pub fn run(project: &Project, command: &Command) -> Result<ExitCode> {
    match command {
        Command::Submit(args) => {
            let SubmitArgs {
                study,
                executor,
                map,
                host,
                shards,
                runs_per_task,
                filter,
                results_dir,
                dlas,
                time,
                dry_run,
                identity,
                ssh_option,
                connect_timeout,
                remote_dir,
                run_args,
            } = args.as_ref();
            let executor = match executor {
                ExecutorKind::Slurm => {
                    if !host.is_empty() || identity.is_some() || !ssh_option.is_empty() {
                        bail!(
                            "--host, --identity and --ssh-option are for --executor ssh; Slurm devices are given with --map"
                        );
                    }
                    if map.is_empty() {
                        bail!(
                            "--executor slurm needs --map device=partition[,constraint], once per device"
                        );
                    }
                    Executor::Slurm(SlurmConfig {
                        map: map.clone(),
                        time_limit: time.clone().unwrap_or_else(|| "04:00:00".into()),
                        dry_run: *dry_run,
                    })
                }
                ExecutorKind::Ssh => {
                    if !map.is_empty() || time.is_some() || *dry_run {
                        bail!(
                            "--map, --time and --dry-run are for --executor slurm; boards are given with --host device=[user@]addr[:port]"
                        );
                    }
                    Executor::Ssh(SshConfig {
                        hosts: host.clone(),
                        transport: Transport {
                            identity: identity.as_deref().map(std::path::absolute).transpose()?,
                            options: ssh_option.clone(),
                            connect_timeout_s: *connect_timeout,
                        },
                        remote_dir: remote_dir.clone(),
                        ort_library: Some(OrtLibrary {
                            path: dlas_backends::ort_runtime::library_path(&project.root),
                            version: dlas_backends::ort_runtime::VERSION.into(),
                        }),
                    })
                }
            };
            let specs = project.specs()?;
            let loaded = project.study(study, &specs)?;
            let dlas = match dlas {
                Some(path) if !path.is_file() => bail!("--dlas {} is not a file", path.display()),
                Some(path) => std::path::absolute(path)?,
                None => std::env::current_exe()?,
            };
            let config = SubmitConfig {
                dlas,
                project_root: std::fs::canonicalize(&project.root)?,
                study_path: std::fs::canonicalize(&loaded.path)?,
                filter: filter.clone(),
                shards: *shards,
                runs_per_task: *runs_per_task,
                results_dir: std::path::absolute(results_dir)?,
                run_args: run_args.clone(),
                executor,
            };
            let mut models = RunnerModels::new(&config.project_root);
            let manifest = dlas_cluster::submit(&loaded, &config, &mut models)?;
            for job in &manifest.jobs {
                let combinations = job.planned.iter().map(Vec::len).sum::<usize>();
                dlas_core::outln!(
                    "{}: {} shard(s), {combinations} combinations, {}",
                    job.device,
                    job.shards,
                    job.placement.follow().whereabouts()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { results_dir } => {
            for (device, shard, state) in dlas_cluster::status(results_dir)? {
                dlas_core::outln!("{device} shard {shard}: {state}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Collect { results_dir, out } => {
            let collected = dlas_cluster::collect(results_dir, Some(out))?;
            for (device, id, reason) in &collected.failed {
                dlas_core::errln!("failed: {device} {id}: {reason}");
            }
            if collected.missing.is_empty() {
                dlas_core::outln!(
                    "{} results merged into {}",
                    collected.rows.len(),
                    out.display()
                );
                return Ok(ExitCode::SUCCESS);
            }
            for (device, shard, ids) in &collected.missing {
                dlas_core::errln!(
                    "missing: {device} shard {shard}: {} combinations",
                    ids.len()
                );
            }
            for command in &collected.resubmit {
                dlas_core::errln!("resubmit: {command}");
            }
            dlas_core::errln!("error: not merged; rerun the shards above, then collect again");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The model files boards read, from the runner's store: the file of each
/// combination's model ([`model_file_of`]), generated if absent and
/// hash-checked against `data/models.lock` once. The store is opened at the
/// first request, so a submission that sends no host shard needs no lock file.
pub struct RunnerModels {
    root: PathBuf,
    models: Option<Models>,
}

impl RunnerModels {
    pub fn new(project_root: &Path) -> RunnerModels {
        RunnerModels {
            root: project_root.to_path_buf(),
            models: None,
        }
    }
}

impl ModelFiles for RunnerModels {
    fn path(&mut self, study: &Study, combination: &Combination) -> Result<PathBuf> {
        let models = match &mut self.models {
            Some(models) => models,
            None => self.models.insert(Models::new(&self.root)?),
        };
        models.path(study, &model_file_of(combination))
    }
}
