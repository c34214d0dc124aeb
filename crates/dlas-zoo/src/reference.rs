//! A naive, obviously correct f64 evaluator of a [`Graph`]: the oracle every
//! optimised kernel is tested against, and the source of activation ranges
//! for quantisation calibration.
//!
//! Everything here is plain nested loops over NCHW tensors in f64, written
//! for reading, not speed: if a kernel disagrees with this module, the
//! kernel is wrong. Batch norm uses eps = 1e-5, as PyTorch does; layer
//! norm uses the node's own eps (timm's networks differ).

use crate::ir::{Attention, Conv, Graph, Op, Pool, Shape};
use crate::weights::{Params, Weights};

/// Outputs of one evaluation of a graph by any evaluator (this reference,
/// tract through `dlas-onnx`), each flattened batch-major (N, C, H, W).
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The network output, `batch * classes` values.
    pub output: Vec<f32>,
    /// Per node id: that node's output (node 0: the input), when requested.
    pub nodes: Option<Vec<Vec<f32>>>,
}

/// The relative L2 error of `got` (an evaluator's f32 output) against
/// `want` (this reference's): `||got - want|| / ||want||`, the measure
/// every test of a kernel or runtime against the reference uses.
pub fn relative_l2(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let err: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    (err / norm.max(1e-30)).sqrt()
}

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
    let (oh, ow) = (p.out(h), p.out(w));
    let mut out = Vec::with_capacity(batch * c * oh * ow);
    for plane in input.chunks(h * w).take(batch * c) {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut best = f64::NEG_INFINITY;
                let (mut sum, mut count) = (0.0, 0);
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
                        count += 1;
                    }
                }
                // Average pooling divides by the window's elements inside
                // the input, which only matters with padding.
                out.push(if max { best } else { sum / count as f64 });
            }
        }
    }
    out
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `x (1 + erf(x / sqrt 2)) / 2` written with erfc, `1 + erf(z) =
/// erfc(-z)`, which does not cancel for negative x (in f64 `1 + erf`
/// loses every digit below x = -8.3).
fn gelu(x: f64) -> f64 {
    0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// Layer norm over the channels of each position, with the biased variance
/// (as PyTorch).
fn layer_norm(input: &[f64], shape: Shape, eps: f64, gamma: &[f32], beta: &[f32]) -> Vec<f64> {
    let [c, h, w] = shape;
    let plane = h * w;
    let mut out = vec![0.0; input.len()];
    for (x, y) in input.chunks(c * plane).zip(out.chunks_mut(c * plane)) {
        for p in 0..plane {
            let at = |i: usize| x[i * plane + p];
            let mean = (0..c).map(at).sum::<f64>() / c as f64;
            let var = (0..c).map(|i| (at(i) - mean).powi(2)).sum::<f64>() / c as f64;
            let inv = 1.0 / (var + eps).sqrt();
            for i in 0..c {
                y[i * plane + p] = (at(i) - mean) * inv * gamma[i] as f64 + beta[i] as f64;
            }
        }
    }
    out
}

/// Multi-head self-attention of a batch of `qkv` tensors (`[3d, h, w]` =
/// `shape`), as [`Op::Attention`] documents it; `bias_table` is the
/// relative-position table, `((2 * window - 1)^2, heads)` row-major.
/// Returns (batch, d, h, w).
pub fn attention_f64(
    qkv: &[f64],
    batch: usize,
    shape: Shape,
    attention: &Attention,
    bias_table: Option<&[f32]>,
) -> Vec<f64> {
    let [c, h, w] = shape;
    let (d, plane, heads, shift) = (c / 3, h * w, attention.heads, attention.shift);
    let head_dim = d / heads;
    let (wh, ww) = attention.window_hw(h, w);
    let tokens = wh * ww;
    let scale = 1.0 / (head_dim as f64).sqrt();
    // Which of the three bands of the rolled grid a row or column is in:
    // after the roll by -shift, the last `shift` rows came from the top, so
    // a window may hold tokens of up to three bands per axis that were not
    // neighbours, and only tokens of one band attend to each other.
    let band = |pos: usize, size: usize, window: usize| match pos {
        _ if shift == 0 || pos < size - window => 0,
        _ if pos < size - shift => 1,
        _ => 2,
    };
    let mut out = vec![0.0; batch * d * plane];
    for (x, y) in qkv.chunks(c * plane).zip(out.chunks_mut(d * plane)) {
        for wy in 0..h / wh {
            for wx in 0..w / ww {
                // Each token of the window: where it sits in the sample
                // (its position before the roll) and its band pair.
                let window: Vec<(usize, usize)> = (0..tokens)
                    .map(|t| {
                        let (ry, rx) = (wy * wh + t / ww, wx * ww + t % ww);
                        let at = ((ry + shift) % h) * w + (rx + shift) % w;
                        (at, band(ry, h, wh) * 3 + band(rx, w, ww))
                    })
                    .collect();
                for head in 0..heads {
                    let value = |block: usize, k: usize, t: usize| {
                        x[(block * d + head * head_dim + k) * plane + window[t].0]
                    };
                    for i in 0..tokens {
                        let mut scores: Vec<f64> = (0..tokens)
                            .map(|j| {
                                let dot: f64 =
                                    (0..head_dim).map(|k| value(0, k, i) * value(1, k, j)).sum();
                                let mut score = dot * scale;
                                if let Some(table) = bias_table {
                                    let dy = i / ww + wh - 1 - j / ww;
                                    let dx = i % ww + ww - 1 - j % ww;
                                    score += table[(dy * (2 * ww - 1) + dx) * heads + head] as f64;
                                }
                                if window[i].1 != window[j].1 {
                                    score -= 100.0;
                                }
                                score
                            })
                            .collect();
                        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        scores.iter_mut().for_each(|s| *s = (*s - max).exp());
                        let total: f64 = scores.iter().sum();
                        for k in 0..head_dim {
                            let context: f64 =
                                (0..tokens).map(|j| scores[j] * value(2, k, j)).sum();
                            y[(head * head_dim + k) * plane + window[i].0] = context / total;
                        }
                    }
                }
            }
        }
    }
    out
}

/// Swin's patch merging (see [`Op::SpaceToDepth`]) of a batch of `shape`.
fn space_to_depth(input: &[f64], shape: Shape) -> Vec<f64> {
    let [c, h, w] = shape;
    let (oh, ow) = (h / 2, w / 2);
    let mut out = vec![0.0; input.len()];
    for (x, y) in input.chunks(c * h * w).zip(out.chunks_mut(c * h * w)) {
        for (dx, dy, i) in
            (0..2).flat_map(|dx| (0..2).flat_map(move |dy| (0..c).map(move |i| (dx, dy, i))))
        {
            let oc = (2 * dx + dy) * c + i;
            for oy in 0..oh {
                for ox in 0..ow {
                    y[(oc * oh + oy) * ow + ox] = x[(i * h + 2 * oy + dy) * w + 2 * ox + dx];
                }
            }
        }
    }
    out
}

/// Zero padding of each plane by (top, left, bottom, right).
fn pad(input: &[f64], [_, h, w]: Shape, [top, left, bottom, right]: [usize; 4]) -> Vec<f64> {
    let ow = w + left + right;
    let mut out = Vec::new();
    for plane in input.chunks(h * w) {
        out.resize(out.len() + top * ow, 0.0);
        for row in plane.chunks(w) {
            out.resize(out.len() + left, 0.0);
            out.extend_from_slice(row);
            out.resize(out.len() + right, 0.0);
        }
        out.resize(out.len() + bottom * ow, 0.0);
    }
    out
}

/// Softmax over the channels of each position.
fn softmax(input: &[f64], [c, h, w]: Shape) -> Vec<f64> {
    let plane = h * w;
    let mut out = vec![0.0; input.len()];
    for (x, y) in input.chunks(c * plane).zip(out.chunks_mut(c * plane)) {
        for p in 0..plane {
            let max = (0..c)
                .map(|i| x[i * plane + p])
                .fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = (0..c).map(|i| (x[i * plane + p] - max).exp()).sum();
            for i in 0..c {
                y[i * plane + p] = (x[i * plane + p] - max).exp() / total;
            }
        }
    }
    out
}

/// Local response normalisation across channels (see [`Op::Lrn`]).
fn lrn(input: &[f64], [c, h, w]: Shape, size: usize, alpha: f64, beta: f64, bias: f64) -> Vec<f64> {
    let plane = h * w;
    let mut out = vec![0.0; input.len()];
    for (x, y) in input.chunks(c * plane).zip(out.chunks_mut(c * plane)) {
        for i in 0..c {
            let window = i.saturating_sub((size - 1) / 2)..(i + size / 2 + 1).min(c);
            for p in 0..plane {
                let squares: f64 = window.clone().map(|j| x[j * plane + p].powi(2)).sum();
                y[i * plane + p] =
                    x[i * plane + p] / (bias + alpha / size as f64 * squares).powf(beta);
            }
        }
    }
    out
}

/// ShuffleNet's channel shuffle (see [`Op::ChannelShuffle`]).
fn channel_shuffle(input: &[f64], [c, h, w]: Shape, groups: usize) -> Vec<f64> {
    let (plane, per_group) = (h * w, c / groups);
    let mut out = Vec::with_capacity(input.len());
    for x in input.chunks(c * plane) {
        for i in 0..per_group {
            for g in 0..groups {
                out.extend_from_slice(&x[(g * per_group + i) * plane..][..plane]);
            }
        }
    }
    out
}

fn hard_sigmoid(x: f64, alpha: f64, beta: f64) -> f64 {
    (alpha * x + beta).clamp(0.0, 1.0)
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
        (Op::Gelu, _) => unary(&gelu),
        (Op::LayerNorm { eps }, Some(Params::LayerNorm { gamma, beta })) => {
            layer_norm(inputs[0], node.shape, *eps, gamma, beta)
        }
        (Op::Attention(a), p) => {
            let table = match p {
                Some(Params::Tensor(t)) => Some(t.as_slice()),
                _ => None,
            };
            assert_eq!(
                table.map_or(0, <[f32]>::len),
                a.bias_count(),
                "node {} needs its relative-position table",
                node.name
            );
            attention_f64(inputs[0], batch, in_shape(0), a, table)
        }
        (Op::LayerScale, Some(Params::Tensor(gamma))) => {
            let [c, h, w] = node.shape;
            inputs[0]
                .iter()
                .enumerate()
                .map(|(i, x)| x * gamma[i / (h * w) % c] as f64)
                .collect()
        }
        (Op::PositionEmbedding, Some(Params::Tensor(embedding))) => inputs[0]
            .iter()
            .zip(embedding.iter().cycle())
            .map(|(x, e)| x + *e as f64)
            .collect(),
        (Op::ClassToken, Some(Params::Tensor(token))) => {
            let [d, h, w] = in_shape(0);
            let mut out = Vec::with_capacity(batch * d * (h * w + 1));
            for (i, plane) in inputs[0].chunks(h * w).enumerate() {
                out.push(token[i % d] as f64);
                out.extend_from_slice(plane);
            }
            out
        }
        (Op::FirstToken, _) => {
            let [_, tokens, _] = in_shape(0);
            inputs[0].chunks(tokens).map(|seq| seq[0]).collect()
        }
        (Op::SpaceToDepth, _) => space_to_depth(inputs[0], in_shape(0)),
        (Op::Pad(pads), _) => pad(inputs[0], in_shape(0), *pads),
        (Op::Softmax, _) => softmax(inputs[0], node.shape),
        (
            Op::Lrn {
                size,
                alpha,
                beta,
                bias,
            },
            _,
        ) => lrn(inputs[0], node.shape, *size, *alpha, *beta, *bias),
        (Op::ChannelShuffle { groups }, _) => channel_shuffle(inputs[0], node.shape, *groups),
        (Op::HardSigmoid { alpha, beta }, _) => unary(&|x| hard_sigmoid(x, *alpha, *beta)),
        (Op::HardSwish, _) => unary(&|x| x * hard_sigmoid(x, 1.0 / 6.0, 0.5)),
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

    /// Two tokens of one dimension, one head: token 0's query against the
    /// keys 0 and ln 3 weighs the values 1:3; token 1's zero query weighs
    /// them equally.
    #[test]
    fn attention_of_a_known_case() {
        let a = Attention {
            heads: 1,
            window: None,
            shift: 0,
            relative_bias: false,
        };
        // Channels q, k, v of tokens (0, 1).
        let qkv = [1.0, 0.0, 0.0, 3f64.ln(), 4.0, 8.0];
        let y = attention_f64(&qkv, 1, [3, 2, 1], &a, None);
        assert!(
            (y[0] - 7.0).abs() < 1e-12 && (y[1] - 6.0).abs() < 1e-12,
            "{y:?}"
        );
    }

    /// Windows of one token attend to themselves only: the output is v,
    /// whatever the queries, keys and relative biases.
    #[test]
    fn one_token_windows_give_their_values() {
        let a = Attention {
            heads: 2,
            window: Some(1),
            shift: 0,
            relative_bias: true,
        };
        let qkv: Vec<f64> = (0..12 * 4).map(|i| (i as f64 * 0.37).sin()).collect();
        let y = attention_f64(&qkv, 1, [12, 2, 2], &a, Some(&[0.5, -0.5]));
        assert_eq!(y, qkv[8 * 4..]);
    }

    #[test]
    fn layer_norm_gelu_and_patch_merging_of_known_cases() {
        let y = layer_norm(&[1.0, 3.0], [2, 1, 1], 0.0, &[2.0, 1.0], &[0.0, 0.5]);
        assert_eq!(y, vec![-2.0, 1.5]);
        // Phi(1), the standard normal distribution function at 1.
        assert!((gelu(1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
        // Two groups of two channels interleave.
        assert_eq!(
            channel_shuffle(&[0.0, 1.0, 2.0, 3.0], [4, 1, 1], 2),
            vec![0.0, 2.0, 1.0, 3.0]
        );
        assert_eq!(
            pad(&[1.0, 2.0], [1, 1, 2], [0, 1, 1, 0]),
            vec![0.0, 1.0, 2.0, 0.0, 0.0, 0.0]
        );
        let p = softmax(&[0.0, 2f64.ln()], [2, 1, 1]);
        assert!((p[0] - 1.0 / 3.0).abs() < 1e-15 && (p[1] - 2.0 / 3.0).abs() < 1e-15);
        // Size 3 over 2 channels: both see both; 3 / (1 + 1 / 3 * 25)^1 = 0.3.
        let y = lrn(&[3.0, 4.0], [2, 1, 1], 3, 1.0, 1.0, 1.0);
        assert!((y[0] - 3.0 / (1.0 + 25.0 / 3.0)).abs() < 1e-15);
        // One channel, rows (1 2) (3 4): channels in (dx, dy) order.
        assert_eq!(
            space_to_depth(&[1.0, 2.0, 3.0, 4.0], [1, 2, 2]),
            vec![1.0, 3.0, 2.0, 4.0]
        );
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
