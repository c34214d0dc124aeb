//! Block-sparse weights times the packed im2col matrix (NCHW): each stored
//! weight block scales rows of B into register-resident strips of C, so
//! the work is proportional to the stored blocks.

use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::{Isa, madd};
use crate::schedule::{GemmSchedule, ParallelLoop};
use crate::sparse::BlockSparse;
use rayon::prelude::*;

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
/// lo..hi (inside the panel). Strips with fewer than `WIDE` accumulators
/// take one-column blocks two at a time into two accumulator sets.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sparse_body<const R: usize, const S: usize, const FMA: bool, const WIDE: usize>(
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
        o.copy_from_slice(&a[skip..skip + hi - lo]);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512<const R: usize, const S: usize>(
    m: &BlockSparse,
    br: usize,
    panel: &[f32],
    lo: usize,
    hi: usize,
    oc0: usize,
    c: SyncPtr,
    ldc: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe { sparse_body::<R, S, true, 128>(m, br, panel, lo, hi, oc0, c, ldc) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx2<const R: usize, const S: usize>(
    m: &BlockSparse,
    br: usize,
    panel: &[f32],
    lo: usize,
    hi: usize,
    oc0: usize,
    c: SyncPtr,
    ldc: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe { sparse_body::<R, S, true, 64>(m, br, panel, lo, hi, oc0, c, ldc) }
}

#[allow(clippy::too_many_arguments)]
unsafe fn portable<const R: usize, const S: usize>(
    m: &BlockSparse,
    br: usize,
    panel: &[f32],
    lo: usize,
    hi: usize,
    oc0: usize,
    c: SyncPtr,
    ldc: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe { sparse_body::<R, S, false, 64>(m, br, panel, lo, hi, oc0, c, ldc) }
}

/// The kernel for blocks of `r` rows and strips of `s` columns on `isa`.
fn sparse_task(r: usize, s: usize, isa: Isa) -> SparseTask {
    macro_rules! pick {
        ($(($r:literal, $s:literal)),*) => {
            match (r, s) {
                $(
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
