//! Running a plan's mocked combinations: every number is computed, so the
//! whole mocked matrix takes well under a second.

use crate::Device;
use crate::compiler::GraphCompiler;
use crate::mock::MockDevice;
use crate::spec::DeviceSpec;
use crate::workload::{Densities, Workload};
use anyhow::Result;
use dlas_core::{Combination, Compression, Dataset, ResultRow, Status, Summary};
use dlas_zoo::Graph;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Warm-up, timed runs and seed of a mocked run.
#[derive(Debug, Clone, Copy)]
pub struct MockProtocol {
    pub warmup: usize,
    pub runs: usize,
    pub seed: u64,
}

/// Whether a combination's device is one of the mocked ones.
pub fn is_mocked(combination: &Combination, specs: &[DeviceSpec]) -> bool {
    specs.iter().any(|s| s.id == combination.device)
}

/// Results rows for every mocked combination, in plan order.
pub fn run_mocked(
    combinations: &[Combination],
    specs: &[DeviceSpec],
    protocol: MockProtocol,
) -> Result<Vec<ResultRow>> {
    let devices: HashMap<&str, MockDevice> = specs
        .iter()
        .map(|s| (s.id.as_str(), MockDevice::new(s.clone())))
        .collect();
    let mut graphs: HashMap<(Dataset, String), Graph> = HashMap::new();
    let mut rows = Vec::new();
    for c in combinations {
        let Some(device) = devices.get(c.device.as_str()) else {
            continue;
        };
        let key = (c.dataset, c.model.clone());
        if !graphs.contains_key(&key) {
            let Ok(network) = dlas_zoo::find(c.dataset, &c.model) else {
                rows.push(ResultRow::without_timing(
                    c,
                    protocol.warmup,
                    Status::Skipped,
                    "mocked devices model the zoo's networks; this is a user's ONNX model",
                    &device.source(),
                ));
                continue;
            };
            graphs.insert(key.clone(), (network.build)());
        }
        let graph = &graphs[&key];
        if let Some(compiler) = GraphCompiler::from_id(&c.compiler) {
            let measured = device.measure_graph(c, graph, compiler, protocol.runs, protocol.seed);
            rows.push(row_of(c, protocol, measured, &device.graph_source()));
            continue;
        }
        let densities = if c.compression.is_pruning() {
            Some(pruned_densities(graph, c.compression, c.level)?)
        } else {
            None
        };
        let workload = Workload::new(graph, c, densities.as_ref());
        let measured = device.measure(c, &workload, protocol.runs, protocol.seed);
        rows.push(row_of(c, protocol, measured, &device.source()));
    }
    Ok(rows)
}

/// The results row of a mocked measurement, rounded so that the file does
/// not depend on the last bits of floating-point arithmetic on the machine
/// that computed it.
fn row_of(
    c: &Combination,
    protocol: MockProtocol,
    measured: Result<Vec<f64>, crate::Unsupported>,
    source: &str,
) -> ResultRow {
    let row = match measured {
        Ok(samples) => match Summary::from_samples(&samples) {
            Some(summary) => ResultRow::measured(c, protocol.warmup, &summary, source),
            None => ResultRow::without_timing(
                c,
                protocol.warmup,
                Status::Failed,
                "the model produced no finite samples",
                source,
            ),
        },
        Err(unsupported) => {
            ResultRow::without_timing(c, protocol.warmup, Status::Skipped, &unsupported.0, source)
        }
    };
    row.rounded(6)
}

/// Per-layer weight density of `graph` pruned by `technique` at `level`, on
/// the pinned weights: what the compression stage produces for real devices.
/// Memoised per process: pruning ImageNet networks takes a noticeable share
/// of a report, and the mocked run and the figures need the same numbers.
pub fn pruned_densities(graph: &Graph, technique: Compression, level: f64) -> Result<Densities> {
    static MEMO: OnceLock<Mutex<HashMap<String, Densities>>> = OnceLock::new();
    let key = format!(
        "{}/{}/{technique}/{}",
        graph.dataset,
        graph.name,
        dlas_core::plan::format_level(level)
    );
    let memo = MEMO.get_or_init(Default::default);
    if let Some(d) = memo.lock().expect("memo lock").get(&key) {
        return Ok(d.clone());
    }
    let densities = measure_densities(graph, technique, level)?;
    memo.lock()
        .expect("memo lock")
        .insert(key, densities.clone());
    Ok(densities)
}

fn measure_densities(graph: &Graph, technique: Compression, level: f64) -> Result<Densities> {
    let dense = dlas_zoo::weights::generate(graph, dlas_zoo::weights::MODEL_SEED);
    let pruned = dlas_compress::study_pruning(graph, &dense, technique, level)?;
    Ok(graph
        .nodes
        .iter()
        .zip(&pruned.by_node)
        .filter_map(|(node, params)| {
            let weight = dlas_compress::layer_weight(params.as_ref()?)?;
            let nonzero = weight.iter().filter(|w| **w != 0.0).count();
            Some((
                node.name.clone(),
                nonzero as f64 / weight.len().max(1) as f64,
            ))
        })
        .collect())
}

/// The model's time for each measured row of `rows` that runs the native
/// engine, as the calibrated machine `host` predicts it: `(index into rows,
/// predicted ms)`. This is exactly what the mocked devices compute (the
/// same workload, densities and equations), without the noise. Rows the
/// model does not cover are left out: runtimes' own kernels (algorithm
/// `auto`), rows without a time, and models outside the zoo.
pub fn predict_measured(rows: &[ResultRow], host: &DeviceSpec) -> Result<Vec<(usize, f64)>> {
    let device = MockDevice::new(host.clone());
    let mut graphs: HashMap<(Dataset, String), Graph> = HashMap::new();
    let mut out = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        if !row.status.has_timing()
            || row.compiler != dlas_core::NATIVE
            || row.algorithm == dlas_core::Algorithm::Auto
        {
            continue;
        }
        let Ok(network) = dlas_zoo::find(row.dataset, &row.model) else {
            continue;
        };
        let graph = graphs
            .entry((row.dataset, row.model.clone()))
            .or_insert_with(|| (network.build)());
        let level: f64 = row.level.parse().unwrap_or(0.0);
        let c = Combination {
            dataset: row.dataset,
            model: row.model.clone(),
            compression: row.compression,
            level,
            algorithm: row.algorithm,
            format: row.format,
            layout: row.layout,
            compiler: row.compiler.clone(),
            tuned: row.tuned,
            device: host.id.clone(),
            batch: row.batch,
        };
        let densities = if c.compression.is_pruning() {
            Some(pruned_densities(graph, c.compression, level)?)
        } else {
            None
        };
        let workload = Workload::new(graph, &c, densities.as_ref());
        if let Ok(p) = device.predict(&c, &workload) {
            out.push((i, p.total_seconds() * 1e3));
        }
    }
    Ok(out)
}
