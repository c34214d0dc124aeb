//! ONNX import into the zoo's graph IR, for the operators the study's
//! networks use. The first operator outside that set is an error naming the
//! node and the operator, so a user knows at once why a model cannot run on
//! the native engine.
//!
//! Nodes must come in topological order (as ONNX requires); the input is
//! one NCHW float tensor and the output the last node.

use anyhow::{Context, Result, bail};
use dlas_core::Dataset;
use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, GraphBuilder, NodeId, Op};
use prost::Message;
use std::collections::HashMap;
use tract_onnx::pb::{self, tensor_proto::DataType};

/// The operators the importer understands.
pub const SUPPORTED: &[&str] = &[
    "Conv",
    "BatchNormalization",
    "Relu",
    "Clip",
    "Sigmoid",
    "Add",
    "Mul",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "Concat",
    "Flatten",
    "Gemm",
];

/// Reads an ONNX file into a graph and its weights.
pub fn import(bytes: &[u8], name: &str, dataset: Dataset) -> Result<(Graph, Weights)> {
    let model =
        pb::ModelProto::decode(bytes).context("not an ONNX model (protobuf decode failed)")?;
    let graph = model.graph.context("the ONNX model has no graph")?;
    let tensors: HashMap<&str, &pb::TensorProto> = graph
        .initializer
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    let mut builder = GraphBuilder::new(name, dataset);
    let mut values: HashMap<String, NodeId> = HashMap::new();
    let input = graph
        .input
        .iter()
        .find(|i| !tensors.contains_key(i.name.as_str()))
        .context("the ONNX graph has no input")?;
    values.insert(input.name.clone(), builder.input());
    let mut params: Vec<(NodeId, Params)> = Vec::new();
    for node in &graph.node {
        let at = || format!("node `{}` ({})", node.name, node.op_type);
        let value = |i: usize| -> Result<NodeId> {
            let name = node
                .input
                .get(i)
                .with_context(|| format!("{} lacks input {i}", at()))?;
            values
                .get(name)
                .copied()
                .with_context(|| format!("{}: input `{name}` is not computed before it", at()))
        };
        let weight = |i: usize| -> Result<(Vec<i64>, Vec<f32>)> {
            let name = node
                .input
                .get(i)
                .with_context(|| format!("{} lacks input {i}", at()))?;
            let t = tensors
                .get(name.as_str())
                .with_context(|| format!("{}: `{name}` must be a constant initializer", at()))?;
            Ok((t.dims.clone(), floats(t).with_context(at)?))
        };
        let ints = |attr: &str| {
            node.attribute
                .iter()
                .find(|a| a.name == attr)
                .map(|a| a.ints.clone())
        };
        let int = |attr: &str| node.attribute.iter().find(|a| a.name == attr).map(|a| a.i);
        let square = |attr: &str, default: i64| -> Result<usize> {
            match ints(attr) {
                None => Ok(default as usize),
                Some(v) if v.windows(2).all(|w| w[0] == w[1]) && !v.is_empty() => Ok(v[0] as usize),
                Some(v) => bail!("{}: non-uniform `{attr}` {v:?} is not supported", at()),
            }
        };
        let id = match node.op_type.as_str() {
            "Conv" => {
                let x = value(0)?;
                let (dims, w) = weight(1)?;
                let bias = if node.input.len() > 2 {
                    Some(weight(2)?.1)
                } else {
                    None
                };
                if square("dilations", 1)? != 1 {
                    bail!("{}: dilated convolutions are not supported", at());
                }
                let k = dims.get(2).copied().unwrap_or(1) as usize;
                let id = builder.conv(
                    x,
                    dims[0] as usize,
                    k,
                    square("strides", 1)?,
                    square("pads", 0)?,
                    int("group").unwrap_or(1) as usize,
                    bias.is_some(),
                );
                params.push((id, Params::Conv { weight: w, bias }));
                id
            }
            "BatchNormalization" => {
                let x = value(0)?;
                let id = builder.batch_norm(x);
                params.push((
                    id,
                    Params::BatchNorm {
                        gamma: weight(1)?.1,
                        beta: weight(2)?.1,
                        mean: weight(3)?.1,
                        var: weight(4)?.1,
                    },
                ));
                id
            }
            "Relu" => builder.unary(Op::Relu, value(0)?),
            "Sigmoid" => builder.unary(Op::Sigmoid, value(0)?),
            "Clip" => {
                let (lo, hi) = (weight(1)?.1, weight(2)?.1);
                if lo != [0.0] || hi != [6.0] {
                    bail!(
                        "{}: only Clip(0, 6) (ReLU6) is supported, got ({lo:?}, {hi:?})",
                        at()
                    );
                }
                builder.unary(Op::Relu6, value(0)?)
            }
            "Add" => builder.add(value(0)?, value(1)?),
            "Mul" => builder.mul(value(0)?, value(1)?),
            "MaxPool" => builder.max_pool(
                value(0)?,
                square("kernel_shape", 1)?,
                square("strides", 1)?,
                square("pads", 0)?,
            ),
            "AveragePool" => {
                if square("pads", 0)? != 0 {
                    bail!("{}: padded average pooling is not supported", at());
                }
                builder.avg_pool(value(0)?, square("kernel_shape", 1)?, square("strides", 1)?)
            }
            "GlobalAveragePool" => builder.global_avg_pool(value(0)?),
            "Concat" => {
                if int("axis") != Some(1) {
                    bail!("{}: only channel concatenation (axis 1) is supported", at());
                }
                let xs = (0..node.input.len())
                    .map(value)
                    .collect::<Result<Vec<_>>>()?;
                builder.concat(&xs)
            }
            "Flatten" => builder.flatten(value(0)?),
            "Gemm" => {
                if int("transB") != Some(1) || int("transA").unwrap_or(0) != 0 {
                    bail!(
                        "{}: only Gemm with transB = 1 (a linear layer) is supported",
                        at()
                    );
                }
                let (dims, w) = weight(1)?;
                let id = builder.linear(value(0)?, dims[0] as usize);
                params.push((
                    id,
                    Params::Linear {
                        weight: w,
                        bias: weight(2)?.1,
                    },
                ));
                id
            }
            other => bail!(
                "{}: operator `{other}` is not supported by the native engine; supported: {}",
                at(),
                SUPPORTED.join(", ")
            ),
        };
        for output in &node.output {
            values.insert(output.clone(), id);
        }
    }
    let graph = builder.finish();
    let mut by_node = vec![None; graph.nodes.len()];
    for (id, p) in params {
        by_node[id] = Some(p);
    }
    Ok((graph, Weights { seed: 0, by_node }))
}

fn floats(t: &pb::TensorProto) -> Result<Vec<f32>> {
    if t.data_type != DataType::Float as i32 {
        bail!(
            "tensor `{}` is not float32 (data type {})",
            t.name,
            t.data_type
        );
    }
    if !t.raw_data.is_empty() {
        Ok(t.raw_data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    } else {
        Ok(t.float_data.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_then_import_gives_the_same_network() {
        // The two largest networks add nothing here but seconds.
        for net in dlas_zoo::catalogue()
            .iter()
            .filter(|n| n.published_params.is_some_and(|p| p < 15_000_000))
        {
            let graph = (net.build)();
            let weights = dlas_zoo::weights::generate(&graph, 5);
            let bytes = crate::export(&graph, &weights);
            let (back, back_weights) = import(&bytes, net.name, net.dataset).unwrap();
            // SiLU is exported as Sigmoid and Mul, so compare what is invariant.
            assert_eq!(back.params(), graph.params(), "{}", net.name);
            assert_eq!(back.macs(), graph.macs(), "{}", net.name);
            assert_eq!(back.output().shape, graph.output().shape);
            let flat = |w: &Weights| -> Vec<f32> {
                w.by_node
                    .iter()
                    .flatten()
                    .flat_map(|p| match p {
                        Params::Conv { weight, bias } => weight
                            .iter()
                            .chain(bias.iter().flatten())
                            .copied()
                            .collect::<Vec<_>>(),
                        Params::BatchNorm {
                            gamma,
                            beta,
                            mean,
                            var,
                        } => [gamma, beta, mean, var]
                            .into_iter()
                            .flatten()
                            .copied()
                            .collect(),
                        Params::Linear { weight, bias } => {
                            weight.iter().chain(bias).copied().collect()
                        }
                        Params::LayerNorm { gamma, beta } => {
                            gamma.iter().chain(beta).copied().collect()
                        }
                        Params::Tensor(values) => values.clone(),
                    })
                    .collect()
            };
            assert_eq!(flat(&back_weights), flat(&weights), "{}", net.name);
        }
    }

    #[test]
    fn first_unsupported_operator_is_named() {
        let graph = (dlas_zoo::catalogue()[0].build)();
        let mut model = crate::model(&graph, &dlas_zoo::weights::generate(&graph, 1));
        let g = model.graph.as_mut().unwrap();
        g.node[1].op_type = "Softmax".into();
        let name = g.node[1].name.clone();
        let bytes = model.encode_to_vec();
        let err = import(&bytes, "x", Dataset::Cifar10)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "node `{name}` (Softmax): operator `Softmax` is not supported by the native engine; supported: {}",
                SUPPORTED.join(", ")
            )
        );
        assert!(import(b"garbage", "x", Dataset::Cifar10).is_err());
    }
}
