//! Direct (sliding-window) convolution, NCHW, no im2col. Dense weights:
//! the input is zero-padded once per run and each task accumulates register
//! blocks of 4 output channels x 16 output columns, reusing every input
//! vector for the 4 channels. Sparse weights: each stored weight scales a
//! shifted window of one input plane into an output plane, so the kernel
//! skips exactly the zeros the format dropped.

use crate::epilogue::{Epilogue, SyncPtr, has_avx2_fma, madd};
use crate::schedule::DirectSchedule;
use crate::sparse::BlockSparse;
use crate::weights::Rows;
use crate::workload::Workload;
use rayon::prelude::*;
use std::ops::Range;

#[derive(Debug, Clone)]
pub(crate) struct DirectConv {
    w: Workload,
    s: DirectSchedule,
    rows: Rows,
}

/// Adds weight `v` at reduction index `q` times the shifted input window
/// to output rows `rows` (stored from `out[0]`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tap<const FMA: bool>(
    w: &Workload,
    g: usize,
    q: usize,
    v: f32,
    rows: &Range<usize>,
    input: &[f32],
    out: &mut [f32],
) {
    let (k, s, p) = (w.kernel, w.stride, w.padding);
    let (ih, iw, ow) = (w.in_h, w.in_w, w.out_w);
    let (ic, ky, kx) = (
        g * w.in_channels_per_group() + q / (k * k),
        q % (k * k) / k,
        q % k,
    );
    let plane = &input[ic * ih * iw..(ic + 1) * ih * iw];
    // Output columns whose input column ox * s + kx - p lies inside the row.
    let x0 = p.saturating_sub(kx).div_ceil(s);
    let x1 = if iw + p > kx {
        ow.min((iw + p - kx - 1) / s + 1)
    } else {
        0
    };
    if x0 >= x1 {
        return;
    }
    for oy in rows.clone() {
        let iy = oy * s + ky;
        if iy < p || iy - p >= ih {
            continue;
        }
        let irow = &plane[(iy - p) * iw..(iy - p + 1) * iw];
        let orow = &mut out[(oy - rows.start) * ow..][x0..x1];
        if s == 1 {
            let src = &irow[x0 + kx - p..x1 + kx - p];
            for (o, &x) in orow.iter_mut().zip(src) {
                *o = madd::<FMA>(v, x, *o);
            }
        } else {
            for (i, o) in orow.iter_mut().enumerate() {
                *o = madd::<FMA>(v, irow[(x0 + i) * s + kx - p], *o);
            }
        }
    }
}

/// Output rows `rows` of channel `oc` into `out` (those rows only), from
/// block-sparse weights: one shifted-window axpy per stored weight. Plain
/// loops rather than closures, so everything inlines into the AVX2 copy.
#[inline(always)]
fn body<const FMA: bool>(
    w: &Workload,
    mats: &[BlockSparse],
    oc: usize,
    rows: Range<usize>,
    input: &[f32],
    out: &mut [f32],
) {
    let ocg = w.out_channels_per_group();
    let g = oc / ocg;
    out.fill(0.0);
    let m = &mats[g];
    let (br, rr) = ((oc % ocg) / m.r, (oc % ocg) % m.r);
    for b in m.row_ptr[br]..m.row_ptr[br + 1] {
        let k0 = m.block_cols[b];
        let vals = &m.values[(b * m.r + rr) * m.c..][..m.c];
        for (cc, &v) in vals.iter().enumerate().take(m.cols - k0) {
            if v != 0.0 {
                tap::<FMA>(w, g, k0 + cc, v, &rows, input, out);
            }
        }
    }
}

/// Output channels per register block of the dense kernel.
const OB: usize = 4;
/// Output columns per register block of the dense kernel.
const XW: usize = 16;

/// Dense register block: `N` output channels from `oc0` (one group) times
/// output columns x0..x0+XW of row `oy`, from the zero-padded input.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn dense_block<const N: usize, const FMA: bool>(
    w: &Workload,
    d: &[f32],
    oc0: usize,
    oy: usize,
    x0: usize,
    padded: &[f32],
    (hp, wp): (usize, usize),
) -> [[f32; XW]; N] {
    let (k, s, icg, red) = (w.kernel, w.stride, w.in_channels_per_group(), w.reduction());
    let g = oc0 / w.out_channels_per_group();
    let mut acc = [[0.0f32; XW]; N];
    let mut gathered = [0.0f32; XW];
    for i in 0..icg {
        let plane = &padded[(g * icg + i) * hp * wp..][..hp * wp];
        for ky in 0..k {
            let row = &plane[(oy * s + ky) * wp..][..wp];
            for kx in 0..k {
                let xs: &[f32; XW] = if s == 1 {
                    row[x0 + kx..][..XW].try_into().expect("XW wide")
                } else {
                    for (j, v) in gathered.iter_mut().enumerate() {
                        *v = row[(x0 + j) * s + kx];
                    }
                    &gathered
                };
                let q = (i * k + ky) * k + kx;
                for (r, a) in acc.iter_mut().enumerate() {
                    let wv = d[(oc0 + r) * red + q];
                    for (a, &x) in a.iter_mut().zip(xs) {
                        *a = madd::<FMA>(wv, x, *a);
                    }
                }
            }
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn body_avx2(
    w: &Workload,
    weights: &[BlockSparse],
    oc: usize,
    rows: Range<usize>,
    input: &[f32],
    out: &mut [f32],
) {
    body::<true>(w, weights, oc, rows, input, out)
}

impl DirectConv {
    pub fn new(
        w: Workload,
        s: DirectSchedule,
        weights: &[f32],
        blocks: Option<(usize, usize)>,
    ) -> Self {
        DirectConv {
            w,
            s,
            rows: Rows::new(&w, weights, blocks),
        }
    }

    /// One NCHW sample.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        let mats = match &self.rows {
            Rows::Dense(d) => return self.run_dense(d, input, out, epi, residual),
            Rows::Sparse(m) => m,
        };
        let w = &self.w;
        let (oh, ow, pix) = (w.out_h, w.out_w, w.out_pixels());
        let row_block = self.s.row_block.min(oh);
        let row_blocks = oh.div_ceil(row_block);
        let oc_blocks = w.out_channels.div_ceil(self.s.oc_block);
        let avx = has_avx2_fma();
        let c = SyncPtr::new(out);
        (0..oc_blocks * row_blocks).into_par_iter().for_each(|t| {
            let (ob, rb) = (t / row_blocks, t % row_blocks);
            let rows = rb * row_block..oh.min((rb + 1) * row_block);
            for oc in ob * self.s.oc_block..w.out_channels.min((ob + 1) * self.s.oc_block) {
                let off = oc * pix + rows.start * ow;
                // SAFETY: task t alone writes these rows of channel oc.
                let o = unsafe { c.slice(off, rows.len() * ow) };
                #[cfg(target_arch = "x86_64")]
                if avx {
                    // SAFETY: the CPU has AVX2 and FMA.
                    unsafe { body_avx2(w, mats, oc, rows.clone(), input, o) };
                } else {
                    body::<false>(w, mats, oc, rows.clone(), input, o);
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    let _ = avx;
                    body::<false>(w, mats, oc, rows.clone(), input, o);
                }
                epi.channel(oc, o, residual.map(|r| &r[off..off + o.len()]));
            }
        });
    }

    /// Dense weights: the input is zero-padded once (to whole XW-column
    /// blocks), then each task computes OB-channel x XW-column register
    /// blocks of its rows, each input vector reused by OB channels.
    fn run_dense(
        &self,
        d: &[f32],
        input: &[f32],
        out: &mut [f32],
        epi: &Epilogue,
        residual: Option<&[f32]>,
    ) {
        let w = &self.w;
        let (oh, ow, pix, p, s) = (w.out_h, w.out_w, w.out_pixels(), w.padding, w.stride);
        let hp = w.in_h + 2 * p;
        let wp = (w.in_w + 2 * p).max((ow.next_multiple_of(XW) - 1) * s + w.kernel);
        let mut padded = vec![0.0f32; w.in_channels * hp * wp];
        padded
            .par_chunks_mut(hp * wp)
            .zip(input.par_chunks(w.in_h * w.in_w))
            .for_each(|(dst, src)| {
                for (y, row) in src.chunks(w.in_w).enumerate() {
                    dst[(y + p) * wp + p..][..w.in_w].copy_from_slice(row);
                }
            });
        let ocg = w.out_channels_per_group();
        let row_block = self.s.row_block.min(oh);
        let row_blocks = oh.div_ceil(row_block);
        let oc_blocks = w.out_channels.div_ceil(self.s.oc_block);
        let avx = has_avx2_fma();
        let c = SyncPtr::new(out);
        let padded = &padded;
        (0..oc_blocks * row_blocks).into_par_iter().for_each(|t| {
            let (ob, rb) = (t / row_blocks, t % row_blocks);
            let rows = rb * row_block..oh.min((rb + 1) * row_block);
            let ocs = ob * self.s.oc_block..w.out_channels.min((ob + 1) * self.s.oc_block);
            let mut oc0 = ocs.start;
            while oc0 < ocs.end {
                // A register block never crosses a group (nor the task's channels).
                let n = OB.min(ocs.end - oc0).min(ocg - oc0 % ocg);
                for oy in rows.clone() {
                    for x0 in (0..ow).step_by(XW) {
                        let mut acc = [[0.0f32; XW]; OB];
                        dense_dispatch(avx, n, w, d, oc0, oy, x0, padded, (hp, wp), &mut acc);
                        for (r, a) in acc.iter().enumerate().take(n) {
                            let oc = oc0 + r;
                            let off = oc * pix + oy * ow + x0;
                            let len = XW.min(ow - x0);
                            // SAFETY: task t alone writes channels `ocs` of rows `rows`.
                            let o = unsafe { c.slice(off, len) };
                            o.copy_from_slice(&a[..len]);
                            epi.channel(oc, o, residual.map(|x| &x[off..off + len]));
                        }
                    }
                }
                oc0 += n;
            }
        });
    }
}

/// Runs the `n`-channel instance of [`dense_block`] (AVX2 where available).
#[allow(clippy::too_many_arguments)]
fn dense_dispatch(
    avx: bool,
    n: usize,
    w: &Workload,
    d: &[f32],
    oc0: usize,
    oy: usize,
    x0: usize,
    padded: &[f32],
    hw: (usize, usize),
    acc: &mut [[f32; XW]; OB],
) {
    macro_rules! go {
        ($n:literal) => {{
            #[cfg(target_arch = "x86_64")]
            let a = if avx {
                // SAFETY: the CPU has AVX2 and FMA.
                unsafe { dense_avx2::<$n>(w, d, oc0, oy, x0, padded, hw) }
            } else {
                dense_block::<$n, false>(w, d, oc0, oy, x0, padded, hw)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let a = {
                let _ = avx;
                dense_block::<$n, false>(w, d, oc0, oy, x0, padded, hw)
            };
            acc[..$n].copy_from_slice(&a);
        }};
    }
    match n {
        1 => go!(1),
        2 => go!(2),
        3 => go!(3),
        4 => go!(4),
        _ => unreachable!("register blocks hold 1..=OB channels"),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn dense_avx2<const N: usize>(
    w: &Workload,
    d: &[f32],
    oc0: usize,
    oy: usize,
    x0: usize,
    padded: &[f32],
    hw: (usize, usize),
) -> [[f32; XW]; N] {
    dense_block::<N, true>(w, d, oc0, oy, x0, padded, hw)
}
