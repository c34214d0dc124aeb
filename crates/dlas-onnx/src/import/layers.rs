//! The operators that become IR nodes (or views of them), one ONNX node
//! at a time, with the attribute conventions of every opset from 7 to 17.
//!
//! Every shape is checked here, before the graph builder sees it: the
//! builder asserts what the zoo's own networks always satisfy, and a
//! user's file need not.

use super::fold::{self, FOLDED};
use super::window::{pool, size, square, window_pads};
use super::{Attrs, Importer, MAX_SIZE, SUPPORTED, Value};
use anyhow::{Context, Result, bail, ensure};
use dlas_zoo::weights::Params;
use dlas_zoo::{NodeId, Op};
use tract_onnx::pb;

/// Imports `node` (not a folded or renaming one) and returns its output.
pub(super) fn import(imp: &mut Importer, node: &pb::NodeProto, a: &Attrs) -> Result<Value> {
    let op = node.op_type.as_str();
    ensure!(
        SUPPORTED.contains(&op),
        "operator `{op}` is not supported by the native engine; supported: {}",
        SUPPORTED.join(", ")
    );
    let name = |i: usize| -> Result<&str> {
        node.input
            .get(i)
            .filter(|n| !n.is_empty())
            .map(String::as_str)
            .with_context(|| format!("lacks input {i}"))
    };
    let optional = |i: usize| node.input.get(i).filter(|n| !n.is_empty());
    let x = name(0)?;
    let same_rank = |imp: &mut Importer, id: NodeId| -> Result<Value> {
        let (_, rank) = imp.tensor(x)?;
        Ok(Value::Node { id, rank })
    };
    Ok(match op {
        "Conv" => conv(imp, node, a)?,
        "BatchNormalization" => {
            ensure!(
                a.int("spatial").unwrap_or(1) == 1,
                "per-activation (spatial = 0) batch norm is not supported"
            );
            let (id, rank) = imp.tensor(x)?;
            let c = imp.builder.channels(id);
            let stat = |i: usize, what: &str| -> Result<Vec<f32>> {
                let t = imp.constant(name(i)?)?;
                let v = t.floats();
                check(what, &t.dims, &v, &[c])?;
                Ok(v)
            };
            let (gamma, beta, mean, var) = (
                stat(1, "scale")?,
                stat(2, "bias")?,
                stat(3, "mean")?,
                stat(4, "var")?,
            );
            // The IR's batch norm has PyTorch's epsilon: another one moves
            // into the variance, which only ever appears as var + eps.
            let eps = a.float("epsilon").unwrap_or(1e-5);
            let var = var.iter().map(|v| v + (eps - 1e-5)).collect();
            let id = imp.builder.batch_norm(id);
            imp.params.push((
                id,
                Params::BatchNorm {
                    gamma,
                    beta,
                    mean,
                    var,
                },
            ));
            Value::Node { id, rank }
        }
        "Relu" | "Sigmoid" | "HardSwish" | "HardSigmoid" | "LRN" => {
            let (id, rank) = imp.tensor(x)?;
            let unary = match op {
                "Relu" => Op::Relu,
                "Sigmoid" => Op::Sigmoid,
                "HardSwish" => Op::HardSwish,
                "HardSigmoid" => Op::HardSigmoid {
                    alpha: a.float("alpha").unwrap_or(0.2).into(),
                    beta: a.float("beta").unwrap_or(0.5).into(),
                },
                _ => Op::Lrn {
                    size: size("size", a.int("size").context("LRN without `size`")?, 1)?,
                    alpha: a.float("alpha").unwrap_or(1e-4).into(),
                    beta: a.float("beta").unwrap_or(0.75).into(),
                    bias: a.float("bias").unwrap_or(1.0).into(),
                },
            };
            Value::Node {
                id: imp.builder.unary(unary, id),
                rank,
            }
        }
        "Clip" => {
            // Bounds are attributes before opset 11 and optional inputs since.
            let bound = |i: usize, attr: &str, default: f32| -> Result<f32> {
                if imp.opset < 11 {
                    return Ok(a.float(attr).unwrap_or(default));
                }
                match optional(i) {
                    Some(n) => imp
                        .constant(n)?
                        .floats()
                        .first()
                        .copied()
                        .context("empty bound"),
                    None => Ok(default),
                }
            };
            let (lo, hi) = (
                bound(1, "min", f32::NEG_INFINITY)?,
                bound(2, "max", f32::INFINITY)?,
            );
            let act = if lo == 0.0 && hi == 6.0 {
                Op::Relu6
            } else if lo == 0.0 && hi >= f32::MAX {
                Op::Relu
            } else {
                bail!("only Clip(0, 6) (ReLU6) and Clip(0) (ReLU) are supported, got ({lo}, {hi})")
            };
            let (id, _) = imp.tensor(x)?;
            let id = imp.builder.unary(act, id);
            same_rank(imp, id)?
        }
        "Add" | "Mul"
            if node
                .input
                .iter()
                .any(|n| matches!(imp.values.get(n), Some(Value::Const(_)))) =>
        {
            affine(imp, node)?
        }
        "Add" | "Sum" => {
            let ids = (0..node.input.len())
                .map(|i| Ok(imp.tensor(name(i)?)?.0))
                .collect::<Result<Vec<_>>>()?;
            let shapes: Vec<_> = ids.iter().map(|&i| imp.builder.shape(i)).collect();
            ensure!(
                shapes.windows(2).all(|s| s[0] == s[1]) && !ids.is_empty(),
                "{op} of shapes {shapes:?}; only equal shapes are supported"
            );
            let id = ids[1..]
                .iter()
                .fold(ids[0], |acc, &b| imp.builder.add(acc, b));
            same_rank(imp, id)?
        }
        "Mul" => {
            let (mut p, rank) = imp.tensor(x)?;
            let (mut q, _) = imp.tensor(name(1)?)?;
            let (sa, sb) = (imp.builder.shape(p), imp.builder.shape(q));
            // A squeeze-excitation scale may come first.
            if sa == [sb[0], 1, 1] && sa != sb {
                std::mem::swap(&mut p, &mut q);
            }
            let (sa, sb) = (imp.builder.shape(p), imp.builder.shape(q));
            ensure!(
                sa == sb || sb == [sa[0], 1, 1],
                "Mul of shapes {sa:?} and {sb:?}; only equal or per-channel shapes are supported"
            );
            Value::Node {
                id: imp.builder.mul(p, q),
                rank,
            }
        }
        "MaxPool" | "AveragePool" => {
            ensure!(
                node.output.get(1).is_none_or(String::is_empty),
                "MaxPool's indices output is not supported"
            );
            let (id, _) = imp.tensor(x)?;
            let pool = pool(a, imp.builder.shape(id))?;
            let id = if op == "MaxPool" {
                imp.builder.max_pool_with(id, pool)
            } else {
                ensure!(
                    a.int("count_include_pad").unwrap_or(0) == 0
                        || (pool.padding == 0 && pool.end == 0),
                    "padded average pooling that counts the padding is not supported"
                );
                imp.builder.avg_pool_with(id, pool)
            };
            Value::Node { id, rank: 4 }
        }
        "GlobalAveragePool" => {
            let (id, _) = imp.tensor(x)?;
            Value::Node {
                id: imp.builder.global_avg_pool(id),
                rank: 4,
            }
        }
        "Concat" => {
            let xs = (0..node.input.len())
                .map(|i| imp.tensor(name(i)?))
                .collect::<Result<Vec<_>>>()?;
            let rank = xs.first().context("Concat of nothing")?.1;
            let axis = fold::axis(a.int("axis").context("Concat without `axis`")?, rank)?;
            ensure!(
                axis == 1,
                "only channel concatenation (axis 1) is supported"
            );
            let shapes: Vec<_> = xs.iter().map(|&(i, _)| imp.builder.shape(i)).collect();
            ensure!(
                shapes.iter().all(|s| s[1..] == shapes[0][1..]) && xs.iter().all(|x| x.1 == rank),
                "Concat of different spatial sizes {shapes:?}"
            );
            let ids: Vec<NodeId> = xs.iter().map(|x| x.0).collect();
            Value::Node {
                id: imp.builder.concat(&ids),
                rank,
            }
        }
        "Flatten" => {
            let (id, rank) = imp.tensor(x)?;
            ensure!(
                a.int("axis").unwrap_or(1) == 1,
                "only Flatten at axis 1 is supported"
            );
            let id = if rank == 4 {
                imp.builder.flatten(id)
            } else {
                id
            };
            Value::Node { id, rank: 2 }
        }
        "Reshape" => {
            let shape = if imp.opset < 5 {
                a.ints("shape").context("Reshape without `shape`")?
            } else {
                imp.constant(name(1)?)?.int_values()?
            };
            reshape(imp, x, &shape, a.int("allowzero") == Some(1))?
        }
        "Transpose" => {
            let perm = a.ints("perm");
            match imp.value(x)?.clone() {
                Value::Grouped {
                    id,
                    groups,
                    swapped,
                } if perm.as_deref() == Some(&[0, 2, 1, 3, 4]) => Value::Grouped {
                    id,
                    groups,
                    swapped: !swapped,
                },
                _ => {
                    let (id, rank) = imp.tensor(x)?;
                    let identity: Vec<i64> = (0..rank as i64).collect();
                    ensure!(
                        perm.as_ref() == Some(&identity),
                        "Transpose with perm {perm:?} is not supported: the IR keeps the [c, h, w] order (only a channel shuffle's group transpose is)"
                    );
                    Value::Node { id, rank }
                }
            }
        }
        "Squeeze" | "Unsqueeze" => {
            let (id, rank) = imp.tensor(x)?;
            let [c, h, w] = imp.builder.shape(id);
            let dims = if rank == 2 {
                vec![1, c]
            } else {
                vec![1, c, h, w]
            };
            let out = fold::squeeze(op, &dims, imp.axes(node)?.as_deref())?;
            let rank = match out.as_slice() {
                [1, f] if *f == c && (h, w) == (1, 1) => 2,
                [1, f, 1, 1] if *f == c && (h, w) == (1, 1) => 4,
                d if d == dims => rank,
                d => bail!("{op} of {dims:?} to {d:?} is not supported"),
            };
            Value::Node { id, rank }
        }
        "Gemm" => gemm(imp, node, a)?,
        "Softmax" => {
            let (id, rank) = imp.tensor(x)?;
            let [c, h, w] = imp.builder.shape(id);
            // Before opset 13, Softmax normalises over all axes from
            // `axis` on (default 1); since, over `axis` alone (default -1).
            let default = if imp.opset < 13 { 1 } else { -1 };
            let axis = fold::axis(a.int("axis").unwrap_or(default), rank)?;
            let flat = h * w == 1 || rank == 2;
            ensure!(
                axis == 1 && (flat || imp.opset >= 13),
                "Softmax over axis {axis} of a [N, {c}, {h}, {w}] tensor (opset {}) is not supported; only over channels",
                imp.opset
            );
            Value::Node {
                id: imp.builder.unary(Op::Softmax, id),
                rank,
            }
        }
        "Pad" => pad(imp, node, a)?,
        "Cast" => {
            ensure!(
                a.int("to") == Some(1),
                "Cast of a computed tensor to other than float"
            );
            let (id, rank) = imp.tensor(x)?;
            Value::Node { id, rank }
        }
        "ReduceMean" | "Pow" | "Sqrt" | "Erf" | "MatMul" | "Slice" => bail!(
            "{op} is supported only within the subgraphs of a layer norm, GELU, attention or first token as this crate exports them"
        ),
        other if FOLDED.contains(&other) => {
            bail!(
                "{other} is supported on constants only (a shape computation), not on a computed tensor"
            )
        }
        other => bail!("operator `{other}` has no import"),
    })
}

fn conv(imp: &mut Importer, node: &pb::NodeProto, a: &Attrs) -> Result<Value> {
    let x = node.input.first().context("Conv without input")?;
    let weight = imp.constant(node.input.get(1).context("Conv without weight")?)?;
    let (dims, w) = (weight.dims.clone(), weight.floats());
    let bias = match node.input.get(2).filter(|n| !n.is_empty()) {
        Some(n) => Some(imp.constant(n)?.floats()),
        None => None,
    };
    ensure!(
        a.ints("dilations")
            .unwrap_or_default()
            .iter()
            .all(|&d| d == 1),
        "dilated convolutions are not supported"
    );
    let (id, before) = match imp.value(x)?.clone() {
        Value::Padded { id, pads } => (id, pads),
        _ => (imp.tensor(x)?.0, [0; 4]),
    };
    let [c, h, wd] = imp.builder.shape(id);
    ensure!(
        dims.len() == 4 && dims[2] == dims[3],
        "weight of shape {dims:?}; only square 2-D kernels are supported"
    );
    let out = size("output channels", dims[0] as i64, 1)?;
    let k = size("kernel", dims[2] as i64, 1)?;
    let stride = square(a, "strides")?;
    let groups = size("group", a.int("group").unwrap_or(1), 1)?;
    ensure!(
        c.is_multiple_of(groups) && out.is_multiple_of(groups),
        "group {groups} must divide the input channels {c} and the output channels {out}"
    );
    let hw = [h + before[0] + before[2], wd + before[1] + before[3]];
    let own = window_pads(a, hw, k, stride)?;
    let pads: Vec<usize> = before.iter().zip(own).map(|(p, q)| p + q).collect();
    ensure!(
        hw[0] + own[0] + own[2] >= k && hw[1] + own[1] + own[3] >= k,
        "kernel {k} is larger than the padded {h}x{wd} input"
    );
    check("weight", &dims, &w, &[out, c / groups, k, k])?;
    if let Some(b) = &bias {
        check("bias", &[b.len()], b, &[out])?;
    }
    // Symmetric padding is the convolution's own; any other is a Pad node.
    let (input, padding) = if pads.iter().all(|&p| p == pads[0]) {
        (id, pads[0])
    } else {
        (imp.builder.pad(id, [pads[0], pads[1], pads[2], pads[3]]), 0)
    };
    let id = imp
        .builder
        .conv(input, out, k, stride, padding, groups, bias.is_some());
    imp.params.push((id, Params::Conv { weight: w, bias }));
    Ok(Value::Node { id, rank: 4 })
}

fn gemm(imp: &mut Importer, node: &pb::NodeProto, a: &Attrs) -> Result<Value> {
    ensure!(
        a.int("transA").unwrap_or(0) == 0,
        "Gemm with transA is not supported"
    );
    let x = node.input.first().context("Gemm without input")?;
    let (id, _) = imp.tensor(x)?;
    let [features, h, w] = imp.builder.shape(id);
    ensure!(
        (h, w) == (1, 1),
        "Gemm of a [{features}, {h}, {w}] input; flatten it first"
    );
    let b = imp.constant(node.input.get(1).context("Gemm without B")?)?;
    let (dims, values) = (b.dims.clone(), b.floats());
    ensure!(dims.len() == 2, "Gemm's B has shape {dims:?}");
    let trans = a.int("transB").unwrap_or(0) == 1;
    let out = size("output features", dims[usize::from(!trans)] as i64, 1)?;
    let want = if trans {
        [out, features]
    } else {
        [features, out]
    };
    check("weight", &dims, &values, &want)?;
    // The IR's linear layer holds alpha * B as (out, in).
    let alpha = a.float("alpha").unwrap_or(1.0);
    let weight: Vec<f32> = (0..out * features)
        .map(|i| {
            let (o, f) = (i / features, i % features);
            alpha
                * if trans {
                    values[i]
                } else {
                    values[f * out + o]
                }
        })
        .collect();
    let beta = a.float("beta").unwrap_or(1.0);
    let bias = match node.input.get(2).filter(|n| !n.is_empty()) {
        None => vec![0.0; out],
        Some(n) => {
            let c = imp.constant(n)?;
            let v = c.floats();
            ensure!(
                (v.len() == out || v.len() == 1) && c.dims.iter().filter(|&&d| d != 1).count() <= 1,
                "Gemm's C has shape {:?}; expected {out} values or one",
                c.dims
            );
            (0..out)
                .map(|o| beta * v[if v.len() == 1 { 0 } else { o }])
                .collect()
        }
    };
    let id = imp.builder.linear(id, out);
    imp.params.push((id, Params::Linear { weight, bias }));
    Ok(Value::Node { id, rank: 2 })
}

/// Add or Mul of a tensor and a constant of one value per channel (or one
/// in all): Caffe2's batch norm is a BatchNormalization then a Mul and an
/// Add of its unsqueezed scale and bias, ConvNeXt's layer scale a Mul. The
/// Mul is the IR's layer scale; the Add its batch norm, with mean 0 and
/// variance 1 - eps (so that the normalisation divides by 1 up to float32
/// rounding, about 1e-8). An Add of a constant of the tensor's whole shape
/// is a ViT's position embedding.
fn affine(imp: &mut Importer, node: &pb::NodeProto) -> Result<Value> {
    let [a, b] = node.input.as_slice() else {
        bail!("{} of {} inputs", node.op_type, node.input.len());
    };
    let (x, t) = match imp.values.get(a) {
        Some(Value::Const(_)) => (b, a),
        _ => (a, b),
    };
    let (id, rank) = imp.tensor(x)?;
    let c = imp.builder.channels(id);
    let t = imp.constant(t)?;
    let dims: Vec<usize> = t.dims.iter().copied().skip_while(|&d| d == 1).collect();
    let per_channel = if rank == 2 { vec![c] } else { vec![c, 1, 1] };
    let values = t.floats();
    let shape = imp.builder.shape(id);
    let values = match values.len() {
        1 if dims.iter().all(|&d| d == 1) => vec![values[0]; c],
        _ if dims == per_channel => values,
        _ if node.op_type == "Add" && rank == 4 && dims == shape => {
            let id = imp.builder.position_embedding(id);
            imp.params.push((id, Params::Tensor(values)));
            return Ok(Value::Node { id, rank });
        }
        _ => bail!(
            "{} of a tensor and a constant of shape {:?}; only one value per channel or one in all is supported",
            node.op_type,
            t.dims
        ),
    };
    if node.op_type == "Mul" {
        let id = imp.builder.layer_scale(id);
        imp.params.push((id, Params::Tensor(values)));
        return Ok(Value::Node { id, rank });
    }
    let id = imp.builder.batch_norm(id);
    imp.params.push((
        id,
        Params::BatchNorm {
            gamma: vec![1.0; c],
            beta: values,
            mean: vec![0.0; c],
            var: vec![1.0 - 1e-5; c],
        },
    ));
    Ok(Value::Node { id, rank })
}

/// A zero Pad, held back for a following convolution.
fn pad(imp: &mut Importer, node: &pb::NodeProto, a: &Attrs) -> Result<Value> {
    let mode = a.string("mode").unwrap_or_else(|| "constant".into());
    ensure!(mode == "constant", "Pad in mode `{mode}` is not supported");
    let (pads, value) = if imp.opset < 11 {
        (
            a.ints("pads").context("Pad without `pads`")?,
            a.float("value").unwrap_or(0.0),
        )
    } else {
        ensure!(node.input.len() <= 3, "Pad with axes is not supported");
        let pads = imp
            .constant(node.input.get(1).context("Pad without pads")?)?
            .int_values()?;
        let value = match node.input.get(2).filter(|n| !n.is_empty()) {
            Some(n) => imp.constant(n)?.floats().first().copied().unwrap_or(0.0),
            None => 0.0,
        };
        (pads, value)
    };
    ensure!(
        value == 0.0,
        "Pad with value {value}; only zero padding is supported"
    );
    let x = node.input.first().context("Pad without input")?;
    let (id, before) = match imp.value(x)?.clone() {
        Value::Padded { id, pads } => (id, pads),
        _ => {
            let (id, rank) = imp.tensor(x)?;
            ensure!(rank == 4, "Pad of a rank-{rank} tensor");
            (id, [0; 4])
        }
    };
    ensure!(
        pads.len() == 8 && [pads[0], pads[1], pads[4], pads[5]] == [0; 4],
        "Pad by {pads:?}; only the height and width of an [N, c, h, w] tensor may be padded"
    );
    let mut total = before;
    for (t, &p) in total.iter_mut().zip(&[pads[2], pads[3], pads[6], pads[7]]) {
        *t += size("padding", p, 0)?;
    }
    let [_, h, w] = imp.builder.shape(id);
    ensure!(
        h + total[0] + total[2] <= MAX_SIZE && w + total[1] + total[3] <= MAX_SIZE,
        "Pad to more than {MAX_SIZE} rows or columns"
    );
    Ok(Value::Padded { id, pads: total })
}

/// Reshape of tensor `x` to `shape`: the views the IR has (a flatten, a
/// no-op, a channel shuffle's grouping and ungrouping).
fn reshape(imp: &mut Importer, x: &str, shape: &[i64], allowzero: bool) -> Result<Value> {
    let (id, rank, grouped) = match imp.value(x)?.clone() {
        Value::Grouped {
            id,
            groups,
            swapped,
        } => (id, 5, Some((groups, swapped))),
        _ => {
            let (id, rank) = imp.tensor(x)?;
            (id, rank, None)
        }
    };
    let [c, h, w] = imp.builder.shape(id);
    let dims = match (rank, grouped) {
        (_, Some((g, false))) => vec![1, g, c / g, h, w],
        (_, Some((g, true))) => vec![1, c / g, g, h, w],
        (2, _) => vec![1, c],
        _ => vec![1, c, h, w],
    };
    let target = fold::target(&dims, shape, allowzero)?;
    let unsupported = || format!("Reshape of {dims:?} to {target:?} is not supported");
    ensure!(target.first() == Some(&1), "{}", unsupported());
    Ok(match (&target[1..], grouped) {
        (&[tc, th, tw], Some((groups, swapped))) if [tc, th, tw] == [c, h, w] => Value::Node {
            id: if swapped {
                imp.builder.channel_shuffle(id, groups)
            } else {
                id
            },
            rank: 4,
        },
        (_, Some(_)) => bail!("{}", unsupported()),
        (&[f], None) if f == c * h * w => Value::Node {
            id: if h * w == 1 {
                id
            } else {
                imp.builder.flatten(id)
            },
            rank: 2,
        },
        (&[tc, th, tw], None) if [tc, th, tw] == [c, h, w] => Value::Node { id, rank: 4 },
        (&[g, per, th, tw], None) if rank == 4 && g > 1 && g * per == c && [th, tw] == [h, w] => {
            Value::Grouped {
                id,
                groups: g,
                swapped: false,
            }
        }
        _ => bail!("{}", unsupported()),
    })
}

/// Checks a constant's shape and its number of values against the node's.
fn check(what: &str, dims: &[usize], values: &[f32], shape: &[usize]) -> Result<()> {
    let count = shape.iter().try_fold(1usize, |n, &s| n.checked_mul(s));
    ensure!(
        dims == shape && count == Some(values.len()),
        "{what} has shape {dims:?} and {} values; expected shape {shape:?}",
        values.len()
    );
    Ok(())
}
