//! The shape of one convolution on one sample: what schedules are validated
//! against and what kernels are built for.

use dlas_zoo::{Graph, NodeId, Op};

/// A grouped 2-D convolution with square kernel, stride and symmetric
/// padding: core's one conv-shape type, which the device model and the
/// calibration share (its serialised form keys the tuning records).
pub type Workload = dlas_core::ConvShape;

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
            Some(c.shape_on([h, w]))
        }
        Op::Linear {
            in_features,
            out_features,
        } => Some(Workload::new(*in_features, *out_features, 1, 1, 0, 1, 1, 1)),
        _ => None,
    }
}
