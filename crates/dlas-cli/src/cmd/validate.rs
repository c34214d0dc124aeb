//! `dlas validate`: the device model the mocked devices use, predicting
//! every measured native-engine row of this machine, and its error.

use crate::project::Project;
use anyhow::Result;
use dlas_core::results::read_results;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Measured results files (default: the study's `host.csv`).
    files: Vec<PathBuf>,
    /// The study whose recorded host results to validate against.
    #[arg(long, default_value = "dlas")]
    study: String,
    /// Also print every row: id, combination, measured and predicted ms, ratio.
    #[arg(long)]
    rows: bool,
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    let files = if args.files.is_empty() {
        vec![
            project
                .root
                .join("data/results")
                .join(&args.study)
                .join("host.csv"),
        ]
    } else {
        args.files.clone()
    };
    let host = dlas_devices::load_calibrated(
        &project
            .root
            .join("data/devices")
            .join(dlas_devices::spec::MEASURED_DIR),
    )?;
    let mut rows = Vec::new();
    for file in &files {
        rows.extend(read_results(file)?);
    }
    let validated = dlas_report::validation::validate(&rows, &host)?;
    if args.rows {
        println!("id,combination,measured_ms,predicted_ms,ratio");
        for v in &validated {
            let r = &v.row;
            println!(
                "{},{}/{} {} {} {} {}{},{:.3},{:.3},{:.3}",
                r.id,
                r.dataset,
                r.model,
                r.compression,
                r.algorithm,
                r.format,
                r.layout,
                if r.tuned { " tuned" } else { "" },
                v.measured_ms,
                v.predicted_ms,
                v.ratio()
            );
        }
        println!();
    }
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let footer = format!(
        "Measured: {} ({} native rows). Modelled: mock-v{} with `{}` ({}).",
        files.join(", "),
        validated.len(),
        dlas_devices::mock::MODEL_VERSION,
        host.name,
        host.environment
            .as_deref()
            .unwrap_or("no environment record"),
    );
    print!(
        "{}",
        dlas_report::validation::error_table(&validated, 9, footer).markdown()
    );
    Ok(ExitCode::SUCCESS)
}
