//! Unstructured magnitude (L1) pruning of conv and linear weights.
//!
//! The study prunes globally: one magnitude threshold across the network,
//! so layers with many small weights lose more of them than layers with few
//! large ones. The layer-wise variant prunes every layer to the same level.
//! Biases and batch-norm parameters are never pruned (they are few and a
//! sparse format would not store them).
//!
//! A global threshold follows the weights' scales: with the zoo's seeded
//! weights (He-normal convolutions, small uniform classifiers) it can empty
//! a whole layer, e.g. MobileNetV2's classifier at 0.5; the report's
//! per-layer density shows it and `dlas compress` names such layers.

use crate::checks::layer_weight_mut;
use crate::{check_level, check_weights};
use dlas_zoo::Graph;
use dlas_zoo::weights::Weights;
use serde::{Deserialize, Serialize};

/// Where the magnitude threshold is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// One threshold over all layers (the study's method).
    #[default]
    Global,
    /// Each layer pruned to `level` on its own.
    LayerWise,
}

/// Zeroes the `round(level * n)` smallest-magnitude weights, where `n`
/// counts all conv and linear weights (global) or each layer's (layer-wise).
/// Exactly that many weights become zero: ties at the threshold are broken
/// by position, so the sparsity is the target to within one weight.
pub fn prune_weights(
    graph: &Graph,
    weights: &Weights,
    level: f64,
    scope: Scope,
) -> anyhow::Result<Weights> {
    check_level(level)?;
    check_weights(graph, weights)?;
    let mut out = weights.clone();
    let mut layers: Vec<&mut Vec<f32>> = out
        .by_node
        .iter_mut()
        .flatten()
        .filter_map(layer_weight_mut)
        .collect();
    match scope {
        Scope::Global => prune_together(&mut layers, level),
        Scope::LayerWise => {
            for layer in layers {
                prune_together(&mut [layer], level);
            }
        }
    }
    Ok(out)
}

/// Zeroes the `round(level * total)` smallest magnitudes across `tensors`.
fn prune_together(tensors: &mut [&mut Vec<f32>], level: f64) {
    let total: usize = tensors.iter().map(|t| t.len()).sum();
    let k = (level * total as f64).round() as usize;
    if k == 0 {
        return;
    }
    let mut magnitudes: Vec<f32> = tensors
        .iter()
        .flat_map(|t| t.iter().map(|w| w.abs()))
        .collect();
    let (_, &mut threshold, _) = magnitudes.select_nth_unstable_by(k - 1, f32::total_cmp);
    // Everything strictly below the threshold goes, then ties in order until k.
    let below = magnitudes.iter().filter(|m| **m < threshold).count();
    let mut ties = k - below;
    for t in tensors.iter_mut() {
        for w in t.iter_mut() {
            let m = w.abs();
            if m < threshold {
                *w = 0.0;
            } else if m == threshold && ties > 0 {
                *w = 0.0;
                ties -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer_weight;
    use dlas_zoo::weights;

    fn zeros(w: &[f32]) -> usize {
        w.iter().filter(|v| **v == 0.0).count()
    }

    #[test]
    fn global_pruning_hits_the_target_and_layers_differ() {
        let g = (dlas_zoo::find(dlas_core::Dataset::Cifar10, "resnet18")
            .unwrap()
            .build)();
        let w = weights::generate(&g, 1);
        let pruned = prune_weights(&g, &w, 0.8, Scope::Global).unwrap();
        let layers: Vec<&[f32]> = pruned
            .by_node
            .iter()
            .flatten()
            .filter_map(layer_weight)
            .collect();
        let total: usize = layers.iter().map(|l| l.len()).sum();
        let zeroed: usize = layers.iter().map(|l| zeros(l)).sum();
        let target = 0.8 * total as f64;
        assert!(
            (zeroed as f64 - target).abs() <= 1.0,
            "{zeroed} vs {target}"
        );
        let densities: Vec<f64> = layers
            .iter()
            .map(|l| 1.0 - zeros(l) as f64 / l.len() as f64)
            .collect();
        let (lo, hi) = densities
            .iter()
            .fold((1.0f64, 0.0f64), |(lo, hi), d| (lo.min(*d), hi.max(*d)));
        assert!(
            hi - lo > 0.1,
            "global pruning should prune layers differently: {lo}..{hi}"
        );
    }

    #[test]
    fn layer_wise_pruning_prunes_every_layer_to_the_level() {
        let g = (dlas_zoo::find(dlas_core::Dataset::Cifar10, "mobilenetv1")
            .unwrap()
            .build)();
        let w = weights::generate(&g, 1);
        let pruned = prune_weights(&g, &w, 0.5, Scope::LayerWise).unwrap();
        for l in pruned.by_node.iter().flatten().filter_map(layer_weight) {
            let target = 0.5 * l.len() as f64;
            assert!((zeros(l) as f64 - target).abs() <= 1.0);
        }
    }

    #[test]
    fn a_level_outside_the_unit_interval_is_refused() {
        let g = (dlas_zoo::find(dlas_core::Dataset::Cifar10, "mobilenetv1")
            .unwrap()
            .build)();
        let w = weights::generate(&g, 1);
        for level in [1.0, -0.1, 1.5] {
            let e = prune_weights(&g, &w, level, Scope::Global)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&level.to_string()) && e.contains("[0, 1)"),
                "{e}"
            );
        }
    }
}
