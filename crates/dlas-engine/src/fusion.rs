//! Graph fusion, the first pass of compiling: a graph and its weights in,
//! a plan of fused steps out, with no kernel chosen and nothing packed.
//!
//! Every batch norm (or layer scale) that directly follows a convolution is
//! folded into its weights and bias, and a following residual Add and activation become
//! the convolution's epilogue; an activation after a lone batch norm or Add
//! is fused into it. SiLU as ONNX exporters write it, `x * Sigmoid(x)`
//! (a Sigmoid and a Mul that are all that read x), is an activation too: a
//! SiLU fused like the others, not a stored sigmoid and a second pass. A
//! fused intermediate node has exactly one consumer
//! (the next node of its chain), so nothing else can observe that its value
//! was never stored.

use crate::attention::WindowAttention;
use crate::epilogue::Activation;
use crate::norm::LayerNorm;
use crate::workload::{Workload, workload_of};
use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, NodeId, Op, Pool};

/// Batch-norm epsilon, as in PyTorch and the reference.
const BN_EPS: f64 = 1e-5;

/// A convolution or linear layer after fusion, before lowering.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FusedConv {
    /// The convolution or linear node (for its name and int8 weight scales).
    pub node: NodeId,
    pub workload: Workload,
    /// (out, in / groups, k, k) row-major, batch norm folded in.
    pub weights: Vec<f32>,
    /// One per output channel (zeros for a layer without bias), batch
    /// norm folded in.
    pub bias: Vec<f32>,
    /// Per output channel, the factor folding multiplied the weights by (1
    /// without a batch norm): an int8 weight scale grows by as much.
    pub folded: Vec<f64>,
    pub act: Activation,
}

/// One step of a plan, generic over how a convolution is held: folded
/// weights ([`FusedConv`]) out of [`fuse`], a packed layer in an engine.
#[derive(Debug)]
pub(crate) enum Step<C> {
    Conv {
        conv: C,
        input: NodeId,
        residual: Option<NodeId>,
    },
    Affine {
        input: NodeId,
        scale: Vec<f32>,
        shift: Vec<f32>,
        act: Activation,
    },
    Unary {
        input: NodeId,
        act: Activation,
    },
    Add {
        a: NodeId,
        b: NodeId,
        act: Activation,
    },
    Mul {
        a: NodeId,
        b: NodeId,
    },
    Pool {
        input: NodeId,
        pool: Pool,
        max: bool,
    },
    GlobalAvgPool {
        input: NodeId,
    },
    Concat {
        inputs: Vec<NodeId>,
    },
    Flatten {
        input: NodeId,
    },
    LayerNorm {
        input: NodeId,
        norm: LayerNorm,
    },
    Gelu {
        input: NodeId,
    },
    Attention {
        input: NodeId,
        attention: WindowAttention,
    },
    ClassToken {
        input: NodeId,
        token: Vec<f32>,
    },
    PositionEmbedding {
        input: NodeId,
        embedding: Vec<f32>,
    },
    FirstToken {
        input: NodeId,
    },
    SpaceToDepth {
        input: NodeId,
    },
    /// An operator only imported models have (see `imported.rs`).
    Imported {
        input: NodeId,
        op: Op,
    },
}

/// (node whose value a step produces, the step), in execution order.
pub(crate) type Plan<C> = Vec<(NodeId, Step<C>)>;

impl<C> Step<C> {
    /// The nodes whose values the step reads.
    pub fn inputs(&self) -> Vec<NodeId> {
        match self {
            Step::Conv {
                input, residual, ..
            } => std::iter::once(*input).chain(*residual).collect(),
            Step::Add { a, b, .. } | Step::Mul { a, b } => vec![*a, *b],
            Step::Concat { inputs } => inputs.clone(),
            Step::Affine { input, .. }
            | Step::Unary { input, .. }
            | Step::Pool { input, .. }
            | Step::GlobalAvgPool { input }
            | Step::Flatten { input }
            | Step::LayerNorm { input, .. }
            | Step::Gelu { input }
            | Step::Attention { input, .. }
            | Step::ClassToken { input, .. }
            | Step::PositionEmbedding { input, .. }
            | Step::FirstToken { input }
            | Step::SpaceToDepth { input }
            | Step::Imported { input, .. } => vec![*input],
        }
    }

    /// The same step with its convolution replaced by `f(conv, input)`.
    pub fn map_conv<D, E>(self, f: impl FnOnce(C, NodeId) -> Result<D, E>) -> Result<Step<D>, E> {
        Ok(match self {
            Step::Conv {
                conv,
                input,
                residual,
            } => Step::Conv {
                conv: f(conv, input)?,
                input,
                residual,
            },
            Step::Affine {
                input,
                scale,
                shift,
                act,
            } => Step::Affine {
                input,
                scale,
                shift,
                act,
            },
            Step::Unary { input, act } => Step::Unary { input, act },
            Step::Add { a, b, act } => Step::Add { a, b, act },
            Step::Mul { a, b } => Step::Mul { a, b },
            Step::Pool { input, pool, max } => Step::Pool { input, pool, max },
            Step::GlobalAvgPool { input } => Step::GlobalAvgPool { input },
            Step::Concat { inputs } => Step::Concat { inputs },
            Step::Flatten { input } => Step::Flatten { input },
            Step::LayerNorm { input, norm } => Step::LayerNorm { input, norm },
            Step::Gelu { input } => Step::Gelu { input },
            Step::Attention { input, attention } => Step::Attention { input, attention },
            Step::ClassToken { input, token } => Step::ClassToken { input, token },
            Step::PositionEmbedding { input, embedding } => {
                Step::PositionEmbedding { input, embedding }
            }
            Step::FirstToken { input } => Step::FirstToken { input },
            Step::SpaceToDepth { input } => Step::SpaceToDepth { input },
            Step::Imported { input, op } => Step::Imported { input, op },
        })
    }
}

fn activation(op: &Op) -> Option<Activation> {
    Some(match op {
        Op::Relu => Activation::Relu,
        Op::Relu6 => Activation::Relu6,
        Op::Silu => Activation::Silu,
        Op::Sigmoid => Activation::Sigmoid,
        _ => return None,
    })
}

/// Per-channel (scale, shift) of a batch norm in inference form.
fn bn_affine(p: Option<&Params>) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let Some(Params::BatchNorm {
        gamma,
        beta,
        mean,
        var,
    }) = p
    else {
        anyhow::bail!("batch norm without its parameters");
    };
    let scale: Vec<f64> = gamma
        .iter()
        .zip(var)
        .map(|(&g, &v)| g as f64 / (v as f64 + BN_EPS).sqrt())
        .collect();
    let shift = beta
        .iter()
        .zip(mean)
        .zip(&scale)
        .map(|((&b, &m), s)| b as f64 - m as f64 * s)
        .collect();
    Ok((scale, shift))
}

/// A layer scale as a per-channel (scale, shift): ConvNeXt's follows a
/// 1x1 convolution, which folds it as it folds a batch norm.
fn layer_scale(p: Option<&Params>) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let Some(Params::Tensor(gamma)) = p else {
        anyhow::bail!("layer scale without its parameters");
    };
    Ok((
        gamma.iter().map(|&g| g as f64).collect(),
        vec![0.0; gamma.len()],
    ))
}

/// The one learned tensor of a node, or why it is missing.
fn tensor<'a>(p: Option<&'a Params>, node: &str) -> anyhow::Result<&'a [f32]> {
    match p {
        Some(Params::Tensor(t)) => Ok(t),
        _ => anyhow::bail!("node {node} lacks its learned tensor"),
    }
}

/// The fused plan of `graph` with `weights` (one entry per node), or why
/// the engine cannot run the graph (an operator it lacks, missing
/// parameters).
pub(crate) fn fuse(graph: &Graph, weights: &Weights) -> anyhow::Result<Plan<FusedConv>> {
    let n = graph.nodes.len();
    let mut consumers = vec![Vec::new(); n];
    for (id, node) in graph.nodes.iter().enumerate() {
        for &i in &node.inputs {
            consumers[i].push(id);
        }
    }
    // The single consumer of `id`, if it has exactly one.
    let only = |id: NodeId| match consumers[id].as_slice() {
        [c] => Some(*c),
        _ => None,
    };
    // `x * Sigmoid(x)` on `id`: its Sigmoid and Mul, if they are all that
    // read it.
    let silu = |id: NodeId| {
        let &[a, b] = consumers[id].as_slice() else {
            return None;
        };
        let (sig, mul) = if graph.nodes[a].op == Op::Sigmoid {
            (a, b)
        } else {
            (b, a)
        };
        let ins = graph.nodes[mul].inputs.as_slice();
        (graph.nodes[sig].op == Op::Sigmoid
            && graph.nodes[mul].op == Op::Mul
            && only(sig) == Some(mul)
            && (ins == [id, sig] || ins == [sig, id]))
        .then_some((sig, mul))
    };
    // The activation that alone consumes `id`, if any: the nodes it fuses
    // (the last one ends the step) and what it computes.
    let fused_activation = |id: NodeId| -> Option<(Vec<NodeId>, Activation)> {
        if let Some((sig, mul)) = silu(id) {
            return Some((vec![sig, mul], Activation::Silu));
        }
        only(id).and_then(|c| activation(&graph.nodes[c].op).map(|a| (vec![c], a)))
    };
    let mut fused = vec![false; n];
    let mut steps = Vec::new();
    for (id, node) in graph.nodes.iter().enumerate().skip(1) {
        if fused[id] {
            continue;
        }
        let params = weights.by_node[id].as_ref();
        let (end, step) = match &node.op {
            Op::Conv(_) | Op::Linear { .. } => {
                let w = workload_of(graph, id).expect("a convolution or linear node");
                let (mut wt, bias) = match params {
                    Some(Params::Conv { weight, bias }) => (
                        weight.iter().map(|&v| v as f64).collect::<Vec<_>>(),
                        bias.clone(),
                    ),
                    Some(Params::Linear { weight, bias }) => (
                        weight.iter().map(|&v| v as f64).collect(),
                        Some(bias.clone()),
                    ),
                    _ => anyhow::bail!("node {} lacks its weights", node.name),
                };
                let mut b: Vec<f64> = bias.map_or_else(
                    || vec![0.0; w.out_channels],
                    |b| b.iter().map(|&v| v as f64).collect(),
                );
                let mut end = id;
                let mut folded = vec![1.0f64; w.out_channels];
                if let Some(bn) = only(end)
                    .filter(|&c| matches!(graph.nodes[c].op, Op::BatchNorm | Op::LayerScale))
                {
                    let (scale, shift) = match graph.nodes[bn].op {
                        Op::LayerScale => layer_scale(weights.by_node[bn].as_ref())?,
                        _ => bn_affine(weights.by_node[bn].as_ref())?,
                    };
                    folded.clone_from(&scale);
                    let red = w.reduction();
                    for oc in 0..w.out_channels {
                        wt[oc * red..(oc + 1) * red]
                            .iter_mut()
                            .for_each(|v| *v *= scale[oc]);
                        b[oc] = b[oc] * scale[oc] + shift[oc];
                    }
                    fused[bn] = true;
                    end = bn;
                }
                let mut residual = None;
                if let Some(add) = only(end).filter(|&c| graph.nodes[c].op == Op::Add && !fused[c])
                {
                    let ins = &graph.nodes[add].inputs;
                    let other = if ins[0] == end { ins[1] } else { ins[0] };
                    // The other operand must already exist when this conv runs.
                    if other < id && other != end {
                        residual = Some(other);
                        fused[add] = true;
                        end = add;
                    }
                }
                let mut act = Activation::Identity;
                if let Some((nodes, a)) = fused_activation(end) {
                    act = a;
                    nodes.iter().for_each(|&c| fused[c] = true);
                    end = *nodes.last().expect("a fused node");
                }
                let conv = FusedConv {
                    node: id,
                    workload: w,
                    weights: wt.iter().map(|&v| v as f32).collect(),
                    bias: b.iter().map(|&v| v as f32).collect(),
                    folded,
                    act,
                };
                (
                    end,
                    Step::Conv {
                        conv,
                        input: node.inputs[0],
                        residual,
                    },
                )
            }
            Op::BatchNorm => {
                let (scale, shift) = bn_affine(params)?;
                let mut end = id;
                let mut act = Activation::Identity;
                if let Some((nodes, a)) = fused_activation(id) {
                    act = a;
                    nodes.iter().for_each(|&c| fused[c] = true);
                    end = *nodes.last().expect("a fused node");
                }
                let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
                (
                    end,
                    Step::Affine {
                        input: node.inputs[0],
                        scale: f(scale),
                        shift: f(shift),
                        act,
                    },
                )
            }
            Op::Relu | Op::Relu6 | Op::Silu | Op::Sigmoid => (
                id,
                Step::Unary {
                    input: node.inputs[0],
                    act: activation(&node.op).expect("an activation"),
                },
            ),
            Op::Add => {
                let mut end = id;
                let mut act = Activation::Identity;
                if let Some((nodes, a)) = fused_activation(id) {
                    act = a;
                    nodes.iter().for_each(|&c| fused[c] = true);
                    end = *nodes.last().expect("a fused node");
                }
                (
                    end,
                    Step::Add {
                        a: node.inputs[0],
                        b: node.inputs[1],
                        act,
                    },
                )
            }
            Op::Mul => (
                id,
                Step::Mul {
                    a: node.inputs[0],
                    b: node.inputs[1],
                },
            ),
            Op::MaxPool(p) | Op::AvgPool(p) => (
                id,
                Step::Pool {
                    input: node.inputs[0],
                    pool: *p,
                    max: matches!(node.op, Op::MaxPool(_)),
                },
            ),
            Op::GlobalAvgPool => (
                id,
                Step::GlobalAvgPool {
                    input: node.inputs[0],
                },
            ),
            Op::Concat => (
                id,
                Step::Concat {
                    inputs: node.inputs.clone(),
                },
            ),
            Op::Flatten => (
                id,
                Step::Flatten {
                    input: node.inputs[0],
                },
            ),
            Op::Pad(_)
            | Op::Softmax
            | Op::Lrn { .. }
            | Op::ChannelShuffle { .. }
            | Op::HardSigmoid { .. }
            | Op::HardSwish => (
                id,
                Step::Imported {
                    input: node.inputs[0],
                    op: node.op.clone(),
                },
            ),
            Op::Input => anyhow::bail!("node {} is a second input", node.name),
            Op::LayerNorm { eps } => {
                let Some(Params::LayerNorm { gamma, beta }) = params else {
                    anyhow::bail!("layer norm {} lacks its parameters", node.name);
                };
                let norm = LayerNorm {
                    gamma: gamma.clone(),
                    beta: beta.clone(),
                    eps: *eps as f32,
                };
                let input = node.inputs[0];
                (id, Step::LayerNorm { input, norm })
            }
            Op::Gelu => (
                id,
                Step::Gelu {
                    input: node.inputs[0],
                },
            ),
            Op::Attention(a) => {
                let table = match params {
                    Some(Params::Tensor(t)) => Some(t.as_slice()),
                    _ => None,
                };
                anyhow::ensure!(
                    table.map_or(0, <[f32]>::len) == a.bias_count(),
                    "attention {} lacks its relative-position table",
                    node.name
                );
                let input = node.inputs[0];
                let attention = WindowAttention::new(a, graph.nodes[input].shape, table);
                (id, Step::Attention { input, attention })
            }
            Op::ClassToken => (
                id,
                Step::ClassToken {
                    input: node.inputs[0],
                    token: tensor(params, &node.name)?.to_vec(),
                },
            ),
            Op::PositionEmbedding => (
                id,
                Step::PositionEmbedding {
                    input: node.inputs[0],
                    embedding: tensor(params, &node.name)?.to_vec(),
                },
            ),
            Op::FirstToken => (
                id,
                Step::FirstToken {
                    input: node.inputs[0],
                },
            ),
            Op::SpaceToDepth => (
                id,
                Step::SpaceToDepth {
                    input: node.inputs[0],
                },
            ),
            // One that follows no convolution (those fold it) is an affine
            // map without shift.
            Op::LayerScale => {
                let (scale, shift) = layer_scale(params)?;
                let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
                (
                    id,
                    Step::Affine {
                        input: node.inputs[0],
                        scale: f(scale),
                        shift: f(shift),
                        act: Activation::Identity,
                    },
                )
            }
        };
        steps.push((end, step));
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::Dataset;
    use dlas_zoo::GraphBuilder;
    use dlas_zoo::reference::{conv2d_f64, evaluate_all};
    use dlas_zoo::weights::{generate, input};

    /// A stem (conv, bn, relu) and a residual unit (conv, bn, add of the
    /// stem, relu) on a CIFAR-sized input.
    fn residual_unit() -> (Graph, [NodeId; 2]) {
        let mut b = GraphBuilder::new("unit", Dataset::Cifar10);
        let stem = b.conv_bn(b.input(), 8, 3, 1, 1, Some(Op::Relu));
        let y = b.conv_bn(stem, 8, 3, 1, 1, None);
        let sum = b.add(y, stem);
        let out = b.relu(sum);
        (b.finish(), [stem, out])
    }

    #[test]
    fn conv_bn_add_relu_is_one_step_with_its_epilogue() {
        let (graph, [stem, out]) = residual_unit();
        let plan = fuse(&graph, &generate(&graph, 1)).unwrap();
        let summary: Vec<_> = plan
            .iter()
            .map(|(end, step)| match step {
                Step::Conv {
                    conv,
                    input,
                    residual,
                } => (*end, conv.node, *input, *residual, conv.act),
                other => panic!("unfused step {other:?}"),
            })
            .collect();
        assert_eq!(
            summary,
            [
                (stem, 1, 0, None, Activation::Relu),
                (out, stem + 1, stem, Some(stem), Activation::Relu),
            ]
        );
    }

    /// Folding is exact up to storing the folded weights and bias as f32:
    /// the folded convolution equals the reference's conv then batch norm.
    #[test]
    fn folded_batch_norm_equals_the_unfused_reference() {
        let (graph, [stem, _]) = residual_unit();
        let weights = generate(&graph, 4);
        let x = input(&graph, 4, 1);
        let want = &evaluate_all(&graph, &weights, &x, 1)[stem - 1];
        let plan = fuse(&graph, &weights).unwrap();
        let Step::Conv { conv, .. } = &plan[0].1 else {
            panic!("the stem is a convolution step")
        };
        assert!(
            conv.folded.iter().any(|&f| f != 1.0),
            "a batch norm was folded"
        );
        let Op::Conv(c) = &graph.nodes[conv.node].op else {
            panic!("node 1 is the stem's convolution")
        };
        let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let got = conv2d_f64(
            &x64,
            1,
            graph.input_shape(),
            &dlas_zoo::Conv { bias: true, ..*c },
            &conv.weights,
            Some(&conv.bias),
        );
        let err: f64 = got.iter().zip(want).map(|(g, w)| (g - w).powi(2)).sum();
        let norm: f64 = want.iter().map(|w| w * w).sum();
        let rel = (err / norm).sqrt();
        assert!(rel < 1e-6, "relative error {rel}");
    }

    /// ConvNeXt's layer scale follows its second pointwise layer and
    /// folds into it, so the block's residual Add fuses too: no affine step
    /// is left.
    #[test]
    fn layer_scale_folds_into_its_convolution() {
        let graph = (dlas_zoo::find(Dataset::Imagenet, "blocks-convnext-1")
            .unwrap()
            .build)();
        let plan = fuse(&graph, &generate(&graph, 1)).unwrap();
        assert!(!plan.iter().any(|(_, s)| matches!(s, Step::Affine { .. })));
        let residuals = plan
            .iter()
            .filter(|(_, s)| {
                matches!(
                    s,
                    Step::Conv {
                        residual: Some(_),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(residuals, 1);
    }

    /// `x * Sigmoid(x)` after a convolution and its batch norm (how ONNX
    /// exporters write SiLU) is one step with a SiLU epilogue, equal to the
    /// reference.
    #[test]
    fn exported_silu_is_the_convolution_epilogue() {
        let mut b = GraphBuilder::new("silu", Dataset::Cifar10);
        let y = b.conv_bn(b.input(), 8, 3, 1, 1, None);
        let gate = b.unary(Op::Sigmoid, y);
        let out = b.mul(gate, y);
        let graph = b.finish();
        let weights = generate(&graph, 3);
        let plan = fuse(&graph, &weights).unwrap();
        assert!(matches!(
            plan.as_slice(),
            [(end, Step::Conv { conv, .. })] if *end == out && conv.act == Activation::Silu
        ));
        let x = input(&graph, 2, 1);
        let want = evaluate_all(&graph, &weights, &x, 1).pop().unwrap();
        let engine =
            crate::Engine::compile(&graph, &weights, &crate::EngineConfig::default()).unwrap();
        let got = engine.run(&x, 1).unwrap();
        let err: f64 = got
            .iter()
            .zip(&want)
            .map(|(&g, w)| (g as f64 - w).powi(2))
            .sum();
        let norm: f64 = want.iter().map(|w| w * w).sum();
        assert!(
            (err / norm).sqrt() < 1e-6,
            "relative error {}",
            (err / norm).sqrt()
        );
    }

    #[test]
    fn lone_batch_norm_and_add_take_their_activation() {
        let mut b = GraphBuilder::new("lone", Dataset::Cifar10);
        let x = b.input();
        let bn = b.batch_norm(x);
        let act = b.relu(bn);
        let sum = b.add(act, x);
        let out = b.unary(Op::Relu6, sum);
        let graph = b.finish();
        let plan = fuse(&graph, &generate(&graph, 2)).unwrap();
        assert!(matches!(
            plan.as_slice(),
            [
                (a, Step::Affine { input: 0, act: Activation::Relu, .. }),
                (o, Step::Add { act: Activation::Relu6, .. }),
            ] if *a == act && *o == out
        ));
    }
}
