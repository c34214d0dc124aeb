//! `dlas run`: measure a study's combinations and write a results file.

use crate::project::{HOST, Project};
use anyhow::{Result, bail};
use dlas_core::{Filter, Plan, Study, results};
use dlas_devices::{DeviceSpec, MockProtocol, run_mocked};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "dlas")]
    study: String,
    /// `mock` (every mocked device), `host`, or device ids separated by commas.
    #[arg(long)]
    device: String,
    /// Select combinations: axis=value[|value][,axis=value…].
    #[arg(long, default_value = "")]
    filter: String,
    /// Timed runs per combination (default: the study's protocol).
    #[arg(long)]
    runs: Option<usize>,
    /// Results file (default: data/results/<study>/mock.csv for mocked devices).
    #[arg(long)]
    out: Option<PathBuf>,
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
    let study = project.study(&args.study, &specs)?;
    let mut filter_text = args.filter.clone();
    match args.device.as_str() {
        "mock" => {}
        HOST => bail!(
            "device `host` needs a real backend, and this build has none yet; \
             run the mocked devices with --device mock"
        ),
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
            filter_text = format!("{filter_text},device={}", list.replace(',', "|"));
        }
    }
    if args.runs == Some(0) {
        bail!("--runs must be at least 1");
    }
    let filter = Filter::parse(&filter_text)?;
    filter.check(&study)?;
    if args.dry_run {
        let plan = Plan::expand(&study).filtered(&filter);
        let mocked = plan
            .combinations
            .iter()
            .filter(|c| dlas_devices::is_mocked(c, &specs))
            .count();
        println!(
            "would run {mocked} mocked combinations of study {}",
            study.name
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows = mocked_results(&study, &specs, &filter, args.runs)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| project.results_dir(&study).join("mock.csv"));
    dlas_core::atomic::write_atomic(&out, &results::to_csv(&rows)?)?;
    println!("{} results written to {}", rows.len(), out.display());
    Ok(ExitCode::SUCCESS)
}
