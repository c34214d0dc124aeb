//! The DLAS study's tables that no results enter: the hardware platforms
//! (Table 1) and each network's size, accuracy and compression at the
//! chosen level (Tables 2 and 5).

use crate::inputs::Inputs;
use crate::table::Table;
use anyhow::Result;
use dlas_core::{Compression, Dataset};

/// Table 1: the study's devices from their specifications, and the
/// measured machines.
pub fn hardware(inputs: &Inputs) -> Table {
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
                // A specification row is a mocked device: its numbers are modelled.
                format!("{} (modelled)", format!("{:?}", s.kind).to_uppercase()),
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
pub fn networks(inputs: &Inputs, dataset: Dataset, number: usize) -> Result<Table> {
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
            net.published_params
                .map_or_else(|| "-".to_string(), |p| p.to_string()),
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
             Output fidelity of each compressed network against dense: `dlas compress MODEL --dataset {dataset} --technique T`. {} {} {} No results enter this table.",
            crate::compression::sweep_path(&inputs.study.name),
            super::illustrations::untrained_note(),
            super::illustrations::levels_note(inputs),
            super::illustrations::PUBLISHED_NOTE,
        ),
    })
}
