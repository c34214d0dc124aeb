//! `dlas cluster submit | status | collect`: a study across a Slurm cluster.

use crate::project::Project;
use anyhow::{Result, bail};
use dlas_cluster::{DeviceMap, SubmitConfig};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Write one job script per device (an array over its shards) and submit it with sbatch.
    Submit {
        #[arg(long, default_value = "dlas")]
        study: String,
        /// Only `slurm` for now.
        #[arg(long, default_value = "slurm")]
        executor: String,
        /// device=partition[,constraint], once per device to run.
        #[arg(long = "map", required = true)]
        map: Vec<DeviceMap>,
        #[arg(long)]
        shards: Option<usize>,
        #[arg(long)]
        runs_per_task: Option<usize>,
        #[arg(long, default_value = "")]
        filter: String,
        /// Shared folder for job scripts, logs and shard results.
        #[arg(long)]
        results_dir: PathBuf,
        /// Time limit per task (Slurm syntax).
        #[arg(long, default_value = "04:00:00")]
        time: String,
        /// Extra arguments for each task's `dlas run` (e.g. --runs 20).
        #[arg(long, allow_hyphen_values = true, num_args = 1..)]
        run_args: Vec<String>,
        /// Write the scripts without submitting them.
        #[arg(long)]
        dry_run: bool,
    },
    /// Pending, running, done and failed shards per device.
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
        Command::Submit {
            study,
            executor,
            map,
            shards,
            runs_per_task,
            filter,
            results_dir,
            time,
            run_args,
            dry_run,
        } => {
            if executor != "slurm" {
                bail!("unknown executor `{executor}`; valid values: slurm");
            }
            let specs = project.specs()?;
            let loaded = project.study(study, &specs)?;
            let config = SubmitConfig {
                dlas: std::env::current_exe()?,
                project_root: std::fs::canonicalize(&project.root)?,
                study_path: std::fs::canonicalize(&loaded.path)?,
                filter: filter.clone(),
                map: map.clone(),
                shards: *shards,
                runs_per_task: *runs_per_task,
                results_dir: std::path::absolute(results_dir)?,
                run_args: run_args.clone(),
                time_limit: time.clone(),
                dry_run: *dry_run,
            };
            let manifest = dlas_cluster::submit(&loaded, &config)?;
            for job in &manifest.jobs {
                println!(
                    "{}: {} shard(s), {} combinations, job {} ({})",
                    job.map.device,
                    job.shards,
                    job.planned.iter().map(Vec::len).sum::<usize>(),
                    job.job_id.as_deref().unwrap_or("not submitted"),
                    job.script.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { results_dir } => {
            for (device, shard, state) in dlas_cluster::status(results_dir)? {
                println!("{device} shard {shard}: {state}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Collect { results_dir, out } => {
            let collected = dlas_cluster::collect(results_dir, Some(out))?;
            for (device, id, reason) in &collected.failed {
                eprintln!("failed: {device} {id}: {reason}");
            }
            if collected.missing.is_empty() {
                println!(
                    "{} results merged into {}",
                    collected.rows.len(),
                    out.display()
                );
                return Ok(ExitCode::SUCCESS);
            }
            for (device, shard, ids) in &collected.missing {
                eprintln!(
                    "missing: {device} shard {shard}: {} combinations",
                    ids.len()
                );
            }
            for command in &collected.resubmit {
                eprintln!("resubmit: {command}");
            }
            eprintln!("error: not merged; rerun the shards above, then collect again");
            Ok(ExitCode::FAILURE)
        }
    }
}
