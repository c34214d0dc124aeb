//! The compression facts the report draws, computed here with
//! `dlas-compress` on the zoo's pinned weights so that the report never
//! compresses anything itself: the pruning sweep of every network, the layer
//! Figure 2 shows, and the recorded accuracies.

use crate::project::Project;
use anyhow::{Context, Result};
use dlas_compress::accuracy::{Published, read_published};
use dlas_compress::{footprint, study_pruning, sweep_levels};
use dlas_core::{Compression, Dataset, Study};
use dlas_report::compression::{LayerSlice, RecordedAccuracy, SweepPoint, Sweeps};
use dlas_zoo::weights::{self, Params, Weights};
use dlas_zoo::{Graph, Op};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Top-1 points a pruned model may lose against dense at the chosen level.
pub const MAX_TOP1_DROP: f64 = 1.0;

/// Output channels and weights per channel of Figure 2's slice.
const SLICE_ROWS: usize = 24;
const SLICE_INPUT_CHANNELS: usize = 8;

/// The accuracies recorded in `data/accuracy/published.csv`.
pub fn published(project: &Project) -> Result<Vec<Published>> {
    read_published(&project.root.join("data/accuracy/published.csv"))
}

/// The recorded top-1 accuracies, for the report (rows without top-1 are
/// not recorded and do not enter).
pub fn recorded_accuracy(published: &[Published]) -> Vec<RecordedAccuracy> {
    published
        .iter()
        .filter_map(|p| {
            Some(RecordedAccuracy {
                dataset: p.dataset,
                model: p.model.clone(),
                technique: p.technique,
                level: p.level,
                top1: p.top1?,
                source: p.source.clone(),
            })
        })
        .collect()
}

/// The level the study runs for `model` and a pruning technique: the elbow
/// of the recorded accuracies (within [`MAX_TOP1_DROP`] of dense), else the
/// level in the study file; `None` when the study does not prune that way.
pub fn chosen_level(
    study: &Study,
    published: &[Published],
    dataset: Dataset,
    model: &str,
    technique: Compression,
) -> Option<f64> {
    let entry = study.compressions.iter().find(|c| c.id == technique)?;
    Some(dlas_compress::accuracy::chosen_level(
        published,
        model,
        dataset,
        technique,
        MAX_TOP1_DROP,
        study.level(entry, model),
    ))
}

/// Every pruning level of the study's schedules (and the chosen one) for
/// every zoo network of the study, with the dense network first.
pub fn sweeps(study: &Study, published: &[Published]) -> Result<Sweeps> {
    let networks: Vec<(Dataset, String)> = study
        .models()
        .into_iter()
        .filter(|(d, m)| dlas_zoo::find(*d, m).is_ok())
        .collect();
    // One network per core at a time: each holds its weights and one
    // pruned copy (DenseNet-161: 115 MB each). Results keep study order.
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Result<Vec<SweepPoint>>>>> =
        Mutex::new((0..networks.len()).map(|_| None).collect());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers.min(networks.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((dataset, model)) = networks.get(i) else {
                        break;
                    };
                    let result = dlas_zoo::find(*dataset, model).and_then(|net| {
                        let graph = (net.build)();
                        let dense = weights::generate(&graph, weights::MODEL_SEED);
                        sweep_network(study, published, &graph, &dense)
                    });
                    done.lock().expect("no worker panics")[i] = Some(result);
                }
            });
        }
    });
    let mut points = Vec::new();
    for result in done.into_inner().expect("no worker panics") {
        points.extend(result.expect("every network is swept")?);
    }
    Ok(Sweeps { points })
}

fn sweep_network(
    study: &Study,
    published: &[Published],
    graph: &Graph,
    dense: &Weights,
) -> Result<Vec<SweepPoint>> {
    let point = |technique, level, chosen, weights: &Weights| -> Result<SweepPoint> {
        let f = footprint(graph, weights, technique)?;
        Ok(SweepPoint {
            dataset: graph.dataset,
            model: graph.name.clone(),
            technique,
            level,
            chosen,
            params: f.params,
            bytes: f.bytes,
            macs: f.macs,
        })
    };
    let mut points = vec![point(Compression::Dense, 0.0, true, dense)?];
    for technique in [Compression::WeightPruning, Compression::ChannelPruning] {
        let Some(chosen) = chosen_level(study, published, graph.dataset, &graph.name, technique)
        else {
            continue;
        };
        let mut levels = sweep_levels(technique);
        if !levels.iter().any(|l| (l - chosen).abs() < 1e-9) {
            levels.push(chosen);
            levels.sort_by(f64::total_cmp);
        }
        for level in levels {
            let pruned = prune(graph, dense, technique, level)?;
            let is_chosen = (level - chosen).abs() < 1e-9;
            points.push(point(technique, level, is_chosen, &pruned)?);
        }
    }
    Ok(points)
}

/// The study's pruning: global L1 weights, or L1 channels zeroed in place.
fn prune(graph: &Graph, dense: &Weights, technique: Compression, level: f64) -> Result<Weights> {
    study_pruning(graph, dense, technique, level)
        .with_context(|| format!("cannot prune {} by {technique} at {level}", graph.name))
}

/// The layer of Figure 2: in the study's first zoo network, the first
/// (non-depthwise) 3x3 convolution reading at least 16 channels, else its
/// first convolution; the first rows and input channels of its weight.
pub fn layer(study: &Study, published: &[Published]) -> Result<LayerSlice> {
    let (dataset, model) = study
        .models()
        .into_iter()
        .find(|(d, m)| dlas_zoo::find(*d, m).is_ok())
        .context("the study has no zoo network to illustrate compression on")?;
    let graph = (dlas_zoo::find(dataset, &model)?.build)();
    let dense = weights::generate(&graph, weights::MODEL_SEED);
    let convs: Vec<(usize, &dlas_zoo::ir::Conv)> = graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.op {
            Op::Conv(c) if !c.is_depthwise() => Some((i, c)),
            _ => None,
        })
        .collect();
    let &(index, conv) = convs
        .iter()
        .find(|(_, c)| c.kernel == 3 && c.in_channels / c.groups >= 16)
        .or(convs.first())
        .with_context(|| format!("{model} has no convolution"))?;
    let level = |technique| {
        chosen_level(study, published, dataset, &model, technique)
            .with_context(|| format!("the study has no {technique} level"))
    };
    let (weight_level, channel_level) = (
        level(Compression::WeightPruning)?,
        level(Compression::ChannelPruning)?,
    );
    let weight_pruned = prune(&graph, &dense, Compression::WeightPruning, weight_level)?;
    let channel_pruned = prune(&graph, &dense, Compression::ChannelPruning, channel_level)?;
    let tensor = |w: &Weights| -> Result<Vec<f32>> {
        match &w.by_node[index] {
            Some(Params::Conv { weight, .. }) => Ok(weight.clone()),
            _ => anyhow::bail!("node {} has no convolution weight", graph.nodes[index].name),
        }
    };
    let shape = conv.weight_shape();
    let per_channel = shape[1] * shape[2] * shape[3];
    let rows = SLICE_ROWS.min(shape[0]);
    let columns = (SLICE_INPUT_CHANNELS * shape[2] * shape[3]).min(per_channel);
    let slice = |full: &[f32]| -> Vec<f32> {
        (0..rows)
            .flat_map(|r| full[r * per_channel..r * per_channel + columns].to_vec())
            .collect()
    };
    let dense_weight = tensor(&dense)?;
    let codes = dlas_compress::int8::quantize_weight(&dense_weight, shape[0]).values;
    let int8 = (0..rows)
        .flat_map(|r| codes[r * per_channel..r * per_channel + columns].to_vec())
        .collect();
    Ok(LayerSlice {
        dataset,
        model,
        layer: graph.nodes[index].name.clone(),
        shape,
        rows,
        columns,
        weight_pruning_level: weight_level,
        channel_pruning_level: channel_level,
        dense: slice(&dense_weight),
        weight_pruned: slice(&tensor(&weight_pruned)?),
        channel_pruned: slice(&tensor(&channel_pruned)?),
        int8,
    })
}
