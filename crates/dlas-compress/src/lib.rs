//! Model compression: transformations of a zoo graph and its weights, and
//! the report every compressed model carries.
//!
//! The study compresses each network four ways (its `compression` axis):
//! unstructured weight pruning, structured channel pruning, float16 and
//! int8. Each transformation is a module taking `(Graph, Weights)`; the
//! numerics that only an exporter or engine can express (float16, int8 QDQ)
//! are described by [`Numerics`] next to the graph. Fidelity against the
//! dense model is measured through the [`Evaluator`] trait, so the tract
//! reference evaluator and, later, the native engine give comparable reports.
//!
//! The feature `onnx` (on by default) adds what needs the ONNX exporter and
//! tract: the [`Tract`] evaluator, [`Compressed::onnx`] and accuracy
//! measurement. Crates that only transform weights (the mocked devices read
//! pruned densities) turn it off and stay free of tract.

pub mod accuracy;
pub mod channels;
pub mod compress;
pub mod evaluator;
pub mod int8;
pub mod prune;
pub mod report;
pub mod schedule;

pub use channels::{Removal, prune_channels};
pub use compress::{Compressed, Request, compress};
#[cfg(feature = "onnx")]
pub use evaluator::Tract;
pub use evaluator::{Evaluator, Numerics};
pub use int8::{Calibration, CalibrationMethod, Int8Params, engine_params, quantize};
pub use prune::{Scope, prune_weights};
pub use report::{CompressionReport, Fidelity, Footprint, footprint};
pub use schedule::{choose_level, sweep_levels};

use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, Op};

/// The study's pruning step (the DLAS paper's schedules): global L1
/// unstructured pruning for `weight-pruning`, L1 channels zeroed in place
/// (kept in the graph, so sparse formats see them) for `channel-pruning`.
/// The mocked devices' densities, the runner's model files and the report's
/// sweeps all prune through this one function, so they cannot drift apart.
pub fn study_pruning(
    graph: &Graph,
    dense: &Weights,
    technique: dlas_core::Compression,
    level: f64,
) -> anyhow::Result<Weights> {
    use dlas_core::Compression;
    match technique {
        Compression::WeightPruning => prune_weights(graph, dense, level, Scope::Global),
        Compression::ChannelPruning => Ok(prune_channels(graph, dense, level, Removal::Zero)?.1),
        other => anyhow::bail!("{other} does not prune weights"),
    }
}

/// Checks that a pruning level is a fraction of what can be removed.
pub fn check_level(level: f64) -> anyhow::Result<f64> {
    anyhow::ensure!(
        (0.0..1.0).contains(&level),
        "compression level {level} is outside the valid range [0, 1): it is the fraction of weights or channels removed"
    );
    Ok(level)
}

/// Checks that `weights` belong to `graph`: one entry per node, of the
/// node's kind and size. Transformations index weights by node id, so a
/// mismatch would otherwise surface as a panic deep inside them.
pub fn check_weights(graph: &Graph, weights: &Weights) -> anyhow::Result<()> {
    anyhow::ensure!(
        weights.by_node.len() == graph.nodes.len(),
        "weights cover {} nodes but graph {} has {}",
        weights.by_node.len(),
        graph.name,
        graph.nodes.len()
    );
    for (node, params) in graph.nodes.iter().zip(&weights.by_node) {
        let ok = match (&node.op, params) {
            (Op::Conv(c), Some(Params::Conv { weight, bias })) => {
                weight.len() == c.weight_count()
                    && bias.as_ref().map(Vec::len) == c.bias.then_some(c.out_channels)
            }
            (
                Op::BatchNorm,
                Some(Params::BatchNorm {
                    gamma,
                    beta,
                    mean,
                    var,
                }),
            ) => [gamma, beta, mean, var]
                .iter()
                .all(|v| v.len() == node.shape[0]),
            (
                Op::Linear {
                    in_features,
                    out_features,
                },
                Some(Params::Linear { weight, bias }),
            ) => weight.len() == in_features * out_features && bias.len() == *out_features,
            (Op::LayerNorm { .. }, Some(Params::LayerNorm { gamma, beta })) => {
                gamma.len() == node.shape[0] && beta.len() == node.shape[0]
            }
            (
                Op::LayerScale | Op::ClassToken | Op::PositionEmbedding | Op::Attention(_),
                Some(Params::Tensor(values)),
            ) => values.len() == node.params(),
            (Op::Conv(_) | Op::BatchNorm | Op::Linear { .. } | Op::LayerNorm { .. }, _) => false,
            (_, params) => params.is_none() && node.params() == 0,
        };
        anyhow::ensure!(
            ok,
            "weights of node {} do not match its operator {}",
            node.name,
            node.op.kind()
        );
    }
    Ok(())
}

/// The weight tensor of a conv or linear layer (what pruning and int8 act on).
pub fn layer_weight(params: &Params) -> Option<&[f32]> {
    match params {
        Params::Conv { weight, .. } | Params::Linear { weight, .. } => Some(weight),
        Params::BatchNorm { .. } | Params::LayerNorm { .. } | Params::Tensor(_) => None,
    }
}

fn layer_weight_mut(params: &mut Params) -> Option<&mut Vec<f32>> {
    match params {
        Params::Conv { weight, .. } | Params::Linear { weight, .. } => Some(weight),
        Params::BatchNorm { .. } | Params::LayerNorm { .. } | Params::Tensor(_) => None,
    }
}
