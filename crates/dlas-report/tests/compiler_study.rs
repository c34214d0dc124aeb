//! The compiler study's report from its committed mocked results: every
//! number of its tables, every series of its figures and its findings'
//! verdicts as insta snapshots, and the files each selection writes.

mod common;

use dlas_report::compilers::{self, CLAIMS, FIGURES, PAGE, TABLES};
use dlas_report::{Inputs, Selection};

/// Calls `f` with the compiler study's inputs, as `reproduce --study compilers` passes them.
fn with_inputs(f: impl FnOnce(&Inputs)) {
    common::with_compiler_results(&["data/results/compilers/mock.csv"], f)
}

#[test]
fn tables() {
    with_inputs(|inputs| {
        for &n in TABLES {
            let table = compilers::table(n, inputs).unwrap();
            insta::assert_yaml_snapshot!(format!("compilers_table{n}"), table);
        }
    });
}

#[test]
fn figure_data_series() {
    with_inputs(|inputs| {
        for &n in FIGURES {
            let data = compilers::figure(n, inputs).unwrap().rounded();
            insta::assert_yaml_snapshot!(format!("compilers_figure{n}"), data);
        }
    });
}

/// Every finding that does not hold says why, from the data.
fn explained(outcomes: &[dlas_report::claims::Outcome]) {
    for o in outcomes {
        assert!(
            o.verdict != dlas_report::claims::Verdict::DoesNotHold || !o.explanation.is_empty(),
            "{o:?}"
        );
    }
}

#[test]
fn findings_on_the_mocked_devices() {
    with_inputs(|inputs| {
        let checked = compilers::CATALOGUE.check(inputs);
        explained(&checked[0].outcomes);
        insta::assert_yaml_snapshot!("compilers_findings", checked[0].outcomes);
    });
}

/// The findings on the recorded host sweep (data/results/compilers/host.csv,
/// measured on one machine with the study's reduced host protocol): its
/// verdicts and evidence numbers, rounded as the report prints them.
#[test]
fn findings_on_the_recorded_host() {
    common::with_compiler_results(&["data/results/compilers/host.csv"], |inputs| {
        let checked = compilers::CATALOGUE.check(inputs);
        explained(&checked[0].outcomes);
        insta::assert_yaml_snapshot!("compilers_findings_host", checked[0].outcomes);
    });
}

#[test]
fn each_selection_writes_its_files_under_the_study_folders() {
    with_inputs(|inputs| {
        let paths = |selection| -> Vec<String> {
            dlas_report::build(inputs, selection)
                .unwrap()
                .into_iter()
                .map(|a| a.path.display().to_string())
                .collect()
        };
        assert_eq!(
            paths(Selection::Figure(5)),
            [
                "figures/compilers/figure5.svg",
                "figures/compilers/figure5.png"
            ]
        );
        assert_eq!(
            paths(Selection::Table(2)),
            [
                "paper-tables/compilers/table2.md",
                "paper-tables/compilers/table2.csv",
                "paper-tables/compilers/table2.tex"
            ]
        );
        let all = paths(Selection::All);
        assert!(all.contains(&CLAIMS.to_string()));
        assert_eq!(all.last().map(String::as_str), Some(PAGE));
        assert_eq!(all.len(), 3 * TABLES.len() + 1 + 2 * FIGURES.len() + 1);
        let err = dlas_report::build(inputs, Selection::Figure(9))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "the compiler study has no figure 9; figures: [1, 2, 3, 4, 5, 6, 7, 8]"
        );
        // The same inputs give the same bytes; the page holds every figure
        // and the findings.
        let bytes = |n| dlas_report::build(inputs, Selection::Figure(n)).unwrap();
        assert_eq!(bytes(1), bytes(1));
        let page = dlas_report::build(inputs, Selection::All)
            .unwrap()
            .pop()
            .unwrap();
        let html = String::from_utf8(page.bytes).unwrap();
        for n in FIGURES {
            assert!(html.contains(&format!("id=\"figure-{n}\"")), "figure {n}");
        }
        assert!(
            html.contains("<td>C3</td>")
                && html.contains("cargo xtask reproduce --study compilers --all")
        );
    });
}

/// Figure 6 draws the block-repeat rows Finding C3 reads: on the recorded
/// host (whose native engine and runtimes all ran the block models) each
/// compiled configuration with block rows gets a panel marked measured.
#[test]
fn figure_6_shows_the_host_block_rows_finding_c3_reads() {
    common::with_compiler_results(
        &[
            "data/results/compilers/mock.csv",
            "data/results/compilers/host.csv",
        ],
        |inputs| {
            let figure = compilers::figure(6, inputs).unwrap();
            let dlas_report::figure::Body::Lines { panels, .. } = &figure.body else {
                panic!("Figure 6 draws lines")
            };
            let host: Vec<&str> = panels
                .iter()
                .filter(|p| p.title.starts_with("host"))
                .map(|p| p.title.as_str())
                .collect();
            assert_eq!(
                host,
                [
                    "host (measured): native tuned over native untuned",
                    "host (measured): tract-opt over tract-plain",
                    "host (measured): ort-opt over ort-noopt"
                ]
            );
            assert!(
                panels
                    .iter()
                    .all(|p| p.note.is_empty() && !p.series.is_empty())
            );
            // The findings are checked per results file: the host's here.
            let c3 = compilers::CATALOGUE
                .check(inputs)
                .into_iter()
                .find(|checked| checked.file.ends_with("host.csv"))
                .expect("the host's results file is checked")
                .outcomes
                .into_iter()
                .find(|o| {
                    o.evidence
                        .iter()
                        .any(|e| e.contains("the deepest model gains"))
                })
                .expect("Finding C3's outcome");
            assert!(
                c3.devices.iter().any(|d| d == "host"),
                "C3 reads the host's block rows: {c3:?}"
            );
        },
    );
}
