//! `dlas validate --transfer`: one machine's calibration predicting
//! another machine's measured rows from that machine's specification
//! (`dlas_devices::scaling`), and the cross-machine table the report
//! shows for every pair of the machines `data/devices/measured/machines.toml`
//! lists.

use super::rows_of_machine;
use crate::project::Project;
use anyhow::{Context, Result, bail};
use dlas_core::Environment;
use dlas_devices::DeviceSpec;
use dlas_devices::scaling::{Scaling, transferred};
use dlas_report::transfer::{Pair, Transfer, fastest_agreement};
use dlas_report::validation::{Errors, Validated, validate};
use serde::Deserialize;
use std::path::{Path, PathBuf};

use dlas_report::transfer::MACHINES;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Machines {
    machine: Vec<Entry>,
}

/// One machine: its name, its calibration (`host<suffix>.toml` with its
/// layer timings beside it) and its measured results files, relative to
/// the project.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    calibration: PathBuf,
    rows: Vec<PathBuf>,
}

/// A loaded machine: its calibration and the rows measured on it.
struct Machine {
    name: String,
    spec: DeviceSpec,
    revision: String,
    rows: Vec<dlas_core::ResultRow>,
    revisions: Vec<String>,
}

/// The engine revision of an environment record, shortened.
fn revision(record: &Environment) -> String {
    let r = &record.git_revision;
    let dirty = if r.ends_with("-dirty") { "-dirty" } else { "" };
    format!("{}{dirty}", &r[..r.len().min(7)])
}

/// The environment record a calibration names, beside it.
fn calibration_record(path: &Path, spec: &DeviceSpec) -> Result<Environment> {
    let env = spec.environment.as_deref().with_context(|| {
        format!(
            "{}: the calibration names no environment record",
            path.display()
        )
    })?;
    Environment::load(&path.with_file_name(format!("{env}.json")))
}

/// The revisions the rows of `files` were measured on.
fn row_revisions(files: &[PathBuf], rows: &[dlas_core::ResultRow]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for row in rows {
        for file in files {
            let record = file.with_file_name(format!("{}.json", row.source));
            if let Ok(env) = Environment::load(&record) {
                let r = revision(&env);
                if !out.contains(&r) {
                    out.push(r);
                }
                break;
            }
        }
    }
    out
}

fn load_machine(project: &Project, entry: &Entry) -> Result<Machine> {
    let path = project.root.join(&entry.calibration);
    let spec = dlas_devices::load_calibration(&path)?;
    let record = calibration_record(&path, &spec)?;
    // A results file not in this checkout (a partial copy of the project)
    // contributes no rows.
    let files: Vec<PathBuf> = entry
        .rows
        .iter()
        .map(|f| project.root.join(f))
        .filter(|f| f.is_file())
        .collect();
    let dir = path.parent().unwrap_or(Path::new("."));
    let (rows, _) = rows_of_machine(&files, &spec, dir)?;
    Ok(Machine {
        name: entry.name.clone(),
        revision: revision(&record),
        revisions: row_revisions(&files, &rows),
        spec,
        rows,
    })
}

/// `calibration` predicting `target`'s rows, under each scaling (one,
/// unscaled, on the same machine).
fn pair(calibration: &Machine, target: &Machine, same: bool) -> Result<Pair> {
    let scalings: &[Scaling] = if same {
        &[Scaling::Unscaled]
    } else {
        &Scaling::ALL
    };
    let mut predicted = Vec::new();
    for &scaling in scalings {
        let spec = transferred(&calibration.spec, &target.spec, scaling);
        predicted.push((scaling, validate(&target.rows, &spec)?));
    }
    Ok(Pair {
        calibration: calibration.name.clone(),
        calibration_revision: calibration.revision.clone(),
        target: target.name.clone(),
        target_revisions: target.revisions.clone(),
        predicted,
    })
}

/// The cross-machine test of every ordered pair of the machines
/// [`MACHINES`] lists, each machine's own calibration first; `None`
/// without the file.
pub fn transfer_of(project: &Project) -> Result<Option<Transfer>> {
    let path = project.root.join(MACHINES);
    if !path.is_file() {
        return Ok(None);
    }
    let text = dlas_core::regular_file::read_to_string(&path)
        .with_context(|| format!("reading {}", path.display()))?;
    let machines: Machines = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
    let loaded = machines
        .machine
        .iter()
        .map(|e| load_machine(project, e))
        .collect::<Result<Vec<_>>>()?;
    let mut pairs = Vec::new();
    for target in &loaded {
        for calibration in &loaded {
            let same = std::ptr::eq(calibration, target);
            pairs.push(pair(calibration, target, same)?);
        }
    }
    Ok(Some(Transfer {
        pairs,
        sources: dlas_report::transfer::sources(),
    }))
}

/// The committed predictions of the cross-machine test, when
/// [`MACHINES`] and the file `reproduce` writes both exist.
pub fn committed(project: &Project) -> Result<Option<Transfer>> {
    let path = project.root.join(dlas_report::transfer::TRANSFER_CSV);
    if !project.root.join(MACHINES).is_file() || !path.is_file() {
        return Ok(None);
    }
    Ok(Some(Transfer::read(
        &path,
        dlas_report::transfer::sources(),
    )?))
}

/// The calibration, among this project's (`data/devices/measured/` and its
/// archive), of the machine `files` were measured on.
fn calibration_of_rows(project: &Project, files: &[PathBuf]) -> Result<PathBuf> {
    let measured = project.root.join("data/devices/measured");
    // The machines the cross-machine table lists first, then every
    // calibration of this project.
    let mut candidates: Vec<PathBuf> = std::fs::read_to_string(project.root.join(MACHINES))
        .ok()
        .and_then(|text| toml::from_str::<Machines>(&text).ok())
        .map(|m| {
            m.machine
                .into_iter()
                .map(|e| project.root.join(e.calibration))
                .collect()
        })
        .unwrap_or_default();
    candidates.push(measured.join("host.toml"));
    let archive = measured.join("archive");
    if let Ok(entries) = std::fs::read_dir(&archive) {
        let mut archived: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|e| e == "toml")
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("host"))
            })
            .collect();
        archived.sort();
        candidates.extend(archived);
    }
    for candidate in candidates {
        let Ok(spec) = dlas_devices::load_calibration(&candidate) else {
            continue;
        };
        let dir = candidate.parent().unwrap_or(Path::new("."));
        if !rows_of_machine(files, &spec, dir)?.0.is_empty() {
            return Ok(candidate);
        }
    }
    bail!(
        "no calibration in data/devices/measured/ or its archive is of the machine these rows were measured on; name one with --spec"
    )
}

/// `dlas validate --transfer CALIBRATION FILES`: prints, per scaling, the
/// error of `calibration`'s model on the rows of `files`, priced from the
/// specification of the machine they were measured on (`spec`, or that
/// machine's calibration found by its environment record).
pub fn run(
    project: &Project,
    calibration: &Path,
    spec: Option<&Path>,
    files: &[PathBuf],
) -> Result<()> {
    if files.is_empty() {
        bail!("--transfer needs the measured results files of the other machine");
    }
    let target_path = match spec {
        Some(s) => s.to_path_buf(),
        None => calibration_of_rows(project, files)?,
    };
    let calibrated = dlas_devices::load_calibration(calibration)?;
    let target = dlas_devices::load_calibration(&target_path)?;
    let dir = target_path.parent().unwrap_or(Path::new("."));
    let (rows, elsewhere) = rows_of_machine(files, &target, dir)?;
    let native = rows
        .iter()
        .filter(|r| r.compiler == dlas_core::NATIVE && r.median_ms.is_some())
        .count();
    dlas_core::outln!(
        "Calibration {} (`{}`) predicting the {native} timed native-engine rows of the {} rows measured on `{}` (specification: {}); {elsewhere} row(s) of other machines left out.\n",
        calibration.display(),
        calibrated.name,
        rows.len(),
        target.name,
        target_path.display()
    );
    dlas_core::outln!(
        "| carried by | rows | typical factor | median predicted/measured | MAPE % | Spearman rho | order agreement % (pairs; ties) | fastest algorithm right |"
    );
    dlas_core::outln!("|---|---|---|---|---|---|---|---|");
    let mut groups = Vec::new();
    for scaling in Scaling::ALL {
        let spec = transferred(&calibrated, &target, scaling);
        let validated: Vec<Validated> = validate(&rows, &spec)?;
        let refs: Vec<&Validated> = validated.iter().collect();
        let Some(e) = Errors::of(&refs) else {
            continue;
        };
        let by: Vec<String> = dlas_report::validation::by_group(&validated)
            .into_iter()
            .filter(|(g, _, _)| {
                ["algorithm", "format", "compression", "tuned", "family"].contains(g)
            })
            .map(|(_, group, e)| {
                format!(
                    "{group} {:.2} ({:.2})",
                    e.median_abs_log.exp(),
                    e.median_ratio
                )
            })
            .collect();
        groups.push(format!("- {}: {}", scaling.id(), by.join(", ")));
        let (agree, cells) = fastest_agreement(&refs);
        dlas_core::outln!(
            "| {} | {} | {:.2} | {:.2} | {:.0} | {} | {} ({}; {}) | {agree} of {cells} |",
            scaling.label(),
            e.n,
            e.median_abs_log.exp(),
            e.median_ratio,
            e.mape * 100.0,
            e.spearman.map_or("-".into(), |r| format!("{r:.2}")),
            e.agreement()
                .map_or("-".into(), |a| format!("{:.0}", a * 100.0)),
            e.pairs,
            e.ties
        );
    }
    dlas_core::outln!("\nBy group, typical factor (median predicted/measured):");
    for line in groups {
        dlas_core::outln!("{line}");
    }
    Ok(())
}
