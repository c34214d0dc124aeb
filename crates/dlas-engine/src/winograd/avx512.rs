//! The Winograd transforms of 16 tiles at once on AVX-512 registers,
//! written with intrinsics: written on arrays of f32 (as the AVX2 and
//! portable paths in the parent are), LLVM compiled the same loops into
//! 8-lane gathers and scatters through the stack, and they ran at a tenth
//! of their arithmetic's speed (a 64->64 layer on 32x32, timed alone: 240
//! µs, 165 with these).

use super::Offsets;
use super::transforms::{Tile, Vector};
use std::arch::x86_64::*;

/// A register of 16 tiles' values. Its operations are inlined into the
/// AVX-512 transforms below, the only code that holds such registers.
impl Vector for __m512 {
    #[inline(always)]
    fn add(self, other: __m512) -> __m512 {
        // SAFETY: an __m512 exists only on a CPU with AVX-512 (the
        // transforms below, which create them, are compiled for it and run
        // only there).
        unsafe { _mm512_add_ps(self, other) }
    }

    #[inline(always)]
    fn sub(self, other: __m512) -> __m512 {
        // SAFETY: as in `add`.
        unsafe { _mm512_sub_ps(self, other) }
    }

    #[inline(always)]
    fn scale(self, k: f32) -> __m512 {
        // SAFETY: as in `add`.
        unsafe { _mm512_mul_ps(_mm512_set1_ps(k), self) }
    }
}

/// The input transform Bᵀ d B of the 16 tiles whose first values are at
/// `corner` in `plane` (rows `wp` apart), on AVX-512 registers. Returns
/// column b's point a at `[b][a]`.
///
/// # Safety
/// Every tile's T x T values lie inside `plane`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn input_group_avx512<const M: usize, const T: usize, F: Tile<M, T>>(
    plane: &[f32],
    wp: usize,
    corner: &Offsets,
) -> [[__m512; T]; T] {
    // SAFETY: the caller's promise covers every index gathered.
    unsafe {
        let at = _mm512_loadu_si512(corner.as_ptr().cast());
        let mut rows = [[_mm512_setzero_ps(); T]; T];
        for (i, row) in rows.iter_mut().enumerate() {
            let mut d = [_mm512_setzero_ps(); T];
            for (j, dj) in d.iter_mut().enumerate() {
                *dj = _mm512_i32gather_ps::<4>(at, plane.as_ptr().add(i * wp + j).cast());
            }
            *row = F::input_1d(d);
        }
        let mut columns = [[_mm512_setzero_ps(); T]; T];
        for (b, column) in columns.iter_mut().enumerate() {
            let mut d = [_mm512_setzero_ps(); T];
            for (i, di) in d.iter_mut().enumerate() {
                *di = rows[i][b];
            }
            *column = F::input_1d(d);
        }
        columns
    }
}

/// The output transform Aᵀ m A of 16 tiles on AVX-512 registers: point
/// (i, j) of lane l is `m[(T i + j) * point + l]`, or `m[(T i + j) * point
/// + at[l]]` with `at`; the first `count` tiles' M x M values are
/// scattered into `staged` (rows `wq` apart) at `corner`.
///
/// # Safety
/// Every value read lies inside `m`, every value written inside `staged`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn output_group_avx512<const M: usize, const T: usize, F: Tile<M, T>>(
    m: &[f32],
    point: usize,
    at: Option<&Offsets>,
    staged: &mut [f32],
    wq: usize,
    corner: &Offsets,
    count: usize,
) {
    // SAFETY: the caller's promise covers every index read and written.
    unsafe {
        let mut p = [[_mm512_setzero_ps(); T]; T];
        for (i, row) in p.iter_mut().enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                let from = m.as_ptr().add((T * i + j) * point);
                *v = match at {
                    Some(at) => _mm512_i32gather_ps::<4>(
                        _mm512_loadu_si512(at.as_ptr().cast()),
                        from.cast(),
                    ),
                    None => _mm512_loadu_ps(from),
                };
            }
        }
        let mut cols = [[_mm512_setzero_ps(); M]; T];
        for (j, col) in cols.iter_mut().enumerate() {
            let mut d = [_mm512_setzero_ps(); T];
            for (i, di) in d.iter_mut().enumerate() {
                *di = p[i][j];
            }
            *col = F::output_1d(d);
        }
        let idx = _mm512_loadu_si512(corner.as_ptr().cast());
        let mask = ((1u32 << count) - 1) as __mmask16;
        for dy in 0..M {
            let mut d = [_mm512_setzero_ps(); T];
            for (dj, col) in d.iter_mut().zip(&cols) {
                *dj = col[dy];
            }
            for (dx, &y) in F::output_1d(d).iter().enumerate() {
                let to = staged.as_mut_ptr().add(dy * wq + dx);
                _mm512_mask_i32scatter_ps::<4>(to.cast(), mask, idx, y);
            }
        }
    }
}
