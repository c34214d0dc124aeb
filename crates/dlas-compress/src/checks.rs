//! The checks every transformation starts with (a level is a fraction, the
//! weights fit the graph) and the one accessor of a layer's weight matrix,
//! in a leaf module that the transformations import and that imports none
//! of them.

use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, Op};

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

pub(crate) fn layer_weight_mut(params: &mut Params) -> Option<&mut Vec<f32>> {
    match params {
        Params::Conv { weight, .. } | Params::Linear { weight, .. } => Some(weight),
        Params::BatchNorm { .. } | Params::LayerNorm { .. } | Params::Tensor(_) => None,
    }
}
