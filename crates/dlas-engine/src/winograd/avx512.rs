//! The Winograd transforms of 16 tiles at once on AVX-512 registers,
//! written with intrinsics: written on arrays of f32 (as the AVX2 and
//! portable paths in the parent are), LLVM compiled the same loops into
//! 8-lane gathers and scatters through the stack, and they ran at a tenth
//! of their arithmetic's speed (a 64->64 layer on 32x32, timed alone: 240
//! µs, 165 with these).

use super::{M, Offsets, POINTS, T};
use std::arch::x86_64::*;

/// Bᵀ d for 16 6-vectors d, one per lane, on AVX-512 registers (the
/// same operations as [`input_1d`]).
#[target_feature(enable = "avx512f")]
#[inline]
fn input_1d_avx512(d: [__m512; T]) -> [__m512; T] {
    let k = _mm512_set1_ps;
    let (add, sub, mul) = (_mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps);
    [
        add(sub(mul(k(4.0), d[0]), mul(k(5.0), d[2])), d[4]),
        add(add(mul(k(-4.0), add(d[1], d[2])), d[3]), d[4]),
        add(sub(mul(k(4.0), sub(d[1], d[2])), d[3]), d[4]),
        add(sub(mul(k(2.0), sub(d[3], d[1])), d[2]), d[4]),
        add(sub(mul(k(2.0), sub(d[1], d[3])), d[2]), d[4]),
        add(sub(mul(k(4.0), d[1]), mul(k(5.0), d[3])), d[5]),
    ]
}

/// The input transform Bᵀ d B of the 16 tiles whose first values are at
/// `corner` in `plane` (rows `wp` apart), on AVX-512 registers: written
/// on arrays of f32, LLVM compiled the same loop into 8-lane gathers and
/// scatters through the stack and it ran at a tenth of its arithmetic's
/// speed. Returns column b's point a at `[b][a]`.
///
/// # Safety
/// Every tile's 6x6 values lie inside `plane`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn input_group_avx512(
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
            *row = input_1d_avx512(d);
        }
        let mut columns = [[_mm512_setzero_ps(); T]; T];
        for (b, column) in columns.iter_mut().enumerate() {
            let mut d = [_mm512_setzero_ps(); T];
            for (i, di) in d.iter_mut().enumerate() {
                *di = rows[i][b];
            }
            *column = input_1d_avx512(d);
        }
        columns
    }
}

/// Aᵀ m for 16 6-vectors m, one per lane, on AVX-512 registers (the
/// same operations as [`output_1d`]).
#[target_feature(enable = "avx512f")]
#[inline]
fn output_1d_avx512(m: [__m512; T]) -> [__m512; M] {
    let k = _mm512_set1_ps;
    let (add, sub, mul) = (_mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps);
    let (s12, d12) = (add(m[1], m[2]), sub(m[1], m[2]));
    let (s34, d34) = (add(m[3], m[4]), sub(m[3], m[4]));
    [
        add(add(m[0], s12), s34),
        add(d12, mul(k(2.0), d34)),
        add(s12, mul(k(4.0), s34)),
        add(add(d12, mul(k(8.0), d34)), m[5]),
    ]
}

/// The output transform Aᵀ m A of 16 tiles on AVX-512 registers (see
/// [`input_group_avx512`] for why): point ξ of lane l is `m[ξ * point +
/// l]`, or `m[ξ * point + at[l]]` with `at`; the first `count` tiles'
/// 4x4 values are scattered into `staged` (rows `wq` apart) at `corner`.
///
/// # Safety
/// Every value read lies inside `m`, every value written inside `staged`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn output_group_avx512(
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
        let mut p = [_mm512_setzero_ps(); POINTS];
        for (xi, v) in p.iter_mut().enumerate() {
            let from = m.as_ptr().add(xi * point);
            *v = match at {
                Some(at) => {
                    _mm512_i32gather_ps::<4>(_mm512_loadu_si512(at.as_ptr().cast()), from.cast())
                }
                None => _mm512_loadu_ps(from),
            };
        }
        let mut cols = [[_mm512_setzero_ps(); M]; T];
        for (j, col) in cols.iter_mut().enumerate() {
            let mut d = [_mm512_setzero_ps(); T];
            for (i, di) in d.iter_mut().enumerate() {
                *di = p[T * i + j];
            }
            *col = output_1d_avx512(d);
        }
        let idx = _mm512_loadu_si512(corner.as_ptr().cast());
        let mask = ((1u32 << count) - 1) as __mmask16;
        for dy in 0..M {
            let mut d = [_mm512_setzero_ps(); T];
            for (dj, col) in d.iter_mut().zip(&cols) {
                *dj = col[dy];
            }
            for (dx, &y) in output_1d_avx512(d).iter().enumerate() {
                let to = staged.as_mut_ptr().add(dy * wq + dx);
                _mm512_mask_i32scatter_ps::<4>(to.cast(), mask, idx, y);
            }
        }
    }
}
