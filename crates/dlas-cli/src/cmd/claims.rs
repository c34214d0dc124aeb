//! `dlas claims RESULTS...`: the study's thirteen observations (XI and XII twice: native engine, TVM) (or, with
//! `--study compilers`, the compiler study's findings) checked on each
//! results file, e.g. one measured on a reviewer's own machine.

use crate::facts;
use crate::project::Project;
use anyhow::{Context, Result};
use dlas_core::Plan;
use dlas_core::results::read_results;
use dlas_report::claims;
use dlas_report::compression::{Sweeps, sweep_path};
use dlas_report::{Inputs, ResultsFile, Selection};
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
    let catalogue = dlas_report::catalogue_of(&study);
    let published = facts::published(project)?;
    // The committed sweeps (what `reproduce` wrote), or the study's own; a
    // study whose report draws no compression facts (the compiler study)
    // has observations that need none.
    let committed = project.root.join(sweep_path(&study.name));
    let sweeps = if !catalogue.needs_compression(Selection::All) {
        Sweeps::default()
    } else if committed.is_file() {
        Sweeps::read(&committed)?
    } else {
        facts::sweeps(&study, &published)?
    };
    let accuracy = facts::recorded_accuracy(&published);
    let mut rows = Vec::new();
    let mut result_files = Vec::new();
    for path in &args.results {
        let file_rows = read_results(path)
            .with_context(|| format!("cannot check the claims on {}", path.display()))?;
        result_files.push(ResultsFile {
            path: path.display().to_string(),
            rows: rows.len()..rows.len() + file_rows.len(),
        });
        rows.extend(file_rows);
    }
    let plan = Plan::expand(&study);
    // The ties use the bundle's measured drift between sittings, as the
    // committed claims do, so a reviewer's file is judged by the same rule.
    let validation =
        super::validate::validation_of(project, &study.name, catalogue.validation_table)?;
    let inputs = Inputs {
        study: &study,
        plan: &plan,
        results: &rows,
        specs: &specs,
        result_files,
        hosts: vec![],
        sweeps: &sweeps,
        layer: None,
        accuracy: &accuracy,
        validation: None,
        transfer: None,
        transfer_table: catalogue.transfer_table,
        drift: validation.as_ref().and_then(super::reproduce::drift_of),
    };
    let checked = catalogue.check(&inputs);
    let text = if args.markdown {
        (catalogue.claims_markdown)(&checked, inputs.drift)
    } else {
        claims::text_of(&(catalogue.observations)(), &checked)
    };
    dlas_core::out!("{text}");
    Ok(ExitCode::SUCCESS)
}
