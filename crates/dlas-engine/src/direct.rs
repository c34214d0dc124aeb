//! Direct (sliding-window) convolution, NCHW, no im2col. Dense weights:
//! the input is zero-padded once per run and each task accumulates register
//! blocks of 4 output channels x 16 output columns, reusing every input
//! vector for the 4 channels. Sparse weights: one channel x 16 columns per
//! register block, one input vector per stored weight, so the kernel skips
//! exactly the zeros the format dropped. fp16 dense weights are widened
//! to f32 a register block's rows at a time (see `fp16`).

use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::{has_avx2_fma, madd};
use crate::schedule::DirectSchedule;
use crate::weights::Rows;
use crate::workload::Workload;
use rayon::prelude::*;

#[derive(Debug, Clone)]
pub(crate) struct DirectConv {
    w: Workload,
    s: DirectSchedule,
    rows: Rows,
    /// Height and width of the padded input planes: the padding, plus
    /// columns up to whole XW-column blocks.
    hp: usize,
    wp: usize,
}

/// Sparse register block: output channel `oc` times output columns
/// x0..x0+XW of row `oy`, one padded-input vector per stored tap, with two
/// accumulators so consecutive taps do not wait on each other.
#[inline(always)]
fn sparse_block<const FMA: bool>(
    w: &Workload,
    (row_ptr, offset, value): (&[usize], &[usize], &[f32]),
    oc: usize,
    (oy, x0): (usize, usize),
    padded: &[f32],
    wp: usize,
) -> [f32; XW] {
    let s = w.stride;
    let base = oy * s * wp + x0 * s;
    let taps = row_ptr[oc]..row_ptr[oc + 1];
    let mut acc = [[0.0f32; XW]; 2];
    let mut gathered = [0.0f32; XW];
    for (t, (&off, &v)) in offset[taps.clone()].iter().zip(&value[taps]).enumerate() {
        let xs: &[f32; XW] = if s == 1 {
            padded[base + off..][..XW].try_into().expect("XW wide")
        } else {
            for (j, x) in gathered.iter_mut().enumerate() {
                *x = padded[base + off + j * s];
            }
            &gathered
        };
        for (a, &x) in acc[t % 2].iter_mut().zip(xs) {
            *a = madd::<FMA>(v, x, *a);
        }
    }
    let [mut a, b] = acc;
    for (a, b) in a.iter_mut().zip(b) {
        *a += b;
    }
    a
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn sparse_avx2(
    w: &Workload,
    taps: (&[usize], &[usize], &[f32]),
    oc: usize,
    at: (usize, usize),
    padded: &[f32],
    wp: usize,
) -> [f32; XW] {
    sparse_block::<true>(w, taps, oc, at, padded, wp)
}

/// Output channels per register block of the dense kernel.
const OB: usize = 4;
/// Output columns per register block of the dense kernel.
const XW: usize = 16;

/// Dense register block: `N` output channels from `oc0` (one group), whose
/// weight rows are `d` (`N` x reduction), times output columns x0..x0+XW
/// of row `oy`, from the zero-padded input.
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
                    let wv = d[r * red + q];
                    for (a, &x) in a.iter_mut().zip(xs) {
                        *a = madd::<FMA>(wv, x, *a);
                    }
                }
            }
        }
    }
    acc
}

impl DirectConv {
    /// `half` stores dense weights as f16.
    pub fn new(
        w: Workload,
        s: DirectSchedule,
        weights: &[f32],
        blocks: Option<(usize, usize)>,
        half: bool,
    ) -> Self {
        let hp = w.in_h + 2 * w.padding;
        let wp =
            (w.in_w + 2 * w.padding).max((w.out_w.next_multiple_of(XW) - 1) * w.stride + w.kernel);
        DirectConv {
            w,
            s,
            rows: Rows::new(&w, weights, blocks, (hp, wp), half),
            hp,
            wp,
        }
    }

    /// One NCHW sample. The input is zero-padded once (to whole XW-column
    /// blocks), then each task computes register blocks of its channels and
    /// rows: OB channels x XW columns for dense weights (each input vector
    /// reused by OB channels), one channel x XW columns for sparse ones.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        let w = &self.w;
        let (oh, ow, pix, p) = (w.out_h, w.out_w, w.out_pixels(), w.padding);
        let (hp, wp) = (self.hp, self.wp);
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
        let red = w.reduction();
        crate::awake::for_each(oc_blocks * row_blocks, |t| {
            // The task's widened fp16 rows (unused for f32 weights).
            let mut widened = Vec::new();
            let (ob, rb) = (t / row_blocks, t % row_blocks);
            let rows = rb * row_block..oh.min((rb + 1) * row_block);
            let ocs = ob * self.s.oc_block..w.out_channels.min((ob + 1) * self.s.oc_block);
            let mut oc0 = ocs.start;
            while oc0 < ocs.end {
                // A register block never crosses a group (nor the task's channels).
                let n = match self.rows {
                    Rows::Dense(_) => OB.min(ocs.end - oc0).min(ocg - oc0 % ocg),
                    Rows::Taps { .. } => 1,
                };
                let block_rows = match &self.rows {
                    Rows::Dense(d) => d.get(oc0 * red..(oc0 + n) * red, &mut widened),
                    Rows::Taps { .. } => &[],
                };
                for oy in rows.clone() {
                    for x0 in (0..ow).step_by(XW) {
                        let mut acc = [[0.0f32; XW]; OB];
                        match &self.rows {
                            Rows::Dense(_) => dense_dispatch(
                                avx,
                                n,
                                w,
                                block_rows,
                                oc0,
                                oy,
                                x0,
                                padded,
                                (hp, wp),
                                &mut acc,
                            ),
                            Rows::Taps {
                                row_ptr,
                                offset,
                                value,
                            } => {
                                let taps = (&row_ptr[..], &offset[..], &value[..]);
                                #[cfg(target_arch = "x86_64")]
                                if avx {
                                    // SAFETY: the CPU has AVX2 and FMA.
                                    acc[0] =
                                        unsafe { sparse_avx2(w, taps, oc0, (oy, x0), padded, wp) };
                                } else {
                                    acc[0] =
                                        sparse_block::<false>(w, taps, oc0, (oy, x0), padded, wp);
                                }
                                #[cfg(not(target_arch = "x86_64"))]
                                {
                                    acc[0] =
                                        sparse_block::<false>(w, taps, oc0, (oy, x0), padded, wp);
                                }
                            }
                        }
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

/// Runs the `n`-channel instance of [`dense_block`] (AVX2 where available)
/// on the `n` weight rows `d`.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, F32_TOLERANCE};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Dense f32 and f16 weights (the latter held to the reference of
        /// the rounded weights), every valid blocking, strides, padding,
        /// groups, the residual and every activation.
        #[test]
        fn dense_f32_and_f16_match_reference(
            w in testing::dense_workload(),
            (oc_block, row_block) in (1usize..7, 1usize..5),
            act in testing::activation(),
            residual in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let s = DirectSchedule { oc_block: oc_block.min(w.out_channels_per_group()), row_block };
            let weights = testing::weights(&w, seed);
            for (half, reference) in [(false, weights.clone()), (true, testing::rounded_to_f16(&weights))] {
                let conv = DirectConv::new(w, s, &weights, None, half);
                let e = testing::error(&w, &reference, (act, residual, seed), |x, y, epi, r| {
                    conv.run(x, y, epi, r)
                });
                prop_assert!(e < F32_TOLERANCE, "half {half} {s:?} {w}: error {e}");
            }
        }
    }
}
