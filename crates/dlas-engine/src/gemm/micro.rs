//! GEMM microkernels: an `MR` x `NR` tile of C held in registers while the
//! reduction streams an `MR`-wide panel of A (one broadcast per row) and an
//! `NR`-wide row of B (whole vectors) per step.
//!
//! One generic body per instruction set: AVX-512 (`NR` a multiple of 16,
//! up to 32 registers), AVX2 + FMA (`NR` a multiple of 8, 16 registers) and
//! portable Rust. The tile's store does the rest of the layer's work while
//! the values are in registers: it adds the partial sums of earlier
//! reduction blocks, and on the last block the bias, the residual and the
//! activation (a clamp for ReLU and ReLU6; SiLU and sigmoid through a
//! vector `exp` that computes what [`crate::epilogue::exp`] does, operation
//! for operation), so C is written once per block and never re-read by a
//! separate epilogue pass. Edge tiles store only their
//! valid rows and columns (masked on AVX-512 and AVX2), so no tile is
//! computed into a scratch buffer.

use crate::epilogue::Activation;
use crate::isa::Isa;

/// How many reduction steps ahead a microkernel prefetches B's row when B
/// is read in place rather than from packed panels (a 1x1 layer's input,
/// whose rows lie a map apart). Switched at run time in one build, 8 and
/// 16 rows ahead gave ResNet-50 (ImageNet) 5.9% and 4.7% (faster in 8 of
/// 8 and 6 of 6 interleaved alternations) and MobileNetV2 2.6-3%; between
/// two builds, ResNet-50 1% (6 of 8) and MobileNetV2 3.4% (5 of 8).
/// Packed panels, which the hardware prefetcher follows, are not
/// prefetched.
const PREFETCH_ROWS: usize = 8;

/// How many reduction steps ahead an AVX-512 microkernel prefetches its A
/// panel when A is large (see [`PREFETCH_A_FROM`]): a convolution's A is
/// its weights, which a large layer streams from L3 once per run
/// (ResNet-18's 512-channel 3x3 layers: 9.4 MiB each), and the hardware
/// prefetcher did not keep up. In whole networks, 64 steps ahead against
/// none, each pair of runs in one sitting: ResNet-18 CIFAR-10 GEMM 6.6%
/// faster (5 of 5 alternations), its Winograd configuration 8.6% (5 of 5),
/// ResNet-50 2.5% (3 of 3), EfficientNet-B0 2.1% (3 of 4); 16 and 128
/// steps gained less on ResNet-18 (2.2%, 0.7%).
const PREFETCH_A_STEPS: usize = 64;

/// Values of A (rows x reduction) from which the microkernels prefetch it:
/// 1 MiB. Prefetching every A cost MobileNetV2 1.5% (faster in 1 of 5),
/// whose weights stay in L2; from 1 MiB it was neutral there (4.60 against
/// 4.62 ms), and from 4 MiB ResNet-18 gained 4.9% instead of 6.6%.
pub(crate) const PREFETCH_A_FROM: usize = 1 << 18;

/// What the last reduction block does to a tile before storing it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finish {
    /// One bias per row of the tile.
    pub bias: *const f32,
    /// The residual at the tile's offsets (row stride `ldc`), or null.
    pub residual: *const f32,
    /// Applied after the additions.
    pub act: Activation,
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
    /// Prefetch A's panel [`PREFETCH_A_STEPS`] steps ahead (a large A,
    /// see [`PREFETCH_A_FROM`]; AVX-512 kernels only).
    pub prefetch_a: bool,
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
        let strided = ldb > 16 * NV;
        let far_a = st.prefetch_a;
        for _ in 1..k {
            if strided {
                // B read in place (a 1x1 layer's input): its rows lie far
                // apart, so fetch the row PREFETCH_ROWS steps ahead.
                for v in 0..NV {
                    let ahead = b.wrapping_add(PREFETCH_ROWS * ldb + 16 * v);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                }
            }
            if far_a {
                _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PREFETCH_A_STEPS * MR).cast());
            }
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
        let act = st.finish.map(|f| Act512::of(f.act));
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
                    x = act.map_or(x, |a| a.apply(x));
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
        let strided = ldb > 8 * NV;
        for _ in 1..k {
            if strided {
                // As in `avx512`: one prefetch per 64-byte line.
                for v in (0..NV).step_by(2) {
                    let ahead = b.wrapping_add(PREFETCH_ROWS * ldb + 8 * v);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                }
            }
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
        let act = st.finish.map(|f| Act256::of(f.act));
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
                    x = act.map_or(x, |a| a.apply(x));
                }
                _mm256_maskstore_ps(p, m, x);
            }
        }
    }
}

/// A tile's activation on 16 lanes, its clamp bounds in registers once per
/// tile: a clamp as `min(hi, max(lo, x))` (the second operand wins on NaN,
/// so a NaN x stays NaN, as `f32::clamp` keeps it; the identity clamps to
/// the infinities), SiLU and sigmoid through [`exp512`].
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Act512 {
    smooth: Option<Activation>,
    lo: std::arch::x86_64::__m512,
    hi: std::arch::x86_64::__m512,
}

#[cfg(target_arch = "x86_64")]
impl Act512 {
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn of(act: Activation) -> Act512 {
        use std::arch::x86_64::*;
        let (lo, hi) = act
            .clamp()
            .flatten()
            .unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        Act512 {
            smooth: matches!(act, Activation::Silu | Activation::Sigmoid).then_some(act),
            lo: _mm512_set1_ps(lo),
            hi: _mm512_set1_ps(hi),
        }
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn apply(self, x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        let Some(smooth) = self.smooth else {
            return _mm512_min_ps(self.hi, _mm512_max_ps(self.lo, x));
        };
        let one = _mm512_set1_ps(1.0);
        // -x by its sign bit, as the scalar `-x`.
        let neg = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(x),
            _mm512_set1_epi32(i32::MIN),
        ));
        let numerator = if smooth == Activation::Silu { x } else { one };
        _mm512_div_ps(numerator, _mm512_add_ps(one, exp512(neg)))
    }
}

/// [`crate::epilogue::exp`] on 16 lanes, the same operations in the same
/// order (no fused multiply-adds), so it gives the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn exp512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use crate::epilogue::exp_constants as c;
    use std::arch::x86_64::*;
    let k = _mm512_set1_ps;
    let x = _mm512_min_ps(k(c::HI), _mm512_max_ps(k(c::LO), x));
    let t = _mm512_add_ps(_mm512_mul_ps(x, k(std::f32::consts::LOG2_E)), k(c::MAGIC));
    let n = _mm512_sub_ps(t, k(c::MAGIC));
    let r = _mm512_sub_ps(
        _mm512_sub_ps(x, _mm512_mul_ps(n, k(c::LN2_HI))),
        _mm512_mul_ps(n, k(c::LN2_LO)),
    );
    let mut p = k(c::P[0]);
    for &coefficient in &c::P[1..] {
        p = _mm512_add_ps(_mm512_mul_ps(p, r), k(coefficient));
    }
    let e = _mm512_add_ps(
        _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r),
        k(1.0),
    );
    let n = _mm512_sub_epi32(
        _mm512_castps_si512(t),
        _mm512_set1_epi32(c::MAGIC.to_bits() as i32),
    );
    let scale = _mm512_slli_epi32::<23>(_mm512_add_epi32(n, _mm512_set1_epi32(127)));
    _mm512_mul_ps(e, _mm512_castsi512_ps(scale))
}

/// [`Act512`] on 8 lanes.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Act256 {
    smooth: Option<Activation>,
    lo: std::arch::x86_64::__m256,
    hi: std::arch::x86_64::__m256,
}

#[cfg(target_arch = "x86_64")]
impl Act256 {
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn of(act: Activation) -> Act256 {
        use std::arch::x86_64::*;
        let (lo, hi) = act
            .clamp()
            .flatten()
            .unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        Act256 {
            smooth: matches!(act, Activation::Silu | Activation::Sigmoid).then_some(act),
            lo: _mm256_set1_ps(lo),
            hi: _mm256_set1_ps(hi),
        }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn apply(self, x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        let Some(smooth) = self.smooth else {
            return _mm256_min_ps(self.hi, _mm256_max_ps(self.lo, x));
        };
        let one = _mm256_set1_ps(1.0);
        let neg = _mm256_castsi256_ps(_mm256_xor_si256(
            _mm256_castps_si256(x),
            _mm256_set1_epi32(i32::MIN),
        ));
        let numerator = if smooth == Activation::Silu { x } else { one };
        _mm256_div_ps(numerator, _mm256_add_ps(one, exp256(neg)))
    }
}

/// [`exp512`] on 8 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn exp256(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use crate::epilogue::exp_constants as c;
    use std::arch::x86_64::*;
    let k = _mm256_set1_ps;
    let x = _mm256_min_ps(k(c::HI), _mm256_max_ps(k(c::LO), x));
    let t = _mm256_add_ps(_mm256_mul_ps(x, k(std::f32::consts::LOG2_E)), k(c::MAGIC));
    let n = _mm256_sub_ps(t, k(c::MAGIC));
    let r = _mm256_sub_ps(
        _mm256_sub_ps(x, _mm256_mul_ps(n, k(c::LN2_HI))),
        _mm256_mul_ps(n, k(c::LN2_LO)),
    );
    let mut p = k(c::P[0]);
    for &coefficient in &c::P[1..] {
        p = _mm256_add_ps(_mm256_mul_ps(p, r), k(coefficient));
    }
    let e = _mm256_add_ps(
        _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r),
        k(1.0),
    );
    let n = _mm256_sub_epi32(
        _mm256_castps_si256(t),
        _mm256_set1_epi32(c::MAGIC.to_bits() as i32),
    );
    let scale = _mm256_slli_epi32::<23>(_mm256_add_epi32(n, _mm256_set1_epi32(127)));
    _mm256_mul_ps(e, _mm256_castsi256_ps(scale))
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
                    x = f.act.apply(x);
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
                    for (accumulate, finish, act) in [
                        (false, false, Activation::Identity),
                        (true, false, Activation::Identity),
                        (true, true, Activation::Relu6),
                        (true, true, Activation::Silu),
                        (true, true, Activation::Sigmoid),
                    ] {
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
                                act,
                            }),
                            prefetch_a: false,
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
                                    let x = want + bias[i] as f64 + res[i * ldc + j] as f64;
                                    want = match act {
                                        Activation::Relu6 => x.clamp(0.0, 6.0),
                                        Activation::Silu => x / (1.0 + (-x).exp()),
                                        _ => 1.0 / (1.0 + (-x).exp()),
                                    };
                                }
                                assert!(
                                    (got as f64 - want).abs() < 1e-4,
                                    "{isa:?} {mr}x{nr} {act:?} ({i}, {j}): {got} vs {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The vector activations give the scalar ones' bits (so a SiLU fused
    /// into a tile's store equals the separate pass it replaced), NaN
    /// included.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_activations_equal_the_scalar_ones() {
        use std::arch::x86_64::*;
        let xs: Vec<f32> = (0..4000)
            .map(|i| (i as f32 - 2000.0) * 0.05)
            .chain([f32::NAN, -0.0, 0.0, 1e30, -1e30, 88.5, -88.5])
            .collect();
        for act in [
            Activation::Silu,
            Activation::Sigmoid,
            Activation::Relu6,
            Activation::Identity,
        ] {
            let want: Vec<u32> = xs.iter().map(|&x| act.apply(x).to_bits()).collect();
            for isa in Isa::available() {
                let mut got = xs.clone();
                for chunk in got.chunks_exact_mut(8) {
                    // SAFETY: the CPU has the instruction set; chunks of 8 (and 16) lanes.
                    unsafe {
                        match isa {
                            Isa::Avx512 if chunk.len() == 8 => {
                                let mut v = [0f32; 16];
                                v[..8].copy_from_slice(chunk);
                                let r = Act512::of(act).apply(_mm512_loadu_ps(v.as_ptr()));
                                _mm512_storeu_ps(v.as_mut_ptr(), r);
                                chunk.copy_from_slice(&v[..8]);
                            }
                            Isa::Avx2 => {
                                let r = Act256::of(act).apply(_mm256_loadu_ps(chunk.as_ptr()));
                                _mm256_storeu_ps(chunk.as_mut_ptr(), r);
                            }
                            _ => chunk.iter_mut().for_each(|x| *x = act.apply(*x)),
                        }
                    }
                }
                let n = got.len() / 8 * 8;
                for (i, (g, w)) in got[..n].iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), *w, "{isa:?} {act:?} at {}", xs[i]);
                }
            }
        }
    }
}
