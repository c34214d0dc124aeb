//! Runs a zoo graph through tract, returning the network output and, when
//! asked, every node's output.
//!
//! This is the reference evaluator of compression: calibration reads the
//! per-node tensors, fidelity reads the logits. It exports the graph with
//! [`ExportOptions::node_outputs`] so intermediate tensors survive tract's
//! optimiser, then runs `into_optimized()`.

use crate::export::{Dtype, ExportOptions, model_with};
use dlas_zoo::Graph;
use dlas_zoo::weights::Weights;
use prost::Message;
use tract_onnx::prelude::*;

/// Outputs of one evaluation, each flattened batch-major (N, C, H, W).
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The network output, `batch * classes` values.
    pub output: Vec<f32>,
    /// Per node id: that node's output (node 0: the input), when requested.
    pub nodes: Option<Vec<Vec<f32>>>,
}

/// Evaluates `graph` with `weights` on `input` (`batch` samples of the
/// graph's input shape), in the numerics `options` describe.
pub fn evaluate(
    graph: &Graph,
    weights: &Weights,
    options: &ExportOptions,
    input: &[f32],
    batch: usize,
    per_node: bool,
) -> anyhow::Result<Evaluation> {
    let [c, h, w] = graph.input_shape();
    anyhow::ensure!(
        batch > 0 && input.len() == batch * c * h * w,
        "input of {} values does not fill a batch of {batch} samples of shape {c}x{h}x{w} ({} values)",
        input.len(),
        batch * c * h * w
    );
    let options = ExportOptions {
        node_outputs: per_node,
        ..*options
    };
    let bytes = model_with(graph, weights, &options)?.encode_to_vec();
    let shape = [batch, c, h, w];
    let outputs = run_bytes(&bytes, options.dtype, &shape, input)?;
    let output = outputs[0].clone();
    let nodes = per_node.then(|| {
        let mut nodes = Vec::with_capacity(graph.nodes.len());
        nodes.push(input.to_vec());
        nodes.extend(outputs[1..].iter().cloned());
        nodes.push(output.clone());
        nodes
    });
    Ok(Evaluation { output, nodes })
}

/// Runs ONNX `bytes` on one input of `shape` and returns every graph output as float32.
pub fn run_bytes(
    bytes: &[u8],
    dtype: Dtype,
    shape: &[usize],
    input: &[f32],
) -> anyhow::Result<Vec<Vec<f32>>> {
    let tensor = Tensor::from_shape(shape, input)?;
    let (fact, tensor) = match dtype {
        Dtype::F32 => (f32::fact(shape), tensor),
        Dtype::F16 => (f16::fact(shape), tensor.cast_to::<f16>()?.into_owned()),
    };
    let plan = tract_onnx::onnx()
        .model_for_read(&mut &bytes[..])?
        .with_input_fact(0, fact.into())?
        .into_optimized()?
        .into_runnable()?;
    let outputs = plan.run(tvec!(tensor.into()))?;
    outputs
        .iter()
        .map(|t| {
            let t = t.cast_to::<f32>()?;
            Ok(t.to_plain_array_view::<f32>()?.iter().copied().collect())
        })
        .collect()
}
