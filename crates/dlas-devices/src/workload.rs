//! The work a network does, as the kernels a compiler would launch.
//!
//! Batch norm and element-wise operators that directly follow a convolution
//! or linear layer are fused into it (as TVM and the native engine do);
//! pooling, concatenation, broadcast products and pre-activation operators
//! are kernels of their own.
//!
//! Transformer operators: attention is two batched products of
//! activations ([`KernelKind::MatMul`]: queries by keys, weights by values)
//! around a softmax (a memory-bound kernel into which the scale, the
//! relative-position bias and the shift mask are fused); the window
//! partition, rolls and head split are addressing of those kernels, not
//! kernels. Layer norm (a reduction over channels, so no convolution's
//! epilogue), the class token, the first-token slice and patch merging are
//! memory-bound kernels; GELU, layer scale and position embedding are
//! element-wise, so they fuse like the activations.
//!
//! Compression enters as the fraction of weights each layer keeps, measured
//! by the compression stage on the pruned weights (a global threshold prunes
//! layers differently). Without such a measurement, pruning at level p is
//! taken to keep 1 - p of every layer's weights.

use dlas_core::{Combination, Compression, ConvShape};
use dlas_zoo::{Graph, Op};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub enum KernelKind {
    /// A convolution, by its shape on its input map.
    Conv(ConvShape),
    Linear,
    /// A product of two activations (attention's scores and context): MACs
    /// but no weights, so weight sparsity does not apply.
    MatMul,
    /// Memory-bound operators: pooling, concatenation, element-wise,
    /// normalisation, softmax.
    Memory,
}

/// One launched kernel, for one sample; [`Workload::batch`] scales it.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub kind: KernelKind,
    /// Output spatial size (1 x 1 for linear layers).
    pub out_hw: [usize; 2],
    /// Multiply-accumulates of the dense layer.
    pub macs: f64,
    /// Fraction of the weights that are non-zero.
    pub density: f64,
    pub input_elems: f64,
    pub output_elems: f64,
    pub weight_elems: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub kernels: Vec<Kernel>,
    pub batch: usize,
    pub compression: Compression,
    /// Values of one sample's network input and output: what an engine
    /// copies or converts once per run.
    pub input_values: f64,
    pub output_values: f64,
}

/// Fraction of non-zero weights per layer (node name → density).
pub type Densities = BTreeMap<String, f64>;

impl Workload {
    /// The kernels of `graph` under `combination`; `densities` gives each
    /// layer's measured weight density (layers not listed are dense).
    pub fn new(
        graph: &Graph,
        combination: &Combination,
        densities: Option<&Densities>,
    ) -> Workload {
        let uniform = if combination.compression.is_pruning() {
            1.0 - combination.level
        } else {
            1.0
        };
        let density_of = |name: &str| match densities {
            Some(d) => d.get(name).copied().unwrap_or(1.0),
            None => uniform,
        };
        let consumers = consumer_counts(graph);
        let mut fused_into = vec![None::<usize>; graph.nodes.len()];
        let mut kernels: Vec<Kernel> = Vec::new();
        for (id, node) in graph.nodes.iter().enumerate() {
            let elems = |shape: [usize; 3]| shape.iter().product::<usize>() as f64;
            let input_elems: f64 = node
                .inputs
                .iter()
                .map(|&i| elems(graph.nodes[i].shape))
                .sum();
            match &node.op {
                Op::Input | Op::Flatten => {}
                Op::Conv(c) => {
                    let [_, h, w] = graph.nodes[node.inputs[0]].shape;
                    kernels.push(Kernel {
                        name: node.name.clone(),
                        kind: KernelKind::Conv(c.shape_on([h, w])),
                        out_hw: [node.shape[1], node.shape[2]],
                        macs: node.macs() as f64,
                        density: density_of(&node.name),
                        input_elems,
                        output_elems: elems(node.shape),
                        weight_elems: c.weight_count() as f64,
                    });
                    fused_into[id] = Some(kernels.len() - 1);
                }
                Op::Linear { .. } => {
                    kernels.push(Kernel {
                        name: node.name.clone(),
                        kind: KernelKind::Linear,
                        out_hw: [1, 1],
                        macs: node.macs() as f64,
                        density: density_of(&node.name),
                        input_elems,
                        output_elems: elems(node.shape),
                        weight_elems: node.macs() as f64,
                    });
                    fused_into[id] = Some(kernels.len() - 1);
                }
                Op::BatchNorm
                | Op::Relu
                | Op::Relu6
                | Op::Silu
                | Op::Sigmoid
                | Op::Gelu
                | Op::LayerScale
                | Op::PositionEmbedding
                | Op::HardSigmoid { .. }
                | Op::HardSwish
                | Op::Add => {
                    // An epilogue of the layer that produced either operand
                    // (a residual Add may name the layer second), if that
                    // layer's output has no other reader.
                    let fusable = node
                        .inputs
                        .iter()
                        .find_map(|&i| fused_into[i].filter(|_| consumers[i] == 1));
                    match fusable {
                        Some(k) => fused_into[id] = Some(k),
                        None => {
                            kernels.push(memory_kernel(&node.name, input_elems, elems(node.shape)))
                        }
                    }
                }
                Op::Mul
                | Op::MaxPool(_)
                | Op::AvgPool(_)
                | Op::GlobalAvgPool
                | Op::Concat
                | Op::FirstToken
                | Op::SpaceToDepth
                | Op::Pad(_)
                | Op::Softmax
                | Op::Lrn { .. }
                | Op::ChannelShuffle { .. } => {
                    kernels.push(memory_kernel(&node.name, input_elems, elems(node.shape)));
                }
                // These also read their learned tensors.
                Op::LayerNorm { .. } | Op::ClassToken => {
                    let reads = input_elems + node.params() as f64;
                    kernels.push(memory_kernel(&node.name, reads, elems(node.shape)));
                }
                Op::Attention(a) => {
                    let [d, h, w] = node.shape;
                    let (wh, ww) = a.window_hw(h, w);
                    let tokens = wh * ww;
                    let scores = (a.heads * (h / wh) * (w / ww) * tokens * tokens) as f64;
                    let tokens_elems = (d * h * w) as f64;
                    let product = |name: &str, input_elems: f64, output_elems: f64| Kernel {
                        name: format!("{}.{name}", node.name),
                        kind: KernelKind::MatMul,
                        out_hw: [1, 1],
                        macs: node.macs() as f64 / 2.0,
                        density: 1.0,
                        input_elems,
                        output_elems,
                        weight_elems: 0.0,
                    };
                    kernels.push(product("scores", 2.0 * tokens_elems, scores));
                    kernels.push(memory_kernel(
                        &format!("{}.softmax", node.name),
                        scores + node.params() as f64,
                        scores,
                    ));
                    kernels.push(product("context", scores + tokens_elems, tokens_elems));
                }
            }
        }
        Workload {
            kernels,
            batch: combination.batch,
            compression: combination.compression,
            input_values: graph.input_shape().iter().product::<usize>() as f64,
            output_values: graph.output().shape.iter().product::<usize>() as f64,
        }
    }
}

fn memory_kernel(name: &str, input_elems: f64, output_elems: f64) -> Kernel {
    Kernel {
        name: name.to_string(),
        kind: KernelKind::Memory,
        out_hw: [1, 1],
        macs: 0.0,
        density: 1.0,
        input_elems,
        output_elems,
        weight_elems: 0.0,
    }
}

fn consumer_counts(graph: &Graph) -> Vec<usize> {
    let mut counts = vec![0; graph.nodes.len()];
    for node in &graph.nodes {
        for &i in &node.inputs {
            counts[i] += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::{Algorithm, Dataset, Format, Layout};

    fn combination(compression: Compression, level: f64) -> Combination {
        Combination {
            dataset: Dataset::Cifar10,
            model: "resnet18".into(),
            compression,
            level,
            algorithm: Algorithm::Direct,
            format: Format::Dense,
            layout: Layout::Nchw,
            compiler: dlas_core::NATIVE.into(),
            tuned: false,
            device: "i7".into(),
            batch: 1,
        }
    }

    #[test]
    fn resnet18_fuses_bn_relu_and_residual_adds() {
        let graph = (dlas_zoo::find(Dataset::Cifar10, "resnet18").unwrap().build)();
        let w = Workload::new(&graph, &combination(Compression::Dense, 0.0), None);
        let convs = w
            .kernels
            .iter()
            .filter(|k| matches!(k.kind, KernelKind::Conv(_)))
            .count();
        let memory = w
            .kernels
            .iter()
            .filter(|k| k.kind == KernelKind::Memory)
            .count();
        // 20 convolutions, 1 linear, and the global pool; every BN, ReLU and Add is fused.
        assert_eq!((convs, memory, w.kernels.len()), (20, 1, 22));
        let macs: f64 = w.kernels.iter().map(|k| k.macs).sum();
        assert_eq!(macs as u64, graph.macs());
    }

    /// Attention is two products around a softmax; every MAC of the graph is
    /// in some kernel; GELU, layer scale and the residual Adds are epilogues
    /// of the 1x1 convolutions, layer norms kernels of their own.
    #[test]
    fn transformers_become_products_softmaxes_and_norms() {
        for (name, attentions, norms) in [
            ("swin_t", 12, 1 + 3 + 2 * 12 + 1),
            ("deit_tiny", 12, 2 * 12 + 1),
        ] {
            let graph = (dlas_zoo::find(Dataset::Imagenet, name).unwrap().build)();
            let w = Workload::new(&graph, &combination(Compression::Dense, 0.0), None);
            let count = |f: &dyn Fn(&Kernel) -> bool| w.kernels.iter().filter(|k| f(k)).count();
            assert_eq!(
                count(&|k| k.kind == KernelKind::MatMul),
                2 * attentions,
                "{name}"
            );
            assert_eq!(
                count(&|k| k.name.ends_with(".softmax")),
                attentions,
                "{name}"
            );
            assert_eq!(count(&|k| k.name.contains("layernorm")), norms, "{name}");
            assert_eq!(
                count(&|k| k.name.contains("gelu") || k.name.contains("add")),
                0,
                "{name}"
            );
            let macs: f64 = w.kernels.iter().map(|k| k.macs).sum();
            assert_eq!(macs as u64, graph.macs(), "{name}");
        }
    }

    #[test]
    fn pruning_sets_density() {
        let graph = (dlas_zoo::find(Dataset::Cifar10, "vgg16").unwrap().build)();
        let w = Workload::new(&graph, &combination(Compression::WeightPruning, 0.8), None);
        assert!(
            w.kernels
                .iter()
                .filter(|k| k.macs > 0.0)
                .all(|k| (k.density - 0.2).abs() < 1e-12)
        );
    }
}
