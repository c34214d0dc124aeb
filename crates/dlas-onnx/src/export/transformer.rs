//! The transformer operators as opset-13 primitives that tract 0.23 and
//! ONNX Runtime both run: layer norm, GELU through Erf, and (shifted,
//! windowed) attention with its rolls and mask.
//!
//! Kept apart from the convolutional export because each is a small graph
//! of its own, with its shape bookkeeping, checked against the f64
//! reference by the crate's tests.

use super::{GraphOut, int, ints};
use dlas_zoo::{Attention, Shape};

impl GraphOut {
    /// Elements `start..end` of `x` along `axis`, into tensor `out` (a
    /// name of its own under `prefix` when `None`); returns the name.
    pub(super) fn slice(
        &mut self,
        prefix: &str,
        x: &str,
        axis: i64,
        [start, end]: [i64; 2],
        out: Option<&str>,
    ) -> String {
        let k = self.nodes.len();
        let starts = self.int64(&format!("{prefix}.starts{k}"), &[1], &[start]);
        let ends = self.int64(&format!("{prefix}.ends{k}"), &[1], &[end]);
        let axes = self.int64(&format!("{prefix}.axes{k}"), &[1], &[axis]);
        let name = out.map_or_else(|| format!("{prefix}.slice{k}"), str::to_string);
        self.node(
            "Slice",
            &name,
            vec![x.to_string(), starts, ends, axes],
            vec![],
        );
        name
    }

    /// `y[i] = x[(i + by) % size]` along `axis` (`torch.roll(x, -by)`),
    /// into `out` as [`GraphOut::slice`] names it.
    fn roll(
        &mut self,
        prefix: &str,
        x: &str,
        axis: i64,
        [size, by]: [i64; 2],
        out: Option<&str>,
    ) -> String {
        let tail = self.slice(prefix, x, axis, [by, size], None);
        let head = self.slice(prefix, x, axis, [0, by], None);
        let name = out.map_or_else(
            || format!("{prefix}.roll{}", self.nodes.len()),
            str::to_string,
        );
        self.node("Concat", &name, vec![tail, head], vec![int("axis", axis)]);
        name
    }

    /// Layer norm over axis 1 (channels) from primitives, written to `out`.
    pub(super) fn layer_norm(
        &mut self,
        prefix: &str,
        out: &str,
        x: &str,
        eps: f64,
        gamma: &[f32],
        beta: &[f32],
    ) {
        let c = gamma.len() as i64;
        let mean = format!("{prefix}.mean");
        self.node(
            "ReduceMean",
            &mean,
            vec![x.to_string()],
            vec![ints("axes", &[1])],
        );
        let centered = self.step("Sub", prefix, "centered", vec![x.to_string(), mean]);
        let squared = self.step(
            "Mul",
            prefix,
            "squared",
            vec![centered.clone(), centered.clone()],
        );
        let var = format!("{prefix}.var");
        self.node("ReduceMean", &var, vec![squared], vec![ints("axes", &[1])]);
        let eps = self.scalar(&format!("{prefix}.eps"), eps as f32);
        let var_eps = self.step("Add", prefix, "var_eps", vec![var, eps]);
        let std = self.step("Sqrt", prefix, "std", vec![var_eps]);
        let normalized = self.step("Div", prefix, "normalized", vec![centered, std]);
        let gamma = self.initializer(&format!("{prefix}.gamma"), &[c, 1, 1], gamma);
        let scaled = self.step("Mul", prefix, "scaled", vec![normalized, gamma]);
        let beta = self.initializer(&format!("{prefix}.beta"), &[c, 1, 1], beta);
        self.node("Add", out, vec![scaled, beta], vec![]);
    }

    /// `x * (1 + erf(x / sqrt 2)) / 2`, written to `out`.
    pub(super) fn gelu(&mut self, prefix: &str, out: &str, x: &str) {
        let inv_sqrt2 = self.scalar(
            &format!("{prefix}.inv_sqrt2"),
            std::f32::consts::FRAC_1_SQRT_2,
        );
        let scaled = self.step("Mul", prefix, "scaled", vec![x.to_string(), inv_sqrt2]);
        let erf = self.step("Erf", prefix, "erf", vec![scaled]);
        let one = self.scalar(&format!("{prefix}.one"), 1.0);
        let plus = self.step("Add", prefix, "plus_one", vec![erf, one]);
        let product = self.step("Mul", prefix, "product", vec![x.to_string(), plus]);
        let half = self.scalar(&format!("{prefix}.half"), 0.5);
        self.node("Mul", out, vec![product, half], vec![]);
    }

    /// Windowed multi-head self-attention from `qkv` (per-sample `shape`
    /// `[3d, h, w]`), written to `out` as `[n, d, h, w]`.
    pub(super) fn attention(
        &mut self,
        prefix: &str,
        out: &str,
        qkv: &str,
        shape: Shape,
        a: &Attention,
        table: Option<&[f32]>,
    ) {
        let [c, h, w] = shape;
        let (d, heads) = (c / 3, a.heads);
        let head_dim = d / heads;
        let (wh, ww) = a.window_hw(h, w);
        let (nh, nw, tokens) = (h / wh, w / ww, wh * ww);
        let [d, h, w, heads, head_dim, wh, ww, nh, nw, tokens] =
            [d, h, w, heads, head_dim, wh, ww, nh, nw, tokens].map(|v| v as i64);
        let shift = a.shift as i64;
        let mut x = qkv.to_string();
        if shift > 0 {
            x = self.roll(prefix, &x, 2, [h, shift], None);
            x = self.roll(prefix, &x, 3, [w, shift], None);
        }
        // (n, [q k v] x heads, head_dim, nh, wh, nw, ww) -> (n, nh, nw, 3 heads, wh, ww, head_dim).
        let x = self.reshape(prefix, &x, &[-1, 3 * heads, head_dim, nh, wh, nw, ww]);
        let x = self.transpose(prefix, &x, &[0, 3, 5, 1, 4, 6, 2]);
        let x = self.reshape(prefix, &x, &[-1, 3 * heads, tokens, head_dim]);
        let q = self.slice(prefix, &x, 1, [0, heads], None);
        let k = self.slice(prefix, &x, 1, [heads, 2 * heads], None);
        let v = self.slice(prefix, &x, 1, [2 * heads, 3 * heads], None);
        let k_t = self.transpose(prefix, &k, &[0, 1, 3, 2]);
        let dots = self.step("MatMul", prefix, "dots", vec![q, k_t]);
        let scale = self.scalar(&format!("{prefix}.scale"), 1.0 / (head_dim as f32).sqrt());
        let mut scores = self.step("Mul", prefix, "scores", vec![dots, scale]);
        if let Some(table) = table {
            let rows = table.len() as i64 / heads;
            let table = self.initializer(&format!("{prefix}.relative_bias"), &[rows, heads], table);
            let index = relative_index(wh, ww);
            let index = self.int64(
                &format!("{prefix}.relative_index"),
                &[tokens * tokens],
                &index,
            );
            let gathered = self.step("Gather", prefix, "bias_gathered", vec![table, index]);
            let bias = self.transpose(prefix, &gathered, &[1, 0]);
            let bias = self.reshape(prefix, &bias, &[heads, tokens, tokens]);
            scores = self.step("Add", prefix, "biased", vec![scores, bias]);
        }
        if shift > 0 {
            let mask = shift_mask(h, w, wh, shift);
            let windows = nh * nw;
            let mask = self.initializer(
                &format!("{prefix}.mask"),
                &[windows, 1, tokens, tokens],
                &mask,
            );
            let per_window = self.reshape(prefix, &scores, &[-1, windows, heads, tokens, tokens]);
            let masked = self.step("Add", prefix, "masked", vec![per_window, mask]);
            scores = self.reshape(prefix, &masked, &[-1, heads, tokens, tokens]);
        }
        let probs = format!("{prefix}.softmax");
        self.node("Softmax", &probs, vec![scores], vec![int("axis", -1)]);
        let context = self.step("MatMul", prefix, "context", vec![probs, v]);
        // (n nh nw, heads, wh ww, head_dim) -> (n, heads, head_dim, nh, wh, nw, ww).
        let y = self.reshape(prefix, &context, &[-1, nh, nw, heads, wh, ww, head_dim]);
        let y = self.transpose(prefix, &y, &[0, 3, 6, 1, 4, 2, 5]);
        if shift == 0 {
            let dims = self.int64(&format!("{prefix}.out_shape"), &[4], &[-1, d, h, w]);
            self.node("Reshape", out, vec![y, dims], vec![]);
        } else {
            let y = self.reshape(prefix, &y, &[-1, d, h, w]);
            let y = self.roll(prefix, &y, 2, [h, h - shift], None);
            self.roll(prefix, &y, 3, [w, w - shift], Some(out));
        }
    }
}

/// The row of the relative-position table that each (query, key) pair of
/// tokens of a `wh x ww` window reads, row-major over the pairs: the
/// table is indexed by the offset `(dy, dx)`, each shifted to start at 0.
/// The importer compares a file's index with this one.
pub(crate) fn relative_index(wh: i64, ww: i64) -> Vec<i64> {
    let (tokens, side) = (wh * ww, 2 * ww - 1);
    (0..tokens * tokens)
        .map(|ij| {
            let (i, j) = (ij / tokens, ij % tokens);
            (i / ww - j / ww + wh - 1) * side + (i % ww - j % ww + ww - 1)
        })
        .collect()
}

/// Swin's attention mask for windows shifted by `shift` on an `h x w` grid
/// (square windows of side `window`), `(windows, 1, tokens, tokens)`, as
/// timm builds it: label the rolled grid's nine regions
/// (`[0, -window)`, `[-window, -shift)`, `[-shift, end)` on each axis),
/// and add -100 where two tokens of a window carry different labels. The
/// importer compares a file's mask with this one.
pub(crate) fn shift_mask(h: i64, w: i64, window: i64, shift: i64) -> Vec<f32> {
    let region = |pos: i64, size: i64| {
        [0, size - window, size - shift]
            .iter()
            .rposition(|&start| pos >= start)
            .expect("every position is in a region") as i64
    };
    let label = |y: i64, x: i64| region(y, h) * 3 + region(x, w);
    let tokens = window * window;
    let mut mask = Vec::new();
    for wy in 0..h / window {
        for wx in 0..w / window {
            let at = |t: i64| label(wy * window + t / window, wx * window + t % window);
            for i in 0..tokens {
                for j in 0..tokens {
                    mask.push(if at(i) == at(j) { 0.0 } else { -100.0 });
                }
            }
        }
    }
    mask
}
