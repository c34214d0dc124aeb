//! Every number of every table, every data series of every figure and every
//! verdict with its evidence, from the committed results and compression
//! facts, as insta snapshots: a change to a reported number is a snapshot
//! diff that someone must accept.

use dlas_core::{Study, results};
use dlas_report::catalogue::{FIGURES, TABLES, figure, table};
use dlas_report::claims::{self, Context};
use dlas_report::compression::{LayerSlice, RecordedAccuracy, Sweeps, layer_path, sweep_path};
use dlas_report::{Inputs, ResultsFile};
use serde::Serialize;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
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

fn with_inputs(f: impl FnOnce(&Inputs)) {
    let root = root();
    let study = Study::load("dlas", &root.join("data/studies")).unwrap();
    let specs = dlas_devices::load_specs(&root.join("data/devices")).unwrap();
    let rows = results::read_results(&root.join("data/results/dlas/mock.csv")).unwrap();
    let sweeps = Sweeps::read(&root.join(sweep_path("dlas"))).unwrap();
    let layer = LayerSlice::read(&root.join(layer_path("dlas"))).unwrap();
    let accuracy = accuracy(&root);
    let inputs = Inputs {
        study: &study,
        results: &rows,
        specs: &specs,
        result_files: vec![ResultsFile {
            path: "data/results/dlas/mock.csv".into(),
            rows: 0..rows.len(),
        }],
        hosts: vec![],
        sweeps: &sweeps,
        layer: &layer,
        accuracy: &accuracy,
    };
    f(&inputs);
}

#[test]
fn tables() {
    with_inputs(|inputs| {
        for &n in TABLES {
            insta::assert_yaml_snapshot!(format!("table{n}"), table(n, inputs).unwrap());
        }
    });
}

#[test]
fn figure_data_series() {
    with_inputs(|inputs| {
        for &n in FIGURES {
            let data = figure(n, inputs).unwrap().rounded();
            insta::assert_yaml_snapshot!(format!("figure{n}"), data);
        }
    });
}

/// An observation's verdict as the snapshot shows it.
#[derive(Serialize)]
struct Verdict {
    observation: &'static str,
    outcome: claims::Outcome,
}

#[test]
fn claims_on_the_mocked_devices() {
    with_inputs(|inputs| {
        let networks = dlas_report::catalogue::networks_of(inputs.study);
        let kinds = dlas_report::catalogue::device_kinds(inputs.specs);
        let context = Context {
            rows: inputs.results,
            kinds: &kinds,
            networks: &networks,
            sweeps: inputs.sweeps,
            accuracy: inputs.accuracy,
        };
        let verdicts: Vec<Verdict> = claims::check_all(&context)
            .into_iter()
            .map(|(o, outcome)| Verdict {
                observation: o.numeral,
                outcome,
            })
            .collect();
        insta::assert_yaml_snapshot!("claims_mock", verdicts);
    });
}
