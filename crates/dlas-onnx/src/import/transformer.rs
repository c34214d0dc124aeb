//! The transformer operators that exporters write as subgraphs of
//! primitives, recognised by structure and rebuilt as the IR operator:
//! layer norm (this crate's ReduceMean-Sub-Mul-ReduceMean-Add-Sqrt-Div with
//! its affine, PyTorch's with Pow, and opset 17's LayerNormalization on a
//! channel vector), GELU (`x * (1 + erf(x / sqrt 2)) / 2` with the division
//! as a Mul, as this crate writes it, or a Div, as PyTorch does; opset 20's
//! Gelu), the class token (Reshape to a sequence, Pad, Add of the padded
//! token), the first token (Slice) and Swin's patch merging
//! (Reshape-Transpose-Reshape); attention is [`super::attention`]'s.
//!
//! A node that starts one of these subgraphs commits the import to it:
//! from there every mismatch is an error naming the node, never a graph
//! that computes something else. Constants are compared with what the
//! exporter writes for the IR operator (epsilon, 1/sqrt 2, the pads).

use super::attention;
use super::subgraph::{Nodes, Walk, at, fail};
use super::{Attrs, Importer, Value};
use anyhow::{Result, bail, ensure};
use dlas_zoo::NodeId;
use dlas_zoo::weights::Params;
use tract_onnx::pb;

/// Recognises the subgraph starting at node `i`, if one does: imports it
/// and returns its nodes (the importer skips them); `None` leaves node `i`
/// to the importer.
pub(super) fn recognise(imp: &mut Importer, nodes: &Nodes, i: usize) -> Result<Option<Vec<usize>>> {
    let node = nodes.get(i);
    let computed = |k: usize| {
        node.input.get(k).is_some_and(|n| {
            matches!(
                imp.values.get(n),
                Some(Value::Node { .. } | Value::Padded { .. })
            )
        })
    };
    let first_reader = |op: &str| {
        nodes
            .readers(nodes.output(i))
            .first()
            .is_some_and(|&r| nodes.get(r).op_type == op)
    };
    let taken = match node.op_type.as_str() {
        "ReduceMean" if computed(0) => reduce_mean(imp, nodes, i)?,
        "LayerNormalization" => layer_normalization(imp, nodes, i)?,
        "Gelu" => {
            let approximate = Attrs(node).string("approximate");
            ensure!(
                approximate.as_deref().is_none_or(|a| a == "none"),
                fail(
                    node,
                    "only the exact GELU (approximate = none) is supported"
                )
            );
            let (id, rank) = at(node, imp.tensor(input(node, 0)))?;
            let id = imp.builder.gelu(id);
            imp.values
                .insert(nodes.output(i).into(), Value::Node { id, rank });
            vec![i]
        }
        "Mul" | "Div" if (computed(0) || computed(1)) && first_reader("Erf") => {
            gelu(imp, nodes, i)?
        }
        "Reshape" if computed(0) => {
            let (id, rank) = at(node, imp.tensor(&node.input[0]))?;
            let [c, h, w] = imp.builder.shape(id);
            let Ok(target) = nodes.reshaped(imp, node, &[1, c, h, w]) else {
                return Ok(None);
            };
            match target.len() {
                7 if rank == 4 => attention::attention(imp, nodes, i)?,
                6 if rank == 4 => space_to_depth(imp, nodes, i, id)?,
                4 if rank == 4 && target == [1, c, h * w, 1] && first_reader("Pad") => {
                    class_token(imp, nodes, i, id)?
                }
                _ => return Ok(None),
            }
        }
        "Slice" if computed(0) && first_reader("Concat") => attention::attention(imp, nodes, i)?,
        "Slice" if computed(0) => first_token(imp, nodes, i)?,
        _ => return Ok(None),
    };
    Ok(Some(taken))
}

/// Whether `dims` (a constant's) hold one value per channel of a tensor of
/// `c` channels and ONNX rank `rank`, leading ones aside.
fn per_channel(dims: &[usize], c: usize, rank: usize) -> bool {
    let dims: Vec<usize> = dims.iter().copied().skip_while(|&d| d == 1).collect();
    match rank {
        2 => dims == [c],
        _ => dims == [c, 1, 1] || (c == 1 && dims.is_empty()),
    }
}

/// A float32 epsilon as the f64 the IR holds: the shortest decimal that
/// reads back as it (`1e-6f32` is the IR's `1e-6`), which is what the
/// exporter's `eps as f32` came from.
fn epsilon(eps: f32) -> Result<f64> {
    ensure!(
        eps.is_finite() && eps > 0.0,
        "epsilon {eps}; expected a positive number"
    );
    Ok(eps.to_string().parse()?)
}

/// The axes (resolved on a rank-`rank` tensor) that ReduceMean node `i`
/// averages, and whether it keeps them.
fn mean_axes(imp: &Importer, nodes: &Nodes, i: usize, rank: usize) -> Result<(Vec<usize>, bool)> {
    let node = nodes.get(i);
    let a = Attrs(node);
    at(
        node,
        (|| {
            let axes = match node.input.get(1).filter(|n| !n.is_empty()) {
                Some(n) if imp.opset >= 18 => Some(nodes.constant(imp, n)?.int_values()?),
                _ => a.ints("axes"),
            };
            let axes = axes
                .unwrap_or_default()
                .iter()
                .map(|&x| super::fold::axis(x, rank))
                .collect::<Result<Vec<_>>>()?;
            Ok((axes, a.int("keepdims").unwrap_or(1) == 1))
        })(),
    )
}

/// A ReduceMean of a computed tensor: the mean of a layer norm (over the
/// channels), or a global average pool (over the plane, as PyTorch writes
/// `x.mean((2, 3))`).
fn reduce_mean(imp: &mut Importer, nodes: &Nodes, i: usize) -> Result<Vec<usize>> {
    let node = nodes.get(i);
    let (id, rank) = at(node, imp.tensor(input(node, 0)))?;
    let (mut axes, keep) = mean_axes(imp, nodes, i, rank)?;
    axes.sort_unstable();
    match axes.as_slice() {
        [1] => layer_norm(imp, nodes, i),
        [2, 3] if rank == 4 => {
            let id = imp.builder.global_avg_pool(id);
            let rank = if keep { 4 } else { 2 };
            imp.values
                .insert(nodes.output(i).into(), Value::Node { id, rank });
            Ok(vec![i])
        }
        _ => Err(fail(
            node,
            format!(
                "a mean over axes {axes:?} of a rank-{rank} tensor; only over the channels (a layer norm) or the plane (a global average pool)"
            ),
        )),
    }
}

/// Checks that ReduceMean node `i` of a layer norm averages the channels
/// of a rank-`rank` tensor, keeping the axis.
fn over_channels(imp: &Importer, nodes: &Nodes, walk: &Walk, i: usize, rank: usize) -> Result<()> {
    let (axes, keep) = mean_axes(imp, nodes, i, rank)?;
    ensure!(
        axes == [1] && keep,
        walk.fail(
            i,
            format!("a mean over axes {axes:?}; only over the channels (axis 1), keeping them")
        )
    );
    Ok(())
}

/// Input `k` of `node`, empty when it has none (then not a known tensor).
fn input(node: &pb::NodeProto, k: usize) -> &str {
    node.input.get(k).map_or("", String::as_str)
}

/// Layer norm from its primitives, starting at the mean's ReduceMean.
fn layer_norm(imp: &mut Importer, nodes: &Nodes, i: usize) -> Result<Vec<usize>> {
    let mut walk = Walk::new(nodes, i, "a layer norm");
    let mean = nodes.get(i);
    let x = mean.input[0].as_str();
    let (id, rank) = at(mean, imp.tensor(x))?;
    let c = imp.builder.channels(id);
    over_channels(imp, nodes, &walk, i, rank)?;
    let sub = walk.next(i, "Sub")?;
    ensure!(
        walk.node(sub).input == [x, nodes.output(i)],
        walk.fail(sub, format!("expected `{x}` minus its mean"))
    );
    let [square, div] = walk.read_by(sub, &["Mul|Pow", "Div"])?[..] else {
        unreachable!("two readers")
    };
    let centered = nodes.output(sub);
    let squared = match walk.node(square) {
        n if n.op_type == "Mul" => n.input == [centered, centered],
        n => {
            n.input.first().map(String::as_str) == Some(centered)
                && n.input.get(1).and_then(|e| nodes.scalar(imp, e)) == Some(2.0)
        }
    };
    ensure!(
        squared,
        walk.fail(square, "expected the square of the centered input")
    );
    let var = walk.next(square, "ReduceMean")?;
    over_channels(imp, nodes, &walk, var, rank)?;
    let add = walk.next(var, "Add")?;
    let eps = nodes.other(walk.node(add), nodes.output(var))?;
    let eps = nodes
        .scalar(imp, eps)
        .ok_or_else(|| walk.fail(add, format!("`{eps}` must be one constant value (epsilon)")))?;
    let eps = at(walk.node(add), epsilon(eps))?;
    let sqrt = walk.next(add, "Sqrt")?;
    ensure!(
        walk.next(sqrt, "Div")? == div && walk.node(div).input == [centered, nodes.output(sqrt)],
        walk.fail(div, "expected the centered input divided by the deviation")
    );
    // The affine: a per-channel Mul and Add (PyTorch's `elementwise_affine`).
    let mut end = div;
    let mut affine = |op: &str, identity: f32, walk: &mut Walk| -> Result<Vec<f32>> {
        let readers = nodes.readers(nodes.output(end));
        if let [r] = readers
            && nodes.get(*r).op_type == op
        {
            let other = nodes.other(nodes.get(*r), nodes.output(end))?;
            if let Ok(t) = nodes.constant(imp, other) {
                let values = t.floats();
                let values = match values.len() {
                    1 => vec![values[0]; c],
                    _ if per_channel(&t.dims, c, rank) => values,
                    _ => {
                        return Err(walk.fail(
                            *r,
                            format!(
                                "a constant of shape {:?}; expected one value per channel",
                                t.dims
                            ),
                        ));
                    }
                };
                end = walk.next(end, op)?;
                return Ok(values);
            }
        }
        Ok(vec![identity; c])
    };
    let gamma = affine("Mul", 1.0, &mut walk)?;
    let beta = affine("Add", 0.0, &mut walk)?;
    let out = nodes.output(end);
    let id = imp.builder.layer_norm(id, eps);
    imp.params.push((id, Params::LayerNorm { gamma, beta }));
    imp.values.insert(out.into(), Value::Node { id, rank });
    Ok(walk.finish())
}

/// Opset 17's LayerNormalization, where it normalises a channel vector
/// (a rank-2 tensor, or `[N, c, 1, 1]`): ONNX normalises over every axis
/// from `axis` on, the IR over the channels of each position.
fn layer_normalization(imp: &mut Importer, nodes: &Nodes, i: usize) -> Result<Vec<usize>> {
    let node = nodes.get(i);
    let a = Attrs(node);
    at(
        node,
        (|| {
            ensure!(
                node.output.iter().skip(1).all(String::is_empty),
                "the mean and inverse deviation outputs are not supported"
            );
            let (id, rank) = imp.tensor(node.input.first().map_or("", String::as_str))?;
            let [c, h, w] = imp.builder.shape(id);
            let axis = super::fold::axis(a.int("axis").unwrap_or(-1), rank)?;
            ensure!(
                axis == 1 && (rank == 2 || h * w == 1),
                "a normalisation from axis {axis} of a rank-{rank} [N, {c}, {h}, {w}] tensor; only of channel vectors (axis 1, one position)"
            );
            let affine = |k: usize, identity: f32| -> Result<Vec<f32>> {
                match node.input.get(k).filter(|n| !n.is_empty()) {
                    None => Ok(vec![identity; c]),
                    Some(n) => {
                        let t = nodes.constant(imp, n)?;
                        ensure!(
                            t.len() == c,
                            "`{n}` has shape {:?}; expected {c} values",
                            t.dims
                        );
                        Ok(t.floats())
                    }
                }
            };
            let (gamma, beta) = (affine(1, 1.0)?, affine(2, 0.0)?);
            let eps = epsilon(a.float("epsilon").unwrap_or(1e-5))?;
            let id = imp.builder.layer_norm(id, eps);
            imp.params.push((id, Params::LayerNorm { gamma, beta }));
            imp.values
                .insert(nodes.output(i).into(), Value::Node { id, rank });
            Ok(vec![i])
        })(),
    )
}

/// GELU from its primitives, starting at the division by sqrt 2 (a Mul by
/// its inverse, or a Div) that feeds the Erf.
fn gelu(imp: &mut Importer, nodes: &Nodes, i: usize) -> Result<Vec<usize>> {
    let mut walk = Walk::new(nodes, i, "a GELU");
    let scale = nodes.get(i);
    let is_const = |n: &String| nodes.constant(imp, n).is_ok();
    let (x, c) = match scale.input.as_slice() {
        [x, c] if is_const(c) => (x.as_str(), c.as_str()),
        [c, x] if is_const(c) && scale.op_type == "Mul" => (x.as_str(), c.as_str()),
        _ => return Err(walk.fail(i, "expected the input scaled by a constant")),
    };
    let want = match scale.op_type.as_str() {
        "Mul" => std::f32::consts::FRAC_1_SQRT_2,
        _ => std::f32::consts::SQRT_2,
    };
    ensure!(
        nodes.scalar(imp, c) == Some(want),
        walk.fail(i, format!("`{c}` must be {want} (the GELU's sqrt 2)"))
    );
    let (id, rank) = at(scale, imp.tensor(x))?;
    let erf = walk.next(i, "Erf")?;
    let plus = walk.next(erf, "Add")?;
    let one = nodes.other(walk.node(plus), nodes.output(erf))?;
    ensure!(
        nodes.scalar(imp, one) == Some(1.0),
        walk.fail(plus, format!("`{one}` must be 1"))
    );
    let product = walk.next(plus, "Mul")?;
    ensure!(
        nodes.other(walk.node(product), nodes.output(plus))? == x,
        walk.fail(product, format!("expected `{x}` times 1 + erf"))
    );
    let half = walk.next(product, "Mul")?;
    let h = nodes.other(walk.node(half), nodes.output(product))?;
    ensure!(
        nodes.scalar(imp, h) == Some(0.5),
        walk.fail(half, format!("`{h}` must be 0.5"))
    );
    let id = imp.builder.gelu(id);
    imp.values
        .insert(nodes.output(half).into(), Value::Node { id, rank });
    Ok(walk.finish())
}

/// The pads of Pad node `i` (an input since opset 11), which must be a
/// zero padding.
fn pads(imp: &Importer, nodes: &Nodes, walk: &Walk, i: usize) -> Result<Vec<i64>> {
    let node = nodes.get(i);
    let a = Attrs(node);
    let (pads, value) = if imp.opset < 11 {
        (
            a.ints("pads").unwrap_or_default(),
            a.float("value").unwrap_or(0.0),
        )
    } else {
        let pads = at(
            node,
            nodes.constant(imp, node.input.get(1).map_or("", String::as_str)),
        )?;
        let value = match node.input.get(2).filter(|n| !n.is_empty()) {
            Some(n) => nodes.scalar(imp, n),
            None => Some(0.0),
        };
        (at(node, pads.int_values())?, value.unwrap_or(f32::NAN))
    };
    let mode = a.string("mode").unwrap_or_else(|| "constant".into());
    ensure!(
        mode == "constant" && value == 0.0,
        walk.fail(i, "expected a zero padding")
    );
    Ok(pads)
}

/// The class token: Reshape (node `i`) of node `id` to a sequence, a Pad
/// of one token in front, and an Add of the token padded to the sequence.
fn class_token(imp: &mut Importer, nodes: &Nodes, i: usize, id: NodeId) -> Result<Vec<usize>> {
    let mut walk = Walk::new(nodes, i, "a class token");
    let [d, h, w] = imp.builder.shape(id);
    let tokens = (h * w) as i64;
    let pad = walk.next(i, "Pad")?;
    ensure!(
        pads(imp, nodes, &walk, pad)? == [0, 0, 1, 0, 0, 0, 0, 0],
        walk.fail(pad, "expected one token padded in front of the sequence")
    );
    let add = walk.next(pad, "Add")?;
    let placed = nodes.other(walk.node(add), nodes.output(pad))?;
    // The token padded to the sequence: a Pad of the `[1, d, 1, 1]` token
    // (this crate's export), or that tensor as a constant.
    let token = match nodes.constant(imp, placed) {
        Ok(t) => {
            let v = t.floats();
            ensure!(
                t.dims == [1, d, h * w + 1, 1],
                walk.fail(
                    add,
                    format!(
                        "`{placed}` has shape {:?}; expected [1, {d}, {}, 1]",
                        t.dims,
                        h * w + 1
                    )
                )
            );
            let token: Vec<f32> = v.iter().step_by(h * w + 1).copied().collect();
            let zeros = v
                .iter()
                .enumerate()
                .all(|(k, &x)| k % (h * w + 1) == 0 || x == 0.0);
            ensure!(
                zeros,
                walk.fail(
                    add,
                    format!("`{placed}` must be zero but for its first token")
                )
            );
            token
        }
        Err(_) => {
            let p = walk.producer(placed, "Pad", add)?;
            ensure!(
                pads(imp, nodes, &walk, p)? == [0, 0, 0, 0, 0, 0, tokens, 0],
                walk.fail(p, "expected the token padded to the sequence behind it")
            );
            let token = walk.node(p).input.first().map_or("", String::as_str);
            let t = at(walk.node(p), nodes.constant(imp, token))?;
            ensure!(
                t.dims == [1, d, 1, 1],
                walk.fail(
                    p,
                    format!("the token has shape {:?}; expected [1, {d}, 1, 1]", t.dims)
                )
            );
            t.floats()
        }
    };
    let id = imp.builder.class_token(id);
    imp.params.push((id, Params::Tensor(token)));
    imp.values
        .insert(nodes.output(add).into(), Value::Node { id, rank: 4 });
    Ok(walk.finish())
}

/// A Slice of the first token of a `[N, d, tokens, 1]` sequence.
fn first_token(imp: &mut Importer, nodes: &Nodes, i: usize) -> Result<Vec<usize>> {
    let node = nodes.get(i);
    let (id, rank) = at(node, imp.tensor(&node.input[0]))?;
    let [d, h, w] = imp.builder.shape(id);
    let (axis, start, end) = nodes.slice(imp, node, &[1, d, h, w])?;
    if rank != 4 || w != 1 || (axis, start, end) != (2, 0, 1) {
        bail!(fail(
            node,
            format!(
                "a Slice of axis {axis} [{start}, {end}) of a rank-{rank} [N, {d}, {h}, {w}] tensor; only the first token of a [N, d, tokens, 1] sequence is supported (or a roll before windowed attention)"
            )
        ));
    }
    let id = imp.builder.first_token(id);
    imp.values
        .insert(nodes.output(i).into(), Value::Node { id, rank: 4 });
    Ok(vec![i])
}

/// Swin's patch merging: Reshape (node `i`) of node `id` into 2x2 blocks,
/// Transpose to its channel order, Reshape to the merged grid.
fn space_to_depth(imp: &mut Importer, nodes: &Nodes, i: usize, id: NodeId) -> Result<Vec<usize>> {
    let mut walk = Walk::new(nodes, i, "a patch merging");
    let [c, h, w] = imp.builder.shape(id);
    ensure!(
        h % 2 == 0 && w % 2 == 0,
        walk.fail(
            i,
            format!("a [{c}, {h}, {w}] grid cannot be merged in 2x2 blocks")
        )
    );
    walk.reshape(imp, i, &[1, c, h, w], &[1, c, h / 2, 2, w / 2, 2])?;
    let t = walk.next(i, "Transpose")?;
    walk.perm(t, &[0, 5, 3, 1, 2, 4])?;
    let r = walk.next(t, "Reshape")?;
    walk.reshape(
        imp,
        r,
        &[1, 2, 2, c, h / 2, w / 2],
        &[1, 4 * c, h / 2, w / 2],
    )?;
    let id = imp.builder.space_to_depth(id);
    imp.values
        .insert(nodes.output(r).into(), Value::Node { id, rank: 4 });
    Ok(walk.finish())
}
