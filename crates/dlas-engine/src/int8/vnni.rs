//! The int8 GEMM on AVX-512 VNNI: `vpdpbusd` multiplies 64 unsigned bytes
//! by 64 signed bytes and adds each group of four products into one of 16
//! i32 lanes, 64 multiply-accumulates per instruction (four times the AVX2
//! kernel's `vpmaddwd`), on bytes rather than i16 pairs, so the packed input
//! is half as large.
//!
//! The instruction wants unsigned activations, so the input is packed as
//! `u = x + 128` (padding as the zero point's own value, `zp + 128`); since
//! `sum w (x - zp) = sum w u - (zp + 128) sum w`, each output subtracts its
//! channel's weight sum times `zp + 128`, and the result is exact: it equals
//! the AVX2 kernel's bit for bit (tested).

use crate::epilogue::Int8Finish;
use crate::gemm::pack_im2col_with;
use crate::workload::Workload;
use rayon::prelude::*;

/// Output columns per panel: one register of i32 lanes.
const LANES: usize = 16;
/// Bytes of one reduction quad of one panel: 16 columns x 4 inputs.
const QUAD: usize = 4 * LANES;

/// The register tile: 16 rows x 1 panel for layers of at most 16 output
/// pixels (the last stages of CIFAR networks), 8 rows x 2 panels otherwise;
/// 16 accumulators either way, of the 32 registers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Tile {
    Tall,
    Wide,
}

impl Tile {
    fn rows(self) -> usize {
        match self {
            Tile::Tall => 16,
            Tile::Wide => 8,
        }
    }

    fn panels(self) -> usize {
        match self {
            Tile::Tall => 1,
            Tile::Wide => 2,
        }
    }
}

/// Whether the AVX-512 VNNI 256-bit instructions (`vpdpwssd` on `ymm`,
/// with AVX512VL) run on this CPU: the direct and spatial-pack kernels'
/// fused multiply-add of i16 pairs.
pub(super) fn available_vl() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        available() && is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU runs the kernel.
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[derive(Debug, Clone)]
pub(super) struct Packed {
    /// Per group, per block of `tile.rows()` output channels (the last one
    /// padded with zero rows), per reduction quad: each row's four weights
    /// in one i32, the operand `vpdpbusd` broadcasts.
    qw: Vec<i32>,
    /// Per output channel, the sum of its quantised weights.
    sums: Vec<i32>,
    tile: Tile,
}

impl Packed {
    /// Packs the weights `q(oc, i)` (reduction index `i`) of layer `w`.
    pub fn new(w: &Workload, q: impl Fn(usize, usize) -> i8) -> Packed {
        let tile = if w.out_pixels() <= LANES {
            Tile::Tall
        } else {
            Tile::Wide
        };
        let (mr, red, ocg) = (tile.rows(), w.reduction(), w.out_channels_per_group());
        let (quads, blocks) = (red.div_ceil(4), ocg.div_ceil(mr));
        let mut qw = vec![0i32; w.groups * blocks * quads * mr];
        let mut sums = vec![0i32; w.out_channels];
        for (oc, sum) in sums.iter_mut().enumerate() {
            let (g, r) = (oc / ocg, oc % ocg);
            let base = (g * blocks + r / mr) * quads * mr + r % mr;
            for i in 0..red {
                let v = q(oc, i);
                *sum += v as i32;
                qw[base + (i / 4) * mr] |= ((v as u8 as u32) << (8 * (i % 4))) as i32;
            }
        }
        Packed { qw, sums, tile }
    }

    /// One NCHW sample, finished by `finish`.
    pub fn run(&self, w: &Workload, input: &[i8], zp: i16, out: &mut [i8], finish: &Int8Finish) {
        let (ocg, pix) = (w.out_channels_per_group(), w.out_pixels());
        let (mr, np) = (self.tile.rows(), self.tile.panels());
        let quads = w.reduction().div_ceil(4);
        let blocks = ocg.div_ceil(mr);
        // Panels, rounded up to whole tiles (the extra columns are dropped).
        let panels = pix.div_ceil(LANES).next_multiple_of(np);
        let zpu = zp as i32 + 128;
        let pointwise = w.kernel == 1 && w.stride == 1 && w.padding == 0;
        for g in 0..w.groups {
            let b = if pointwise {
                pack_pointwise(input, w, g, (quads, panels), zpu as u8)
            } else {
                pack_im2col(input, w, g, (quads, panels), zp)
            };
            let rows_out = &mut out[g * ocg * pix..(g + 1) * ocg * pix];
            rows_out
                .par_chunks_mut(mr * pix)
                .enumerate()
                .for_each(|(rb, o)| {
                    let a = &self.qw[(g * blocks + rb) * quads * mr..][..quads * mr];
                    let mut acc = [[0i32; LANES]; 16];
                    for p0 in (0..panels).step_by(np) {
                        let tile = &b[p0 * quads * QUAD..][..np * quads * QUAD];
                        accumulate(self.tile, a, tile, quads, &mut acc);
                        let x0 = p0 * LANES;
                        for r in 0..o.len() / pix {
                            let oc = g * ocg + rb * mr + r;
                            let correction = zpu * self.sums[oc];
                            for p in 0..np {
                                let c0 = x0 + p * LANES;
                                if c0 >= pix {
                                    break;
                                }
                                let n = LANES.min(pix - c0);
                                let acc = &mut acc[r * np + p][..n];
                                acc.iter_mut().for_each(|v| *v -= correction);
                                finish(oc, oc * pix + c0, acc, &mut o[r * pix + c0..][..n]);
                            }
                        }
                    }
                });
        }
    }
}

/// The input operand of group `g`, `b[panel][quad][column][4]` as bytes
/// `x + 128` (padding `zp + 128`): im2col with the zero point subtracted
/// (so padding is 0), then each panel's rows regrouped in quads as
/// `v + zp + 128`.
fn pack_im2col(
    input: &[i8],
    w: &Workload,
    g: usize,
    (quads, panels): (usize, usize),
    zp: i16,
) -> Vec<u8> {
    let zpu = zp as i32 + 128;
    let flat = pack_im2col_with(input, w, g, LANES, 4 * quads, |x: i8| x as i16 - zp);
    let mut b = vec![0u8; panels * quads * QUAD];
    b.par_chunks_mut(quads * QUAD)
        .zip(flat.par_chunks(4 * quads * LANES))
        .for_each(|(dst, src)| {
            for (j, dst) in dst.chunks_exact_mut(QUAD).enumerate() {
                let src = &src[4 * j * LANES..][..QUAD];
                for (col, d) in dst.chunks_exact_mut(4).enumerate() {
                    for (t, d) in d.iter_mut().enumerate() {
                        *d = (src[t * LANES + col] as i32 + zpu) as u8;
                    }
                }
            }
        });
    b
}

/// [`pack_im2col`] of a 1x1, stride-1, unpadded layer, whose im2col matrix
/// is the input itself: one pass from the NCHW input, where the general
/// path copies it twice (MobileNets' expansion and projection layers).
/// Cells past the last channel or pixel hold `zpu`, as padding would.
fn pack_pointwise(
    input: &[i8],
    w: &Workload,
    g: usize,
    (quads, panels): (usize, usize),
    zpu: u8,
) -> Vec<u8> {
    let (icg, pix) = (w.in_channels_per_group(), w.out_pixels());
    let mut b = vec![zpu; panels * quads * QUAD];
    b.par_chunks_mut(quads * QUAD)
        .enumerate()
        .for_each(|(p, dst)| {
            let cols = p * LANES..pix.min((p + 1) * LANES);
            if cols.is_empty() {
                return;
            }
            for i in 0..icg {
                let src = &input[(g * icg + i) * pix..][cols.clone()];
                let dst = &mut dst[(i / 4) * QUAD + i % 4..];
                for (col, &x) in src.iter().enumerate() {
                    dst[col * 4] = x as u8 ^ 0x80;
                }
            }
        });
    b
}

/// The accumulators of one tile: `acc[r * panels + p]` holds row `r` of
/// panel `p`.
fn accumulate(tile: Tile, a: &[i32], b: &[u8], quads: usize, acc: &mut [[i32; LANES]; 16]) {
    #[cfg(target_arch = "x86_64")]
    {
        assert!(
            available(),
            "the VNNI kernel was chosen on a CPU without it"
        );
        // SAFETY: the CPU has AVX-512 F, BW and VNNI (asserted).
        unsafe {
            match tile {
                Tile::Tall => tile_vnni::<16, 1>(a, b, quads, acc),
                Tile::Wide => tile_vnni::<8, 2>(a, b, quads, acc),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!(
        "the VNNI kernel is only chosen on x86_64: {tile:?} {} {} {quads} {}",
        a.len(),
        b.len(),
        acc.len()
    )
}

/// `MR` rows x `NP` panels: per reduction quad, `NP` loads of 64 input
/// bytes, `MR` broadcasts of four weights and `MR * NP` `vpdpbusd`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn tile_vnni<const MR: usize, const NP: usize>(
    a: &[i32],
    b: &[u8],
    quads: usize,
    out: &mut [[i32; LANES]; 16],
) {
    use std::arch::x86_64::*;
    assert!(a.len() >= quads * MR && b.len() >= NP * quads * QUAD && MR * NP <= 16);
    let mut acc = [[_mm512_setzero_si512(); NP]; MR];
    for (j, wq) in a[..quads * MR].chunks_exact(MR).enumerate() {
        let mut bv = [_mm512_setzero_si512(); NP];
        for (p, v) in bv.iter_mut().enumerate() {
            // SAFETY: 64 bytes of quad j of panel p, inside `b` (asserted).
            *v = unsafe { _mm512_loadu_si512(b.as_ptr().add((p * quads + j) * QUAD).cast()) };
        }
        for (acc, &w) in acc.iter_mut().zip(wq) {
            let w = _mm512_set1_epi32(w);
            for (acc, &v) in acc.iter_mut().zip(&bv) {
                *acc = _mm512_dpbusd_epi32(*acc, v, w);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (p, &v) in acc.iter().enumerate() {
            // SAFETY: each entry of `out` holds 16 i32, one register.
            unsafe { _mm512_storeu_si512(out[r * NP + p].as_mut_ptr().cast(), v) };
        }
    }
}
