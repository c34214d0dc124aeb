//! The int8 direct (sliding-window) convolution, NCHW, dense, the int8
//! form of `crate::direct`: no im2col; each task owns a block of output
//! channels and accumulates register blocks of 4 output channels x 16
//! output columns in i32, reusing every input vector for the 4 channels.
//!
//! The input is read through a [`Window`] (zero point subtracted, channel
//! pairs interleaved, columns split by stride phase), so a tap of 16
//! consecutive output columns is two contiguous AVX2 vectors at every
//! stride, and one `vpmaddwd` against a broadcast weight pair adds the
//! products of two input channels into 8 i32 lanes: the GEMM's arithmetic
//! (`gemm.rs`), with the reduction ordered (channel pair, ky, kx) instead of
//! (channel, ky, kx). Where the CPU has AVX-512 VNNI (with VL), `vpdpwssd`
//! fuses that multiply-add with the accumulation, one instruction instead
//! of two. Accumulation is exact, so the accumulators, and after the
//! shared requantisation the bytes, equal the GEMM's.

use super::window::{Window, pair, unpair};
use crate::epilogue::Int8Finish;
#[cfg(target_arch = "x86_64")]
use crate::isa::has_avx2_fma;
use crate::workload::Workload;
use rayon::prelude::*;

/// Output channels per register block.
const OB: usize = 4;
/// Output columns per register block: two AVX2 vectors of i32.
const XW: usize = 16;
/// Output channels per task (the fp32 direct kernel's untuned `oc_block`).
const TASK_CHANNELS: usize = 8;

#[derive(Debug, Clone)]
pub(super) struct Packed {
    /// Per output channel, its weights as i16 pairs of input channels
    /// (2j, 2j + 1) ordered (j, ky, kx): the operand `vpmaddwd` broadcasts.
    qw: Vec<i32>,
}

impl Packed {
    /// Packs the weights `q(oc, i)` (reduction index `i`) of layer `w`.
    pub fn new(w: &Workload, q: impl Fn(usize, usize) -> i8) -> Packed {
        let (kk, icg) = (w.kernel * w.kernel, w.in_channels_per_group());
        let per_channel = icg.div_ceil(2) * kk;
        let mut qw = vec![0i32; w.out_channels * per_channel];
        for (oc, row) in qw.chunks_exact_mut(per_channel).enumerate() {
            for (t, v) in row.iter_mut().enumerate() {
                let (j, tap) = (t / kk, t % kk);
                let weight = |i: usize| {
                    if i < icg {
                        q(oc, i * kk + tap) as i16
                    } else {
                        0
                    }
                };
                *v = pair(weight(2 * j), weight(2 * j + 1));
            }
        }
        Packed { qw }
    }

    /// One NCHW sample, finished by `finish` one output row at a time.
    pub fn run(&self, w: &Workload, input: &[i8], zp: i16, out: &mut [i8], finish: &Int8Finish) {
        let (oh, ow, pix, ocg) = (w.out_h, w.out_w, w.out_pixels(), w.out_channels_per_group());
        let wide = ow.next_multiple_of(XW);
        let win = Window::new(w, input, zp, (oh, wide));
        let per_channel = win.pairs * w.kernel * w.kernel;
        out.par_chunks_mut(TASK_CHANNELS * pix)
            .enumerate()
            .for_each(|(t, o)| {
                let first = t * TASK_CHANNELS;
                let end = first + o.len() / pix;
                let mut rows = vec![0i32; OB * wide];
                let mut oc0 = first;
                while oc0 < end {
                    // A register block never crosses a group (nor the task).
                    let n = OB.min(end - oc0).min(ocg - oc0 % ocg);
                    let at = Block {
                        weights: &self.qw[oc0 * per_channel..(oc0 + n) * per_channel],
                        plane0: (oc0 / ocg) * win.pairs,
                        k: w.kernel,
                        s: w.stride,
                    };
                    for oy in 0..oh {
                        for x0 in (0..ow).step_by(XW) {
                            at.dispatch(&win, n, oy, x0, &mut rows, wide);
                        }
                        for r in 0..n {
                            let oc = oc0 + r;
                            let dst = &mut o[(oc - first) * pix + oy * ow..][..ow];
                            finish(oc, oc * pix + oy * ow, &rows[r * wide..][..ow], dst);
                        }
                    }
                    oc0 += n;
                }
            });
    }
}

/// `acc + (a.lo * b.lo + a.hi * b.hi)` per i32 lane of i16 pairs: one
/// `vpdpwssd` if `VNNI`, else `vpmaddwd` and `vpaddd` (the same value: a
/// pair's products cannot overflow, the weights being at most 127 in
/// magnitude).
///
/// # Safety
/// The CPU must have AVX2, and AVX-512 F, VL and VNNI if `VNNI`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn madd_acc<const VNNI: bool>(
    acc: std::arch::x86_64::__m256i,
    a: std::arch::x86_64::__m256i,
    b: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: guaranteed by the caller.
    unsafe {
        if VNNI {
            _mm256_dpwssd_epi32(acc, a, b)
        } else {
            _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
        }
    }
}

/// One register block's channels: their packed weights and the window
/// planes of their group.
struct Block<'a> {
    weights: &'a [i32],
    plane0: usize,
    k: usize,
    s: usize,
}

impl Block<'_> {
    /// Accumulates the `n` channels' outputs x0..x0+XW of row `oy` into
    /// `rows` (row r of the block at r * wide).
    fn dispatch(
        &self,
        win: &Window,
        n: usize,
        oy: usize,
        x0: usize,
        rows: &mut [i32],
        wide: usize,
    ) {
        macro_rules! go {
            ($n:literal) => {{
                #[cfg(target_arch = "x86_64")]
                let acc = if super::vnni::available_vl() {
                    // SAFETY: the CPU has AVX-512 F, VL and VNNI.
                    unsafe { self.vnni::<$n>(win, oy, x0) }
                } else if has_avx2_fma() {
                    // SAFETY: the CPU has AVX2.
                    unsafe { self.avx2::<$n>(win, oy, x0) }
                } else {
                    self.portable::<$n>(win, oy, x0)
                };
                #[cfg(not(target_arch = "x86_64"))]
                let acc = self.portable::<$n>(win, oy, x0);
                for (r, a) in acc.iter().enumerate() {
                    rows[r * wide + x0..][..XW].copy_from_slice(a);
                }
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

    /// The block with scalar (auto-vectorisable) i32 arithmetic.
    fn portable<const N: usize>(&self, win: &Window, oy: usize, x0: usize) -> [[i32; XW]; N] {
        let (k, s) = (self.k, self.s);
        let per_channel = win.pairs * k * k;
        let mut acc = [[0i32; XW]; N];
        for j in 0..win.pairs {
            for ky in 0..k {
                for kx in 0..k {
                    let at = win.at(self.plane0 + j, oy * s + ky, x0, kx);
                    let xs = &win.data[at..][..XW];
                    let q = (j * k + ky) * k + kx;
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let (w0, w1) = unpair(self.weights[r * per_channel + q]);
                        for (a, &x) in acc.iter_mut().zip(xs) {
                            let (x0, x1) = unpair(x);
                            *a += w0 * x0 + w1 * x1;
                        }
                    }
                }
            }
        }
        acc
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn avx2<const N: usize>(&self, win: &Window, oy: usize, x0: usize) -> [[i32; XW]; N] {
        // SAFETY: the CPU has AVX2 (this function's features).
        unsafe { self.simd::<N, false>(win, oy, x0) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    fn vnni<const N: usize>(&self, win: &Window, oy: usize, x0: usize) -> [[i32; XW]; N] {
        // SAFETY: the CPU has the instructions (this function's features).
        unsafe { self.simd::<N, true>(win, oy, x0) }
    }

    /// The block with `vpmaddwd` (`vpdpwssd` if `VNNI`, which the caller
    /// must be compiled for): per tap, two loads of 16 input pairs and, per
    /// channel, one broadcast weight pair and two multiply-adds.
    ///
    /// # Safety
    /// The CPU must have AVX2, and AVX-512 F, VL and VNNI if `VNNI`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn simd<const N: usize, const VNNI: bool>(
        &self,
        win: &Window,
        oy: usize,
        x0: usize,
    ) -> [[i32; XW]; N] {
        use std::arch::x86_64::*;
        let (k, s) = (self.k, self.s);
        let per_channel = win.pairs * k * k;
        assert!(self.weights.len() >= N * per_channel);
        // SAFETY: the CPU has AVX2 (the caller's contract).
        let mut acc = [[unsafe { _mm256_setzero_si256() }; 2]; N];
        for j in 0..win.pairs {
            for ky in 0..k {
                for kx in 0..k {
                    let at = win.at(self.plane0 + j, oy * s + ky, x0, kx);
                    let xs = &win.data[at..][..XW];
                    // SAFETY: `xs` holds 16 i32, two vectors.
                    let (b0, b1) = unsafe {
                        let p = xs.as_ptr() as *const __m256i;
                        (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1)))
                    };
                    let q = (j * k + ky) * k + kx;
                    for (r, acc) in acc.iter_mut().enumerate() {
                        // SAFETY (all three): the caller has AVX2, and
                        // AVX-512 F, VL and VNNI if VNNI.
                        unsafe {
                            let wv = _mm256_set1_epi32(self.weights[r * per_channel + q]);
                            acc[0] = madd_acc::<VNNI>(acc[0], wv, b0);
                            acc[1] = madd_acc::<VNNI>(acc[1], wv, b1);
                        }
                    }
                }
            }
        }
        let mut out = [[0i32; XW]; N];
        for (o, acc) in out.iter_mut().zip(&acc) {
            // SAFETY: each row of `out` holds 16 i32, two vectors.
            unsafe {
                let p = o.as_mut_ptr() as *mut __m256i;
                _mm256_storeu_si256(p, acc[0]);
                _mm256_storeu_si256(p.add(1), acc[1]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 block (where the CPU has it) equals the portable one, for
    /// every block size, stride 1 and 2 and odd channel counts: integer
    /// arithmetic has no rounding to hide a difference in.
    #[test]
    fn block_paths_agree() {
        for w in [
            Workload::new(5, 7, 3, 1, 1, 1, 6, 19),
            Workload::new(6, 8, 5, 2, 2, 2, 9, 40),
        ] {
            let input: Vec<i8> = (0..w.in_len())
                .map(|i| (i * 53 % 256) as u8 as i8)
                .collect();
            let packed = Packed::new(&w, |oc, i| ((oc * 31 + i * 17) % 255) as i8 - 127 + 1);
            let wide = w.out_w.next_multiple_of(XW);
            let win = Window::new(&w, &input, 3, (w.out_h, wide));
            let per_channel = win.pairs * w.kernel * w.kernel;
            let ocg = w.out_channels_per_group();
            for oc0 in [0, ocg - 4] {
                let block = Block {
                    weights: &packed.qw[oc0 * per_channel..(oc0 + 4) * per_channel],
                    plane0: (oc0 / ocg) * win.pairs,
                    k: w.kernel,
                    s: w.stride,
                };
                for oy in 0..w.out_h {
                    for x0 in (0..w.out_w).step_by(XW) {
                        let want = block.portable::<4>(&win, oy, x0);
                        assert!(want.iter().flatten().any(|&v| v != 0));
                        #[cfg(target_arch = "x86_64")]
                        if has_avx2_fma() {
                            // SAFETY: the CPU has AVX2.
                            assert_eq!(unsafe { block.avx2::<4>(&win, oy, x0) }, want);
                        }
                        #[cfg(target_arch = "x86_64")]
                        if super::super::vnni::available_vl() {
                            // SAFETY: the CPU has AVX-512 F, VL and VNNI.
                            assert_eq!(unsafe { block.vnni::<4>(&win, oy, x0) }, want);
                        }
                        let mut rows = vec![0i32; OB * wide];
                        block.dispatch(&win, 2, oy, x0, &mut rows, wide);
                        assert_eq!(rows[x0..x0 + XW], want[0]);
                        assert_eq!(rows[wide + x0..wide + x0 + XW], want[1]);
                    }
                }
            }
        }
    }
}
