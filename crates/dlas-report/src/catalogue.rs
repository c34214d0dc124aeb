//! The numbered catalogue of tables and figures, and where each file goes.
//!
//! Numbering is fixed: reviewers and `--figure N` depend on it.

use crate::analysis;
use crate::claims::{self, Checked, Context, Network};
use crate::compression::{LayerSlice, RecordedAccuracy, Sweeps};
use crate::figure::{Body, FigureData, Panel, Series};
use crate::illustrations;
use crate::table::Table;
use anyhow::{Result, bail};
use dlas_core::{Algorithm, Compression, Dataset, ResultRow, Study};
use dlas_devices::DeviceKind;
use dlas_devices::DeviceSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;

/// Everything a report is computed from.
pub struct Inputs<'a> {
    pub study: &'a Study,
    /// The rows of every results file, in file order.
    pub results: &'a [ResultRow],
    pub specs: &'a [DeviceSpec],
    /// Files the results were read from, named in footers and checked one
    /// by one in Table 8.
    pub result_files: Vec<ResultsFile>,
    /// The measured machines behind real results.
    pub hosts: Vec<HostSummary>,
    /// The pruning sweeps of the study's networks (`data/compression/`);
    /// empty when the selection draws none of them.
    pub sweeps: &'a Sweeps,
    /// The layer Figure 2 shows, when the selection draws it.
    pub layer: Option<&'a LayerSlice>,
    /// Recorded accuracies (`data/accuracy/published.csv`).
    pub accuracy: &'a [RecordedAccuracy],
}

/// A results file and its rows in [`Inputs::results`].
#[derive(Debug, Clone, PartialEq)]
pub struct ResultsFile {
    /// The path as the user named it (relative to the project when inside it).
    pub path: String,
    pub rows: Range<usize>,
}

impl Inputs<'_> {
    /// The results files, comma separated, for footers.
    pub fn file_list(&self) -> String {
        self.result_files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The observations checked on each results file on its own.
    pub fn claims(&self) -> Vec<Checked> {
        let networks = networks_of(self.study);
        let kinds = device_kinds(self.specs);
        self.result_files
            .iter()
            .map(|f| {
                let context = Context {
                    rows: &self.results[f.rows.clone()],
                    kinds: &kinds,
                    networks: &networks,
                    sweeps: self.sweeps,
                    accuracy: self.accuracy,
                };
                Checked {
                    file: f.path.clone(),
                    outcomes: claims::check_all(&context)
                        .into_iter()
                        .map(|(_, outcome)| outcome)
                        .collect(),
                }
            })
            .collect()
    }
}

/// The size of every zoo network of `study` (user ONNX files have none).
pub fn networks_of(study: &Study) -> Vec<Network> {
    study
        .models()
        .into_iter()
        .filter_map(|(dataset, model)| {
            let net = dlas_zoo::find(dataset, &model).ok()?;
            Some(Network {
                dataset,
                params: (net.build)().params(),
                model,
            })
        })
        .collect()
}

/// The kind of every specified device, and of `host`: the runner measures
/// the host's CPU only.
pub fn device_kinds(specs: &[DeviceSpec]) -> BTreeMap<String, DeviceKind> {
    specs
        .iter()
        .map(|s| (s.id.clone(), s.kind))
        .chain([("host".to_string(), DeviceKind::Cpu)])
        .collect()
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

/// The study's tables, by number.
pub const TABLES: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8];
/// The study's figures, by number.
pub const FIGURES: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8];
/// The claims, with how each is checked (beside Table 8).
pub const CLAIMS: &str = "paper-tables/claims.md";
/// The page a reviewer opens.
pub const PAGE: &str = "figures/index.html";

/// Whether a selection draws the compression facts (the sweeps, the layer
/// of Figure 2), which take seconds to compute.
pub fn needs_compression(selection: Selection) -> bool {
    matches!(
        selection,
        Selection::All | Selection::Figure(2 | 3 | 7) | Selection::Table(2 | 5 | 8)
    )
}

/// Builds the selected artifacts; everything adds the report page.
pub fn build(inputs: &Inputs, selection: Selection) -> Result<Vec<Artifact>> {
    let (tables, figures): (Vec<usize>, Vec<usize>) = match selection {
        Selection::All => (TABLES.to_vec(), FIGURES.to_vec()),
        Selection::Table(n) if TABLES.contains(&n) => (vec![n], vec![]),
        Selection::Figure(n) if FIGURES.contains(&n) => (vec![], vec![n]),
        Selection::Table(n) => bail!("there is no table {n}; tables: {TABLES:?}"),
        Selection::Figure(n) => bail!("there is no figure {n}; figures: {FIGURES:?}"),
    };
    let checked = (tables.contains(&8) || selection == Selection::All).then(|| inputs.claims());
    let mut out = Vec::new();
    let mut built_tables = Vec::new();
    for n in tables {
        let t = match (n, &checked) {
            (8, Some(checked)) => claims::table(checked),
            _ => table(n, inputs)?,
        };
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
        built_tables.push(t);
    }
    if let Some(checked) = &checked {
        out.push(Artifact {
            path: CLAIMS.into(),
            bytes: claims::markdown(checked).into_bytes(),
        });
    }
    let mut built_figures = Vec::new();
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
            bytes: svg.clone().into_bytes(),
        });
        out.push(Artifact {
            path: format!("figures/figure{n}.png").into(),
            bytes: png,
        });
        built_figures.push((f, svg));
    }
    if let (Selection::All, Some(checked)) = (selection, &checked) {
        let page = crate::page::Page {
            study: inputs.study,
            hosts: &inputs.hosts,
            files: &inputs.file_list(),
            tables: &built_tables,
            figures: &built_figures,
            claims: checked,
        };
        out.push(Artifact {
            path: PAGE.into(),
            bytes: page.html().into_bytes(),
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
        8 => Ok(claims::table(&inputs.claims())),
        _ => bail!("there is no table {n}; tables: {TABLES:?}"),
    }
}

/// Figure `n` as data.
pub fn figure(n: usize, inputs: &Inputs) -> Result<FigureData> {
    match n {
        1 => Ok(illustrations::stack(inputs)),
        2 => illustrations::layer(inputs),
        3 => Ok(illustrations::sweeps(inputs)),
        4 => Ok(inference_time(inputs)),
        5 => Ok(analysis::compression_speedup(inputs, native_footer(inputs))),
        6 => Ok(analysis::best_algorithm(inputs, native_footer(inputs))),
        7 => Ok(analysis::expected_vs_achieved(
            inputs,
            &|d, m, c| inputs.sweeps.expected_speedup(d, m, c),
            format!(
                "{} Expected speedups: {}.",
                native_footer(inputs),
                crate::compression::sweep_path(&inputs.study.name)
            ),
        )),
        8 => Ok(analysis::tuning_speedup(inputs, native_footer(inputs))),
        _ => bail!("there is no figure {n}; figures: {FIGURES:?}"),
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

/// Tables 2 and 5: each network's size and work, its recorded accuracy,
/// and what each pruning technique leaves at the chosen level.
fn networks(inputs: &Inputs, dataset: Dataset, number: usize) -> Result<Table> {
    let pruning = [Compression::WeightPruning, Compression::ChannelPruning];
    let top1 = |model: &str, technique: Compression, level: Option<f64>| {
        inputs
            .accuracy
            .iter()
            .find(|a| {
                a.dataset == dataset
                    && a.model == model
                    && a.technique == technique
                    && match (a.level, level) {
                        (Some(a), Some(b)) => (a - b).abs() < 1e-9,
                        (None, None) => true,
                        _ => false,
                    }
            })
            .map_or_else(|| "-".to_string(), |a| a.top1.to_string())
    };
    let mut rows = Vec::new();
    for (d, model) in inputs.study.models() {
        if d != dataset {
            continue;
        }
        let net = dlas_zoo::find(d, &model)?;
        let graph = (net.build)();
        let mut row = vec![
            model.clone(),
            graph.params().to_string(),
            net.published_params.to_string(),
            format!("{:.2}", graph.macs() as f64 / 1e6),
            graph.weighted_layers().count().to_string(),
            top1(&model, Compression::Dense, None),
        ];
        for technique in pruning {
            match inputs.sweeps.chosen(d, &model, technique) {
                Some(p) => row.extend([
                    dlas_core::plan::format_level(p.level),
                    inputs
                        .sweeps
                        .compression_ratio(p)
                        .map_or("-".into(), |r| format!("{r:.2}")),
                    inputs
                        .sweeps
                        .macs_left(p)
                        .map_or("-".into(), |m| format!("{:.1}", 100.0 * m)),
                    top1(&model, technique, Some(p.level)),
                ]),
                None => row.extend(["-".to_string(), "-".into(), "-".into(), "-".into()]),
            }
        }
        for technique in [Compression::Fp16, Compression::Int8] {
            row.push(top1(&model, technique, None));
        }
        row.push(net.reference.to_string());
        row.push(
            inputs
                .accuracy
                .iter()
                .find(|a| {
                    a.dataset == dataset && a.model == model && a.technique == Compression::Dense
                })
                .map_or_else(|| "-".to_string(), |a| a.source.clone()),
        );
        rows.push(row);
    }
    let mut columns: Vec<String> = [
        "model",
        "params",
        "published params",
        "MACs (M)",
        "conv+linear layers",
        "dense top-1 (%)",
    ]
    .map(String::from)
    .to_vec();
    for technique in pruning {
        for column in [
            "level",
            "compression ratio (x)",
            "MACs left (%)",
            "top-1 (%)",
        ] {
            columns.push(format!("{technique} {column}"));
        }
    }
    columns.extend(
        [
            "fp16 top-1 (%)",
            "int8 top-1 (%)",
            "definition",
            "dense top-1 source",
        ]
        .map(String::from),
    );
    Ok(Table {
        number,
        title: format!("{dataset} networks and their compression at the chosen level"),
        columns,
        rows,
        footer: format!(
            "Source: the zoo's graph IR (crates/dlas-zoo; MACs count convolution and linear multiply-accumulates at batch 1); \
             pruning at the chosen level: {} (dlas-compress on the zoo's seeded weights; compression ratio = dense over non-zero parameters); \
             accuracy: data/accuracy/published.csv ('-': not recorded; never estimated). \
             Output fidelity of each compressed network against dense: `dlas compress MODEL --dataset {dataset} --technique T`. No results enter this table.",
            crate::compression::sweep_path(&inputs.study.name)
        ),
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
        inputs.file_list(),
        sources.into_iter().collect::<Vec<_>>().join(", "),
        devices.join(", ")
    )
}
