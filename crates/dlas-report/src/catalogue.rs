//! The numbered catalogue of tables and figures, and where each file goes.
//!
//! Numbering is fixed: reviewers and `--figure N` depend on it.

use crate::analysis;
use crate::figure::{Body, FigureData, Panel, Series};
use crate::table::Table;
use anyhow::{Result, bail};
use dlas_core::{Algorithm, Compression, Dataset, ResultRow, Study};
use dlas_devices::DeviceKind;
use dlas_devices::DeviceSpec;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Everything a report is computed from.
pub struct Inputs<'a> {
    pub study: &'a Study,
    pub results: &'a [ResultRow],
    pub specs: &'a [DeviceSpec],
    /// Files the results were read from, named in footers.
    pub result_files: Vec<String>,
    /// The measured machines behind real results.
    pub hosts: Vec<HostSummary>,
}

/// What Table 1 shows of a measured machine (from its environment record).
#[derive(Debug, Clone, PartialEq)]
pub struct HostSummary {
    pub environment: String,
    pub cpu_model: String,
    pub logical_cpus: usize,
    pub cpu_flags: Vec<String>,
    pub os: String,
}

/// What to regenerate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    All,
    Figure(usize),
    Table(usize),
}

/// A generated file, relative to the project root.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// Tables implemented so far, by number.
pub const TABLES: &[usize] = &[1, 2, 3, 4, 5, 6, 7];
/// Figures implemented so far, by number.
pub const FIGURES: &[usize] = &[4, 5, 6, 7, 8];

/// Builds the selected artifacts.
pub fn build(inputs: &Inputs, selection: Selection) -> Result<Vec<Artifact>> {
    let (tables, figures): (Vec<usize>, Vec<usize>) = match selection {
        Selection::All => (TABLES.to_vec(), FIGURES.to_vec()),
        Selection::Table(n) if TABLES.contains(&n) => (vec![n], vec![]),
        Selection::Figure(n) if FIGURES.contains(&n) => (vec![], vec![n]),
        Selection::Table(n) => bail!("no table {n} in this artifact yet; tables: {TABLES:?}"),
        Selection::Figure(n) => bail!("no figure {n} in this artifact yet; figures: {FIGURES:?}"),
    };
    let mut out = Vec::new();
    for n in tables {
        let t = table(n, inputs)?;
        let stem = format!("paper-tables/table{n}");
        out.push(Artifact {
            path: format!("{stem}.md").into(),
            bytes: t.markdown().into_bytes(),
        });
        out.push(Artifact {
            path: format!("{stem}.csv").into(),
            bytes: t.csv(),
        });
        out.push(Artifact {
            path: format!("{stem}.tex").into(),
            bytes: t.latex().into_bytes(),
        });
    }
    for n in figures {
        let f = figure(n, inputs)?;
        let svg = f
            .svg()
            .map_err(|e| anyhow::anyhow!("cannot draw figure {n}: {e}"))?;
        let png = f
            .png()
            .map_err(|e| anyhow::anyhow!("cannot draw figure {n}: {e}"))?;
        out.push(Artifact {
            path: format!("figures/figure{n}.svg").into(),
            bytes: svg.into_bytes(),
        });
        out.push(Artifact {
            path: format!("figures/figure{n}.png").into(),
            bytes: png,
        });
    }
    Ok(out)
}

/// Table `n` as data.
pub fn table(n: usize, inputs: &Inputs) -> Result<Table> {
    match n {
        1 => Ok(hardware(inputs)),
        2 => networks(inputs, Dataset::Cifar10, 2),
        3 => Ok(analysis::time_table(
            inputs,
            3,
            Dataset::Cifar10,
            DeviceKind::Cpu,
        )),
        4 => Ok(analysis::time_table(
            inputs,
            4,
            Dataset::Cifar10,
            DeviceKind::Gpu,
        )),
        5 => networks(inputs, Dataset::Imagenet, 5),
        6 => Ok(analysis::time_table(
            inputs,
            6,
            Dataset::Imagenet,
            DeviceKind::Cpu,
        )),
        7 => Ok(analysis::time_table(
            inputs,
            7,
            Dataset::Imagenet,
            DeviceKind::Gpu,
        )),
        _ => bail!("no table {n} in this artifact yet; tables: {TABLES:?}"),
    }
}

/// Figure `n` as data.
pub fn figure(n: usize, inputs: &Inputs) -> Result<FigureData> {
    match n {
        4 => Ok(inference_time(inputs)),
        5 => Ok(analysis::compression_speedup(inputs, native_footer(inputs))),
        6 => Ok(analysis::best_algorithm(inputs, native_footer(inputs))),
        7 => Ok(analysis::expected_vs_achieved(
            inputs,
            &|d, m, c| remaining_macs_ratio(inputs, d, m, c),
            native_footer(inputs),
        )),
        8 => Ok(analysis::tuning_speedup(inputs, native_footer(inputs))),
        _ => bail!("no figure {n} in this artifact yet; figures: {FIGURES:?}"),
    }
}

fn hardware(inputs: &Inputs) -> Table {
    let study_devices: Vec<&str> = inputs
        .study
        .devices
        .iter()
        .map(|d| d.get_ref().as_str())
        .collect();
    let rows = inputs
        .specs
        .iter()
        .filter(|s| study_devices.contains(&s.id.as_str()))
        .map(|s| {
            vec![
                s.id.clone(),
                s.name.clone(),
                format!("{:?}", s.kind).to_uppercase(),
                s.cores.to_string(),
                format!("{:.3}", s.clock_ghz),
                format!("{:.1}", s.peak_gflops()),
                format!("{:.1}", s.memory_gbs),
                s.llc_kib.to_string(),
                format!("{}", s.fp16_rate),
                format!("{}", s.int8_rate),
            ]
        })
        .collect();
    let mut rows: Vec<Vec<String>> = rows;
    for host in &inputs.hosts {
        rows.push(vec![
            format!("host ({})", host.environment),
            format!(
                "{}; {}; flags: {}",
                host.cpu_model,
                host.os,
                host.cpu_flags.join(" ")
            ),
            "CPU (measured)".into(),
            host.logical_cpus.to_string(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
    }
    let unmodelled: Vec<&str> = study_devices
        .iter()
        .copied()
        .filter(|d| !inputs.specs.iter().any(|s| s.id == *d))
        .filter(|_| inputs.hosts.is_empty())
        .collect();
    Table {
        number: 1,
        title: "Hardware platforms".into(),
        columns: [
            "device",
            "name",
            "kind",
            "cores",
            "clock (GHz)",
            "fp32 peak (GFLOP/s)",
            "memory (GB/s)",
            "last-level cache (KiB)",
            "fp16 rate",
            "int8 rate",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        footer: format!(
            "Source: public specifications in data/devices/*.toml (each file cites them). \
             Measured devices without a specification (listed once a recorded run exists): {}.",
            if unmodelled.is_empty() {
                "none".to_string()
            } else {
                unmodelled.join(", ")
            }
        ),
    }
}

fn networks(inputs: &Inputs, dataset: Dataset, number: usize) -> Result<Table> {
    let mut rows = Vec::new();
    for (d, model) in inputs.study.models() {
        if d != dataset {
            continue;
        }
        let net = dlas_zoo::find(d, &model)?;
        let graph = (net.build)();
        rows.push(vec![
            model,
            graph.params().to_string(),
            net.published_params.to_string(),
            format!("{:.2}", graph.macs() as f64 / 1e6),
            graph.weighted_layers().count().to_string(),
            net.reference.to_string(),
        ]);
    }
    Ok(Table {
        number,
        title: format!("{dataset} networks"),
        columns: [
            "model",
            "params",
            "published params",
            "MACs (M)",
            "conv+linear layers",
            "definition",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        footer: "Source: the zoo's graph IR (crates/dlas-zoo); MACs count convolution and linear \
                 multiply-accumulates at batch 1. Accuracy columns arrive with the compression stage."
            .into(),
    })
}

fn inference_time(inputs: &Inputs) -> FigureData {
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
        let series = inputs
            .study
            .algorithms
            .iter()
            .map(|&algorithm| Series {
                name: algorithm.to_string(),
                values: keys
                    .iter()
                    .map(|(dataset, model, compression)| {
                        rows.iter()
                            .find(|r| {
                                &r.device == device
                                    && r.dataset == *dataset
                                    && &r.model == model
                                    && r.compression == *compression
                                    && r.algorithm == algorithm
                            })
                            .and_then(|r| r.median_ms)
                    })
                    .collect(),
            })
            .collect();
        panels.push(Panel {
            title: device.clone(),
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

/// The footer of the figures drawn from the native engine's rows.
fn native_footer(inputs: &Inputs) -> String {
    let index = analysis::Index::new(inputs.results);
    let devices: Vec<String> = analysis::devices(inputs, &index)
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    footer(inputs, &devices)
}

/// Dense MACs over the MACs left by pruning (the speedup a reader would
/// expect), from the per-layer densities of the pruned pinned weights.
fn remaining_macs_ratio(
    inputs: &Inputs,
    dataset: Dataset,
    model: &str,
    c: Compression,
) -> Option<f64> {
    let entry = inputs.study.compressions.iter().find(|e| e.id == c)?;
    let level = inputs.study.level(entry, model);
    let graph = (dlas_zoo::find(dataset, model).ok()?.build)();
    let densities = dlas_devices::run::pruned_densities(&graph, c, level).ok()?;
    let (mut dense, mut left) = (0.0, 0.0);
    for node in graph.weighted_layers() {
        let macs = node.macs() as f64;
        dense += macs;
        left += macs * densities.get(&node.name).copied().unwrap_or(1.0);
    }
    (left > 0.0).then(|| dense / left)
}

/// "Source: …" line naming the devices and result files behind a figure.
fn footer(inputs: &Inputs, devices: &[String]) -> String {
    let sources: BTreeSet<&str> = inputs
        .results
        .iter()
        .filter(|r| devices.contains(&r.device))
        .map(|r| r.source.as_str())
        .collect();
    format!(
        "Source: {} ({}); devices: {}.",
        inputs.result_files.join(", "),
        sources.into_iter().collect::<Vec<_>>().join(", "),
        devices.join(", ")
    )
}
