//! `dlas reproduce`: regenerate the mocked results, the compression facts,
//! figures, tables, claims and the report page, or check that the committed
//! ones are what the code produces.

use crate::cmd::run::mocked_results;
use crate::facts;
use crate::project::Project;
use anyhow::{Result, bail};
use dlas_core::{Filter, Plan, results};
use dlas_report::compression::{Sweeps, layer_path, sweep_path};
use dlas_report::drift::Drift;
use dlas_report::{Artifact, HostSummary, Inputs, ResultsFile, Selection};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "dlas")]
    study: String,
    /// Every figure and table (the default).
    #[arg(long, conflicts_with_all = ["figure", "table"])]
    all: bool,
    #[arg(long)]
    figure: Option<usize>,
    #[arg(long)]
    table: Option<usize>,
    /// Compare with the committed files instead of writing; exit 1 on any difference.
    #[arg(long)]
    check: bool,
    /// Further results files to report beside the mocked devices'.
    #[arg(long, num_args = 1..)]
    results: Vec<PathBuf>,
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    let started = std::time::Instant::now();
    let specs = project.specs()?;
    let study = project.study(&args.study, &specs)?;
    let catalogue = dlas_report::catalogue_of(&study);
    let selection = match (args.figure, args.table) {
        (Some(n), None) => Selection::Figure(n),
        (None, Some(n)) => Selection::Table(n),
        (None, None) => Selection::All,
        (Some(_), Some(_)) => bail!("choose one of --figure and --table"),
    };
    // The reader's files first: a file that cannot be read stops the
    // command before anything is computed.
    let extra: Vec<(PathBuf, Vec<results::ResultRow>)> = args
        .results
        .iter()
        .map(|path| Ok((path.clone(), results::read_results(path)?)))
        .collect::<Result<_>>()?;
    let mock_rows = mocked_results(&study, &specs, &Filter::default(), None)?;
    let mock_path = project.results_dir(&study).join("mock.csv");
    let mut artifacts = vec![Artifact {
        path: mock_path.strip_prefix(&project.root)?.to_path_buf(),
        bytes: results::to_csv(&mock_rows)?,
    }];
    let mut files = vec![ResultsFile {
        path: artifacts[0].path.display().to_string(),
        rows: 0..mock_rows.len(),
    }];
    let mut rows = mock_rows;
    // Recorded real runs committed beside the mocked results, and the
    // environment records they name.
    let mut hosts = Vec::new();
    let recorded = project.results_dir(&study).join("host.csv");
    if recorded.is_file() {
        let host_rows = results::read_results(&recorded)?;
        let envs: std::collections::BTreeSet<&str> = host_rows
            .iter()
            .map(|r| r.source.as_str())
            .filter(|s| s.starts_with("env-"))
            .collect();
        for id in envs {
            let path = project.results_dir(&study).join(format!("{id}.json"));
            let env = dlas_core::Environment::load(&path)?;
            // One row per machine: runs with other protocols or loads share it.
            match hosts.iter_mut().find(|h: &&mut HostSummary| {
                (&h.cpu_model, h.logical_cpus, &h.cpu_flags, &h.os)
                    == (&env.cpu_model, env.logical_cpus, &env.cpu_flags, &env.os)
            }) {
                Some(host) => host.environment += &format!(" {id}"),
                None => hosts.push(HostSummary {
                    environment: id.to_string(),
                    cpu_model: env.cpu_model,
                    logical_cpus: env.logical_cpus,
                    cpu_flags: env.cpu_flags,
                    os: env.os,
                }),
            }
        }
        files.push(ResultsFile {
            path: recorded.strip_prefix(&project.root)?.display().to_string(),
            rows: rows.len()..rows.len() + host_rows.len(),
        });
        rows.extend(host_rows);
    }
    for (path, extra) in extra {
        files.push(ResultsFile {
            path: path.display().to_string(),
            rows: rows.len()..rows.len() + extra.len(),
        });
        rows.extend(extra);
    }
    // What the report draws of compression, computed here (the report never
    // compresses) and written beside the results so the committed files
    // are checked like everything else.
    let published = facts::published(project)?;
    let (sweeps, layer) = if catalogue.needs_compression(selection) {
        let sweeps = facts::sweeps(&study, &published)?;
        let layer = facts::layer(&study, &published)?;
        artifacts.push(Artifact {
            path: sweep_path(&study.name).into(),
            bytes: sweeps.to_csv()?,
        });
        artifacts.push(Artifact {
            path: layer_path(&study.name).into(),
            bytes: layer.to_csv()?,
        });
        (sweeps, Some(layer))
    } else {
        (Sweeps::default(), None)
    };
    let accuracy = facts::recorded_accuracy(&published);
    let validation =
        super::validate::validation_of(project, &study.name, catalogue.validation_table)?;
    // The cross-machine test is computed for everything of a committed
    // study (and written, so `--check` compares it); a single figure or
    // table, and a user's study, read the committed predictions.
    let transfer = if selection == Selection::All && catalogue.study == study.name {
        let computed = super::validate::transfer::transfer_of(project)?;
        if let Some(t) = &computed {
            artifacts.push(Artifact {
                path: dlas_report::transfer::TRANSFER_CSV.into(),
                bytes: t.to_csv()?,
            });
        }
        computed
    } else {
        super::validate::transfer::committed(project)?
    };
    // The report reads the plan; it never expands one.
    let plan = Plan::expand(&study);
    let inputs = Inputs {
        study: &study,
        plan: &plan,
        results: &rows,
        specs: &specs,
        result_files: files,
        hosts,
        sweeps: &sweeps,
        layer: layer.as_ref(),
        accuracy: &accuracy,
        validation: validation.as_ref(),
        transfer: transfer.as_ref(),
        transfer_table: catalogue.transfer_table,
        drift: validation.as_ref().and_then(drift_of),
    };
    artifacts.extend(catalogue.build(&inputs, selection)?);
    let mut differing = Vec::new();
    for artifact in &artifacts {
        let path = project.root.join(&artifact.path);
        if args.check {
            if std::fs::read(&path).ok().as_ref() != Some(&artifact.bytes) {
                differing.push(artifact.path.display().to_string());
            }
        } else if dlas_core::atomic::write_if_changed(&path, &artifact.bytes)? {
            dlas_core::outln!("wrote {}", artifact.path.display());
        }
    }
    if !differing.is_empty() {
        for path in &differing {
            dlas_core::errln!("differs from the regenerated output: {path}");
        }
        dlas_core::errln!(
            "{} of {} files differ; regenerate them with `cargo xtask reproduce --all` and review the diff",
            differing.len(),
            artifacts.len()
        );
        return Ok(ExitCode::FAILURE);
    }
    dlas_core::outln!(
        "{} {} files from {} results in {:.2} s",
        if args.check { "checked" } else { "regenerated" },
        artifacts.len(),
        rows.len(),
        started.elapsed().as_secs_f64()
    );
    // What the one figure or table reproduces of the paper, from the
    // catalogue's map (the same words as the page and ARTIFACT.md).
    if let Some(line) = dlas_report::paper_map::line(catalogue.paper_map, selection) {
        dlas_core::outln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The calibrated machine's drift between sittings, from the configurations
/// its validation rows hold twice (the study's campaign and the validation
/// sitting): the factor within which the claims tie two measured times.
pub fn drift_of(validation: &dlas_report::validation::Validation) -> Option<Drift> {
    let (measured, _) = dlas_report::validation::as_results(&validation.rows);
    Drift::of(&measured)
}
