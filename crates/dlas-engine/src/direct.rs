//! Direct (sliding-window) convolution, NCHW: each stored weight scales a
//! shifted window of one input plane into an output plane. The sparse
//! variant is the same loop over fewer weights, so it skips exactly the
//! zeros the format dropped.

use crate::epilogue::{Epilogue, SyncPtr, has_avx2_fma, madd};
use crate::schedule::DirectSchedule;
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

/// Output rows `rows` of channel `oc` into `out` (those rows only). Plain
/// loops rather than closures, so everything inlines into the AVX2 copy.
#[inline(always)]
fn body<const FMA: bool>(
    w: &Workload,
    weights: &Rows,
    oc: usize,
    rows: Range<usize>,
    input: &[f32],
    out: &mut [f32],
) {
    let ocg = w.out_channels_per_group();
    let g = oc / ocg;
    out.fill(0.0);
    match weights {
        Rows::Dense(d) => {
            let red = w.reduction();
            // Dense weights are all computed, zeros included: skipping
            // zeros is the sparse formats' job, and what they are measured by.
            for (q, &v) in d[oc * red..(oc + 1) * red].iter().enumerate() {
                tap::<FMA>(w, g, q, v, &rows, input, out);
            }
        }
        Rows::Sparse(m) => {
            let m = &m[g];
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
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn body_avx2(
    w: &Workload,
    weights: &Rows,
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
                    unsafe { body_avx2(w, &self.rows, oc, rows.clone(), input, o) };
                } else {
                    body::<false>(w, &self.rows, oc, rows.clone(), input, o);
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    let _ = avx;
                    body::<false>(w, &self.rows, oc, rows.clone(), input, o);
                }
                epi.channel(oc, o, residual.map(|r| &r[off..off + o.len()]));
            }
        });
    }
}
