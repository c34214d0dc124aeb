//! The operators that only imported models have (classic ImageNet exports:
//! LRN, softmax, a stand-alone zero pad, ShuffleNet's channel shuffle and
//! MobileNetV3's hard activations), on whole batches in either layout.
//! They are rare and memory-bound, so each is one plain pass per sample,
//! indexed through [`at`] like the other non-convolution operators.

use crate::ops::at;
use dlas_core::Layout;
use dlas_zoo::{Op, Shape};
use rayon::prelude::*;

/// Runs `op` (one of the operators of the module) on a batch of `shape`
/// in `layout`.
pub(crate) fn run(op: &Op, x: &[f32], shape: Shape, layout: Layout) -> Vec<f32> {
    let [c, h, w] = shape;
    let len = c * h * w;
    let elementwise = |f: &(dyn Fn(f32) -> f32 + Sync)| x.par_iter().map(|&v| f(v)).collect();
    match op {
        Op::HardSigmoid { alpha, beta } => {
            let (a, b) = (*alpha as f32, *beta as f32);
            elementwise(&|v| a.mul_add(v, b).clamp(0.0, 1.0))
        }
        Op::HardSwish => elementwise(&|v| v * (v / 6.0 + 0.5).clamp(0.0, 1.0)),
        Op::Pad(pads) => {
            let out_shape = [c, h + pads[0] + pads[2], w + pads[1] + pads[3]];
            let ol: usize = out_shape.iter().product();
            let mut out = vec![0.0; x.len() / len * ol];
            out.par_chunks_mut(ol)
                .zip(x.par_chunks(len))
                .for_each(|(o, s)| {
                    for (ch, y, xx) in positions(shape) {
                        o[at(layout, out_shape, ch, y + pads[0], xx + pads[1])] =
                            s[at(layout, shape, ch, y, xx)];
                    }
                });
            out
        }
        Op::ChannelShuffle { groups } => {
            let per_group = c / groups;
            let mut out = vec![0.0; x.len()];
            out.par_chunks_mut(len)
                .zip(x.par_chunks(len))
                .for_each(|(o, s)| {
                    for (ch, y, xx) in positions(shape) {
                        let to = (ch % per_group) * groups + ch / per_group;
                        o[at(layout, shape, to, y, xx)] = s[at(layout, shape, ch, y, xx)];
                    }
                });
            out
        }
        Op::Softmax => across_channels(x, shape, layout, |column, out| {
            let max = column.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut total = 0.0;
            for (o, v) in out.iter_mut().zip(column) {
                *o = (v - max).exp();
                total += *o;
            }
            out.iter_mut().for_each(|o| *o /= total);
        }),
        Op::Lrn {
            size,
            alpha,
            beta,
            bias,
        } => {
            let (scale, beta, bias) = (*alpha / *size as f64, *beta, *bias);
            across_channels(x, shape, layout, |column, out| {
                for (i, o) in out.iter_mut().enumerate() {
                    let window = i.saturating_sub((size - 1) / 2)..(i + size / 2 + 1).min(c);
                    let squares: f64 = column[window].iter().map(|&v| (v as f64).powi(2)).sum();
                    *o = (column[i] as f64 / (bias + scale * squares).powf(beta)) as f32;
                }
            })
        }
        other => unreachable!("{} is not an imported-model operator", other.kind()),
    }
}

/// Every (channel, y, x) of `shape`.
fn positions([c, h, w]: Shape) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..c).flat_map(move |ch| (0..h).flat_map(move |y| (0..w).map(move |x| (ch, y, x))))
}

/// Applies `f(column, out)` to the channels of every position: gathers
/// the column, lets `f` fill its outputs, scatters them back.
fn across_channels(
    x: &[f32],
    shape: Shape,
    layout: Layout,
    f: impl Fn(&[f32], &mut [f32]) + Sync,
) -> Vec<f32> {
    let [c, h, w] = shape;
    let len = c * h * w;
    let mut out = vec![0.0; x.len()];
    out.par_chunks_mut(len)
        .zip(x.par_chunks(len))
        .for_each(|(o, s)| {
            let (mut column, mut result) = (vec![0.0; c], vec![0.0; c]);
            for (y, xx) in (0..h).flat_map(|y| (0..w).map(move |xx| (y, xx))) {
                for (ch, v) in column.iter_mut().enumerate() {
                    *v = s[at(layout, shape, ch, y, xx)];
                }
                f(&column, &mut result);
                for (ch, v) in result.iter().enumerate() {
                    o[at(layout, shape, ch, y, xx)] = *v;
                }
            }
        });
    out
}
