//! ONNX import into the zoo's graph IR: the study's own exports and the
//! classic ImageNet files of other exporters (Caffe2 and PyTorch, opsets 7
//! to 17). The first operator outside [`SUPPORTED`] is an error of one line
//! naming the node and the operator, so a user knows at once why a model
//! cannot run on the native engine.
//!
//! Nodes must come in topological order (as ONNX requires); the input is
//! one NCHW float tensor and the output the last computed tensor. What the
//! IR has no operator for is resolved here: shape computations on
//! constants are folded ([`fold`]), inference no-ops (Dropout, Identity)
//! vanish, a zero Pad joins the convolution after it, and ShuffleNet's
//! Reshape-Transpose-Reshape becomes one channel shuffle. The transformer
//! operators, which exporters write as subgraphs of primitives (layer norm,
//! GELU, windowed attention, class token, patch merging), are recognised
//! as whole subgraphs ([`transformer`], [`attention`]) and become the IR
//! operator they were exported from.

use anyhow::{Context, Result, ensure};
use dlas_core::Dataset;
use dlas_zoo::weights::Weights;
use dlas_zoo::{Graph, GraphBuilder, Shape};
use fold::Tensor;
use prost::Message;
use std::collections::HashMap;
use tract_onnx::pb::{self, tensor_shape_proto::dimension, type_proto};

mod attention;
mod fold;
mod layers;
mod state;
mod subgraph;
#[cfg(test)]
mod tests;
mod transformer;
mod window;

pub use state::SUPPORTED;
use state::{Attrs, Importer, MAX_SIZE, Value, constant_node};

/// Reads an ONNX file into a graph and its weights.
pub fn import(bytes: &[u8], name: &str, dataset: Dataset) -> Result<(Graph, Weights)> {
    let model =
        pb::ModelProto::decode(bytes).context("not an ONNX model (protobuf decode failed)")?;
    // The default domain's version; files without one are taken as opset 13,
    // the version this crate exports.
    let opset = model
        .opset_import
        .iter()
        .filter(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .max()
        .unwrap_or(13);
    let graph = model.graph.context("the ONNX model has no graph")?;
    let mut values: HashMap<String, Value> = HashMap::new();
    for t in &graph.initializer {
        values.insert(t.name.clone(), Value::Const(Tensor::from_proto(t)?));
    }
    // Old exporters also list every weight as a graph input, whether an
    // initializer or a node's output (the model zoo's light files make
    // them with ConstantOfShape): the image is the input that is neither.
    let computed: std::collections::HashSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    let input = graph
        .input
        .iter()
        .find(|i| !values.contains_key(&i.name) && !computed.contains(i.name.as_str()))
        .context("the ONNX graph has no input")?;
    let builder = match input_shape(input) {
        Some(shape) => GraphBuilder::with_input(name, dataset, shape),
        None => GraphBuilder::new(name, dataset),
    };
    let mut importer = Importer {
        builder,
        values,
        params: Vec::new(),
        opset,
    };
    importer.values.insert(
        input.name.clone(),
        Value::Node {
            id: importer.builder.input(),
            rank: 4,
        },
    );
    // A recognised subgraph takes its nodes, which are then skipped.
    let nodes = subgraph::Nodes::new(&graph.node);
    let mut taken = vec![false; graph.node.len()];
    for (i, node) in graph.node.iter().enumerate() {
        if taken[i] {
            continue;
        }
        match transformer::recognise(&mut importer, &nodes, i)? {
            Some(subgraph) => subgraph.into_iter().for_each(|j| taken[j] = true),
            None => importer.node(node)?,
        }
    }
    let output = graph
        .output
        .first()
        .context("the ONNX graph has no output")?;
    let (id, _) = importer.tensor(&output.name)?;
    let graph = importer.builder.finish();
    ensure!(
        id == graph.nodes.len() - 1,
        "the graph output `{}` is not the last tensor computed",
        output.name
    );
    let mut by_node = vec![None; graph.nodes.len()];
    for (id, p) in importer.params {
        by_node[id] = Some(p);
    }
    Ok((graph, Weights { seed: 0, by_node }))
}

/// The per-sample shape of a graph input declared as a static
/// `[N, c, h, w]` of reasonable size; `None` leaves the dataset's.
fn input_shape(input: &pb::ValueInfoProto) -> Option<Shape> {
    let Some(type_proto::Value::TensorType(t)) = input.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    let dims = &t.shape.as_ref()?.dim;
    let static_dim = |d: &pb::tensor_shape_proto::Dimension| match d.value {
        Some(dimension::Value::DimValue(v)) => usize::try_from(v).ok().filter(|&v| v > 0),
        _ => None,
    };
    let shape: Vec<usize> = dims
        .get(1..)?
        .iter()
        .map(static_dim)
        .collect::<Option<_>>()?;
    let shape: Shape = shape.try_into().ok()?;
    (shape.iter().product::<usize>() <= MAX_SIZE * 16).then_some(shape)
}

impl Importer {
    /// Imports one node, with its name and operator in any error.
    fn node(&mut self, node: &pb::NodeProto) -> Result<()> {
        self.node_inner(node)
            .with_context(|| format!("node `{}` ({})", node.name, node.op_type))
            .map_err(|e| anyhow::anyhow!("{e:#}"))
    }

    fn node_inner(&mut self, node: &pb::NodeProto) -> Result<()> {
        let a = Attrs(node);
        let op = node.op_type.as_str();
        let input = |i: usize| node.input.get(i).filter(|n| !n.is_empty());
        let first = input(0).cloned().unwrap_or_default();
        let out = node.output.first().cloned().unwrap_or_default();
        // Ops that only rename, and those folded when their inputs are constants.
        match op {
            "Identity" | "Dropout" => {
                // Opset 12 made training mode an input; it must be off.
                if op == "Dropout"
                    && self.opset >= 12
                    && let Some(t) = input(2)
                {
                    ensure!(
                        self.constant(t)?.int_values()? == [0],
                        "Dropout in training mode"
                    );
                }
                let v = self.value(&first)?.clone();
                self.values.insert(out, v);
                return Ok(());
            }
            "Constant" => {
                self.values.insert(out, Value::Const(constant_node(&a)?));
                return Ok(());
            }
            "Shape" => {
                let dims = match self.value(&first)? {
                    Value::Const(t) => t.dims.clone(),
                    _ => {
                        // The batch folds as 1: a shape built from it only
                        // ever feeds a Reshape, whose first dimension the
                        // importer reads as the batch.
                        let (id, rank) = self.tensor(&first)?;
                        let [c, h, w] = self.builder.shape(id);
                        if rank == 2 {
                            vec![1, c]
                        } else {
                            vec![1, c, h, w]
                        }
                    }
                };
                let t = Tensor::ints(vec![dims.len()], dims.iter().map(|&d| d as i64).collect());
                self.values.insert(out, Value::Const(t));
                return Ok(());
            }
            _ => {}
        }
        let all_const = !node.input.is_empty()
            && node
                .input
                .iter()
                .filter(|n| !n.is_empty())
                .all(|n| matches!(self.values.get(n), Some(Value::Const(_))));
        if fold::FOLDED.contains(&op) && (all_const || op == "ConstantOfShape") {
            let value = match a.get("value").and_then(|v| v.t.as_ref()) {
                Some(t) if op == "ConstantOfShape" => Some(Tensor::from_proto(t)?),
                _ => None,
            };
            let inputs: Vec<Option<&Tensor>> = node
                .input
                .iter()
                .map(|n| match self.values.get(n) {
                    Some(Value::Const(t)) => Some(t),
                    _ => None,
                })
                .chain(value.as_ref().map(Some))
                .collect();
            let axes = self.axes(node)?;
            let t = fold::fold(op, &inputs, &|n| a.int(n), axes)?;
            self.values.insert(out, Value::Const(t));
            return Ok(());
        }
        let value = layers::import(self, node, &a)?;
        self.values.insert(out, value);
        Ok(())
    }
}
