//! The device model on another machine: one machine's calibration
//! predicting another machine's measured native rows from that machine's
//! specification (`dlas validate --transfer`), for every ordered pair of
//! calibrated machines and every way of carrying the curves
//! ([`dlas_devices::scaling::Scaling`]), with the same machine's own
//! calibration beside it. This is what every mocked CPU relies on: its
//! numbers are the host's curves carried to its specification. Its error,
//! not the calibrated machine's own (Table 9), is the error a mocked CPU's
//! numbers carry, and footers print it (`provenance.rs`).

use crate::table::Table;
use crate::validation::{Errors, Validated, family};
use anyhow::{Context, Result, bail};
use dlas_core::{Algorithm, Compression, Dataset, Format, Layout, ResultRow, Status};
use dlas_devices::scaling::Scaling;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Where `reproduce` writes the predictions behind the table, so that
/// `--check` compares them and the report's tests read them as data.
pub const TRANSFER_CSV: &str = "data/devices/measured/transfer.csv";
/// The calibrated machines, with each one's calibration and measured rows.
pub const MACHINES: &str = "data/devices/measured/machines.toml";

/// Where the cross-machine test's numbers come from, for its footer.
pub fn sources() -> String {
    format!(
        "Measured and modelled: the predictions in {TRANSFER_CSV} of the calibrated machines {MACHINES} lists (each one's calibration and the results files measured on it)."
    )
}

/// One calibration predicting one machine's rows, under each scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    /// The calibrated machine and its engine revision.
    pub calibration: String,
    pub calibration_revision: String,
    /// The machine whose rows are predicted and their engine revisions.
    pub target: String,
    pub target_revisions: Vec<String>,
    /// The rows predicted, per scaling (one, unscaled, on the same machine).
    pub predicted: Vec<(Scaling, Vec<Validated>)>,
}

impl Pair {
    /// Whether the rows were measured on the calibrated machine itself.
    pub fn same_machine(&self) -> bool {
        self.calibration == self.target
    }
}

/// Every pair, and where the rows and calibrations come from.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    pub pairs: Vec<Pair>,
    /// The files behind the table, for its footer.
    pub sources: String,
}

/// An error as a footer quotes it: the typical factor over a set of
/// predictions, the share of pairs ordered right and the rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quoted {
    pub factor: f64,
    pub ratio: f64,
    pub agreement: Option<f64>,
    pub rows: usize,
}

impl Quoted {
    fn of(errors: &Errors) -> Quoted {
        Quoted {
            factor: errors.median_abs_log.exp(),
            ratio: errors.median_ratio,
            agreement: errors.agreement(),
            rows: errors.n,
        }
    }

    /// "a factor 1.41, 85% of ordered pairs".
    pub fn words(&self) -> String {
        let pairs = self.agreement.map_or(String::new(), |a| {
            format!(", {:.0}% of ordered pairs", a * 100.0)
        });
        format!("a factor {:.2}{pairs}", self.factor)
    }
}

/// The families the tables and footers report, in order (see
/// [`crate::validation::family`]).
pub const FAMILIES: [&str; 4] = ["CNN", "modern CNN", "transformer", "block-repeat"];

/// The scaling the mocked CPUs are priced with (`dlas_devices::load_specs`).
pub const MOCKED_CPUS: Scaling = Scaling::PerIsa;

impl Transfer {
    /// The errors of `scaling` across machines (every pair of two
    /// machines), one per direction, over the rows of `family` (all rows
    /// when `None`).
    pub fn another_cpu(&self, scaling: Scaling, family_of: Option<&str>) -> Vec<(String, Quoted)> {
        self.pairs
            .iter()
            .filter(|p| !p.same_machine())
            .filter_map(|p| {
                let rows = p.predicted.iter().find(|(s, _)| *s == scaling)?;
                let errors = errors_of(&rows.1, family_of)?;
                Some((
                    format!("{} -> {}", p.calibration, p.target),
                    Quoted::of(&errors),
                ))
            })
            .collect()
    }

    /// The errors on each machine's own rows from its own calibration,
    /// over the rows of `family` (all when `None`).
    pub fn same_machine(&self, family_of: Option<&str>) -> Vec<(String, Quoted)> {
        self.pairs
            .iter()
            .filter(|p| p.same_machine())
            .filter_map(|p| {
                let errors = errors_of(&p.predicted.first()?.1, family_of)?;
                Some((p.target.clone(), Quoted::of(&errors)))
            })
            .collect()
    }

    /// Table `number`: per pair, scaling and family, the error and how
    /// often the predicted fastest algorithm is a measured fastest one.
    pub fn table(&self, number: usize) -> Table {
        let fmt = |x: Option<f64>, digits: usize| {
            x.map_or("–".to_string(), |x| format!("{x:.digits$}"))
        };
        let mut rows = Vec::new();
        for p in &self.pairs {
            for (scaling, predicted) in &p.predicted {
                // All rows, then each family (in the order of FAMILIES) when
                // there is more than one.
                let mut groups: Vec<(String, Vec<&Validated>)> =
                    vec![("all rows".into(), predicted.iter().collect())];
                let families: Vec<(String, Vec<&Validated>)> = FAMILIES
                    .iter()
                    .map(|f| {
                        let members = predicted.iter().filter(|v| family(v) == *f).collect();
                        (f.to_string(), members)
                    })
                    .filter(|(_, m): &(String, Vec<&Validated>)| !m.is_empty())
                    .collect();
                if families.len() > 1 {
                    groups.extend(families);
                }
                for (group, members) in groups {
                    let Some(e) = Errors::of(&members) else {
                        continue;
                    };
                    let (agree, cells) = fastest_agreement(&members);
                    rows.push(vec![
                        format!("{} ({})", p.calibration, p.calibration_revision),
                        format!("{} ({})", p.target, p.target_revisions.join(", ")),
                        if p.same_machine() {
                            "same machine".to_string()
                        } else {
                            scaling.id().to_string()
                        },
                        group,
                        e.n.to_string(),
                        format!("{:.2}", e.median_abs_log.exp()),
                        format!("{:.2}", e.median_ratio),
                        fmt(e.spearman, 2),
                        format!(
                            "{} ({}; {})",
                            fmt(e.agreement().map(|a| a * 100.0), 0),
                            e.pairs,
                            e.ties
                        ),
                        if cells == 0 {
                            "–".into()
                        } else {
                            format!("{agree} of {cells}")
                        },
                    ]);
                }
            }
        }
        Table {
            number,
            title: "The device model on another CPU: one machine's calibration predicting another machine's measured native rows from its specification (modelled against measured)".into(),
            columns: [
                "calibration (engine revision)",
                "rows measured on (engine revisions)",
                "carried by",
                "rows",
                "n",
                "typical factor (exp median |ln(predicted/measured)|)",
                "median predicted/measured",
                "Spearman rho",
                "order agreement % (pairs; ties)",
                "fastest algorithm right (cells)",
            ]
            .map(String::from)
            .to_vec(),
            rows,
            footer: format!(
                "{} The curves are fitted to the calibration's layer micro-benchmarks only; no row of either machine is fitted. \
                 Same machine: the calibration predicts its own machine's rows (Table 9's test, per machine). \
                 Carried: the other machine is priced from its own figures: \
                 unscaled, as if it were the calibrated machine (the reference a scaling must beat); specification, fma_lanes x clock of its widest FMA (model versions 2-4 for every mocked CPU); \
                 per-isa, each kernel class at the measured peak of the instruction set the engine's kernels of that class are written in, and fixed costs by the core clock (crates/dlas-devices/src/scaling.rs; every mocked CPU since model version 5). \
                 The two machines' rows were measured on different engine revisions (named), so machine and engine effects are not separated. \
                 Fastest algorithm right: cells (network, compression, format, tuning, batch) with two or more algorithms whose predicted fastest is the measured fastest or within its 95% interval.",
                self.sources
            ),
        }
    }
}

/// One prediction of the cross-machine test, as the CSV holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CsvRow {
    calibration: String,
    calibration_revision: String,
    target: String,
    target_revisions: String,
    scaling: String,
    id: String,
    dataset: Dataset,
    model: String,
    compression: Compression,
    algorithm: Algorithm,
    format: Format,
    tuned: bool,
    batch: usize,
    measured_ms: f64,
    low_ms: f64,
    high_ms: f64,
    predicted_ms: f64,
    /// Last, and NCHW where absent: the files written before the blocked
    /// layout had no layout column.
    #[serde(default = "nchw")]
    layout: Layout,
}

fn nchw() -> Layout {
    Layout::Nchw
}

impl Transfer {
    /// The predictions as CSV, the predicted times to six significant
    /// digits (as mocked results are), so the file does not depend on
    /// the last bits of the machine's arithmetic.
    pub fn to_csv(&self) -> Result<Vec<u8>> {
        let mut writer = csv::Writer::from_writer(Vec::new());
        for p in &self.pairs {
            for (scaling, rows) in &p.predicted {
                for v in rows {
                    let r = &v.row;
                    writer.serialize(CsvRow {
                        calibration: p.calibration.clone(),
                        calibration_revision: p.calibration_revision.clone(),
                        target: p.target.clone(),
                        target_revisions: p.target_revisions.join(" "),
                        scaling: scaling.id().into(),
                        id: r.id.clone(),
                        dataset: r.dataset,
                        model: r.model.clone(),
                        compression: r.compression,
                        algorithm: r.algorithm,
                        format: r.format,
                        tuned: r.tuned,
                        batch: r.batch,
                        measured_ms: v.measured_ms,
                        low_ms: v.low_ms,
                        high_ms: v.high_ms,
                        predicted_ms: dlas_core::results::round_significant(v.predicted_ms, 6),
                        layout: r.layout,
                    })?;
                }
            }
        }
        Ok(writer.into_inner()?)
    }

    /// Reads the predictions `to_csv` wrote; `sources` names where they
    /// come from. A malformed row names the file and line.
    pub fn read(path: &Path, sources: String) -> Result<Transfer> {
        let mut reader = csv::Reader::from_path(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut pairs: Vec<Pair> = Vec::new();
        for (i, row) in reader.deserialize::<CsvRow>().enumerate() {
            let row = row.with_context(|| format!("{}: line {}", path.display(), i + 2))?;
            let Some(scaling) = Scaling::ALL.into_iter().find(|s| s.id() == row.scaling) else {
                bail!(
                    "{}: line {}: unknown scaling `{}`",
                    path.display(),
                    i + 2,
                    row.scaling
                );
            };
            let at = pairs
                .iter()
                .position(|p| p.calibration == row.calibration && p.target == row.target);
            let pair = match at {
                Some(at) => &mut pairs[at],
                None => {
                    pairs.push(Pair {
                        calibration: row.calibration.clone(),
                        calibration_revision: row.calibration_revision.clone(),
                        target: row.target.clone(),
                        target_revisions: row
                            .target_revisions
                            .split(' ')
                            .map(String::from)
                            .collect(),
                        predicted: Vec::new(),
                    });
                    pairs.last_mut().expect("pushed")
                }
            };
            if pair.predicted.last().is_none_or(|(s, _)| *s != scaling) {
                pair.predicted.push((scaling, Vec::new()));
            }
            let validated = row.validated();
            pair.predicted.last_mut().expect("pushed").1.push(validated);
        }
        Ok(Transfer { pairs, sources })
    }
}

impl CsvRow {
    fn validated(&self) -> Validated {
        Validated {
            row: ResultRow {
                id: self.id.clone(),
                dataset: self.dataset,
                model: self.model.clone(),
                compression: self.compression,
                level: String::new(),
                algorithm: self.algorithm,
                format: self.format,
                layout: self.layout,
                compiler: dlas_core::NATIVE.into(),
                tuned: self.tuned,
                device: "host".into(),
                batch: self.batch,
                warmup: 0,
                runs: 0,
                median_ms: Some(self.measured_ms),
                p10_ms: None,
                p90_ms: None,
                p99_ms: None,
                mean_ms: None,
                stddev_ms: None,
                cv: None,
                ci95_low_ms: Some(self.low_ms),
                ci95_high_ms: Some(self.high_ms),
                status: Status::Ok,
                reason: String::new(),
                provider: String::new(),
                source: self.calibration.clone(),
            },
            measured_ms: self.measured_ms,
            low_ms: self.low_ms,
            high_ms: self.high_ms,
            predicted_ms: self.predicted_ms,
        }
    }
}

/// The cross-machine table of the inputs, or an empty one that says why
/// there is none.
pub fn table_of(transfer: Option<&Transfer>, number: usize) -> Table {
    match transfer {
        Some(t) => t.table(number),
        None => {
            let mut empty = Transfer {
                pairs: Vec::new(),
                sources: String::new(),
            }
            .table(number);
            empty.footer = format!(
                "No cross-machine test: {MACHINES} or its predictions ({TRANSFER_CSV}) are missing."
            );
            empty
        }
    }
}

fn errors_of(rows: &[Validated], family_of: Option<&str>) -> Option<Errors> {
    let members: Vec<&Validated> = rows
        .iter()
        .filter(|v| family_of.is_none_or(|f| family(v) == f))
        .collect();
    Errors::of(&members)
}

/// Cells with two or more algorithms measured, and in how many the
/// predicted fastest is a measured fastest (its interval overlaps the
/// fastest's).
pub fn fastest_agreement(rows: &[&Validated]) -> (usize, usize) {
    type Cell<'a> = (Dataset, &'a str, Compression, Format, bool, usize);
    let mut cells: BTreeMap<Cell, Vec<&Validated>> = BTreeMap::new();
    for v in rows {
        let r = &v.row;
        cells
            .entry((
                r.dataset,
                &r.model,
                r.compression,
                r.format,
                r.tuned,
                r.batch,
            ))
            .or_default()
            .push(v);
    }
    let (mut agree, mut total) = (0, 0);
    for members in cells.values().filter(|m| m.len() >= 2) {
        let measured = members
            .iter()
            .min_by(|a, b| a.measured_ms.total_cmp(&b.measured_ms))
            .expect("two members");
        let predicted = members
            .iter()
            .min_by(|a, b| a.predicted_ms.total_cmp(&b.predicted_ms))
            .expect("two members");
        total += 1;
        agree += usize::from(predicted.low_ms <= measured.high_ms);
    }
    (agree, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::{Algorithm, ResultRow};

    fn validated(model: &str, algorithm: Algorithm, measured: f64, predicted: f64) -> Validated {
        let mut row: ResultRow = crate::claims::fixtures::row(
            "host",
            Dataset::Cifar10,
            model,
            Compression::Dense,
            algorithm,
            false,
            measured,
        );
        row.source = "env-test".into();
        Validated {
            row,
            measured_ms: measured,
            low_ms: measured * 0.99,
            high_ms: measured * 1.01,
            predicted_ms: predicted,
        }
    }

    #[test]
    fn the_predicted_fastest_counts_when_it_is_a_measured_fastest() {
        let rows = [
            validated("resnet18", Algorithm::Direct, 10.0, 12.0),
            validated("resnet18", Algorithm::Gemm, 10.05, 11.0), // tied with direct
            validated("vgg16", Algorithm::Direct, 5.0, 9.0),
            validated("vgg16", Algorithm::Gemm, 8.0, 4.0), // predicted fastest, measured slower
            validated("mobilenetv1", Algorithm::Gemm, 1.0, 1.0), // one algorithm: no cell
        ];
        let refs: Vec<&Validated> = rows.iter().collect();
        assert_eq!(fastest_agreement(&refs), (1, 2));
    }

    #[test]
    fn footers_quote_each_direction_apart_from_the_same_machine() {
        let pair = |calibration: &str, target: &str, ratio: f64| Pair {
            calibration: calibration.into(),
            calibration_revision: "r1".into(),
            target: target.into(),
            target_revisions: vec!["r2".into()],
            predicted: vec![(
                if calibration == target {
                    Scaling::Unscaled
                } else {
                    Scaling::PerIsa
                },
                vec![
                    validated("resnet18", Algorithm::Direct, 10.0, 10.0 * ratio),
                    validated("resnet18", Algorithm::Gemm, 20.0, 20.0 * ratio),
                ],
            )],
        };
        let t = Transfer {
            pairs: vec![
                pair("a", "a", 1.1),
                pair("a", "b", 1.5),
                pair("b", "a", 0.5),
            ],
            sources: "test".into(),
        };
        let across = t.another_cpu(Scaling::PerIsa, None);
        assert_eq!(across.len(), 2);
        assert_eq!(across[0].0, "a -> b");
        assert!((across[0].1.factor - 1.5).abs() < 1e-9);
        assert!((across[1].1.factor - 2.0).abs() < 1e-9);
        assert_eq!(across[1].1.words(), "a factor 2.00, 100% of ordered pairs");
        assert!(t.another_cpu(Scaling::Specification, None).is_empty());
        assert_eq!(t.same_machine(None).len(), 1);
        assert!(
            t.another_cpu(Scaling::PerIsa, Some("transformer"))
                .is_empty()
        );
        let table = t.table(11);
        assert_eq!(table.rows.len(), 3, "{:?}", table.rows);
        // The CSV round trip keeps every pair, scaling and number.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("transfer.csv");
        std::fs::write(&path, t.to_csv().unwrap()).unwrap();
        let back = Transfer::read(&path, "test".into()).unwrap();
        assert_eq!(back.table(11), table);
    }
}
