//! Every number of every table, every data series of every figure and every
//! verdict with its evidence, from the committed results and compression
//! facts, as insta snapshots: a change to a reported number is a snapshot
//! diff that someone must accept.

mod common;

use common::with_inputs;
use dlas_report::catalogue::{FIGURES, TABLES, figure, table};
use dlas_report::claims::{self, Context};
use serde::Serialize;

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
