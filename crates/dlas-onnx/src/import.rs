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
        let square = |attr: &str, default: i64, min: usize| -> Result<usize> {
            let v = match ints(attr) {
                None => default,
                Some(v) if v.windows(2).all(|w| w[0] == w[1]) && !v.is_empty() => v[0],
                Some(v) => bail!("{}: non-uniform `{attr}` {v:?} is not supported", at()),
            };
            size(&at, attr, v, min)
        };
        // Every shape is checked here, before the graph builder sees it:
        // the builder asserts what the zoo's own networks always satisfy,
        // and a user's file need not.
        let id = match node.op_type.as_str() {
            "Conv" => {
                let x = value(0)?;
                let (dims, w) = weight(1)?;
                let bias = if node.input.len() > 2 {
                    Some(weight(2)?)
                } else {
                    None
                };
                if square("dilations", 1, 1)? != 1 {
                    bail!("{}: dilated convolutions are not supported", at());
                }
                let [c, h, wd] = builder.shape(x);
                let out = size(
                    &at,
                    "output channels",
                    dims.first().copied().unwrap_or(0),
                    1,
                )?;
                let k = size(&at, "kernel", dims.get(2).copied().unwrap_or(1), 1)?;
                let stride = square("strides", 1, 1)?;
                let pads = square("pads", 0, 0)?;
                let groups = size(&at, "group", int("group").unwrap_or(1), 1)?;
                if !c.is_multiple_of(groups) || !out.is_multiple_of(groups) {
                    bail!(
                        "{}: group {groups} must divide the input channels {c} and the output channels {out}",
                        at()
                    );
                }
                window(&at, [h, wd], k, pads)?;
                let shape = [out, c / groups, k, k];
                tensor(&at, "weight", &dims, &w, &shape)?;
                if let Some((bias_dims, b)) = &bias {
                    tensor(&at, "bias", bias_dims, b, &[out])?;
                }
                let bias = bias.map(|(_, b)| b);
                let id = builder.conv(x, out, k, stride, pads, groups, bias.is_some());
                params.push((id, Params::Conv { weight: w, bias }));
                id
            }
            "BatchNormalization" => {
                let x = value(0)?;
                let c = builder.channels(x);
                let stat = |i: usize, what: &str| -> Result<Vec<f32>> {
                    let (dims, v) = weight(i)?;
                    tensor(&at, what, &dims, &v, &[c])?;
                    Ok(v)
                };
                let (gamma, beta, mean, var) = (
                    stat(1, "scale")?,
                    stat(2, "bias")?,
                    stat(3, "mean")?,
                    stat(4, "var")?,
                );
                let id = builder.batch_norm(x);
                params.push((
                    id,
                    Params::BatchNorm {
                        gamma,
                        beta,
                        mean,
                        var,
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
            "Add" => {
                let (a, b) = (value(0)?, value(1)?);
                if builder.shape(a) != builder.shape(b) {
                    bail!(
                        "{}: Add of shapes {:?} and {:?}; only equal shapes are supported",
                        at(),
                        builder.shape(a),
                        builder.shape(b)
                    );
                }
                builder.add(a, b)
            }
            "Mul" => {
                let (a, b) = (value(0)?, value(1)?);
                let (sa, sb) = (builder.shape(a), builder.shape(b));
                if sa != sb && sb != [sa[0], 1, 1] {
                    bail!(
                        "{}: Mul of shapes {sa:?} and {sb:?}; only equal or per-channel shapes are supported",
                        at()
                    );
                }
                builder.mul(a, b)
            }
            "MaxPool" => {
                let x = value(0)?;
                let [_, h, w] = builder.shape(x);
                let (k, stride, pads) = (
                    square("kernel_shape", 1, 1)?,
                    square("strides", 1, 1)?,
                    square("pads", 0, 0)?,
                );
                window(&at, [h, w], k, pads)?;
                builder.max_pool(x, k, stride, pads)
            }
            "AveragePool" => {
                if square("pads", 0, 0)? != 0 {
                    bail!("{}: padded average pooling is not supported", at());
                }
                let x = value(0)?;
                let [_, h, w] = builder.shape(x);
                let (k, stride) = (square("kernel_shape", 1, 1)?, square("strides", 1, 1)?);
                window(&at, [h, w], k, 0)?;
                builder.avg_pool(x, k, stride)
            }
            "GlobalAveragePool" => builder.global_avg_pool(value(0)?),
            "Concat" => {
                if int("axis") != Some(1) {
                    bail!("{}: only channel concatenation (axis 1) is supported", at());
                }
                let xs = (0..node.input.len())
                    .map(value)
                    .collect::<Result<Vec<_>>>()?;
                let Some(&first) = xs.first() else {
                    bail!("{}: Concat of nothing", at());
                };
                let spatial = |x: NodeId| builder.shape(x)[1..].to_vec();
                if xs.iter().any(|&x| spatial(x) != spatial(first)) {
                    bail!(
                        "{}: Concat of different spatial sizes {:?}",
                        at(),
                        xs.iter().map(|&x| builder.shape(x)).collect::<Vec<_>>()
                    );
                }
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
                let x = value(0)?;
                let [features, h, w] = builder.shape(x);
                if (h, w) != (1, 1) {
                    bail!(
                        "{}: Gemm of a [{features}, {h}, {w}] input; flatten it first",
                        at()
                    );
                }
                let (dims, weight_values) = weight(1)?;
                let out = size(
                    &at,
                    "output features",
                    dims.first().copied().unwrap_or(0),
                    1,
                )?;
                tensor(&at, "weight", &dims, &weight_values, &[out, features])?;
                let (bias_dims, bias) = weight(2)?;
                tensor(&at, "bias", &bias_dims, &bias, &[out])?;
                let id = builder.linear(x, out);
                params.push((
                    id,
                    Params::Linear {
                        weight: weight_values,
                        bias,
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

/// The largest size (channels, kernel, stride, padding) an imported model
/// may have: far above any network's, far below what would overflow a shape.
const MAX_SIZE: usize = 1 << 20;

/// An attribute or dimension `v` as a size of at least `min`.
fn size(at: &dyn Fn() -> String, what: &str, v: i64, min: usize) -> Result<usize> {
    match usize::try_from(v) {
        Ok(n) if (min..=MAX_SIZE).contains(&n) => Ok(n),
        _ => bail!("{}: {what} is {v}; valid: {min}..={MAX_SIZE}", at()),
    }
}

/// Checks that a `kernel` window with `pads` fits the input's height and width.
fn window(at: &dyn Fn() -> String, hw: [usize; 2], kernel: usize, pads: usize) -> Result<()> {
    if hw.iter().any(|&s| s + 2 * pads < kernel) {
        bail!(
            "{}: kernel {kernel} with padding {pads} is larger than the {}x{} input",
            at(),
            hw[0],
            hw[1]
        );
    }
    Ok(())
}

/// Checks a constant's shape and its number of values against the node's.
fn tensor(
    at: &dyn Fn() -> String,
    what: &str,
    dims: &[i64],
    values: &[f32],
    shape: &[usize],
) -> Result<()> {
    let matches = dims.len() == shape.len()
        && dims
            .iter()
            .zip(shape)
            .all(|(&d, &s)| usize::try_from(d) == Ok(s));
    let count = shape.iter().try_fold(1usize, |n, &s| n.checked_mul(s));
    if !matches || count != Some(values.len()) {
        bail!(
            "{}: {what} has shape {dims:?} and {} values; expected shape {shape:?}",
            at(),
            values.len()
        );
    }
    Ok(())
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
