//! Winograd F(4x4, 3x3) and F(2x2, 3x3) convolution for 3x3 stride-1
//! ungrouped layers.
//!
//! Each MxM tile of output (M = 4 or 2) is computed from a TxT tile of
//! input d (T = M + 2) as Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A: T² multiplications
//! per tile and channel pair instead of 9M² (36 against 144, 16 against
//! 36), at the price of three transforms (`transforms`). Summed over
//! input channels, the T² point-wise products are T² independent matrix
//! products M[ξ] = U[ξ] V[ξ] (output channels x input channels times input
//! channels x tiles), which run on the GEMM driver and its microkernels
//! (`gemm`), vectorised along tiles or, transposed (Mᵀ = Vᵀ Uᵀ), along
//! output channels, as the schedule says.
//!
//! The tile is the layer's map's (`dlas_core::calibration::winograd_tile`,
//! which the device model and the calibration share): F(4x4) on maps of
//! 16 or more of its tiles (14x14 and up), F(2x2) on smaller maps of 16 or
//! more of its own (7x7 and 8x8). On an 8x8 map, F(4x4)'s 4 tiles leave
//! its GEMMs one FMA per weight loaded, and its transformed weights are 4x
//! the layer's; F(2x2) has 16 tiles, a vector's worth, and 16/9 the
//! weights. Maps smaller still run the GEMM, as do layers of fewer than 8
//! input channels (a CIFAR-10 stem).
//!
//! The weight transform U = G g Gᵀ is done once, at load, in f64 and
//! packed into the GEMM's `mr` panels. There is no fp16 Winograd: stored
//! as f16, U's rounding is amplified by the output transform's
//! cancellations to a relative error of about 2e-3 (measured on small
//! F(4x4) layers), so fp16 layers run the fp16 GEMM (see `LayerKey::of`).
//!
//! A run processes the tiles `tile_block` at a time: the input transform
//! in parallel over input channels, the T² GEMMs in parallel, then the
//! output transform with the [`Epilogue`] in parallel over output
//! channels. The GEMMs' microkernels prefetch U when the layer's U is 1
//! MiB or more (the GEMM's own rule, applied to all points' U together:
//! each point's alone is smaller, and a run streams them all from L3).
//! The transformed input and the products live in buffers the calling
//! thread keeps across runs. Both transforms work on 16 consecutive tiles
//! at once, one per vector lane: on AVX-512 with intrinsics on registers
//! (`avx512`: a 64-channel layer on 32x32 spent 110 and 57 µs in the input
//! and output transforms written on arrays of f32, 45 and 29 so), elsewhere
//! the array code compiled for AVX2:
//!
//! - input: one channel's rows are copied once into a zero-padded plane,
//!   each of a tile's T² points is gathered for the 16 tiles (`vgatherdps`
//!   on AVX-512), Bᵀ d B is applied separably, and V is written straight
//!   into the GEMM's packed panels (masked stores where a vector spans two
//!   panels), so the products pack nothing;
//! - output: each point of M is one vector load (M's rows are padded to
//!   whole vectors), Aᵀ m A is applied separably, the 16 tiles' MxM values
//!   are scattered into a staging row of tiles (`vscatterdps`), and the
//!   epilogue runs over whole output rows.
//!
//! The transforms grow values (F(4x4)'s Bᵀ entries reach 5, its Aᵀ's 8)
//! and the output transform's sums cancel, so f32 results carry more
//! rounding error than a direct convolution's: the tests hold the kernel
//! to a relative L2 error of 1e-4 against the f64 reference on unit-scale
//! inputs (direct and GEMM are held to 1e-5); the largest error observed
//! on network-sized layers is 3.7e-6 for F(4x4) (a 512-channel 4x4 layer)
//! and 5.8e-7 for F(2x2), whose transforms only add.

use crate::aligned::AlignedVec;
use crate::epilogue::{Epilogue, SyncPtr};
use crate::gemm::{
    BSource, Finishing, PREFETCH_A_FROM, Panels, PanelsRef, gemm_streaming, pack_panels,
    with_kept_buffer,
};
use crate::isa::Isa;
use crate::schedule::{GemmSchedule, ParallelLoop, VectorAxis, WinogradSchedule};
use crate::workload::Workload;
use dlas_core::calibration::{WinogradTile, winograd_tile};
use std::ops::Range;
use transforms::{F2, F4, L, Lanes, Tile, array, lanes, transform_output, transform_weights};

#[cfg(target_arch = "x86_64")]
mod avx512;
mod transforms;
#[cfg(target_arch = "x86_64")]
use avx512::{input_group_avx512, output_group_avx512};

/// The tile `w` runs with as Winograd: the rule's ([`winograd_tile`], as
/// `dlas_core::kernel::kernel_class` applies it), or F(4x4, 3x3) for a
/// layer the rule leaves to the GEMM, which runs as Winograd only when
/// built so directly (tests, the tuner's measurements).
pub(crate) fn tile_of(w: &Workload) -> WinogradTile {
    winograd_tile(
        w.kernel,
        w.stride,
        w.groups,
        w.in_channels,
        [w.out_h, w.out_w],
    )
    .unwrap_or(WinogradTile::F4x4)
}

/// U[ξ] = G g Gᵀ of each of the `pairs` (output, input) channel pairs of
/// `weights` ((out, in, 3, 3) row-major), point after point: U[ξ] is the
/// result's values from ξ · `pairs` on.
fn transformed<const M: usize, const T: usize, F: Tile<M, T>>(
    weights: &[f32],
    pairs: usize,
) -> Vec<f32> {
    let mut u = vec![0.0; T * T * pairs];
    for (pair, g) in weights.chunks_exact(9).enumerate() {
        for (i, row) in transform_weights::<M, T, F>(g).iter().enumerate() {
            for (j, &value) in row.iter().enumerate() {
                u[(T * i + j) * pairs + pair] = value;
            }
        }
    }
    u
}

/// A Winograd convolution with its transformed weights.
#[derive(Debug, Clone)]
pub(crate) struct WinogradConv {
    w: Workload,
    s: WinogradSchedule,
    tile: WinogradTile,
    nhwc: bool,
    isa: Isa,
    /// U[ξ] (output channels x input channels) per point, packed for the
    /// schedule's orientation.
    u: Vec<Panels>,
}

impl WinogradConv {
    /// `weights` is (out, in, 3, 3) row-major; `tile` the output tile;
    /// `nhwc` the activation layout; `isa` must be one the CPU has, with
    /// registers for the schedule's register tile.
    pub fn new(
        w: Workload,
        s: WinogradSchedule,
        tile: WinogradTile,
        weights: &[f32],
        nhwc: bool,
        isa: Isa,
    ) -> WinogradConv {
        debug_assert!(w.winograd_computes(), "{w}: not a Winograd layer");
        let (k, c) = (w.out_channels, w.in_channels);
        let u = match tile {
            WinogradTile::F4x4 => transformed::<4, 6, F4>(weights, k * c),
            WinogradTile::F2x2 => transformed::<2, 4, F2>(weights, k * c),
        };
        // A's `mr` panels (rows: output channels) when tiles are
        // vectorised, else B's `nr` panels (columns: output channels).
        let width = match s.vectors {
            VectorAxis::Spatial => s.mr,
            VectorAxis::OutputChannels => s.nr,
        };
        let u = (0..tile.points())
            .map(|xi| {
                let ux = &u[xi * k * c..(xi + 1) * k * c];
                Panels::new(pack_panels(k, c, width, |o, ic| ux[o * c + ic]), false)
            })
            .collect();
        WinogradConv {
            w,
            s,
            tile,
            nhwc,
            isa,
            u,
        }
    }

    /// Tiles down and across the output.
    fn tiles(&self) -> (usize, usize) {
        let m = self.tile.side();
        (self.w.out_h.div_ceil(m), self.w.out_w.div_ceil(m))
    }

    /// Whether the products vectorise output channels (C = Vᵀ Uᵀ, tiles x
    /// channels) rather than tiles (C = U V, channels x tiles).
    fn by_channels(&self) -> bool {
        self.s.vectors == VectorAxis::OutputChannels
    }

    /// Width of V's panels: V[ξ] is the products' B (input channels x
    /// tiles, packed in `nr`-tile panels) when tiles are vectorised, and
    /// their A (tiles x input channels, in `mr`-tile panels) when channels
    /// are; either way the input transform writes it packed, so the GEMMs
    /// read it without packing.
    fn panel_width(&self) -> usize {
        if self.by_channels() {
            self.s.mr
        } else {
            self.s.nr
        }
    }

    /// Values of V[ξ] in a pass of `n` tiles (V[ξ] starts at ξ times it).
    fn v_point(&self, n: usize) -> usize {
        n.next_multiple_of(self.panel_width()) * self.w.in_channels
    }

    /// Where (input channel `ic`, tile `j` of the pass) is within V[ξ].
    #[inline(always)]
    fn v_at(&self, ic: usize, j: usize) -> usize {
        let pw = self.panel_width();
        ((j / pw) * self.w.in_channels + ic) * pw + j % pw
    }

    /// Row stride of M[ξ] in a pass of `n` tiles: channels x tiles, rows
    /// padded to whole vectors of tiles so the output transform loads a
    /// vector anywhere in a row; tiles x channels when channels are
    /// vectorised.
    fn m_ld(&self, n: usize) -> usize {
        if self.by_channels() {
            self.w.out_channels
        } else {
            n.next_multiple_of(L)
        }
    }

    /// Values of M[ξ] in a pass of `n` tiles (M[ξ] starts at ξ times it).
    fn m_point(&self, n: usize) -> usize {
        let k = self.w.out_channels;
        if self.by_channels() {
            n * k
        } else {
            k * self.m_ld(n)
        }
    }

    /// One sample: `input` and `out` in the layout the layer was built for.
    /// The output tile the kernel was built for.
    pub fn tile(&self) -> WinogradTile {
        self.tile
    }

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
                let points = self.tile.points();
                v.resize(points * self.v_point(block));
                // M's rows may be read a vector past their end.
                m.resize(points * self.m_point(block) + L);
                for t0 in (0..tiles).step_by(block) {
                    let part = t0..tiles.min(t0 + block);
                    let n = part.len();
                    let vp = SyncPtr::new(v);
                    crate::awake::for_each(c, |ic| {
                        with_kept_buffer(|plane| {
                            self.input_tiles(input, ic, part.clone(), vp, plane)
                        })
                    });
                    let (mp, vs, gs) = (SyncPtr::new(m), &v[..], gs(n));
                    let (stride, ld) = (self.v_point(n), self.m_ld(n));
                    // The points' A operands stream together.
                    let rows = if self.by_channels() { n } else { k };
                    let prefetch = points * rows * c >= PREFETCH_A_FROM;
                    crate::awake::for_each(points, |xi| {
                        let vx = PanelsRef::F32(&vs[xi * stride..(xi + 1) * stride]);
                        let (shape, a, b) = if self.by_channels() {
                            ((n, k, c), vx, BSource::Panels(self.u[xi].view()))
                        } else {
                            ((k, n, c), self.u[xi].view(), BSource::Panels(vx))
                        };
                        let c = mp.offset(xi * self.m_point(n));
                        let finishing = Finishing::Blocks(&|_, _| {});
                        let isa = self.isa;
                        gemm_streaming(prefetch, &gs, isa, false, shape, a, b, c, ld, finishing)
                    });
                    let ms: &[f32] = m;
                    crate::awake::for_each(k, |oc| {
                        with_kept_buffer(|staged| {
                            self.output_tiles(ms, oc, part.clone(), out, epi, residual, staged)
                        })
                    });
                }
            })
        })
    }

    /// Transforms input channel `ic` of the tiles `part` into V (see
    /// [`WinogradConv::v_at`]), with `plane` as scratch; compiled for the
    /// widest instruction set the layer runs.
    fn input_tiles(
        &self,
        input: &[f32],
        ic: usize,
        part: Range<usize>,
        v: SyncPtr,
        plane: &mut AlignedVec,
    ) {
        let args = (input, ic, part, v);
        match self.tile {
            WinogradTile::F4x4 => self.input_tiles_of::<4, 6, F4>(args, plane),
            WinogradTile::F2x2 => self.input_tiles_of::<2, 4, F2>(args, plane),
        }
    }

    /// [`WinogradConv::input_tiles`] with F(M x M, 3x3).
    fn input_tiles_of<const M: usize, const T: usize, F: Tile<M, T>>(
        &self,
        args: InputArgs<'_>,
        plane: &mut AlignedVec,
    ) {
        #[cfg(target_arch = "x86_64")]
        match self.isa {
            // SAFETY: the layer's isa is one this CPU has (`new`).
            Isa::Avx512 => return unsafe { self.input_tiles_avx512::<M, T, F>(args, plane) },
            Isa::Avx2 => return unsafe { self.input_tiles_avx2::<M, T, F>(args, plane) },
            Isa::Portable => {}
        }
        self.input_tiles_any::<false, M, T, F>(args, plane)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn input_tiles_avx512<const M: usize, const T: usize, F: Tile<M, T>>(
        &self,
        args: InputArgs<'_>,
        plane: &mut AlignedVec,
    ) {
        self.input_tiles_any::<true, M, T, F>(args, plane)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn input_tiles_avx2<const M: usize, const T: usize, F: Tile<M, T>>(
        &self,
        args: InputArgs<'_>,
        plane: &mut AlignedVec,
    ) {
        self.input_tiles_any::<false, M, T, F>(args, plane)
    }

    /// The input transform of L tiles at a time, consecutive in the pass
    /// (across rows of tiles on a small map), one per lane: the input rows
    /// under the pass are copied zero-padded into `plane`, each tile's T x
    /// T values gathered from it (`input_group_avx512` when `WIDE`),
    /// transformed along rows then columns, and each point's L values
    /// stored into V's panel with one vector store.
    #[inline(always)]
    fn input_tiles_any<const WIDE: bool, const M: usize, const T: usize, F: Tile<M, T>>(
        &self,
        (input, ic, part, v): InputArgs<'_>,
        plane: &mut AlignedVec,
    ) {
        let w = &self.w;
        let (c, (_, tw), p, n) = (w.in_channels, self.tiles(), w.padding, part.len());
        let stride = self.v_point(n);
        // Plane row r, column x: input row M * ty0 + r - p, column x - p.
        let ty0 = part.start / tw;
        let wp = M * tw + 2;
        let hp = M * (part.end.div_ceil(tw) - ty0) + 2;
        plane.resize(hp * wp);
        plane.fill(0.0);
        for (r, row) in plane.chunks_exact_mut(wp).enumerate() {
            let y = (M * ty0 + r).wrapping_sub(p);
            if y >= w.in_h {
                continue;
            }
            let row = &mut row[p..p + w.in_w];
            if self.nhwc {
                for (x, e) in row.iter_mut().enumerate() {
                    *e = input[(y * w.in_w + x) * c + ic];
                }
            } else {
                let at = (ic * w.in_h + y) * w.in_w;
                row.copy_from_slice(&input[at..at + w.in_w]);
            }
        }
        for j0 in (0..n).step_by(L) {
            let count = L.min(n - j0);
            // Lanes past the pass repeat its last tile.
            let corner = corners(part.start + j0, count, (tw, ty0), wp, M);
            #[cfg(target_arch = "x86_64")]
            if WIDE {
                // Corners grow with the lane: the last one's tile is the
                // furthest read.
                assert!(corner[L - 1] as usize + (T - 1) * (wp + 1) < plane.len());
                // SAFETY: every tile's 6x6 values lie inside the plane
                // (checked above); WIDE code runs only on AVX-512 CPUs.
                let columns = unsafe { input_group_avx512::<M, T, F>(plane, wp, &corner) };
                for (b, column) in columns.iter().enumerate() {
                    for (a, &values) in column.iter().enumerate() {
                        self.store_v_avx512(v, (T * a + b) * stride, (ic, j0), values, count);
                    }
                }
                continue;
            }
            let rows: [[Lanes; T]; T] =
                array(|i| F::input_1d(array(|j| gather(plane, i * wp + j, &corner))));
            let columns: [[Lanes; T]; T] = array(|b| F::input_1d(array(|i| rows[i][b])));
            for (b, column) in columns.iter().enumerate() {
                for (a, values) in column.iter().enumerate() {
                    self.store_v(v, (T * a + b) * stride, (ic, j0), values, count);
                }
            }
        }
    }

    /// [`WinogradConv::store_v`] of a vector register: one masked store per
    /// panel the values fall in (one store when they are a whole vector in
    /// one panel).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn store_v_avx512(
        &self,
        v: SyncPtr,
        base: usize,
        (ic, j0): (usize, usize),
        values: std::arch::x86_64::__m512,
        count: usize,
    ) {
        let pw = self.panel_width();
        let mut l = 0;
        while l < count {
            let run = (pw - (j0 + l) % pw).min(count - l);
            let mask = (((1u32 << run) - 1) << l) as u16;
            // Lane l lands on the run's first value: the vector's address
            // is l values before it, and its lanes outside the mask are
            // neither read nor written.
            let to = v
                .get()
                .wrapping_add(base + self.v_at(ic, j0 + l))
                .wrapping_sub(l);
            // SAFETY: as in `store_v`, for the `run` values the mask keeps.
            unsafe { std::arch::x86_64::_mm512_mask_storeu_ps(to, mask, values) };
            l += run;
        }
    }

    /// Stores the first `count` of one point's values of tiles j0.. of
    /// channel `ic` into V[ξ], which starts at `base`: one vector store
    /// when they are a whole vector in one panel, else one run of copies per
    /// panel they fall in (`mr`-tile panels are narrower than a vector).
    #[inline(always)]
    fn store_v(
        &self,
        v: SyncPtr,
        base: usize,
        (ic, j0): (usize, usize),
        values: &Lanes,
        count: usize,
    ) {
        let pw = self.panel_width();
        if count == L && j0 % pw + L <= pw {
            // SAFETY: the values of (ξ, ic, j0..j0 + L) are inside the
            // pass's V, consecutive in one panel, and only this task
            // transforms channel ic.
            unsafe { *v.get().add(base + self.v_at(ic, j0)).cast::<Lanes>() = *values };
            return;
        }
        let mut l = 0;
        while l < count {
            let run = (pw - (j0 + l) % pw).min(count - l);
            // SAFETY: as above; these `run` values are consecutive in one
            // panel.
            let to = unsafe { v.slice(base + self.v_at(ic, j0 + l), run) };
            for (t, &x) in to.iter_mut().zip(&values[l..l + run]) {
                *t = x;
            }
            l += run;
        }
    }

    /// Transforms output channel `oc`'s products of the tiles `part` back
    /// into pixels, through the epilogue, into `out`, with `staged` as
    /// scratch; compiled for the widest instruction set the layer runs.
    #[allow(clippy::too_many_arguments)]
    fn output_tiles(
        &self,
        m: &[f32],
        oc: usize,
        part: Range<usize>,
        out: SyncPtr,
        epi: &Epilogue,
        residual: Option<&[f32]>,
        staged: &mut AlignedVec,
    ) {
        let args = (m, oc, part, out, epi, residual);
        match self.tile {
            WinogradTile::F4x4 => self.output_tiles_of::<4, 6, F4>(args, staged),
            WinogradTile::F2x2 => self.output_tiles_of::<2, 4, F2>(args, staged),
        }
    }

    /// [`WinogradConv::output_tiles`] with F(M x M, 3x3).
    fn output_tiles_of<const M: usize, const T: usize, F: Tile<M, T>>(
        &self,
        args: OutputArgs<'_>,
        staged: &mut AlignedVec,
    ) {
        #[cfg(target_arch = "x86_64")]
        match self.isa {
            // SAFETY: the layer's isa is one this CPU has (`new`).
            Isa::Avx512 => return unsafe { self.output_tiles_avx512::<M, T, F>(args, staged) },
            Isa::Avx2 => return unsafe { self.output_tiles_avx2::<M, T, F>(args, staged) },
            Isa::Portable => {}
        }
        self.output_tiles_any::<false, M, T, F>(args, staged)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn output_tiles_avx512<const M: usize, const T: usize, F: Tile<M, T>>(
        &self,
        args: OutputArgs<'_>,
        staged: &mut AlignedVec,
    ) {
        self.output_tiles_any::<true, M, T, F>(args, staged)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn output_tiles_avx2<const M: usize, const T: usize, F: Tile<M, T>>(
        &self,
        args: OutputArgs<'_>,
        staged: &mut AlignedVec,
    ) {
        self.output_tiles_any::<false, M, T, F>(args, staged)
    }

    /// The output transform of L consecutive tiles at a time
    /// (`output_group_avx512` when `WIDE`; one vector
    /// load per point when tiles are vectorised, a gather when channels
    /// are), each tile's 4x4 values scattered into `staged` (the pass's
    /// rows of tiles of channel `oc`), then each output row copied out
    /// through the epilogue.
    #[inline(always)]
    fn output_tiles_any<const WIDE: bool, const M: usize, const T: usize, F: Tile<M, T>>(
        &self,
        (m, oc, part, out, epi, residual): OutputArgs<'_>,
        staged: &mut AlignedVec,
    ) {
        let w = &self.w;
        let (k, (_, tw), (oh, ow), n) =
            (w.out_channels, self.tiles(), (w.out_h, w.out_w), part.len());
        let (ld, point) = (self.m_ld(n), self.m_point(n));
        let (ty0, ty1) = (part.start / tw, part.end.div_ceil(tw));
        let wq = M * tw;
        staged.resize(M * (ty1 - ty0) * wq);
        for j0 in (0..n).step_by(L) {
            let count = L.min(n - j0);
            let last = |l: usize| j0 + l.min(count - 1);
            #[cfg(target_arch = "x86_64")]
            if WIDE {
                let corner = corners(part.start + j0, count, (tw, ty0), wq, M);
                assert!(corner[L - 1] as usize + (M - 1) * (wq + 1) < staged.len());
                let (first, at) = if self.by_channels() {
                    let at: Offsets = array(|l| (last(l) * k) as i32);
                    (oc, Some(at))
                } else {
                    (oc * ld + j0, None)
                };
                let furthest = at.map_or(L - 1, |at| at[L - 1] as usize);
                assert!((T * T - 1) * point + first + furthest < m.len());
                // SAFETY: the furthest value read of M and written of
                // `staged` are inside them (checked above); WIDE code runs
                // only on AVX-512 CPUs.
                unsafe {
                    output_group_avx512::<M, T, F>(
                        &m[first..],
                        point,
                        at.as_ref(),
                        staged,
                        wq,
                        &corner,
                        count,
                    )
                };
                continue;
            }
            let prods: [[Lanes; T]; T] = if self.by_channels() {
                let at: Offsets = array(|l| (last(l) * k) as i32);
                array(|i| array(|j| gather(m, (T * i + j) * point + oc, &at)))
            } else {
                // M's rows are padded to whole vectors (`m_ld`).
                array(|i| {
                    array(|j| {
                        let row = &m[(T * i + j) * point + oc * ld + j0..][..L];
                        lanes(|l| row[l])
                    })
                })
            };
            let y = transform_output::<M, T, F, Lanes>(&prods);
            let corner = corners(part.start + j0, count, (tw, ty0), wq, M);
            for (dy, row) in y.iter().enumerate() {
                for (dx, values) in row.iter().enumerate() {
                    scatter(staged, dy * wq + dx, &corner, values, count);
                }
            }
        }
        for ty in ty0..ty1 {
            let txs = part.start.max(ty * tw) - ty * tw..part.end.min((ty + 1) * tw) - ty * tw;
            let xs = M * txs.start..ow.min(M * txs.end);
            for y in M * ty..oh.min(M * ty + M) {
                let from = &staged[(y - M * ty0) * wq..][xs.clone()];
                if self.nhwc {
                    for (x, &acc) in xs.clone().zip(from) {
                        let i = (y * ow + x) * k + oc;
                        let r = residual.map_or(0.0, |r| r[i]);
                        // SAFETY: output i belongs to channel oc, which
                        // only this task finishes.
                        unsafe { *out.get().add(i) = epi.one(oc, acc, r) };
                    }
                } else {
                    let i = (oc * oh + y) * ow + xs.start;
                    // SAFETY: this row segment of channel oc is this task's.
                    let to = unsafe { out.slice(i, xs.len()) };
                    to.copy_from_slice(from);
                    epi.channel(oc, to, residual.map(|r| &r[i..i + xs.len()]));
                }
            }
        }
    }
}

/// What the input transform reads and writes: the input, the input
/// channel, the pass's tiles, and V.
type InputArgs<'a> = (&'a [f32], usize, Range<usize>, SyncPtr);

/// What the output transform reads and writes: the products, the output
/// channel, the pass's tiles, the output, its epilogue and residual.
type OutputArgs<'a> = (
    &'a [f32],
    usize,
    Range<usize>,
    SyncPtr,
    &'a Epilogue,
    Option<&'a [f32]>,
);

/// Offsets of L tiles' first values in a buffer, one per lane.
type Offsets = [i32; L];

/// Offsets of the `count` tiles (of side `m`) from `first` on in a buffer
/// of rows of tiles `row` values apart, the first row of tiles being
/// `ty0`; lanes past `count` repeat the last tile. One division per call:
/// the transforms ask for it once per L tiles, and a division per lane
/// cost more than the transform.
fn corners(first: usize, count: usize, (tw, ty0): (usize, usize), row: usize, m: usize) -> Offsets {
    let (mut ty, mut tx) = (first / tw - ty0, first % tw);
    let mut out = [0; L];
    for l in 0..L {
        out[l] = if l < count {
            (m * (ty * row + tx)) as i32
        } else {
            out[count - 1]
        };
        tx += 1;
        if tx == tw {
            (ty, tx) = (ty + 1, 0);
        }
    }
    out
}

/// `src[base + offsets[l]]` for each lane.
#[inline(always)]
fn gather(src: &[f32], base: usize, offsets: &Offsets) -> Lanes {
    lanes(|l| src[base + offsets[l] as usize])
}

/// `dst[base + offsets[l]] = values[l]` for the first `count` lanes.
#[inline(always)]
fn scatter(dst: &mut [f32], base: usize, offsets: &Offsets, values: &Lanes, count: usize) {
    for (l, &x) in values.iter().enumerate().take(count) {
        dst[base + offsets[l] as usize] = x;
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

        /// Both tile sizes, every register tile on every instruction set
        /// the CPU has, tile blocks from one tile up, both layouts, every
        /// epilogue.
        #[test]
        fn every_isa_tile_and_layout_matches_reference(
            w in winograd_workload(),
            small in any::<bool>(),
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
            let tile = if small { WinogradTile::F2x2 } else { WinogradTile::F4x4 };
            let weights = testing::weights(&w, seed);
            for isa in Isa::available() {
                let (needed, available) = tile_registers(mr, nr, isa);
                if needed > available {
                    continue;
                }
                let conv = WinogradConv::new(w, s, tile, &weights, nhwc, isa);
                let run = |x: &[f32], y: &mut [f32], epi: &Epilogue, r: Option<&[f32]>| {
                    if nhwc {
                        testing::through_nhwc(&w, x, y, r, |x, y, r| conv.run(x, y, epi, r));
                    } else {
                        conv.run(x, y, epi, r);
                    }
                };
                let e = testing::error(&w, &weights, (act, residual, seed), run);
                prop_assert!(e < WINOGRAD_TOLERANCE, "{tile:?} {isa:?} {s:?} {w}: error {e}");
            }
        }
    }

    /// The largest error of each tile size on ResNet- and VGG-sized
    /// layers, printed for the documentation (`--nocapture`) and held to
    /// the bound.
    #[test]
    fn error_on_network_layers_is_bounded() {
        let mut worst: f64 = 0.0;
        let layers = [(64, 32), (128, 16), (256, 8), (512, 7), (512, 4), (512, 2)];
        for ((c, hw), tile) in layers
            .into_iter()
            .flat_map(|l| [(l, WinogradTile::F4x4), (l, WinogradTile::F2x2)])
        {
            let w = Workload::new(c, c, 3, 1, 1, 1, hw, hw);
            let weights = testing::weights(&w, c as u64);
            let conv = WinogradConv::new(
                w,
                WinogradSchedule::default(),
                tile,
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
            dlas_core::outln!("{tile:?} {w}: relative L2 error {e:.2e}");
            worst = worst.max(e);
        }
        dlas_core::outln!("worst {worst:.2e} (direct and GEMM are held to {F32_TOLERANCE:e})");
        assert!(worst < WINOGRAD_TOLERANCE, "worst {worst}");
    }
}
