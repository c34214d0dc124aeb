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

use anyhow::{Context, Result, bail, ensure};
use dlas_core::Dataset;
use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, GraphBuilder, NodeId, Shape};
use fold::Tensor;
use prost::Message;
use std::collections::HashMap;
use tract_onnx::pb::{self, tensor_shape_proto::dimension, type_proto};

mod attention;
mod fold;
mod layers;
mod subgraph;
#[cfg(test)]
mod tests;
mod transformer;
mod window;

/// The operators the importer understands (folded or removed ones included).
pub const SUPPORTED: &[&str] = &[
    "Conv",
    "BatchNormalization",
    "Relu",
    "Clip",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Add",
    "Sum",
    "Mul",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "Concat",
    "Flatten",
    "Reshape",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Gemm",
    "Softmax",
    "LRN",
    "Pad",
    "Dropout",
    "Identity",
    "Constant",
    "ConstantOfShape",
    "Shape",
    "Gather",
    "Cast",
    "Sub",
    "Div",
    "ReduceMean",
    "Pow",
    "Sqrt",
    "Erf",
    "MatMul",
    "Slice",
    "LayerNormalization",
    "Gelu",
];

/// The largest size (channels, kernel, stride, padding) an imported model
/// may have: far above any network's, far below what would overflow a shape.
const MAX_SIZE: usize = 1 << 20;

/// What an ONNX tensor name stands for while importing.
#[derive(Debug, Clone)]
enum Value {
    /// A node's output; `rank` is the ONNX rank: 4 for `[N, c, h, w]`, 2
    /// for `[N, f]` (an IR `[f, 1, 1]`).
    Node { id: NodeId, rank: usize },
    /// An initializer, a Constant or a folded computation.
    Const(Tensor),
    /// A zero Pad of a node by (top, left, bottom, right), held back so
    /// that a convolution reading it pads instead (any other reader gets
    /// an IR Pad node).
    Padded { id: NodeId, pads: [usize; 4] },
    /// A node viewed as `[N, groups, c / groups, h, w]`, the first step of
    /// a channel shuffle; `swapped` after its Transpose of the two group axes.
    Grouped {
        id: NodeId,
        groups: usize,
        swapped: bool,
    },
}

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

/// The value of a Constant node.
fn constant_node(a: &Attrs) -> Result<Tensor> {
    Ok(if let Some(t) = a.get("value").and_then(|v| v.t.as_ref()) {
        Tensor::from_proto(t)?
    } else if let Some(v) = a.get("value_ints") {
        Tensor::ints(vec![v.ints.len()], v.ints.clone())
    } else if let Some(v) = a.int("value_int") {
        Tensor::ints(vec![], vec![v])
    } else if let Some(v) = a.float("value_float") {
        Tensor {
            dims: vec![],
            data: fold::Data::Float(vec![v]),
        }
    } else {
        bail!("Constant without a supported value attribute");
    })
}

/// Attributes of one node.
struct Attrs<'a>(&'a pb::NodeProto);

impl Attrs<'_> {
    fn get(&self, name: &str) -> Option<&pb::AttributeProto> {
        self.0.attribute.iter().find(|a| a.name == name)
    }
    fn int(&self, name: &str) -> Option<i64> {
        self.get(name).map(|a| a.i)
    }
    fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.get(name).map(|a| a.ints.clone())
    }
    fn float(&self, name: &str) -> Option<f32> {
        self.get(name).map(|a| a.f)
    }
    fn string(&self, name: &str) -> Option<String> {
        self.get(name)
            .map(|a| String::from_utf8_lossy(&a.s).into_owned())
    }
}

struct Importer {
    builder: GraphBuilder,
    values: HashMap<String, Value>,
    params: Vec<(NodeId, Params)>,
    opset: i64,
}

impl Importer {
    /// The value named `name`.
    fn value(&self, name: &str) -> Result<&Value> {
        self.values
            .get(name)
            .with_context(|| format!("input `{name}` is not computed before it"))
    }

    /// The node computing tensor `name` and its ONNX rank; a held-back Pad
    /// becomes an IR Pad node here.
    fn tensor(&mut self, name: &str) -> Result<(NodeId, usize)> {
        match self.value(name)?.clone() {
            Value::Node { id, rank } => Ok((id, rank)),
            Value::Padded { id, pads } => {
                let id = self.builder.pad(id, pads);
                self.values
                    .insert(name.to_string(), Value::Node { id, rank: 4 });
                Ok((id, 4))
            }
            Value::Const(_) => bail!("`{name}` is a constant where a computed tensor is expected"),
            Value::Grouped { .. } => {
                bail!("`{name}` is a 5-D view that only a channel shuffle may use")
            }
        }
    }

    /// Constant `name`.
    fn constant(&self, name: &str) -> Result<&Tensor> {
        match self.value(name)? {
            Value::Const(t) => Ok(t),
            _ => bail!("`{name}` must be a constant (an initializer or a folded shape)"),
        }
    }

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

    /// Squeeze's and Unsqueeze's axes: an attribute before opset 13, the
    /// second input since.
    fn axes(&self, node: &pb::NodeProto) -> Result<Option<Vec<i64>>> {
        if !matches!(node.op_type.as_str(), "Squeeze" | "Unsqueeze") {
            return Ok(None);
        }
        match node.input.get(1).filter(|n| !n.is_empty()) {
            Some(name) if self.opset >= 13 => Ok(Some(self.constant(name)?.int_values()?)),
            _ => Ok(Attrs(node).ints("axes")),
        }
    }
}
