//! The non-convolution operators, on whole batches in either layout.
//! They are memory-bound, so they are written for clarity with coarse
//! parallel chunks; their per-channel ones index through [`at`].

use crate::epilogue::Activation;
use dlas_core::Layout;
use dlas_zoo::{Pool, Shape};
use rayon::prelude::*;

const CHUNK: usize = 1 << 14;

/// Offset of (channel, y, x) inside one sample of shape `[c, h, w]`.
#[inline(always)]
pub(crate) fn at(layout: Layout, [c, h, w]: Shape, ch: usize, y: usize, x: usize) -> usize {
    match layout {
        Layout::Nchw => (ch * h + y) * w + x,
        Layout::Nhwc => (y * w + x) * c + ch,
        Layout::Nchw16c => crate::blocked::offset([c, h, w], ch, y, x),
    }
}

/// Channel of the element at offset `i` of a sample.
#[inline(always)]
fn channel_of(layout: Layout, [c, h, w]: Shape, i: usize) -> usize {
    match layout {
        Layout::Nchw => i / (h * w) % c,
        Layout::Nhwc => i % c,
        Layout::Nchw16c => crate::blocked::channel_of([c, h, w], i % (c * h * w)),
    }
}

pub(crate) fn unary(x: &mut [f32], act: Activation) {
    x.par_chunks_mut(CHUNK).for_each(|c| act.apply_all(c));
}

/// `act(x * scale[c] + shift[c])`: a batch norm that follows no convolution.
pub(crate) fn affine(
    x: &mut [f32],
    scale: &[f32],
    shift: &[f32],
    act: Activation,
    shape: Shape,
    layout: Layout,
) {
    if layout == Layout::Nchw16c {
        return crate::blocked::affine(x, (scale, shift), act, shape);
    }
    let len: usize = shape.iter().product();
    x.par_chunks_mut(len).for_each(|s| {
        for (i, v) in s.iter_mut().enumerate() {
            let c = channel_of(layout, shape, i);
            *v = act.apply(v.mul_add(scale[c], shift[c]));
        }
    });
}

pub(crate) fn add(a: &[f32], b: &[f32], act: Activation) -> Vec<f32> {
    let mut out = a.to_vec();
    out.par_chunks_mut(CHUNK)
        .zip(b.par_chunks(CHUNK))
        .for_each(|(o, b)| {
            o.iter_mut()
                .zip(b)
                .for_each(|(o, b)| *o = act.apply(*o + b))
        });
    out
}

/// `a * b` into `out` (as long as `a`), where `b` has `a`'s shape or is
/// one value per channel: one pass over `a`, into a buffer the caller
/// keeps (squeeze-and-excitation scales whole maps, up to megabytes, once
/// per block of the network).
pub(crate) fn mul(a: &[f32], b: &[f32], shape: Shape, layout: Layout, out: &mut [f32]) {
    let len: usize = shape.iter().product();
    debug_assert_eq!(out.len(), a.len());
    if a.len() == b.len() {
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK))
            .zip(b.par_chunks(CHUNK))
            .for_each(|((o, a), b)| {
                o.iter_mut()
                    .zip(a.iter().zip(b))
                    .for_each(|(o, (a, b))| *o = a * b)
            });
        return;
    }
    // One scale per channel: NCHW planes times a value, NHWC pixels times
    // the sample's row of values, in parallel over both (a sample alone is
    // one task otherwise).
    let [c, h, w] = shape;
    debug_assert_eq!(b.len() * len, a.len() * c);
    match layout {
        Layout::Nchw => out
            .par_chunks_mut(h * w)
            .zip(a.par_chunks(h * w))
            .zip(b.par_iter())
            .with_min_len(CHUNK.div_ceil(h * w))
            .for_each(|((o, plane), &b)| o.iter_mut().zip(plane).for_each(|(o, v)| *o = v * b)),
        Layout::Nhwc => out
            .par_chunks_mut(c)
            .zip(a.par_chunks(c))
            .enumerate()
            .with_min_len(CHUNK.div_ceil(c))
            .for_each(|(p, (o, pixel))| {
                let b = &b[p / (h * w) * c..][..c];
                o.iter_mut()
                    .zip(pixel.iter().zip(b))
                    .for_each(|(o, (v, b))| *o = v * b);
            }),
        // Blocks of pixels of (up to) 16 channels: each block times its
        // channels' values, in parallel over samples and blocks (every
        // block but a sample's last holds 16 channels, so block `k` starts
        // at `k * 16 * h * w`).
        Layout::Nchw16c => {
            use crate::blocked::BLOCK;
            let block = BLOCK * h * w;
            out.par_chunks_mut(len)
                .zip(a.par_chunks(len))
                .zip(b.par_chunks(c))
                .for_each(|((o, a), b)| {
                    o.par_chunks_mut(block)
                        .zip(a.par_chunks(block))
                        .zip(b.par_chunks(BLOCK))
                        .with_min_len(CHUNK.div_ceil(block))
                        .for_each(|((o, a), b)| {
                            for (o, pixel) in
                                o.chunks_exact_mut(b.len()).zip(a.chunks_exact(b.len()))
                            {
                                o.iter_mut()
                                    .zip(pixel.iter().zip(b))
                                    .for_each(|(o, (v, b))| *o = v * b);
                            }
                        })
                });
        }
    }
}

/// Max or average pooling; averages divide by the window's elements
/// inside the input (see `Op::AvgPool`).
pub(crate) fn pool(x: &[f32], shape: Shape, p: &Pool, max: bool, layout: Layout) -> Vec<f32> {
    if layout == Layout::Nchw16c && p.end == 0 {
        return crate::blocked::pool(x, shape, p, max);
    }
    let [c, h, w] = shape;
    let (oh, ow) = (p.out(h), p.out(w));
    let out_shape = [c, oh, ow];
    let (il, ol) = (c * h * w, c * oh * ow);
    let mut out = vec![0.0; x.len() / il * ol];
    out.par_chunks_mut(ol)
        .zip(x.par_chunks(il))
        .for_each(|(o, s)| {
            for ch in 0..c {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (mut best, mut sum, mut count) = (f32::NEG_INFINITY, 0.0, 0);
                        for ky in 0..p.kernel {
                            for kx in 0..p.kernel {
                                let (iy, ix) = (oy * p.stride + ky, ox * p.stride + kx);
                                if iy < p.padding
                                    || ix < p.padding
                                    || iy - p.padding >= h
                                    || ix - p.padding >= w
                                {
                                    continue;
                                }
                                let v = s[at(layout, shape, ch, iy - p.padding, ix - p.padding)];
                                best = best.max(v);
                                sum += v;
                                count += 1;
                            }
                        }
                        o[at(layout, out_shape, ch, oy, ox)] =
                            if max { best } else { sum / count as f32 };
                    }
                }
            }
        });
    out
}

/// Mean over each channel's plane; the result is [c, 1, 1] in both layouts.
pub(crate) fn global_avg_pool(x: &[f32], shape: Shape, layout: Layout) -> Vec<f32> {
    let [c, h, w] = shape;
    let mut out = vec![0.0; x.len() / (h * w)];
    // Each channel's values summed in storage order either way: NCHW in
    // parallel over planes, NHWC over samples, pixel rows at a time.
    match layout {
        Layout::Nchw => out
            .par_iter_mut()
            .zip(x.par_chunks(h * w))
            .with_min_len(CHUNK.div_ceil(h * w))
            .for_each(|(o, plane)| *o = plane.iter().sum::<f32>() / (h * w) as f32),
        Layout::Nhwc => out
            .par_chunks_mut(c)
            .zip(x.par_chunks(c * h * w))
            .for_each(|(o, s)| {
                for pixel in s.chunks_exact(c) {
                    o.iter_mut().zip(pixel).for_each(|(o, v)| *o += v);
                }
                o.iter_mut().for_each(|v| *v /= (h * w) as f32);
            }),
        // Each block's pixels summed in order, 16 channels at a time; a
        // [c, 1, 1] result is the same in every layout.
        // In parallel over samples and blocks: at batch 1 a sample alone
        // is one task, and its blocks' sums are independent.
        Layout::Nchw16c => out
            .par_chunks_mut(c)
            .zip(x.par_chunks(c * h * w))
            .for_each(|(o, s)| {
                use crate::blocked::BLOCK;
                o.par_chunks_mut(BLOCK)
                    .zip(s.par_chunks(BLOCK * h * w))
                    .with_min_len(CHUNK.div_ceil(BLOCK * h * w))
                    .for_each(|(o, block)| {
                        if let Ok(o) = <&mut [f32; BLOCK]>::try_from(&mut *o) {
                            // A full block: sixteen sums in registers (the
                            // same order of additions per channel).
                            let mut sums = [0.0f32; BLOCK];
                            for pixel in block.chunks_exact(BLOCK) {
                                sums.iter_mut().zip(pixel).for_each(|(s, v)| *s += v);
                            }
                            *o = sums;
                        } else {
                            for pixel in block.chunks_exact(o.len()) {
                                o.iter_mut().zip(pixel).for_each(|(o, v)| *o += v);
                            }
                        }
                        o.iter_mut().for_each(|v| *v /= (h * w) as f32);
                    })
            }),
    }
    out
}

/// Concatenation along channels of tensors of one spatial size.
pub(crate) fn concat(
    parts: &[(&[f32], usize)],
    batch: usize,
    [h, w]: [usize; 2],
    layout: Layout,
) -> Vec<f32> {
    let c: usize = parts.iter().map(|p| p.1).sum();
    let mut out = Vec::with_capacity(batch * c * h * w);
    for n in 0..batch {
        match layout {
            Layout::Nchw => {
                for (x, pc) in parts {
                    out.extend_from_slice(&x[n * pc * h * w..(n + 1) * pc * h * w]);
                }
            }
            Layout::Nhwc => {
                for px in 0..h * w {
                    for (x, pc) in parts {
                        out.extend_from_slice(&x[(n * h * w + px) * pc..][..*pc]);
                    }
                }
            }
            // Whole blocks copy as they are where the parts' channels are
            // multiples of 16 (DenseNet's); otherwise value by value.
            Layout::Nchw16c => {
                let start = out.len();
                out.resize(start + c * h * w, 0.0);
                let sample = &mut out[start..];
                let mut first = 0;
                for (x, pc) in parts {
                    let x = &x[n * pc * h * w..][..pc * h * w];
                    if first % crate::blocked::BLOCK == 0 && pc % crate::blocked::BLOCK == 0 {
                        sample[first * h * w..][..pc * h * w].copy_from_slice(x);
                    } else {
                        for ch in 0..*pc {
                            for y in 0..h {
                                for xx in 0..w {
                                    sample[at(layout, [c, h, w], first + ch, y, xx)] =
                                        x[at(layout, [*pc, h, w], ch, y, xx)];
                                }
                            }
                        }
                    }
                    first += pc;
                }
            }
        }
    }
    out
}

/// Reorders a batch between layouts.
pub(crate) fn relayout(x: &[f32], shape: Shape, from: Layout, to: Layout) -> Vec<f32> {
    if from == to || shape[1] * shape[2] == 1 {
        return x.to_vec();
    }
    let [c, h, w] = shape;
    let len = c * h * w;
    let mut out = vec![0.0; x.len()];
    let planar_blocked = match (from, to) {
        (Layout::Nchw, Layout::Nchw16c) => Some(true),
        (Layout::Nchw16c, Layout::Nchw) => Some(false),
        _ => None,
    };
    out.par_chunks_mut(len)
        .zip(x.par_chunks(len))
        .for_each(|(o, s)| {
            if let Some(to_blocked) = planar_blocked {
                return crate::blocked::reorder(s, o, shape, to_blocked);
            }
            for ch in 0..c {
                for y in 0..h {
                    for xx in 0..w {
                        o[at(to, shape, ch, y, xx)] = s[at(from, shape, ch, y, xx)];
                    }
                }
            }
        });
    out
}

/// Exact (erf) GELU of `x` into `y`, `x (1 + erf(x / sqrt 2)) / 2`, with
/// `1 + erf(z)` as `erfc(-z)` for negative `x`: there `1 + erf` cancels in
/// f32 to an absolute error of a few ulps of 1, which at x = -4.3 (where
/// GELU is 3e-5) was 5e-3 of the value (a one-value tensor failed the
/// reference test, about one random run in ten). Both branches are
/// computed and one selected, so the loop vectorises; on AVX-512 it is
/// compiled for 16 lanes and on AVX2 for 8 (a rational function, an `exp`
/// and two divisions per value: ViT-S/16 ran 10% slower with the loop at
/// SSE2's 4).
pub(crate) fn gelu(x: &[f32], y: &mut [f32]) {
    #[inline(always)]
    fn each(x: &[f32], y: &mut [f32]) {
        y.iter_mut().zip(x).for_each(|(y, &x)| {
            let z = x * std::f32::consts::FRAC_1_SQRT_2;
            let below = erfc_of_positive((-z).max(0.0));
            let above = 1.0 + erf(z);
            *y = 0.5 * x * if x < 0.0 { below } else { above };
        })
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn each_avx512(x: &[f32], y: &mut [f32]) {
        each(x, y)
    }
    /// 8 lanes on AVX2 CPUs, as SiLU's loop (`Activation::map`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn each_avx2(x: &[f32], y: &mut [f32]) {
        each(x, y)
    }
    #[cfg(target_arch = "x86_64")]
    let isa = crate::isa::Isa::detect();
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| {
            #[cfg(target_arch = "x86_64")]
            match isa {
                // SAFETY: the CPU has AVX-512F.
                crate::isa::Isa::Avx512 => return unsafe { each_avx512(x, y) },
                // SAFETY: the CPU has AVX2 and FMA.
                crate::isa::Isa::Avx2 => return unsafe { each_avx2(x, y) },
                _ => {}
            }
            each(x, y)
        });
}

/// erfc(z) for z >= 0 as Numerical Recipes' `erfcc`: t e^(-z^2 + P(t)),
/// t = 1 / (1 + z/2), a Chebyshev fit with a fractional error below
/// 1.2e-7 for every z >= 0 (so no cancellation however small erfc is),
/// through the crate's branch-free `exp`.
#[inline(always)]
fn erfc_of_positive(z: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * z);
    let p = [
        0.170_872_77,
        -0.822_152_23,
        1.488_515_9,
        -1.135_204,
        0.278_868_07,
        -0.186_288_06,
        0.096_784_18,
        0.374_091_96,
        1.000_023_7,
        -1.265_512_2,
    ]
    .iter()
    .fold(0.0f32, |acc, &c| acc * t + c);
    t * crate::epilogue::exp(-z * z + p)
}

/// erf in f32 as `x P(x^2) / Q(x^2)` on [-4, 4] (erf is 1 to f32 beyond),
/// the rational approximation of Eigen's `generic_fast_erf_float`: within
/// a few ulps, and branch-free, so the compiler vectorises the GELU loop,
/// which a libm call per value would not. (Not `mul_add`: without FMA in
/// the build's target features it is a libm call too.)
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = [
        -2.726_142_3e-10,
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906_3e-4,
        -2.954_6e-3,
        -1.609_603_3e-2,
    ]
    .iter()
    .fold(0.0f32, |acc, &a| acc * x2 + a);
    let q = [
        -1.456_607_2e-5,
        -2.133_740_6e-4,
        -1.682_827e-3,
        -7.373_329e-3,
        -1.426_474e-2,
    ]
    .iter()
    .fold(0.0f32, |acc, &b| acc * x2 + b);
    x * p / q
}
