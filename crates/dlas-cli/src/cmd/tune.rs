//! `dlas tune`: search the schedules of a study's tuned native
//! combinations on this machine, and tune its tuned TVM combinations'
//! networks with MetaSchedule; and `dlas bench tune`, what the native
//! tuner buys.

use crate::project::{HOST, Project};
use anyhow::{Result, bail};
use dlas_core::{Algorithm, Combination, Dataset, Filter, Plan};
use dlas_runner::timing::{Protocol, measure};
use dlas_runner::tuning::{self, TuneConfig, Tuned};
use dlas_runner::tvm_tuning;
use dlas_tune::allocate::Split;
use dlas_tune::{Budget, Timer};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

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

/// Rounds the untuned and tuned networks alternate in.
const ROUNDS: usize = 5;

/// `dlas bench tune`: per network and algorithm, tuned against untuned
/// (per layer, from the search, and whole network) and against ONNX
/// Runtime, all measured in this run, with the search time it took; and
/// the task scheduler's split of the budget against an equal split of the
/// same budget, each searched from scratch, the three engines timed in
/// alternating rounds.
pub fn bench(
    project: &Project,
    budget: Budget,
    runs: usize,
    threads: usize,
    records: Option<PathBuf>,
) -> Result<ExitCode> {
    let specs = project.specs()?;
    let study = project.study("dlas", &specs)?;
    let library = dlas_backends::ort_runtime::library_path(&project.root);
    dlas_backends::ort_runtime::init(&library)?;
    let scratch = tempfile::tempdir()?;
    let records = records.unwrap_or_else(|| scratch.path().join("records.jsonl"));
    let best = records.with_extension("best.json");
    let equal_records = records.with_extension("equal.jsonl");
    let equal_best = records.with_extension("equal.best.json");
    let mut models = dlas_runner::models::Models::new(&project.root)?;
    let protocol = Protocol {
        warmup: 3,
        runs,
        timeout: Duration::from_secs(600),
    };
    let median = |s: Vec<f64>| dlas_core::Summary::from_samples(&s).map_or(f64::NAN, |s| s.median);
    dlas_core::outln!(
        "network,algorithm,layers,trials,search_s,layer_speedup_mean,layer_speedup_max,search_vs_confirmed_mean,untuned_ms,tuned_ms,tuned_vs_untuned,equal_split_ms,equal_split_vs_untuned,equal_split_over_scheduler,ort_opt_ms,tuned_vs_ort"
    );
    let mut summary = Vec::new();
    let mut shares = Vec::new();
    for (dataset, model) in [
        (Dataset::Cifar10, "resnet18"),
        (Dataset::Imagenet, "mobilenetv2"),
    ] {
        let combination = |compiler: &str, algorithm: Algorithm, tuned: bool| Combination {
            algorithm,
            tuned,
            ..Combination::host(dataset, model, compiler)
        };
        let reference = combination("ort-opt", Algorithm::Auto, false);
        let path = models.path(&study, &reference)?;
        let input = dlas_runner::models::input(&reference, study.protocol.seed);
        let [c, h, w] = dataset.input_chw();
        let session = dlas_backends::SessionConfig {
            input_shape: [1, c, h, w],
            threads,
            half_io: false,
            tvm: None,
        };
        let ort = median(measure(
            dlas_backends::load("ort-opt", &path, &session)?.as_mut(),
            &input,
            protocol,
        )?);
        for algorithm in [Algorithm::Direct, Algorithm::Gemm, Algorithm::SpatialPack] {
            let tuned_c = combination(dlas_core::NATIVE, algorithm, true);
            let config = TuneConfig {
                project_root: project.root.clone(),
                records: records.clone(),
                best: best.clone(),
                threads,
                budget,
                timer: Timer::default(),
                seed: study.protocol.seed,
                split: Split::ByShare,
            };
            let started = Instant::now();
            let report = tuning::tune_host(&study, std::slice::from_ref(&tuned_c), &config)?;
            let search_s = started.elapsed().as_secs_f64();
            let equal = TuneConfig {
                records: equal_records.clone(),
                best: equal_best.clone(),
                split: Split::Equal,
                ..config
            };
            tuning::tune_host(&study, std::slice::from_ref(&tuned_c), &equal)?;
            let untuned_c = combination(dlas_core::NATIVE, algorithm, false);
            let load = |c: &Combination, t: Option<&Tuned>| {
                dlas_runner::native::load(&path, c, threads, t)
            };
            let mut engines = [
                load(&untuned_c, None)?,
                load(&tuned_c, Some(&Tuned::load(&best, false)?))?,
                load(&tuned_c, Some(&Tuned::load(&equal_best, false)?))?,
            ];
            // Interleaved rounds, so drifting load on the machine falls on
            // every engine alike.
            let round = Protocol {
                runs: runs.div_ceil(ROUNDS),
                ..protocol
            };
            let mut samples = [Vec::new(), Vec::new(), Vec::new()];
            for _ in 0..ROUNDS {
                for (engine, s) in engines.iter_mut().zip(&mut samples) {
                    s.extend(measure(engine.as_mut(), &input, round)?);
                }
            }
            let [a, b, e] = samples;
            let (untuned_ms, tuned_ms, equal_ms) = (median(a), median(b), median(e));
            let s = &report.speedups;
            let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
            let max = s.iter().copied().fold(f64::NAN, f64::max);
            // Below 1: the search's best understated the kept schedule's
            // cost (the winner's curse that confirmation removes).
            let curse = report.curse.iter().sum::<f64>() / report.curse.len().max(1) as f64;
            let trials = report.trials;
            dlas_core::outln!(
                "{dataset}/{model},{algorithm},{},{trials},{search_s:.1},{mean:.2},{max:.2},{curse:.3},{untuned_ms:.3},{tuned_ms:.3},{:.2},{equal_ms:.3},{:.2},{:.3},{ort:.3},{:.2}",
                report.tasks,
                untuned_ms / tuned_ms,
                untuned_ms / equal_ms,
                equal_ms / tuned_ms,
                tuned_ms / ort
            );
            summary.push(mean);
            shares.push(equal_ms / tuned_ms);
        }
    }
    dlas_core::errln!(
        "per-layer speedup of tuning, mean over networks and algorithms: {:.2}x (aim: 1.5x); trials {} per layer on average (spread by the task scheduler), early stop {}",
        summary.iter().sum::<f64>() / summary.len().max(1) as f64,
        budget.trials,
        budget.early_stop
    );
    let geomean =
        (shares.iter().map(|r: &f64| r.ln()).sum::<f64>() / shares.len().max(1) as f64).exp();
    dlas_core::errln!(
        "equal split over the task scheduler's, network time at the same budget: geometric mean {geomean:.3}x over {} networks and algorithms (above 1: the scheduler's engines are faster)",
        shares.len()
    );
    Ok(ExitCode::SUCCESS)
}
