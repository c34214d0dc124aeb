//! Quantisation parameters: what a compression pass hands to a runtime.
//!
//! They live in the zoo, next to the weights they describe, so the
//! compression crate can produce them and the engine can consume them
//! without either depending on the other.

use crate::ir::{Graph, Op};
use crate::reference;
use crate::weights::{Params, Weights};

/// An affine int8 quantiser for one tensor: `real = scale * (q - zero_point)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActivationQuant {
    pub scale: f32,
    pub zero_point: i32,
}

impl ActivationQuant {
    /// The quantiser whose int8 range [-128, 127] covers [min, max], which is
    /// widened to contain zero so that zero (padding, ReLU) is exact.
    pub fn from_range(min: f32, max: f32) -> ActivationQuant {
        let (min, max) = (min.min(0.0), max.max(0.0));
        let scale = if max > min { (max - min) / 255.0 } else { 1.0 };
        let zero_point = (-128.0 - min / scale).round().clamp(-128.0, 127.0) as i32;
        ActivationQuant { scale, zero_point }
    }

    pub fn quantize(&self, x: f32) -> i8 {
        ((x / self.scale).round() as i32 + self.zero_point).clamp(-128, 127) as i8
    }

    pub fn dequantize(&self, q: i8) -> f32 {
        self.scale * (q as i32 - self.zero_point) as f32
    }
}

/// Quantisation of a network, indexed by node id like [`Weights::by_node`].
#[derive(Debug, Clone, PartialEq)]
pub struct QuantParams {
    /// Per output channel symmetric weight scales of convolutions and linear
    /// layers (`weight = scale[oc] * q`, q in [-127, 127]); `None` elsewhere.
    pub weights: Vec<Option<Vec<f32>>>,
    /// The quantiser of every node's output (including the input).
    pub activations: Vec<ActivationQuant>,
}

/// Symmetric per-channel scales of a weight tensor with `rows` output channels.
pub fn channel_scales(weight: &[f32], rows: usize) -> Vec<f32> {
    weight
        .chunks(weight.len() / rows)
        .map(|row| {
            let m = row.iter().fold(0.0f32, |m, w| m.max(w.abs()));
            if m > 0.0 { m / 127.0 } else { 1.0 }
        })
        .collect()
}

/// Min-max calibration: weight scales from the weights, activation ranges
/// from the f64 reference evaluation of `calibration` (a batch of inputs).
pub fn calibrate(
    graph: &Graph,
    weights: &Weights,
    calibration: &[f32],
    batch: usize,
) -> QuantParams {
    let values = reference::evaluate_all(graph, weights, calibration, batch);
    let activations = values
        .iter()
        .map(|v| {
            let (lo, hi) = v
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                    (lo.min(x), hi.max(x))
                });
            ActivationQuant::from_range(lo as f32, hi as f32)
        })
        .collect();
    let weights = graph
        .nodes
        .iter()
        .zip(&weights.by_node)
        .map(|(node, p)| match (&node.op, p) {
            (Op::Conv(c), Some(Params::Conv { weight, .. })) => {
                Some(channel_scales(weight, c.out_channels))
            }
            (Op::Linear { out_features, .. }, Some(Params::Linear { weight, .. })) => {
                Some(channel_scales(weight, *out_features))
            }
            _ => None,
        })
        .collect();
    QuantParams {
        weights,
        activations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiser_covers_its_range_and_keeps_zero_exact() {
        let q = ActivationQuant::from_range(-1.0, 3.0);
        assert_eq!(q.dequantize(q.quantize(0.0)), 0.0);
        for x in [-1.0f32, 0.3, 2.99] {
            assert!((q.dequantize(q.quantize(x)) - x).abs() <= q.scale / 2.0 + 1e-6);
        }
    }
}
