//! Structured (L1) pruning of convolution output channels, either zeroing
//! the channels in place or removing them from the graph.
//!
//! Channels are tied when they must go together: a residual `Add` or a
//! broadcast `Mul` combines channel `i` of its operands, a depthwise conv
//! reads and writes channel `i` in lockstep, element-wise operators and
//! pooling keep channel `i`, a `Concat` places each input's channels at an
//! offset, and a `Flatten` spreads a channel over its `h * w` features. A
//! union-find over every channel of every tensor groups tied channels; a
//! group is the unit that is ranked and pruned. Groups holding a channel of
//! the network input or output are never pruned.
//!
//! Groups are ranked across the network by the L1 norms of their
//! convolution filters, each divided by the mean filter norm of its layer
//! (and averaged over the group's filters). Raw norms scale with a layer's
//! fan-in and initialisation (He: L1 grows as the square root of the
//! fan-in; the mean magnitude shrinks as its inverse), so an unnormalised
//! global ranking empties whole early or whole late layers before touching
//! the others. No node is ever left without a channel, so at high levels
//! fewer groups than requested may go.

use crate::{check_level, check_weights};
use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, Node, Op};
use serde::{Deserialize, Serialize};

/// What happens to a pruned channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Removal {
    /// The channel's filters, biases and batch-norm scale and shift become
    /// zero, as do the weights that read it, so its activation is exactly
    /// zero; shapes are unchanged (the study's choice, for sparse formats).
    #[default]
    Zero,
    /// The channel is removed and every consumer shrinks: a smaller dense model.
    Remove,
}

impl std::str::FromStr for Removal {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Removal> {
        match s {
            "zero" => Ok(Removal::Zero),
            "remove" => Ok(Removal::Remove),
            _ => anyhow::bail!("unknown removal `{s}`; valid values: zero, remove"),
        }
    }
}

/// Prunes `round(level * groups)` channel groups of lowest normalised L1
/// norm, where `groups` counts the prunable groups of tied channels.
pub fn prune_channels(
    graph: &Graph,
    weights: &Weights,
    level: f64,
    removal: Removal,
) -> anyhow::Result<(Graph, Weights)> {
    check_level(level)?;
    check_weights(graph, weights)?;
    let ties = Ties::new(graph)?;
    let pruned = ties.select(graph, weights, level);
    Ok(match removal {
        Removal::Zero => (graph.clone(), zero(graph, weights, &ties, &pruned)),
        Removal::Remove => remove(graph, weights, &ties, &pruned),
    })
}

/// Every channel of every tensor, grouped by union-find.
struct Ties {
    /// Index of node `n`'s first channel.
    offset: Vec<usize>,
    parent: Vec<usize>,
}

/// Channels of a node's output: features for a flattened tensor.
fn width(node: &Node) -> usize {
    node.shape[0]
}

impl Ties {
    fn new(graph: &Graph) -> anyhow::Result<Ties> {
        let mut offset = Vec::with_capacity(graph.nodes.len());
        let mut total = 0;
        for node in &graph.nodes {
            offset.push(total);
            total += width(node);
        }
        let mut ties = Ties {
            offset,
            parent: (0..total).collect(),
        };
        for (id, node) in graph.nodes.iter().enumerate() {
            let same = |ties: &mut Ties, input: usize| {
                for c in 0..width(node) {
                    ties.union(ties.offset[id] + c, ties.offset[input] + c);
                }
            };
            match &node.op {
                Op::Input | Op::Linear { .. } => {}
                Op::Conv(c) if c.groups == 1 => {}
                Op::Conv(c) if c.is_depthwise() => same(&mut ties, node.inputs[0]),
                Op::Conv(c) => anyhow::bail!(
                    "channel pruning cannot handle node {} (Conv with {} groups of {} channels): only plain (1 group) and depthwise convolutions keep channels separable",
                    node.name,
                    c.groups,
                    c.in_channels / c.groups
                ),
                Op::BatchNorm
                | Op::Relu
                | Op::Relu6
                | Op::Silu
                | Op::Sigmoid
                | Op::MaxPool(_)
                | Op::AvgPool(_)
                | Op::GlobalAvgPool
                | Op::Add
                | Op::Mul
                | Op::Pad(_)
                | Op::HardSigmoid { .. }
                | Op::HardSwish => {
                    for &input in &node.inputs {
                        same(&mut ties, input);
                    }
                }
                Op::Concat => {
                    let mut at = ties.offset[id];
                    for &input in &node.inputs {
                        for c in 0..width(&graph.nodes[input]) {
                            ties.union(at, ties.offset[input] + c);
                            at += 1;
                        }
                    }
                }
                Op::LayerNorm { .. }
                | Op::Gelu
                | Op::Attention(_)
                | Op::ClassToken
                | Op::PositionEmbedding
                | Op::FirstToken
                | Op::SpaceToDepth
                | Op::LayerScale => anyhow::bail!(
                    "channel pruning cannot handle node {} ({}): only the convolutional networks' operators keep channels separable",
                    node.name,
                    node.op.kind()
                ),
                // Each output channel depends on several input channels.
                Op::Softmax | Op::Lrn { .. } | Op::ChannelShuffle { .. } => anyhow::bail!(
                    "channel pruning cannot handle node {} ({}): it mixes channels",
                    node.name,
                    node.op.kind()
                ),
                Op::Flatten => {
                    let [_, h, w] = graph.nodes[node.inputs[0]].shape;
                    for f in 0..width(node) {
                        ties.union(
                            ties.offset[id] + f,
                            ties.offset[node.inputs[0]] + f / (h * w),
                        );
                    }
                }
            }
        }
        Ok(ties)
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.parent[a.max(b)] = a.min(b);
        }
    }

    fn root(&self, node: usize, channel: usize) -> usize {
        let mut x = self.offset[node] + channel;
        while self.parent[x] != x {
            x = self.parent[x];
        }
        x
    }

    /// The pruned groups, as a flag per group root.
    fn select(&self, graph: &Graph, weights: &Weights, level: f64) -> Vec<bool> {
        let n = self.parent.len();
        let last = graph.nodes.len() - 1;
        let mut forbidden = vec![false; n];
        let mut score = vec![0.0f64; n];
        let mut filters = vec![0usize; n];
        // Which nodes each group touches, and how many of their channels.
        let mut members: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
        for (id, node) in graph.nodes.iter().enumerate() {
            let fixed = matches!(node.op, Op::Input | Op::Linear { .. }) || id == last;
            for c in 0..width(node) {
                let r = self.root(id, c);
                forbidden[r] |= fixed;
                match members[r].last_mut() {
                    Some((m, count)) if *m == id => *count += 1,
                    _ => members[r].push((id, 1)),
                }
            }
            if let (Op::Conv(conv), Some(Params::Conv { weight, .. })) =
                (&node.op, &weights.by_node[id])
                && conv.groups == 1
            {
                let per = weight.len() / conv.out_channels;
                let norms: Vec<f64> = weight
                    .chunks(per)
                    .map(|f| f.iter().map(|w| w.abs() as f64).sum())
                    .collect();
                let layer_mean = norms.iter().sum::<f64>() / norms.len() as f64;
                for (c, norm) in norms.iter().enumerate() {
                    let r = self.root(id, c);
                    score[r] += if layer_mean > 0.0 {
                        norm / layer_mean
                    } else {
                        0.0
                    };
                    filters[r] += 1;
                }
            }
        }
        let mut groups: Vec<usize> = (0..n)
            .filter(|&r| self.parent[r] == r && !forbidden[r] && filters[r] > 0)
            .collect();
        let mean = |r: usize| score[r] / filters[r] as f64;
        groups.sort_by(|&a, &b| mean(a).total_cmp(&mean(b)).then(a.cmp(&b)));
        let target = (level * groups.len() as f64).round() as usize;
        let mut remaining: Vec<usize> = graph.nodes.iter().map(width).collect();
        let mut pruned = vec![false; n];
        let mut count = 0;
        for r in groups {
            if count == target {
                break;
            }
            if members[r].iter().all(|&(id, k)| remaining[id] > k) {
                for &(id, k) in &members[r] {
                    remaining[id] -= k;
                }
                pruned[r] = true;
                count += 1;
            }
        }
        pruned
    }

    /// Kept channels of every node, in order.
    fn kept(&self, graph: &Graph, pruned: &[bool]) -> Vec<Vec<usize>> {
        graph
            .nodes
            .iter()
            .enumerate()
            .map(|(id, node)| {
                (0..width(node))
                    .filter(|&c| !pruned[self.root(id, c)])
                    .collect()
            })
            .collect()
    }
}

fn zero(graph: &Graph, weights: &Weights, ties: &Ties, pruned: &[bool]) -> Weights {
    let mut out = weights.clone();
    let gone = |id: usize, c: usize| pruned[ties.root(id, c)];
    for (id, node) in graph.nodes.iter().enumerate() {
        match (&node.op, &mut out.by_node[id]) {
            (Op::Conv(conv), Some(Params::Conv { weight, bias })) => {
                let input = node.inputs[0];
                let per_in = conv.kernel * conv.kernel;
                let per = weight.len() / conv.out_channels;
                for (o, filter) in weight.chunks_mut(per).enumerate() {
                    if gone(id, o) {
                        filter.fill(0.0);
                        if let Some(b) = bias.as_mut() {
                            b[o] = 0.0;
                        }
                    } else if conv.groups == 1 {
                        for (i, slice) in filter.chunks_mut(per_in).enumerate() {
                            if gone(input, i) {
                                slice.fill(0.0);
                            }
                        }
                    }
                }
            }
            (Op::BatchNorm, Some(Params::BatchNorm { gamma, beta, .. })) => {
                for c in 0..gamma.len() {
                    if gone(id, c) {
                        gamma[c] = 0.0;
                        beta[c] = 0.0;
                    }
                }
            }
            (Op::Linear { in_features, .. }, Some(Params::Linear { weight, .. })) => {
                for row in weight.chunks_mut(*in_features) {
                    for (f, w) in row.iter_mut().enumerate() {
                        if gone(node.inputs[0], f) {
                            *w = 0.0;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn remove(graph: &Graph, weights: &Weights, ties: &Ties, pruned: &[bool]) -> (Graph, Weights) {
    let kept = ties.kept(graph, pruned);
    let mut nodes = Vec::with_capacity(graph.nodes.len());
    let mut by_node = Vec::with_capacity(graph.nodes.len());
    for (id, node) in graph.nodes.iter().enumerate() {
        let mut node = node.clone();
        node.shape[0] = kept[id].len();
        let params = weights.by_node[id].as_ref();
        let params = match (&mut node.op, params) {
            (Op::Conv(conv), Some(Params::Conv { weight, bias })) => {
                let (outs, ins) = (&kept[id], &kept[node.inputs[0]]);
                let per_in = conv.kernel * conv.kernel;
                let per = weight.len() / conv.out_channels;
                let mut w = Vec::new();
                for &o in outs {
                    let filter = &weight[o * per..(o + 1) * per];
                    if conv.groups == 1 {
                        for &i in ins {
                            w.extend_from_slice(&filter[i * per_in..(i + 1) * per_in]);
                        }
                    } else {
                        w.extend_from_slice(filter);
                    }
                }
                if conv.groups > 1 {
                    conv.groups = outs.len();
                }
                conv.in_channels = ins.len();
                conv.out_channels = outs.len();
                Some(Params::Conv {
                    weight: w,
                    bias: bias.as_ref().map(|b| outs.iter().map(|&o| b[o]).collect()),
                })
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
                let pick = |v: &[f32]| kept[id].iter().map(|&c| v[c]).collect();
                Some(Params::BatchNorm {
                    gamma: pick(gamma),
                    beta: pick(beta),
                    mean: pick(mean),
                    var: pick(var),
                })
            }
            (
                Op::Linear {
                    in_features,
                    out_features,
                },
                Some(Params::Linear { weight, bias }),
            ) => {
                let ins = &kept[node.inputs[0]];
                let w = weight
                    .chunks(*in_features)
                    .flat_map(|row| ins.iter().map(|&f| row[f]))
                    .collect();
                *in_features = ins.len();
                debug_assert_eq!(*out_features, kept[id].len());
                Some(Params::Linear {
                    weight: w,
                    bias: bias.clone(),
                })
            }
            (_, params) => params.cloned(),
        };
        nodes.push(node);
        by_node.push(params);
    }
    (
        Graph {
            name: graph.name.clone(),
            dataset: graph.dataset,
            nodes,
        },
        Weights {
            seed: weights.seed,
            by_node,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Evaluator, Numerics, Tract};
    use dlas_core::Dataset;
    use dlas_zoo::{GraphBuilder, weights};

    fn net(name: &str) -> (Graph, Weights) {
        let g = (dlas_zoo::find(Dataset::Cifar10, name).unwrap().build)();
        let w = weights::generate(&g, 1);
        (g, w)
    }

    /// Removing channels and zeroing them are the same function: the
    /// smaller graph's outputs equal the zeroed graph's, per node and at the
    /// output, and it still exports and runs.
    #[test]
    fn removal_equals_zeroing_on_residual_and_depthwise_networks() {
        for name in ["resnet18", "mobilenetv2"] {
            let (g, w) = net(name);
            let (zg, zw) = prune_channels(&g, &w, 0.5, Removal::Zero).unwrap();
            let (rg, rw) = prune_channels(&g, &w, 0.5, Removal::Remove).unwrap();
            check_weights(&rg, &rw).unwrap();
            assert!(
                rg.params() < g.params() * 7 / 10,
                "{name}: {} of {}",
                rg.params(),
                g.params()
            );
            assert!(rg.macs() < g.macs());
            assert_eq!(rg.output().shape, g.output().shape);
            let x = weights::input(&g, 5, 2);
            let z = Tract
                .evaluate(&zg, &zw, &Numerics::F32, &x, 2, false)
                .unwrap()
                .output;
            let r = Tract
                .evaluate(&rg, &rw, &Numerics::F32, &x, 2, false)
                .unwrap()
                .output;
            let scale = z.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (a, b) in z.iter().zip(&r) {
                assert!((a - b).abs() <= 1e-4 * scale.max(1.0), "{name}: {a} vs {b}");
            }
        }
    }

    fn assert_equivalent(g: &Graph, w: &Weights, level: f64, batch: usize) {
        let (zg, zw) = prune_channels(g, w, level, Removal::Zero).unwrap();
        let (rg, rw) = prune_channels(g, w, level, Removal::Remove).unwrap();
        check_weights(&rg, &rw).unwrap();
        assert!(rg.params() < g.params(), "{}", g.name);
        let x = weights::input(g, 5, batch);
        let z = Tract
            .evaluate(&zg, &zw, &Numerics::F32, &x, batch, false)
            .unwrap()
            .output;
        let r = Tract
            .evaluate(&rg, &rw, &Numerics::F32, &x, batch, false)
            .unwrap()
            .output;
        let scale = z.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1.0);
        for (a, b) in z.iter().zip(&r) {
            assert!((a - b).abs() <= 1e-4 * scale, "{}: {a} vs {b}", g.name);
        }
    }

    /// Concatenations with pre-activation batch norm, as in DenseNet: a
    /// channel of a concat input is the same channel of the concat output,
    /// read by several batch norms.
    #[test]
    fn removal_equals_zeroing_through_concatenations() {
        let mut b = GraphBuilder::new("dense-block", Dataset::Cifar10);
        let mut x = b.conv(0, 16, 3, 1, 1, 1, false);
        for _ in 0..3 {
            let y = b.batch_norm(x);
            let y = b.relu(y);
            let y = b.conv(y, 8, 3, 1, 1, 1, false);
            x = b.concat(&[x, y]);
        }
        let y = b.batch_norm(x);
        let y = b.relu(y);
        let y = b.conv(y, 12, 1, 1, 0, 1, false);
        let y = b.avg_pool(y, 2, 2);
        // A flatten over 16x16 positions: a channel is 256 features.
        let y = b.flatten(y);
        b.linear(y, 10);
        let g = b.finish();
        let w = weights::generate(&g, 3);
        assert_equivalent(&g, &w, 0.4, 2);
    }

    /// Squeeze-and-excitation (a broadcast Mul of a sigmoid gate), SiLU and
    /// depthwise convolutions, as in EfficientNet.
    #[test]
    fn removal_equals_zeroing_on_efficientnet() {
        let g = (dlas_zoo::find(Dataset::Imagenet, "efficientnet_b0")
            .unwrap()
            .build)();
        let w = weights::generate(&g, 1);
        assert_equivalent(&g, &w, 0.5, 1);
    }

    /// Every network of the zoo can lose channels and stay a valid graph.
    #[test]
    fn every_network_shrinks_to_a_valid_graph() {
        for net in dlas_zoo::catalogue() {
            let g = (net.build)();
            let w = weights::generate(&g, 1);
            let (rg, rw) = prune_channels(&g, &w, 0.5, Removal::Remove).unwrap();
            check_weights(&rg, &rw).unwrap();
            assert!(
                rg.params() < g.params() && rg.macs() < g.macs(),
                "{}",
                net.name
            );
            assert_eq!(rg.output().shape, g.output().shape);
            assert_eq!(rg.input_shape(), g.input_shape());
        }
    }

    #[test]
    fn zeroed_channels_are_zero_and_groups_stay_tied() {
        let (g, w) = net("resnet18");
        let (_, zw) = prune_channels(&g, &w, 0.3, Removal::Zero).unwrap();
        let ties = Ties::new(&g).unwrap();
        let pruned = ties.select(&g, &w, 0.3);
        let (rg, _) = prune_channels(&g, &w, 0.3, Removal::Remove).unwrap();
        for (id, node) in g.nodes.iter().enumerate() {
            // Residual sums keep equal widths.
            if let Op::Add = node.op {
                let widths: Vec<usize> =
                    node.inputs.iter().map(|&i| rg.nodes[i].shape[0]).collect();
                assert!(widths.iter().all(|&c| c == rg.nodes[id].shape[0]));
            }
            if let Some(Params::Conv { weight, .. }) = &zw.by_node[id] {
                let per = weight.len() / node.shape[0];
                for (o, f) in weight.chunks(per).enumerate() {
                    if pruned[ties.root(id, o)] {
                        assert!(f.iter().all(|v| *v == 0.0));
                    }
                }
            }
        }
        assert_eq!(rg.output().shape, [10, 1, 1]);
    }

    #[test]
    fn level_zero_changes_nothing() {
        let (g, w) = net("mobilenetv1");
        let (rg, rw) = prune_channels(&g, &w, 0.0, Removal::Remove).unwrap();
        assert_eq!((rg, rw), (g, w));
    }

    #[test]
    fn grouped_convolutions_are_refused_by_name() {
        let mut b = GraphBuilder::new("grouped", Dataset::Cifar10);
        let x = b.conv(0, 8, 3, 1, 1, 1, false);
        let x = b.conv(x, 8, 3, 1, 1, 2, false);
        let x = b.global_avg_pool(x);
        let x = b.flatten(x);
        b.linear(x, 10);
        let g = b.finish();
        let w = weights::generate(&g, 1);
        let e = prune_channels(&g, &w, 0.5, Removal::Remove)
            .unwrap_err()
            .to_string();
        assert!(e.contains("conv2") && e.contains("2 groups"), "{e}");
    }
}
