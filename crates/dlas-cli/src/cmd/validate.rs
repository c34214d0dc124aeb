//! `dlas validate`: the device model the mocked devices use, predicting
//! every measured native-engine row of this machine, and its error.

use crate::project::Project;
use anyhow::{Context, Result};
use dlas_core::Environment;
use dlas_core::results::read_results;
use dlas_report::validation::Validation;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub mod transfer;

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
    /// Predict the rows of FILES, measured on another machine, with this
    /// calibration (`host<suffix>.toml`, its layer timings beside it),
    /// carried to the other machine's specification in each of the ways
    /// the model knows (docs/devices.md, "Another CPU").
    #[arg(long, value_name = "CALIBRATION")]
    transfer: Option<PathBuf>,
    /// With --transfer: the other machine's specification (its own
    /// calibration's `host<suffix>.toml`); by default the calibration in
    /// data/devices/measured/ or its archive of the machine the rows were
    /// measured on.
    #[arg(long, requires = "transfer")]
    spec: Option<PathBuf>,
}

/// The native rows measured on the calibrated machine for its validation,
/// beside each study's `host.csv`.
pub const VALIDATION_FILE: &str = "validation.csv";

/// The rows of `files` measured on the machine `host` was calibrated on
/// (by their environment records, `<source>.json` beside each file), and
/// how many rows were measured elsewhere.
pub fn rows_of_machine(
    files: &[PathBuf],
    host: &dlas_devices::DeviceSpec,
    measured_dir: &Path,
) -> Result<(Vec<dlas_core::ResultRow>, usize)> {
    let environment = host
        .environment
        .as_deref()
        .context("the calibration names no environment record")?;
    let calibrated = Environment::load(&measured_dir.join(format!("{environment}.json")))?;
    let mut kept = Vec::new();
    let mut elsewhere = 0;
    let mut machines: HashMap<(PathBuf, String), bool> = HashMap::new();
    for file in files {
        let dir = file.parent().unwrap_or(Path::new(".")).to_path_buf();
        for row in read_results(file)? {
            let same = match machines.get(&(dir.clone(), row.source.clone())) {
                Some(same) => *same,
                None => {
                    let record = dir.join(format!("{}.json", row.source));
                    let same = Environment::load(&record)
                        .map(|e| e.same_machine(&calibrated))
                        .unwrap_or(false);
                    machines.insert((dir.clone(), row.source.clone()), same);
                    same
                }
            };
            if same {
                kept.push(row);
            } else {
                elsewhere += 1;
            }
        }
    }
    Ok((kept, elsewhere))
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    if let Some(calibration) = &args.transfer {
        transfer::run(project, calibration, args.spec.as_deref(), &args.files)?;
        return Ok(ExitCode::SUCCESS);
    }
    let files = if args.files.is_empty() {
        let dir = project.root.join("data/results").join(&args.study);
        vec![dir.join("host.csv"), dir.join(VALIDATION_FILE)]
            .into_iter()
            .filter(|f| f.exists())
            .collect()
    } else {
        args.files.clone()
    };
    let measured_dir = project
        .root
        .join("data/devices")
        .join(dlas_devices::spec::MEASURED_DIR);
    let host = dlas_devices::load_calibrated(&measured_dir)?;
    let (rows, elsewhere) = rows_of_machine(&files, &host, &measured_dir)?;
    let validated = dlas_report::validation::validate(&rows, &host)?;
    if elsewhere > 0 {
        dlas_core::outln!(
            "{elsewhere} row(s) measured on another machine than the calibrated one are left out"
        );
    }
    if args.rows {
        dlas_core::outln!("id,combination,measured_ms,predicted_ms,ratio");
        for v in &validated {
            let r = &v.row;
            dlas_core::outln!(
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
        dlas_core::outln!();
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
    dlas_core::out!(
        "{}",
        dlas_report::validation::error_table(&validated, 9, footer).markdown()
    );
    if let Some(e) = &host.efficiency {
        dlas_core::outln!(
            "\nIn sample: the curves against the warm layer timings they are fitted to (median |ln(fitted/measured)| per class; the network rows above are out of sample{}):",
            match e.cold_left_out {
                0 => String::new(),
                n => format!("; {n} cold timings of an older calibration not fitted"),
            }
        );
        for (class, curve) in &e.curves {
            dlas_core::outln!(
                "  {class}: {} layers, median |ln| {:.3}, rms {:.3}; overhead {:.1} us, {:.3} ns per value, conversion x{:.2}",
                curve.n,
                curve.median_abs_log,
                curve.rms_log,
                curve.overhead_s * 1e6,
                curve.per_value_s * 1e9,
                curve.conversion_scale
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The validation a study's report shows: its recorded host rows and every
/// study's validation rows (the model and the calibrated machine are the
/// same for all studies) measured on the calibrated machine, predicted by
/// the model; `None` when no row was measured there.
pub fn validation_of(project: &Project, study: &str, table: usize) -> Result<Option<Validation>> {
    let results = project.root.join("data/results");
    let mut files = vec![results.join(study).join("host.csv")];
    let mut studies: Vec<PathBuf> = std::fs::read_dir(&results)
        .with_context(|| format!("reading {}", results.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", results.display()))?;
    studies.sort();
    files.extend(studies.iter().map(|d| d.join(VALIDATION_FILE)));
    let files: Vec<PathBuf> = files.into_iter().filter(|f| f.is_file()).collect();
    let measured_dir = project
        .root
        .join("data/devices")
        .join(dlas_devices::spec::MEASURED_DIR);
    let host = dlas_devices::load_calibrated(&measured_dir)?;
    // Only the files with rows from the calibrated machine are named.
    let mut rows = Vec::new();
    let mut named = Vec::new();
    for file in files {
        let (kept, _) = rows_of_machine(std::slice::from_ref(&file), &host, &measured_dir)?;
        if !kept.is_empty() {
            named.push(
                file.strip_prefix(&project.root)
                    .unwrap_or(&file)
                    .display()
                    .to_string(),
            );
            rows.extend(kept);
        }
    }
    let validated = dlas_report::validation::validate(&rows, &host)?;
    if validated.is_empty() {
        return Ok(None);
    }
    let files = named;
    Ok(Some(Validation {
        footer: footer(&files, validated.len(), &host),
        rows: validated,
        table,
    }))
}

/// Where the validation's numbers come from.
fn footer(files: &[String], rows: usize, host: &dlas_devices::DeviceSpec) -> String {
    format!(
        "Measured: {rows} native-engine rows of {} measured on the calibrated machine. Modelled: device model v{} with the calibration of `{}` ({}; data/devices/measured/), fitted to layer micro-benchmarks only.",
        files.join(", "),
        dlas_devices::mock::MODEL_VERSION,
        host.name,
        host.environment
            .as_deref()
            .unwrap_or("no environment record"),
    )
}
