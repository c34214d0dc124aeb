//! The compiler study's measured figures (1, 5, 6, 7) and tables (1, 2):
//! throughput of compiled against uncompiled graphs, from results rows.

use super::{Curves, Net, PAIRS, Reversal, block_of, devices_with_rows, reversals, whole_networks};
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

/// The footer of an output that draws the whole networks only (Figures 1,
/// 5 and 7, Table 5) or the block-repeat models only (`blocks`, Figure 6):
/// its sources and each modelled kind's error are those of the rows
/// drawn, so no family's error is quoted under numbers it does not cover.
fn drawn_footer(inputs: &Inputs, devices: &[String], blocks: bool) -> String {
    let drawn_rows: Vec<dlas_core::ResultRow> = inputs
        .results
        .iter()
        .filter(|r| block_of(&r.model).is_some() == blocks)
        .cloned()
        .collect();
    let drawn = Inputs {
        results: &drawn_rows,
        ..inputs.clone()
    };
    footer(&drawn, devices)
}

/// How far a reversal swings: the leader's lead uncompiled times the
/// other's lead compiled (above the tolerance for every reversal).
fn swing(r: &Reversal) -> f64 {
    let [lead_before, behind_before, lead_after, behind_after] = r.throughputs;
    (lead_before / behind_before) * (behind_after / lead_after)
}

/// Every reversal at [`BATCH`] on the devices with rows, in device order,
/// the largest swing first within each device.
fn all_reversals(inputs: &Inputs, curves: &Curves) -> Vec<Reversal> {
    let models = whole_networks(inputs.study);
    let mut out = Vec::new();
    for device in devices_with_rows(inputs) {
        let mut flips = reversals(curves, &device, &models, BATCH);
        flips.sort_by(|a, b| swing(b).total_cmp(&swing(a)));
        out.extend(flips);
    }
    out
}

/// How many flips Figure 1's footer names: the largest; Table 5 lists all.
const NAMED_FLIPS: usize = 3;

/// Table 5: every pair of networks whose ranking by throughput flips
/// under compilation at batch 1, the list Figure 1's footer counts.
pub fn reversals_table(inputs: &Inputs) -> Table {
    let curves = Curves::new(inputs.results);
    let devices = devices_with_rows(inputs);
    let rows = all_reversals(inputs, &curves)
        .iter()
        .map(|r| {
            let [b1, b2, c1, c2] = r.throughputs.map(num);
            vec![
                crate::provenance::mark(inputs, &r.device, r.device.clone()),
                r.baseline.to_string(),
                r.compiled.to_string(),
                r.first.1.clone(),
                r.second.1.clone(),
                format!("{b1} vs {b2}"),
                format!("{c1} vs {c2}"),
                num(swing(r)),
            ]
        })
        .collect();
    Table {
        number: 5,
        title: format!("Pairs of networks whose ranking flips under compilation (batch {BATCH})"),
        columns: [
            "device",
            "baseline",
            "compiled",
            "faster uncompiled",
            "faster compiled",
            "throughput uncompiled (samples/s)",
            "throughput compiled (samples/s)",
            "swing",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        footer: format!(
            "The flips Figure 1 counts. Throughputs: the network faster uncompiled first. Swing: its lead uncompiled times the other's lead compiled; a pair counts only when the swing exceeds the findings' tolerance ({TOLERANCE}), so networks within noise of each other do not. Largest swing first within each device. {}",
            drawn_footer(inputs, &devices, false)
        ),
    }
}

/// Figure 1: the networks' throughput uncompiled and compiled on each
/// device; the footer counts the pairs whose ranking flips and names the
/// largest (Table 5 lists them all).
pub fn ranking_reversal(inputs: &Inputs) -> FigureData {
    let curves = Curves::new(inputs.results);
    let models = whole_networks(inputs.study);
    let devices = devices_with_rows(inputs);
    let mut panels = Vec::new();
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
    }
    let mut flips = all_reversals(inputs, &curves);
    flips.sort_by(|a, b| swing(b).total_cmp(&swing(a)));
    let flipped = if flips.is_empty() {
        "no ranking of two networks flips".to_string()
    } else {
        let largest: Vec<String> = flips
            .iter()
            .take(NAMED_FLIPS)
            .map(|r| {
                format!(
                    "{}: {} ahead of {} with {}, behind with {} (swing {})",
                    r.device,
                    r.first.1,
                    r.second.1,
                    r.baseline,
                    r.compiled,
                    num(swing(r))
                )
            })
            .collect();
        format!(
            "{} pairs of networks swap order under compilation (Table 5 lists every one); the largest: {}",
            flips.len(),
            largest.join("; ")
        )
    };
    FigureData {
        number: 1,
        title: format!("Throughput before and after compilation (batch {BATCH})"),
        y_label: "throughput (samples/s)".into(),
        log_y: true,
        body: Body::Bars(panels),
        footer: format!(
            "Ranking flips: {flipped}. {}",
            drawn_footer(inputs, &devices, false)
        ),
    }
}

/// Figure 5's value axis: one log scale, the same in every panel.
const SHARED_THROUGHPUT: &str = "throughput (samples/s, shared log scale)";

/// Figure 6's value axis: one log scale, the same in every panel.
fn shared_gain() -> String {
    format!("RTR at batch {BATCH} (x, shared log scale)")
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
                x_label: "batch size (log2 axis)".into(),
                x_range: Some([0.0, log2(largest).max(1.0)]),
                x_powers_of_two: true,
                y_label: SHARED_THROUGHPUT.into(),
                log_y: true,
                y_range: None,
                tie: None,
                series,
                note: String::new(),
            });
        }
    }
    // Baseline and compiled panels are read against each other, and
    // devices against devices: one scale for all, logarithmic since the
    // devices' throughputs span orders of magnitude.
    crate::figure::share_y(&mut panels);
    FigureData {
        number: 5,
        title: "Throughput against batch size, baseline (left) and compiled (right)".into(),
        y_label: SHARED_THROUGHPUT.into(),
        log_y: true,
        body: Body::Lines { columns: 2, panels },
        footer: format!(
            "Ringed: the saturation batch (the smallest batch within 95% of the series' largest throughput). Every panel has the same logarithmic y scale. {}",
            drawn_footer(inputs, &devices, false)
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
                x_label: "depth (blocks, log2 axis)".into(),
                x_range: Some([0.0, (largest as f64).log2().max(1.0)]),
                x_powers_of_two: true,
                y_label: shared_gain(),
                log_y: true,
                y_range: None,
                tie: None,
                series,
                note,
            });
        }
    }
    // Gains of every device and pair on one logarithmic scale: from about
    // 1x (tuning on the host) to over 10x (the modelled GPUs' tuning), so
    // a panel's spread reads the same in every panel and noise of a
    // flat series stays flat.
    crate::figure::share_y(&mut panels);
    FigureData {
        number: 6,
        title: format!("Block level: the compiler's gain against depth (batch {BATCH})"),
        y_label: shared_gain(),
        log_y: true,
        body: Body::Lines { columns: 2, panels },
        footer: format!(
            "Block-repeat models: a stem, N repeats of one block type, a head (the zoo's blocks-<kind>-<depth>); one panel per device and compiled configuration with block-repeat models measured both ways (Finding C3 reads the same pairs). Every panel has the same logarithmic y scale; gains within a factor {TOLERANCE} of each other are ties (the findings' tolerance). {}",
            drawn_footer(inputs, &devices, true)
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
            "Numbers: Table 2 (block-repeat models: Figure 6); definitions: docs/metrics.md. RTR and BSR grow from 1x on a log axis (down for a loss); ASE is on a linear axis from zero (negative when batching slows a configuration down). Modelled and measured devices share each panel, so every bar is solid: a modelled device's groups end in (modelled), the host's are measured. {}",
            drawn_footer(inputs, &devices, false)
        ),
    }
}
