//! A convolution as im2col + GEMM: weights packed at load for the
//! schedule's orientation (or as block-sparse rows), and one sample run as
//! a GEMM per group in NCHW, NHWC or the transposed orientation.

use super::driver::{BSource, Finishing, Panels, PanelsRef, gemm, with_kept_buffer};
use super::pack::{pack_im2col, pack_nhwc_patches, pack_panels};
use super::sparse::{sparse_gemm, strip};
use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::Isa;
use crate::schedule::{GemmSchedule, ParallelLoop, VectorAxis};
use crate::sparse::BlockSparse;
use crate::workload::Workload;
use std::ops::Range;

/// Weights of a GEMM convolution, packed at load.
#[derive(Debug, Clone)]
enum Packed {
    /// Per group, in `mr` panels when they are A (the schedule vectorises
    /// pixels) or `nr` panels when they are B (output channels), the
    /// reduction ordered (ic, ky, kx) for NCHW and (ky, kx, ic) for NHWC,
    /// whose patches are channel-innermost.
    Dense(Vec<Panels>),
    /// NCHW, block-sparse weights per group.
    Sparse(Vec<BlockSparse>),
}

/// A convolution computed as a matrix multiplication.
#[derive(Debug, Clone)]
pub(crate) struct GemmConv {
    w: Workload,
    s: GemmSchedule,
    nhwc: bool,
    /// The microkernels' instruction set (the CPU's widest, or narrower in tests).
    isa: Isa,
    packed: Packed,
}

impl GemmConv {
    /// `weights` is (out, in / groups, k, k) row-major; `blocks` selects the
    /// sparse kernel with that BSR block shape; `nhwc` the activation
    /// layout; `half` stores dense weights as f16; `isa` must be one the
    /// CPU has, with registers for the schedule's tile.
    pub fn new(
        w: Workload,
        s: GemmSchedule,
        weights: &[f32],
        blocks: Option<(usize, usize)>,
        (nhwc, half): (bool, bool),
        isa: Isa,
    ) -> GemmConv {
        let (ocg, red, kk) = (
            w.out_channels_per_group(),
            w.reduction(),
            w.kernel * w.kernel,
        );
        let icg = w.in_channels_per_group();
        let group = |g: usize| &weights[g * ocg * red..(g + 1) * ocg * red];
        let width = match s.vectors {
            VectorAxis::Spatial => s.mr,
            VectorAxis::OutputChannels => s.nr,
        };
        let packed = match blocks {
            Some((r, c)) => Packed::Sparse(
                (0..w.groups)
                    .map(|g| BlockSparse::from_dense(group(g), ocg, red, r, c))
                    .collect(),
            ),
            None => Packed::Dense(
                (0..w.groups)
                    .map(|g| {
                        let wg = group(g);
                        let p = if nhwc {
                            pack_panels(ocg, red, width, |o, q| {
                                let (pos, ic) = (q / icg, q % icg);
                                wg[o * red + ic * kk + pos]
                            })
                        } else {
                            pack_panels(ocg, red, width, |o, q| wg[o * red + q])
                        };
                        Panels::new(p, half)
                    })
                    .collect(),
            ),
        };
        GemmConv {
            w,
            s,
            nhwc,
            isa,
            packed,
        }
    }

    /// One sample: `input` and `out` in the layout the weights were packed for.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        let w = &self.w;
        let c = SyncPtr::new(out);
        match &self.packed {
            Packed::Sparse(mats) => crate::awake::for_each(w.groups, |g| {
                let (red, ocg, pix) = (w.reduction(), w.out_channels_per_group(), w.out_pixels());
                let m = &mats[g];
                // im2col packed in panels of strip(r) columns (rows padded to
                // whole blocks): a task's panel stays in L1/L2 while every
                // weight row of the task streams over it.
                let krows = red.next_multiple_of(m.c);
                with_kept_buffer(|b| {
                    pack_im2col(input, w, g, (strip(m.r, pix), krows), b, self.isa);
                    sparse_gemm(
                        &self.s,
                        m,
                        b,
                        krows,
                        pix,
                        g * ocg,
                        c,
                        epi,
                        residual,
                        self.isa,
                    );
                })
            }),
            Packed::Dense(weights) => crate::awake::for_each(w.groups, |g| {
                let wg = weights[g].view();
                match (self.nhwc, self.s.vectors) {
                    (false, VectorAxis::Spatial) => self.nchw(wg, g, input, c, epi, residual),
                    (true, VectorAxis::OutputChannels) => self.nhwc(wg, g, input, c, epi, residual),
                    (false, VectorAxis::OutputChannels) | (true, VectorAxis::Spatial) => {
                        self.transposed(wg, g, input, c, epi, residual)
                    }
                }
            }),
        }
    }

    /// Whether [`GemmConv::band`] can run this layer: a dense, ungrouped
    /// 1x1 stride-1 NCHW layer whose weights are A (pixels vectorised).
    pub fn runs_bands(&self) -> bool {
        let w = &self.w;
        matches!(self.packed, Packed::Dense(_))
            && !self.nhwc
            && self.s.vectors == VectorAxis::Spatial
            && (w.kernel, w.stride, w.padding, w.groups) == (1, 1, 0, 1)
    }

    /// The weights' panel height: a band's channels start on a multiple.
    pub fn panel_rows(&self) -> usize {
        self.s.mr
    }

    /// Output channels `chans` (starting on a multiple of
    /// [`GemmConv::panel_rows`]) at input pixels `cols` of a layer that
    /// [`GemmConv::runs_bands`], into `out` (one row of `cols.len()` per
    /// channel), finished by `epi`; on this thread alone, as one task of
    /// the caller's parallel loop.
    pub fn band(
        &self,
        input: &[f32],
        chans: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        epi: &Epilogue,
    ) {
        debug_assert!(self.runs_bands() && chans.start.is_multiple_of(self.s.mr));
        let Packed::Dense(weights) = &self.packed else {
            unreachable!("only dense layers run bands")
        };
        let (m, n, k) = (chans.len(), cols.len(), self.w.in_channels);
        assert!(out.len() >= m * n, "the band's output holds its values");
        let a = weights[0]
            .view()
            .skip_panels(chans.start / self.s.mr, (k, self.s.mr));
        let b = BSource::Rows {
            x: &input[cols.start..],
            ld: self.w.out_pixels(),
        };
        let finishing = Finishing::Fused {
            bias: &epi.bias[chans],
            residual: None,
            act: epi.act,
        };
        // One block of rows: the whole band on this thread.
        let s = GemmSchedule {
            mc: m.next_multiple_of(self.s.mr),
            ..self.s
        };
        let c = SyncPtr::new(out);
        gemm(&s, self.isa, true, (m, n, k), a, b, c, n, finishing);
    }

    /// Whether the parallel loop runs over rows of C: the output dimension
    /// `parallel` names is the one that is not vectorised.
    fn par_m(&self) -> bool {
        match self.s.vectors {
            VectorAxis::Spatial => self.s.parallel == ParallelLoop::OutputChannels,
            VectorAxis::OutputChannels => self.s.parallel == ParallelLoop::Spatial,
        }
    }

    /// NCHW, pixels vectorised: C (channels x pixels) = W x im2col, the
    /// output itself; 1x1 stride-1 inputs are B as they are.
    fn nchw(
        &self,
        weights: PanelsRef<'_>,
        g: usize,
        input: &[f32],
        c: SyncPtr,
        epi: &Epilogue,
        residual: Option<&[f32]>,
    ) {
        let w = &self.w;
        let (ocg, icg, red, pix) = (
            w.out_channels_per_group(),
            w.in_channels_per_group(),
            w.reduction(),
            w.out_pixels(),
        );
        let b = if w.kernel == 1 && w.stride == 1 && w.padding == 0 {
            BSource::Rows {
                x: &input[g * icg * pix..(g + 1) * icg * pix],
                ld: pix,
            }
        } else {
            BSource::Im2col { input, w, g }
        };
        // Every activation is applied in the tiles' stores.
        let finishing = Finishing::Fused {
            bias: &epi.bias[g * ocg..(g + 1) * ocg],
            residual: residual.map(|x| &x[g * ocg * pix..(g + 1) * ocg * pix]),
            act: epi.act,
        };
        let cg = c.offset(g * ocg * pix);
        let shape = (ocg, pix, red);
        gemm(
            &self.s,
            self.isa,
            self.par_m(),
            shape,
            weights,
            b,
            cg,
            pix,
            finishing,
        );
    }

    /// NHWC, channels vectorised: C (pixels x channels) = im2col x W^T, the
    /// output itself.
    fn nhwc(
        &self,
        weights: PanelsRef<'_>,
        g: usize,
        input: &[f32],
        c: SyncPtr,
        epi: &Epilogue,
        residual: Option<&[f32]>,
    ) {
        let w = &self.w;
        let (ocg, red, pix, cout) = (
            w.out_channels_per_group(),
            w.reduction(),
            w.out_pixels(),
            w.out_channels,
        );
        let epi_block = |rows: Range<usize>, cols: Range<usize>| {
            for px in rows {
                let off = px * cout + g * ocg + cols.start;
                // SAFETY: this block's rows and columns belong to this task.
                let o = unsafe { c.slice(off, cols.len()) };
                let res = residual.map(|x| &x[off..][..cols.len()]);
                epi.pixel(g * ocg + cols.start, o, res);
            }
        };
        let b = BSource::Panels(weights);
        let finishing = Finishing::Blocks(&epi_block);
        let (cg, shape) = (c.offset(g * ocg), (pix, ocg, red));
        with_kept_buffer(|patches| {
            pack_nhwc_patches(input, w, g, self.s.mr, patches);
            let a = PanelsRef::F32(patches);
            gemm(
                &self.s,
                self.isa,
                self.par_m(),
                shape,
                a,
                b,
                cg,
                cout,
                finishing,
            )
        })
    }

    /// The other orientation of either layout: C^T (pixels x channels in
    /// NCHW, channels x pixels in NHWC) into a buffer, then transposed into
    /// the output with the epilogue. The transpose costs a pass over the
    /// output, which the layers this pays for (few pixels, many channels
    /// and a long reduction) hardly notice.
    fn transposed(
        &self,
        weights: PanelsRef<'_>,
        g: usize,
        input: &[f32],
        c: SyncPtr,
        epi: &Epilogue,
        residual: Option<&[f32]>,
    ) {
        let w = &self.w;
        let (ocg, red, pix, cout) = (
            w.out_channels_per_group(),
            w.reduction(),
            w.out_pixels(),
            w.out_channels,
        );
        // C^T's rows and columns, and where output (oc, px) of the group is.
        let (m, n) = if self.nhwc { (ocg, pix) } else { (pix, ocg) };
        let at = |oc: usize, px: usize| {
            if self.nhwc {
                px * cout + g * ocg + oc
            } else {
                (g * ocg + oc) * pix + px
            }
        };
        with_kept_buffer(|ct| {
            ct.resize(m * n);
            let ctp = SyncPtr::new(ct);
            let epi_block = |rows: Range<usize>, cols: Range<usize>| {
                for r in rows {
                    for col in cols.clone() {
                        let (oc, px) = if self.nhwc { (r, col) } else { (col, r) };
                        let i = at(oc, px);
                        // SAFETY: this block of C^T and its outputs are this
                        // task's alone.
                        unsafe {
                            let v = *ctp.get().add(r * n + col);
                            let res = residual.map_or(0.0, |x| x[i]);
                            *c.get().add(i) = epi.one(g * ocg + oc, v, res);
                        }
                    }
                }
            };
            let finishing = Finishing::Blocks(&epi_block);
            let shape = (m, n, red);
            if self.nhwc {
                with_kept_buffer(|patches| {
                    pack_nhwc_patches(input, w, g, self.s.nr, patches);
                    let b = BSource::Panels(PanelsRef::F32(patches));
                    let (s, isa, par_m) = (&self.s, self.isa, self.par_m());
                    gemm(s, isa, par_m, shape, weights, b, ctp, n, finishing)
                })
            } else {
                with_kept_buffer(|a| {
                    pack_im2col(input, w, g, (self.s.mr, red), a, self.isa);
                    let (a, b) = (PanelsRef::F32(a), BSource::Panels(weights));
                    gemm(
                        &self.s,
                        self.isa,
                        self.par_m(),
                        shape,
                        a,
                        b,
                        ctp,
                        n,
                        finishing,
                    );
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, F32_TOLERANCE};
    use crate::tiles::{GEMM_TILES, tile_registers};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The dense NCHW GEMM with every tile on every instruction set
        /// the CPU has, both parallel loops, both vector axes, fused and
        /// unfused finishing.
        #[test]
        fn every_isa_and_tile_matches_reference(
            w in testing::dense_workload(),
            tile in 0..GEMM_TILES.len(),
            (kc, mc, nc) in (1usize..5, 1usize..4, 1usize..4),
            parallel in prop_oneof![Just(ParallelLoop::OutputChannels), Just(ParallelLoop::Spatial)],
            vectors in prop_oneof![Just(VectorAxis::Spatial), Just(VectorAxis::OutputChannels)],
            act in testing::activation(),
            residual in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let (mr, nr) = GEMM_TILES[tile];
            let s = GemmSchedule { mr, nr, kc: 8 * kc, mc: mr * mc, nc: nr * nc, parallel, vectors };
            let weights = testing::weights(&w, seed);
            for isa in Isa::available() {
                let (needed, available) = tile_registers(mr, nr, isa);
                if needed > available {
                    continue;
                }
                let conv = GemmConv::new(w, s, &weights, None, (false, false), isa);
                let e = testing::error(&w, &weights, (act, residual, seed), |x, y, epi, r| {
                    conv.run(x, y, epi, r)
                });
                prop_assert!(e < F32_TOLERANCE, "{isa:?} {s:?} {w}: error {e}");
            }
        }

        /// The block-sparse GEMM on every instruction set the CPU has, for
        /// every block shape the engine accepts.
        #[test]
        fn sparse_on_every_isa_matches_reference(
            w in testing::dense_workload(),
            blocks in (prop_oneof![Just(1usize), Just(2), Just(4), Just(8)], 1usize..=16),
            sparsity in 0.0f64..0.97,
            (mc, nc) in (1usize..40, 1usize..80),
            parallel in prop_oneof![Just(ParallelLoop::OutputChannels), Just(ParallelLoop::Spatial)],
            act in testing::activation(),
            residual in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let s = GemmSchedule { mc, nc, parallel, ..GemmSchedule::default() };
            let weights = testing::sparsify(&testing::weights(&w, seed), sparsity, seed);
            for isa in Isa::available() {
                let conv = GemmConv::new(w, s, &weights, Some(blocks), (false, false), isa);
                let e = testing::error(&w, &weights, (act, residual, seed), |x, y, epi, r| {
                    conv.run(x, y, epi, r)
                });
                prop_assert!(e < F32_TOLERANCE, "{isa:?} {blocks:?} {s:?} {w}: error {e}");
            }
        }
    }
}
