//! The graph IR: a topologically ordered list of nodes with inferred shapes.
//!
//! Shapes are per sample (channels, height, width); the batch dimension is
//! added by exporters and runtimes. A flattened tensor of `f` features has
//! shape `[f, 1, 1]`.

use dlas_core::Dataset;

/// Channels, height, width of one sample.
pub type Shape = [usize; 3];
/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;

/// A 2-D convolution with square kernels, strides and symmetric padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv {
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
    pub groups: usize,
    pub bias: bool,
}

impl Conv {
    pub fn is_depthwise(&self) -> bool {
        self.groups > 1 && self.groups == self.in_channels && self.groups == self.out_channels
    }

    /// Weight tensor shape (out, in / groups, k, k).
    pub fn weight_shape(&self) -> [usize; 4] {
        [
            self.out_channels,
            self.in_channels / self.groups,
            self.kernel,
            self.kernel,
        ]
    }

    pub fn weight_count(&self) -> usize {
        self.weight_shape().iter().product()
    }
}

/// Pooling window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pool {
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
}

/// The operators the study's networks are made of.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Input,
    Conv(Conv),
    BatchNorm,
    Relu,
    Relu6,
    Silu,
    Sigmoid,
    /// Element-wise sum of two tensors of one shape.
    Add,
    /// Element-wise product; the second operand may be `[c, 1, 1]` (broadcast).
    Mul,
    MaxPool(Pool),
    AvgPool(Pool),
    GlobalAvgPool,
    /// Concatenation along channels.
    Concat,
    Flatten,
    Linear {
        in_features: usize,
        out_features: usize,
    },
}

impl Op {
    /// The operator's name in ONNX and in reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Input => "Input",
            Op::Conv(_) => "Conv",
            Op::BatchNorm => "BatchNormalization",
            Op::Relu => "Relu",
            Op::Relu6 => "Relu6",
            Op::Silu => "Silu",
            Op::Sigmoid => "Sigmoid",
            Op::Add => "Add",
            Op::Mul => "Mul",
            Op::MaxPool(_) => "MaxPool",
            Op::AvgPool(_) => "AveragePool",
            Op::GlobalAvgPool => "GlobalAveragePool",
            Op::Concat => "Concat",
            Op::Flatten => "Flatten",
            Op::Linear { .. } => "Gemm",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// A unique, stable name (weights are seeded from it).
    pub name: String,
    pub op: Op,
    pub inputs: Vec<NodeId>,
    pub shape: Shape,
}

impl Node {
    /// Trainable parameters as PyTorch counts them.
    pub fn params(&self) -> usize {
        match &self.op {
            Op::Conv(c) => c.weight_count() + if c.bias { c.out_channels } else { 0 },
            Op::BatchNorm => 2 * self.shape[0],
            Op::Linear {
                in_features,
                out_features,
            } => in_features * out_features + out_features,
            _ => 0,
        }
    }

    /// Multiply-accumulates of convolutions and fully connected layers.
    pub fn macs(&self) -> u64 {
        match &self.op {
            Op::Conv(c) => {
                let [_, h, w] = self.shape;
                (h * w * c.out_channels * (c.in_channels / c.groups) * c.kernel * c.kernel) as u64
            }
            Op::Linear {
                in_features,
                out_features,
            } => (in_features * out_features) as u64,
            _ => 0,
        }
    }
}

/// A network: nodes in topological order; node 0 is the input, the last node the output.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub name: String,
    pub dataset: Dataset,
    pub nodes: Vec<Node>,
}

impl Graph {
    pub fn input_shape(&self) -> Shape {
        self.nodes[0].shape
    }

    pub fn output(&self) -> &Node {
        self.nodes.last().expect("a graph has at least its input")
    }

    pub fn params(&self) -> usize {
        self.nodes.iter().map(Node::params).sum()
    }

    pub fn macs(&self) -> u64 {
        self.nodes.iter().map(Node::macs).sum()
    }

    /// Convolution and fully connected layers: the "layers" of the study's tables.
    pub fn weighted_layers(&self) -> impl Iterator<Item = &Node> {
        self.nodes
            .iter()
            .filter(|n| matches!(n.op, Op::Conv(_) | Op::Linear { .. }))
    }

    /// Counts of each operator kind, for reports and checks.
    pub fn op_histogram(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut h = std::collections::BTreeMap::new();
        for n in &self.nodes {
            *h.entry(n.op.kind()).or_default() += 1;
        }
        h
    }
}

/// Builds a graph node by node, inferring each output shape.
///
/// Shape errors are programming errors in a network definition, so the
/// builder panics on them; the zoo's tests build every network.
pub struct GraphBuilder {
    graph: Graph,
    scope: Vec<String>,
    counter: usize,
}

impl GraphBuilder {
    pub fn new(name: &str, dataset: Dataset) -> GraphBuilder {
        let shape = dataset.input_chw();
        GraphBuilder {
            graph: Graph {
                name: name.to_string(),
                dataset,
                nodes: vec![Node {
                    name: "input".into(),
                    op: Op::Input,
                    inputs: vec![],
                    shape,
                }],
            },
            scope: Vec::new(),
            counter: 0,
        }
    }

    pub fn input(&self) -> NodeId {
        0
    }

    pub fn shape(&self, id: NodeId) -> Shape {
        self.graph.nodes[id].shape
    }

    pub fn channels(&self, id: NodeId) -> usize {
        self.shape(id)[0]
    }

    /// Runs `f` with `name` appended to the naming scope (e.g. `layer1.0`).
    pub fn scoped<T>(&mut self, name: &str, f: impl FnOnce(&mut GraphBuilder) -> T) -> T {
        self.scope.push(name.to_string());
        let out = f(self);
        self.scope.pop();
        out
    }

    fn push(&mut self, op: Op, inputs: Vec<NodeId>, shape: Shape) -> NodeId {
        self.counter += 1;
        let kind = op.kind().to_lowercase();
        let mut parts = self.scope.clone();
        parts.push(format!("{kind}{}", self.counter));
        self.graph.nodes.push(Node {
            name: parts.join("."),
            op,
            inputs,
            shape,
        });
        self.graph.nodes.len() - 1
    }

    #[allow(clippy::too_many_arguments)]
    pub fn conv(
        &mut self,
        x: NodeId,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        groups: usize,
        bias: bool,
    ) -> NodeId {
        let [c, h, w] = self.shape(x);
        assert!(
            c.is_multiple_of(groups) && out_channels.is_multiple_of(groups),
            "groups must divide channels"
        );
        let out = |s: usize| (s + 2 * padding - kernel) / stride + 1;
        let conv = Conv {
            in_channels: c,
            out_channels,
            kernel,
            stride,
            padding,
            groups,
            bias,
        };
        self.push(Op::Conv(conv), vec![x], [out_channels, out(h), out(w)])
    }

    /// A convolution, its batch norm, and an optional activation: the common
    /// unit of every network in the zoo.
    pub fn conv_bn(
        &mut self,
        x: NodeId,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        groups: usize,
        act: Option<Op>,
    ) -> NodeId {
        let y = self.conv(x, out_channels, kernel, stride, kernel / 2, groups, false);
        let y = self.batch_norm(y);
        match act {
            Some(op) => self.unary(op, y),
            None => y,
        }
    }

    pub fn batch_norm(&mut self, x: NodeId) -> NodeId {
        self.push(Op::BatchNorm, vec![x], self.shape(x))
    }

    /// An element-wise unary operator (activation).
    pub fn unary(&mut self, op: Op, x: NodeId) -> NodeId {
        assert!(matches!(op, Op::Relu | Op::Relu6 | Op::Silu | Op::Sigmoid));
        self.push(op, vec![x], self.shape(x))
    }

    pub fn relu(&mut self, x: NodeId) -> NodeId {
        self.unary(Op::Relu, x)
    }

    pub fn add(&mut self, a: NodeId, b: NodeId) -> NodeId {
        assert_eq!(self.shape(a), self.shape(b), "Add needs equal shapes");
        self.push(Op::Add, vec![a, b], self.shape(a))
    }

    /// `a * b` where `b` is `a`'s shape or a per-channel `[c, 1, 1]` scale.
    pub fn mul(&mut self, a: NodeId, b: NodeId) -> NodeId {
        let (sa, sb) = (self.shape(a), self.shape(b));
        assert!(
            sa == sb || sb == [sa[0], 1, 1],
            "Mul needs equal or per-channel shapes"
        );
        self.push(Op::Mul, vec![a, b], sa)
    }

    pub fn max_pool(&mut self, x: NodeId, kernel: usize, stride: usize, padding: usize) -> NodeId {
        self.pool(
            x,
            Op::MaxPool(Pool {
                kernel,
                stride,
                padding,
            }),
        )
    }

    pub fn avg_pool(&mut self, x: NodeId, kernel: usize, stride: usize) -> NodeId {
        self.pool(
            x,
            Op::AvgPool(Pool {
                kernel,
                stride,
                padding: 0,
            }),
        )
    }

    fn pool(&mut self, x: NodeId, op: Op) -> NodeId {
        let (Op::MaxPool(p) | Op::AvgPool(p)) = &op else {
            unreachable!("pool takes a pooling operator")
        };
        let [c, h, w] = self.shape(x);
        let out = |s: usize| (s + 2 * p.padding - p.kernel) / p.stride + 1;
        let shape = [c, out(h), out(w)];
        self.push(op, vec![x], shape)
    }

    pub fn global_avg_pool(&mut self, x: NodeId) -> NodeId {
        self.push(Op::GlobalAvgPool, vec![x], [self.channels(x), 1, 1])
    }

    pub fn concat(&mut self, xs: &[NodeId]) -> NodeId {
        let [_, h, w] = self.shape(xs[0]);
        assert!(
            xs.iter().all(|&x| self.shape(x)[1..] == [h, w]),
            "Concat needs equal spatial sizes"
        );
        let c = xs.iter().map(|&x| self.channels(x)).sum();
        self.push(Op::Concat, xs.to_vec(), [c, h, w])
    }

    pub fn flatten(&mut self, x: NodeId) -> NodeId {
        let features = self.shape(x).iter().product();
        self.push(Op::Flatten, vec![x], [features, 1, 1])
    }

    pub fn linear(&mut self, x: NodeId, out_features: usize) -> NodeId {
        let [in_features, h, w] = self.shape(x);
        assert_eq!((h, w), (1, 1), "Linear takes a flattened input");
        self.push(
            Op::Linear {
                in_features,
                out_features,
            },
            vec![x],
            [out_features, 1, 1],
        )
    }

    pub fn finish(self) -> Graph {
        self.graph
    }
}
