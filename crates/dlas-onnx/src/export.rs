//! ONNX export of a zoo graph with its weights (opset 13, IR version 7).
//!
//! Messages are the prost types that `tract-onnx` generates from onnx.proto,
//! so no protobuf compiler or Python is needed. The batch dimension is the
//! symbolic `N`; batch norm stays a node (folding it is a runtime's job).

use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, Op};
use prost::Message;
use tract_onnx::pb::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, attribute_proto::AttributeType,
    tensor_proto::DataType, tensor_shape_proto::Dimension, tensor_shape_proto::dimension,
    type_proto,
};

pub const OPSET: i64 = 13;
pub const INPUT: &str = "input";
pub const OUTPUT: &str = "output";

/// Serialises `graph` with `weights` to ONNX bytes. Identical inputs give identical bytes.
pub fn export(graph: &Graph, weights: &Weights) -> Vec<u8> {
    model(graph, weights).encode_to_vec()
}

/// Builds the ONNX model message.
pub fn model(graph: &Graph, weights: &Weights) -> ModelProto {
    let mut out = GraphOut::default();
    let last = graph.nodes.len() - 1;
    for (id, node) in graph.nodes.iter().enumerate() {
        let name = if id == last {
            OUTPUT.to_string()
        } else {
            node.name.clone()
        };
        let inputs: Vec<String> = node
            .inputs
            .iter()
            .map(|&i| graph.nodes[i].name.clone())
            .collect();
        let params = weights.by_node.get(id).and_then(Option::as_ref);
        match (&node.op, params) {
            (Op::Input, _) => {}
            (Op::Conv(c), Some(Params::Conv { weight, bias })) => {
                let mut ins = inputs;
                let w = [c.weight_shape().map(|d| d as i64)].concat();
                ins.push(out.initializer(&format!("{}.weight", node.name), &w, weight));
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
                let kind = node.op.kind();
                out.node(
                    kind,
                    &name,
                    inputs,
                    vec![
                        ints("kernel_shape", &[k, k]),
                        ints("strides", &[s, s]),
                        ints("pads", &[pad, pad, pad, pad]),
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
                ins.push(out.initializer(&format!("{}.weight", node.name), &w, weight));
                ins.push(out.initializer(&format!("{}.bias", node.name), &[w[0]], bias));
                out.node("Gemm", &name, ins, vec![int("transB", 1)]);
            }
            (op, _) => panic!("weights do not match node {} ({op:?})", node.name),
        }
    }
    let [c, h, w] = graph.input_shape();
    let classes = graph.output().shape[0];
    ModelProto {
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
            input: vec![value_info(INPUT, &[None, Some(c), Some(h), Some(w)])],
            output: vec![value_info(OUTPUT, &[None, Some(classes)])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[derive(Default)]
struct GraphOut {
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

    /// Adds a float tensor and returns its name.
    fn initializer(&mut self, name: &str, dims: &[i64], values: &[f32]) -> String {
        self.initializers.push(TensorProto {
            dims: dims.to_vec(),
            data_type: DataType::Float as i32,
            name: name.to_string(),
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..Default::default()
        });
        name.to_string()
    }
}

fn value_info(name: &str, dims: &[Option<usize>]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            denotation: String::new(),
            value: Some(match d {
                Some(v) => dimension::Value::DimValue(*v as i64),
                None => dimension::Value::DimParam("N".into()),
            }),
        })
        .collect();
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: Some(TensorShapeProto { dim }),
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
