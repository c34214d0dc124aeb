//! Block-sparse weights times the packed im2col matrix (NCHW): each stored
//! weight block scales rows of B into register-resident strips of C, so
//! the work is proportional to the stored blocks. Every stored value reads
//! its own vectors of B, so the kernel runs at the speed B streams from
//! cache: the reduction is cut into blocks of `REDUCTION_BLOCK` rows and
//! every row of a task reads a block while it is in L1 or L2, accumulating
//! into C between blocks.

use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::{Isa, madd};
use crate::schedule::{GemmSchedule, ParallelLoop};
use crate::sparse::BlockSparse;
use std::ops::Range;

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
    isa: Isa,
) {
    let sw = strip(m.r, n);
    let task = sparse_task(m.r, sw, isa);
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
            for kb in 0..m.reduction_blocks() {
                // SAFETY: block rows brs and columns lo..hi are this task's alone.
                unsafe { task(m, (brs.clone(), kb), panel, lo, hi, oc0, c, n) };
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
        crate::awake::for_each(row_chunks, |i| (0..col_chunks).for_each(|j| run(i, j)));
    } else {
        crate::awake::for_each(col_chunks, |j| (0..row_chunks).for_each(|i| run(i, j)));
    }
}

/// Block rows `brs` times reduction block `kb` of one panel of B, into
/// columns lo..hi of C (stored for the first reduction block, added for
/// the others).
type SparseTask =
    unsafe fn(&BlockSparse, (Range<usize>, usize), &[f32], usize, usize, usize, SyncPtr, usize);

/// Blocks `blocks` of block row `br` times one packed panel of B, stored
/// (or with `accumulate` added) to columns lo..hi (inside the panel) of C,
/// row stride `ldc`. Strips with fewer than `WIDE` accumulators take
/// one-column blocks two at a time into two accumulator sets.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sparse_body<const R: usize, const S: usize, const FMA: bool, const WIDE: usize>(
    m: &BlockSparse,
    (br, blocks): (usize, Range<usize>),
    panel: &[f32],
    lo: usize,
    hi: usize,
    oc0: usize,
    c: SyncPtr,
    (ldc, accumulate): (usize, bool),
) {
    let rows = R.min(m.rows - br * R);
    let skip = lo % S;
    let mut acc = [[0.0f32; S]; R];
    if m.c == 1 && R * S >= WIDE {
        // Blocks one column wide with a strip of `WIDE` accumulators (8
        // vector registers): 8 independent chains already, a tight loop
        // over (column, R values).
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
        if accumulate {
            for (o, a) in o.iter_mut().zip(&a[skip..]) {
                *o += a;
            }
        } else {
            o.copy_from_slice(&a[skip..skip + hi - lo]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512<const R: usize, const S: usize>(
    m: &BlockSparse,
    (brs, kb): (Range<usize>, usize),
    panel: &[f32],
    lo: usize,
    hi: usize,
    oc0: usize,
    c: SyncPtr,
    ldc: usize,
) {
    for br in brs {
        let blocks = m.blocks_in(br, kb);
        if kb == 0 || !blocks.is_empty() {
            let row = (br, blocks);
            // SAFETY: forwarded from the caller.
            unsafe { sparse_body::<R, S, true, 128>(m, row, panel, lo, hi, oc0, c, (ldc, kb > 0)) }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx2<const R: usize, const S: usize>(
    m: &BlockSparse,
    (brs, kb): (Range<usize>, usize),
    panel: &[f32],
    lo: usize,
    hi: usize,
    oc0: usize,
    c: SyncPtr,
    ldc: usize,
) {
    for br in brs {
        let blocks = m.blocks_in(br, kb);
        if kb == 0 || !blocks.is_empty() {
            let row = (br, blocks);
            // SAFETY: forwarded from the caller.
            unsafe { sparse_body::<R, S, true, 64>(m, row, panel, lo, hi, oc0, c, (ldc, kb > 0)) }
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn portable<const R: usize, const S: usize>(
    m: &BlockSparse,
    (brs, kb): (Range<usize>, usize),
    panel: &[f32],
    lo: usize,
    hi: usize,
    oc0: usize,
    c: SyncPtr,
    ldc: usize,
) {
    for br in brs {
        let blocks = m.blocks_in(br, kb);
        if kb == 0 || !blocks.is_empty() {
            let row = (br, blocks);
            // SAFETY: forwarded from the caller.
            unsafe { sparse_body::<R, S, false, 64>(m, row, panel, lo, hi, oc0, c, (ldc, kb > 0)) }
        }
    }
}

/// The kernel for blocks of `r` rows and strips of `s` columns on `isa`.
fn sparse_task(r: usize, s: usize, isa: Isa) -> SparseTask {
    macro_rules! pick {
        ($(($r:literal, $s:literal)),*) => {
            match (r, s) {
                $(
                    #[cfg(target_arch = "x86_64")]
                    ($r, $s) if isa == Isa::Avx512 && $s % 16 == 0 => {
                        blocks_avx512::<$r, { $s / 16 }, { chains($r, $s / 16) }>
                    }
                    #[cfg(target_arch = "x86_64")]
                    ($r, $s) if isa == Isa::Avx512 => avx512::<$r, $s>,
                    #[cfg(target_arch = "x86_64")]
                    ($r, $s) if isa == Isa::Avx2 => avx2::<$r, $s>,
                    ($r, $s) => portable::<$r, $s>,
                )*
                _ => unreachable!("block rows are validated at load and strips come from `strip`"),
            }
        };
    }
    pick!(
        (1, 8),
        (1, 16),
        (1, 32),
        (1, 64),
        (2, 8),
        (2, 16),
        (2, 32),
        (4, 8),
        (4, 16),
        (8, 8)
    )
}

/// Accumulator sets of [`blocks_avx512`] for R x NV registers each: enough
/// for 8 independent FMA chains (FMA latency 4 x 2 ports), at least two.
const fn chains(r: usize, nv: usize) -> usize {
    // (nv is 0 for the 8-column strips this kernel is never picked for.)
    let sets = 8 / if r * nv == 0 { 1 } else { r * nv };
    if sets < 2 { 2 } else { sets }
}

/// [`sparse_body`] written with AVX-512 intrinsics, so the accumulators
/// provably stay in registers: consecutive block columns (of one block,
/// or of one-column blocks) SETS at a time into SETS accumulator sets
/// (SETS * R * NV <= 16 registers, 8 chains for narrow strips), each
/// column one broadcast per block row and NV vector loads of its row of
/// the panel.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn blocks_avx512<const R: usize, const NV: usize, const SETS: usize>(
    m: &BlockSparse,
    (brs, kb): (Range<usize>, usize),
    panel: &[f32],
    lo: usize,
    hi: usize,
    oc0: usize,
    c: SyncPtr,
    ldc: usize,
) {
    use std::arch::x86_64::*;
    let s = 16 * NV;
    let (rows, bc) = (panel.len() / s, m.c);
    let row = |k: usize, v: usize| {
        // SAFETY: k < rows (asserted per block row below), and row k of the
        // panel holds s = 16 * NV floats.
        unsafe { _mm512_loadu_ps(panel.as_ptr().add(k * s + 16 * v)) }
    };
    // Columns lo..hi of C are lanes skip..skip + (hi - lo) of the strip.
    let (skip, len) = (lo % s, hi - lo);
    let masks: [__mmask16; NV] = std::array::from_fn(|j| {
        let (a, b) = ((16 * j).max(skip), (16 * j + 16).min(skip + len));
        if a >= b {
            0
        } else {
            (((1u32 << (b - 16 * j)) - 1) & !((1u32 << (a - 16 * j)) - 1)) as __mmask16
        }
    });
    for br in brs {
        let blocks = m.blocks_in(br, kb);
        if kb > 0 && blocks.is_empty() {
            continue;
        }
        let cols = &m.block_cols[blocks.clone()];
        let vals = &m.values[blocks.start * R * bc..blocks.end * R * bc];
        // Columns ascend within a block row: the last block reaches furthest.
        assert!(
            cols.last().is_none_or(|&k| k + bc <= rows),
            "columns are panel rows"
        );
        let mut acc = [[[_mm512_setzero_ps(); NV]; R]; SETS];
        // Column cc of a block: B row k0 + cc times values v[rr * bc + cc].
        let step = |set: &mut [[__m512; NV]; R], k: usize, v: &[f32], cc: usize| {
            for j in 0..NV {
                let b = row(k + cc, j);
                for r in 0..R {
                    set[r][j] = _mm512_fmadd_ps(_mm512_set1_ps(v[r * bc + cc]), b, set[r][j]);
                }
            }
        };
        if bc == 1 {
            let mut groups = cols.chunks_exact(SETS).zip(vals.chunks_exact(SETS * R));
            for (k, v) in &mut groups {
                for (s, set) in acc.iter_mut().enumerate() {
                    step(set, k[s], &v[s * R..], 0);
                }
            }
            // The remainder into the first set (a constant index keeps the
            // sets in registers).
            let done = cols.len() / SETS * SETS;
            for (i, &k) in cols.iter().enumerate().skip(done) {
                step(&mut acc[0], k, &vals[i * R..], 0);
            }
        } else {
            for (&k, v) in cols.iter().zip(vals.chunks_exact(R * bc)) {
                for cc in (0..bc).step_by(SETS) {
                    for (s, set) in acc.iter_mut().enumerate() {
                        if cc + s < bc {
                            step(set, k, v, cc + s);
                        }
                    }
                }
            }
        }
        let acc: [[__m512; NV]; R] = std::array::from_fn(|r| {
            std::array::from_fn(|j| {
                acc.iter()
                    .fold(_mm512_setzero_ps(), |x, set| _mm512_add_ps(x, set[r][j]))
            })
        });
        for r in 0..R.min(m.rows - br * R) {
            let o = c.get().wrapping_add((oc0 + br * R + r) * ldc + lo);
            for (j, &mask) in masks.iter().enumerate() {
                let mut x = acc[r][j];
                // Lane l of vector j is column 16j + l - skip of the row.
                let at = o.wrapping_add(16 * j).wrapping_sub(skip);
                // SAFETY: the caller owns columns lo..hi of these rows of C;
                // the masks keep lanes skip..skip + len.
                unsafe {
                    if kb > 0 {
                        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, at));
                    }
                    _mm512_mask_storeu_ps(at, mask, x);
                }
            }
        }
    }
}
