//! Static post-training int8 quantisation (the study used ONNX Runtime's
//! static PTQ; this follows the same QDQ scheme).
//!
//! Weights: symmetric, per output channel, int8 in -127..=127 (zero point 0,
//! so pruned zeros stay exact). Activations: asymmetric, per tensor, uint8,
//! with ranges calibrated on a calibration set, by min-max or by a
//! percentile that ignores outliers. Only the inputs of conv and linear
//! layers are quantised, which is where int8 kernels read activations.
//! Biases and batch norm stay float32 (in the QDQ file as well): an int8
//! engine folds them into its int32 accumulator's requantisation.
//!
//! [`Int8Params`] is what a native int8 engine needs, in plain serialisable
//! form: per layer, its input tensor's scale and zero point and its weights'
//! per-channel scales. The engine quantises the float weights itself with
//! [`quantize_weight`] (`q = clamp(round(w / scale), -127, 127)`, rounding
//! half away from zero), which gives the integers in the QDQ file.

use crate::evaluator::{Evaluator, Numerics};
use crate::{check_weights, layer_weight};
use dlas_zoo::qdq::{ActivationQuant, Qdq, WeightQuant};
use dlas_zoo::quant::{QuantParams, channel_scales};
use dlas_zoo::weights::Weights;
use dlas_zoo::{Graph, Op};
use serde::{Deserialize, Serialize};

/// How an activation range is estimated from calibration tensors.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "kebab-case")]
pub enum CalibrationMethod {
    /// The observed minimum and maximum.
    MinMax,
    /// The `percentile` and `100 - percentile` percentiles (e.g. 99.99).
    Percentile { percentile: f64 },
}

impl std::str::FromStr for CalibrationMethod {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<CalibrationMethod> {
        if s == "minmax" {
            return Ok(CalibrationMethod::MinMax);
        }
        match s.strip_prefix("percentile:").map(str::parse::<f64>) {
            Some(Ok(p)) if p > 50.0 && p <= 100.0 => {
                Ok(CalibrationMethod::Percentile { percentile: p })
            }
            _ => anyhow::bail!(
                "unknown calibration `{s}`; valid: minmax, percentile:P with 50 < P <= 100 (e.g. percentile:99.99)"
            ),
        }
    }
}

/// A calibration set: `shape[0]` samples of the model's input shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    pub method: CalibrationMethod,
    /// Flattened (N, C, H, W).
    pub inputs: Vec<f32>,
    pub shape: [usize; 4],
}

impl Calibration {
    /// `samples` seeded inputs in [0, 1) from [`dlas_zoo::weights::input`].
    pub fn seeded(
        graph: &Graph,
        seed: u64,
        samples: usize,
        method: CalibrationMethod,
    ) -> Calibration {
        let [c, h, w] = graph.input_shape();
        Calibration {
            method,
            inputs: dlas_zoo::weights::input(graph, seed, samples),
            shape: [samples, c, h, w],
        }
    }
}

/// The quantisation of one tensor: `x ~ scale * (q - zero_point)`, `q` in 0..=255.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ActivationParams {
    pub scale: f32,
    pub zero_point: u8,
}

/// The int8 parameters of one conv or linear layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerInt8 {
    /// The layer's node name.
    pub node: String,
    /// The node name of the tensor it reads (`input` for the network input).
    pub input: String,
    /// The uint8 quantisation of that tensor.
    pub input_quant: ActivationParams,
    /// Per output channel: `w ~ scale * q`, `q` in -127..=127.
    pub weight_scales: Vec<f32>,
}

/// A native engine's int8 parameters for a whole network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Int8Params {
    pub calibration: CalibrationMethod,
    pub calibration_samples: usize,
    /// Conv and linear layers in node order.
    pub layers: Vec<LayerInt8>,
}

/// Symmetric per-output-channel quantisation of a weight with `channels` rows.
pub fn quantize_weight(weight: &[f32], channels: usize) -> WeightQuant {
    // An all-zero (pruned) channel gets scale 1: any scale represents it.
    let scales = channel_scales(weight, channels);
    let values = weight
        .chunks(weight.len() / channels)
        .zip(&scales)
        .flat_map(|(row, scale)| {
            row.iter()
                .map(move |w| (w / scale).round().clamp(-127.0, 127.0) as i8)
        })
        .collect();
    WeightQuant { values, scales }
}

/// Samples evaluated at once during calibration: per-node outputs of a
/// whole ImageNet calibration set would not fit in memory.
const CALIBRATION_BATCH: usize = 4;
/// Histogram resolution of percentile calibration.
const HISTOGRAM_BINS: usize = 1 << 16;

/// A streaming range estimate of one tensor: exact minimum and maximum
/// (first pass) and, for percentiles, a histogram over them (second pass).
#[derive(Debug, Clone)]
struct Observer {
    min: f32,
    max: f32,
    bins: Vec<u64>,
}

impl Observer {
    fn new() -> Observer {
        Observer {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            bins: Vec::new(),
        }
    }

    fn observe_range(&mut self, values: &[f32]) {
        for v in values {
            self.min = self.min.min(*v);
            self.max = self.max.max(*v);
        }
    }

    fn width(&self) -> f32 {
        (self.max - self.min) / HISTOGRAM_BINS as f32
    }

    fn observe_histogram(&mut self, values: &[f32]) {
        if self.bins.is_empty() {
            self.bins = vec![0; HISTOGRAM_BINS];
        }
        let width = self.width();
        for v in values {
            let bin = if width > 0.0 {
                (((v - self.min) / width) as usize).min(HISTOGRAM_BINS - 1)
            } else {
                0
            };
            self.bins[bin] += 1;
        }
    }

    /// The first bin where the cumulative count reaches `fraction` of all values.
    fn quantile_bin(&self, fraction: f64) -> usize {
        let total: u64 = self.bins.iter().sum();
        let target = (fraction * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, count) in self.bins.iter().enumerate() {
            seen += count;
            if seen >= target {
                return i;
            }
        }
        HISTOGRAM_BINS - 1
    }

    /// The uint8 quantisation under `method`; the range always holds zero,
    /// so zero (padding, ReLU's floor) is exact.
    fn params(&self, method: CalibrationMethod) -> ActivationParams {
        let (lo, hi) = match method {
            CalibrationMethod::MinMax => (self.min, self.max),
            CalibrationMethod::Percentile { percentile } => {
                let w = self.width();
                let hi = self.quantile_bin(percentile / 100.0) + 1;
                let lo = self.quantile_bin(1.0 - percentile / 100.0);
                (self.min + lo as f32 * w, self.min + hi as f32 * w)
            }
        };
        let (lo, hi) = (lo.min(0.0), hi.max(0.0));
        if hi <= lo {
            return ActivationParams {
                scale: 1.0,
                zero_point: 0,
            };
        }
        let scale = (hi - lo) / 255.0;
        ActivationParams {
            scale,
            zero_point: (-lo / scale).round().clamp(0.0, 255.0) as u8,
        }
    }
}

/// Calibrates activations on `calibration` (run in float through
/// `evaluator`) and quantises weights; returns the engine parameters and
/// the QDQ description of the same numbers.
pub fn quantize(
    graph: &Graph,
    weights: &Weights,
    calibration: &Calibration,
    evaluator: &dyn Evaluator,
) -> anyhow::Result<(Int8Params, Qdq)> {
    check_weights(graph, weights)?;
    // The tensors that conv and linear layers read.
    let mut observed = vec![false; graph.nodes.len()];
    for node in graph.weighted_layers() {
        observed[node.inputs[0]] = true;
    }
    let activations: Vec<Option<ActivationQuant>> =
        observe(graph, weights, calibration, evaluator, &observed)?
            .into_iter()
            .map(|p| {
                p.map(|p| ActivationQuant {
                    scale: p.scale,
                    zero_point: p.zero_point,
                })
            })
            .collect();
    let mut qweights = vec![None; graph.nodes.len()];
    let mut layers = Vec::new();
    for (id, node) in graph.nodes.iter().enumerate() {
        if !matches!(node.op, Op::Conv(_) | Op::Linear { .. }) {
            continue;
        }
        let src = node.inputs[0];
        let act = activations[src].expect("observed every layer input");
        let weight = weights.by_node[id]
            .as_ref()
            .and_then(layer_weight)
            .expect("checked weights");
        let q = quantize_weight(weight, node.shape[0]);
        layers.push(LayerInt8 {
            node: node.name.clone(),
            input: graph.nodes[src].name.clone(),
            input_quant: ActivationParams {
                scale: act.scale,
                zero_point: act.zero_point,
            },
            weight_scales: q.scales.clone(),
        });
        qweights[id] = Some(q);
    }
    Ok((
        Int8Params {
            calibration: calibration.method,
            calibration_samples: calibration.shape[0],
            layers,
        },
        Qdq {
            activations,
            weights: qweights,
        },
    ))
}

/// The native engine's int8 parameters (`dlas_zoo::quant::QuantParams`)
/// from the same calibration as [`quantize`]: the engine keeps every
/// activation in int8, so every node's output is observed, by the same
/// method over the same batches. At the inputs of conv and linear layers the
/// numbers are those of the QDQ file (the uint8 zero point less 128, the
/// same scale), and the weight scales are those of [`quantize_weight`], so
/// the engine and the runtimes reading the QDQ file quantise alike.
pub fn engine_params(
    graph: &Graph,
    weights: &Weights,
    calibration: &Calibration,
    evaluator: &dyn Evaluator,
) -> anyhow::Result<QuantParams> {
    check_weights(graph, weights)?;
    let observed = vec![true; graph.nodes.len()];
    let activations = observe(graph, weights, calibration, evaluator, &observed)?
        .into_iter()
        .map(|p| {
            let p = p.expect("every node is observed");
            dlas_zoo::quant::ActivationQuant {
                scale: p.scale,
                zero_point: i32::from(p.zero_point) - 128,
            }
        })
        .collect();
    let weights = graph
        .nodes
        .iter()
        .zip(&weights.by_node)
        .map(|(node, p)| match node.op {
            Op::Conv(_) | Op::Linear { .. } => p
                .as_ref()
                .and_then(layer_weight)
                .map(|w| channel_scales(w, node.shape[0])),
            _ => None,
        })
        .collect();
    Ok(QuantParams {
        weights,
        activations,
    })
}

/// The uint8 quantisation of each node output marked in `observed`,
/// calibrated on `calibration` run in float through `evaluator`.
fn observe(
    graph: &Graph,
    weights: &Weights,
    calibration: &Calibration,
    evaluator: &dyn Evaluator,
    observed: &[bool],
) -> anyhow::Result<Vec<Option<ActivationParams>>> {
    let [n, c, h, w] = calibration.shape;
    anyhow::ensure!(
        [c, h, w] == graph.input_shape() && n > 0 && calibration.inputs.len() == n * c * h * w,
        "calibration set of shape {n}x{c}x{h}x{w} ({} values) does not fit {}, which takes samples of shape {}",
        calibration.inputs.len(),
        graph.name,
        graph.input_shape().map(|d| d.to_string()).join("x")
    );
    let mut observers: Vec<Option<Observer>> =
        observed.iter().map(|&o| o.then(Observer::new)).collect();
    let passes = match calibration.method {
        CalibrationMethod::MinMax => 1,
        CalibrationMethod::Percentile { .. } => 2,
    };
    let sample = c * h * w;
    for pass in 0..passes {
        for batch in calibration.inputs.chunks(CALIBRATION_BATCH * sample) {
            let samples = batch.len() / sample;
            let eval = evaluator.evaluate(graph, weights, &Numerics::F32, batch, samples, true)?;
            let tensors = eval
                .nodes
                .ok_or_else(|| anyhow::anyhow!("evaluator returned no node outputs"))?;
            for (observer, values) in observers.iter_mut().zip(&tensors) {
                match (observer, pass) {
                    (Some(o), 0) => o.observe_range(values),
                    (Some(o), _) => o.observe_histogram(values),
                    (None, _) => {}
                }
            }
        }
    }
    Ok(observers
        .iter()
        .map(|o| o.as_ref().map(|o| o.params(calibration.method)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tract;
    use dlas_core::Dataset;

    #[test]
    fn weights_round_trip_within_half_a_step() {
        let w = [0.5f32, -1.0, 0.25, 0.0, 0.0, 0.0];
        let q = quantize_weight(&w, 2);
        assert_eq!(q.values[..3], [64, -127, 32]);
        assert_eq!(q.scales[1], 1.0);
        for (i, v) in w.iter().enumerate() {
            let back = q.values[i] as f32 * q.scales[i / 3];
            assert!((back - v).abs() <= q.scales[i / 3] / 2.0);
        }
    }

    #[test]
    fn ranges_hold_zero_and_percentiles_clip_outliers() {
        let mut v: Vec<f32> = (0..10_000).map(|i| i as f32 / 10_000.0).collect();
        v.push(1000.0);
        let mut o = Observer::new();
        // Streamed in two chunks, as calibration batches are.
        for chunk in v.chunks(6000) {
            o.observe_range(chunk);
        }
        for chunk in v.chunks(6000) {
            o.observe_histogram(chunk);
        }
        let minmax = o.params(CalibrationMethod::MinMax);
        assert_eq!(minmax.zero_point, 0);
        assert!((minmax.scale - 1000.0 / 255.0).abs() < 1e-3);
        let p = o.params(CalibrationMethod::Percentile { percentile: 99.9 });
        // Within one histogram bin (1000 / 65536) of the 99.9th value, 0.999.
        assert!((p.scale * 255.0 - 0.999).abs() < 0.02, "{p:?}");
        let mut negative = Observer::new();
        negative.observe_range(&[-2.0, 2.0]);
        let q = negative.params(CalibrationMethod::MinMax);
        assert!((127..=128).contains(&q.zero_point), "{q:?}");
    }

    #[test]
    fn a_calibration_set_of_the_wrong_shape_is_refused() {
        let g = (dlas_zoo::find(Dataset::Cifar10, "mobilenetv1")
            .unwrap()
            .build)();
        let w = dlas_zoo::weights::generate(&g, 1);
        let cal = Calibration {
            method: CalibrationMethod::MinMax,
            inputs: vec![0.5; 2 * 3 * 28 * 28],
            shape: [2, 3, 28, 28],
        };
        let e = quantize(&g, &w, &cal, &Tract).unwrap_err().to_string();
        assert!(e.contains("2x3x28x28") && e.contains("3x32x32"), "{e}");
    }

    #[test]
    fn engine_params_are_the_qdq_numbers_at_layer_inputs_and_cover_every_node() {
        let g = (dlas_zoo::find(Dataset::Cifar10, "mobilenetv2")
            .unwrap()
            .build)();
        let w = dlas_zoo::weights::generate(&g, 3);
        let cal = Calibration::seeded(&g, 4, 6, CalibrationMethod::MinMax);
        let (params, qdq) = quantize(&g, &w, &cal, &Tract).unwrap();
        let engine = engine_params(&g, &w, &cal, &Tract).unwrap();
        assert_eq!(engine.activations.len(), g.nodes.len());
        let mut checked = 0;
        for (id, node) in g.nodes.iter().enumerate() {
            let q = engine.activations[id];
            assert!(q.scale > 0.0 && (-128..=127).contains(&q.zero_point));
            // Zero is exact, so padding and ReLU's floor lose nothing.
            assert_eq!(q.dequantize(q.quantize(0.0)), 0.0, "{}", node.name);
            if let Some(a) = qdq.activations[id] {
                assert_eq!(q.scale, a.scale, "{}", node.name);
                assert_eq!(q.zero_point, i32::from(a.zero_point) - 128, "{}", node.name);
                checked += 1;
            }
            assert_eq!(
                engine.weights[id].as_ref(),
                qdq.weights[id].as_ref().map(|q| &q.scales),
                "{}",
                node.name
            );
        }
        assert!(checked > 10 && checked < g.nodes.len(), "{checked}");
        assert_eq!(params.layers.len(), engine.weights.iter().flatten().count());
    }

    #[test]
    fn methods_parse() {
        assert_eq!(
            "minmax".parse::<CalibrationMethod>().unwrap(),
            CalibrationMethod::MinMax
        );
        assert_eq!(
            "percentile:99.99".parse::<CalibrationMethod>().unwrap(),
            CalibrationMethod::Percentile { percentile: 99.99 }
        );
        assert!("percentile:20".parse::<CalibrationMethod>().is_err());
    }
}
