//! The int8 depthwise kernel: one 2-D stencil per channel, in i32.
//!
//! Each channel's input is copied once into a zero-padded plane with the
//! zero point subtracted (so padding contributes an exact 0), split into
//! `stride x stride` phase planes (rows and columns modulo the stride). In
//! a phase plane, tap (ky, kx) of every output is one shifted read, so with
//! outputs laid out at the plane's width (the extra columns are computed and
//! dropped) each tap is a single multiply-add of one weight over the whole
//! channel: one long loop the compiler vectorises, where per-row loops over
//! MobileNet's 7- and 14-pixel rows were mostly loop overhead.

use crate::epilogue::Int8Finish;
#[cfg(target_arch = "x86_64")]
use crate::isa::has_avx2_fma;
use crate::workload::Workload;
use rayon::prelude::*;

#[derive(Debug, Clone)]
pub(super) struct Packed {
    /// Channel-major k x k weights.
    qw: Vec<i32>,
}

impl Packed {
    /// The weights `q(c, i)` (tap `i = ky * k + kx`) of depthwise layer `w`.
    pub fn new(w: &Workload, q: impl Fn(usize, usize) -> i8) -> Packed {
        let kk = w.kernel * w.kernel;
        Packed {
            qw: (0..w.out_channels * kk)
                .map(|i| q(i / kk, i % kk) as i32)
                .collect(),
        }
    }

    /// One NCHW sample, finished by `finish`.
    pub fn run(&self, w: &Workload, input: &[i8], zp: i16, out: &mut [i8], finish: &Int8Finish) {
        let (ih, iw, oh) = (w.in_h, w.in_w, w.out_h);
        let (phr, pws) = phase_shape(w);
        let s = w.stride;
        out.par_chunks_mut(oh * w.out_w).enumerate().for_each_init(
            // Padding cells are never written, so they stay 0 from channel
            // to channel; one spare row lets the last taps read past the
            // end of their plane into cells whose outputs are dropped.
            || (vec![0i32; (s * s * phr + 1) * pws], vec![0i32; oh * pws]),
            |(planes, acc), (c, o)| {
                let mut job = Channel {
                    w,
                    c,
                    x: &input[c * ih * iw..][..ih * iw],
                    zp: zp as i32,
                    weights: &self.qw[c * w.kernel * w.kernel..][..w.kernel * w.kernel],
                    planes,
                    acc,
                };
                #[cfg(target_arch = "x86_64")]
                if has_avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA.
                    return unsafe { job.run_avx2(o, finish) };
                }
                job.run(o, finish)
            },
        );
    }
}

/// Rows and columns of one phase plane: the padded input's rows (columns)
/// `phase, phase + stride, ...`.
fn phase_shape(w: &Workload) -> (usize, usize) {
    let (ph, pw) = (w.in_h + 2 * w.padding, w.in_w + 2 * w.padding);
    (ph.div_ceil(w.stride), pw.div_ceil(w.stride))
}

/// One channel's stencil: its input and weights, with its thread's scratch.
struct Channel<'a> {
    w: &'a Workload,
    c: usize,
    x: &'a [i8],
    zp: i32,
    weights: &'a [i32],
    planes: &'a mut [i32],
    acc: &'a mut [i32],
}

impl Channel<'_> {
    #[inline(always)]
    fn run(&mut self, o: &mut [i8], finish: &Int8Finish) {
        let (w, c, x, wc) = (self.w, self.c, self.x, self.weights);
        let (k, s, p) = (w.kernel, w.stride, w.padding);
        let (iw, oh, ow) = (w.in_w, w.out_h, w.out_w);
        let (phr, pws) = phase_shape(w);
        // The plane of row phase `ry` and column phase `rx`.
        let plane = |ry: usize, rx: usize| (rx * s + ry) * phr * pws;
        for (y, row) in x.chunks_exact(iw).enumerate() {
            let (ry, py) = ((y + p) % s, (y + p) / s);
            if s == 1 {
                let dst = &mut self.planes[py * pws + p..][..iw];
                for (d, &v) in dst.iter_mut().zip(row) {
                    *d = v as i32 - self.zp;
                }
            } else {
                // Column `xx + p` goes to phase (xx + p) % s at (xx + p) / s.
                let (mut rx, mut at) = (p % s, p / s);
                for &v in row {
                    self.planes[plane(ry, rx) + py * pws + at] = v as i32 - self.zp;
                    rx += 1;
                    if rx == s {
                        rx = 0;
                        at += 1;
                    }
                }
            }
        }
        self.acc.fill(0);
        for ky in 0..k {
            for kx in 0..k {
                let base = plane(ky % s, kx % s) + (ky / s) * pws + kx / s;
                let src = &self.planes[base..][..oh * pws];
                let wv = wc[ky * k + kx];
                for (a, &v) in self.acc.iter_mut().zip(src) {
                    *a += wv * v;
                }
            }
        }
        for oy in 0..oh {
            let i0 = (c * oh + oy) * ow;
            finish(c, i0, &self.acc[oy * pws..][..ow], &mut o[oy * ow..][..ow]);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn run_avx2(&mut self, o: &mut [i8], finish: &Int8Finish) {
        self.run(o, finish)
    }
}
