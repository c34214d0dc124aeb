//! int8 convolution (im2col + integer GEMM, NCHW, dense): int8 weights with
//! per-output-channel symmetric scales, int8 activations with a per-tensor
//! scale and zero point, exact i32 accumulation, and a per-channel
//! requantisation epilogue.
//!
//! Zero points are subtracted while packing the input (to i16), so padding
//! is an exact 0 and the inner loop is a plain i16 x i16 -> i32 product.

use crate::epilogue::{Epilogue, has_avx2_fma};
use crate::gemm::pack_im2col_with;
use crate::workload::Workload;
use dlas_zoo::quant::ActivationQuant;
use rayon::prelude::*;

/// Output columns per register strip and output rows per task step.
const STRIP: usize = 16;
const ROWS: usize = 4;

#[derive(Debug, Clone)]
pub(crate) struct Int8Conv {
    w: Workload,
    /// (out, reduction) quantised weights, rows padded to a multiple of ROWS.
    qw: Vec<i16>,
    /// Per output channel: weight scale x input scale (the real value of one
    /// accumulator unit).
    unit: Vec<f32>,
    input: ActivationQuant,
    output: ActivationQuant,
}

impl Int8Conv {
    /// Quantises `weights` with `scales` (one per output channel).
    pub fn new(
        w: Workload,
        weights: &[f32],
        scales: &[f32],
        input: ActivationQuant,
        output: ActivationQuant,
    ) -> Int8Conv {
        let red = w.reduction();
        let rows = w.out_channels_per_group().next_multiple_of(ROWS) * w.groups;
        let mut qw = vec![0i16; rows * red];
        let ocg = w.out_channels_per_group();
        let padded = ocg.next_multiple_of(ROWS);
        for oc in 0..w.out_channels {
            let (g, r) = (oc / ocg, oc % ocg);
            for q in 0..red {
                let v = (weights[oc * red + q] / scales[oc])
                    .round()
                    .clamp(-127.0, 127.0);
                qw[(g * padded + r) * red + q] = v as i16;
            }
        }
        Int8Conv {
            w,
            qw,
            unit: scales.iter().map(|s| s * input.scale).collect(),
            input,
            output,
        }
    }

    /// One NCHW sample; `residual` is the real-valued shortcut.
    pub fn run(&self, input: &[i8], out: &mut [i8], epi: &Epilogue, residual: Option<&[f32]>) {
        let w = &self.w;
        let (ocg, red, pix) = (w.out_channels_per_group(), w.reduction(), w.out_pixels());
        let padded = ocg.next_multiple_of(ROWS);
        let zp = self.input.zero_point as i16;
        for g in 0..w.groups {
            let b = pack_im2col_with(input, w, g, STRIP, red, |x: i8| x as i16 - zp);
            let rows_out = &mut out[g * ocg * pix..(g + 1) * ocg * pix];
            rows_out
                .par_chunks_mut(ROWS * pix)
                .enumerate()
                .for_each(|(rb, o)| {
                    let a = &self.qw[(g * padded + rb * ROWS) * red..][..ROWS * red];
                    for p in 0..pix.div_ceil(STRIP) {
                        let panel = &b[p * red * STRIP..][..red * STRIP];
                        let acc = strip(a, panel, red);
                        let x0 = p * STRIP;
                        for (r, acc) in acc.iter().enumerate().take(o.len() / pix) {
                            let oc = g * ocg + rb * ROWS + r;
                            for (j, &v) in acc.iter().enumerate().take(pix - x0) {
                                let i = oc * pix + x0 + j;
                                let y = epi.one(
                                    oc,
                                    v as f32 * self.unit[oc],
                                    residual.map_or(0.0, |r| r[i]),
                                );
                                o[r * pix + x0 + j] = self.output.quantize(y);
                            }
                        }
                    }
                });
        }
    }
}

/// ROWS x STRIP i32 accumulators of `a` (ROWS rows of `red`) times a panel.
fn strip(a: &[i16], panel: &[i16], red: usize) -> [[i32; STRIP]; ROWS] {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2.
        return unsafe { strip_avx2(a, panel, red) };
    }
    strip_body(a, panel, red)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn strip_avx2(a: &[i16], panel: &[i16], red: usize) -> [[i32; STRIP]; ROWS] {
    strip_body(a, panel, red)
}

#[inline(always)]
fn strip_body(a: &[i16], panel: &[i16], red: usize) -> [[i32; STRIP]; ROWS] {
    let mut acc = [[0i32; STRIP]; ROWS];
    for q in 0..red {
        let b: &[i16; STRIP] = panel[q * STRIP..][..STRIP].try_into().expect("STRIP wide");
        for (r, acc) in acc.iter_mut().enumerate() {
            let av = a[r * red + q] as i32;
            for (x, &bv) in acc.iter_mut().zip(b) {
                *x += av * bv as i32;
            }
        }
    }
    acc
}
