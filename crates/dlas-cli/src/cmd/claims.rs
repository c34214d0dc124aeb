//! `dlas claims RESULTS...`: the study's thirteen observations checked on
//! each results file, e.g. one measured on a reviewer's own machine.

use crate::facts;
use crate::project::Project;
use anyhow::{Context, Result};
use dlas_core::results::read_results;
use dlas_report::catalogue::{device_kinds, networks_of};
use dlas_report::claims::{self, Checked};
use dlas_report::compression::{Sweeps, sweep_path};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Results files (CSV, `docs/results-schema.md`); each is checked on its own.
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// The study whose networks and pruning levels the checks use.
    #[arg(long, default_value = "dlas")]
    study: String,
    /// Print the Markdown of paper-tables/claims.md instead of text.
    #[arg(long)]
    markdown: bool,
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    let specs = project.specs()?;
    let study = project.study(&args.study, &specs)?;
    let published = facts::published(project)?;
    // The committed sweeps (what `reproduce` wrote), or the study's own.
    let committed = project.root.join(sweep_path(&study.name));
    let sweeps = if committed.is_file() {
        Sweeps::read(&committed)?
    } else {
        facts::sweeps(&study, &published)?
    };
    let accuracy = facts::recorded_accuracy(&published);
    let networks = networks_of(&study);
    let kinds = device_kinds(&specs);
    let mut checked = Vec::new();
    for path in &args.results {
        let rows = read_results(path)
            .with_context(|| format!("cannot check the claims on {}", path.display()))?;
        let context = claims::Context {
            rows: &rows,
            kinds: &kinds,
            networks: &networks,
            sweeps: &sweeps,
            accuracy: &accuracy,
        };
        checked.push(Checked {
            file: path.display().to_string(),
            outcomes: claims::check_all(&context)
                .into_iter()
                .map(|(_, outcome)| outcome)
                .collect(),
        });
    }
    if args.markdown {
        print!("{}", claims::markdown(&checked));
    } else {
        print!("{}", claims::text(&checked));
    }
    Ok(ExitCode::SUCCESS)
}
