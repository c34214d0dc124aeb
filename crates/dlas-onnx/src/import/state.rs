//! What the importer's parts share: the operators it reads, the values ONNX
//! names stand for, a node's attributes and the importer's state with its
//! accessors. A leaf, so the operator modules that `mod.rs` dispatches to
//! import it rather than `mod.rs`.

use super::fold::{self, Tensor};
use anyhow::{Context, Result, bail};
use dlas_zoo::weights::Params;
use dlas_zoo::{GraphBuilder, NodeId};
use std::collections::HashMap;
use tract_onnx::pb;

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
pub(super) const MAX_SIZE: usize = 1 << 20;

/// What an ONNX tensor name stands for while importing.
#[derive(Debug, Clone)]
pub(super) enum Value {
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

/// The value of a Constant node.
pub(super) fn constant_node(a: &Attrs) -> Result<Tensor> {
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
pub(super) struct Attrs<'a>(pub(super) &'a pb::NodeProto);

impl Attrs<'_> {
    pub(super) fn get(&self, name: &str) -> Option<&pb::AttributeProto> {
        self.0.attribute.iter().find(|a| a.name == name)
    }
    pub(super) fn int(&self, name: &str) -> Option<i64> {
        self.get(name).map(|a| a.i)
    }
    pub(super) fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.get(name).map(|a| a.ints.clone())
    }
    pub(super) fn float(&self, name: &str) -> Option<f32> {
        self.get(name).map(|a| a.f)
    }
    pub(super) fn string(&self, name: &str) -> Option<String> {
        self.get(name)
            .map(|a| String::from_utf8_lossy(&a.s).into_owned())
    }
}

/// The graph built so far and what each ONNX name stands for.
pub(super) struct Importer {
    pub(super) builder: GraphBuilder,
    pub(super) values: HashMap<String, Value>,
    pub(super) params: Vec<(NodeId, Params)>,
    pub(super) opset: i64,
}

impl Importer {
    /// The value named `name`.
    pub(super) fn value(&self, name: &str) -> Result<&Value> {
        self.values
            .get(name)
            .with_context(|| format!("input `{name}` is not computed before it"))
    }

    /// The node computing tensor `name` and its ONNX rank; a held-back Pad
    /// becomes an IR Pad node here.
    pub(super) fn tensor(&mut self, name: &str) -> Result<(NodeId, usize)> {
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
    pub(super) fn constant(&self, name: &str) -> Result<&Tensor> {
        match self.value(name)? {
            Value::Const(t) => Ok(t),
            _ => bail!("`{name}` must be a constant (an initializer or a folded shape)"),
        }
    }

    /// Squeeze's and Unsqueeze's axes: an attribute before opset 13, the
    /// second input since.
    pub(super) fn axes(&self, node: &pb::NodeProto) -> Result<Option<Vec<i64>>> {
        if !matches!(node.op_type.as_str(), "Squeeze" | "Unsqueeze") {
            return Ok(None);
        }
        match node.input.get(1).filter(|n| !n.is_empty()) {
            Some(name) if self.opset >= 13 => Ok(Some(self.constant(name)?.int_values()?)),
            _ => Ok(Attrs(node).ints("axes")),
        }
    }
}
