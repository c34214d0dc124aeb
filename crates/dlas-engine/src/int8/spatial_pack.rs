//! The int8 spatial pack, NCHW, dense, the int8 form of
//! `crate::spatial_pack`: weights packed at load as [group][oc block]
//! [channel pair][ky][kx][8 output channels], and each task accumulates, for
//! one block of 8 output channels (one AVX2 vector of i32 lanes), output
//! tiles of up to 2 x 4 pixels in registers.
//!
//! Per tap, the block's weight pairs are one vector load and each pixel of
//! the tile one broadcast of its input pair from the [`Window`] (zero point
//! subtracted, channel pairs interleaved), multiplied with `vpmaddwd`: the
//! GEMM's arithmetic (`gemm.rs`) with the roles of weights and inputs
//! swapped (`vpdpwssd`, the multiply-add fused with the accumulation,
//! where the CPU has AVX-512 VNNI with VL). Accumulation is exact, so the
//! accumulators, and after the
//! shared requantisation the bytes, equal the GEMM's. A task keeps its
//! block's accumulators for the whole output and finishes each channel's
//! plane in one call.

use super::window::{Window, pair, unpair};
use crate::epilogue::Int8Finish;
#[cfg(target_arch = "x86_64")]
use crate::isa::has_avx2_fma;
use crate::workload::Workload;
use rayon::prelude::*;

/// Output channels per block: the lanes of one AVX2 vector of i32.
const VC: usize = 8;
/// The output tile (the fp32 spatial pack's untuned one): up to 8
/// accumulators, of AVX2's 16 registers.
const VH: usize = 2;
const VW: usize = 4;

#[derive(Debug, Clone)]
pub(super) struct Packed {
    /// [group][oc block][pair][ky][kx][VC] weight pairs (zero in lanes
    /// past the group's last channel).
    qw: Vec<i32>,
}

/// One task's block: its weights and where its tiles read.
struct Block<'a> {
    weights: &'a [i32],
    plane0: usize,
    k: usize,
    s: usize,
}

impl Packed {
    /// Packs the weights `q(oc, i)` (reduction index `i`) of layer `w`.
    pub fn new(w: &Workload, q: impl Fn(usize, usize) -> i8) -> Packed {
        let (kk, icg, ocg) = (
            w.kernel * w.kernel,
            w.in_channels_per_group(),
            w.out_channels_per_group(),
        );
        let per_block = icg.div_ceil(2) * kk * VC;
        let blocks = ocg.div_ceil(VC);
        let mut qw = vec![0i32; w.groups * blocks * per_block];
        for (gb, block) in qw.chunks_exact_mut(per_block).enumerate() {
            let (g, ob) = (gb / blocks, gb % blocks);
            for (t, v) in block.iter_mut().enumerate() {
                let (j, tap, lane) = (t / (kk * VC), t / VC % kk, t % VC);
                let o = ob * VC + lane;
                if o >= ocg {
                    continue;
                }
                let weight = |i: usize| {
                    if i < icg {
                        q(g * ocg + o, i * kk + tap) as i16
                    } else {
                        0
                    }
                };
                *v = pair(weight(2 * j), weight(2 * j + 1));
            }
        }
        Packed { qw }
    }

    /// One NCHW sample, finished by `finish` one channel plane at a time.
    pub fn run(&self, w: &Workload, input: &[i8], zp: i16, out: &mut [i8], finish: &Int8Finish) {
        let (ocg, pix, ow) = (w.out_channels_per_group(), w.out_pixels(), w.out_w);
        let (vh, vw) = (VH.min(w.out_h), VW.min(ow));
        let (ty, tx) = (w.out_h.div_ceil(vh), ow.div_ceil(vw));
        let win = Window::new(w, input, zp, (ty * vh, tx * vw));
        let blocks = ocg.div_ceil(VC);
        let per_block = win.pairs * w.kernel * w.kernel * VC;
        out.par_chunks_mut(ocg * pix)
            .enumerate()
            .for_each(|(g, og)| {
                og.par_chunks_mut(VC * pix).enumerate().for_each(|(ob, o)| {
                    let gb = g * blocks + ob;
                    let block = Block {
                        weights: &self.qw[gb * per_block..][..per_block],
                        plane0: g * win.pairs,
                        k: w.kernel,
                        s: w.stride,
                    };
                    let lanes = o.len() / pix;
                    let mut planes = vec![0i32; lanes * pix];
                    for y in 0..ty {
                        for x in 0..tx {
                            let (oy0, ox0) = (y * vh, x * vw);
                            let acc = block.dispatch(&win, (vh, vw), (oy0, ox0));
                            for (i, a) in acc.iter().enumerate().take(vh * vw) {
                                let (oy, ox) = (oy0 + i / vw, ox0 + i % vw);
                                if oy >= w.out_h || ox >= ow {
                                    continue;
                                }
                                for (lane, &v) in a.iter().enumerate().take(lanes) {
                                    planes[lane * pix + oy * ow + ox] = v;
                                }
                            }
                        }
                    }
                    for lane in 0..lanes {
                        let oc = g * ocg + ob * VC + lane;
                        let acc = &planes[lane * pix..][..pix];
                        finish(oc, oc * pix, acc, &mut o[lane * pix..][..pix]);
                    }
                })
            });
    }
}

impl Block<'_> {
    /// The accumulators of the `vh` x `vw` tile at (oy0, ox0): entry
    /// `y * vw + x` holds the block's lanes of pixel (oy0 + y, ox0 + x).
    fn dispatch(
        &self,
        win: &Window,
        (vh, vw): (usize, usize),
        (oy0, ox0): (usize, usize),
    ) -> [[i32; VC]; VH * VW] {
        assert!(
            oy0 + vh <= win.rows
                && ox0 + vw <= win.cols
                && (self.plane0 + win.pairs) * win.plane_len() <= win.data.len(),
            "the window covers every tile"
        );
        let mut offs = [0usize; VH * VW];
        for (i, o) in offs.iter_mut().enumerate().take(vh * vw) {
            *o = (i / vw) * self.s * win.row_len() + i % vw;
        }
        let mut acc = [[0i32; VC]; VH * VW];
        macro_rules! go {
            ($n:literal) => {{
                let offs: &[usize; $n] = offs[..$n].try_into().expect("n offsets");
                #[cfg(target_arch = "x86_64")]
                let a = if super::vnni::available_vl() {
                    // SAFETY: the CPU has AVX-512 F, VL and VNNI, and every
                    // tap of the tile lies in the window (asserted above).
                    unsafe { self.vnni::<$n>(win, offs, (oy0, ox0)) }
                } else if has_avx2_fma() {
                    // SAFETY: the CPU has AVX2, and every tap of the tile
                    // lies in the window (asserted above).
                    unsafe { self.avx2::<$n>(win, offs, (oy0, ox0)) }
                } else {
                    self.portable::<$n>(win, offs, (oy0, ox0))
                };
                #[cfg(not(target_arch = "x86_64"))]
                let a = self.portable::<$n>(win, offs, (oy0, ox0));
                acc[..$n].copy_from_slice(&a);
            }};
        }
        match vh * vw {
            1 => go!(1),
            2 => go!(2),
            3 => go!(3),
            4 => go!(4),
            6 => go!(6),
            8 => go!(8),
            n => unreachable!("a {n}-pixel tile: tiles are at most 2 x 4"),
        }
        acc
    }

    fn portable<const N: usize>(
        &self,
        win: &Window,
        offs: &[usize; N],
        (oy0, ox0): (usize, usize),
    ) -> [[i32; VC]; N] {
        let (k, s) = (self.k, self.s);
        let mut acc = [[0i32; VC]; N];
        for j in 0..win.pairs {
            for ky in 0..k {
                for kx in 0..k {
                    let base = win.at(self.plane0 + j, oy0 * s + ky, ox0, kx);
                    let q = (j * k + ky) * k + kx;
                    let wv = &self.weights[q * VC..][..VC];
                    for (a, &o) in acc.iter_mut().zip(offs) {
                        let (x0, x1) = unpair(win.data[base + o]);
                        for (a, &w) in a.iter_mut().zip(wv) {
                            let (w0, w1) = unpair(w);
                            *a += w0 * x0 + w1 * x1;
                        }
                    }
                }
            }
        }
        acc
    }

    /// # Safety
    /// Every tap of the tile must lie in the window (see `dispatch`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn avx2<const N: usize>(
        &self,
        win: &Window,
        offs: &[usize; N],
        at: (usize, usize),
    ) -> [[i32; VC]; N] {
        // SAFETY: forwarded; the CPU has AVX2 (this function's features).
        unsafe { self.simd::<N, false>(win, offs, at) }
    }

    /// # Safety
    /// Every tap of the tile must lie in the window (see `dispatch`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    unsafe fn vnni<const N: usize>(
        &self,
        win: &Window,
        offs: &[usize; N],
        at: (usize, usize),
    ) -> [[i32; VC]; N] {
        // SAFETY: forwarded; the CPU has the instructions (this function's features).
        unsafe { self.simd::<N, true>(win, offs, at) }
    }

    /// Per tap: one load of the block's 8 weight pairs and, per pixel, one
    /// broadcast input pair and one `vpmaddwd` (`vpdpwssd` if `VNNI`).
    ///
    /// # Safety
    /// Every tap of the tile must lie in the window (see `dispatch`); the
    /// CPU must have AVX2, and AVX-512 F, VL and VNNI if `VNNI`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn simd<const N: usize, const VNNI: bool>(
        &self,
        win: &Window,
        offs: &[usize; N],
        (oy0, ox0): (usize, usize),
    ) -> [[i32; VC]; N] {
        use super::direct::madd_acc;
        use std::arch::x86_64::*;
        let (k, s) = (self.k, self.s);
        assert!(self.weights.len() >= win.pairs * k * k * VC);
        let data = win.data.as_ptr();
        // SAFETY: the CPU has AVX2 (the caller's contract).
        let mut acc = [unsafe { _mm256_setzero_si256() }; N];
        for j in 0..win.pairs {
            for ky in 0..k {
                for kx in 0..k {
                    let base = win.at(self.plane0 + j, oy0 * s + ky, ox0, kx);
                    let q = (j * k + ky) * k + kx;
                    // SAFETY: q < pairs * k * k, so 8 i32 of `weights` (asserted).
                    let wv =
                        unsafe { _mm256_loadu_si256(self.weights.as_ptr().add(q * VC).cast()) };
                    for (a, &o) in acc.iter_mut().zip(offs) {
                        // SAFETY: the tap lies in the window and the CPU has
                        // the instructions (the caller's contract).
                        unsafe {
                            let x = _mm256_set1_epi32(*data.add(base + o));
                            *a = madd_acc::<VNNI>(*a, x, wv);
                        }
                    }
                }
            }
        }
        let mut out = [[0i32; VC]; N];
        for (o, a) in out.iter_mut().zip(&acc) {
            // SAFETY: each entry of `out` holds 8 i32, one vector.
            unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), *a) };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 tile (where the CPU has it) equals the portable one, for
    /// every tile shape, stride 1 and 2, odd channel counts and a partial
    /// last channel block.
    #[test]
    fn tile_paths_agree() {
        for w in [
            Workload::new(5, 11, 3, 1, 1, 1, 6, 9),
            Workload::new(6, 12, 5, 2, 2, 2, 9, 11),
        ] {
            let input: Vec<i8> = (0..w.in_len())
                .map(|i| (i * 53 % 256) as u8 as i8)
                .collect();
            let packed = Packed::new(&w, |oc, i| ((oc * 31 + i * 17) % 255) as i8 - 127 + 1);
            let win = Window::new(&w, &input, -7, (w.out_h + 1, w.out_w + 3));
            let per_block = win.pairs * w.kernel * w.kernel * VC;
            let blocks = w.out_channels_per_group().div_ceil(VC);
            for gb in 0..w.groups * blocks {
                let block = Block {
                    weights: &packed.qw[gb * per_block..][..per_block],
                    plane0: gb / blocks * win.pairs,
                    k: w.kernel,
                    s: w.stride,
                };
                for (vh, vw) in [(1, 1), (1, 3), (2, 2), (2, 3), (2, 4)] {
                    for (oy0, ox0) in [(0, 0), (w.out_h + 1 - vh, w.out_w + 3 - vw)] {
                        let mut offs = [0usize; 8];
                        for (i, o) in offs.iter_mut().enumerate().take(vh * vw) {
                            *o = (i / vw) * w.stride * win.row_len() + i % vw;
                        }
                        let got = block.dispatch(&win, (vh, vw), (oy0, ox0));
                        let want = block.portable::<8>(&win, &offs, (oy0, ox0));
                        #[cfg(target_arch = "x86_64")]
                        if has_avx2_fma() {
                            // SAFETY: the CPU has AVX2; the tile lies in the window.
                            let avx2 = unsafe { block.avx2::<8>(&win, &offs, (oy0, ox0)) };
                            assert_eq!(avx2[..vh * vw], want[..vh * vw]);
                        }
                        assert_eq!(got[..vh * vw], want[..vh * vw], "{w} {vh}x{vw}");
                        // (The far tile may read only padding.)
                        assert!(oy0 > 0 || want.iter().flatten().any(|&v| v != 0));
                    }
                }
            }
        }
    }
}
