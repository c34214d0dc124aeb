//! What every compressed model reports: size, work, per-layer density and
//! output fidelity against the dense model.
//!
//! Storage is counted as the study stores each variant: pruned weights
//! (zeroed, not removed) in CSR, one row per output channel, with 4-byte
//! values, 4-byte column indices and `rows + 1` 4-byte row pointers; dense
//! float32 otherwise; float16 at 2 bytes; int8 weights at 1 byte plus one
//! float32 scale per output channel, and 5 bytes (scale, zero point) per
//! quantised activation. Biases and batch-norm parameters stay float32
//! except under float16.

use crate::evaluator::Numerics;
use crate::layer_weight;
use dlas_core::{Compression, Dataset};
use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, Op};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Output agreement of a compressed model with the dense one on the same inputs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fidelity {
    pub samples: usize,
    /// Fraction of samples whose arg-max class is the dense model's.
    pub top1_agreement: f64,
    /// `||y - y_dense|| / ||y_dense||` over all logits.
    pub rel_l2: f64,
    /// `10 log10(||y_dense||^2 / ||y - y_dense||^2)`; `None` when the outputs
    /// are identical (infinite).
    pub snr_db: Option<f64>,
}

impl Fidelity {
    /// Compares `outputs` with `dense`, both `samples` rows of logits.
    pub fn measure(dense: &[f32], outputs: &[f32], samples: usize) -> Fidelity {
        let classes = dense.len() / samples;
        let argmax = |row: &[f32]| {
            row.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i)
        };
        let agree = dense
            .chunks(classes)
            .zip(outputs.chunks(classes))
            .filter(|(a, b)| argmax(a) == argmax(b))
            .count();
        let signal: f64 = dense.iter().map(|v| (*v as f64).powi(2)).sum();
        let noise: f64 = dense
            .iter()
            .zip(outputs)
            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
            .sum();
        Fidelity {
            samples,
            top1_agreement: agree as f64 / samples as f64,
            rel_l2: (noise / signal).sqrt(),
            snr_db: (noise > 0.0).then(|| 10.0 * (signal / noise).log10()),
        }
    }
}

/// The report of one compressed model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompressionReport {
    pub model: String,
    pub dataset: Dataset,
    pub technique: Compression,
    /// Fraction pruned, for the pruning techniques.
    pub level: Option<f64>,
    /// Channel pruning only: zeroed or removed channels.
    pub removal: Option<crate::Removal>,
    pub params_dense: usize,
    /// Stored parameters that are not zero (all of them, for dense formats).
    pub params: usize,
    /// `params_dense / params`.
    pub params_ratio: f64,
    pub bytes_dense: u64,
    pub bytes: u64,
    /// `bytes_dense / bytes`.
    pub bytes_ratio: f64,
    pub macs_dense: u64,
    /// Multiply-accumulates left: of the smaller graph, or of non-zero weights.
    pub macs: u64,
    /// Channel pruning only: fraction of convolution output channels pruned
    /// (zeroed or removed). Below `level` where keeping one channel per
    /// layer stopped a group from going; not equal to it, since `level`
    /// counts groups of tied channels.
    pub channels_pruned: Option<f64>,
    /// Per conv and linear layer: fraction of weights that are not zero.
    pub density: BTreeMap<String, f64>,
    pub fidelity: Fidelity,
}

/// What a pruned (or dense) float32 model stores and computes, without its
/// fidelity: a sweep over many levels needs the counts at every level, and
/// evaluating every level would cost far more than pruning it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// Stored parameters that are not zero.
    pub params: usize,
    /// Bytes as the study stores the model (CSR for pruned weights).
    pub bytes: u64,
    /// Multiply-accumulates of non-zero weights at batch 1.
    pub macs: u64,
}

/// The footprint of `weights` on `graph` stored as `technique`: dense float32,
/// or CSR for the pruning techniques (channels zeroed, as the study runs them).
/// Float16 and int8 change numerics rather than weights and are refused.
pub fn footprint(
    graph: &Graph,
    weights: &Weights,
    technique: Compression,
) -> anyhow::Result<Footprint> {
    anyhow::ensure!(
        technique == Compression::Dense || technique.is_pruning(),
        "{technique} has no float32 footprint; only dense and pruned models are counted without compressing"
    );
    crate::check_weights(graph, weights)?;
    let s = size(
        graph,
        weights,
        technique,
        technique.is_pruning(),
        &Numerics::F32,
    );
    Ok(Footprint {
        params: s.params,
        bytes: s.bytes,
        macs: s.macs,
    })
}

/// Convolution output channels of `graph` whose filter is not all zero.
pub(crate) fn live_channels(graph: &Graph, weights: &Weights) -> usize {
    graph
        .nodes
        .iter()
        .zip(&weights.by_node)
        .map(|(node, params)| match (&node.op, params) {
            (Op::Conv(c), Some(Params::Conv { weight, .. })) if c.out_channels > 0 => weight
                .chunks(weight.len() / c.out_channels)
                .filter(|f| f.iter().any(|w| *w != 0.0))
                .count(),
            _ => 0,
        })
        .sum()
}

/// Counts of a compressed model, before fidelity is known.
pub(crate) struct Size {
    pub params: usize,
    pub bytes: u64,
    pub macs: u64,
    pub density: BTreeMap<String, f64>,
}

/// Sizes `weights` on `graph` stored as `technique` with `numerics`.
pub(crate) fn size(
    graph: &Graph,
    weights: &Weights,
    technique: Compression,
    sparse: bool,
    numerics: &Numerics,
) -> Size {
    let mut s = Size {
        params: 0,
        bytes: 0,
        macs: 0,
        density: BTreeMap::new(),
    };
    let quantised_activations = match numerics {
        Numerics::Int8(q) => q.activations.iter().flatten().count() as u64,
        _ => 0,
    };
    s.bytes += 5 * quantised_activations;
    let value_bytes = if technique == Compression::Fp16 { 2 } else { 4 };
    for (node, params) in graph.nodes.iter().zip(&weights.by_node) {
        let Some(params) = params else { continue };
        let all = match params {
            Params::Conv { weight, bias } => weight.len() + bias.as_ref().map_or(0, Vec::len),
            Params::BatchNorm { gamma, beta, .. } => gamma.len() + beta.len(),
            Params::Linear { weight, bias } => weight.len() + bias.len(),
        };
        let Some(weight) = layer_weight(params) else {
            s.params += all;
            s.bytes += value_bytes * all as u64;
            continue;
        };
        let others = all - weight.len();
        let nnz = weight.iter().filter(|w| **w != 0.0).count();
        let rows = node.shape[0];
        s.density
            .insert(node.name.clone(), nnz as f64 / weight.len() as f64);
        let spatial = match node.op {
            Op::Conv(_) => (node.shape[1] * node.shape[2]) as u64,
            _ => 1,
        };
        s.macs += nnz as u64 * spatial;
        s.params += nnz + others;
        s.bytes += value_bytes * others as u64
            + match technique {
                _ if sparse => 8 * nnz as u64 + 4 * (rows as u64 + 1),
                Compression::Int8 => weight.len() as u64 + 4 * rows as u64,
                _ => value_bytes * weight.len() as u64,
            };
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fidelity_of_identical_and_noisy_outputs() {
        let dense = [1.0, 3.0, 2.0, 0.0, 0.0, 5.0];
        let same = Fidelity::measure(&dense, &dense, 2);
        assert_eq!(
            (same.top1_agreement, same.rel_l2, same.snr_db),
            (1.0, 0.0, None)
        );
        let noisy = [1.0, 3.0, 2.0, 0.0, 6.0, 5.0];
        let f = Fidelity::measure(&dense, &noisy, 2);
        assert_eq!(f.top1_agreement, 0.5);
        assert!((f.rel_l2 - (36.0f64 / 39.0).sqrt()).abs() < 1e-12);
        assert!((f.snr_db.unwrap() - 10.0 * (39.0f64 / 36.0).log10()).abs() < 1e-9);
    }
}
