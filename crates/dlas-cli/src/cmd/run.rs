//! `dlas run`: measure a study's combinations and write results.
//!
//! Mocked devices are computed, so their results file is regenerated whole,
//! but only a file that holds nothing but mocked rows of the devices being
//! regenerated; the host is measured, so its results file is appended to
//! and resumed, and never holds mocked rows.

use crate::project::{HOST, Project};
use anyhow::{Context, Result, bail};
use dlas_core::{Filter, Plan, Shard, Study, append, results};
use dlas_devices::{DeviceSpec, MockProtocol, run_mocked};
use std::path::PathBuf;
use std::process::ExitCode;
#[cfg(feature = "host")]
use {dlas_runner::rounds::Adaptive, std::time::Duration};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "dlas")]
    study: String,
    /// `mock` (every mocked device), `host`, or mocked device ids separated by commas.
    #[arg(long)]
    device: String,
    /// Compilers to run, separated by commas (a shorthand for --filter compiler=…).
    #[arg(long)]
    compiler: Option<String>,
    /// Select combinations: axis=value[|value][,axis=value…].
    #[arg(long, default_value = "")]
    filter: String,
    /// Timed runs per combination: mocked devices draw this many; on the
    /// host it is a fixed count that replaces the adaptive stop (default:
    /// the study's protocol: on the host at least `min_runs`, then until the
    /// median is precise, its budget is spent or `max_runs` are done).
    #[arg(long, value_parser = super::bounds::runs)]
    runs: Option<usize>,
    /// Host: seconds of running after which a combination stops with the
    /// runs it has (default: the study's `budget_s`).
    #[arg(long, value_parser = super::bounds::timeout)]
    budget: Option<f64>,
    /// Warm-up runs, discarded (default: the study's protocol).
    #[arg(long, value_parser = super::bounds::warmup)]
    warmup: Option<usize>,
    /// Intra-op threads (default: the study's protocol; 0 = one per core).
    #[arg(long, value_parser = super::bounds::threads)]
    threads: Option<usize>,
    /// Batch sizes separated by commas (default: the study's protocol).
    #[arg(long, value_delimiter = ',', value_parser = super::bounds::batch)]
    batch: Vec<usize>,
    /// Seconds one combination may take before it is recorded as failed.
    #[arg(long, value_parser = super::bounds::timeout)]
    timeout: Option<f64>,
    /// Run only shard i of n (0-based), e.g. 0/4.
    #[arg(long)]
    shard: Option<Shard>,
    /// Results file (default: data/results/<study>/mock.csv or host.csv).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Best-of tuning file for tuned native combinations
    /// (default: data/results/<study>/tuning/best.json, written by `dlas tune`).
    #[arg(long)]
    tuning: Option<PathBuf>,
    /// Apply schedules tuned on another machine when the tuning file (or
    /// a TVM row's MetaSchedule database) has none for this one (the
    /// provider column says so).
    #[arg(long)]
    foreign_tuning: bool,
    /// Host: measure again the combinations the results file records as
    /// failed (after fixing what made them fail); the new row replaces
    /// the failed one.
    #[arg(long)]
    retry_failed: bool,
    /// Print what would run without running it.
    #[arg(long)]
    dry_run: bool,
}

/// The mocked results of a study's plan under a filter.
pub fn mocked_results(
    study: &Study,
    specs: &[DeviceSpec],
    filter: &Filter,
    runs: Option<usize>,
) -> Result<Vec<results::ResultRow>> {
    let plan = Plan::expand(study).filtered(filter);
    let protocol = MockProtocol {
        warmup: study.protocol.warmup,
        runs: runs.unwrap_or(study.protocol.runs),
        seed: study.protocol.seed,
    };
    run_mocked(&plan.combinations, specs, protocol)
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    let specs = project.specs()?;
    let mut study = project.study(&args.study, &specs)?;
    if !args.batch.is_empty() {
        study.protocol.batch = args.batch.clone();
    }
    let mut filter = Filter::parse(&args.filter)?;
    if let Some(compilers) = &args.compiler {
        filter = filter.require("compiler", compilers.split(','))?;
    }
    let host = match args.device.as_str() {
        "mock" => false,
        HOST => true,
        list => {
            for id in list.split(',') {
                if !specs.iter().any(|s| s.id == id) {
                    let valid: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
                    bail!(
                        "unknown device `{id}`; valid values: mock, {HOST}, {}",
                        valid.join(", ")
                    );
                }
            }
            filter = filter.require("device", list.split(','))?;
            false
        }
    };
    if host {
        filter = filter.require("device", [HOST])?;
    }
    filter.check(&study)?;
    let mut plan = Plan::expand(&study).filtered(&filter);
    if let Some(shard) = args.shard {
        plan = plan.shard(shard);
    }
    if !host {
        plan.combinations
            .retain(|c| dlas_devices::is_mocked(c, &specs));
    }
    if args.dry_run {
        for c in &plan.combinations {
            dlas_core::outln!("{} {}", c.id(), c.canonical());
        }
        dlas_core::outln!(
            "would run {} combinations of study {}",
            plan.combinations.len(),
            study.name
        );
        return Ok(ExitCode::SUCCESS);
    }
    if host {
        #[cfg(feature = "host")]
        return run_host(project, &study, &plan, args);
        #[cfg(not(feature = "host"))]
        bail!(
            "this dlas was built without measuring on the host (`cargo xtask reproduce` builds it so, \
             for a first look); build the full one with `cargo build --release` and run target/release/dlas"
        );
    }
    if args.retry_failed {
        bail!("--retry-failed applies to host runs: a mocked run computes every row anew");
    }
    let out = dlas_core::regular_file::resolve_output(
        &args
            .out
            .clone()
            .unwrap_or_else(|| project.results_dir(&study).join("mock.csv")),
    )?;
    // Held until the new file is in place, so no host run appends to the
    // file being replaced.
    let _lock = match append::lock(&out, false)? {
        Some(existing) => {
            let text = dlas_core::regular_file::read_to_string(&out)
                .with_context(|| format!("cannot read {}", out.display()))?;
            // An empty file holds nothing to lose.
            let existing_rows = if text.trim().is_empty() {
                Vec::new()
            } else {
                results::parse_results(&out, &text).with_context(|| {
                    format!(
                        "refusing to replace {}, which is not a results file: remove it or choose another --out",
                        out.display()
                    )
                })?
            };
            let devices = plan
                .combinations
                .iter()
                .map(|c| c.device.as_str())
                .collect();
            results::check_mixing(&out, &existing_rows, true, &devices)?;
            Some(existing)
        }
        None => None,
    };
    let protocol = MockProtocol {
        warmup: args.warmup.unwrap_or(study.protocol.warmup),
        runs: args.runs.unwrap_or(study.protocol.runs),
        seed: study.protocol.seed,
    };
    let rows = run_mocked(&plan.combinations, &specs, protocol)?;
    dlas_core::atomic::write_atomic(&out, &results::to_csv(&rows)?)?;
    dlas_core::outln!("{} results written to {}", rows.len(), out.display());
    Ok(ExitCode::SUCCESS)
}

/// The host's protocol: the study's adaptive one, or a fixed count when
/// `--runs` is given.
#[cfg(feature = "host")]
fn host_protocol(study: &dlas_core::study::Protocol, args: &Args) -> Adaptive {
    let warmup = args.warmup.unwrap_or(study.warmup);
    let timeout = Duration::from_secs_f64(args.timeout.unwrap_or(study.timeout_s));
    match args.runs {
        Some(runs) => Adaptive::fixed(warmup, runs, timeout),
        None => Adaptive {
            warmup,
            min_runs: study.min_runs(),
            max_runs: study.max_runs(),
            half_width: study.half_width,
            budget: Duration::from_secs_f64(args.budget.unwrap_or(study.budget_s)),
            budget_runs: study.budget_runs(),
            timeout,
        },
    }
}

#[cfg(feature = "host")]
fn run_host(project: &Project, study: &Study, plan: &Plan, args: &Args) -> Result<ExitCode> {
    let threads = match args.threads.unwrap_or(study.protocol.threads) {
        // The protocol's 0: one thread per physical core.
        0 => num_cpus::get_physical(),
        n => n,
    };
    let config = dlas_runner::HostConfig {
        project_root: project.root.clone(),
        // Resolved once: the samples and environment files go beside
        // the file the rows go to (a link's target, not the link).
        results: dlas_core::regular_file::resolve_output(
            &args
                .out
                .clone()
                .unwrap_or_else(|| project.results_dir(study).join("host.csv")),
        )?,
        threads,
        protocol: host_protocol(&study.protocol, args),
        interleave: study.protocol.interleave,
        seed: study.protocol.seed,
        tuning: args
            .tuning
            .clone()
            .unwrap_or_else(|| dlas_runner::tuning::best_path(&project.results_dir(study))),
        foreign_tuning: args.foreign_tuning,
        tvm_tuning: project.results_dir(study),
        retry_failed: args.retry_failed,
    };
    let report = dlas_runner::run_host(study, &plan.combinations, &config)?;
    dlas_core::outln!(
        "{}: {} measured, {} unstable, {} failed, {} already done",
        config.results.display(),
        report.measured,
        report.unstable,
        report.failed,
        report.already_done
    );
    if let Some(env) = &report.environment {
        dlas_core::outln!("environment: {}", env.display());
    }
    for (reason, n) in &report.not_run {
        dlas_core::errln!("not run here ({n}): {reason}");
    }
    let attempted = report.measured + report.unstable + report.failed + report.already_done;
    if attempted == 0 && !report.not_run.is_empty() {
        dlas_core::errln!("error: none of the selected combinations can run here (reasons above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
