//! Winograd F(4x4, 3x3) convolution for 3x3 stride-1 ungrouped layers.
//!
//! Each 4x4 tile of output is computed from a 6x6 tile of input d as
//! Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A: 36 multiplications per tile and channel
//! pair instead of 144, at the price of three transforms. Summed over input
//! channels, the 36 point-wise products are 36 independent matrix products
//! M[ξ] = U[ξ] V[ξ] (output channels x input channels times input channels
//! x tiles), which run on the GEMM driver and its microkernels (`gemm`),
//! vectorised along tiles or, transposed (Mᵀ = Vᵀ Uᵀ), along output
//! channels, as the schedule says: a small map has fewer tiles than a
//! vector has lanes (one tile at 4x4).
//!
//! The weight transform U = G g Gᵀ is done once, at load, in f64 and
//! packed into the GEMM's `mr` panels. There is no fp16 Winograd: stored
//! as f16, U's rounding is amplified by the output transform's
//! cancellations to a relative error of about 2e-3 (measured on small
//! layers), so fp16 layers run the fp16 GEMM (see `LayerKey::of`). A run processes the tiles `tile_block` at a time: the input
//! transform in parallel over input channels, the 36 GEMMs in parallel
//! (each also splitting its rows), then the output transform with the
//! [`Epilogue`] in parallel over output channels. The transformed input
//! and the products live in buffers the calling thread keeps across runs.
//!
//! The points are 0, ±1, ±2 and ∞ (Lavin and Gray's choice). The transforms
//! grow values (Bᵀ's entries reach 5, Aᵀ's 8) and the output transform's
//! sums cancel, so f32 results carry more rounding error than a direct
//! convolution's: the tests hold the kernel to a relative L2 error of 1e-4
//! against the f64 reference on unit-scale inputs (direct and GEMM are held
//! to 1e-5); the largest error observed is 2.7e-6, on a 512-channel 4x4
//! layer, and under 3e-6 over a thousand random layers.

use crate::epilogue::{Epilogue, SyncPtr};
use crate::gemm::{BSource, Finishing, Panels, PanelsRef, gemm, pack_panels, with_kept_buffer};
use crate::isa::Isa;
use crate::schedule::{GemmSchedule, ParallelLoop, VectorAxis, WinogradSchedule};
use crate::workload::Workload;
use rayon::prelude::*;
use std::ops::Range;

/// Output tile side, input tile side, and points (GEMMs) per tile.
const M: usize = 4;
const T: usize = 6;
const POINTS: usize = T * T;

/// Whether Winograd F(4x4, 3x3) computes `w`: a 3x3 stride-1 convolution
/// with one group (grouped and depthwise layers have too few channels per
/// group for the products to be GEMMs worth running).
pub(crate) fn fits(w: &Workload) -> bool {
    w.kernel == 3 && w.stride == 1 && w.groups == 1
}

/// Tiles whose transforms run side by side, one value of each per lane, so
/// that the compiler can vectorise the transforms' arithmetic (8 f32 lanes
/// fill an AVX2 register); their loads and stores stay scalar gathers.
const L: usize = 8;
type Lanes = [f32; L];

#[inline(always)]
fn lanes(f: impl Fn(usize) -> f32) -> Lanes {
    std::array::from_fn(f)
}

/// Bᵀ d for L 6-vectors d, side by side.
#[inline(always)]
fn input_1d(d: [Lanes; T]) -> [Lanes; T] {
    [
        lanes(|l| 4.0 * d[0][l] - 5.0 * d[2][l] + d[4][l]),
        lanes(|l| -4.0 * (d[1][l] + d[2][l]) + d[3][l] + d[4][l]),
        lanes(|l| 4.0 * (d[1][l] - d[2][l]) - d[3][l] + d[4][l]),
        lanes(|l| 2.0 * (d[3][l] - d[1][l]) - d[2][l] + d[4][l]),
        lanes(|l| 2.0 * (d[1][l] - d[3][l]) - d[2][l] + d[4][l]),
        lanes(|l| 4.0 * d[1][l] - 5.0 * d[3][l] + d[5][l]),
    ]
}

/// Aᵀ m for L 6-vectors m, side by side.
#[inline(always)]
fn output_1d(m: [Lanes; T]) -> [Lanes; M] {
    let (s12, d12) = (lanes(|l| m[1][l] + m[2][l]), lanes(|l| m[1][l] - m[2][l]));
    let (s34, d34) = (lanes(|l| m[3][l] + m[4][l]), lanes(|l| m[3][l] - m[4][l]));
    [
        lanes(|l| m[0][l] + s12[l] + s34[l]),
        lanes(|l| d12[l] + 2.0 * d34[l]),
        lanes(|l| s12[l] + 4.0 * s34[l]),
        lanes(|l| d12[l] + 8.0 * d34[l] + m[5][l]),
    ]
}

/// G g for one 3-vector g, in f64 (it runs once per weight, at load).
fn weight_1d(g: [f64; 3]) -> [f64; T] {
    [
        g[0] / 4.0,
        -(g[0] + g[1] + g[2]) / 6.0,
        -(g[0] - g[1] + g[2]) / 6.0,
        g[0] / 24.0 + g[1] / 12.0 + g[2] / 6.0,
        g[0] / 24.0 - g[1] / 12.0 + g[2] / 6.0,
        g[2],
    ]
}

/// U = G g Gᵀ of a 3x3 kernel (row-major), as 36 values indexed ξ = 6i + j.
fn transform_weights(g: &[f32]) -> [f32; POINTS] {
    let rows: [[f64; T]; 3] =
        std::array::from_fn(|r| weight_1d(std::array::from_fn(|c| g[3 * r + c] as f64)));
    let mut u = [0.0; POINTS];
    for j in 0..T {
        let col = weight_1d(std::array::from_fn(|r| rows[r][j]));
        for i in 0..T {
            u[T * i + j] = col[i] as f32;
        }
    }
    u
}

/// V = Bᵀ d B of L 6x6 input tiles.
#[inline(always)]
fn transform_input(d: &[[Lanes; T]; T]) -> [[Lanes; T]; T] {
    let cols: [[Lanes; T]; T] = std::array::from_fn(|j| input_1d(std::array::from_fn(|i| d[i][j])));
    std::array::from_fn(|i| input_1d(std::array::from_fn(|j| cols[j][i])))
}

/// Y = Aᵀ m A of L tiles' 36 products.
#[inline(always)]
fn transform_output(m: &[Lanes; POINTS]) -> [[Lanes; M]; M] {
    let cols: [[Lanes; M]; T] =
        std::array::from_fn(|j| output_1d(std::array::from_fn(|i| m[T * i + j])));
    std::array::from_fn(|i| output_1d(std::array::from_fn(|j| cols[j][i])))
}

/// A Winograd convolution with its transformed weights.
#[derive(Debug, Clone)]
pub(crate) struct WinogradConv {
    w: Workload,
    s: WinogradSchedule,
    nhwc: bool,
    isa: Isa,
    /// U[ξ] (output channels x input channels) per point, packed for the
    /// schedule's orientation.
    u: Vec<Panels>,
}

impl WinogradConv {
    /// `weights` is (out, in, 3, 3) row-major; `nhwc` the activation
    /// layout; `isa` must be one the CPU has, with registers for the
    /// schedule's tile.
    pub fn new(
        w: Workload,
        s: WinogradSchedule,
        weights: &[f32],
        nhwc: bool,
        isa: Isa,
    ) -> WinogradConv {
        debug_assert!(fits(&w), "{w}: not a Winograd layer");
        let (k, c) = (w.out_channels, w.in_channels);
        let mut u = vec![0.0; POINTS * k * c];
        for (oc_ic, g) in weights.chunks_exact(9).enumerate() {
            for (xi, v) in transform_weights(g).into_iter().enumerate() {
                u[xi * k * c + oc_ic] = v;
            }
        }
        // A's `mr` panels (rows: output channels) when tiles are
        // vectorised, else B's `nr` panels (columns: output channels).
        let width = match s.vectors {
            VectorAxis::Spatial => s.mr,
            VectorAxis::OutputChannels => s.nr,
        };
        let u = (0..POINTS)
            .map(|xi| {
                let ux = &u[xi * k * c..(xi + 1) * k * c];
                Panels::new(pack_panels(k, c, width, |o, ic| ux[o * c + ic]), false)
            })
            .collect();
        WinogradConv { w, s, nhwc, isa, u }
    }

    /// Tiles down and across the output.
    fn tiles(&self) -> (usize, usize) {
        (self.w.out_h.div_ceil(M), self.w.out_w.div_ceil(M))
    }

    /// Whether the products vectorise output channels (C = Vᵀ Uᵀ, tiles x
    /// channels) rather than tiles (C = U V, channels x tiles).
    fn by_channels(&self) -> bool {
        self.s.vectors == VectorAxis::OutputChannels
    }

    /// Where a pass of `n` tiles keeps its values: V[ξ] starts at
    /// ξ * `v_point`, M[ξ] at ξ * `k * n`; within V[ξ], (input channel,
    /// tile) is at `v_at`, within M[ξ] (output channel, tile) at `m_at`.
    /// With tiles vectorised V[ξ] is B, input channels x tiles row-major,
    /// and M[ξ] is channels x tiles; with channels vectorised V[ξ] is A,
    /// packed in panels of `mr` tiles, and M[ξ] is tiles x channels.
    fn v_point(&self, n: usize) -> usize {
        let c = self.w.in_channels;
        if self.by_channels() {
            n.next_multiple_of(self.s.mr) * c
        } else {
            c * n
        }
    }

    #[inline(always)]
    fn v_at(&self, n: usize, ic: usize, j: usize) -> usize {
        let (c, mr) = (self.w.in_channels, self.s.mr);
        if self.by_channels() {
            ((j / mr) * c + ic) * mr + j % mr
        } else {
            ic * n + j
        }
    }

    #[inline(always)]
    fn m_at(&self, n: usize, oc: usize, j: usize) -> usize {
        if self.by_channels() {
            j * self.w.out_channels + oc
        } else {
            oc * n + j
        }
    }

    /// One sample: `input` and `out` in the layout the layer was built for.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        let (c, k) = (self.w.in_channels, self.w.out_channels);
        let (th, tw) = self.tiles();
        let tiles = th * tw;
        let block = self.s.tile_block.min(tiles);
        let s = &self.s;
        // The 36 GEMMs are the parallel loop's first split, and blocks of
        // the vectorised dimension the second.
        let gs = |n: usize| {
            let (rows, cols) = if self.by_channels() { (n, k) } else { (k, n) };
            GemmSchedule {
                mr: s.mr,
                nr: s.nr,
                kc: s.kc,
                mc: rows.next_multiple_of(s.mr),
                nc: s.nr * cols.div_ceil(s.nr).min(4),
                parallel: ParallelLoop::Spatial,
                vectors: VectorAxis::Spatial,
            }
        };
        let out = SyncPtr::new(out);
        with_kept_buffer(|v| {
            with_kept_buffer(|m| {
                v.resize(POINTS * self.v_point(block));
                m.resize(POINTS * k * block);
                for t0 in (0..tiles).step_by(block) {
                    let part = t0..tiles.min(t0 + block);
                    let n = part.len();
                    let vp = SyncPtr::new(v);
                    (0..c)
                        .into_par_iter()
                        .for_each(|ic| self.input_tiles(input, ic, part.clone(), vp));
                    let (mp, vs, gs) = (SyncPtr::new(m), &v[..], gs(n));
                    let stride = self.v_point(n);
                    (0..POINTS).into_par_iter().for_each(|xi| {
                        let vx = &vs[xi * stride..(xi + 1) * stride];
                        let (shape, a, b) = if self.by_channels() {
                            let b = BSource::Panels(self.u[xi].view());
                            ((n, k, c), PanelsRef::F32(vx), b)
                        } else {
                            ((k, n, c), self.u[xi].view(), BSource::Rows(vx))
                        };
                        let ldc = shape.1;
                        let c = mp.offset(xi * k * n);
                        let finishing = Finishing::Blocks(&|_, _| {});
                        gemm(&gs, self.isa, false, shape, a, b, c, ldc, finishing)
                    });
                    let ms: &[f32] = m;
                    (0..k)
                        .into_par_iter()
                        .for_each(|oc| self.output_tiles(ms, oc, part.clone(), out, epi, residual));
                }
            })
        })
    }

    /// Transforms input channel `ic` of the tiles `part` into V (see
    /// [`WinogradConv::v_point`]).
    fn input_tiles(&self, input: &[f32], ic: usize, part: Range<usize>, v: SyncPtr) {
        let w = &self.w;
        let (c, n, (_, tw)) = (w.in_channels, part.len(), self.tiles());
        let stride = self.v_point(n);
        let (h, wd, p) = (w.in_h as isize, w.in_w as isize, w.padding as isize);
        let at = |y: usize, x: usize| {
            if self.nhwc {
                (y * w.in_w + x) * c + ic
            } else {
                (ic * w.in_h + y) * w.in_w + x
            }
        };
        for j0 in (0..n).step_by(L) {
            let count = L.min(n - j0);
            let mut d = [[[0.0f32; L]; T]; T];
            for l in 0..count {
                let t = part.start + j0 + l;
                let (y0, x0) = (((t / tw) * M) as isize - p, ((t % tw) * M) as isize - p);
                for (i, row) in d.iter_mut().enumerate() {
                    let y = y0 + i as isize;
                    if y < 0 || y >= h {
                        continue;
                    }
                    for (jj, e) in row.iter_mut().enumerate() {
                        let x = x0 + jj as isize;
                        if x >= 0 && x < wd {
                            e[l] = input[at(y as usize, x as usize)];
                        }
                    }
                }
            }
            let tv = transform_input(&d);
            for l in 0..count {
                let at_v = self.v_at(n, ic, j0 + l);
                for (xi, value) in tv.iter().flatten().enumerate() {
                    // SAFETY: (ξ, ic, j) is inside the pass's values and
                    // only this task transforms channel ic.
                    unsafe { *v.get().add(xi * stride + at_v) = value[l] };
                }
            }
        }
    }

    /// Transforms output channel `oc`'s products of the tiles `part` back
    /// into pixels, through the epilogue, into `out`.
    fn output_tiles(
        &self,
        m: &[f32],
        oc: usize,
        part: Range<usize>,
        out: SyncPtr,
        epi: &Epilogue,
        residual: Option<&[f32]>,
    ) {
        let w = &self.w;
        let (k, n, (_, tw)) = (w.out_channels, part.len(), self.tiles());
        let at = |y: usize, x: usize| {
            if self.nhwc {
                (y * w.out_w + x) * k + oc
            } else {
                (oc * w.out_h + y) * w.out_w + x
            }
        };
        for j0 in (0..n).step_by(L) {
            let count = L.min(n - j0);
            let prods: [Lanes; POINTS] = std::array::from_fn(|xi| {
                let point = &m[xi * k * n..(xi + 1) * k * n];
                lanes(|l| {
                    if l < count {
                        point[self.m_at(n, oc, j0 + l)]
                    } else {
                        0.0
                    }
                })
            });
            let y = transform_output(&prods);
            for l in 0..count {
                let t = part.start + j0 + l;
                let (y0, x0) = ((t / tw) * M, (t % tw) * M);
                for (dy, row) in y.iter().enumerate().take(w.out_h - y0) {
                    for (dx, acc) in row.iter().enumerate().take(w.out_w - x0) {
                        let i = at(y0 + dy, x0 + dx);
                        let r = residual.map_or(0.0, |r| r[i]);
                        // SAFETY: output i belongs to channel oc, which
                        // only this task finishes.
                        unsafe { *out.get().add(i) = epi.one(oc, acc[l], r) };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, F32_TOLERANCE};
    use crate::tiles::{GEMM_TILES, tile_registers};
    use proptest::prelude::*;

    /// Winograd's tolerance against the f64 reference (see the module
    /// documentation); direct and GEMM meet `F32_TOLERANCE`.
    const WINOGRAD_TOLERANCE: f64 = 1e-4;

    /// The 1-D identity F(4, 3) rests on: Aᵀ [(G g) ⊙ (Bᵀ d)] is the
    /// correlation of d with g.
    #[test]
    fn one_dimensional_transforms_correlate() {
        let d = [0.3f32, -1.2, 2.0, 0.7, -0.4, 1.1];
        let g = [0.5f64, -0.25, 0.8];
        let (u, v) = (weight_1d(g), input_1d(d.map(|x| [x; L])));
        let y = output_1d(std::array::from_fn(|i| v[i].map(|x| u[i] as f32 * x)));
        for (i, &yi) in y.iter().map(|lanes| &lanes[0]).enumerate() {
            let want: f64 = (0..3).map(|j| d[i + j] as f64 * g[j]).sum();
            assert!((yi as f64 - want).abs() < 1e-5, "{i}: {yi} vs {want}");
        }
    }

    /// 3x3 stride-1 layers: padding 0 or 1, sizes that leave partial
    /// tiles, channel counts on both sides of the register tiles.
    fn winograd_workload() -> impl Strategy<Value = Workload> {
        (
            1usize..=40,
            1usize..=40,
            0usize..=1,
            3usize..=19,
            3usize..=19,
        )
            .prop_map(|(ic, oc, p, h, w)| Workload::new(ic, oc, 3, 1, p, 1, h, w))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Every tile on every instruction set the CPU has, tile blocks
        /// from one tile up, both layouts, every epilogue.
        #[test]
        fn every_isa_tile_and_layout_matches_reference(
            w in winograd_workload(),
            tile in 0..GEMM_TILES.len(),
            (kc, tile_block) in (1usize..5, 1usize..40),
            by_channels in any::<bool>(),
            nhwc in any::<bool>(),
            act in testing::activation(),
            residual in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let (mr, nr) = GEMM_TILES[tile];
            let vectors = if by_channels { VectorAxis::OutputChannels } else { VectorAxis::Spatial };
            let s = WinogradSchedule { mr, nr, kc: 8 * kc, tile_block, vectors };
            let weights = testing::weights(&w, seed);
            for isa in Isa::available() {
                let (needed, available) = tile_registers(mr, nr, isa);
                if needed > available {
                    continue;
                }
                let conv = WinogradConv::new(w, s, &weights, nhwc, isa);
                let run = |x: &[f32], y: &mut [f32], epi: &Epilogue, r: Option<&[f32]>| {
                    if nhwc {
                        testing::through_nhwc(&w, x, y, r, |x, y, r| conv.run(x, y, epi, r));
                    } else {
                        conv.run(x, y, epi, r);
                    }
                };
                let e = testing::error(&w, &weights, (act, residual, seed), run);
                prop_assert!(e < WINOGRAD_TOLERANCE, "{isa:?} {s:?} {w}: error {e}");
            }
        }
    }

    /// The largest error of the kernel on ResNet- and VGG-sized layers,
    /// printed for the documentation (`--nocapture`) and held to the bound.
    #[test]
    fn error_on_network_layers_is_bounded() {
        let mut worst: f64 = 0.0;
        for (c, hw) in [(64, 32), (128, 16), (256, 8), (512, 4), (512, 2)] {
            let w = Workload::new(c, c, 3, 1, 1, 1, hw, hw);
            let weights = testing::weights(&w, c as u64);
            let conv = WinogradConv::new(
                w,
                WinogradSchedule::default(),
                &weights,
                false,
                Isa::detect(),
            );
            let e = testing::error(
                &w,
                &weights,
                (crate::Activation::Identity, false, 7),
                |x, y, epi, r| conv.run(x, y, epi, r),
            );
            println!("{w}: relative L2 error {e:.2e}");
            worst = worst.max(e);
        }
        println!("worst {worst:.2e} (direct and GEMM are held to {F32_TOLERANCE:e})");
        assert!(worst < WINOGRAD_TOLERANCE, "worst {worst}");
    }
}
