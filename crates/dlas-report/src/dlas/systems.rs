//! The systems-software layer on the measured devices (Table 10, Figure
//! 10): the native engine, untuned and tuned, against tract and ONNX
//! Runtime on the same network and compression. Those runtimes choose their
//! own kernels, so their rows have no place on the algorithm axis of Tables
//! 3-7; here they meet the native engine's fastest algorithm. Only measured
//! rows enter (the mocked devices model the native engine alone), and the
//! fastest is decided with the rows' 95% intervals: compilers whose interval
//! overlaps the fastest one's are tied with it.

use crate::claims::cells::{Order, Time, order_times};
use crate::figure::{Body, FigureData, Panel, Scale, Series};
use crate::inputs::{Inputs, footer};
use crate::table::Table;
use dlas_core::results::round_significant;
use dlas_core::{Algorithm, Compression, Dataset, Format, Layout, ResultRow, Status};

/// The native engine's compiler id; every other compiler of the study
/// chooses its own kernels.
const NATIVE: &str = "native";

/// One column of the comparison: the native engine (untuned or tuned, its
/// fastest algorithm) or one runtime.
#[derive(Debug, Clone, PartialEq)]
enum Column {
    Native { tuned: bool },
    Runtime(String),
}

impl Column {
    fn name(&self) -> String {
        match self {
            Column::Native { tuned: false } => "native untuned".into(),
            Column::Native { tuned: true } => "native tuned".into(),
            Column::Runtime(id) => id.clone(),
        }
    }
}

/// The columns the study has: the native engine at each tuning it lists,
/// then every other compiler in the study's order.
fn columns(inputs: &Inputs) -> Vec<Column> {
    let mut out = Vec::new();
    for c in &inputs.study.compilers {
        if c.id.get_ref() == NATIVE {
            out.extend(c.tuned.iter().map(|&tuned| Column::Native { tuned }));
        } else {
            out.push(Column::Runtime(c.id.get_ref().clone()));
        }
    }
    out
}

/// What one cell shows: a timed row, a row that failed, or nothing.
enum Cell<'a> {
    Timed { row: &'a ResultRow, time: Time },
    Failed,
    Missing,
}

/// One (device, dataset, network, compression) of the comparison.
struct Group {
    device: String,
    dataset: Dataset,
    model: String,
    compression: Compression,
}

impl Group {
    fn matches(&self, r: &ResultRow) -> bool {
        r.batch == 1
            && r.device == self.device
            && r.dataset == self.dataset
            && r.model == self.model
            && r.compression == self.compression
    }

    /// The cell of `column`: for the native engine the fastest of its
    /// algorithms in the format the compression runs (dense unless pruned).
    /// `drift`: the factor within which measured times tie ([`Time`]).
    fn cell<'a>(&self, rows: &'a [&'a ResultRow], column: &Column, drift: f64) -> Cell<'a> {
        let candidates: Vec<&ResultRow> = rows
            .iter()
            .copied()
            .filter(|r| self.matches(r))
            .filter(|r| match column {
                // In NCHW, the layout the paper compared systems in (the
                // blocked layout, an addition, is in the time tables).
                Column::Native { tuned } => {
                    r.compiler == NATIVE
                        && r.tuned == *tuned
                        && r.algorithm != Algorithm::Auto
                        && r.layout == Layout::Nchw
                }
                Column::Runtime(id) => &r.compiler == id,
            })
            .collect();
        let fastest = candidates
            .iter()
            .filter(|r| r.status.has_timing())
            .filter_map(|r| Some((*r, r.median_ms?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match fastest {
            Some((row, ms)) => Cell::Timed {
                row,
                time: Time::of(row, ms, drift),
            },
            None if candidates.iter().any(|r| r.status == Status::Failed) => Cell::Failed,
            None => Cell::Missing,
        }
    }
}

/// Rows of measured devices, and the groups in which at least one compiler
/// other than the native engine was timed or tried.
fn groups<'a>(inputs: &'a Inputs) -> (Vec<&'a ResultRow>, Vec<Group>) {
    let rows: Vec<&ResultRow> = inputs
        .results
        .iter()
        .filter(|r| !crate::provenance::is_modelled(inputs, &r.device))
        .collect();
    let mut out = Vec::new();
    for device in &inputs.study.devices {
        for (dataset, model) in inputs.study.models() {
            for c in &inputs.study.compressions {
                let group = Group {
                    device: device.get_ref().clone(),
                    dataset,
                    model: model.clone(),
                    compression: c.id,
                };
                let tried = |r: &&ResultRow| {
                    group.matches(r) && r.compiler != NATIVE && r.status != Status::Skipped
                };
                if rows.iter().any(tried) {
                    out.push(group);
                }
            }
        }
    }
    (rows, out)
}

/// "8.65 [8.51, 8.80]" (and the algorithm for the native engine).
fn show(cell: &Cell, column: &Column) -> String {
    let r = |v: f64| round_significant(v, 3);
    match cell {
        Cell::Timed { row, time } => {
            let interval = time
                .interval
                .map_or_else(String::new, |(lo, hi)| format!(" [{}, {}]", r(lo), r(hi)));
            let algorithm = match column {
                Column::Native { .. } if row.format == Format::Dense => {
                    format!(" {}", row.algorithm)
                }
                Column::Native { .. } => format!(" {} {}", row.algorithm, row.format),
                Column::Runtime(_) => String::new(),
            };
            format!("{}{interval}{algorithm}", r(time.ms))
        }
        Cell::Failed => "failed".into(),
        Cell::Missing => "-".into(),
    }
}

/// The fastest column, and those tied with it (their intervals overlap, or
/// they lie within the drift between sittings).
fn fastest(cells: &[(Column, Cell)]) -> String {
    let timed: Vec<(&Column, Time)> = cells
        .iter()
        .filter_map(|(c, cell)| match cell {
            Cell::Timed { time, .. } => Some((c, *time)),
            _ => None,
        })
        .collect();
    let Some(&(best, best_time)) = timed.iter().min_by(|a, b| a.1.ms.total_cmp(&b.1.ms)) else {
        return "-".into();
    };
    let tied: Vec<String> = timed
        .iter()
        .filter(|(c, t)| *c != best && order_times(best_time, *t) == Order::Tie)
        .map(|(c, _)| c.name())
        .collect();
    if tied.is_empty() {
        best.name()
    } else {
        format!("{} (tied: {})", best.name(), tied.join(", "))
    }
}

/// Table 10: per measured device, network and compression, every compiler's
/// median with its 95% interval, and the fastest.
pub fn table(inputs: &Inputs, number: usize) -> Table {
    let (rows, groups) = groups(inputs);
    let compilers = columns(inputs);
    let mut header: Vec<String> = ["device", "network", "compression"]
        .map(String::from)
        .to_vec();
    header.extend(
        compilers
            .iter()
            .map(|c| format!("{} (measured ms [95% CI])", c.name())),
    );
    header.push("fastest (ties: overlapping intervals or within the drift)".into());
    let drift = crate::claims::cells::tie_factor(inputs.drift);
    let mut body = Vec::new();
    let mut devices: Vec<String> = Vec::new();
    for g in &groups {
        let cells: Vec<(Column, Cell)> = compilers
            .iter()
            .map(|c| (c.clone(), g.cell(&rows, c, drift)))
            .collect();
        let mut line = vec![
            g.device.clone(),
            format!("{}/{}", g.dataset, g.model),
            g.compression.to_string(),
        ];
        line.extend(cells.iter().map(|(c, cell)| show(cell, c)));
        line.push(fastest(&cells));
        body.push(line);
        if !devices.contains(&g.device) {
            devices.push(g.device.clone());
        }
    }
    Table {
        number,
        title: "Systems software on the measured devices: the native engine's fastest algorithm against tract, ONNX Runtime, OpenVINO and TVM (median ms [95% CI], batch 1, measured)".into(),
        columns: header,
        rows: body,
        footer: format!(
            "{} Native columns: the fastest of the study's algorithms, named after the time (dense weights, or the sparse format a pruned network runs). The runtimes choose their own kernels and run dense weights. Fastest: the lowest median, and listed as tied with it the compilers under this rule: {}. '-': not run; 'failed': the runtime refused the model (the results file's reason column says why). Rows appear where a runtime was run.",
            footer(inputs, &devices),
            crate::claims::cells::tie_rule(inputs.drift)
        ),
    }
}

/// Figure 10: the same medians as bars, one panel per measured device and
/// dataset, one bar per compiler.
pub fn figure(inputs: &Inputs, number: usize) -> FigureData {
    let (rows, groups) = groups(inputs);
    let compilers = columns(inputs);
    let mut panels: Vec<Panel> = Vec::new();
    let mut devices: Vec<String> = Vec::new();
    for g in &groups {
        let title = format!(
            "{}, {}",
            crate::provenance::panel_title(inputs, &g.device),
            g.dataset
        );
        if panels.last().is_none_or(|p| p.title != title) {
            panels.push(Panel {
                title,
                groups: Vec::new(),
                series: compilers
                    .iter()
                    .map(|c| Series {
                        name: c.name(),
                        values: Vec::new(),
                    })
                    .collect(),
                modelled: false,
                scale: Scale::Log,
            });
        }
        let panel = panels.last_mut().expect("pushed above");
        panel.groups.push(format!("{} {}", g.model, g.compression));
        for (series, c) in panel.series.iter_mut().zip(&compilers) {
            series.values.push(match g.cell(&rows, c, 1.0) {
                Cell::Timed { time, .. } => Some(time.ms),
                _ => None,
            });
        }
        if !devices.contains(&g.device) {
            devices.push(g.device.clone());
        }
    }
    FigureData {
        number,
        title: "The native engine against tract, ONNX Runtime, OpenVINO and TVM on the measured devices (batch 1)"
            .into(),
        y_label: "median inference time (ms)".into(),
        log_y: true,
        body: Body::Bars(panels),
        footer: format!(
            "{} Native bars: the fastest of the study's algorithms. Table 10 gives each median with its 95% interval and the ties. A missing bar: not run, or the runtime refused the model.",
            footer(inputs, &devices)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::fixtures::row;

    fn measured(mut r: ResultRow, compiler: &str, interval: (f64, f64)) -> ResultRow {
        r.compiler = compiler.into();
        r.source = "env-test".into();
        r.ci95_low_ms = Some(interval.0);
        r.ci95_high_ms = Some(interval.1);
        if compiler != NATIVE {
            r.algorithm = Algorithm::Auto;
        }
        r
    }

    fn group() -> Group {
        Group {
            device: "host".into(),
            dataset: Dataset::Cifar10,
            model: "resnet18".into(),
            compression: Compression::Dense,
        }
    }

    fn base(algorithm: Algorithm, ms: f64) -> ResultRow {
        row(
            "host",
            Dataset::Cifar10,
            "resnet18",
            Compression::Dense,
            algorithm,
            false,
            ms,
        )
    }

    #[test]
    fn the_native_cell_is_its_fastest_algorithm_and_a_refusal_says_failed() {
        let mut refused = measured(base(Algorithm::Auto, 1.0), "tract-plain", (1.0, 1.0));
        refused.median_ms = None;
        refused.status = Status::Failed;
        // The blocked layout, an addition, is not among the cells the
        // paper compared systems in, however fast.
        let blocked = ResultRow {
            layout: Layout::Nchw16c,
            ..measured(base(Algorithm::Direct, 2.0), NATIVE, (1.9, 2.1))
        };
        let rows = [
            measured(base(Algorithm::Direct, 30.0), NATIVE, (29.0, 31.0)),
            measured(base(Algorithm::Gemm, 8.6), NATIVE, (8.5, 8.8)),
            blocked,
            refused,
        ];
        let rows: Vec<&ResultRow> = rows.iter().collect();
        let native = Column::Native { tuned: false };
        let cell = group().cell(&rows, &native, 1.0);
        assert_eq!(show(&cell, &native), "8.6 [8.5, 8.8] gemm");
        let tract = Column::Runtime("tract-plain".into());
        assert_eq!(show(&group().cell(&rows, &tract, 1.0), &tract), "failed");
        let ort = Column::Runtime("ort-opt".into());
        assert_eq!(show(&group().cell(&rows, &ort, 1.0), &ort), "-");
    }

    #[test]
    fn the_fastest_ties_with_every_compiler_whose_interval_overlaps() {
        let rows = [
            measured(base(Algorithm::Gemm, 8.6), NATIVE, (8.5, 8.8)),
            measured(base(Algorithm::Auto, 7.3), "ort-opt", (7.2, 7.4)),
            measured(base(Algorithm::Auto, 7.5), "tract-opt", (7.35, 7.7)),
        ];
        let rows: Vec<&ResultRow> = rows.iter().collect();
        let cells = |columns: &[Column]| -> Vec<(Column, Cell)> {
            columns
                .iter()
                .map(|c| (c.clone(), group().cell(&rows, c, 1.0)))
                .collect()
        };
        let all = [
            Column::Native { tuned: false },
            Column::Runtime("tract-opt".into()),
            Column::Runtime("ort-opt".into()),
        ];
        assert_eq!(fastest(&cells(&all)), "ort-opt (tied: tract-opt)");
        // Without tract-opt, the native engine's interval lies wholly above.
        assert_eq!(
            fastest(&cells(&[all[0].clone(), all[2].clone()])),
            "ort-opt"
        );
        assert_eq!(fastest(&[]), "-");
    }
}
