//! Depthwise convolution (one input and one output channel per group),
//! NCHW, dense weights: a stack of 2-D stencils, so the kernel slides each
//! channel's k x k taps over its own plane, vectorised along output columns
//! (four vectors at a time, masked at the row's end). Every algorithm runs
//! depthwise layers with it: im2col would build a one-row GEMM per channel
//! and spatial pack would fill one lane of each vector (TVM and XNNPACK
//! special-case them the same way).
//!
//! Each task copies the input rows it needs into a zero-padded buffer, split
//! by column phase for strides above 1 (phase r holds padded columns r,
//! r + s, r + 2s, ...), so every tap reads contiguous vectors whatever the
//! stride; the epilogue runs on each output row while it is in L1.

use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::Isa;
use crate::schedule::DirectSchedule;
use crate::workload::Workload;
use rayon::prelude::*;
use std::cell::RefCell;

#[derive(Debug, Clone)]
pub(crate) struct DepthwiseConv {
    w: Workload,
    s: DirectSchedule,
    /// k * k taps per channel.
    weights: Vec<f32>,
    isa: Isa,
}

/// A task's padded, phase-split input rows, kept by each pool thread. The
/// copy writes the same positions for every channel of a layer, so the
/// padding is zeroed only when the geometry changes.
#[derive(Default)]
struct Rows {
    buf: Vec<f32>,
    /// The layer and output rows the buffer's zeros were laid out for.
    geometry: Option<(Workload, usize, usize)>,
}

thread_local! {
    static ROWS: RefCell<Rows> = RefCell::default();
}

impl DepthwiseConv {
    /// `weights` is (channels, 1, k, k); tasks are `s.oc_block` channels by
    /// `s.row_block` output rows.
    pub fn new(w: Workload, s: DirectSchedule, weights: &[f32], isa: Isa) -> DepthwiseConv {
        debug_assert!(w.in_channels_per_group() == 1 && w.out_channels_per_group() == 1);
        DepthwiseConv {
            w,
            s,
            weights: weights.to_vec(),
            isa,
        }
    }

    /// Width of one phase row: the columns every tap of a row reads.
    fn phase_width(&self) -> usize {
        let w = &self.w;
        w.out_w + (w.kernel - 1) / w.stride
    }

    /// One NCHW sample.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        let w = &self.w;
        let (oh, ow, pix) = (w.out_h, w.out_w, w.out_pixels());
        let row_block = self.s.row_block.min(oh);
        let row_blocks = oh.div_ceil(row_block);
        let oc_blocks = w.out_channels.div_ceil(self.s.oc_block);
        let c = SyncPtr::new(out);
        (0..oc_blocks * row_blocks).into_par_iter().for_each(|t| {
            let (ob, rb) = (t / row_blocks, t % row_blocks);
            let rows = rb * row_block..oh.min((rb + 1) * row_block);
            let chans = ob * self.s.oc_block..w.out_channels.min((ob + 1) * self.s.oc_block);
            ROWS.with_borrow_mut(|buf| {
                let nrows = (rows.len() - 1) * w.stride + w.kernel;
                let taps = self.tap_offsets(nrows);
                for ch in chans {
                    let plane = &input[ch * w.in_h * w.in_w..][..w.in_h * w.in_w];
                    self.fill(plane, rows.start, rows.len(), buf);
                    for oy in rows.clone() {
                        let off = ch * pix + oy * ow;
                        // SAFETY: task t alone writes channels `chans` of rows `rows`.
                        let o = unsafe { c.slice(off, ow) };
                        let res = residual.map(|r| &r[off..off + ow]);
                        let shift = (oy - rows.start) * w.stride * self.phase_width();
                        self.row(&buf.buf, (&taps, shift), ch, o, epi, res);
                    }
                }
            })
        });
    }

    /// Where each tap's input row starts in a buffer of `nrows` rows per
    /// phase, for the buffer's first output row (a later row `l` is
    /// `l * stride` buffer rows further).
    fn tap_offsets(&self, nrows: usize) -> TapOffsets {
        let (k, s, pw) = (self.w.kernel, self.w.stride, self.phase_width());
        let mut offsets = [0usize; MAX_TAPS];
        for (t, off) in offsets[..k * k].iter_mut().enumerate() {
            let (ky, kx) = (t / k, t % k);
            *off = ((kx % s) * nrows + ky) * pw + kx / s;
        }
        offsets
    }

    /// Copies the padded input rows under output rows first..first+count
    /// of one channel's `plane` into `rows`, phase by phase; returns the
    /// rows per phase.
    fn fill(&self, plane: &[f32], first: usize, count: usize, rows: &mut Rows) {
        let w = &self.w;
        let (s, p, iw) = (w.stride, w.padding, w.in_w);
        let pw = self.phase_width();
        let nrows = (count - 1) * s + w.kernel;
        let geometry = Some((*w, first, count));
        if rows.geometry != geometry {
            rows.buf.clear();
            rows.buf.resize(s * nrows * pw, 0.0);
            rows.geometry = geometry;
        }
        let buf = &mut rows.buf;
        for yy in 0..nrows {
            // Padded row first * s + yy is input row iy.
            let Some(iy) = (first * s + yy).checked_sub(p).filter(|&iy| iy < w.in_h) else {
                continue;
            };
            let src = &plane[iy * iw..][..iw];
            if s == 1 {
                buf[yy * pw + p..][..iw].copy_from_slice(src);
                continue;
            }
            for r in 0..s {
                // Phase r, column j is padded column j * s + r, input column
                // j * s + r - p: j from ceil((p - r) / s) while inside the row.
                let j0 = p.saturating_sub(r).div_ceil(s);
                let dst = &mut buf[(r * nrows + yy) * pw..][..pw];
                let x0 = j0 * s + r - p;
                for (d, &v) in dst[j0..].iter_mut().zip(src[x0..].iter().step_by(s)) {
                    *d = v;
                }
            }
        }
    }

    /// One output row of channel `ch`, its taps at `offsets` plus `shift`
    /// in `buf`, finished by `epi` (with the residual row `res`) into `o`.
    fn row(
        &self,
        buf: &[f32],
        (offsets, shift): (&TapOffsets, usize),
        ch: usize,
        o: &mut [f32],
        epi: &Epilogue,
        res: Option<&[f32]>,
    ) {
        let kk = self.w.kernel * self.w.kernel;
        let taps = &self.weights[ch * kk..][..kk];
        let furthest = offsets[..kk].iter().max().expect("a tap");
        assert!(
            furthest + shift + o.len() <= buf.len(),
            "the buffer covers every tap of the row"
        );
        let row = Row {
            buf: &buf[shift..],
            taps,
            offsets: &offsets[..kk],
        };
        let clamp = epi.act.clamp();
        let fused = clamp.map(|clamp| (epi.bias[ch], clamp));
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512F (`isa` never exceeds Isa::detect());
            // every tap reads buf[offset..offset + o.len()] (asserted above).
            Isa::Avx512 => unsafe { row_avx512(row, o, fused, res) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 and FMA; bounds as above.
            Isa::Avx2 => unsafe { row_avx2(row, o, fused, res) },
            _ => row_portable(row, o),
        }
        if fused.is_none() || self.isa == Isa::Portable {
            epi.channel(ch, o, res);
        }
    }
}

/// Most taps the depthwise kernel takes (7x7); larger kernels run direct.
pub(crate) const MAX_TAPS: usize = 49;

/// Offsets of a row's taps in the phase buffer.
type TapOffsets = [usize; MAX_TAPS];

/// One output row's inputs: the buffer, the channel's taps and where each
/// tap's input row starts.
#[derive(Clone, Copy)]
struct Row<'a> {
    buf: &'a [f32],
    taps: &'a [f32],
    offsets: &'a [usize],
}

/// Bias and clamp of an epilogue applied in registers.
type Fused = Option<(f32, Option<(f32, f32)>)>;

fn row_portable(r: Row<'_>, o: &mut [f32]) {
    o.fill(0.0);
    for (&wv, &off) in r.taps.iter().zip(r.offsets) {
        for (a, &x) in o.iter_mut().zip(&r.buf[off..]) {
            *a += wv * x;
        }
    }
}

/// Four vectors of output columns at a time (four independent FMA chains),
/// the last ones masked.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn row_avx512(r: Row<'_>, o: &mut [f32], fused: Fused, res: Option<&[f32]>) {
    use std::arch::x86_64::*;
    const L: usize = 16;
    let n = o.len();
    let mask = |x: usize| ((1u32 << n.saturating_sub(x).min(L)) - 1) as __mmask16;
    for x0 in (0..n).step_by(4 * L) {
        let m: [__mmask16; 4] = std::array::from_fn(|v| mask(x0 + v * L));
        let mut acc = [_mm512_setzero_ps(); 4];
        for (&wv, &off) in r.taps.iter().zip(r.offsets) {
            let wv = _mm512_set1_ps(wv);
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: masked to the row's columns, inside the buffer (see `row`).
                let x = unsafe { _mm512_maskz_loadu_ps(m[v], r.buf.as_ptr().add(off + x0 + v * L)) };
                *a = _mm512_fmadd_ps(wv, x, *a);
            }
        }
        for (v, mut a) in acc.into_iter().enumerate() {
            let at = x0 + v * L;
            if let Some((bias, clamp)) = fused {
                a = _mm512_add_ps(a, _mm512_set1_ps(bias));
                if let Some(res) = res {
                    // SAFETY: masked to the row, which `res` holds.
                    a = _mm512_add_ps(a, unsafe { _mm512_maskz_loadu_ps(m[v], res.as_ptr().add(at)) });
                }
                if let Some((lo, hi)) = clamp {
                    a = _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), a));
                }
            }
            // SAFETY: masked to the row `o`.
            unsafe { _mm512_mask_storeu_ps(o.as_mut_ptr().add(at), m[v], a) };
        }
    }
}

/// As [`row_avx512`] with AVX2 vectors (vmaskmovps for the partial ones).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2(r: Row<'_>, o: &mut [f32], fused: Fused, res: Option<&[f32]>) {
    use std::arch::x86_64::*;
    const L: usize = 8;
    let n = o.len();
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mask = |x: usize| _mm256_cmpgt_epi32(_mm256_set1_epi32(n.saturating_sub(x).min(L) as i32), lane);
    for x0 in (0..n).step_by(4 * L) {
        let m: [__m256i; 4] = std::array::from_fn(|v| mask(x0 + v * L));
        let mut acc = [_mm256_setzero_ps(); 4];
        for (&wv, &off) in r.taps.iter().zip(r.offsets) {
            let wv = _mm256_set1_ps(wv);
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: masked to the row's columns, inside the buffer (see `row`).
                let x = unsafe { _mm256_maskload_ps(r.buf.as_ptr().add(off + x0 + v * L), m[v]) };
                *a = _mm256_fmadd_ps(wv, x, *a);
            }
        }
        for (v, mut a) in acc.into_iter().enumerate() {
            let at = x0 + v * L;
            if let Some((bias, clamp)) = fused {
                a = _mm256_add_ps(a, _mm256_set1_ps(bias));
                if let Some(res) = res {
                    // SAFETY: masked to the row, which `res` holds.
                    a = _mm256_add_ps(a, unsafe { _mm256_maskload_ps(res.as_ptr().add(at), m[v]) });
                }
                if let Some((lo, hi)) = clamp {
                    a = _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), a));
                }
            }
            // SAFETY: masked to the row `o`.
            unsafe { _mm256_maskstore_ps(o.as_mut_ptr().add(at), m[v], a) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, F32_TOLERANCE};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every instruction set the CPU has, every row blocking, fused
        /// and unfused epilogues.
        #[test]
        fn every_isa_matches_reference(
            w in testing::depthwise_workload(),
            row_block in 1usize..5,
            act in testing::activation(),
            residual in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let weights = testing::weights(&w, seed);
            let s = DirectSchedule { oc_block: 1, row_block };
            for isa in Isa::available() {
                let conv = DepthwiseConv::new(w, s, &weights, isa);
                let e = testing::error(&w, &weights, (act, residual, seed), |x, y, epi, r| {
                    conv.run(x, y, epi, r)
                });
                prop_assert!(e < F32_TOLERANCE, "{isa:?} {w}: error {e}");
            }
        }
    }
}
