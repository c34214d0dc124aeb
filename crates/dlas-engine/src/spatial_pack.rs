//! Spatial pack, NCHW: the input is zero-padded once per run into a buffer
//! that covers whole output tiles, weights are packed at load as
//! [group][oc block][ic][ky][kx][vc], and each task accumulates a `vh` x `vw`
//! output tile for `vc` output channels (the vector) in registers.
//! The sparse variant packs the input tile by tile and runs the block-sparse
//! SpMM kernel over the tiles (see `run_sparse`). fp16 dense weights are
//! widened to f32 one output-channel block at a time, once per task that
//! uses it (see `fp16`).

use crate::epilogue::{Activation, Epilogue, SyncPtr};
use crate::fp16::Store;
use crate::gemm::{pack_columns, sparse_gemm, strip, with_kept_buffer};
use crate::isa::{Isa, has_avx2_fma, madd};
use crate::schedule::{GemmSchedule, ParallelLoop, SpatialPackSchedule};
use crate::sparse::BlockSparse;
use crate::workload::Workload;
use rayon::prelude::*;

/// Largest `vh * vw` a schedule may ask for (validated: <= 14 registers).
const MAX_TILE: usize = 16;

#[derive(Debug, Clone)]
enum Packed {
    /// [group][oc block][reduction][vc], f32 or (fp16) f16.
    Dense(Store),
    Sparse(Vec<BlockSparse>),
}

#[derive(Debug, Clone)]
pub(crate) struct SpatialPackConv {
    w: Workload,
    s: SpatialPackSchedule,
    packed: Packed,
    /// Padded input height and width: whole tiles plus the kernel's reach.
    hp: usize,
    wp: usize,
}

/// Where a task writes: one tile of one oc block of one group.
#[derive(Clone, Copy)]
struct Tile {
    g: usize,
    ob: usize,
    oy0: usize,
    ox0: usize,
}

impl SpatialPackConv {
    /// `half` stores dense weights as f16.
    pub fn new(
        w: Workload,
        s: SpatialPackSchedule,
        weights: &[f32],
        blocks: Option<(usize, usize)>,
        half: bool,
    ) -> Self {
        let (ocg, red) = (w.out_channels_per_group(), w.reduction());
        let packed = match blocks {
            Some((r, c)) => Packed::Sparse(
                weights
                    .chunks(ocg * red)
                    .map(|g| BlockSparse::from_dense(g, ocg, red, r, c))
                    .collect(),
            ),
            None => {
                let vc = s.vc;
                let blocks = ocg.div_ceil(vc);
                let mut p = vec![0.0; w.groups * blocks * red * vc];
                for g in 0..w.groups {
                    for o in 0..ocg {
                        for q in 0..red {
                            let (ob, lane) = (o / vc, o % vc);
                            p[((g * blocks + ob) * red + q) * vc + lane] =
                                weights[(g * ocg + o) * red + q];
                        }
                    }
                }
                Packed::Dense(Store::new(p, half))
            }
        };
        let reach = |out: usize, tile: usize| (out.div_ceil(tile) * tile - 1) * w.stride + w.kernel;
        SpatialPackConv {
            w,
            s,
            packed,
            hp: reach(w.out_h, s.vh).max(w.in_h + 2 * w.padding),
            wp: reach(w.out_w, s.vw).max(w.in_w + 2 * w.padding),
        }
    }

    /// One NCHW sample.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        let packed = match &self.packed {
            Packed::Sparse(m) => return self.run_sparse(m, input, out, epi, residual),
            Packed::Dense(p) => p,
        };
        let w = &self.w;
        let (hp, wp, p) = (self.hp, self.wp, w.padding);
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
        let oblocks = ocg.div_ceil(self.s.vc);
        let (ty, tx) = (w.out_h.div_ceil(self.s.vh), w.out_w.div_ceil(self.s.vw));
        let c = SyncPtr::new(out);
        let avx = has_avx2_fma();
        let block = self.s.vc * w.reduction();
        let run = |t: Tile, wblock: &[f32]| {
            // SAFETY: every tile is written by exactly one task.
            unsafe { self.tile(t, wblock, &padded, c, epi, residual, avx) }
        };
        let tile = |g, ob, y, x| Tile {
            g,
            ob,
            oy0: y * self.s.vh,
            ox0: x * self.s.vw,
        };
        match self.s.parallel {
            ParallelLoop::OutputChannels => crate::awake::for_each(w.groups * oblocks, |gb| {
                let mut widened = Vec::new();
                let wblock = packed.get(gb * block..(gb + 1) * block, &mut widened);
                for y in 0..ty {
                    for x in 0..tx {
                        run(tile(gb / oblocks, gb % oblocks, y, x), wblock);
                    }
                }
            }),
            ParallelLoop::Spatial => crate::awake::for_each(ty, |y| {
                let mut widened = Vec::new();
                for gb in 0..w.groups * oblocks {
                    let wblock = packed.get(gb * block..(gb + 1) * block, &mut widened);
                    for x in 0..tx {
                        run(tile(gb / oblocks, gb % oblocks, y, x), wblock);
                    }
                }
            }),
        }
    }

    /// Sparse weights: the input is packed tile by tile (the pixels of each
    /// `vh` x `vw` output tile are consecutive columns of an im2col matrix),
    /// the block-sparse SpMM kernel computes all tiles, and the tiles are
    /// scattered back to NCHW through the epilogue.
    fn run_sparse(
        &self,
        mats: &[BlockSparse],
        input: &[f32],
        out: &mut [f32],
        epi: &Epilogue,
        residual: Option<&[f32]>,
    ) {
        let w = &self.w;
        let (vh, vw) = (self.s.vh, self.s.vw);
        let tile = vh * vw;
        let tx = w.out_w.div_ceil(vw);
        let columns = w.out_h.div_ceil(vh) * tx * tile;
        // Column -> output pixel, tile-major.
        let pixel = |col: usize| {
            let (t, i) = (col / tile, col % tile);
            let (oy, ox) = ((t / tx) * vh + i / vw, (t % tx) * vw + i % vw);
            (oy < w.out_h && ox < w.out_w).then_some((oy, ox))
        };
        let ocg = w.out_channels_per_group();
        let plain = Epilogue {
            bias: vec![0.0; ocg],
            act: Activation::Identity,
        };
        // Parallel over output channels, or over rows of tiles (as dense).
        let schedule = GemmSchedule {
            nc: match self.s.parallel {
                ParallelLoop::OutputChannels => columns,
                ParallelLoop::Spatial => tx * tile,
            },
            parallel: self.s.parallel,
            ..GemmSchedule::default()
        };
        let pix = w.out_pixels();
        for (g, m) in mats.iter().enumerate() {
            let krows = w.reduction().next_multiple_of(m.c);
            let sw = strip(m.r, columns);
            let mut tiles = vec![0.0f32; ocg * columns];
            let c = SyncPtr::new(&mut tiles);
            with_kept_buffer(|b| {
                let isa = Isa::detect();
                pack_columns(input, w, g, (sw, krows), (columns, pixel), b, isa);
                sparse_gemm(&schedule, m, b, krows, columns, 0, c, &plain, None, isa);
            });
            out[g * ocg * pix..(g + 1) * ocg * pix]
                .par_chunks_mut(pix)
                .zip(tiles.par_chunks(columns))
                .enumerate()
                .for_each(|(r, (o, t))| {
                    let oc = g * ocg + r;
                    for (col, &v) in t.iter().enumerate() {
                        if let Some((oy, ox)) = pixel(col) {
                            let i = oy * w.out_w + ox;
                            let res = residual.map_or(0.0, |x| x[oc * pix + i]);
                            o[i] = epi.one(oc, v, res);
                        }
                    }
                });
        }
    }

    /// Tile `t` from the weights of its oc block, `wblock` ([reduction][vc]).
    ///
    /// # Safety
    /// No other task may write tile `t`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        &self,
        t: Tile,
        wblock: &[f32],
        padded: &[f32],
        c: SyncPtr,
        epi: &Epilogue,
        residual: Option<&[f32]>,
        avx: bool,
    ) {
        let mut acc = [0.0f32; MAX_TILE * 16];
        dense_tile(self, wblock, t, padded, &mut acc, avx);
        let width = self.s.vc;
        let w = &self.w;
        let ocg = w.out_channels_per_group();
        let (vh, vw) = (self.s.vh, self.s.vw);
        for lane in 0..width.min(ocg - t.ob * width) {
            let oc = t.g * ocg + t.ob * width + lane;
            for y in 0..vh.min(w.out_h - t.oy0) {
                for x in 0..vw.min(w.out_w - t.ox0) {
                    let i = oc * w.out_pixels() + (t.oy0 + y) * w.out_w + t.ox0 + x;
                    let r = residual.map_or(0.0, |r| r[i]);
                    // SAFETY: (oc, oy, ox) lies in this task's tile.
                    unsafe { *c.get().add(i) = epi.one(oc, acc[(y * vw + x) * width + lane], r) };
                }
            }
        }
    }
}

/// Accumulates a dense tile from its oc block's weights `p`:
/// acc[(y * vw + x) * vc + lane].
fn dense_tile(
    sp: &SpatialPackConv,
    p: &[f32],
    t: Tile,
    padded: &[f32],
    acc: &mut [f32],
    avx: bool,
) {
    // The tile size is a compile-time constant so its accumulators live in
    // registers: one instance per (vc, vh * vw) a valid schedule can ask for.
    macro_rules! go {
        ($vc:literal, $n:literal) => {{
            #[cfg(target_arch = "x86_64")]
            if avx {
                // SAFETY: the CPU has AVX2 and FMA.
                return unsafe { dense_avx2::<$vc, $n>(sp, p, t, padded, acc) };
            }
            let _ = avx;
            dense_body::<$vc, $n, false>(sp, p, t, padded, acc)
        }};
    }
    macro_rules! tiles {
        ($vc:literal: $($n:literal)*) => {
            match sp.s.vh * sp.s.vw {
                $($n => go!($vc, $n),)*
                _ => unreachable!("tiles are validated against the register budget"),
            }
        };
    }
    match sp.s.vc {
        4 => tiles!(4: 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
        8 => tiles!(8: 1 2 3 4 5 6 7 8 9 10 11 12 13 14),
        16 => tiles!(16: 1 2 3 4 5 6 7),
        _ => unreachable!("vc is validated against SPATIAL_PACK_VC"),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dense_avx2<const VC: usize, const N: usize>(
    sp: &SpatialPackConv,
    p: &[f32],
    t: Tile,
    padded: &[f32],
    acc: &mut [f32],
) {
    dense_body::<VC, N, true>(sp, p, t, padded, acc)
}

#[inline(always)]
fn dense_body<const VC: usize, const N: usize, const FMA: bool>(
    sp: &SpatialPackConv,
    p: &[f32],
    t: Tile,
    padded: &[f32],
    acc: &mut [f32],
) {
    let w = &sp.w;
    let (k, s, red, icg) = (w.kernel, w.stride, w.reduction(), w.in_channels_per_group());
    let (vh, vw, hp, wp) = (sp.s.vh, sp.s.vw, sp.hp, sp.wp);
    let mut tile = [[0.0f32; VC]; N];
    let wblock = &p[..red * VC];
    // Offsets of the tile's pixels from the window origin, and one bounds
    // check for the whole tile (the padded buffer covers whole tiles).
    let ntile = N;
    debug_assert_eq!(N, vh * vw);
    let mut offs = [0usize; N];
    for (i, o) in offs.iter_mut().enumerate() {
        *o = (i / vw) * s * wp + (i % vw) * s;
    }
    let first = (t.g * icg) * hp * wp + t.oy0 * s * wp + t.ox0 * s;
    let last = first + (icg - 1) * hp * wp + (k - 1) * (wp + 1) + offs[ntile - 1];
    assert!(last < padded.len(), "the padded input covers every tile");
    for i in 0..icg {
        for ky in 0..k {
            for kx in 0..k {
                let q = (i * k + ky) * k + kx;
                let wv: &[f32; VC] = wblock[q * VC..][..VC].try_into().expect("VC lanes");
                let base = first + i * hp * wp + ky * wp + kx;
                for (a, &o) in tile.iter_mut().zip(&offs) {
                    // SAFETY: base + o <= last < padded.len() (asserted above).
                    let v = unsafe { *padded.get_unchecked(base + o) };
                    for (a, &wl) in a.iter_mut().zip(wv) {
                        *a = madd::<FMA>(v, wl, *a);
                    }
                }
            }
        }
    }
    for (i, a) in tile.iter().enumerate() {
        acc[i * VC..][..VC].copy_from_slice(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{SPATIAL_PACK_VC, Schedule};
    use crate::testing::{self, F32_TOLERANCE};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Dense f32 and f16 weights (the latter held to the reference of
        /// the rounded weights), every valid tile and parallel loop,
        /// strides, padding, groups, the residual and every activation.
        #[test]
        fn dense_f32_and_f16_match_reference(
            w in testing::dense_workload(),
            (vc, vh, vw) in (0..SPATIAL_PACK_VC.len(), 1usize..4, 1usize..5),
            spatial in any::<bool>(),
            act in testing::activation(),
            residual in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let parallel = if spatial { ParallelLoop::Spatial } else { ParallelLoop::OutputChannels };
            let s = SpatialPackSchedule { vc: SPATIAL_PACK_VC[vc], vh, vw, parallel };
            prop_assume!(Schedule::SpatialPack(s).validate(&w).is_ok());
            let weights = testing::weights(&w, seed);
            for (half, reference) in [(false, weights.clone()), (true, testing::rounded_to_f16(&weights))] {
                let conv = SpatialPackConv::new(w, s, &weights, None, half);
                let e = testing::error(&w, &reference, (act, residual, seed), |x, y, epi, r| {
                    conv.run(x, y, epi, r)
                });
                prop_assert!(e < F32_TOLERANCE, "half {half} {s:?} {w}: error {e}");
            }
        }
    }
}
