//! A naive, obviously correct f64 evaluator of a [`Graph`]: the oracle every
//! optimised kernel is tested against, and the source of activation ranges
//! for quantisation calibration.
//!
//! Everything here is plain nested loops over NCHW tensors in f64, written
//! for reading, not speed: if a kernel disagrees with this module, the
//! kernel is wrong. Batch norm uses eps = 1e-5, as PyTorch does.

use crate::ir::{Conv, Graph, Op, Pool, Shape};
use crate::weights::{Params, Weights};

/// Batch-norm epsilon (PyTorch's default).
pub const BN_EPS: f64 = 1e-5;

/// A 2-D convolution of a batch: `input` is (batch, c, h, w) with
/// `[c, h, w] = shape`, `weight` is (out, in / groups, k, k) row-major.
/// Returns (batch, out, oh, ow).
pub fn conv2d_f64(
    input: &[f64],
    batch: usize,
    shape: Shape,
    conv: &Conv,
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f64> {
    let [c, h, w] = shape;
    assert_eq!(c, conv.in_channels, "input channels");
    assert_eq!(input.len(), batch * c * h * w, "input size");
    assert_eq!(weight.len(), conv.weight_count(), "weight size");
    let (k, s, p) = (conv.kernel, conv.stride, conv.padding);
    let oh = (h + 2 * p - k) / s + 1;
    let ow = (w + 2 * p - k) / s + 1;
    let icg = c / conv.groups;
    let ocg = conv.out_channels / conv.groups;
    let mut out = vec![0.0; batch * conv.out_channels * oh * ow];
    // out[n, oc, oy, ox] = bias[oc] + sum over (i, ky, kx) of
    //   weight[oc, i, ky, kx] * input[n, g * icg + i, oy * s + ky - p, ox * s + kx - p],
    // with taps outside the input contributing zero. The sum runs tap by tap
    // over whole output planes (the same terms as the textbook loop, in an
    // order that keeps the reference fast enough for whole-network tests).
    for n in 0..batch {
        for oc in 0..conv.out_channels {
            let g = oc / ocg;
            let plane = &mut out[((n * conv.out_channels + oc) * oh * ow)..][..oh * ow];
            plane.fill(bias.map_or(0.0, |b| b[oc] as f64));
            for i in 0..icg {
                let ic = g * icg + i;
                let src = &input[(n * c + ic) * h * w..][..h * w];
                for ky in 0..k {
                    for kx in 0..k {
                        let wv = weight[((oc * icg + i) * k + ky) * k + kx] as f64;
                        // Output columns whose input column ox * s + kx - p is
                        // inside the row: p - kx <= ox * s <= w - 1 + p - kx.
                        let x0 = p.saturating_sub(kx).div_ceil(s);
                        let x1 = if w + p > kx {
                            ow.min((w - 1 + p - kx) / s + 1)
                        } else {
                            0
                        };
                        for oy in 0..oh {
                            let iy = (oy * s + ky) as isize - p as isize;
                            if iy < 0 || iy >= h as isize {
                                continue;
                            }
                            let row = &src[iy as usize * w..][..w];
                            let dst = &mut plane[oy * ow..][x0..x1];
                            for (j, o) in dst.iter_mut().enumerate() {
                                *o += wv * row[(x0 + j) * s + kx - p];
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

fn pool(input: &[f64], batch: usize, shape: Shape, p: &Pool, max: bool) -> Vec<f64> {
    let [c, h, w] = shape;
    let oh = (h + 2 * p.padding - p.kernel) / p.stride + 1;
    let ow = (w + 2 * p.padding - p.kernel) / p.stride + 1;
    let mut out = Vec::with_capacity(batch * c * oh * ow);
    for plane in input.chunks(h * w).take(batch * c) {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut best = f64::NEG_INFINITY;
                let mut sum = 0.0;
                for ky in 0..p.kernel {
                    for kx in 0..p.kernel {
                        let iy = (oy * p.stride + ky) as isize - p.padding as isize;
                        let ix = (ox * p.stride + kx) as isize - p.padding as isize;
                        if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                            continue;
                        }
                        let v = plane[iy as usize * w + ix as usize];
                        best = best.max(v);
                        sum += v;
                    }
                }
                // Average pooling divides by the full window (count_include_pad),
                // which only matters with padding; the zoo's average pools have none.
                out.push(if max {
                    best
                } else {
                    sum / (p.kernel * p.kernel) as f64
                });
            }
        }
    }
    out
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Evaluates one node given its inputs' values (each (batch, c, h, w)).
fn eval_node(
    graph: &Graph,
    id: usize,
    params: Option<&Params>,
    inputs: &[&[f64]],
    batch: usize,
) -> Vec<f64> {
    let node = &graph.nodes[id];
    let in_shape = |i: usize| graph.nodes[node.inputs[i]].shape;
    let unary = |f: &dyn Fn(f64) -> f64| inputs[0].iter().map(|&x| f(x)).collect();
    match (&node.op, params) {
        (Op::Input, _) => unreachable!("the input is not evaluated"),
        (Op::Conv(c), Some(Params::Conv { weight, bias })) => {
            conv2d_f64(inputs[0], batch, in_shape(0), c, weight, bias.as_deref())
        }
        (
            Op::BatchNorm,
            Some(Params::BatchNorm {
                gamma,
                beta,
                mean,
                var,
            }),
        ) => {
            let [c, h, w] = node.shape;
            let mut out = inputs[0].to_vec();
            for (i, v) in out.iter_mut().enumerate() {
                let ch = (i / (h * w)) % c;
                let scale = gamma[ch] as f64 / (var[ch] as f64 + BN_EPS).sqrt();
                *v = (*v - mean[ch] as f64) * scale + beta[ch] as f64;
            }
            out
        }
        (Op::Relu, _) => unary(&|x| x.max(0.0)),
        (Op::Relu6, _) => unary(&|x| x.clamp(0.0, 6.0)),
        (Op::Silu, _) => unary(&|x| x * sigmoid(x)),
        (Op::Sigmoid, _) => unary(&sigmoid),
        (Op::Add, _) => inputs[0]
            .iter()
            .zip(inputs[1])
            .map(|(a, b)| a + b)
            .collect(),
        (Op::Mul, _) => {
            let [c, h, w] = node.shape;
            if in_shape(1) == node.shape {
                inputs[0]
                    .iter()
                    .zip(inputs[1])
                    .map(|(a, b)| a * b)
                    .collect()
            } else {
                let plane = h * w;
                inputs[0]
                    .iter()
                    .enumerate()
                    .map(|(i, a)| a * inputs[1][i / plane % c + i / (plane * c) * c])
                    .collect()
            }
        }
        (Op::MaxPool(p), _) => pool(inputs[0], batch, in_shape(0), p, true),
        (Op::AvgPool(p), _) => pool(inputs[0], batch, in_shape(0), p, false),
        (Op::GlobalAvgPool, _) => {
            let [_, h, w] = in_shape(0);
            inputs[0]
                .chunks(h * w)
                .map(|p| p.iter().sum::<f64>() / (h * w) as f64)
                .collect()
        }
        (Op::Concat, _) => {
            let mut out = Vec::with_capacity(batch * node.shape.iter().product::<usize>());
            for n in 0..batch {
                for (i, x) in inputs.iter().enumerate() {
                    let size: usize = in_shape(i).iter().product();
                    out.extend_from_slice(&x[n * size..(n + 1) * size]);
                }
            }
            out
        }
        (Op::Flatten, _) => inputs[0].to_vec(),
        (
            Op::Linear {
                in_features,
                out_features,
            },
            Some(Params::Linear { weight, bias }),
        ) => {
            let mut out = Vec::with_capacity(batch * out_features);
            for x in inputs[0].chunks(*in_features) {
                for o in 0..*out_features {
                    let row = &weight[o * in_features..(o + 1) * in_features];
                    let dot: f64 = row.iter().zip(x).map(|(&w, &x)| w as f64 * x).sum();
                    out.push(dot + bias[o] as f64);
                }
            }
            out
        }
        (op, p) => panic!(
            "node {} ({op:?}) has parameters {:?}",
            node.name,
            p.map(|_| "of another kind")
        ),
    }
}

/// Evaluates `graph` on `input` (batch, c, h, w) and returns every node's
/// output, each (batch, c, h, w), indexed by node id. Calibration reads the
/// activation ranges from these.
pub fn evaluate_all(
    graph: &Graph,
    weights: &Weights,
    input: &[f32],
    batch: usize,
) -> Vec<Vec<f64>> {
    let mut values: Vec<Vec<f64>> = Vec::with_capacity(graph.nodes.len());
    for id in 0..graph.nodes.len() {
        let v = if id == 0 {
            assert_eq!(
                input.len(),
                batch * graph.input_shape().iter().product::<usize>()
            );
            input.iter().map(|&x| x as f64).collect()
        } else {
            let ins: Vec<&[f64]> = graph.nodes[id]
                .inputs
                .iter()
                .map(|&i| values[i].as_slice())
                .collect();
            eval_node(graph, id, weights.by_node[id].as_ref(), &ins, batch)
        };
        values.push(v);
    }
    values
}

/// Evaluates `graph` on `input` and returns the output node's value,
/// freeing each intermediate tensor after its last use.
pub fn evaluate(graph: &Graph, weights: &Weights, input: &[f32], batch: usize) -> Vec<f64> {
    let n = graph.nodes.len();
    let mut last_use = vec![0; n];
    for (id, node) in graph.nodes.iter().enumerate() {
        for &i in &node.inputs {
            last_use[i] = id;
        }
    }
    let mut values: Vec<Vec<f64>> = vec![Vec::new(); n];
    values[0] = input.iter().map(|&x| x as f64).collect();
    for id in 1..n {
        let ins: Vec<&[f64]> = graph.nodes[id]
            .inputs
            .iter()
            .map(|&i| values[i].as_slice())
            .collect();
        values[id] = eval_node(graph, id, weights.by_node[id].as_ref(), &ins, batch);
        for &i in &graph.nodes[id].inputs {
            if last_use[i] == id {
                values[i] = Vec::new();
            }
        }
    }
    values.pop().expect("a graph has at least its input")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_of_a_known_case() {
        // 1 channel 3x3 input, 2x2 kernel of ones, stride 1, no padding: window sums.
        let conv = Conv {
            in_channels: 1,
            out_channels: 1,
            kernel: 2,
            stride: 1,
            padding: 0,
            groups: 1,
            bias: true,
        };
        let x: Vec<f64> = (1..=9).map(f64::from).collect();
        let y = conv2d_f64(&x, 1, [1, 3, 3], &conv, &[1.0; 4], Some(&[0.5]));
        assert_eq!(y, vec![12.5, 16.5, 24.5, 28.5]);
    }

    #[test]
    fn a_network_evaluates_to_finite_logits_and_keeps_every_node() {
        // The engine's tests compare all networks against this evaluator;
        // here only its own plumbing is checked, on the cheapest network.
        let g = (crate::find(dlas_core::Dataset::Cifar10, "mobilenetv1")
            .unwrap()
            .build)();
        let w = crate::weights::generate(&g, 1);
        let x = crate::weights::input(&g, 1, 1);
        let all = evaluate_all(&g, &w, &x, 1);
        assert_eq!(all.len(), g.nodes.len());
        let y = evaluate(&g, &w, &x, 1);
        assert_eq!(&y, all.last().unwrap());
        assert_eq!(y.len(), 10);
        assert!(y.iter().all(|v| v.is_finite()));
    }
}
