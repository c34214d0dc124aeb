//! The graph IR: a topologically ordered list of nodes with inferred shapes.
//!
//! Shapes are per sample (channels, height, width); the batch dimension is
//! added by exporters and runtimes. A flattened tensor of `f` features has
//! shape `[f, 1, 1]`.
//!
//! Transformers use the same layout: a sequence of tokens of dimension `d`
//! is `[d, h, w]`, one token per position, channels being the embedding.
//! Tokens on a grid (Swin, a ViT before its class token) keep the grid, so
//! windows are spatial blocks; a sequence with a class token has no grid and
//! is `[d, tokens, 1]`. Keeping channels first means a linear layer applied
//! to every token is a 1x1 convolution with bias (same parameters and MACs
//! as PyTorch's `nn.Linear` on the token axis), so the zoo needs no separate
//! per-token linear operator, and a ConvNeXt block's "channels last" linear
//! layers are the same 1x1 convolutions.

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
    /// The convolution's shape on an `in_hw` input map (core's one
    /// conv-shape type, which the engine, the device model and the
    /// calibration share).
    pub fn shape_on(&self, in_hw: [usize; 2]) -> dlas_core::ConvShape {
        dlas_core::ConvShape::new(
            self.in_channels,
            self.out_channels,
            self.kernel,
            self.stride,
            self.padding,
            self.groups,
            in_hw[0],
            in_hw[1],
        )
    }

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
    /// Padding added to the bottom and right only, after `padding` on all
    /// sides: Caffe's ceil-mode pooling and `SAME_UPPER` windows, as old
    /// exporters write them.
    pub end: usize,
}

impl Pool {
    /// Output height (width) of an input of height (width) `size`.
    pub fn out(&self, size: usize) -> usize {
        (size + 2 * self.padding + self.end - self.kernel) / self.stride + 1
    }
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
    /// Average pooling; each window divides by its elements inside the
    /// input (ONNX's default, `count_include_pad = 0`; the zoo's own
    /// average pools have no padding, where every window is whole).
    AvgPool(Pool),
    GlobalAvgPool,
    /// Concatenation along channels.
    Concat,
    Flatten,
    Linear {
        in_features: usize,
        out_features: usize,
    },
    /// Normalisation over the channels of each position (each token), with
    /// a learned per-channel scale and shift: PyTorch's `nn.LayerNorm` on
    /// the embedding dimension, and ConvNeXt's `LayerNorm2d`.
    LayerNorm {
        eps: f64,
    },
    /// GELU in its exact form, `x * (1 + erf(x / sqrt 2)) / 2`.
    Gelu,
    /// Multi-head scaled dot-product self-attention from a `[3d, h, w]`
    /// tensor of queries, keys and values (channel blocks q, k, v, each
    /// `heads` blocks of `d / heads`) to the `[d, h, w]` context. The
    /// projections around it are 1x1 convolutions.
    Attention(Attention),
    /// Prepends a learned class token to the tokens of a `[d, h, w]` grid,
    /// giving the `[d, h * w + 1, 1]` sequence (ViT, DeiT).
    ClassToken,
    /// Adds a learned tensor of the input's shape (ViT's position embedding).
    PositionEmbedding,
    /// The first token of a `[d, tokens, 1]` sequence, `[d, 1, 1]` (the
    /// class token a ViT classifies).
    FirstToken,
    /// Each 2x2 block of positions becomes one position with 4x channels,
    /// in Swin's patch-merging order: channel `(2 * dx + dy) * c + i` holds
    /// channel `i` of the position at row offset `dy`, column offset `dx`.
    SpaceToDepth,
    /// A learned per-channel scale (ConvNeXt's layer scale).
    LayerScale,
    /// Zero padding of the plane by (top, left, bottom, right), for an
    /// imported `Pad` that no convolution could absorb.
    Pad([usize; 4]),
    /// Softmax over the channels of each position (a classifier's output).
    Softmax,
    /// Local response normalisation across channels as ONNX defines it
    /// (AlexNet, GoogLeNet): `x / (bias + alpha / size * s)^beta`, `s` the
    /// sum of squares over channels `c - (size - 1) / 2 ..= c + size / 2`.
    Lrn {
        size: usize,
        alpha: f64,
        beta: f64,
        bias: f64,
    },
    /// ShuffleNet's channel shuffle: output channel `i * groups + g` is
    /// input channel `g * (c / groups) + i` (the exporters' Reshape,
    /// Transpose, Reshape).
    ChannelShuffle {
        groups: usize,
    },
    /// `clamp(alpha * x + beta, 0, 1)`.
    HardSigmoid {
        alpha: f64,
        beta: f64,
    },
    /// `x * clamp(x / 6 + 1 / 2, 0, 1)` (MobileNetV3).
    HardSwish,
}

/// Attention of every token to the tokens of its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Attention {
    pub heads: usize,
    /// Side of the square windows that attend within themselves (Swin);
    /// `None`: every token attends to every token of the sample (ViT).
    pub window: Option<usize>,
    /// Swin's shifted windows: the tokens are rolled by `-shift` on both
    /// axes before partitioning and back after, and tokens that were not
    /// neighbours before the roll do not attend to each other (a -100 bias,
    /// as timm and torchvision add).
    pub shift: usize,
    /// A learned bias per head and relative position within the window
    /// (Swin's table of `(2 * window - 1)^2 x heads` parameters).
    pub relative_bias: bool,
}

impl Attention {
    /// ViT's attention: every token attends to every token of the sample.
    pub fn global(heads: usize) -> Attention {
        Attention {
            heads,
            window: None,
            shift: 0,
            relative_bias: false,
        }
    }

    /// Swin's attention: square windows of side `window`, shifted by
    /// `shift`, with a relative-position bias table.
    pub fn swin(heads: usize, window: usize, shift: usize) -> Attention {
        Attention {
            heads,
            window: Some(window),
            shift,
            relative_bias: true,
        }
    }

    /// The number of learned relative-position biases.
    pub fn bias_count(&self) -> usize {
        match (self.relative_bias, self.window) {
            (true, Some(ws)) => (2 * ws - 1) * (2 * ws - 1) * self.heads,
            _ => 0,
        }
    }

    /// Window height and width on an `h x w` grid.
    pub fn window_hw(&self, h: usize, w: usize) -> (usize, usize) {
        self.window.map_or((h, w), |ws| (ws, ws))
    }
}

impl Op {
    /// The operator's name in reports; for the convolutional operators it
    /// is also the ONNX operator's. The transformer operators are
    /// exported as several ONNX operators each.
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
            Op::LayerNorm { .. } => "LayerNorm",
            Op::Gelu => "Gelu",
            Op::Attention(_) => "Attention",
            Op::ClassToken => "ClassToken",
            Op::PositionEmbedding => "PositionEmbedding",
            Op::FirstToken => "FirstToken",
            Op::SpaceToDepth => "SpaceToDepth",
            Op::LayerScale => "LayerScale",
            Op::Pad(_) => "Pad",
            Op::Softmax => "Softmax",
            Op::Lrn { .. } => "LRN",
            Op::ChannelShuffle { .. } => "ChannelShuffle",
            Op::HardSigmoid { .. } => "HardSigmoid",
            Op::HardSwish => "HardSwish",
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
            Op::LayerNorm { .. } => 2 * self.shape[0],
            Op::Attention(a) => a.bias_count(),
            Op::ClassToken | Op::LayerScale => self.shape[0],
            Op::PositionEmbedding => self.shape.iter().product(),
            _ => 0,
        }
    }

    /// Multiply-accumulates of convolutions, fully connected layers and
    /// the two products of attention (queries by keys, weights by values),
    /// as fvcore counts them; normalisations and element-wise operators
    /// count zero.
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
            Op::Attention(a) => {
                let [d, h, w] = self.shape;
                let (wh, ww) = a.window_hw(h, w);
                let windows = (h / wh) * (w / ww);
                let tokens = wh * ww;
                (2 * windows * tokens * tokens * d) as u64
            }
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
        GraphBuilder::with_input(name, dataset, dataset.input_chw())
    }

    /// A builder whose input is `shape` (C, H, W) rather than the dataset's
    /// images: single layers timed on their own (`dlas devices calibrate`).
    pub fn with_input(name: &str, dataset: Dataset, shape: Shape) -> GraphBuilder {
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

    /// A parameterless operator of one input that keeps its shape (an
    /// activation, softmax, LRN).
    pub fn unary(&mut self, op: Op, x: NodeId) -> NodeId {
        assert!(matches!(
            op,
            Op::Relu
                | Op::Relu6
                | Op::Silu
                | Op::Sigmoid
                | Op::Gelu
                | Op::Softmax
                | Op::Lrn { .. }
                | Op::HardSigmoid { .. }
                | Op::HardSwish
        ));
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
                end: 0,
            }),
        )
    }

    /// Max pooling with `pool.end` extra padding at the bottom and right.
    pub fn max_pool_with(&mut self, x: NodeId, pool: Pool) -> NodeId {
        self.pool(x, Op::MaxPool(pool))
    }

    /// Average pooling with padding (an imported model's).
    pub fn avg_pool_with(&mut self, x: NodeId, pool: Pool) -> NodeId {
        self.pool(x, Op::AvgPool(pool))
    }

    pub fn avg_pool(&mut self, x: NodeId, kernel: usize, stride: usize) -> NodeId {
        self.pool(
            x,
            Op::AvgPool(Pool {
                kernel,
                stride,
                padding: 0,
                end: 0,
            }),
        )
    }

    fn pool(&mut self, x: NodeId, op: Op) -> NodeId {
        let (Op::MaxPool(p) | Op::AvgPool(p)) = &op else {
            unreachable!("pool takes a pooling operator")
        };
        let [c, h, w] = self.shape(x);
        let shape = [c, p.out(h), p.out(w)];
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

    /// A per-token linear layer: a 1x1 convolution (see the module's
    /// documentation), with PyTorch's `nn.Linear` bias unless `bias` is false.
    pub fn pointwise(&mut self, x: NodeId, out_features: usize, bias: bool) -> NodeId {
        self.conv(x, out_features, 1, 1, 0, 1, bias)
    }

    pub fn layer_norm(&mut self, x: NodeId, eps: f64) -> NodeId {
        self.push(Op::LayerNorm { eps }, vec![x], self.shape(x))
    }

    pub fn gelu(&mut self, x: NodeId) -> NodeId {
        self.unary(Op::Gelu, x)
    }

    pub fn layer_scale(&mut self, x: NodeId) -> NodeId {
        self.push(Op::LayerScale, vec![x], self.shape(x))
    }

    /// Self-attention over `qkv` (`[3d, h, w]`), giving `[d, h, w]`.
    pub fn attention(&mut self, qkv: NodeId, attention: Attention) -> NodeId {
        let [c, h, w] = self.shape(qkv);
        assert!(c.is_multiple_of(3), "Attention takes q, k and v stacked");
        let d = c / 3;
        assert!(
            d.is_multiple_of(attention.heads),
            "heads must divide the dimension"
        );
        let (wh, ww) = attention.window_hw(h, w);
        assert!(
            h.is_multiple_of(wh) && w.is_multiple_of(ww),
            "windows must tile the grid"
        );
        assert!(
            attention.shift == 0 || (attention.window.is_some() && attention.shift < wh),
            "a shift needs windows larger than it"
        );
        assert!(
            !attention.relative_bias || attention.window.is_some(),
            "relative position biases need windows"
        );
        self.push(Op::Attention(attention), vec![qkv], [d, h, w])
    }

    pub fn class_token(&mut self, x: NodeId) -> NodeId {
        let [d, h, w] = self.shape(x);
        self.push(Op::ClassToken, vec![x], [d, h * w + 1, 1])
    }

    pub fn position_embedding(&mut self, x: NodeId) -> NodeId {
        self.push(Op::PositionEmbedding, vec![x], self.shape(x))
    }

    pub fn first_token(&mut self, x: NodeId) -> NodeId {
        let [d, _, w] = self.shape(x);
        assert_eq!(w, 1, "FirstToken takes a [d, tokens, 1] sequence");
        self.push(Op::FirstToken, vec![x], [d, 1, 1])
    }

    pub fn space_to_depth(&mut self, x: NodeId) -> NodeId {
        let [c, h, w] = self.shape(x);
        assert!(
            h.is_multiple_of(2) && w.is_multiple_of(2),
            "SpaceToDepth needs an even grid"
        );
        self.push(Op::SpaceToDepth, vec![x], [4 * c, h / 2, w / 2])
    }

    /// Zero padding by (top, left, bottom, right).
    pub fn pad(&mut self, x: NodeId, pads: [usize; 4]) -> NodeId {
        let [c, h, w] = self.shape(x);
        let shape = [c, h + pads[0] + pads[2], w + pads[1] + pads[3]];
        self.push(Op::Pad(pads), vec![x], shape)
    }

    pub fn channel_shuffle(&mut self, x: NodeId, groups: usize) -> NodeId {
        assert!(
            groups > 0 && self.channels(x).is_multiple_of(groups),
            "groups must divide the channels"
        );
        self.push(Op::ChannelShuffle { groups }, vec![x], self.shape(x))
    }

    pub fn finish(self) -> Graph {
        self.graph
    }
}
