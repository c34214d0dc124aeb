//! The operators that only imported models have, back to opset 13: a
//! graph read from another exporter's file can be written out again and
//! run by tract or ONNX Runtime like the zoo's own.

use super::{GraphOut, float, int};
use dlas_zoo::{Graph, Op};

impl GraphOut {
    /// Writes node `id` of `graph` (one of the module's operators) as
    /// tensor `name` from `inputs`.
    pub(super) fn imported(&mut self, graph: &Graph, id: usize, name: &str, inputs: Vec<String>) {
        let node = &graph.nodes[id];
        match &node.op {
            Op::Pad([top, left, bottom, right]) => {
                let pads = [0, 0, *top, *left, 0, 0, *bottom, *right].map(|p| p as i64);
                let pads = self.int64(&format!("{}.pads", node.name), &[8], &pads);
                self.node("Pad", name, vec![inputs[0].clone(), pads], vec![]);
            }
            // Opset 13's Softmax normalises along `axis` alone.
            Op::Softmax => self.node("Softmax", name, inputs, vec![int("axis", 1)]),
            Op::Lrn {
                size,
                alpha,
                beta,
                bias,
            } => self.node(
                "LRN",
                name,
                inputs,
                vec![
                    int("size", *size as i64),
                    float("alpha", *alpha as f32),
                    float("beta", *beta as f32),
                    float("bias", *bias as f32),
                ],
            ),
            Op::ChannelShuffle { groups } => {
                let [c, h, w] = node.shape.map(|d| d as i64);
                let g = *groups as i64;
                let split = self.reshape(&node.name, &inputs[0], &[-1, g, c / g, h, w]);
                let moved = self.transpose(&node.name, &split, &[0, 2, 1, 3, 4]);
                let shape = self.int64(&format!("{}.out_shape", node.name), &[4], &[-1, c, h, w]);
                self.node("Reshape", name, vec![moved, shape], vec![]);
            }
            Op::HardSigmoid { alpha, beta } => self.node(
                "HardSigmoid",
                name,
                inputs,
                vec![float("alpha", *alpha as f32), float("beta", *beta as f32)],
            ),
            // Opset 13 has no HardSwish: x * HardSigmoid(x), as PyTorch
            // exports it below opset 14.
            Op::HardSwish => {
                let gate = format!("{}.gate", node.name);
                self.node(
                    "HardSigmoid",
                    &gate,
                    inputs.clone(),
                    vec![float("alpha", 1.0 / 6.0), float("beta", 0.5)],
                );
                self.node("Mul", name, vec![inputs[0].clone(), gate], vec![]);
            }
            other => unreachable!("{} is not an imported-model operator", other.kind()),
        }
    }
}
