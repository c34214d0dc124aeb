//! The operators that move tokens rather than compute on them: a ViT's
//! class token, position embedding and first-token readout, and Swin's
//! patch merging. They are pure data movement (one addition at most), on
//! whole batches in either layout, indexed through [`crate::ops::at`] so
//! one body serves both.

use crate::ops::at;
use dlas_core::Layout;
use dlas_zoo::Shape;
use rayon::prelude::*;

/// Prepends `token` (d values) to the tokens of each `[d, h, w]` sample of
/// `x`, giving `[d, h * w + 1, 1]` sequences in `y`.
pub(crate) fn class_token(x: &[f32], y: &mut [f32], shape: Shape, token: &[f32], layout: Layout) {
    let [d, h, w] = shape;
    let (plane, tokens) = (h * w, h * w + 1);
    y.par_chunks_mut(d * tokens)
        .zip(x.par_chunks(d * plane))
        .for_each(|(y, x)| match layout {
            // Channel planes: each gains the token's value in front.
            Layout::Nchw => {
                for ((y, x), &t) in y.chunks_mut(tokens).zip(x.chunks(plane)).zip(token) {
                    y[0] = t;
                    y[1..].copy_from_slice(x);
                }
            }
            // Positions in row-major order, channels inner: the token is
            // the first position, the grid's positions follow in order.
            Layout::Nhwc => {
                y[..d].copy_from_slice(token);
                y[d..].copy_from_slice(x);
            }
            Layout::Nchw16c => {
                let out_shape = [d, tokens, 1];
                for (ch, &t) in token.iter().enumerate() {
                    y[at(layout, out_shape, ch, 0, 0)] = t;
                    for p in 0..plane {
                        y[at(layout, out_shape, ch, p + 1, 0)] =
                            x[at(layout, shape, ch, p / w, p % w)];
                    }
                }
            }
        });
}

/// `x + embedding` per sample, `embedding` being one sample of `shape` in
/// NCHW order (as the weights hold it).
pub(crate) fn position_embedding(
    x: &[f32],
    y: &mut [f32],
    shape: Shape,
    embedding: &[f32],
    layout: Layout,
) {
    let [c, h, w] = shape;
    let len = c * h * w;
    y.par_chunks_mut(len)
        .zip(x.par_chunks(len))
        .for_each(|(y, x)| match layout {
            Layout::Nchw => y
                .iter_mut()
                .zip(x)
                .zip(embedding)
                .for_each(|((y, x), e)| *y = x + e),
            Layout::Nhwc | Layout::Nchw16c => {
                for ch in 0..c {
                    for (p, e) in embedding[ch * h * w..][..h * w].iter().enumerate() {
                        let i = at(layout, shape, ch, p / w, p % w);
                        y[i] = x[i] + e;
                    }
                }
            }
        });
}

/// The first token of each `[d, tokens, 1]` sequence, `[d, 1, 1]` (the
/// same in both layouts).
pub(crate) fn first_token(x: &[f32], y: &mut [f32], shape: Shape, layout: Layout) {
    let [d, tokens, _] = shape;
    for (y, x) in y.chunks_mut(d).zip(x.chunks(d * tokens)) {
        for (ch, v) in y.iter_mut().enumerate() {
            *v = x[at(layout, shape, ch, 0, 0)];
        }
    }
}

/// Swin's patch merging of `[c, h, w]` samples into `[4c, h/2, w/2]`:
/// output channel `(2 * dx + dy) * c + i` is channel `i` at offset (dy, dx)
/// of each 2x2 block.
pub(crate) fn space_to_depth(x: &[f32], y: &mut [f32], shape: Shape, layout: Layout) {
    let [c, h, w] = shape;
    let (oh, ow) = (h / 2, w / 2);
    let out_shape = [4 * c, oh, ow];
    y.par_chunks_mut(c * h * w)
        .zip(x.par_chunks(c * h * w))
        .for_each(|(y, x)| {
            for oy in 0..oh {
                for ox in 0..ow {
                    for (dx, dy) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        for i in 0..c {
                            let oc = (2 * dx + dy) * c + i;
                            y[at(layout, out_shape, oc, oy, ox)] =
                                x[at(layout, shape, i, 2 * oy + dy, 2 * ox + dx)];
                        }
                    }
                }
            }
        });
}
