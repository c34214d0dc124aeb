//! The device model against this machine: every measured native-engine row
//! predicted by the model the mocked devices use (calibrated on this
//! machine's micro-benchmarks, never on these rows), and the error.
//!
//! The measures, per group of rows:
//! - the median `|ln(predicted / measured)|` (ln 1.3 = 0.26 means a
//!   typical prediction within 30%) and the mean absolute percentage error;
//! - Spearman's rho between predicted and measured times;
//! - pairwise-order agreement: of all pairs of rows on the same network
//!   and dataset whose measured 95% intervals do not overlap, the share the
//!   model orders the same way. Pairs inside each other's noise are ties on
//!   the measured side; they are counted, not scored, since no model can
//!   be right or wrong about an order the measurement does not establish.
//!   This is what the observations rest on: which configuration is faster.

use crate::figure::{Body, FigureData, Point, ScatterPanel, ScatterSeries};
use crate::table::Table;
use dlas_core::ResultRow;
use dlas_devices::DeviceSpec;
use serde::Serialize;

/// One measured row and the model's prediction for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Validated {
    pub row: ResultRow,
    pub measured_ms: f64,
    pub low_ms: f64,
    pub high_ms: f64,
    pub predicted_ms: f64,
}

impl Validated {
    pub fn ratio(&self) -> f64 {
        self.predicted_ms / self.measured_ms
    }

    fn network(&self) -> (dlas_core::Dataset, &str) {
        (self.row.dataset, &self.row.model)
    }
}

/// Predicts every measured native row of `rows` on `host` (the calibrated
/// machine), keeping the rows that are from `host`'s device id.
pub fn validate(rows: &[ResultRow], host: &DeviceSpec) -> anyhow::Result<Vec<Validated>> {
    let predicted = dlas_devices::predict_measured(rows, host)?;
    Ok(predicted
        .into_iter()
        .filter_map(|(i, predicted_ms)| {
            let row = &rows[i];
            if row.device != host.id {
                return None;
            }
            let measured_ms = row.median_ms?;
            Some(Validated {
                row: row.clone(),
                measured_ms,
                low_ms: row.ci95_low_ms.unwrap_or(measured_ms),
                high_ms: row.ci95_high_ms.unwrap_or(measured_ms),
                predicted_ms,
            })
        })
        .collect())
}

/// The error of the model on a group of rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Errors {
    pub n: usize,
    pub median_abs_log: f64,
    pub median_ratio: f64,
    pub mape: f64,
    pub spearman: Option<f64>,
    /// Pairs scored (measured intervals apart), and those ordered right.
    pub pairs: usize,
    pub agree: usize,
    /// Pairs whose measured intervals overlap.
    pub ties: usize,
}

impl Errors {
    pub fn of(rows: &[&Validated]) -> Option<Errors> {
        if rows.is_empty() {
            return None;
        }
        let mut logs: Vec<f64> = rows.iter().map(|v| v.ratio().ln().abs()).collect();
        let mut ratios: Vec<f64> = rows.iter().map(|v| v.ratio()).collect();
        let mape = rows.iter().map(|v| (v.ratio() - 1.0).abs()).sum::<f64>() / rows.len() as f64;
        let (mut pairs, mut agree, mut ties) = (0, 0, 0);
        for (i, a) in rows.iter().enumerate() {
            for b in &rows[i + 1..] {
                if a.network() != b.network() {
                    continue;
                }
                if a.low_ms <= b.high_ms && b.low_ms <= a.high_ms {
                    ties += 1;
                    continue;
                }
                pairs += 1;
                let measured = a.measured_ms < b.measured_ms;
                let predicted = a.predicted_ms < b.predicted_ms;
                agree += usize::from(measured == predicted);
            }
        }
        Some(Errors {
            n: rows.len(),
            median_abs_log: median(&mut logs),
            median_ratio: median(&mut ratios),
            mape,
            spearman: spearman(
                &rows.iter().map(|v| v.predicted_ms).collect::<Vec<_>>(),
                &rows.iter().map(|v| v.measured_ms).collect::<Vec<_>>(),
            ),
            pairs,
            agree,
            ties,
        })
    }

    /// Share of scored pairs ordered right, or `None` without any.
    pub fn agreement(&self) -> Option<f64> {
        (self.pairs > 0).then(|| self.agree as f64 / self.pairs as f64)
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Ranks with ties averaged (1-based).
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for k in i..=j {
            ranks[order[k]] = rank;
        }
        i = j + 1;
    }
    ranks
}

/// Spearman's rho: Pearson's correlation of the ranks; `None` below 3
/// values or when either side is constant.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() < 3 || x.len() != y.len() {
        return None;
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = rx.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    (vx > 0.0 && vy > 0.0).then(|| cov / (vx * vy).sqrt())
}

/// The family of a row's network ([`family_of`]).
pub fn family(v: &Validated) -> String {
    family_of(v.row.dataset, &v.row.model).to_string()
}

/// The family of a network, as the compiler study groups errors: the
/// block-repeat models (`blocks-<kind>-<depth>`), then the zoo's
/// architectures (CNN, modern CNN for ConvNeXt, transformer); "other" for
/// a model outside the zoo. Memoised: building a graph to read its
/// operators is the cost.
pub fn family_of(dataset: dlas_core::Dataset, model: &str) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static MEMO: OnceLock<Mutex<HashMap<(dlas_core::Dataset, String), &'static str>>> =
        OnceLock::new();
    if model.starts_with("blocks-") {
        return "block-repeat";
    }
    let memo = MEMO.get_or_init(Default::default);
    if let Some(f) = memo
        .lock()
        .expect("memo lock")
        .get(&(dataset, model.to_string()))
    {
        return f;
    }
    let f = dlas_zoo::find(dataset, model).map_or("other", |n| {
        crate::architecture::Architecture::of(&(n.build)()).label()
    });
    memo.lock()
        .expect("memo lock")
        .insert((dataset, model.to_string()), f);
    f
}

/// A grouping's name and the group of each row.
pub type Grouping = (&'static str, fn(&Validated) -> String);

/// The groupings the error table reports.
pub fn groupings() -> Vec<Grouping> {
    vec![
        ("all", |_| "all rows".into()),
        ("algorithm", |v| v.row.algorithm.to_string()),
        ("format", |v| v.row.format.to_string()),
        ("layout", |v| v.row.layout.to_string()),
        ("compression", |v| v.row.compression.to_string()),
        ("tuned", |v| {
            if v.row.tuned { "tuned" } else { "untuned" }.into()
        }),
        ("family", family),
        ("network", |v| format!("{}/{}", v.row.dataset, v.row.model)),
        ("dataset", |v| v.row.dataset.to_string()),
    ]
}

/// The errors of every group of every grouping, in order.
pub fn by_group(rows: &[Validated]) -> Vec<(&'static str, String, Errors)> {
    let mut out = Vec::new();
    for (grouping, key) in groupings() {
        let mut groups: std::collections::BTreeMap<String, Vec<&Validated>> = Default::default();
        for v in rows {
            groups.entry(key(v)).or_default().push(v);
        }
        for (group, members) in groups {
            if let Some(errors) = Errors::of(&members) {
                out.push((grouping, group, errors));
            }
        }
    }
    out
}

/// The label of the measured validation rows in the checked observations.
pub const MEASURED: &str =
    "host, measured (the validation table's rows: every native row of the calibrated machine)";
/// The label of the model's predictions of the same rows.
pub const MODELLED: &str = "host, modelled (the same rows, predicted)";

/// The validation rows as results, measured and as the model predicts
/// them (a mocked row: its source names the model, it has no interval, so
/// comparisons on it use the tolerance as on every modelled row).
pub fn as_results(rows: &[Validated]) -> (Vec<ResultRow>, Vec<ResultRow>) {
    let measured = rows.iter().map(|v| v.row.clone()).collect();
    let modelled = rows
        .iter()
        .map(|v| ResultRow {
            median_ms: Some(v.predicted_ms),
            p10_ms: None,
            p90_ms: None,
            p99_ms: None,
            mean_ms: None,
            stddev_ms: None,
            cv: None,
            ci95_low_ms: None,
            ci95_high_ms: None,
            source: format!("mock-v{}", dlas_devices::mock::MODEL_VERSION),
            ..v.row.clone()
        })
        .collect();
    (measured, modelled)
}

/// The validation a report shows: the rows and where they come from.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub rows: Vec<Validated>,
    /// The measured files, the model version and the calibration, for footers.
    pub footer: String,
    /// The number of the study's table that shows the rows (its
    /// catalogue's `validation_table`), which footers elsewhere cite; the
    /// caller that picked the catalogue passes it, so the report's leaves
    /// never look the catalogue up.
    pub table: usize,
}

/// The error table of a validation, or an empty table that says why
/// there is none.
pub fn table_of(validation: Option<&Validation>, number: usize) -> Table {
    match validation {
        Some(v) => error_table(&v.rows, number, v.footer.clone()),
        None => error_table(
            &[],
            number,
            "No validation: no native row was measured on the calibrated machine.".into(),
        ),
    }
}

/// The figure of a validation (empty without one).
pub fn figure_of(validation: Option<&Validation>, number: usize) -> FigureData {
    match validation {
        Some(v) => figure(&v.rows, number, v.footer.clone()),
        None => figure(
            &[],
            number,
            "No validation: no native row was measured on the calibrated machine.".into(),
        ),
    }
}

/// The error table: one row per group of every grouping.
pub fn error_table(rows: &[Validated], number: usize, footer: String) -> Table {
    let fmt =
        |x: Option<f64>, digits: usize| x.map_or("–".to_string(), |x| format!("{x:.digits$}"));
    Table {
        number,
        title: "The device model against measurements on this machine (predicted from layer micro-benchmarks; no network timing is fitted)".into(),
        columns: [
            "grouping",
            "group",
            "rows",
            "median |ln(predicted/measured)|",
            "median predicted/measured",
            "MAPE %",
            "Spearman rho",
            "order agreement % (pairs; ties)",
        ]
        .map(String::from)
        .to_vec(),
        rows: by_group(rows)
            .into_iter()
            .map(|(grouping, group, e)| {
                vec![
                    grouping.to_string(),
                    group,
                    e.n.to_string(),
                    format!("{:.3}", e.median_abs_log),
                    format!("{:.2}", e.median_ratio),
                    format!("{:.0}", e.mape * 100.0),
                    fmt(e.spearman, 2),
                    format!(
                        "{} ({}; {})",
                        fmt(e.agreement().map(|a| a * 100.0), 0),
                        e.pairs,
                        e.ties
                    ),
                ]
            })
            .collect(),
        footer,
    }
}

/// Predicted against measured times, log-log, one series per algorithm
/// (and per algorithm in each layout other than NCHW), with y = x and a
/// ±25% band.
pub fn figure(rows: &[Validated], number: usize, footer: String) -> FigureData {
    let mut series: std::collections::BTreeMap<String, Vec<Point>> = Default::default();
    for v in rows {
        let kernel = match v.row.layout {
            dlas_core::Layout::Nchw => v.row.algorithm.to_string(),
            layout => format!("{} {layout}", v.row.algorithm),
        };
        series.entry(kernel).or_default().push(Point {
            label: v.row.id.clone(),
            x: v.measured_ms,
            y: v.predicted_ms,
        });
    }
    FigureData {
        number,
        title: "The device model against this machine: predicted (modelled) against measured time"
            .into(),
        y_label: "predicted ms (model)".into(),
        log_y: true,
        body: Body::Scatter(vec![ScatterPanel {
            title: "native engine rows measured on this machine".into(),
            x_label: "measured ms (median, this machine)".into(),
            series: series
                .into_iter()
                .map(|(name, points)| ScatterSeries {
                    name,
                    points,
                    modelled: false,
                })
                .collect(),
            diagonal: Some("predicted = measured".into()),
            band: Some(0.25),
        }]),
        footer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_of_orders() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &[3.0, 2.0, 1.0]), None);
        assert_eq!(ranks(&[5.0, 1.0, 5.0]), vec![2.5, 1.0, 2.5]);
    }

    fn validated(model: &str, measured: f64, half: f64, predicted: f64) -> Validated {
        let row: ResultRow = ResultRow {
            model: model.into(),
            ..dlas_core::ResultRow::without_timing(
                &dlas_core::Combination::host(dlas_core::Dataset::Cifar10, model, "native"),
                1,
                dlas_core::Status::Ok,
                "",
                "env-test",
            )
        };
        Validated {
            row,
            measured_ms: measured,
            low_ms: measured - half,
            high_ms: measured + half,
            predicted_ms: predicted,
        }
    }

    #[test]
    fn pairs_inside_the_noise_are_ties_and_networks_are_not_mixed() {
        let rows = [
            validated("a", 10.0, 0.5, 12.0),
            validated("a", 10.4, 0.5, 11.0), // overlaps the first: a tie
            validated("a", 20.0, 0.5, 13.0), // ordered right against both
            validated("b", 1.0, 0.1, 100.0), // another network: no pairs with a
        ];
        let refs: Vec<&Validated> = rows.iter().collect();
        let e = Errors::of(&refs).unwrap();
        assert_eq!((e.pairs, e.agree, e.ties), (2, 2, 1));
        assert_eq!(e.n, 4);
        let swapped = [
            validated("a", 10.0, 0.1, 30.0),
            validated("a", 20.0, 0.1, 13.0),
        ];
        let refs: Vec<&Validated> = swapped.iter().collect();
        assert_eq!(Errors::of(&refs).unwrap().agreement(), Some(0.0));
    }
}
