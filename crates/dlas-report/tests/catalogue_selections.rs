//! What each selection of `reproduce` writes: a figure its SVG and PNG, a
//! table its three renderings (Table 8 with `claims.md`), everything all of
//! them and the report page; a number outside the catalogue is refused.

mod common;

use common::with_inputs;
use dlas_report::dlas::{CLAIMS, FIGURES, PAGE, TABLES};
use dlas_report::{Selection, build};

fn paths(selection: Selection) -> Vec<String> {
    let mut out = Vec::new();
    with_inputs(|inputs| {
        out = build(inputs, selection)
            .unwrap()
            .into_iter()
            .map(|a| a.path.display().to_string())
            .collect();
    });
    out
}

#[test]
fn each_selection_writes_its_files() {
    assert_eq!(
        paths(Selection::Figure(2)),
        ["figures/figure2.svg", "figures/figure2.png"]
    );
    assert_eq!(
        paths(Selection::Table(8)),
        [
            "paper-tables/table8.md",
            "paper-tables/table8.csv",
            "paper-tables/table8.tex",
            CLAIMS
        ]
    );
    let all = paths(Selection::All);
    let mut expected: Vec<String> = TABLES
        .iter()
        .flat_map(|n| ["md", "csv", "tex"].map(|e| format!("paper-tables/table{n}.{e}")))
        .collect();
    expected.push(CLAIMS.into());
    expected.extend(
        FIGURES
            .iter()
            .flat_map(|n| ["svg", "png"].map(|e| format!("figures/figure{n}.{e}"))),
    );
    expected.push(PAGE.into());
    assert_eq!(all, expected);
}

#[test]
fn numbers_outside_the_catalogue_are_refused() {
    with_inputs(|inputs| {
        let err = build(inputs, Selection::Figure(11))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "there is no figure 11; figures: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
        );
        let err = build(inputs, Selection::Table(0)).unwrap_err().to_string();
        assert!(err.starts_with("there is no table 0"), "{err}");
    });
}

/// The page a reviewer opens holds every figure and table with its source,
/// and the same inputs give the same bytes.
#[test]
fn the_page_is_deterministic_and_complete() {
    with_inputs(|inputs| {
        let page = |inputs| {
            build(inputs, Selection::All)
                .unwrap()
                .into_iter()
                .find(|a| a.path.display().to_string() == PAGE)
                .unwrap()
                .bytes
        };
        let html = String::from_utf8(page(inputs)).unwrap();
        assert_eq!(html.as_bytes(), page(inputs));
        for n in FIGURES {
            assert!(
                html.contains(&format!("<figure id=\"figure-{n}\">")),
                "figure {n}"
            );
        }
        for n in TABLES {
            assert!(
                html.contains(&format!("<table id=\"table-{n}\">")),
                "table {n}"
            );
        }
        assert_eq!(
            html.matches("data:image/svg+xml;base64,").count(),
            FIGURES.len()
        );
        assert!(html.contains("Source: data/results/dlas/mock.csv"));
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "no external resource"
        );
    });
}

/// ARTIFACT.md's map of the papers is the catalogues' map, word for word:
/// each study's table sits between `<!-- paper map: STUDY -->` and
/// `<!-- end of paper map -->`.
#[test]
fn artifact_md_holds_the_generated_paper_maps() {
    let artifact = std::fs::read_to_string(common::root().join("ARTIFACT.md")).unwrap();
    for (study, catalogue) in [
        ("dlas", &dlas_report::dlas::CATALOGUE),
        ("compilers", &dlas_report::compilers::CATALOGUE),
    ] {
        let start = format!("<!-- paper map: {study} -->\n");
        let from = artifact
            .find(&start)
            .unwrap_or_else(|| panic!("ARTIFACT.md lacks {start:?}"))
            + start.len();
        let to = from
            + artifact[from..]
                .find("<!-- end of paper map -->")
                .expect("ARTIFACT.md: the paper map's end marker");
        let generated = dlas_report::paper_map::markdown(catalogue.paper_map);
        assert_eq!(
            &artifact[from..to],
            generated,
            "ARTIFACT.md's paper map of {study} differs; paste:\n{generated}"
        );
    }
}
