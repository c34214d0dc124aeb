//! `dlas tune`: search the schedules of a study's tuned native
//! combinations on this machine, and tune its tuned TVM combinations'
//! networks with MetaSchedule (`dlas bench tune`, what the native tuner
//! buys, is `cmd::bench::tune`).

use crate::project::{HOST, Project};
use anyhow::{Result, bail};
use dlas_core::{Combination, Filter, Plan};
use dlas_runner::tuning::{self, TuneConfig};
use dlas_runner::tvm_tuning;
use dlas_tune::allocate::Split;
use dlas_tune::{Budget, Timer};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "dlas")]
    study: String,
    /// Only `host`: tuning measures candidates on the machine itself.
    #[arg(long, default_value = HOST)]
    device: String,
    /// Select combinations: axis=value[|value][,axis=value…]; tuned native
    /// and TVM combinations of the selection are tuned.
    #[arg(long, default_value = "")]
    filter: String,
    /// Candidates the native tuner measures per layer on average (the
    /// study: Ansor's 20,000): the run's budget is this times its layers,
    /// spread over them by their share of the networks' time (Ansor's task
    /// scheduler), a quarter of this at a time.
    #[arg(long, default_value_t = Budget::STUDY.trials)]
    trials: usize,
    /// Candidates MetaSchedule measures per task (distinct kernel) of each
    /// TVM network (default: the study's `trials_per_task` of its tvm
    /// compiler).
    #[arg(long)]
    tvm_trials_per_task: Option<usize>,
    /// Give every layer the same `--trials`, whatever its share of the
    /// networks' time (the split before the task scheduler; for
    /// comparison, as `dlas bench tune` does).
    #[arg(long)]
    equal_split: bool,
    /// Stop a layer after this many candidates without improvement (the study: 1,000).
    #[arg(long, default_value_t = Budget::STUDY.early_stop)]
    early_stop: usize,
    /// Intra-op threads (default: the study's protocol; 0 = one per core).
    #[arg(long, value_parser = super::bounds::threads)]
    threads: Option<usize>,
    /// Timed repeats per candidate; its cost is their median.
    #[arg(long, default_value_t = Timer::default().repeats)]
    repeats: usize,
    /// Each repeat runs the layer for at least this long.
    #[arg(long, default_value_t = Timer::default().min_repeat_ms)]
    min_repeat_ms: f64,
    /// Tuning records, appended to (default: data/results/<study>/tuning/records.jsonl).
    #[arg(long)]
    records: Option<PathBuf>,
    /// Best-of file, rewritten (default: beside the records, best.json).
    #[arg(long)]
    best: Option<PathBuf>,
    /// List the layers that would be tuned without measuring anything.
    #[arg(long)]
    dry_run: bool,
}

fn threads(requested: usize) -> usize {
    match requested {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    if args.device != HOST {
        bail!(
            "--device {}: tuning measures candidates on the machine it runs on, so the only valid value is `{HOST}` (run `dlas tune` on the device itself, e.g. through `dlas cluster`)",
            args.device
        );
    }
    if args.trials == 0 || args.early_stop == 0 || args.repeats == 0 {
        bail!("--trials, --early-stop and --repeats must be at least 1");
    }
    if !(args.min_repeat_ms.is_finite() && args.min_repeat_ms > 0.0) {
        bail!("--min-repeat-ms must be a positive number of milliseconds");
    }
    let specs = project.specs()?;
    let study = project.study(&args.study, &specs)?;
    let filter = Filter::parse(&args.filter)?
        .require("device", [HOST])?
        .require("tuned", ["true"])?;
    filter.check(&study)?;
    let (tvm, plan): (Vec<Combination>, Plan) = {
        let mut plan = Plan::expand(&study).filtered(&filter);
        let tvm = plan
            .combinations
            .iter()
            .filter(|c| c.compiler == dlas_backends::TVM)
            .cloned()
            .collect();
        plan.combinations.retain(|c| c.is_native());
        (tvm, plan)
    };
    let dir = project.results_dir(&study);
    let threads = threads(args.threads.unwrap_or(study.protocol.threads));
    if !tvm.is_empty() {
        tune_tvm(project, &study, &tvm, threads, args)?;
        if plan.combinations.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
    }
    let records = args
        .records
        .clone()
        .unwrap_or_else(|| tuning::records_path(&dir));
    let best = args.best.clone().unwrap_or_else(|| {
        records
            .parent()
            .map_or_else(|| PathBuf::from("best.json"), |d| d.join("best.json"))
    });
    let config = TuneConfig {
        project_root: project.root.clone(),
        records,
        best,
        threads,
        budget: Budget {
            trials: args.trials,
            early_stop: args.early_stop,
        },
        timer: Timer {
            repeats: args.repeats,
            min_repeat_ms: args.min_repeat_ms,
        },
        seed: study.protocol.seed,
        split: if args.equal_split {
            Split::Equal
        } else {
            Split::ByShare
        },
    };
    if plan.combinations.is_empty() {
        bail!(
            "no tuned native or TVM host combination of study {} matches --filter `{}`",
            study.name,
            args.filter
        );
    }
    if args.dry_run {
        let mut models = dlas_runner::models::Models::new(&project.root)?;
        let mut skipped = BTreeMap::new();
        let tasks = tuning::tasks(
            &study,
            &plan.combinations,
            config.threads,
            &mut skipped,
            &mut models,
        )?;
        for t in &tasks {
            dlas_core::outln!("{}", t.key);
        }
        for (reason, n) in &skipped {
            dlas_core::outln!("skipped {n} combination(s): {reason}");
        }
        dlas_core::outln!(
            "would tune {} distinct layers of {} combinations, {} trials in all ({} per layer, {}), into {}",
            tasks.len(),
            plan.combinations.len(),
            config.budget.trials * tasks.len(),
            config.budget.trials,
            match config.split {
                Split::Equal => "to every layer alike",
                Split::ByShare => "on average, by each layer's share of the networks' time",
            },
            config.records.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let report = tuning::tune_host(&study, &plan.combinations, &config)?;
    for line in &report.skipped_lines {
        dlas_core::errln!("warning: skipped an unreadable record at {line}");
    }
    for (reason, n) in &report.skipped {
        dlas_core::errln!("skipped {n} combination(s): {reason}");
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    dlas_core::outln!(
        "{} layers ({} searched now): {} new trials, {} rejected before measurement, {} failed, {:.0} s; mean speedup over the default schedule {:.2}x",
        report.tasks,
        report.searched,
        report.new_trials,
        report.rejected,
        report.failed,
        report.seconds,
        mean(&report.speedups)
    );
    if !report.curse.is_empty() {
        dlas_core::outln!(
            "{} confirmation rounds re-measured the finalists of {} layers: the search's best was {:.2}x the confirmed cost of the schedule kept (mean; below 1 is the winner's curse)",
            report.new_confirmations,
            report.curse.len(),
            mean(&report.curse)
        );
    }
    dlas_core::outln!(
        "records: {}\nbest-of: {}",
        config.records.display(),
        config.best.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// MetaSchedule on the networks of the tuned TVM combinations `tvm`: each
/// database once, skipping those already tuned.
fn tune_tvm(
    project: &Project,
    study: &dlas_core::Study,
    tvm: &[Combination],
    threads: usize,
    args: &Args,
) -> Result<()> {
    let per_task = match args.tvm_trials_per_task {
        Some(0) => bail!("--tvm-trials-per-task must be at least 1"),
        Some(n) => n,
        None => tvm_tuning::trials_per_task(study)?,
    };
    let dir = project.results_dir(study);
    if args.dry_run {
        for c in tvm {
            let done = if tvm_tuning::is_tuned(&dir, c) {
                " (tuned)"
            } else {
                ""
            };
            dlas_core::outln!("tvm {}{done}", tvm_tuning::database_dir(&dir, c).display());
        }
        return Ok(());
    }
    dlas_backends::tvm_runtime::check_installed(&dlas_backends::tvm_runtime::python(
        &project.root,
    ))?;
    let report = tvm_tuning::tune_all(study, tvm, (&project.root, &dir), threads, per_task)?;
    dlas_core::outln!(
        "TVM: {} networks tuned now ({} trials per task at most), {} tuned before; databases under {}",
        report.tuned.len(),
        per_task,
        report.already,
        dir.join("tuning/tvm").display()
    );
    Ok(())
}
