//! The study's comparisons over results: inference-time tables per platform
//! kind, speedups over the dense baseline, the best algorithm, expected
//! against achieved speedups, and what tuning brings. Only the native
//! engine's rows (the algorithm axis) at batch 1 enter.

use crate::figure::{
    Body, FigureData, Heatmap, Panel, Point, Scale, ScatterPanel, ScatterSeries, Series,
};
use crate::inputs::{Inputs, footer};
use crate::table::Table;
use dlas_core::{Algorithm, Compression, Dataset, Layout, ResultRow};
use dlas_devices::DeviceKind;
use std::collections::BTreeMap;

/// A cell of [`Index`]: device, dataset, model, compression, algorithm,
/// layout, tuned.
type Cell<'a> = (
    &'a str,
    Dataset,
    &'a str,
    Compression,
    Algorithm,
    Layout,
    bool,
);

/// Medians of native rows, keyed by [`Cell`].
pub struct Index<'a> {
    times: BTreeMap<Cell<'a>, f64>,
}

impl<'a> Index<'a> {
    pub fn new(rows: &'a [ResultRow]) -> Index<'a> {
        let times = rows
            .iter()
            .filter(|r| r.batch == 1 && r.status.has_timing() && r.algorithm != Algorithm::Auto)
            .filter_map(|r| {
                Some((
                    (
                        r.device.as_str(),
                        r.dataset,
                        r.model.as_str(),
                        r.compression,
                        r.algorithm,
                        r.layout,
                        r.tuned,
                    ),
                    r.median_ms?,
                ))
            })
            .collect();
        Index { times }
    }

    /// The time in NCHW, the layout of the paper's comparisons (the
    /// blocked layout, an addition, is in the time tables and figure 4).
    pub fn time(
        &self,
        device: &str,
        d: Dataset,
        model: &str,
        c: Compression,
        a: Algorithm,
        tuned: bool,
    ) -> Option<f64> {
        self.time_in(Layout::Nchw, device, d, model, c, a, tuned)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn time_in(
        &self,
        layout: Layout,
        device: &str,
        d: Dataset,
        model: &str,
        c: Compression,
        a: Algorithm,
        tuned: bool,
    ) -> Option<f64> {
        self.times
            .get(&(device, d, model, c, a, layout, tuned))
            .copied()
    }

    /// The fastest of the algorithms the DLAS paper compared, and its time
    /// (winograd, an addition, is in the time tables and figure 4, not here).
    pub fn best(
        &self,
        device: &str,
        d: Dataset,
        model: &str,
        c: Compression,
        tuned: bool,
    ) -> Option<(Algorithm, f64)> {
        Algorithm::DLAS
            .into_iter()
            .filter_map(|a| Some((a, self.time(device, d, model, c, a, tuned)?)))
            .min_by(|x, y| x.1.total_cmp(&y.1))
    }
}

/// Devices of the study that have native results, with their kind.
pub fn devices(inputs: &Inputs, index: &Index) -> Vec<(String, DeviceKind)> {
    inputs
        .study
        .devices
        .iter()
        .map(|d| d.get_ref().clone())
        .filter(|d| index.times.keys().any(|k| k.0 == d.as_str()))
        .map(|d| {
            let kind = inputs
                .specs
                .iter()
                .find(|s| s.id == d)
                .map_or(DeviceKind::Cpu, |s| s.kind);
            (d, kind)
        })
        .collect()
}

fn models(inputs: &Inputs, dataset: Dataset) -> Vec<String> {
    inputs
        .study
        .models()
        .into_iter()
        .filter(|(d, _)| *d == dataset)
        .map(|(_, m)| m)
        .collect()
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(
        || "-".into(),
        |v| format!("{}", dlas_core::results::round_significant(v, 3)),
    )
}

/// Tables 3, 4, 6 and 7: median inference time per network, compression and algorithm.
pub fn time_table(inputs: &Inputs, number: usize, dataset: Dataset, kind: DeviceKind) -> Table {
    let index = Index::new(inputs.results);
    let devices: Vec<String> = devices(inputs, &index)
        .into_iter()
        .filter(|(_, k)| *k == kind)
        .map(|(d, _)| d)
        .collect();
    let mut columns: Vec<String> = ["model", "compression", "algorithm"]
        .map(String::from)
        .to_vec();
    // Every column says where its numbers come from: the model predicts
    // the mocked devices, the host is measured.
    for d in &devices {
        let what = if crate::provenance::is_modelled(inputs, d) {
            "predicted ms, model"
        } else {
            "measured ms"
        };
        columns.push(format!("{d} untuned ({what})"));
        columns.push(format!("{d} tuned ({what})"));
    }
    let mut rows = Vec::new();
    for model in models(inputs, dataset) {
        for c in &inputs.study.compressions {
            for (a, layout) in kernels(inputs) {
                let mut row = vec![model.clone(), c.id.to_string(), kernel_name(a, layout)];
                for d in &devices {
                    for tuned in [false, true] {
                        let time = index.time_in(layout, d, dataset, &model, c.id, a, tuned);
                        row.push(ms(time));
                    }
                }
                // A combination no device has (a study rule excludes it
                // everywhere, as winograd under compressed weights) gets no row.
                if row[3..].iter().any(|cell| cell != "-") {
                    rows.push(row);
                }
            }
        }
    }
    let kind_name = match kind {
        DeviceKind::Cpu => "CPU",
        DeviceKind::Gpu => "GPU",
    };
    Table {
        number,
        title: format!(
            "{dataset} inference time on the {kind_name} platforms (median ms, batch 1; modelled or measured as each column says)"
        ),
        columns,
        rows,
        footer: format!(
            "Source: {}; devices: {}. {} '-': not measured (excluded by a study rule, or not run).",
            inputs.file_list(),
            if devices.is_empty() {
                "none".into()
            } else {
                devices.join(", ")
            },
            crate::provenance::model_note(inputs, &devices),
        ),
    }
}

/// The study's algorithms in NCHW, then each in every other layout of the
/// study (the blocked layout, an addition): the rows of the time tables and
/// the series of figure 4.
fn kernels(inputs: &Inputs) -> Vec<(Algorithm, Layout)> {
    let mut out: Vec<(Algorithm, Layout)> = inputs
        .study
        .algorithms
        .iter()
        .map(|&a| (a, Layout::Nchw))
        .collect();
    for &layout in inputs.study.layouts.iter().filter(|&&l| l != Layout::Nchw) {
        out.extend(inputs.study.algorithms.iter().map(|&a| (a, layout)));
    }
    out
}

/// `direct`, or `direct nchw16c` outside NCHW.
fn kernel_name(a: Algorithm, layout: Layout) -> String {
    if layout == Layout::Nchw {
        a.to_string()
    } else {
        format!("{a} {layout}")
    }
}

fn groups(inputs: &Inputs, compressions: &[Compression]) -> Vec<(Dataset, String, Compression)> {
    let mut out = Vec::new();
    for (dataset, model) in inputs.study.models() {
        for &c in compressions {
            if inputs.study.compressions.iter().any(|e| e.id == c) {
                out.push((dataset, model.clone(), c));
            }
        }
    }
    out
}

const COMPRESSED: [Compression; 4] = [
    Compression::WeightPruning,
    Compression::ChannelPruning,
    Compression::Fp16,
    Compression::Int8,
];

/// Figure 5: speedup of each compression over the dense network, best
/// algorithm each, untuned and tuned, one panel per device.
pub fn compression_speedup(inputs: &Inputs, footer: String) -> FigureData {
    let index = Index::new(inputs.results);
    let keys = groups(inputs, &COMPRESSED);
    let panels = devices(inputs, &index)
        .into_iter()
        .map(|(device, _)| Panel {
            title: crate::provenance::panel_title(inputs, &device),
            modelled: crate::provenance::is_modelled(inputs, &device),
            scale: Scale::Ratio,
            groups: keys
                .iter()
                .map(|(d, m, c)| format!("{d}/{m} {c}"))
                .collect(),
            series: [false, true]
                .into_iter()
                .map(|tuned| Series {
                    name: if tuned { "tuned" } else { "untuned" }.into(),
                    values: keys
                        .iter()
                        .map(|(d, m, c)| {
                            let dense = index.best(&device, *d, m, Compression::Dense, tuned)?.1;
                            Some(dense / index.best(&device, *d, m, *c, tuned)?.1)
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    FigureData {
        number: 5,
        title: "Speedup over the dense network per compression technique (best algorithm each)"
            .into(),
        y_label: "speedup over dense (x)".into(),
        log_y: true,
        body: Body::Bars(panels),
        footer,
    }
}

/// Figure 6: the best algorithm per (network, compression) and device, untuned and tuned.
pub fn best_algorithm(inputs: &Inputs, footer: String) -> FigureData {
    let index = Index::new(inputs.results);
    let keys = groups(inputs, Compression::ALL);
    let devices = devices(inputs, &index);
    let mut columns = Vec::new();
    // A heatmap has no hollow bars: a modelled device's columns say so.
    for (d, _) in &devices {
        for tuning in ["untuned", "tuned"] {
            columns.push(crate::provenance::mark(inputs, d, format!("{d} {tuning}")));
        }
    }
    let cells = keys
        .iter()
        .map(|(ds, m, c)| {
            devices
                .iter()
                .flat_map(|(d, _)| [false, true].map(|t| (d.clone(), t)))
                .map(|(d, tuned)| {
                    index
                        .best(&d, *ds, m, *c, tuned)
                        .map(|(a, _)| a.to_string())
                })
                .collect()
        })
        .collect();
    FigureData {
        number: 6,
        title: "The fastest algorithm per network, compression and device".into(),
        y_label: String::new(),
        log_y: false,
        body: Body::Heatmap(Heatmap {
            rows: keys
                .iter()
                .map(|(d, m, c)| format!("{d}/{m} {c}"))
                .collect(),
            columns,
            cells,
            // The paper's algorithms, those `best` picks from.
            categories: inputs
                .study
                .algorithms
                .iter()
                .filter(|a| a.in_dlas_paper())
                .map(|a| a.to_string())
                .collect(),
        }),
        footer,
    }
}

/// Figure 7: the speedup pruning should bring (dense MACs over remaining
/// MACs) against the speedup measured, one point per network, technique
/// and tuning, one series per device.
pub fn expected_vs_achieved(
    inputs: &Inputs,
    remaining_macs: &dyn Fn(Dataset, &str, Compression) -> Option<f64>,
    footer: String,
) -> FigureData {
    let index = Index::new(inputs.results);
    let keys = groups(
        inputs,
        &[Compression::WeightPruning, Compression::ChannelPruning],
    );
    let series = devices(inputs, &index)
        .into_iter()
        .map(|(device, _)| ScatterSeries {
            // The legend says which devices are modelled; their points
            // are drawn hollow.
            name: crate::provenance::panel_title(inputs, &device),
            modelled: crate::provenance::is_modelled(inputs, &device),
            points: keys
                .iter()
                .flat_map(|(d, m, c)| [false, true].map(|t| (d, m, c, t)))
                .filter_map(|(d, m, c, tuned)| {
                    let expected = remaining_macs(*d, m, *c)?;
                    let dense = index.best(&device, *d, m, Compression::Dense, tuned)?.1;
                    let pruned = index.best(&device, *d, m, *c, tuned)?.1;
                    Some(Point {
                        label: format!("{d}/{m} {c}{}", if tuned { " tuned" } else { "" }),
                        x: expected,
                        y: dense / pruned,
                    })
                })
                .collect(),
        })
        .collect();
    FigureData {
        number: 7,
        title: "Expected (from remaining MACs) against achieved speedup of pruned networks".into(),
        y_label: "achieved speedup (x)".into(),
        log_y: true,
        body: Body::Scatter(vec![ScatterPanel {
            title: "all devices".into(),
            x_label: "expected speedup: dense MACs / remaining MACs (x)".into(),
            series,
            diagonal: Some("achieved = expected".into()),
            band: None,
        }]),
        footer: format!(
            "Filled markers: measured; hollow markers: modelled (the legend marks each device modelled or measured). Each device has its own colour and marker shape, and smaller series are drawn over larger ones, so points of two devices at one position both show. {footer}"
        ),
    }
}

/// Figure 8: what tuning brings (best untuned over best tuned time), per
/// network and compression, one panel per device.
pub fn tuning_speedup(inputs: &Inputs, footer: String) -> FigureData {
    let index = Index::new(inputs.results);
    let models = inputs.study.models();
    let panels = devices(inputs, &index)
        .into_iter()
        .map(|(device, _)| Panel {
            title: crate::provenance::panel_title(inputs, &device),
            modelled: crate::provenance::is_modelled(inputs, &device),
            scale: Scale::Ratio,
            groups: models.iter().map(|(d, m)| format!("{d}/{m}")).collect(),
            series: inputs
                .study
                .compressions
                .iter()
                .map(|c| Series {
                    name: c.id.to_string(),
                    values: models
                        .iter()
                        .map(|(d, m)| {
                            let untuned = index.best(&device, *d, m, c.id, false)?.1;
                            Some(untuned / index.best(&device, *d, m, c.id, true)?.1)
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    FigureData {
        number: 8,
        title: "Speedup from tuning (best untuned over best tuned) for dense, pruned and quantized networks".into(),
        y_label: "speedup from tuning (x)".into(),
        log_y: true,
        body: Body::Bars(panels),
        footer,
    }
}

/// Figure 4: each device's untuned batch-1 times per network, compression
/// and algorithm, and of the blocked layout where a device ran it.
pub fn inference_time(inputs: &Inputs) -> FigureData {
    let rows: Vec<&ResultRow> = inputs
        .results
        .iter()
        .filter(|r| {
            !r.tuned && r.batch == 1 && r.status.has_timing() && r.algorithm != Algorithm::Auto
        })
        .collect();
    let devices: Vec<String> = inputs
        .study
        .devices
        .iter()
        .map(|d| d.get_ref().clone())
        .filter(|d| rows.iter().any(|r| &r.device == d))
        .collect();
    let mut panels = Vec::new();
    for device in &devices {
        let mut groups = Vec::new();
        let mut keys = Vec::new();
        for (dataset, model) in inputs.study.models() {
            for c in &inputs.study.compressions {
                keys.push((dataset, model.clone(), c.id));
                groups.push(format!("{dataset}/{model} {}", c.id));
            }
        }
        let series = kernels(inputs)
            .into_iter()
            .filter_map(|(algorithm, layout)| {
                let values: Vec<Option<f64>> = keys
                    .iter()
                    .map(|(dataset, model, compression)| {
                        rows.iter()
                            .find(|r| {
                                &r.device == device
                                    && r.dataset == *dataset
                                    && &r.model == model
                                    && r.compression == *compression
                                    && r.algorithm == algorithm
                                    && r.layout == layout
                            })
                            .and_then(|r| r.median_ms)
                    })
                    .collect();
                // Outside NCHW, a kernel this device did not run (the
                // rules keep the blocked layout to one algorithm, on
                // CPUs) has no series.
                let shown = layout == Layout::Nchw || values.iter().any(Option::is_some);
                shown.then(|| Series {
                    name: kernel_name(algorithm, layout),
                    values,
                })
            })
            .collect();
        panels.push(Panel {
            title: crate::provenance::panel_title(inputs, device),
            modelled: crate::provenance::is_modelled(inputs, device),
            scale: Scale::Log,
            groups,
            series,
        });
    }
    FigureData {
        number: 4,
        title: "Inference time per network, compression and algorithm (untuned, batch 1)".into(),
        y_label: "median inference time (ms)".into(),
        log_y: true,
        body: Body::Bars(panels),
        footer: footer(inputs, &devices),
    }
}

/// Why Winograd is missing from the "best algorithm" figures and the
/// claims, and what leaving it out hides: the dense cells (device, network,
/// tuning) where it beats the fastest of the paper's three, counted from
/// the rows.
pub fn winograd_note(inputs: &Inputs) -> String {
    let index = Index::new(inputs.results);
    let mut cells = 0;
    let mut wins = 0;
    let mut faster = Vec::new();
    for (device, d, model, c, a, layout, tuned) in index.times.keys() {
        if *a != Algorithm::Winograd || *c != Compression::Dense || *layout != Layout::Nchw {
            continue;
        }
        let (Some(w), Some((_, best))) = (
            index.time(device, *d, model, *c, *a, *tuned),
            index.best(device, *d, model, *c, *tuned),
        ) else {
            continue;
        };
        cells += 1;
        if w < best {
            wins += 1;
            let name = format!("{device} {d}/{model}");
            if !faster.contains(&name) {
                faster.push(name);
            }
        }
    }
    let hidden = if faster.is_empty() {
        String::new()
    } else {
        format!(
            " It is faster than the fastest of the three in {wins} of those cells, on {}.",
            crate::claims::cells::first_of(&faster, 4)
        )
    };
    format!(
        "Best algorithm: the fastest of direct, GEMM and spatial pack, the three the paper compared; Winograd F(2x2, 3x3), an addition of this artifact measured in {cells} dense cells, is left out here and in the claims (paper-tables/claims.md), and shown in Figure 4 and Table 10.{hidden}"
    )
}

/// The footer of the figures drawn from the native engine's rows.
pub fn native_footer(inputs: &Inputs) -> String {
    let index = Index::new(inputs.results);
    let devices: Vec<String> = devices(inputs, &index)
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    footer(inputs, &devices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::fixtures::row;

    #[test]
    fn the_blocked_layout_has_its_own_cells_and_stays_out_of_the_best() {
        let nchw = |a, ms| {
            row(
                "i7",
                Dataset::Cifar10,
                "vgg16",
                Compression::Dense,
                a,
                false,
                ms,
            )
        };
        let blocked = ResultRow {
            layout: Layout::Nchw16c,
            ..nchw(Algorithm::Direct, 1.0)
        };
        let rows = [
            nchw(Algorithm::Direct, 9.0),
            blocked,
            nchw(Algorithm::Gemm, 3.0),
        ];
        let index = Index::new(&rows);
        let time = |layout| {
            index.time_in(
                layout,
                "i7",
                Dataset::Cifar10,
                "vgg16",
                Compression::Dense,
                Algorithm::Direct,
                false,
            )
        };
        assert_eq!(time(Layout::Nchw), Some(9.0));
        assert_eq!(time(Layout::Nchw16c), Some(1.0));
        let best = index.best("i7", Dataset::Cifar10, "vgg16", Compression::Dense, false);
        assert_eq!(best, Some((Algorithm::Gemm, 3.0)));
        assert_eq!(
            kernel_name(Algorithm::Direct, Layout::Nchw16c),
            "direct nchw16c"
        );
    }
}
