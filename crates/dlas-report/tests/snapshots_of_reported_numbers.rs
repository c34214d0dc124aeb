//! Every number of every table, every data series of every figure and every
//! verdict with its evidence, from the committed results and compression
//! facts, as insta snapshots: a change to a reported number is a snapshot
//! diff that someone must accept.

mod common;

use common::with_inputs;
use dlas_report::claims;
use dlas_report::dlas::{CATALOGUE, FIGURES, TABLES, figure, observations, table};
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
        // The committed inputs hold one results file, the mocked devices',
        // and the validation rows, measured and as the model predicts them.
        let [checked, measured, modelled] = &CATALOGUE.check(inputs)[..] else {
            panic!("one results file and the two views of the validation rows")
        };
        assert_eq!(measured.file, dlas_report::validation::MEASURED);
        assert_eq!(modelled.file, dlas_report::validation::MODELLED);
        let verdicts: Vec<Verdict> = observations::observations()
            .into_iter()
            .zip(checked.outcomes.clone())
            .map(|(o, outcome)| Verdict {
                observation: o.numeral,
                outcome,
            })
            .collect();
        // Every verdict that does not hold says why, from the data.
        for v in &verdicts {
            assert!(
                v.outcome.verdict != claims::Verdict::DoesNotHold
                    || !v.outcome.explanation.is_empty(),
                "{} does not hold without an explanation",
                v.observation
            );
        }
        insta::assert_yaml_snapshot!("claims_mock", verdicts);
    });
}
