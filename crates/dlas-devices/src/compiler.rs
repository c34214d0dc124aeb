//! Graph compilers on the mocked devices: the uncompiled graph as an eager
//! framework runs it, against a vendor compiler's engine (TensorRT-like on
//! GPUs, OpenVINO-like on CPUs).
//!
//! The native engine's model (`mock.rs`) times the algorithms of the DLAS
//! study; this one times what a graph compiler changes, from the same
//! specifications:
//! - **launches**: eager runs one kernel per operator and pays the
//!   framework's per-operator dispatch (`dispatch_us`) besides the launch;
//!   on a GPU the host issues operators asynchronously, so dispatch hides
//!   behind kernels that take longer. The compiler's engine issues its
//!   fused kernels back to back (`launch_us` each).
//! - **fusion**: the compiler folds batch norm into the convolution before
//!   it and runs element-wise operators (activations, residual adds,
//!   broadcast products) in the epilogue of the kernel that produces their
//!   input, so their memory round trip and launch disappear; concatenation
//!   is removed by writing producers into the joined buffer. Eager reads and
//!   writes every operator's tensors.
//! - **kernel selection per shape**: on a GPU a contraction is a tiled GEMM
//!   (implicit GEMM for convolutions). Eager uses one generic tile for every
//!   shape; the compiler picks, per layer, the tile of [`TILES`] with the
//!   smallest predicted time, trading tile padding and wave quantisation
//!   (few output tiles leave SMs idle at small batch) against the operand
//!   re-reads of small tiles. On a CPU eager runs the framework's generic
//!   GEMM (im2col, vectorised along output channels of a group, so a
//!   depthwise layer fills one lane); the compiler runs direct convolution
//!   on a channel-blocked layout and vectorises along whichever of channels
//!   or output width fills more lanes.
//! - **occupancy**: a GPU keeps its lanes busy only with `lanes x FMA
//!   latency` independent operations in flight (Little's law); a CPU keeps
//!   as many cores busy as there are balanced parallel work items. Small
//!   batches leave both idle, so throughput first grows with batch size and
//!   saturates once the device is full: no rule says where.
//!
//! Every coefficient is a specification of `data/devices/*.toml`, a count
//! of the graph, or a tile shape of the kernel library modelled
//! ([`TILES`]); `docs/devices.md` documents the model and its unmeasured
//! error.

use crate::efficiency::balanced_cores;
use crate::mock::{Prediction, lane_fill};
use crate::spec::{DeviceKind, DeviceSpec};
use dlas_zoo::{Attention, Graph, Op};

/// Bumped whenever this model's equations change; part of the rows' source tag.
pub const VERSION: u32 = 1;

/// Bytes of an fp32 value: the model covers dense fp32 graphs.
const VALUE_BYTES: f64 = 4.0;

/// Threadblock tiles (output rows x columns) of CUTLASS's fp32 SIMT GEMM
/// kernels: the choices a GPU compiler's kernel selection has.
pub const TILES: [(usize, usize); 5] = [(128, 128), (128, 64), (64, 64), (64, 32), (32, 32)];

/// The one tile an eager framework's generic GEMM uses for every shape
/// (CUTLASS's default SIMT SGEMM threadblock).
pub const GENERIC_TILE: (usize, usize) = TILES[0];

/// How a graph is executed on a mocked device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphCompiler {
    /// The uncompiled graph: one kernel per operator, generic kernels.
    Eager,
    /// The device vendor's graph compiler (TensorRT-like on a GPU,
    /// OpenVINO-like on a CPU).
    Vendor,
}

impl GraphCompiler {
    /// The compiler ids of study files, in the order of [`GraphCompiler::ALL`].
    pub const IDS: [&'static str; 2] = ["eager", "vendor"];
    pub const ALL: [GraphCompiler; 2] = [GraphCompiler::Eager, GraphCompiler::Vendor];

    pub fn from_id(id: &str) -> Option<GraphCompiler> {
        Self::IDS
            .iter()
            .position(|i| *i == id)
            .map(|p| Self::ALL[p])
    }

    pub fn id(self) -> &'static str {
        match self {
            GraphCompiler::Eager => Self::IDS[0],
            GraphCompiler::Vendor => Self::IDS[1],
        }
    }

    /// What the compiler stands for on a kind of device, for reports.
    pub fn describe(self, kind: DeviceKind) -> &'static str {
        match (self, kind) {
            (GraphCompiler::Eager, _) => "eager framework (one generic kernel per operator)",
            (GraphCompiler::Vendor, DeviceKind::Gpu) => "TensorRT-like vendor compiler",
            (GraphCompiler::Vendor, DeviceKind::Cpu) => "OpenVINO-like vendor compiler",
        }
    }
}

/// What one launched kernel computes, per sample.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A convolution or fully connected layer as `groups` GEMMs of
    /// `m x n x k` (`n` per sample: output pixels, or 1 for a linear layer).
    Gemm {
        groups: usize,
        m: usize,
        n: usize,
        k: usize,
        /// Convolution window side (1 for linear layers); above 1 the
        /// generic CPU path builds an im2col matrix.
        window: usize,
        /// Output rows and width of a convolution ([1, 1] for linear layers).
        out_hw: [usize; 2],
        /// Attention's products: every sample brings its own `groups`
        /// (windows x heads) rather than more columns `n`.
        batched_groups: bool,
    },
    /// One pass over the data: element-wise, pooling, normalisation, copies.
    Pass,
}

/// One kernel launch and the nodes it executes.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub name: String,
    pub body: Body,
    /// The graph nodes it runs, the anchor first; the last one's output is written.
    pub nodes: Vec<usize>,
    /// Values read from memory per sample: inputs produced by other launches.
    pub read_elems: f64,
    /// Values written per sample.
    pub write_elems: f64,
    /// Weights and other parameters read once per batch.
    pub weight_elems: f64,
}

/// How an operator can be executed.
enum Class {
    /// No data moves: the graph input, flatten (a view).
    View,
    Contraction(Body, f64),
    /// Element-wise on its inputs' shape: fusable into its producer's epilogue.
    Elementwise {
        params: f64,
    },
    /// A pass of its own: pooling, normalisation over channels, layout copies.
    Pass {
        params: f64,
    },
    /// Concatenation (and prepending a class token): a copy eager makes and
    /// a compiler elides by writing producers into the joined buffer.
    Concat {
        params: f64,
    },
    /// Self-attention: two products around a softmax.
    Attention(Attention),
}

fn classify(graph: &Graph, id: usize) -> Class {
    let node = &graph.nodes[id];
    match &node.op {
        Op::Input | Op::Flatten => Class::View,
        Op::Conv(c) => {
            let [_, h, w] = node.shape;
            Class::Contraction(
                Body::Gemm {
                    groups: c.groups,
                    m: c.out_channels / c.groups,
                    n: h * w,
                    k: c.in_channels / c.groups * c.kernel * c.kernel,
                    window: c.kernel,
                    out_hw: [h, w],
                    batched_groups: false,
                },
                c.weight_count() as f64 + if c.bias { c.out_channels as f64 } else { 0.0 },
            )
        }
        Op::Linear {
            in_features,
            out_features,
        } => Class::Contraction(
            Body::Gemm {
                groups: 1,
                m: *out_features,
                n: 1,
                k: *in_features,
                window: 1,
                out_hw: [1, 1],
                batched_groups: false,
            },
            (in_features * out_features + out_features) as f64,
        ),
        Op::BatchNorm => Class::Elementwise {
            params: 2.0 * node.shape[0] as f64,
        },
        Op::Relu
        | Op::Relu6
        | Op::Silu
        | Op::Sigmoid
        | Op::Gelu
        | Op::HardSigmoid { .. }
        | Op::HardSwish
        | Op::Add
        | Op::Mul => Class::Elementwise { params: 0.0 },
        Op::LayerScale | Op::PositionEmbedding => Class::Elementwise {
            params: node.params() as f64,
        },
        // A layer norm reduces over the channels of a token, which a GEMM
        // tile's epilogue does not hold whole: a pass of its own.
        Op::LayerNorm { .. } => Class::Pass {
            params: node.params() as f64,
        },
        // Softmax and LRN reduce over channels, as a layer norm does.
        Op::MaxPool(_)
        | Op::AvgPool(_)
        | Op::GlobalAvgPool
        | Op::SpaceToDepth
        | Op::Pad(_)
        | Op::Softmax
        | Op::Lrn { .. }
        | Op::ChannelShuffle { .. } => Class::Pass { params: 0.0 },
        Op::Concat | Op::ClassToken => Class::Concat {
            params: node.params() as f64,
        },
        // Taking the class token is a view of the sequence.
        Op::FirstToken => Class::View,
        Op::Attention(a) => Class::Attention(*a),
    }
}

fn elems(graph: &Graph, id: usize) -> f64 {
    graph.nodes[id].shape.iter().product::<usize>() as f64
}

/// The kernels `compiler` launches for `graph`, in execution order.
pub fn lower(graph: &Graph, compiler: GraphCompiler) -> Vec<Launch> {
    let mut consumers = vec![0usize; graph.nodes.len()];
    for node in &graph.nodes {
        for &i in &node.inputs {
            consumers[i] += 1;
        }
    }
    let fuses = compiler == GraphCompiler::Vendor;
    let mut launch_of: Vec<Option<usize>> = vec![None; graph.nodes.len()];
    let mut launches: Vec<Launch> = Vec::new();
    for (id, node) in graph.nodes.iter().enumerate() {
        let reads = |inputs: &mut dyn Iterator<Item = &usize>| -> f64 {
            inputs.map(|&i| elems(graph, i)).sum()
        };
        let new_launch = |body: Body, weights: f64| Launch {
            name: node.name.clone(),
            body,
            nodes: vec![id],
            read_elems: reads(&mut node.inputs.iter()),
            write_elems: elems(graph, id),
            weight_elems: weights,
        };
        let launch = match classify(graph, id) {
            Class::View => continue,
            Class::Contraction(body, weights) => new_launch(body, weights),
            Class::Pass { params } => new_launch(Body::Pass, params),
            Class::Concat { .. } if fuses => continue,
            Class::Concat { params } => new_launch(Body::Pass, params),
            Class::Attention(a) => {
                let [d, h, w] = node.shape;
                let parts = attention(&node.name, id, a, d, h, w, fuses);
                launches.extend(parts);
                launch_of[id] = Some(launches.len() - 1);
                continue;
            }
            Class::Elementwise { params } => {
                // An input whose only consumer is this node and that is the
                // current output of its launch: this node can run in that
                // launch's epilogue, on values still in registers.
                let host = fuses
                    .then(|| {
                        node.inputs.iter().copied().find(|&i| {
                            consumers[i] == 1
                                && launch_of[i]
                                    .is_some_and(|l| launches[l].nodes.last() == Some(&i))
                        })
                    })
                    .flatten();
                match host {
                    Some(input) => {
                        let l = launch_of[input].expect("checked above");
                        let launch = &mut launches[l];
                        launch.nodes.push(id);
                        launch.read_elems +=
                            reads(&mut node.inputs.iter().filter(|&&i| i != input));
                        launch.write_elems = elems(graph, id);
                        // Batch norm folds into the convolution's weights;
                        // other parameters ride along with the epilogue.
                        if !matches!(node.op, Op::BatchNorm) {
                            launch.weight_elems += params;
                        }
                        launch_of[id] = Some(l);
                        continue;
                    }
                    None => new_launch(Body::Pass, params),
                }
            }
        };
        launches.push(launch);
        launch_of[id] = Some(launches.len() - 1);
    }
    launches
}

/// The kernels of one self-attention over a `[3d, h, w]` tensor of queries,
/// keys and values. Fused (the compiler), one kernel computes both products
/// per window and head with the scores on chip. Eager (as timm's modules
/// run): Swin's roll and window partition are copies, queries are scaled,
/// the scores are written by one batched product, then read and written by
/// the bias and mask additions and the softmax, read again by the second
/// product, and the heads are copied back into tokens (and windows).
fn attention(
    name: &str,
    id: usize,
    a: Attention,
    d: usize,
    h: usize,
    w: usize,
    fused: bool,
) -> Vec<Launch> {
    let (wh, ww) = a.window_hw(h, w);
    let windows = (h / wh) * (w / ww);
    let tokens = wh * ww;
    let head = d / a.heads;
    let groups = windows * a.heads;
    let values = (d * h * w) as f64;
    let scores = (groups * tokens * tokens) as f64;
    let bias = a.bias_count() as f64;
    let product = |k: usize, n: usize| Body::Gemm {
        groups,
        m: tokens,
        n,
        k,
        window: 1,
        out_hw: [1, n],
        batched_groups: true,
    };
    let launch = |part: &str, body: Body, read: f64, write: f64, weights: f64| Launch {
        name: format!("{name}.{part}"),
        body,
        nodes: vec![id],
        read_elems: read,
        write_elems: write,
        weight_elems: weights,
    };
    if fused {
        return vec![launch(
            "fused",
            product(2 * head, tokens),
            3.0 * values,
            values,
            bias,
        )];
    }
    let copy = |part: &str, elems: f64| launch(part, Body::Pass, elems, elems, 0.0);
    let mut out = Vec::new();
    if a.shift > 0 {
        out.push(copy("roll", 3.0 * values));
    }
    if a.window.is_some() {
        out.push(copy("partition", 3.0 * values));
    }
    out.push(copy("scale", values));
    out.push(launch(
        "scores",
        product(head, tokens),
        2.0 * values,
        scores,
        0.0,
    ));
    if a.relative_bias {
        out.push(launch("bias", Body::Pass, scores, scores, bias));
    }
    if a.shift > 0 {
        out.push(copy("mask", scores));
    }
    out.push(copy("softmax", scores));
    out.push(launch(
        "context",
        product(tokens, head),
        scores + values,
        values,
        0.0,
    ));
    out.push(copy("heads", values));
    if a.window.is_some() {
        out.push(copy("reverse", values));
    }
    if a.shift > 0 {
        out.push(copy("unroll", values));
    }
    out
}

/// Per-launch predicted times of `graph` under `compiler` at `batch`.
pub fn predict(
    spec: &DeviceSpec,
    graph: &Graph,
    compiler: GraphCompiler,
    batch: usize,
) -> Prediction {
    Prediction {
        kernels: lower(graph, compiler)
            .iter()
            .map(|l| (l.name.clone(), launch_seconds(spec, l, compiler, batch)))
            .collect(),
    }
}

/// One launch's time: `max(compute, memory) + launch`, plus the eager
/// framework's dispatch (serial on a CPU, overlapped on a GPU).
pub fn launch_seconds(
    spec: &DeviceSpec,
    launch: &Launch,
    compiler: GraphCompiler,
    batch: usize,
) -> f64 {
    let b = batch as f64;
    let dram = spec.memory_gbs * 1e9;
    let compulsory =
        ((launch.read_elems + launch.write_elems) * b + launch.weight_elems) * VALUE_BYTES;
    let kernel = match (&launch.body, spec.kind) {
        (Body::Pass, kind) => {
            let work = launch.write_elems.max(launch.read_elems) * b;
            pass_compute(spec, kind, work).max(compulsory / dram)
        }
        (gemm, DeviceKind::Gpu) => {
            let time = |tile| {
                let (compute, rereads) = gpu_gemm(spec, gemm, launch, batch, tile);
                compute.max((compulsory + rereads) / dram)
            };
            match compiler {
                GraphCompiler::Eager => time(GENERIC_TILE),
                GraphCompiler::Vendor => TILES.into_iter().map(time).fold(f64::INFINITY, f64::min),
            }
        }
        (gemm, DeviceKind::Cpu) => {
            let (compute, extra) = cpu_gemm(spec, gemm, batch, compiler);
            compute.max((compulsory + extra) / dram)
        }
    } + spec.launch_us * 1e-6;
    let dispatch = spec.dispatch_us * 1e-6;
    match (compiler, spec.kind) {
        (GraphCompiler::Vendor, _) => kernel,
        (GraphCompiler::Eager, DeviceKind::Cpu) => kernel + dispatch,
        (GraphCompiler::Eager, DeviceKind::Gpu) => kernel.max(dispatch),
    }
}

/// One operation per value: vector lanes of every core on a CPU; on a GPU
/// one thread per value, lanes busy as far as the threads fill them.
fn pass_compute(spec: &DeviceSpec, kind: DeviceKind, values: f64) -> f64 {
    let clock = spec.clock_ghz * 1e9;
    match kind {
        DeviceKind::Cpu => values / (spec.cores as f64 * spec.fma_lanes as f64 * clock),
        DeviceKind::Gpu => {
            let lanes = (spec.cores * spec.fma_lanes) as f64;
            let busy = (values / (lanes * spec.fma_latency as f64)).min(1.0);
            values / (lanes * busy * clock)
        }
    }
}

/// A GPU GEMM with one threadblock tile: compute seconds, and the operand
/// bytes re-read from DRAM because the tiles do not share them through L2.
fn gpu_gemm(
    spec: &DeviceSpec,
    body: &Body,
    launch: &Launch,
    batch: usize,
    (tm, tn): (usize, usize),
) -> (f64, f64) {
    let Body::Gemm {
        groups,
        m,
        n,
        k,
        batched_groups,
        ..
    } = *body
    else {
        unreachable!("only GEMM bodies are tiled")
    };
    let clock = spec.clock_ghz * 1e9;
    let lanes = spec.fma_lanes as f64;
    let cores = spec.cores as f64;
    let (groups, n) = if batched_groups {
        (groups * batch, n)
    } else {
        (groups, n * batch)
    };
    if m == 1 {
        // Depthwise: one thread per output reduces its window; a tile of
        // output channels has nothing to share.
        let threads = (groups * n) as f64;
        let busy = (threads / (lanes * cores * spec.fma_latency as f64)).min(1.0);
        let macs = (groups * n * k) as f64;
        return (macs / (lanes * cores * busy * clock), 0.0);
    }
    let (row_tiles, col_tiles) = (m.div_ceil(tm), n.div_ceil(tn));
    let blocks = (groups * row_tiles * col_tiles) as f64;
    // An SM needs lanes x latency independent accumulators in flight; a
    // block brings tm x tn of them.
    let per_sm = (lanes * spec.fma_latency as f64 / (tm * tn) as f64)
        .ceil()
        .max(1.0);
    let waves = (blocks / (cores * per_sm)).ceil();
    let compute = waves * per_sm * (tm * tn * k) as f64 / (lanes * clock);
    // Each column of tiles reads the weights, each row of tiles the
    // activations; what does not fit in half the L2 comes from DRAM again.
    let half_l2 = spec.llc_kib as f64 * 1024.0 / 2.0;
    let weights = launch.weight_elems * VALUE_BYTES;
    let inputs = launch.read_elems * batch as f64 * VALUE_BYTES;
    let mut rereads = 0.0;
    if weights > half_l2 {
        rereads += weights * (col_tiles as f64 - 1.0);
    }
    if inputs > half_l2 {
        rereads += inputs * (row_tiles as f64 - 1.0);
    }
    (compute, rereads)
}

/// A CPU GEMM or convolution: compute seconds, and the bytes of the im2col
/// matrix the generic path writes and reads back.
fn cpu_gemm(spec: &DeviceSpec, body: &Body, batch: usize, compiler: GraphCompiler) -> (f64, f64) {
    let Body::Gemm {
        groups,
        m,
        n,
        k,
        window,
        out_hw: [oh, ow],
        ..
    } = *body
    else {
        unreachable!("only GEMM bodies are contractions")
    };
    let width = (spec.fma_lanes / spec.fma_pipes).max(1);
    let linear = n == 1;
    let (fill, items, extra) = match compiler {
        GraphCompiler::Eager => {
            // Per group: vectorised along the group's output channels; work
            // items are channel vectors of one output row of one sample.
            let items = if linear {
                m.div_ceil(width)
            } else {
                batch * groups * m.div_ceil(width) * oh
            };
            let cols = if window > 1 {
                2.0 * (groups * k * n * batch) as f64 * VALUE_BYTES
            } else {
                0.0
            };
            (lane_fill(m, width), items, cols)
        }
        GraphCompiler::Vendor => {
            // Channel-blocked layout: channels of all groups form the vector
            // (a depthwise layer's channels are independent lanes), unless
            // the output width fills more lanes.
            let channels = groups * m;
            let by_channel = lane_fill(channels, width);
            let by_width = if linear { 0.0 } else { lane_fill(ow, width) };
            let items = if linear {
                m.div_ceil(width)
            } else {
                batch * channels.div_ceil(width) * oh
            };
            (by_channel.max(by_width), items, 0.0)
        }
    };
    let busy = balanced_cores(items, spec.cores);
    let rate = busy * spec.fma_lanes as f64 * fill * spec.clock_ghz * 1e9;
    let macs = (groups * m * n * k * batch) as f64;
    (macs / rate, extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::Dataset;

    fn graph(dataset: Dataset, name: &str) -> Graph {
        (dlas_zoo::find(dataset, name).unwrap().build)()
    }

    fn macs_of(launches: &[Launch]) -> usize {
        launches
            .iter()
            .map(|l| match l.body {
                Body::Gemm {
                    groups, m, n, k, ..
                } => groups * m * n * k,
                Body::Pass => 0,
            })
            .sum()
    }

    #[test]
    fn attention_is_fused_into_one_kernel_with_the_scores_on_chip() {
        let g = graph(Dataset::Imagenet, "swin_t");
        let eager = lower(&g, GraphCompiler::Eager);
        let vendor = lower(&g, GraphCompiler::Vendor);
        assert_eq!(macs_of(&eager), g.macs() as usize);
        assert_eq!(macs_of(&vendor), g.macs() as usize);
        let attention = |ls: &[Launch]| -> (usize, f64) {
            let parts: Vec<&Launch> = ls.iter().filter(|l| l.name.contains("attention")).collect();
            (
                parts.len(),
                parts.iter().map(|l| l.read_elems + l.write_elems).sum(),
            )
        };
        let (eager_kernels, eager_traffic) = attention(&eager);
        let (vendor_kernels, vendor_traffic) = attention(&vendor);
        let layers = g.op_histogram()["Attention"];
        assert_eq!(vendor_kernels, layers);
        // Windowed (and every other block shifted): at least partition,
        // scale, two products, bias, softmax, heads and reverse.
        assert!(eager_kernels >= 8 * layers, "{eager_kernels}");
        assert!(vendor_traffic < 0.25 * eager_traffic);
    }

    #[test]
    fn ids_round_trip() {
        for c in GraphCompiler::ALL {
            assert_eq!(GraphCompiler::from_id(c.id()), Some(c));
        }
        assert_eq!(GraphCompiler::from_id("native"), None);
    }

    #[test]
    fn eager_launches_every_operator_and_the_compiler_fuses() {
        let g = graph(Dataset::Cifar10, "resnet18");
        let eager = lower(&g, GraphCompiler::Eager);
        let views = g
            .nodes
            .iter()
            .filter(|n| matches!(n.op, Op::Input | Op::Flatten))
            .count();
        assert_eq!(eager.len(), g.nodes.len() - views);
        let vendor = lower(&g, GraphCompiler::Vendor);
        // 20 convolutions, the linear layer and the global pool; every
        // batch norm, ReLU and residual add runs in a convolution's epilogue.
        assert_eq!(vendor.len(), 22);
        // Both execute the same multiply-accumulates.
        assert_eq!(macs_of(&eager), g.macs() as usize);
        assert_eq!(macs_of(&vendor), g.macs() as usize);
        // Fusion removes memory traffic.
        let traffic =
            |ls: &[Launch]| -> f64 { ls.iter().map(|l| l.read_elems + l.write_elems).sum() };
        assert!(traffic(&vendor) < 0.5 * traffic(&eager));
    }
}
