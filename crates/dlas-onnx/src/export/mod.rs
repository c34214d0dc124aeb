//! ONNX export of a zoo graph with its weights (opset 13, IR version 7).
//!
//! Messages are the prost types that `tract-onnx` generates from onnx.proto,
//! so no protobuf compiler or Python is needed. The batch dimension is the
//! symbolic `N`; batch norm stays a node (folding it is a runtime's job).
//!
//! [`export`] writes the float32 model whose bytes `data/models.lock` pins;
//! [`export_with`] adds the compressed numerics (float16, int8 QDQ) and the
//! per-node outputs that evaluation and calibration read.
//!
//! The transformer operators are decomposed into opset-13 primitives that
//! tract 0.23 and ONNX Runtime both run (opset 13 has no LayerNormalization
//! or Gelu): layer norm as ReduceMean/Sub/Mul/Sqrt/Div with the affine as
//! Mul/Add, GELU through Erf, attention as Reshape/Transpose into windows,
//! MatMul, Softmax and MatMul (Gather for Swin's relative-position bias, a
//! constant -100 mask and Slice/Concat rolls for its shifted windows), the
//! class token as Pad + Add, and patch merging as Reshape/Transpose.

pub use dlas_zoo::qdq::{ActivationQuant, Qdq, WeightQuant};
use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, Op};
use prost::Message;
use tract_onnx::pb::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, attribute_proto::AttributeType,
    tensor_proto::DataType, tensor_shape_proto::Dimension, tensor_shape_proto::dimension,
    type_proto,
};
use tract_onnx::prelude::f16;

mod imported;
mod transformer;

pub(crate) use transformer::{relative_index, shift_mask};

pub const OPSET: i64 = 13;
pub const INPUT: &str = "input";
pub const OUTPUT: &str = "output";

/// The float type of weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dtype {
    #[default]
    F32,
    /// Float16 initializers, input, output and activations. Linear layers
    /// become MatMul + Add, because tract cannot type a float16 Gemm.
    F16,
}

/// What [`export_with`] writes besides the graph and weights.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportOptions<'a> {
    pub dtype: Dtype,
    /// Quantize-dequantize pairs on every conv and linear input, int8 weights
    /// behind DequantizeLinear (float32 only).
    pub qdq: Option<&'a Qdq>,
    /// Also declare every node's output (in node order, after `output`) as a
    /// graph output, so a runtime returns intermediate tensors.
    pub node_outputs: bool,
}

/// Serialises `graph` with `weights` to ONNX bytes. Identical inputs give identical bytes.
pub fn export(graph: &Graph, weights: &Weights) -> Vec<u8> {
    model(graph, weights).encode_to_vec()
}

/// Builds the ONNX model message.
pub fn model(graph: &Graph, weights: &Weights) -> ModelProto {
    model_with(graph, weights, &ExportOptions::default())
        .expect("the default options are always valid")
}

/// Serialises with `options`; the default options give [`export`]'s bytes.
pub fn export_with(
    graph: &Graph,
    weights: &Weights,
    options: &ExportOptions,
) -> anyhow::Result<Vec<u8>> {
    Ok(model_with(graph, weights, options)?.encode_to_vec())
}

/// The tensor name a node's output has in the exported file.
pub fn tensor_name(graph: &Graph, id: usize) -> String {
    if id == 0 {
        INPUT.to_string()
    } else if id == graph.nodes.len() - 1 {
        OUTPUT.to_string()
    } else {
        graph.nodes[id].name.clone()
    }
}

/// Builds the ONNX model message with `options`.
pub fn model_with(
    graph: &Graph,
    weights: &Weights,
    options: &ExportOptions,
) -> anyhow::Result<ModelProto> {
    anyhow::ensure!(
        !(options.qdq.is_some() && options.dtype == Dtype::F16),
        "QDQ export is float32 only: int8 and float16 are different compressions"
    );
    let mut out = GraphOut {
        dtype: options.dtype,
        ..GraphOut::default()
    };
    let last = graph.nodes.len() - 1;
    let mut dequantized = std::collections::BTreeMap::new();
    for (id, node) in graph.nodes.iter().enumerate() {
        let name = tensor_name(graph, id);
        let mut inputs: Vec<String> = node
            .inputs
            .iter()
            .map(|&i| graph.nodes[i].name.clone())
            .collect();
        let params = weights.by_node.get(id).and_then(Option::as_ref);
        let quant = options
            .qdq
            .filter(|_| matches!(node.op, Op::Conv(_) | Op::Linear { .. }));
        if let Some(qdq) = quant {
            let &src = node.inputs.first().expect("layers have an input");
            inputs[0] = match dequantized.get(&src) {
                Some(dq) => String::clone(dq),
                None => {
                    let dq = out.quantize_activation(graph, qdq, src)?;
                    dequantized.insert(src, dq.clone());
                    dq
                }
            };
        }
        let weight_quant = quant.and_then(|q| q.weights.get(id).and_then(Option::as_ref));
        if quant.is_some() && weight_quant.is_none() {
            anyhow::bail!("no int8 weights for layer {}", node.name);
        }
        match (&node.op, params) {
            (Op::Input, _) => {}
            (Op::Conv(c), Some(Params::Conv { weight, bias })) => {
                let mut ins = inputs;
                let w = [c.weight_shape().map(|d| d as i64)].concat();
                ins.push(match weight_quant {
                    Some(q) => out.int8_weight(&node.name, &w, q)?,
                    None => out.initializer(&format!("{}.weight", node.name), &w, weight),
                });
                if let Some(b) = bias {
                    ins.push(out.initializer(&format!("{}.bias", node.name), &[b.len() as i64], b));
                }
                let k = c.kernel as i64;
                let s = c.stride as i64;
                let p = c.padding as i64;
                out.node(
                    "Conv",
                    &name,
                    ins,
                    vec![
                        ints("kernel_shape", &[k, k]),
                        ints("strides", &[s, s]),
                        ints("pads", &[p, p, p, p]),
                        ints("dilations", &[1, 1]),
                        int("group", c.groups as i64),
                    ],
                );
            }
            (
                Op::BatchNorm,
                Some(Params::BatchNorm {
                    gamma,
                    beta,
                    mean,
                    var,
                }),
            ) => {
                let mut ins = inputs;
                let dims = [gamma.len() as i64];
                for (role, values) in [
                    ("gamma", gamma),
                    ("beta", beta),
                    ("mean", mean),
                    ("var", var),
                ] {
                    ins.push(out.initializer(&format!("{}.{role}", node.name), &dims, values));
                }
                out.node(
                    "BatchNormalization",
                    &name,
                    ins,
                    vec![float("epsilon", 1e-5)],
                );
            }
            (Op::Relu, _) => out.node("Relu", &name, inputs, vec![]),
            (Op::Sigmoid, _) => out.node("Sigmoid", &name, inputs, vec![]),
            (Op::Relu6, _) => {
                let mut ins = inputs;
                ins.push(out.initializer(&format!("{}.min", node.name), &[], &[0.0]));
                ins.push(out.initializer(&format!("{}.max", node.name), &[], &[6.0]));
                out.node("Clip", &name, ins, vec![]);
            }
            (Op::Silu, _) => {
                // SiLU(x) = x * sigmoid(x): opset 13 has no fused operator.
                let sig = format!("{}.sigmoid", node.name);
                out.node("Sigmoid", &sig, inputs.clone(), vec![]);
                out.node("Mul", &name, vec![inputs[0].clone(), sig], vec![]);
            }
            (Op::Add, _) => out.node("Add", &name, inputs, vec![]),
            (Op::Mul, _) => out.node("Mul", &name, inputs, vec![]),
            (Op::MaxPool(p) | Op::AvgPool(p), _) => {
                let (k, s, pad) = (p.kernel as i64, p.stride as i64, p.padding as i64);
                let end = pad + p.end as i64;
                let kind = node.op.kind();
                out.node(
                    kind,
                    &name,
                    inputs,
                    vec![
                        ints("kernel_shape", &[k, k]),
                        ints("strides", &[s, s]),
                        ints("pads", &[pad, pad, end, end]),
                    ],
                );
            }
            (Op::GlobalAvgPool, _) => out.node("GlobalAveragePool", &name, inputs, vec![]),
            (Op::Concat, _) => out.node("Concat", &name, inputs, vec![int("axis", 1)]),
            (Op::Flatten, _) => out.node("Flatten", &name, inputs, vec![int("axis", 1)]),
            (
                Op::Linear {
                    in_features,
                    out_features,
                },
                Some(Params::Linear { weight, bias }),
            ) => {
                let mut ins = inputs;
                let w = [*out_features as i64, *in_features as i64];
                let bias_name = format!("{}.bias", node.name);
                if options.dtype == Dtype::F16 {
                    // MatMul(x, W^T) + b: tract types no float16 Gemm.
                    let mut transposed = vec![0.0; weight.len()];
                    for o in 0..*out_features {
                        for i in 0..*in_features {
                            transposed[i * out_features + o] = weight[o * in_features + i];
                        }
                    }
                    let wt = out.initializer(
                        &format!("{}.weight_t", node.name),
                        &[w[1], w[0]],
                        &transposed,
                    );
                    ins.push(wt);
                    let product = format!("{}.matmul", node.name);
                    out.node("MatMul", &product, ins, vec![]);
                    let b = out.initializer(&bias_name, &[w[0]], bias);
                    out.node("Add", &name, vec![product, b], vec![]);
                } else {
                    ins.push(match weight_quant {
                        Some(q) => out.int8_weight(&node.name, &w, q)?,
                        None => out.initializer(&format!("{}.weight", node.name), &w, weight),
                    });
                    ins.push(out.initializer(&bias_name, &[w[0]], bias));
                    out.node("Gemm", &name, ins, vec![int("transB", 1)]);
                }
            }
            (Op::LayerNorm { eps }, Some(Params::LayerNorm { gamma, beta })) => {
                out.layer_norm(&node.name, &name, &inputs[0], *eps, gamma, beta);
            }
            (Op::Gelu, _) => out.gelu(&node.name, &name, &inputs[0]),
            (Op::Attention(a), params) => {
                let table = match params {
                    Some(Params::Tensor(t)) => Some(t.as_slice()),
                    _ => None,
                };
                anyhow::ensure!(
                    table.map_or(0, <[f32]>::len) == a.bias_count(),
                    "weights do not match node {} ({a:?})",
                    node.name
                );
                let shape = graph.nodes[node.inputs[0]].shape;
                out.attention(&node.name, &name, &inputs[0], shape, a, table);
            }
            (Op::ClassToken, Some(Params::Tensor(token))) => {
                let [d, h, w] = graph.nodes[node.inputs[0]].shape;
                let (d, tokens) = (d as i64, (h * w) as i64);
                let seq = out.reshape(&node.name, &inputs[0], &[-1, d, tokens, 1]);
                let pads = out.int64(
                    &format!("{}.pads", node.name),
                    &[8],
                    &[0, 0, 1, 0, 0, 0, 0, 0],
                );
                let padded = format!("{}.padded", node.name);
                out.node("Pad", &padded, vec![seq, pads], vec![]);
                let token = out.initializer(&format!("{}.token", node.name), &[1, d, 1, 1], token);
                let token_pads = out.int64(
                    &format!("{}.token_pads", node.name),
                    &[8],
                    &[0, 0, 0, 0, 0, 0, tokens, 0],
                );
                let placed = format!("{}.token_padded", node.name);
                out.node("Pad", &placed, vec![token, token_pads], vec![]);
                out.node("Add", &name, vec![padded, placed], vec![]);
            }
            (Op::PositionEmbedding, Some(Params::Tensor(embedding))) => {
                let [d, h, w] = node.shape.map(|v| v as i64);
                let e = out.initializer(
                    &format!("{}.embedding", node.name),
                    &[1, d, h, w],
                    embedding,
                );
                out.node("Add", &name, vec![inputs[0].clone(), e], vec![]);
            }
            (Op::LayerScale, Some(Params::Tensor(gamma))) => {
                let c = gamma.len() as i64;
                let g = out.initializer(&format!("{}.gamma", node.name), &[c, 1, 1], gamma);
                out.node("Mul", &name, vec![inputs[0].clone(), g], vec![]);
            }
            (Op::FirstToken, _) => {
                out.slice(&node.name, &inputs[0], 2, [0, 1], Some(&name));
            }
            (Op::SpaceToDepth, _) => {
                let [c, h, w] = graph.nodes[node.inputs[0]].shape.map(|v| v as i64);
                let split = out.reshape(&node.name, &inputs[0], &[-1, c, h / 2, 2, w / 2, 2]);
                // (n, c, y, dy, x, dx) -> (n, dx, dy, c, y, x): Swin's channel order.
                let moved = format!("{}.transpose", node.name);
                out.node(
                    "Transpose",
                    &moved,
                    vec![split],
                    vec![ints("perm", &[0, 5, 3, 1, 2, 4])],
                );
                let shape = out.int64(
                    &format!("{}.out_shape", node.name),
                    &[4],
                    &[-1, 4 * c, h / 2, w / 2],
                );
                out.node("Reshape", &name, vec![moved, shape], vec![]);
            }
            (
                Op::Pad(_)
                | Op::Softmax
                | Op::Lrn { .. }
                | Op::ChannelShuffle { .. }
                | Op::HardSigmoid { .. }
                | Op::HardSwish,
                None,
            ) => out.imported(graph, id, &name, inputs),
            (op, _) => anyhow::bail!("weights do not match node {} ({op:?})", node.name),
        }
    }
    let [c, h, w] = graph.input_shape();
    let classes = graph.output().shape[0];
    let elem = options.dtype.elem_type();
    let mut outputs = vec![value_info(OUTPUT, elem, Some(&[None, Some(classes)]))];
    if options.node_outputs {
        outputs.extend((1..last).map(|id| value_info(&tensor_name(graph, id), elem, None)));
    }
    Ok(ModelProto {
        ir_version: 7,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: OPSET,
        }],
        producer_name: "dlas-zoo".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: format!(
            "{} for {} with seeded weights (seed {})",
            graph.name, graph.dataset, weights.seed
        ),
        graph: Some(GraphProto {
            node: out.nodes,
            name: graph.name.clone(),
            initializer: out.initializers,
            input: vec![value_info(
                INPUT,
                elem,
                Some(&[None, Some(c), Some(h), Some(w)]),
            )],
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    })
}

impl Dtype {
    fn elem_type(self) -> i32 {
        match self {
            Dtype::F32 => DataType::Float as i32,
            Dtype::F16 => DataType::Float16 as i32,
        }
    }
}

#[derive(Default)]
struct GraphOut {
    dtype: Dtype,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
}

impl GraphOut {
    fn node(&mut self, op: &str, name: &str, inputs: Vec<String>, attribute: Vec<AttributeProto>) {
        self.nodes.push(NodeProto {
            input: inputs,
            output: vec![name.to_string()],
            name: name.to_string(),
            op_type: op.to_string(),
            attribute,
            ..Default::default()
        });
    }

    /// Adds a float tensor (in the export's float type) and returns its name.
    fn initializer(&mut self, name: &str, dims: &[i64], values: &[f32]) -> String {
        let raw_data = match self.dtype {
            Dtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Dtype::F16 => values
                .iter()
                .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                .collect(),
        };
        self.raw(name, dims, self.dtype.elem_type(), raw_data)
    }

    fn raw(&mut self, name: &str, dims: &[i64], data_type: i32, raw_data: Vec<u8>) -> String {
        self.initializers.push(TensorProto {
            dims: dims.to_vec(),
            data_type,
            name: name.to_string(),
            raw_data,
            ..Default::default()
        });
        name.to_string()
    }

    /// An int64 constant (shapes, pads, indices).
    fn int64(&mut self, name: &str, dims: &[i64], values: &[i64]) -> String {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.raw(name, dims, DataType::Int64 as i32, bytes)
    }

    /// A scalar in the export's float type.
    fn scalar(&mut self, name: &str, value: f32) -> String {
        self.initializer(name, &[], &[value])
    }

    /// Adds an `op` node on `inputs` named `{prefix}.{suffix}`; returns the name.
    fn step(&mut self, op: &str, prefix: &str, suffix: &str, inputs: Vec<String>) -> String {
        let name = format!("{prefix}.{suffix}");
        self.node(op, &name, inputs, vec![]);
        name
    }

    /// Reshapes `x` to `shape` (-1 for the batch); the steps of one node are
    /// told apart by a counter in the names.
    fn reshape(&mut self, prefix: &str, x: &str, shape: &[i64]) -> String {
        let k = self.nodes.len();
        let dims = self.int64(&format!("{prefix}.shape{k}"), &[shape.len() as i64], shape);
        self.step(
            "Reshape",
            prefix,
            &format!("reshape{k}"),
            vec![x.to_string(), dims],
        )
    }

    fn transpose(&mut self, prefix: &str, x: &str, perm: &[i64]) -> String {
        let name = format!("{prefix}.transpose{}", self.nodes.len());
        self.node(
            "Transpose",
            &name,
            vec![x.to_string()],
            vec![ints("perm", perm)],
        );
        name
    }

    /// QuantizeLinear + DequantizeLinear on node `src`'s output; returns the
    /// dequantized tensor's name.
    fn quantize_activation(
        &mut self,
        graph: &Graph,
        qdq: &Qdq,
        src: usize,
    ) -> anyhow::Result<String> {
        let name = tensor_name(graph, src);
        let node = &graph.nodes[src].name;
        let q = qdq
            .activations
            .get(src)
            .and_then(Option::as_ref)
            .ok_or_else(|| anyhow::anyhow!("no activation quantisation for tensor {node}"))?;
        let scale = self.raw(
            &format!("{name}.act_scale"),
            &[],
            DataType::Float as i32,
            q.scale.to_le_bytes().to_vec(),
        );
        let zp = self.raw(
            &format!("{name}.act_zero_point"),
            &[],
            DataType::Uint8 as i32,
            vec![q.zero_point],
        );
        let quantized = format!("{name}.q");
        let dequantized = format!("{name}.dq");
        self.node(
            "QuantizeLinear",
            &quantized,
            vec![name, scale.clone(), zp.clone()],
            vec![],
        );
        self.node(
            "DequantizeLinear",
            &dequantized,
            vec![quantized, scale, zp],
            vec![],
        );
        Ok(dequantized)
    }

    /// An int8 initializer behind a per-output-channel DequantizeLinear
    /// (axis 0); returns the float weight's name.
    fn int8_weight(
        &mut self,
        layer: &str,
        dims: &[i64],
        q: &WeightQuant,
    ) -> anyhow::Result<String> {
        let count: i64 = dims.iter().product();
        anyhow::ensure!(
            q.values.len() as i64 == count && q.scales.len() as i64 == dims[0],
            "int8 weights of {layer} do not match its shape {dims:?}"
        );
        let values = self.raw(
            &format!("{layer}.weight_q"),
            dims,
            DataType::Int8 as i32,
            q.values.iter().map(|v| v.to_le_bytes()[0]).collect(),
        );
        let channels = [dims[0]];
        let scales = self.raw(
            &format!("{layer}.weight_scale"),
            &channels,
            DataType::Float as i32,
            q.scales.iter().flat_map(|v| v.to_le_bytes()).collect(),
        );
        let zero = self.raw(
            &format!("{layer}.weight_zero_point"),
            &channels,
            DataType::Int8 as i32,
            vec![0; dims[0] as usize],
        );
        let weight = format!("{layer}.weight");
        self.node(
            "DequantizeLinear",
            &weight,
            vec![values, scales, zero],
            vec![int("axis", 0)],
        );
        Ok(weight)
    }
}

/// A typed value; `dims: None` leaves the shape to the runtime's inference.
fn value_info(name: &str, elem_type: i32, dims: Option<&[Option<usize>]>) -> ValueInfoProto {
    let shape = dims.map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|d| Dimension {
                denotation: String::new(),
                value: Some(match d {
                    Some(v) => dimension::Value::DimValue(*v as i64),
                    None => dimension::Value::DimParam("N".into()),
                }),
            })
            .collect(),
    });
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape,
            })),
        }),
        doc_string: String::new(),
    }
}

fn ints(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Ints as i32,
        ints: values.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Int as i32,
        i: value,
        ..Default::default()
    }
}

fn float(name: &str, value: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Float as i32,
        f: value,
        ..Default::default()
    }
}

/// Decodes ONNX bytes, for round-trip checks.
pub fn decode(bytes: &[u8]) -> Result<pb::ModelProto, prost::DecodeError> {
    pb::ModelProto::decode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::Dataset;
    use dlas_zoo::weights;
    use tract_onnx::prelude::*;

    fn exported(name: &str) -> (dlas_zoo::Graph, Vec<u8>) {
        let net = dlas_zoo::find(Dataset::Cifar10, name).unwrap();
        let graph = (net.build)();
        let bytes = export(&graph, &weights::generate(&graph, 1));
        (graph, bytes)
    }

    #[test]
    fn export_is_deterministic_and_round_trips() {
        let (graph, bytes) = exported("mobilenetv2");
        let (_, again) = exported("mobilenetv2");
        assert_eq!(bytes, again);
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded, model(&graph, &weights::generate(&graph, 1)));
    }

    /// tract parses, types and runs the exported file: the ONNX is valid and
    /// the shapes it infers are the zoo's.
    #[test]
    fn tract_loads_and_runs_every_cifar_network() {
        for name in ["resnet18", "mobilenetv1", "mobilenetv2", "vgg16"] {
            let (graph, bytes) = exported(name);
            let model = tract_onnx::onnx()
                .model_for_read(&mut &bytes[..])
                .unwrap()
                .with_input_fact(0, f32::fact([1, 3, 32, 32]).into())
                .unwrap()
                .into_optimized()
                .unwrap()
                .into_runnable()
                .unwrap();
            let x = weights::input(&graph, 3, 1);
            let input = tract_ndarray::Array4::from_shape_vec((1, 3, 32, 32), x).unwrap();
            let out = model.run(tvec!(Tensor::from(input).into())).unwrap();
            let logits = out[0].to_plain_array_view::<f32>().unwrap();
            assert_eq!(logits.shape(), &[1, 10], "{name}");
            assert!(logits.iter().all(|v| v.is_finite()), "{name}");
        }
    }
}
