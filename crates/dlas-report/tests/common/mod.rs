//! The committed inputs of the report, as `reproduce` passes them: the
//! mocked results, the compression facts, the recorded accuracies and the
//! device model's validation rows (all measured on the calibrated machine).

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use dlas_core::{Plan, Study, results};
use dlas_report::compression::{LayerSlice, RecordedAccuracy, Sweeps, layer_path, sweep_path};
use dlas_report::validation::Validation;
use dlas_report::{Inputs, ResultsFile};
use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The recorded accuracies, read as the CLI reads them.
fn accuracy(root: &Path) -> Vec<RecordedAccuracy> {
    dlas_compress::accuracy::read_published(&root.join("data/accuracy/published.csv"))
        .unwrap()
        .into_iter()
        .filter_map(|p| {
            Some(RecordedAccuracy {
                dataset: p.dataset,
                model: p.model,
                technique: p.technique,
                level: p.level,
                top1: p.top1?,
                source: p.source,
            })
        })
        .collect()
}

/// Calls `f` with the inputs of the mocked devices' results.
pub fn with_inputs(f: impl FnOnce(&Inputs)) {
    with_results(&["data/results/dlas/mock.csv"], f)
}

/// The rows of the results files `paths` (relative to `root`), one after
/// the other, and which rows came from which file.
fn read_files(root: &Path, paths: &[&str]) -> (Vec<results::ResultRow>, Vec<ResultsFile>) {
    let mut rows = Vec::new();
    let mut result_files = Vec::new();
    for path in paths {
        let start = rows.len();
        rows.extend(results::read_results(&root.join(path)).unwrap());
        result_files.push(ResultsFile {
            path: path.to_string(),
            rows: start..rows.len(),
        });
    }
    (rows, result_files)
}

/// Calls `f` with the inputs of the committed results files `paths` (the
/// mocked devices' first, as `reproduce` reads them).
pub fn with_results(paths: &[&str], f: impl FnOnce(&Inputs)) {
    let root = root();
    let study = Study::load("dlas", &root.join("data/studies")).unwrap();
    let specs = dlas_devices::load_specs(&root.join("data/devices")).unwrap();
    let (rows, result_files) = read_files(&root, paths);
    let sweeps = Sweeps::read(&root.join(sweep_path("dlas"))).unwrap();
    let layer = LayerSlice::read(&root.join(layer_path("dlas"))).unwrap();
    let accuracy = accuracy(&root);
    let plan = Plan::expand(&study);
    let validation = validation(&root, &study);
    let transfer = transfer(&root);
    let inputs = Inputs {
        study: &study,
        plan: &plan,
        results: &rows,
        specs: &specs,
        result_files,
        hosts: vec![],
        sweeps: &sweeps,
        layer: Some(&layer),
        accuracy: &accuracy,
        validation: Some(&validation),
        transfer: Some(&transfer),
        transfer_table: dlas_report::catalogue_of(&study).transfer_table,
        drift: dlas_report::drift::Drift::of(
            &dlas_report::validation::as_results(&validation.rows).0,
        ),
    };
    f(&inputs);
}

/// Calls `f` with the compiler study's inputs from the committed results files `paths`.
pub fn with_compiler_results(paths: &[&str], f: impl FnOnce(&Inputs)) {
    let root = root();
    let study = Study::load("compilers", &root.join("data/studies")).unwrap();
    let specs = dlas_devices::load_specs(&root.join("data/devices")).unwrap();
    let (rows, result_files) = read_files(&root, paths);
    let sweeps = Sweeps::default();
    let plan = Plan::expand(&study);
    let validation = validation(&root, &study);
    let transfer = transfer(&root);
    let inputs = Inputs {
        study: &study,
        plan: &plan,
        results: &rows,
        specs: &specs,
        result_files,
        hosts: vec![],
        sweeps: &sweeps,
        layer: None,
        accuracy: &[],
        validation: Some(&validation),
        transfer: Some(&transfer),
        transfer_table: dlas_report::catalogue_of(&study).transfer_table,
        drift: dlas_report::drift::Drift::of(
            &dlas_report::validation::as_results(&validation.rows).0,
        ),
    };
    f(&inputs);
}

/// The device model on another machine: the committed predictions of
/// every pair of calibrated machines, as `reproduce` reads them.
fn transfer(root: &Path) -> dlas_report::transfer::Transfer {
    dlas_report::transfer::Transfer::read(
        &root.join(dlas_report::transfer::TRANSFER_CSV),
        dlas_report::transfer::sources(),
    )
    .unwrap()
}

/// The device model's validation: the committed validation rows, measured
/// on the calibrated machine, and the model's predictions of them.
fn validation(root: &std::path::Path, study: &Study) -> Validation {
    let host = dlas_devices::load_calibrated(&root.join("data/devices/measured")).unwrap();
    let measured = results::read_results(&root.join("data/results/dlas/validation.csv")).unwrap();
    Validation {
        rows: dlas_report::validation::validate(&measured, &host).unwrap(),
        footer: "Measured: data/results/dlas/validation.csv.".into(),
        table: dlas_report::catalogue_of(study).validation_table,
    }
}
