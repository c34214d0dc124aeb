//! im2col + GEMM convolution, dense and block-sparse.
//!
//! Dense: C = A * B with both operands in panel-major packed form. The
//! weight operand is packed once at load (A panels for NCHW, B panels for
//! NHWC); the activation operand is packed per run straight from the input
//! tensor, so no separate im2col matrix is ever materialised (for a 1x1
//! stride-1 convolution the packing is a plain copy). Panels hold the whole
//! reduction dimension, so any `kc` block is a contiguous slice of a panel.
//!
//! Sparse (NCHW only): the im2col matrix is materialised row-major and each
//! stored weight block scales rows of it into register-resident strips of C.

use crate::epilogue::{Epilogue, SyncPtr, has_avx2_fma, madd};
use crate::schedule::{GemmSchedule, ParallelLoop};
use crate::sparse::BlockSparse;
use crate::workload::Workload;
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;
use std::ops::Range;

/// Packed panels of a GEMM operand, in f32 or stored as f16 (fp16 weights).
#[derive(Debug, Clone)]
pub(crate) enum Panels {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Panels {
    fn new(values: Vec<f32>, half: bool) -> Panels {
        if half {
            let mut h = vec![f16::ZERO; values.len()];
            h.convert_from_f32_slice(&values);
            Panels::F16(h)
        } else {
            Panels::F32(values)
        }
    }

    /// Panels `panels` restricted to reduction rows pc..pc+kb, as f32: the
    /// f32 panels themselves, or f16 ones converted (F16C where the CPU has
    /// it) into `buf` once per cache block. Returns the base pointer, the
    /// distance between panels, and the first panel the base stands for.
    fn block(
        &self,
        buf: &mut Vec<f32>,
        panels: Range<usize>,
        (k, width): (usize, usize),
        (pc, kb): (usize, usize),
    ) -> (*const f32, usize, usize) {
        match self {
            Panels::F32(v) => (v[pc * width..].as_ptr(), k * width, 0),
            Panels::F16(v) => {
                buf.resize(panels.len() * kb * width, 0.0);
                for (i, p) in panels.clone().enumerate() {
                    v[(p * k + pc) * width..][..kb * width]
                        .convert_to_f32_slice(&mut buf[i * kb * width..(i + 1) * kb * width]);
                }
                (buf.as_ptr(), kb * width, panels.start)
            }
        }
    }
}

/// `c[MR x NR] (+)= a_panel[k x MR]^T * b_panel[k x NR]`, row stride `ldc`.
type Micro = unsafe fn(usize, *const f32, *const f32, *mut f32, usize, bool);

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn micro_avx2<const MR: usize, const NV: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller passes panels of at least k*MR and k*NV*8 floats and
    // a C tile of MR rows of NV*8 floats with row stride ldc.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); NV]; MR];
        let (mut a, mut b) = (a, b);
        for _ in 0..k {
            let mut bv = [_mm256_setzero_ps(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = _mm256_loadu_ps(b.add(8 * v));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_ps(*a.add(i));
                for (x, bx) in row.iter_mut().zip(&bv) {
                    *x = _mm256_fmadd_ps(av, *bx, *x);
                }
            }
            a = a.add(MR);
            b = b.add(8 * NV);
        }
        for (i, row) in acc.iter().enumerate() {
            for (v, x) in row.iter().enumerate() {
                let p = c.add(i * ldc + 8 * v);
                let mut x = *x;
                if accumulate {
                    x = _mm256_add_ps(x, _mm256_loadu_ps(p));
                }
                _mm256_storeu_ps(p, x);
            }
        }
    }
}

unsafe fn micro_portable<const MR: usize, const NR: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    // SAFETY: as for `micro_avx2`.
    unsafe {
        let mut acc = [[0.0f32; NR]; MR];
        for p in 0..k {
            let bp = std::slice::from_raw_parts(b.add(p * NR), NR);
            for (i, row) in acc.iter_mut().enumerate() {
                let av = *a.add(p * MR + i);
                for (x, bx) in row.iter_mut().zip(bp) {
                    *x += av * bx;
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (j, x) in row.iter().enumerate() {
                let p = c.add(i * ldc + j);
                *p = if accumulate { *p + x } else { *x };
            }
        }
    }
}

/// The microkernel for an `mr` x `nr` tile (one of [`crate::schedule::GEMM_TILES`]).
fn microkernel(mr: usize, nr: usize) -> Micro {
    macro_rules! pick {
        ($(($m:literal, $n:literal, $nv:literal)),*) => {
            match (mr, nr) {
                $(
                    #[cfg(target_arch = "x86_64")]
                    ($m, $n) if has_avx2_fma() => micro_avx2::<$m, $nv>,
                    ($m, $n) => micro_portable::<$m, $n>,
                )*
                _ => unreachable!("schedules are validated against GEMM_TILES"),
            }
        };
    }
    pick!((6, 16, 2), (4, 24, 3), (8, 8, 1), (4, 16, 2), (4, 8, 1))
}

/// Packs `count` vectors of length `k` (rows of A or columns of B) into
/// panels of `width` vectors: panel p holds, for each kk, the values
/// `get(p * width + j, kk)` for j in 0..width, zero past `count`.
pub(crate) fn pack_panels(
    count: usize,
    k: usize,
    width: usize,
    get: impl Fn(usize, usize) -> f32 + Sync,
) -> Vec<f32> {
    let mut out = vec![0.0; count.div_ceil(width) * k * width];
    out.par_chunks_mut(k * width)
        .enumerate()
        .for_each(|(p, panel)| {
            for j in 0..width.min(count - p * width) {
                for kk in 0..k {
                    panel[kk * width + j] = get(p * width + j, kk);
                }
            }
        });
    out
}

/// The im2col matrix of group `g` of an NCHW sample (rows: reduction index
/// ic * k * k + ky * k + kx, padded with zero rows to `krows`; columns:
/// output pixels), packed straight from the input in panels of `width`
/// columns. Each panel first computes its columns' window origins, so the
/// inner loop is an add, a bounds check and a load.
pub(crate) fn pack_im2col(
    input: &[f32],
    w: &Workload,
    g: usize,
    width: usize,
    krows: usize,
) -> Vec<f32> {
    pack_im2col_with(input, w, g, width, krows, |x| x)
}

/// [`pack_im2col`] with each input value mapped by `f` (padding stays
/// `T::default()`, so `f` must map the input's zero to it).
pub(crate) fn pack_im2col_with<S: Copy + Sync, T: Copy + Default + Send>(
    input: &[S],
    w: &Workload,
    g: usize,
    width: usize,
    krows: usize,
    f: impl Fn(S) -> T + Sync,
) -> Vec<T> {
    let ow = w.out_w;
    pack_columns(
        input,
        w,
        g,
        (width, krows),
        w.out_pixels(),
        |col| Some((col / ow, col % ow)),
        f,
    )
}

/// The im2col matrix with an arbitrary column order: column `col` (of
/// `columns`) is output pixel `pixel(col)` = (oy, ox), or all zeros for
/// `None`. Spatial pack uses it to lay pixels out tile by tile.
pub(crate) fn pack_columns<S: Copy + Sync, T: Copy + Default + Send>(
    input: &[S],
    w: &Workload,
    g: usize,
    (width, krows): (usize, usize),
    columns: usize,
    pixel: impl Fn(usize) -> Option<(usize, usize)> + Sync,
    f: impl Fn(S) -> T + Sync,
) -> Vec<T> {
    let (k, s, p) = (w.kernel, w.stride as isize, w.padding as isize);
    let (ih, iw) = (w.in_h as isize, w.in_w);
    let icg = w.in_channels_per_group();
    let plane = w.in_h * w.in_w;
    let mut out = vec![T::default(); columns.div_ceil(width) * krows * width];
    out.par_chunks_mut(krows * width)
        .enumerate()
        .for_each(|(panel_index, panel)| {
            let cols = width.min(columns - panel_index * width);
            // Window origin of each column; padding columns get one that is
            // outside every input, so they stay zero.
            let origin: Vec<(isize, isize)> = (0..cols)
                .map(|j| match pixel(panel_index * width + j) {
                    Some((oy, ox)) => (oy as isize * s - p, ox as isize * s - p),
                    None => (isize::MIN / 2, 0),
                })
                .collect();
            // Stride 1: split the panel into runs of consecutive pixels of
            // one output row (j0, length, window origin); each tap then reads
            // one contiguous stretch of an input row per run.
            let mut runs: Vec<(usize, usize, isize, isize)> = Vec::new();
            if s == 1 {
                for (j, &(y0, x0)) in origin.iter().enumerate() {
                    match runs.last_mut() {
                        Some((j0, len, ry, rx))
                            if *ry == y0 && *rx + (j - *j0) as isize == x0 && *j0 + *len == j =>
                        {
                            *len += 1
                        }
                        _ => runs.push((j, 1, y0, x0)),
                    }
                }
            }
            let mut q = 0;
            for i in 0..icg {
                let src = &input[(g * icg + i) * plane..][..plane];
                for ky in 0..k as isize {
                    for kx in 0..k as isize {
                        let dst = &mut panel[q * width..q * width + cols];
                        q += 1;
                        if s == 1 {
                            for &(j0, len, y0, x0) in &runs {
                                let (iy, x0) = (y0 + ky, x0 + kx);
                                if iy < 0 || iy >= ih {
                                    continue;
                                }
                                // Columns j of the run with 0 <= x0 + j < iw.
                                let lo = (-x0).clamp(0, len as isize) as usize;
                                let hi = (iw as isize - x0).clamp(0, len as isize) as usize;
                                if lo < hi {
                                    let row = &src[iy as usize * iw..][..iw];
                                    let start = (x0 + lo as isize) as usize;
                                    let d = &mut dst[j0 + lo..j0 + hi];
                                    for (d, &v) in d.iter_mut().zip(&row[start..start + hi - lo]) {
                                        *d = f(v);
                                    }
                                }
                            }
                            continue;
                        }
                        for (d, &(y0, x0)) in dst.iter_mut().zip(&origin) {
                            let (iy, ix) = (y0 + ky, x0 + kx);
                            if iy >= 0 && iy < ih && ix >= 0 && (ix as usize) < iw {
                                *d = f(src[iy as usize * iw + ix as usize]);
                            }
                        }
                    }
                }
            }
        });
    out
}

/// C (m x n, row stride ldc) = A * B from packed operands; `epi(rows, cols)`
/// finishes each block of C once its reduction is complete.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_packed(
    s: &GemmSchedule,
    par_m: bool,
    (m, n, k): (usize, usize, usize),
    a: &Panels,
    b: &Panels,
    c: SyncPtr,
    ldc: usize,
    epi: &(dyn Fn(Range<usize>, Range<usize>) + Sync),
) {
    let micro = microkernel(s.mr, s.nr);
    let (mr, nr) = (s.mr, s.nr);
    let tile = |i: usize, j: usize| {
        let rows = i * s.mc..m.min((i + 1) * s.mc);
        let cols = j * s.nc..n.min((j + 1) * s.nc);
        let (a_panels, b_panels) = (
            rows.start / mr..rows.end.div_ceil(mr),
            cols.start / nr..cols.end.div_ceil(nr),
        );
        let (mut abuf, mut bbuf) = (Vec::new(), Vec::new());
        for pc in (0..k).step_by(s.kc) {
            let kb = s.kc.min(k - pc);
            let (a0, astride, afirst) = a.block(&mut abuf, a_panels.clone(), (k, mr), (pc, kb));
            let (b0, bstride, bfirst) = b.block(&mut bbuf, b_panels.clone(), (k, nr), (pc, kb));
            for jr in b_panels.clone() {
                // SAFETY: `block` returned panels covering a_panels and b_panels.
                let bp = unsafe { b0.add((jr - bfirst) * bstride) };
                for ir in a_panels.clone() {
                    // SAFETY: as above.
                    let ap = unsafe { a0.add((ir - afirst) * astride) };
                    let (r0, c0) = (ir * mr, jr * nr);
                    let (mv, nv) = (mr.min(m - r0), nr.min(n - c0));
                    // SAFETY: panels hold k * width floats; the C tile lies in
                    // rows r0..r0+mv, columns c0..c0+nv, which only this task writes.
                    unsafe {
                        let cp = c.get().add(r0 * ldc + c0);
                        if mv == mr && nv == nr {
                            micro(kb, ap, bp, cp, ldc, pc > 0);
                        } else {
                            let mut t = [0.0f32; 96];
                            for y in 0..mv {
                                for x in 0..nv {
                                    if pc > 0 {
                                        t[y * nr + x] = *cp.add(y * ldc + x);
                                    }
                                }
                            }
                            micro(kb, ap, bp, t.as_mut_ptr(), nr, pc > 0);
                            for y in 0..mv {
                                for x in 0..nv {
                                    *cp.add(y * ldc + x) = t[y * nr + x];
                                }
                            }
                        }
                    }
                }
            }
        }
        epi(rows, cols);
    };
    let (mchunks, nchunks) = (m.div_ceil(s.mc), n.div_ceil(s.nc));
    if par_m {
        (0..mchunks)
            .into_par_iter()
            .for_each(|i| (0..nchunks).for_each(|j| tile(i, j)));
    } else {
        (0..nchunks)
            .into_par_iter()
            .for_each(|j| (0..mchunks).for_each(|i| tile(i, j)));
    }
}

/// Weights of a GEMM convolution, packed at load.
#[derive(Debug, Clone)]
enum Packed {
    /// NCHW: per group, A = weights (oc x reduction) in `mr` panels.
    Nchw(Vec<Panels>),
    /// NHWC: per group, B = weights^T (reduction x oc) in `nr` panels, the
    /// reduction ordered (ky, kx, ic) to match NHWC patches.
    Nhwc(Vec<Panels>),
    /// NCHW, block-sparse weights per group.
    Sparse(Vec<BlockSparse>),
}

/// A convolution computed as a matrix multiplication.
#[derive(Debug, Clone)]
pub(crate) struct GemmConv {
    w: Workload,
    s: GemmSchedule,
    packed: Packed,
}

impl GemmConv {
    /// `weights` is (out, in / groups, k, k) row-major; `blocks` selects the
    /// sparse kernel with that BSR block shape; `nhwc` the activation
    /// layout; `half` stores dense weights as f16.
    pub fn new(
        w: Workload,
        s: GemmSchedule,
        weights: &[f32],
        blocks: Option<(usize, usize)>,
        nhwc: bool,
        half: bool,
    ) -> GemmConv {
        let (ocg, red, kk) = (
            w.out_channels_per_group(),
            w.reduction(),
            w.kernel * w.kernel,
        );
        let icg = w.in_channels_per_group();
        let group = |g: usize| &weights[g * ocg * red..(g + 1) * ocg * red];
        let packed = match (blocks, nhwc) {
            (Some((r, c)), _) => Packed::Sparse(
                (0..w.groups)
                    .map(|g| BlockSparse::from_dense(group(g), ocg, red, r, c))
                    .collect(),
            ),
            (None, false) => Packed::Nchw(
                (0..w.groups)
                    .map(|g| {
                        let wg = group(g);
                        Panels::new(pack_panels(ocg, red, s.mr, |o, q| wg[o * red + q]), half)
                    })
                    .collect(),
            ),
            (None, true) => Packed::Nhwc(
                (0..w.groups)
                    .map(|g| {
                        let wg = group(g);
                        let p = pack_panels(ocg, red, s.nr, |o, q| {
                            let (pos, ic) = (q / icg, q % icg);
                            wg[o * red + ic * kk + pos]
                        });
                        Panels::new(p, half)
                    })
                    .collect(),
            ),
        };
        GemmConv { w, s, packed }
    }

    /// One sample: `input` and `out` in the layout the weights were packed for.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        let w = &self.w;
        let (ocg, icg, red) = (
            w.out_channels_per_group(),
            w.in_channels_per_group(),
            w.reduction(),
        );
        let (k, s, p) = (w.kernel, w.stride, w.padding as isize);
        let (h, wd, ow, pix) = (w.in_h as isize, w.in_w as isize, w.out_w, w.out_pixels());
        let c = SyncPtr::new(out);
        // Input coordinates of a patch element, None in the padding.
        let at = move |pixel: usize, ky: usize, kx: usize| {
            let iy = ((pixel / ow) * s + ky) as isize - p;
            let ix = ((pixel % ow) * s + kx) as isize - p;
            (iy >= 0 && ix >= 0 && iy < h && ix < wd).then_some((iy as usize, ix as usize))
        };
        match &self.packed {
            Packed::Nchw(a) => (0..w.groups).into_par_iter().for_each(|g| {
                let b = Panels::F32(pack_im2col(input, w, g, self.s.nr, red));
                let epi_block = |rows: Range<usize>, cols: Range<usize>| {
                    for r in rows {
                        let oc = g * ocg + r;
                        // SAFETY: this block's rows and columns belong to this task.
                        let o = unsafe { c.slice(oc * pix + cols.start, cols.len()) };
                        epi.channel(
                            oc,
                            o,
                            residual.map(|x| &x[oc * pix + cols.start..][..cols.len()]),
                        );
                    }
                };
                let cg = c.offset(g * ocg * pix);
                let par_m = self.s.parallel == ParallelLoop::OutputChannels;
                gemm_packed(
                    &self.s,
                    par_m,
                    (ocg, pix, red),
                    &a[g],
                    &b,
                    cg,
                    pix,
                    &epi_block,
                );
            }),
            Packed::Nhwc(b) => (0..w.groups).into_par_iter().for_each(|g| {
                let cin = w.in_channels;
                let a = Panels::F32(pack_panels(pix, red, self.s.mr, |pixel, q| {
                    let (pos, ic) = (q / icg, q % icg);
                    at(pixel, pos / k, pos % k).map_or(0.0, |(iy, ix)| {
                        input[(iy * w.in_w + ix) * cin + g * icg + ic]
                    })
                }));
                let cout = w.out_channels;
                let epi_block = |rows: Range<usize>, cols: Range<usize>| {
                    for px in rows {
                        let off = px * cout + g * ocg + cols.start;
                        // SAFETY: this block's rows and columns belong to this task.
                        let o = unsafe { c.slice(off, cols.len()) };
                        epi.pixel(
                            g * ocg + cols.start,
                            o,
                            residual.map(|x| &x[off..][..cols.len()]),
                        );
                    }
                };
                let cg = c.offset(g * ocg);
                let par_m = self.s.parallel == ParallelLoop::Spatial;
                gemm_packed(
                    &self.s,
                    par_m,
                    (pix, ocg, red),
                    &a,
                    &b[g],
                    cg,
                    cout,
                    &epi_block,
                );
            }),
            Packed::Sparse(mats) => (0..w.groups).into_par_iter().for_each(|g| {
                let m = &mats[g];
                // im2col packed in panels of strip(r) columns (rows padded to
                // whole blocks): a task's panel stays in L1/L2 while every
                // weight row of the task streams over it.
                let krows = red.next_multiple_of(m.c);
                let b = pack_im2col(input, w, g, strip(m.r, pix), krows);
                sparse_gemm(&self.s, m, &b, krows, pix, g * ocg, c, epi, residual);
            }),
        }
    }
}

/// Columns of C a sparse kernel keeps in registers per block row of `r`
/// rows: up to 64 accumulators (8 AVX2 registers), so that 8 independent
/// FMA chains hide the FMA latency however few rows a block has, but no
/// wider than the (power-of-two rounded) `columns` there are to compute.
pub(crate) fn strip(r: usize, columns: usize) -> usize {
    (64 / r).min(columns.next_power_of_two().max(8))
}

/// Rows `oc0..oc0 + m.rows` of C (row stride `n`) = m * B, with B packed
/// in panels of `strip(m.r, n)` columns over `krows` rows. Tasks are `mc` rows by
/// `nc` columns; inside a task panels are the outer loop so each panel is
/// reused by all the task's rows while it is in cache.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sparse_gemm(
    s: &GemmSchedule,
    m: &BlockSparse,
    b: &[f32],
    krows: usize,
    n: usize,
    oc0: usize,
    c: SyncPtr,
    epi: &Epilogue,
    residual: Option<&[f32]>,
) {
    let sw = strip(m.r, n);
    let task = sparse_task(m.r, sw);
    let rows_per_task = (s.mc / m.r).max(1);
    let (row_chunks, col_chunks) = (m.block_rows().div_ceil(rows_per_task), n.div_ceil(s.nc));
    let run = |i: usize, j: usize| {
        let brs = i * rows_per_task..m.block_rows().min((i + 1) * rows_per_task);
        let cols = j * s.nc..n.min((j + 1) * s.nc);
        // Panels overlapping the task's columns (nc need not be a multiple of the strip).
        for p in cols.start / sw..cols.end.div_ceil(sw) {
            let panel = &b[p * krows * sw..][..krows * sw];
            let lo = cols.start.max(p * sw);
            let hi = cols.end.min((p + 1) * sw);
            for br in brs.clone() {
                // SAFETY: block row br and columns lo..hi are this task's alone.
                unsafe { task(m, br, panel, lo, hi, oc0, c, n) };
            }
        }
        for r in brs.start * m.r..m.rows.min(brs.end * m.r) {
            let oc = oc0 + r;
            // SAFETY: as above.
            let o = unsafe { c.slice(oc * n + cols.start, cols.len()) };
            epi.channel(
                oc,
                o,
                residual.map(|x| &x[oc * n + cols.start..][..cols.len()]),
            );
        }
    };
    if s.parallel == ParallelLoop::OutputChannels {
        (0..row_chunks)
            .into_par_iter()
            .for_each(|i| (0..col_chunks).for_each(|j| run(i, j)));
    } else {
        (0..col_chunks)
            .into_par_iter()
            .for_each(|j| (0..row_chunks).for_each(|i| run(i, j)));
    }
}

type SparseTask = unsafe fn(&BlockSparse, usize, &[f32], usize, usize, usize, SyncPtr, usize);

/// One block row of C times one packed panel of B, stored to columns
/// lo..hi (inside the panel).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sparse_body<const R: usize, const S: usize, const FMA: bool>(
    m: &BlockSparse,
    br: usize,
    panel: &[f32],
    lo: usize,
    hi: usize,
    oc0: usize,
    c: SyncPtr,
    ldc: usize,
) {
    let rows = R.min(m.rows - br * R);
    let skip = lo % S;
    let mut acc = [[0.0f32; S]; R];
    let blocks = m.row_ptr[br]..m.row_ptr[br + 1];
    if m.c == 1 && R * S >= 64 {
        // Blocks one column wide with a full strip: 8 independent chains
        // already, a tight loop over (column, R values).
        let cols = &m.block_cols[blocks.clone()];
        let vals = &m.values[blocks.start * R..blocks.end * R];
        for (&k, v) in cols.iter().zip(vals.chunks_exact(R)) {
            let b0: &[f32; S] = panel[k * S..][..S].try_into().expect("S wide");
            for (a, &v) in acc.iter_mut().zip(v) {
                for (a, &x) in a.iter_mut().zip(b0) {
                    *a = madd::<FMA>(v, x, *a);
                }
            }
        }
    } else if m.c == 1 {
        // Blocks one column wide (CSR, BSR rx1) in a narrow strip: two
        // blocks per step into two accumulator sets, for independent chains.
        let cols = &m.block_cols[blocks.clone()];
        let vals = &m.values[blocks.start * R..blocks.end * R];
        let mut acc2 = [[0.0f32; S]; R];
        let mut pairs = cols.chunks_exact(2).zip(vals.chunks_exact(2 * R));
        for (k, v) in &mut pairs {
            let b0: &[f32; S] = panel[k[0] * S..][..S].try_into().expect("S wide");
            let b1: &[f32; S] = panel[k[1] * S..][..S].try_into().expect("S wide");
            for rr in 0..R {
                let (v0, v1) = (v[rr], v[R + rr]);
                for ((a, a2), (&x0, &x1)) in acc[rr]
                    .iter_mut()
                    .zip(acc2[rr].iter_mut())
                    .zip(b0.iter().zip(b1))
                {
                    *a = madd::<FMA>(v0, x0, *a);
                    *a2 = madd::<FMA>(v1, x1, *a2);
                }
            }
        }
        if cols.len() % 2 == 1 {
            let k = cols[cols.len() - 1];
            let v = &vals[vals.len() - R..];
            let b0: &[f32; S] = panel[k * S..][..S].try_into().expect("S wide");
            for (rr, a) in acc.iter_mut().enumerate() {
                for (a, &x) in a.iter_mut().zip(b0) {
                    *a = madd::<FMA>(v[rr], x, *a);
                }
            }
        }
        for (a, a2) in acc.iter_mut().zip(&acc2) {
            for (a, b) in a.iter_mut().zip(a2) {
                *a += b;
            }
        }
    } else {
        for blk in blocks {
            let k0 = m.block_cols[blk];
            let vals = &m.values[blk * R * m.c..][..R * m.c];
            for cc in 0..m.c {
                let brow: &[f32; S] = panel[(k0 + cc) * S..][..S]
                    .try_into()
                    .expect("panels are S wide");
                for (rr, a) in acc.iter_mut().enumerate() {
                    let v = vals[rr * m.c + cc];
                    for (a, &x) in a.iter_mut().zip(brow) {
                        *a = madd::<FMA>(v, x, *a);
                    }
                }
            }
        }
    }
    for (rr, a) in acc.iter().enumerate().take(rows) {
        // SAFETY: the caller owns these rows and columns of C.
        let o = unsafe { c.slice((oc0 + br * R + rr) * ldc + lo, hi - lo) };
        o.copy_from_slice(&a[skip..skip + hi - lo]);
    }
}

macro_rules! sparse_versions {
    ($(($r:literal, $s:literal) => $avx:ident, $port:ident;)*) => {
        $(
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn $avx(m: &BlockSparse, br: usize, panel: &[f32], lo: usize, hi: usize, oc0: usize, c: SyncPtr, ldc: usize) {
                // SAFETY: forwarded from the caller.
                unsafe { sparse_body::<$r, $s, true>(m, br, panel, lo, hi, oc0, c, ldc) }
            }
            #[allow(clippy::too_many_arguments)]
            unsafe fn $port(m: &BlockSparse, br: usize, panel: &[f32], lo: usize, hi: usize, oc0: usize, c: SyncPtr, ldc: usize) {
                // SAFETY: forwarded from the caller.
                unsafe { sparse_body::<$r, $s, false>(m, br, panel, lo, hi, oc0, c, ldc) }
            }
        )*
        fn sparse_task(r: usize, s: usize) -> SparseTask {
            match (r, s) {
                $(
                    #[cfg(target_arch = "x86_64")]
                    ($r, $s) if has_avx2_fma() => $avx,
                    ($r, $s) => $port,
                )*
                _ => unreachable!("block rows are validated at load and strips come from `strip`"),
            }
        }
    };
}

sparse_versions! {
    (1, 8) => sparse_avx2_1_8, sparse_portable_1_8;
    (1, 16) => sparse_avx2_1_16, sparse_portable_1_16;
    (1, 32) => sparse_avx2_1_32, sparse_portable_1_32;
    (1, 64) => sparse_avx2_1_64, sparse_portable_1_64;
    (2, 8) => sparse_avx2_2_8, sparse_portable_2_8;
    (2, 16) => sparse_avx2_2_16, sparse_portable_2_16;
    (2, 32) => sparse_avx2_2_32, sparse_portable_2_32;
    (4, 8) => sparse_avx2_4_8, sparse_portable_4_8;
    (4, 16) => sparse_avx2_4_16, sparse_portable_4_16;
    (8, 8) => sparse_avx2_8_8, sparse_portable_8_8;
}
