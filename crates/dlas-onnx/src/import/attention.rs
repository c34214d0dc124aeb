//! Windowed multi-head attention as this crate's exporter writes it
//! (`export/transformer.rs`), recognised node by node and rebuilt as one
//! IR Attention: the optional roll of Swin's shifted windows (Slice +
//! Concat on each axis), the partition into windows and heads
//! (Reshape-Transpose-Reshape), the q, k and v Slices, `q k^T` (Transpose,
//! MatMul) times the scale, the optional relative-position bias (a Gather
//! of the table, Transpose, Reshape, Add), the optional shift mask
//! (Reshape, Add, Reshape), Softmax, the product with v, the merge back
//! (Reshape-Transpose-Reshape) and the inverse roll.
//!
//! The IR operator fixes every constant of that subgraph once its shape is
//! known, so each is re-derived and compared exactly (the scale as the
//! float32 the exporter writes, the relative index and the mask as the
//! exporter computes them): a file whose attention differs in any value is
//! refused, naming the node, rather than imported as something else.

use super::subgraph::{Nodes, Walk, at};
use super::{Importer, Value};
use crate::export::{relative_index, shift_mask};
use anyhow::{Result, ensure};
use dlas_zoo::Attention;
use dlas_zoo::weights::Params;

/// The attention subgraph starting at node `i`: the first Slice of the
/// roll, or the Reshape into windows. Imports it and returns its nodes.
pub(super) fn attention(imp: &mut Importer, nodes: &Nodes, i: usize) -> Result<Vec<usize>> {
    let mut walk = Walk::new(nodes, i, "windowed attention");
    let qkv = nodes.get(i).input.first().map_or("", String::as_str);
    let (id, rank) = at(nodes.get(i), imp.tensor(qkv))?;
    let [c, h, w] = imp.builder.shape(id);
    ensure!(
        rank == 4,
        walk.fail(i, "attention of a rank-2 tensor; expected [N, 3d, h, w]")
    );
    let dims = [1, c, h, w];
    // Swin's shift: the tokens rolled by -shift on both axes.
    let (partition, shift) = if nodes.get(i).op_type == "Slice" {
        let concat = walk.next(i, "Concat")?;
        let first = roll(imp, &mut walk, concat, qkv, &dims)?;
        let [tail, _] = walk.read_by(concat, &["Slice", "Slice"])?[..] else {
            unreachable!("two readers")
        };
        let concat2 = walk.next(tail, "Concat")?;
        let second = roll(imp, &mut walk, concat2, nodes.output(concat), &dims)?;
        let ([(2, by), (3, by_w)] | [(3, by_w), (2, by)]) = [first, second] else {
            return Err(walk.fail(concat2, "expected one roll along each axis of the grid"));
        };
        ensure!(
            by == by_w,
            walk.fail(
                concat2,
                format!("rolls by {by} and {by_w}; expected one shift")
            )
        );
        (walk.next(concat2, "Reshape")?, by)
    } else {
        (i, 0)
    };
    // (n, [q k v] x heads, head_dim, nh, wh, nw, ww) -> (n nh nw, 3 heads, tokens, head_dim).
    let split = nodes.reshaped(imp, walk.node(partition), &dims)?;
    let &[1, three_heads, head_dim, nh, wh, nw, ww] = split.as_slice() else {
        return Err(walk.fail(
            partition,
            format!("a reshape to {split:?}; expected [N, 3 heads, head_dim, nh, wh, nw, ww]"),
        ));
    };
    ensure!(
        three_heads % 3 == 0 && three_heads * head_dim == c && nh * wh == h && nw * ww == w,
        walk.fail(
            partition,
            format!("a reshape to {split:?}; expected [N, 3 heads, head_dim, nh, wh, nw, ww] of [N, {c}, {h}, {w}]")
        )
    );
    let (heads, d, windows, tokens) = (three_heads / 3, c / 3, nh * nw, wh * ww);
    let moved = walk.next(partition, "Transpose")?;
    walk.perm(moved, &[0, 3, 5, 1, 4, 6, 2])?;
    let blocks = walk.next(moved, "Reshape")?;
    let stacked = [windows, three_heads, tokens, head_dim];
    walk.reshape(
        imp,
        blocks,
        &[1, nh, nw, three_heads, wh, ww, head_dim],
        &stacked,
    )?;
    let [q, k, v] = walk.read_by(blocks, &["Slice", "Slice", "Slice"])?[..] else {
        unreachable!("three readers")
    };
    let mut parts = [q, k, v];
    for s in [q, k, v] {
        let (axis, start, end) = nodes.slice(imp, walk.node(s), &stacked)?;
        let part = (axis == 1 && end == start + heads && start % heads == 0)
            .then_some(start / heads)
            .filter(|&p| p < 3)
            .ok_or_else(|| {
                walk.fail(
                    s,
                    format!(
                        "a Slice of axis {axis} [{start}, {end}); expected the heads of q, k or v"
                    ),
                )
            })?;
        parts[part] = s;
    }
    let [q, k, v] = parts;
    ensure!(
        q != k && k != v && q != v,
        walk.fail(blocks, "q, k and v must each be sliced once")
    );
    let k_t = walk.next(k, "Transpose")?;
    walk.perm(k_t, &[0, 1, 3, 2])?;
    let dots = walk.next(k_t, "MatMul")?;
    ensure!(
        walk.next(q, "MatMul")? == dots
            && walk.node(dots).input == [nodes.output(q), nodes.output(k_t)],
        walk.fail(dots, "expected q times k transposed")
    );
    let scores = scale(imp, &mut walk, dots, head_dim)?;
    let mut next = walk.next(scores, "Add|Reshape|Softmax")?;
    let mut table = None;
    if walk.node(next).op_type == "Add" {
        ensure!(
            wh == ww,
            walk.fail(
                next,
                format!(
                    "a relative-position bias on {wh}x{ww} windows; only square windows have one"
                )
            )
        );
        table = Some(bias(
            imp,
            &mut walk,
            next,
            nodes.output(scores),
            [heads, wh, ww],
        )?);
        next = walk.next(next, "Reshape|Softmax")?;
    }
    if walk.node(next).op_type == "Reshape" {
        ensure!(
            shift > 0 && wh == ww,
            walk.fail(
                next,
                "a mask on windows that are not shifted; only Swin's shift mask is supported"
            )
        );
        next = mask(
            imp,
            &mut walk,
            next,
            [windows, heads, tokens],
            [h, w, wh, shift],
        )?;
    } else {
        ensure!(
            shift == 0,
            walk.fail(
                next,
                format!("windows shifted by {shift} without their mask")
            )
        );
    }
    ensure!(
        walk.node(next).op_type == "Softmax",
        walk.fail(next, "expected Softmax here")
    );
    softmax_axis(imp, &walk, next)?;
    let context = walk.next(next, "MatMul")?;
    ensure!(
        walk.next(v, "MatMul")? == context
            && walk.node(context).input == [nodes.output(next), nodes.output(v)],
        walk.fail(context, "expected the attention weights times v")
    );
    // (n nh nw, heads, wh ww, head_dim) -> (n, heads, head_dim, nh, wh, nw, ww) -> (n, d, h, w).
    let windowed = walk.next(context, "Reshape")?;
    let grid = [1, nh, nw, heads, wh, ww, head_dim];
    walk.reshape(imp, windowed, &[windows, heads, tokens, head_dim], &grid)?;
    let back = walk.next(windowed, "Transpose")?;
    walk.perm(back, &[0, 3, 6, 1, 4, 2, 5])?;
    let merged = walk.next(back, "Reshape")?;
    walk.reshape(
        imp,
        merged,
        &[1, heads, head_dim, nh, wh, nw, ww],
        &[1, d, h, w],
    )?;
    let mut out = merged;
    if shift > 0 {
        let unrolled = [1, d, h, w];
        let mut rolls = Vec::new();
        for _ in 0..2 {
            let [tail, _] = walk.read_by(out, &["Slice", "Slice"])?[..] else {
                unreachable!("two readers")
            };
            let concat = walk.next(tail, "Concat")?;
            rolls.push(roll(imp, &mut walk, concat, nodes.output(out), &unrolled)?);
            out = concat;
        }
        rolls.sort_unstable();
        ensure!(
            rolls == [(2, h - shift), (3, w - shift)],
            walk.fail(
                out,
                format!("rolls {rolls:?} (axis, by); expected the inverse of the shift by {shift}")
            )
        );
    }
    let has_bias = table.is_some();
    let window = if has_bias || (wh, ww) != (h, w) {
        ensure!(
            wh == ww,
            walk.fail(
                partition,
                format!("{wh}x{ww} windows; only square windows are supported")
            )
        );
        Some(wh)
    } else {
        None
    };
    ensure!(
        shift == 0 || (window.is_some() && shift < wh),
        walk.fail(
            partition,
            format!("a shift of {shift} for windows of {wh}x{ww}")
        )
    );
    let attention = Attention {
        heads,
        window,
        shift,
        relative_bias: has_bias,
    };
    let id = imp.builder.attention(id, attention);
    if let Some(table) = table {
        imp.params.push((id, Params::Tensor(table)));
    }
    imp.values
        .insert(nodes.output(out).into(), Value::Node { id, rank: 4 });
    Ok(walk.finish())
}

/// The roll whose Concat is node `concat`, of tensor `x` (of `dims`):
/// `Concat(x[by..], x[..by])` along one axis, as (axis, by).
fn roll(
    imp: &Importer,
    walk: &mut Walk,
    concat: usize,
    x: &str,
    dims: &[usize],
) -> Result<(usize, usize)> {
    let node = walk.node(concat);
    let [tail, head] = node.input.as_slice() else {
        return Err(walk.fail(concat, "expected two halves of a roll"));
    };
    let tail = walk.producer(tail, "Slice", concat)?;
    let head = walk.producer(head, "Slice", concat)?;
    let of_x = |s: usize| walk.node(s).input.first().is_some_and(|n| n == x);
    ensure!(
        of_x(tail) && of_x(head),
        walk.fail(concat, format!("expected two Slices of `{x}`"))
    );
    let (axis, by, size) = walk.nodes.slice(imp, walk.node(tail), dims)?;
    let second = walk.nodes.slice(imp, walk.node(head), dims)?;
    let concat_axis = super::Attrs(node).int("axis").unwrap_or(i64::MAX);
    let concat_axis = at(node, super::fold::axis(concat_axis, dims.len()))?;
    ensure!(
        size == dims[axis] && second == (axis, 0, by) && concat_axis == axis && 0 < by && by < size,
        walk.fail(
            concat,
            "expected a roll: the end of an axis, then its start"
        )
    );
    Ok((axis, by))
}

/// The scores: node `dots` times 1/sqrt(head_dim) (a Mul by the float32
/// the exporter writes, or a Div by the square root). Returns the node.
fn scale(imp: &Importer, walk: &mut Walk, dots: usize, head_dim: usize) -> Result<usize> {
    let nodes = walk.nodes;
    let scores = walk.next(dots, "Mul|Div")?;
    let node = walk.node(scores);
    let c = nodes.other(node, nodes.output(dots))?;
    let root = (head_dim as f32).sqrt();
    let (want, ok_order) = match node.op_type.as_str() {
        "Mul" => (1.0 / root, true),
        _ => (root, node.input[0] == nodes.output(dots)),
    };
    let got = nodes.scalar(imp, c);
    ensure!(
        ok_order && got == Some(want),
        walk.fail(
            scores,
            format!(
                "scale {got:?}; expected the scores scaled by 1/sqrt({head_dim}) ({} {want})",
                node.op_type
            )
        )
    );
    Ok(scores)
}

/// The relative-position bias added by node `add` to tensor `scores`:
/// `Reshape(Transpose(Gather(table, index)))` with the exporter's index.
/// Returns the table.
fn bias(
    imp: &Importer,
    walk: &mut Walk,
    add: usize,
    scores: &str,
    [heads, wh, ww]: [usize; 3],
) -> Result<Vec<f32>> {
    let nodes = walk.nodes;
    let tokens = wh * ww;
    let bias = nodes.other(walk.node(add), scores)?;
    let reshape = walk.producer(bias, "Reshape", add)?;
    let first = |i: usize| nodes.get(i).input.first().map_or("", String::as_str);
    let transpose = walk.producer(first(reshape), "Transpose", reshape)?;
    walk.perm(transpose, &[1, 0])?;
    let gather = walk.producer(first(transpose), "Gather", transpose)?;
    let node = walk.node(gather);
    let (Some(table), Some(index)) = (node.input.first(), node.input.get(1)) else {
        return Err(walk.fail(gather, "expected a Gather of the table at the index"));
    };
    let table = at(node, nodes.constant(imp, table))?;
    let rows = (2 * wh - 1) * (2 * ww - 1);
    ensure!(
        table.dims == [rows, heads] && super::Attrs(node).int("axis").unwrap_or(0) == 0,
        walk.fail(
            gather,
            format!(
                "a table of shape {:?}; expected [{rows}, {heads}] gathered along axis 0",
                table.dims
            )
        )
    );
    let index = at(node, nodes.constant(imp, index))?;
    // The index is derived only once the file's has its size, which bounds it.
    ensure!(
        index.dims == [tokens * tokens]
            && index.int_values().ok() == Some(relative_index(wh as i64, ww as i64)),
        walk.fail(
            gather,
            format!(
                "`{}` is not the relative-position index of {wh}x{ww} windows",
                node.input[1]
            )
        )
    );
    walk.reshape(
        imp,
        reshape,
        &[heads, tokens * tokens],
        &[heads, tokens, tokens],
    )?;
    Ok(table.floats())
}

/// The shift mask, from the Reshape (node `split`) into windows to the
/// Reshape back; the mask must be the exporter's for this grid and shift.
/// Returns the node after it.
fn mask(
    imp: &Importer,
    walk: &mut Walk,
    split: usize,
    [windows, heads, tokens]: [usize; 3],
    [h, w, window, shift]: [usize; 4],
) -> Result<usize> {
    let nodes = walk.nodes;
    let scores = [windows, heads, tokens, tokens];
    walk.reshape(imp, split, &scores, &[1, windows, heads, tokens, tokens])?;
    let add = walk.next(split, "Add")?;
    let name = nodes.other(walk.node(add), nodes.output(split))?;
    let mask = at(walk.node(add), nodes.constant(imp, name))?;
    // Derived only once the file's mask has its size, which bounds it.
    let want = || shift_mask(h as i64, w as i64, window as i64, shift as i64);
    ensure!(
        mask.dims == [windows, 1, tokens, tokens] && mask.floats() == want(),
        walk.fail(add, format!("`{name}` is not the mask of {window}x{window} windows shifted by {shift} on a {h}x{w} grid"))
    );
    let merge = walk.next(add, "Reshape")?;
    walk.reshape(imp, merge, &[1, windows, heads, tokens, tokens], &scores)?;
    walk.next(merge, "Softmax")
}

/// Checks that Softmax node `i` normalises the last axis of the scores.
fn softmax_axis(imp: &Importer, walk: &Walk, i: usize) -> Result<()> {
    let default = if imp.opset < 13 { 1 } else { -1 };
    let axis = super::Attrs(walk.node(i)).int("axis").unwrap_or(default);
    ensure!(
        axis == -1 || axis == 3,
        walk.fail(
            i,
            format!("Softmax over axis {axis}; expected the last (the keys)")
        )
    );
    Ok(())
}
