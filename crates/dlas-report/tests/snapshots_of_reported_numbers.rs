//! Every number of every table and every data series of every figure, from
//! the committed results, as insta snapshots: a change to a reported number
//! is a snapshot diff that someone must accept.

use dlas_core::{Study, results};
use dlas_report::Inputs;
use dlas_report::catalogue::{FIGURES, TABLES, figure, table};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn with_inputs(f: impl FnOnce(&Inputs)) {
    let root = root();
    let study = Study::load("dlas", &root.join("data/studies")).unwrap();
    let specs = dlas_devices::load_specs(&root.join("data/devices")).unwrap();
    let rows = results::read_results(&root.join("data/results/dlas/mock.csv")).unwrap();
    let inputs = Inputs {
        study: &study,
        results: &rows,
        specs: &specs,
        result_files: vec!["data/results/dlas/mock.csv".into()],
        hosts: vec![],
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
