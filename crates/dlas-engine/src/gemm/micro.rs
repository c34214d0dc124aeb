//! GEMM microkernels: an `MR` x `NR` tile of C held in registers while the
//! reduction streams an `MR`-wide panel of A (one broadcast per row) and an
//! `NR`-wide row of B (whole vectors) per step.
//!
//! One generic body per instruction set: AVX-512 (`NR` a multiple of 16,
//! up to 32 registers), AVX2 + FMA (`NR` a multiple of 8, 16 registers) and
//! portable Rust. The tile's store does the rest of the layer's work while
//! the values are in registers: it adds the partial sums of earlier
//! reduction blocks, and on the last block the bias, the residual and a
//! clamping activation (ReLU, ReLU6), so C is written once per block and
//! never re-read by a separate epilogue pass. Edge tiles store only their
//! valid rows and columns (masked on AVX-512 and AVX2), so no tile is
//! computed into a scratch buffer.

use crate::isa::Isa;

/// What the last reduction block does to a tile before storing it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finish {
    /// One bias per row of the tile.
    pub bias: *const f32,
    /// The residual at the tile's offsets (row stride `ldc`), or null.
    pub residual: *const f32,
    /// `min(max(x, lo), hi)` after the additions, if any.
    pub clamp: Option<(f32, f32)>,
}

/// Where a microkernel stores its tile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Store {
    pub c: *mut f32,
    pub ldc: usize,
    /// Valid rows (<= MR) and columns (<= NR) of the tile.
    pub rows: usize,
    pub cols: usize,
    /// Add the tile to C's current values (a later reduction block).
    pub accumulate: bool,
    pub finish: Option<Finish>,
}

/// `tile = a_panel[k x MR]^T * b[k x NR]` (B row `kk` at `b + kk * ldb`),
/// then stored by `st`.
///
/// # Safety
/// `k` >= 1; `a` holds `k * MR` floats; each of the `k` rows of B holds `NR` readable
/// floats; C (and the residual) hold `st.rows` rows of `st.cols` floats at
/// row stride `st.ldc` that no other thread accesses meanwhile; `bias`
/// holds `st.rows` floats; the CPU runs the kernel's instruction set.
pub(crate) type Micro = unsafe fn(usize, *const f32, *const f32, usize, &Store);

/// The microkernel for an `mr` x `nr` tile (one of
/// [`crate::tiles::GEMM_TILES`]) on instruction set `isa`: AVX-512 when
/// `nr` is a multiple of 16, AVX2 when it is a multiple of 8.
pub(crate) fn microkernel(mr: usize, nr: usize, isa: Isa) -> Micro {
    macro_rules! pick {
        ($(($m:literal, $n:literal)),*) => {
            match (mr, nr) {
                $(
                    #[cfg(target_arch = "x86_64")]
                    ($m, $n) if isa == Isa::Avx512 && $n % 16 == 0 => avx512::<$m, { $n / 16 }>,
                    #[cfg(target_arch = "x86_64")]
                    ($m, $n) if isa >= Isa::Avx2 => avx2::<$m, { $n / 8 }>,
                    ($m, $n) => portable::<$m, $n>,
                )*
                _ => unreachable!("schedules are validated against GEMM_TILES"),
            }
        };
    }
    crate::tiles::with_gemm_tiles!(pick)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512<const MR: usize, const NV: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    st: &Store,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract (see `Micro`): every load below is of
    // the k rows of the A panel and of B, and every C, residual and bias
    // access is masked to the tile's valid rows and columns.
    unsafe {
        // The first step initialises the accumulators (no zeroing pass).
        let bv: [_; NV] = std::array::from_fn(|v| _mm512_loadu_ps(b.add(16 * v)));
        let mut acc: [[_; NV]; MR] = std::array::from_fn(|i| {
            let av = _mm512_set1_ps(*a.add(i));
            std::array::from_fn(|v| _mm512_mul_ps(av, bv[v]))
        });
        let (mut a, mut b) = (a.add(MR), b.add(ldb));
        for _ in 1..k {
            let bv: [_; NV] = std::array::from_fn(|v| _mm512_loadu_ps(b.add(16 * v)));
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(i));
                for (x, bx) in row.iter_mut().zip(&bv) {
                    *x = _mm512_fmadd_ps(av, *bx, *x);
                }
            }
            a = a.add(MR);
            b = b.add(ldb);
        }
        let masks: [__mmask16; NV] = std::array::from_fn(|v| {
            let n = st.cols.saturating_sub(16 * v).min(16);
            ((1u32 << n) - 1) as __mmask16
        });
        for (i, row) in acc.iter().enumerate() {
            if i >= st.rows {
                break;
            }
            for (v, &x) in row.iter().enumerate() {
                let (m, off) = (masks[v], i * st.ldc + 16 * v);
                let p = st.c.add(off);
                let mut x = x;
                if st.accumulate {
                    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, p));
                }
                if let Some(f) = st.finish {
                    x = _mm512_add_ps(x, _mm512_set1_ps(*f.bias.add(i)));
                    if !f.residual.is_null() {
                        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, f.residual.add(off)));
                    }
                    if let Some((lo, hi)) = f.clamp {
                        // max(lo, x) keeps a NaN x (the second operand wins on NaN).
                        x = _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), x));
                    }
                }
                _mm512_mask_storeu_ps(p, m, x);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2<const MR: usize, const NV: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    st: &Store,
) {
    use std::arch::x86_64::*;
    // SAFETY: as for `avx512`; partial vectors use vmaskmovps, which does
    // not touch masked-out elements.
    unsafe {
        // The first step initialises the accumulators (no zeroing pass).
        let bv: [_; NV] = std::array::from_fn(|v| _mm256_loadu_ps(b.add(8 * v)));
        let mut acc: [[_; NV]; MR] = std::array::from_fn(|i| {
            let av = _mm256_set1_ps(*a.add(i));
            std::array::from_fn(|v| _mm256_mul_ps(av, bv[v]))
        });
        let (mut a, mut b) = (a.add(MR), b.add(ldb));
        for _ in 1..k {
            let bv: [_; NV] = std::array::from_fn(|v| _mm256_loadu_ps(b.add(8 * v)));
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_ps(*a.add(i));
                for (x, bx) in row.iter_mut().zip(&bv) {
                    *x = _mm256_fmadd_ps(av, *bx, *x);
                }
            }
            a = a.add(MR);
            b = b.add(ldb);
        }
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let masks: [__m256i; NV] = std::array::from_fn(|v| {
            let n = st.cols.saturating_sub(8 * v).min(8) as i32;
            _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane)
        });
        for (i, row) in acc.iter().enumerate() {
            if i >= st.rows {
                break;
            }
            for (v, &x) in row.iter().enumerate() {
                let (m, off) = (masks[v], i * st.ldc + 8 * v);
                let p = st.c.add(off);
                let mut x = x;
                if st.accumulate {
                    x = _mm256_add_ps(x, _mm256_maskload_ps(p, m));
                }
                if let Some(f) = st.finish {
                    x = _mm256_add_ps(x, _mm256_set1_ps(*f.bias.add(i)));
                    if !f.residual.is_null() {
                        x = _mm256_add_ps(x, _mm256_maskload_ps(f.residual.add(off), m));
                    }
                    if let Some((lo, hi)) = f.clamp {
                        x = _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), x));
                    }
                }
                _mm256_maskstore_ps(p, m, x);
            }
        }
    }
}

unsafe fn portable<const MR: usize, const NR: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    st: &Store,
) {
    // SAFETY: as for `avx512`; stores stop at the valid rows and columns.
    unsafe {
        let mut acc = [[0.0f32; NR]; MR];
        for p in 0..k {
            let bp = std::slice::from_raw_parts(b.add(p * ldb), NR);
            for (i, row) in acc.iter_mut().enumerate() {
                let av = *a.add(p * MR + i);
                for (x, bx) in row.iter_mut().zip(bp) {
                    *x += av * bx;
                }
            }
        }
        for (i, row) in acc.iter().enumerate().take(st.rows) {
            for (j, &x) in row.iter().enumerate().take(st.cols) {
                // The vector kernels' operations, in their order.
                let off = i * st.ldc + j;
                let p = st.c.add(off);
                let mut x = x;
                if st.accumulate {
                    x += *p;
                }
                if let Some(f) = st.finish {
                    x += *f.bias.add(i);
                    if !f.residual.is_null() {
                        x += *f.residual.add(off);
                    }
                    if let Some((lo, hi)) = f.clamp {
                        x = x.max(lo).min(hi);
                    }
                }
                *p = x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiles::GEMM_TILES;

    /// Every tile on every instruction set this CPU has, against f64 sums,
    /// with edge tiles, accumulation and every finishing step.
    #[test]
    fn microkernels_match_f64() {
        let k = 37;
        for isa in Isa::available() {
            for &(mr, nr) in GEMM_TILES {
                let micro = microkernel(mr, nr, isa);
                let a: Vec<f32> = (0..k * mr)
                    .map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0)
                    .collect();
                let ldb = nr + 3;
                let b: Vec<f32> = (0..k * ldb)
                    .map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0)
                    .collect();
                let bias: Vec<f32> = (0..mr).map(|i| i as f32 * 0.25 - 1.0).collect();
                let ldc = nr + 5;
                let res: Vec<f32> = (0..mr * ldc).map(|i| (i % 9) as f32 * 0.1).collect();
                for (rows, cols) in [(mr, nr), (mr - 1, nr - 3), (1, 1)] {
                    for (accumulate, finish) in [(false, false), (true, false), (true, true)] {
                        let mut c = vec![0.5f32; mr * ldc];
                        let st = Store {
                            c: c.as_mut_ptr(),
                            ldc,
                            rows,
                            cols,
                            accumulate,
                            finish: finish.then_some(Finish {
                                bias: bias.as_ptr(),
                                residual: res.as_ptr(),
                                clamp: Some((0.0, 6.0)),
                            }),
                        };
                        // SAFETY: the buffers above have the sizes `Micro` asks for.
                        unsafe { micro(k, a.as_ptr(), b.as_ptr(), ldb, &st) };
                        for i in 0..mr {
                            for j in 0..ldc {
                                let got = c[i * ldc + j];
                                if i >= rows || j >= cols {
                                    assert_eq!(
                                        got, 0.5,
                                        "{isa:?} {mr}x{nr} wrote outside its tile"
                                    );
                                    continue;
                                }
                                let mut want: f64 = (0..k)
                                    .map(|p| a[p * mr + i] as f64 * b[p * ldb + j] as f64)
                                    .sum();
                                if accumulate {
                                    want += 0.5;
                                }
                                if finish {
                                    want = (want + bias[i] as f64 + res[i * ldc + j] as f64)
                                        .clamp(0.0, 6.0);
                                }
                                assert!(
                                    (got as f64 - want).abs() < 1e-4,
                                    "{isa:?} {mr}x{nr} ({i}, {j}): {got} vs {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
