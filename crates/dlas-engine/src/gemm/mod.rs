//! im2col + GEMM convolution, dense and block-sparse.
//!
//! Dense: C = A * B, BLIS style. The weight operand is packed once at load
//! (A panels for NCHW, B panels for NHWC). The activation operand is never
//! materialised as an im2col matrix: each task packs the `kc` x `nc` block
//! of B it is about to use, straight from the input, so the block is in L2
//! when the microkernels stream it (when the parallel loop runs over rows of
//! C, every task needs all of B and it is packed once, in parallel). The
//! input of a 1x1 stride-1 convolution already is B, row-major, and the
//! microkernels read it in place. The microkernel's store adds the bias
//! and residual and applies ReLU/ReLU6 on the last reduction block (see
//! `micro`); other activations and the NHWC layout finish each block of C
//! with the [`Epilogue`] once its reduction is complete.
//!
//! Sparse (NCHW only): see `sparse`.

mod micro;
mod pack;
mod sparse;

pub(crate) use micro::tile_isa;
pub(crate) use pack::{pack_columns, pack_im2col_with};
pub(crate) use sparse::{sparse_gemm, strip};

use crate::aligned::AlignedVec;
use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::Isa;
use crate::schedule::{GemmSchedule, ParallelLoop, VectorAxis};
use crate::sparse::BlockSparse;
use crate::workload::Workload;
use half::f16;
use half::slice::HalfFloatSliceExt;
use micro::{Finish, Store, microkernel};
use pack::{pack_im2col, pack_im2col_block, pack_panels};
use rayon::prelude::*;
use std::cell::RefCell;
use std::ops::Range;

/// Packed panels of a GEMM operand, in f32 or stored as f16 (fp16 weights).
#[derive(Debug, Clone)]
pub(crate) enum Panels {
    F32(AlignedVec),
    F16(Vec<f16>),
}

impl Panels {
    fn new(values: Vec<f32>, half: bool) -> Panels {
        if half {
            let mut h = vec![f16::ZERO; values.len()];
            h.convert_from_f32_slice(&values);
            Panels::F16(h)
        } else {
            Panels::F32(AlignedVec::from(&values[..]))
        }
    }

    fn view(&self) -> PanelsRef<'_> {
        match self {
            Panels::F32(v) => PanelsRef::F32(v),
            Panels::F16(v) => PanelsRef::F16(v),
        }
    }
}

/// Packed panels as [`gemm`] reads them: held at load, or packed by a run.
#[derive(Clone, Copy)]
pub(crate) enum PanelsRef<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl PanelsRef<'_> {
    /// Panels `panels` restricted to reduction rows pc..pc+kb, as f32: the
    /// f32 panels themselves, or f16 ones converted (F16C where the CPU has
    /// it) into `buf` once per cache block. Returns the base pointer, the
    /// distance between panels, and the first panel the base stands for.
    fn block(
        self,
        buf: &mut AlignedVec,
        panels: Range<usize>,
        (k, width): (usize, usize),
        (pc, kb): (usize, usize),
    ) -> (*const f32, usize, usize) {
        match self {
            PanelsRef::F32(v) => (v[pc * width..].as_ptr(), k * width, 0),
            PanelsRef::F16(v) => {
                buf.resize(panels.len() * kb * width);
                for (i, p) in panels.clone().enumerate() {
                    v[(p * k + pc) * width..][..kb * width]
                        .convert_to_f32_slice(&mut buf[i * kb * width..(i + 1) * kb * width]);
                }
                (buf.as_ptr(), kb * width, panels.start)
            }
        }
    }
}

/// The B operand (k x n) of [`gemm`].
#[derive(Clone, Copy)]
pub(crate) enum BSource<'a> {
    /// Packed in `nr`-column panels holding all of K.
    Panels(PanelsRef<'a>),
    /// Row-major with row stride n: the input of a 1x1 stride-1 convolution.
    Rows(&'a [f32]),
    /// The im2col matrix of group `g` of an NCHW input.
    Im2col {
        input: &'a [f32],
        w: &'a Workload,
        g: usize,
    },
}

/// How [`gemm`] finishes C.
pub(crate) enum Finishing<'a> {
    /// In the microkernel's store: `bias` per row of C, `residual` at C's
    /// offsets (row stride ldc), then a clamp (see `Activation::clamp`).
    Fused {
        bias: &'a [f32],
        residual: Option<&'a [f32]>,
        clamp: Option<(f32, f32)>,
    },
    /// Called with each finished block of C (rows, columns).
    Blocks(&'a (dyn Fn(Range<usize>, Range<usize>) + Sync)),
}

/// Buffers a task packs into, kept by each pool thread across runs so a
/// run allocates none.
#[derive(Default)]
struct Scratch {
    a: AlignedVec,
    b: AlignedVec,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
    static KEPT: RefCell<Vec<AlignedVec>> = RefCell::default();
}

/// Runs `f` with a buffer this thread keeps across runs, for what all of
/// a layer's tasks share (B packed once, a transposed C). The thread keeps
/// a few: a layer may need two, and a thread waiting for its tasks may run
/// another layer's (grouped convolutions run groups in parallel).
pub(crate) fn with_kept_buffer<R>(f: impl FnOnce(&mut AlignedVec) -> R) -> R {
    let mut buf = KEPT.with_borrow_mut(Vec::pop).unwrap_or_default();
    let result = f(&mut buf);
    KEPT.with_borrow_mut(|kept| kept.push(buf));
    result
}

/// One task's `kb` x `nc` block of B: where panel `jr` starts and its row
/// stride.
struct BBlock {
    base: *const f32,
    /// Distance between consecutive panels, and the panel `base` is.
    stride: usize,
    first: usize,
    ldb: usize,
    /// A partial last panel of `BSource::Rows`, copied (zero-padded) so no
    /// microkernel reads past the input: (panel, its copy).
    edge: Option<(usize, *const f32)>,
}

impl BBlock {
    /// Packs (if need be) panels `panels` over reduction rows pc..pc+kb
    /// into `buf`.
    fn new(
        b: BSource<'_>,
        buf: &mut AlignedVec,
        panels: Range<usize>,
        (n, k, nr): (usize, usize, usize),
        (pc, kb): (usize, usize),
        isa: Isa,
    ) -> BBlock {
        match b {
            BSource::Panels(p) => {
                let (base, stride, first) = p.block(buf, panels, (k, nr), (pc, kb));
                BBlock {
                    base,
                    stride,
                    first,
                    ldb: nr,
                    edge: None,
                }
            }
            BSource::Rows(x) => {
                let last = panels.end - 1;
                let edge = (n < (last + 1) * nr).then(|| {
                    let valid = n - last * nr;
                    buf.resize(kb * nr);
                    buf.fill(0.0);
                    for (dst, src) in buf.chunks_exact_mut(nr).zip(x[pc * n..].chunks(n)) {
                        dst[..valid].copy_from_slice(&src[last * nr..][..valid]);
                    }
                    (last, buf.as_ptr())
                });
                BBlock {
                    base: x[pc * n..].as_ptr(),
                    stride: nr,
                    first: 0,
                    ldb: n,
                    edge,
                }
            }
            BSource::Im2col { input, w, g } => {
                buf.resize(panels.len() * kb * nr);
                pack_im2col_block(input, w, g, nr, (panels.clone(), pc..pc + kb), buf, isa);
                BBlock {
                    base: buf.as_ptr(),
                    stride: kb * nr,
                    first: panels.start,
                    ldb: nr,
                    edge: None,
                }
            }
        }
    }

    /// Panel `jr` and its row stride.
    fn panel(&self, jr: usize) -> (*const f32, usize) {
        match self.edge {
            // The copy is packed: its rows are one panel (nr = stride) apart.
            Some((e, p)) if e == jr => (p, self.stride),
            _ => (
                self.base.wrapping_add((jr - self.first) * self.stride),
                self.ldb,
            ),
        }
    }
}

/// C (m x n, row stride ldc) = A * B, A packed in `mr` panels, on the
/// current thread pool with schedule `s` and the microkernels of `isa`.
/// `par_m` runs the parallel loop over blocks of rows of C, else columns.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm(
    s: &GemmSchedule,
    isa: Isa,
    par_m: bool,
    (m, n, k): (usize, usize, usize),
    a: PanelsRef<'_>,
    b: BSource<'_>,
    c: SyncPtr,
    ldc: usize,
    finishing: Finishing<'_>,
) {
    if let (true, BSource::Im2col { input, w, g }) = (par_m, b) {
        // Every row block needs all of B: pack it once, in parallel.
        return with_kept_buffer(|packed| {
            pack_im2col(input, w, g, (s.nr, k), packed, isa);
            let b = BSource::Panels(PanelsRef::F32(packed));
            gemm(s, isa, par_m, (m, n, k), a, b, c, ldc, finishing)
        });
    }
    let micro = microkernel(s.mr, s.nr, isa);
    let (mr, nr) = (s.mr, s.nr);
    let (mchunks, nchunks) = (m.div_ceil(s.mc), n.div_ceil(s.nc));
    let rows_of = |i: usize| i * s.mc..m.min((i + 1) * s.mc);
    let task = |is: Range<usize>, js: Range<usize>| {
        SCRATCH.with_borrow_mut(|scratch| {
            for j in js {
                let cols = j * s.nc..n.min((j + 1) * s.nc);
                let b_panels = cols.start / nr..cols.end.div_ceil(nr);
                for pc in (0..k).step_by(s.kc) {
                    let kb = s.kc.min(k - pc);
                    let last = pc + kb == k;
                    let bb = BBlock::new(
                        b,
                        &mut scratch.b,
                        b_panels.clone(),
                        (n, k, nr),
                        (pc, kb),
                        isa,
                    );
                    for i in is.clone() {
                        let rows = rows_of(i);
                        let a_panels = rows.start / mr..rows.end.div_ceil(mr);
                        let (a0, astride, afirst) =
                            a.block(&mut scratch.a, a_panels.clone(), (k, mr), (pc, kb));
                        for jr in b_panels.clone() {
                            let (bp, ldb) = bb.panel(jr);
                            for ir in a_panels.clone() {
                                let (r0, c0) = (ir * mr, jr * nr);
                                let off = r0 * ldc + c0;
                                let finish = match (&finishing, last) {
                                    (
                                        Finishing::Fused {
                                            bias,
                                            residual,
                                            clamp,
                                        },
                                        true,
                                    ) => Some(Finish {
                                        bias: bias[r0..].as_ptr(),
                                        residual: residual
                                            .map_or(std::ptr::null(), |r| r[off..].as_ptr()),
                                        clamp: *clamp,
                                    }),
                                    _ => None,
                                };
                                let st = Store {
                                    c: c.get().wrapping_add(off),
                                    ldc,
                                    rows: mr.min(m - r0),
                                    cols: nr.min(n - c0),
                                    accumulate: pc > 0,
                                    finish,
                                };
                                let ap = a0.wrapping_add((ir - afirst) * astride);
                                // SAFETY: `block` and `BBlock` return panels of kb
                                // reduction rows covering a_panels and b_panels;
                                // the tile's valid rows and columns lie in this
                                // task's block of C, which no other task writes.
                                unsafe { micro(kb, ap, bp, ldb, &st) };
                            }
                        }
                    }
                }
                if let Finishing::Blocks(f) = finishing {
                    for i in is.clone() {
                        f(rows_of(i), cols.clone());
                    }
                }
            }
        })
    };
    if par_m {
        (0..mchunks)
            .into_par_iter()
            .for_each(|i| task(i..i + 1, 0..nchunks));
    } else {
        (0..nchunks)
            .into_par_iter()
            .for_each(|j| task(0..mchunks, j..j + 1));
    }
}

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
            Packed::Sparse(mats) => (0..w.groups).into_par_iter().for_each(|g| {
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
            Packed::Dense(weights) => (0..w.groups).into_par_iter().for_each(|g| {
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
            BSource::Rows(&input[g * icg * pix..(g + 1) * icg * pix])
        } else {
            BSource::Im2col { input, w, g }
        };
        let epi_block = |rows: Range<usize>, cols: Range<usize>| {
            for r in rows {
                let oc = g * ocg + r;
                // SAFETY: this block's rows and columns belong to this task.
                let o = unsafe { c.slice(oc * pix + cols.start, cols.len()) };
                let res = residual.map(|x| &x[oc * pix + cols.start..][..cols.len()]);
                epi.channel(oc, o, res);
            }
        };
        let finishing = match epi.act.clamp() {
            Some(clamp) => Finishing::Fused {
                bias: &epi.bias[g * ocg..(g + 1) * ocg],
                residual: residual.map(|x| &x[g * ocg * pix..(g + 1) * ocg * pix]),
                clamp,
            },
            None => Finishing::Blocks(&epi_block),
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
        let a = Panels::new(self.nhwc_patches(input, g, self.s.mr), false);
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
        gemm(
            &self.s,
            self.isa,
            self.par_m(),
            shape,
            a.view(),
            b,
            cg,
            cout,
            finishing,
        );
    }

    /// The NHWC input's patches of group g (pixels x reduction, ordered
    /// (ky, kx, ic)) packed in panels of `width` pixels.
    fn nhwc_patches(&self, input: &[f32], g: usize, width: usize) -> Vec<f32> {
        let w = &self.w;
        let (k, s, p) = (w.kernel, w.stride, w.padding as isize);
        let (icg, cin, ow) = (w.in_channels_per_group(), w.in_channels, w.out_w);
        pack_panels(w.out_pixels(), w.reduction(), width, |pixel, q| {
            let (pos, ic) = (q / icg, q % icg);
            let iy = ((pixel / ow) * s + pos / k) as isize - p;
            let ix = ((pixel % ow) * s + pos % k) as isize - p;
            if iy < 0 || ix < 0 || iy >= w.in_h as isize || ix >= w.in_w as isize {
                return 0.0;
            }
            input[(iy as usize * w.in_w + ix as usize) * cin + g * icg + ic]
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
                let b = Panels::new(self.nhwc_patches(input, g, self.s.nr), false);
                let b = BSource::Panels(b.view());
                gemm(
                    &self.s,
                    self.isa,
                    self.par_m(),
                    shape,
                    weights,
                    b,
                    ctp,
                    n,
                    finishing,
                );
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
    use crate::schedule::{GEMM_TILES, tile_registers};
    use crate::testing::{self, F32_TOLERANCE};
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
