//! The compiler study's measured figures (1, 5, 6, 7) and tables (1, 2):
//! throughput of compiled against uncompiled graphs, from results rows.

use super::{Curves, Net, PAIRS, block_of, devices_with_rows, reversals, whole_networks};
use crate::claims::TOLERANCE;
use crate::claims::cells::num;
use crate::figure::{Body, FigureData, LinePanel, LineSeries, Panel, Scale, Series};
use crate::inputs::{Inputs, footer, study_path};
use crate::metrics::{self, Metrics};
use crate::table::Table;
use dlas_devices::GraphCompiler;
use std::collections::BTreeSet;

/// The batch size of the ranking figure and of the block-level gains.
const BATCH: usize = 1;

/// Table 1: the devices, their resources, and the compilers compared on each.
pub fn devices_and_compilers(inputs: &Inputs) -> Table {
    let plan = inputs.plan;
    let mut rows = Vec::new();
    for device in &inputs.study.devices {
        let id = device.get_ref();
        let configs: BTreeSet<String> = plan
            .combinations
            .iter()
            .filter(|c| &c.device == id)
            .map(|c| super::config_of(&c.compiler, c.tuned))
            .collect();
        let spec = inputs.specs.iter().find(|s| &s.id == id);
        let pairs: Vec<String> = PAIRS
            .iter()
            .filter(|(b, c)| configs.contains(*b) && configs.contains(*c))
            .map(|(b, c)| match (GraphCompiler::from_id(c), spec) {
                (Some(compiler), Some(spec)) => {
                    format!("{b} -> {c} ({})", compiler.describe(spec.kind))
                }
                _ => format!("{b} -> {c}"),
            })
            .collect();
        let batches: Vec<String> = inputs
            .study
            .protocol
            .batch
            .iter()
            .filter(|&&b| inputs.study.protocol.batch_fits(id, b))
            .map(|b| b.to_string())
            .collect();
        let mut row = vec![id.clone()];
        match spec {
            Some(s) => row.extend([
                s.name.clone(),
                format!("{:?}", s.kind).to_uppercase(),
                s.cores.to_string(),
                format!("{:.3}", s.clock_ghz),
                format!("{:.1}", s.peak_gflops()),
                format!("{:.1}", s.memory_gbs),
                s.llc_kib.to_string(),
                format!("{}", s.launch_us),
                format!("{}", s.dispatch_us),
            ]),
            None => {
                row.extend(["this machine (measured)".to_string(), "CPU".into()]);
                row.extend(std::iter::repeat_n("-".to_string(), 7));
            }
        }
        row.push(batches.join(" "));
        row.push(pairs.join("; "));
        rows.push(row);
    }
    Table {
        number: 1,
        title: "Devices and the compilers compared on each".into(),
        columns: [
            "device",
            "name",
            "kind",
            "cores",
            "clock (GHz)",
            "fp32 peak (GFLOP/s)",
            "memory (GB/s)",
            "last-level cache (KiB)",
            "launch (us)",
            "eager dispatch (us)",
            "batch sizes",
            "baseline -> compiled",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        footer: format!(
            "Source: public specifications in data/devices/*.toml (each file cites them) and the study file {}. \
             eager and vendor are the graph-compiler model of the mocked devices (crates/dlas-devices/src/compiler.rs, docs/devices.md); \
             the host's runtimes are measured. No results enter this table.",
            study_path(inputs)
        ),
    }
}

/// The model of a metrics row's network ("imagenet/resnet50 dense ..." -> "resnet50").
fn model_of(m: &Metrics) -> &str {
    let network = m.network.split(' ').next().unwrap_or(&m.network);
    network.split_once('/').map_or(network, |(_, model)| model)
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), num)
}

/// Table 2: RTR, ASE, BSR and the saturation batch of every compiled
/// configuration with its baseline measured.
pub fn metrics_table(inputs: &Inputs) -> Table {
    let all = metrics::metrics(inputs.results);
    let devices = devices_with_rows(inputs);
    let mut rows = Vec::new();
    for device in &devices {
        for m in all.iter().filter(|m| &m.device == device) {
            rows.push(vec![
                model_of(m).to_string(),
                m.device.clone(),
                m.compiler.clone(),
                m.baseline.clone(),
                m.batches
                    .iter()
                    .map(|b| b.to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
                opt(m.rtr_1),
                opt(m.rtr_max),
                opt(m.ase),
                opt(m.ase_baseline),
                opt(m.bsr),
                m.saturation_batch.map_or("-".into(), |b| b.to_string()),
            ]);
        }
    }
    Table {
        number: 2,
        title: "Throughput metrics of each compiled configuration against its baseline".into(),
        columns: [
            "network",
            "device",
            "compiled",
            "baseline",
            "batch sizes",
            "RTR at batch 1",
            "RTR at the largest batch",
            "ASE",
            "ASE of the baseline",
            "BSR",
            "saturation batch",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        footer: format!(
            "{} Definitions (the project's; the paper gives none): docs/metrics.md. \
             Throughput T = batch / median latency; RTR = T(compiled) / T(baseline) at a batch size; \
             ASE = mean over b > 1 of ln(T(b) / T(1)) / ln(b); BSR = RTR at the largest common batch / RTR at batch 1; \
             saturation batch: the smallest batch within 95% of the largest throughput. '-': a point the metric needs was not measured.",
            footer(inputs, &devices)
        ),
    }
}

/// Figure 1: the networks' throughput uncompiled and compiled on each
/// device; the footer names every pair whose ranking flips.
pub fn ranking_reversal(inputs: &Inputs) -> FigureData {
    let curves = Curves::new(inputs.results);
    let models = whole_networks(inputs.study);
    let devices = devices_with_rows(inputs);
    let mut panels = Vec::new();
    let mut flips = Vec::new();
    for device in &devices {
        let pairs = curves.pairs_on(device);
        if pairs.is_empty() {
            continue;
        }
        let groups: Vec<&str> = pairs.iter().flat_map(|(b, c)| [*b, *c]).collect();
        panels.push(Panel {
            title: crate::provenance::panel_title(inputs, device),
            modelled: crate::provenance::is_modelled(inputs, device),
            scale: Scale::Log,
            groups: groups.iter().map(|g| g.to_string()).collect(),
            series: models
                .iter()
                .map(|model| Series {
                    name: model.1.clone(),
                    values: groups
                        .iter()
                        .map(|config| curves.at(device, model, config, BATCH))
                        .collect(),
                })
                .collect(),
        });
        flips.extend(reversals(&curves, device, &models, BATCH));
    }
    let flipped = if flips.is_empty() {
        "no ranking of two networks flips".to_string()
    } else {
        flips
            .iter()
            .map(|r| {
                format!(
                    "{}: {} over {} becomes {} over {} ({} -> {})",
                    r.device, r.first.1, r.second.1, r.second.1, r.first.1, r.baseline, r.compiled
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    FigureData {
        number: 1,
        title: format!("Throughput before and after compilation (batch {BATCH})"),
        y_label: "throughput (samples/s)".into(),
        log_y: true,
        body: Body::Bars(panels),
        footer: format!(
            "Where the ranking flips: {flipped}. {}",
            footer(inputs, &devices)
        ),
    }
}

/// Figure 5: throughput against batch size, one row of panels per device
/// (baseline left, compiled right, each network in the same colour in
/// both); each series' saturation batch is ringed.
pub fn throughput_vs_batch(inputs: &Inputs) -> FigureData {
    let curves = Curves::new(inputs.results);
    let models = whole_networks(inputs.study);
    let devices = devices_with_rows(inputs);
    let log2 = |b: usize| (b as f64).log2();
    let largest = inputs
        .study
        .protocol
        .batch
        .iter()
        .copied()
        .max()
        .unwrap_or(1);
    let mut panels = Vec::new();
    for device in &devices {
        let Some(&(baseline, compiled)) = curves.pairs_on(device).first() else {
            continue;
        };
        for config in [baseline, compiled] {
            let series = models
                .iter()
                .filter_map(|model| {
                    let curve = curves.get(device, model, config)?;
                    Some(LineSeries {
                        name: model.1.clone(),
                        points: curve.points.iter().map(|(&b, &t)| [log2(b), t]).collect(),
                        marked: curve
                            .saturation_batch()
                            .and_then(|b| Some([log2(b), curve.at(b)?])),
                    })
                })
                .collect();
            panels.push(LinePanel {
                title: format!(
                    "{}: {config}",
                    crate::provenance::panel_title(inputs, device)
                ),
                x_label: "log2 of the batch size".into(),
                x_range: Some([0.0, log2(largest).max(1.0)]),
                y_label: "throughput (samples/s)".into(),
                log_y: true,
                tie: None,
                series,
                note: String::new(),
            });
        }
    }
    FigureData {
        number: 5,
        title: "Throughput against batch size, baseline (left) and compiled (right)".into(),
        y_label: "throughput (samples/s)".into(),
        log_y: true,
        body: Body::Lines { columns: 2, panels },
        footer: format!(
            "Ringed: the saturation batch (the smallest batch within 95% of the series' largest throughput). {}",
            footer(inputs, &devices)
        ),
    }
}

/// Figure 6: the compiled configuration's gain (RTR at batch 1) on
/// block-repeat models against their depth, per block type, device and
/// pair of configurations with block-repeat models measured both ways.
pub fn block_gain_vs_depth(inputs: &Inputs) -> FigureData {
    let curves = Curves::new(inputs.results);
    let blocks: Vec<(Net, String, usize)> = inputs
        .study
        .models()
        .into_iter()
        .filter_map(|(dataset, m)| {
            let (kind, depth) = block_of(&m)?;
            Some(((dataset, m.clone()), kind.to_string(), depth))
        })
        .collect();
    let kinds: Vec<&str> = blocks.iter().fold(Vec::new(), |mut v, (_, k, _)| {
        if !v.contains(&k.as_str()) {
            v.push(k.as_str());
        }
        v
    });
    let largest = blocks.iter().map(|(_, _, d)| *d).max().unwrap_or(2);
    let devices = devices_with_rows(inputs);
    let mut panels = Vec::new();
    for device in &devices {
        let pairs = curves.pairs_on(device);
        let gains = |baseline: &str, compiled: &str| -> Vec<LineSeries> {
            kinds
                .iter()
                .map(|kind| LineSeries {
                    name: kind.to_string(),
                    points: blocks
                        .iter()
                        .filter(|(_, k, _)| k.as_str() == *kind)
                        .filter_map(|(model, _, depth)| {
                            let gain = curves.at(device, model, compiled, BATCH)?
                                / curves.at(device, model, baseline, BATCH)?;
                            Some([(*depth as f64).log2(), gain])
                        })
                        .collect(),
                    marked: None,
                })
                .filter(|s| !s.points.is_empty())
                .collect()
        };
        // Every pair with block-repeat models measured both ways gets a
        // panel (the host's runtimes, not its native engine, ran them); a
        // device with none shows its first pair and says so.
        let mut measured: Vec<((&str, &str), Vec<LineSeries>)> = pairs
            .iter()
            .map(|&(b, c)| ((b, c), gains(b, c)))
            .filter(|(_, series)| !series.is_empty())
            .collect();
        if measured.is_empty() {
            let Some(&first) = pairs.first() else {
                continue;
            };
            measured.push((first, Vec::new()));
        }
        for ((baseline, compiled), series) in measured {
            let note = if series.is_empty() {
                "No block-repeat model (blocks-<kind>-<depth>) is measured here.".into()
            } else {
                String::new()
            };
            panels.push(LinePanel {
                title: format!(
                    "{}: {compiled} over {baseline}",
                    crate::provenance::panel_title(inputs, device)
                ),
                x_label: "log2 of the depth (blocks)".into(),
                x_range: Some([0.0, (largest as f64).log2().max(1.0)]),
                y_label: format!("RTR at batch {BATCH}"),
                log_y: false,
                tie: Some(TOLERANCE),
                series,
                note,
            });
        }
    }
    FigureData {
        number: 6,
        title: format!("Block level: the compiler's gain against depth (batch {BATCH})"),
        y_label: format!("RTR at batch {BATCH}"),
        log_y: false,
        body: Body::Lines { columns: 2, panels },
        footer: format!(
            "Block-repeat models: a stem, N repeats of one block type, a head (the zoo's blocks-<kind>-<depth>); one panel per device and compiled configuration with block-repeat models measured both ways (Finding C3 reads the same pairs). Each axis spans at least a factor {TOLERANCE} either side of its middle: gains within that factor of each other are ties (the findings' tolerance). {}",
            footer(inputs, &devices)
        ),
    }
}

/// Figure 7: RTR, BSR and ASE per network, compiled configuration and device.
pub fn metrics_bars(inputs: &Inputs) -> FigureData {
    let all: Vec<Metrics> = metrics::metrics(inputs.results)
        .into_iter()
        .filter(|m| block_of(model_of(m)).is_none())
        .collect();
    let devices = devices_with_rows(inputs);
    let mut groups: Vec<(String, String)> = Vec::new();
    for device in &devices {
        for m in all.iter().filter(|m| &m.device == device) {
            let key = (device.clone(), model_of(m).to_string());
            if !groups.contains(&key) {
                groups.push(key);
            }
        }
    }
    let compiled: Vec<&str> = PAIRS
        .iter()
        .map(|(_, c)| *c)
        .filter(|c| all.iter().any(|m| m.compiler == *c))
        .collect();
    // Metrics of mocked and measured devices side by side in one panel, so
    // the bars cannot be hollow per device: a modelled device's groups say
    // so in their label.
    let panel = |title: &str, scale: Scale, value: &dyn Fn(&Metrics) -> Option<f64>| Panel {
        title: title.into(),
        modelled: false,
        scale,
        groups: groups
            .iter()
            .map(|(d, m)| {
                if crate::provenance::is_modelled(inputs, d) {
                    format!("{d} {m} (modelled)")
                } else {
                    format!("{d} {m}")
                }
            })
            .collect(),
        series: compiled
            .iter()
            .map(|c| Series {
                name: c.to_string(),
                values: groups
                    .iter()
                    .map(|(d, model)| {
                        all.iter()
                            .find(|m| &m.device == d && model_of(m) == model && m.compiler == *c)
                            .and_then(value)
                    })
                    .collect(),
            })
            .collect(),
    };
    let panels = vec![
        panel("RTR at batch 1", Scale::Ratio, &|m| m.rtr_1),
        panel("RTR at the largest batch", Scale::Ratio, &|m| m.rtr_max),
        panel("BSR", Scale::Ratio, &|m| m.bsr),
        // ASE is negative where batching slows a configuration down.
        panel(
            "ASE of the compiled configuration (linear axis)",
            Scale::Linear,
            &|m| m.ase,
        ),
    ];
    FigureData {
        number: 7,
        title: "RTR, BSR and ASE per network, compiler and device".into(),
        y_label: "metric value".into(),
        log_y: true,
        body: Body::Bars(panels),
        footer: format!(
            "Numbers: Table 2; definitions: docs/metrics.md. RTR and BSR grow from 1x on a log axis (down for a loss); ASE is on a linear axis from zero (negative when batching slows a configuration down). Bars here are solid for every device; the groups of modelled devices say (modelled). {}",
            footer(inputs, &devices)
        ),
    }
}
