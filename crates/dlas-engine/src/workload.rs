//! The shape of one convolution on one sample: what schedules are validated
//! against and what kernels are built for.

use dlas_zoo::{Graph, NodeId, Op};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A grouped 2-D convolution with square kernel, stride and symmetric padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Workload {
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
    pub groups: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
}

impl Workload {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        groups: usize,
        in_h: usize,
        in_w: usize,
    ) -> Workload {
        let out = |s: usize| (s + 2 * padding - kernel) / stride + 1;
        Workload {
            in_channels,
            out_channels,
            kernel,
            stride,
            padding,
            groups,
            in_h,
            in_w,
            out_h: out(in_h),
            out_w: out(in_w),
        }
    }

    /// One input and one output channel per group: a stack of 2-D stencils.
    pub fn is_depthwise(&self) -> bool {
        self.in_channels_per_group() == 1 && self.out_channels_per_group() == 1 && self.groups > 1
    }

    /// Whether the Winograd kernel can compute this layer: 3x3, stride 1,
    /// one group (kept here, with the shape, so schedule validation and the
    /// kernel read it without importing each other).
    pub(crate) fn winograd_computes(&self) -> bool {
        self.kernel == 3 && self.stride == 1 && self.groups == 1
    }

    pub fn in_channels_per_group(&self) -> usize {
        self.in_channels / self.groups
    }

    pub fn out_channels_per_group(&self) -> usize {
        self.out_channels / self.groups
    }

    /// Length of one row of the weight matrix: (in / groups) * k * k.
    pub fn reduction(&self) -> usize {
        self.in_channels_per_group() * self.kernel * self.kernel
    }

    pub fn out_pixels(&self) -> usize {
        self.out_h * self.out_w
    }

    pub fn in_len(&self) -> usize {
        self.in_channels * self.in_h * self.in_w
    }

    pub fn out_len(&self) -> usize {
        self.out_channels * self.out_pixels()
    }

    /// Floating-point operations of one sample (2 per multiply-accumulate).
    pub fn flops(&self) -> u64 {
        2 * (self.out_len() * self.reduction()) as u64
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conv {}->{} k{} s{} p{} g{} on {}x{}",
            self.in_channels,
            self.out_channels,
            self.kernel,
            self.stride,
            self.padding,
            self.groups,
            self.in_h,
            self.in_w
        )
    }
}

/// The workload of convolution or linear node `id` of `graph`, `None` for
/// other operators. Linear layers are 1x1 convolutions on a 1x1 image.
pub fn workload_of(graph: &Graph, id: NodeId) -> Option<Workload> {
    let node = &graph.nodes[id];
    match &node.op {
        Op::Conv(c) => {
            let [_, mut h, mut w] = graph.nodes[node.inputs[0]].shape;
            // A pointwise layer on a token sequence (`[d, tokens, 1]`) is
            // the same computation on `[d, 1, tokens]`, in memory too in
            // both layouts; as one row, the kernels that block output
            // columns (direct: 16 at a time) do not pad every token to a
            // block of its own.
            if (c.kernel, c.stride, c.padding, w) == (1, 1, 0, 1) {
                (h, w) = (1, h);
            }
            Some(Workload::new(
                c.in_channels,
                c.out_channels,
                c.kernel,
                c.stride,
                c.padding,
                c.groups,
                h,
                w,
            ))
        }
        Op::Linear {
            in_features,
            out_features,
        } => Some(Workload::new(*in_features, *out_features, 1, 1, 0, 1, 1, 1)),
        _ => None,
    }
}
