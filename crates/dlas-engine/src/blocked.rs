//! The blocked channel layout, NCHW16c (issue 42): a sample is its
//! channels in blocks of [`BLOCK`], each block a map of pixels whose 16
//! channels are contiguous (the last block holds the remainder, so a
//! tensor has exactly c x h x w values, as in the other layouts).
//!
//! On 14x14 and 7x7 maps the NCHW kernels vectorise along 196 or 49
//! pixels, and every vector that overhangs a row or a map is partly empty;
//! with vectors along 16 channels every vector is full wherever a layer's
//! channels are a multiple of 16 (all of MobileNetV2's expanded layers,
//! ResNet-50's, EfficientNet-B0's), which is how ONNX Runtime runs these
//! networks. Two kernels cover the CNNs: [`conv::BlockedConv`], the
//! direct convolution of any kernel size and stride, whose tile is a few
//! output pixels by 16 output channels (for a 1x1 layer the GEMM's product
//! of pixels by channels, read in place), and [`depthwise::BlockedDepthwise`],
//! the stencil, 16 channels per vector. Both are written once over a
//! 16-lane vector ([`V16`]): two AVX2 registers, one AVX-512 register, or
//! an array for the portable build. [`inverted`] runs an inverted-residual
//! block's 1x1 expansion and depthwise layer as one step, as
//! `crate::inverted` does in NCHW; batch norms and pooling have their own
//! loops over whole blocks here ([`affine`], [`pool`]).

pub(crate) mod conv;
pub(crate) mod depthwise;
pub(crate) mod inverted;

use crate::epilogue::Activation;
use dlas_zoo::Shape;

/// Channels per block.
pub(crate) const BLOCK: usize = 16;

/// Channels of block `b` of a tensor of `c` channels.
#[inline(always)]
pub(crate) fn block_width(c: usize, b: usize) -> usize {
    (c - b * BLOCK).min(BLOCK)
}

/// Offset of (channel, y, x) inside one NCHW16c sample of shape `[c, h, w]`.
#[inline(always)]
pub(crate) fn offset([c, h, w]: Shape, ch: usize, y: usize, x: usize) -> usize {
    let b = ch / BLOCK;
    b * BLOCK * h * w + (y * w + x) * block_width(c, b) + ch % BLOCK
}

/// Channel of the value at offset `i` of an NCHW16c sample.
#[inline(always)]
pub(crate) fn channel_of([c, h, w]: Shape, i: usize) -> usize {
    let b = i / (BLOCK * h * w);
    b * BLOCK + (i % (BLOCK * h * w)) % block_width(c, b)
}

/// Sixteen f32 lanes, as each instruction set holds them.
///
/// # Safety
/// Every method reads or writes 16 floats at its pointer (one for
/// `splat`), which must be valid; the CPU must run the implementation's
/// instruction set.
pub(crate) trait V16: Copy {
    unsafe fn zero() -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn splat(p: *const f32) -> Self;
    unsafe fn set1(v: f32) -> Self;
    /// `self + a * b`.
    unsafe fn fma(self, a: Self, b: Self) -> Self;
    unsafe fn add(self, o: Self) -> Self;
    unsafe fn max(self, o: Self) -> Self;
    unsafe fn min(self, o: Self) -> Self;
    unsafe fn store(self, p: *mut f32);
}

/// The portable vector: an array the compiler vectorises as it can.
#[derive(Clone, Copy)]
pub(crate) struct Lanes([f32; 16]);

impl V16 for Lanes {
    #[inline(always)]
    unsafe fn zero() -> Self {
        Lanes([0.0; 16])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract.
        Lanes(unsafe { std::ptr::read_unaligned(p.cast::<[f32; 16]>()) })
    }
    #[inline(always)]
    unsafe fn splat(p: *const f32) -> Self {
        // SAFETY: the trait's contract.
        Lanes([unsafe { *p }; 16])
    }
    #[inline(always)]
    unsafe fn set1(v: f32) -> Self {
        Lanes([v; 16])
    }
    #[inline(always)]
    unsafe fn fma(self, a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| self.0[i] + a.0[i] * b.0[i]))
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        Lanes(std::array::from_fn(|i| self.0[i] + o.0[i]))
    }
    #[inline(always)]
    unsafe fn max(self, o: Self) -> Self {
        Lanes(std::array::from_fn(|i| self.0[i].max(o.0[i])))
    }
    #[inline(always)]
    unsafe fn min(self, o: Self) -> Self {
        Lanes(std::array::from_fn(|i| self.0[i].min(o.0[i])))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the trait's contract.
        unsafe { std::ptr::write_unaligned(p.cast::<[f32; 16]>(), self.0) }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::V16;
    use std::arch::x86_64::*;

    /// Two AVX2 registers.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2(__m256, __m256);

    // SAFETY (every method): the trait's contract; the callers are
    // compiled with AVX2 and FMA (`target_feature`), into which these
    // always-inlined bodies are inlined.
    impl V16 for Avx2 {
        #[inline(always)]
        unsafe fn zero() -> Self {
            unsafe { Avx2(_mm256_setzero_ps(), _mm256_setzero_ps()) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            unsafe { Avx2(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))) }
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> Self {
            unsafe {
                let v = _mm256_broadcast_ss(&*p);
                Avx2(v, v)
            }
        }
        #[inline(always)]
        unsafe fn set1(v: f32) -> Self {
            unsafe { Avx2(_mm256_set1_ps(v), _mm256_set1_ps(v)) }
        }
        #[inline(always)]
        unsafe fn fma(self, a: Self, b: Self) -> Self {
            unsafe {
                Avx2(
                    _mm256_fmadd_ps(a.0, b.0, self.0),
                    _mm256_fmadd_ps(a.1, b.1, self.1),
                )
            }
        }
        #[inline(always)]
        unsafe fn add(self, o: Self) -> Self {
            unsafe { Avx2(_mm256_add_ps(self.0, o.0), _mm256_add_ps(self.1, o.1)) }
        }
        #[inline(always)]
        unsafe fn max(self, o: Self) -> Self {
            unsafe { Avx2(_mm256_max_ps(self.0, o.0), _mm256_max_ps(self.1, o.1)) }
        }
        #[inline(always)]
        unsafe fn min(self, o: Self) -> Self {
            unsafe { Avx2(_mm256_min_ps(self.0, o.0), _mm256_min_ps(self.1, o.1)) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe {
                _mm256_storeu_ps(p, self.0);
                _mm256_storeu_ps(p.add(8), self.1);
            }
        }
    }

    /// One AVX-512 register.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512(__m512);

    // SAFETY (every method): as for `Avx2`, with AVX-512F.
    impl V16 for Avx512 {
        #[inline(always)]
        unsafe fn zero() -> Self {
            unsafe { Avx512(_mm512_setzero_ps()) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            unsafe { Avx512(_mm512_loadu_ps(p)) }
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> Self {
            unsafe { Avx512(_mm512_set1_ps(*p)) }
        }
        #[inline(always)]
        unsafe fn set1(v: f32) -> Self {
            unsafe { Avx512(_mm512_set1_ps(v)) }
        }
        #[inline(always)]
        unsafe fn fma(self, a: Self, b: Self) -> Self {
            unsafe { Avx512(_mm512_fmadd_ps(a.0, b.0, self.0)) }
        }
        #[inline(always)]
        unsafe fn add(self, o: Self) -> Self {
            unsafe { Avx512(_mm512_add_ps(self.0, o.0)) }
        }
        #[inline(always)]
        unsafe fn max(self, o: Self) -> Self {
            unsafe { Avx512(_mm512_max_ps(self.0, o.0)) }
        }
        #[inline(always)]
        unsafe fn min(self, o: Self) -> Self {
            unsafe { Avx512(_mm512_min_ps(self.0, o.0)) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
    }
}

/// Finishes 16 lanes of accumulators of output block values at `out`
/// (`width` of them valid): bias, the residual at the same offsets, and a
/// clamping activation in registers; SiLU and sigmoid are left to
/// [`Activation::apply_all`] over the stored tile (see `smooth`).
///
/// # Safety
/// `out` (and `residual`, unless null) hold `width` floats; `bias` 16.
#[inline(always)]
pub(crate) unsafe fn finish<V: V16>(
    acc: V,
    bias: V,
    (out, residual, width): (*mut f32, *const f32, usize),
    clamp: Option<(V, V)>,
) {
    // SAFETY: the caller's contract; partial blocks go through a buffer.
    unsafe {
        let mut x = acc.add(bias);
        if width == BLOCK {
            if !residual.is_null() {
                x = x.add(V::load(residual));
            }
            if let Some((lo, hi)) = clamp {
                x = hi.min(x.max(lo));
            }
            x.store(out);
            return;
        }
        let mut buf = [0.0f32; BLOCK];
        if !residual.is_null() {
            std::ptr::copy_nonoverlapping(residual, buf.as_mut_ptr(), width);
            x = x.add(V::load(buf.as_ptr()));
        }
        if let Some((lo, hi)) = clamp {
            x = hi.min(x.max(lo));
        }
        x.store(buf.as_mut_ptr());
        std::ptr::copy_nonoverlapping(buf.as_ptr(), out, width);
    }
}

/// The activation's clamp bounds as vectors, `None` for the identity and
/// for SiLU and sigmoid (applied after the store).
///
/// # Safety
/// The CPU runs `V`'s instruction set.
#[inline(always)]
pub(crate) unsafe fn clamp_of<V: V16>(act: Activation) -> Option<(V, V)> {
    // SAFETY: the caller's contract.
    act.clamp()
        .flatten()
        .map(|(lo, hi)| unsafe { (V::set1(lo), V::set1(hi)) })
}

/// Whether the activation runs after the store, over the stored values.
pub(crate) fn smooth(act: Activation) -> bool {
    act.clamp().is_none()
}

/// The taps `k0..k1` of a window of `k` starting at `start` (an input
/// position, negative in the padding) that lie inside `0..len`.
#[inline(always)]
pub(crate) fn taps_inside(start: isize, k: usize, len: usize) -> std::ops::Range<usize> {
    let k0 = (-start).clamp(0, k as isize) as usize;
    let k1 = (len as isize - start).clamp(k0 as isize, k as isize) as usize;
    k0..k1
}

/// The output positions `lo..hi` of an axis of `out` whose every tap lies
/// inside an input of `len` (kernel `k`, stride `s`, padding `p`).
pub(crate) fn interior(len: usize, out: usize, (k, s, p): (usize, usize, usize)) -> (usize, usize) {
    let lo = p.div_ceil(s).min(out);
    let hi = if len + p >= k {
        ((len + p - k) / s + 1).min(out)
    } else {
        0
    };
    (lo, hi.max(lo))
}

/// The blocks of every sample of a batch `x` of shape `[c, h, w]`, each
/// with its first channel, for loops over blocks in parallel.
fn blocks_of(x: &mut [f32], [c, h, w]: Shape) -> Vec<(usize, &mut [f32])> {
    let mut out = Vec::new();
    for sample in x.chunks_mut(c * h * w) {
        let mut rest = sample;
        for b in 0..c.div_ceil(BLOCK) {
            let (block, tail) = std::mem::take(&mut rest).split_at_mut(block_width(c, b) * h * w);
            out.push((b * BLOCK, block));
            rest = tail;
        }
    }
    out
}

/// `act(x * scale[c] + shift[c])` over an NCHW16c batch, a block's pixels
/// at a time (what `ops::affine` does through `ops::at` otherwise, a
/// division per value).
pub(crate) fn affine(
    x: &mut [f32],
    (scale, shift): (&[f32], &[f32]),
    act: Activation,
    shape: Shape,
) {
    use rayon::prelude::*;
    blocks_of(x, shape).into_par_iter().for_each(|(c0, block)| {
        let width = block_width(shape[0], c0 / BLOCK);
        let (scale, shift) = (&scale[c0..c0 + width], &shift[c0..c0 + width]);
        for pixel in block.chunks_exact_mut(width) {
            for ((v, a), b) in pixel.iter_mut().zip(scale).zip(shift) {
                *v = act.apply(v.mul_add(*a, *b));
            }
        }
    });
}

/// Max or average pooling of an NCHW16c batch `x` (window `p`; averages
/// divide by the window's values inside the input), blocks in parallel,
/// each output pixel's lanes at once.
pub(crate) fn pool(x: &[f32], shape: Shape, p: &dlas_zoo::Pool, max: bool) -> Vec<f32> {
    use rayon::prelude::*;
    let [c, h, w] = shape;
    let (oh, ow) = (p.out(h), p.out(w));
    let mut out = vec![0.0; x.len() / (c * h * w) * c * oh * ow];
    let blocks = c.div_ceil(BLOCK);
    blocks_of(&mut out, [c, oh, ow])
        .into_par_iter()
        .enumerate()
        .for_each(|(i, (c0, o))| {
            let (n, b) = (i / blocks, c0 / BLOCK);
            let width = block_width(c, b);
            let src = &x[n * c * h * w + b * BLOCK * h * w..][..width * h * w];
            let mut best = [0.0f32; BLOCK];
            for oy in 0..oh {
                let ky = taps_inside((oy * p.stride) as isize - p.padding as isize, p.kernel, h);
                for ox in 0..ow {
                    let start = (ox * p.stride) as isize - p.padding as isize;
                    let kx = taps_inside(start, p.kernel, w);
                    let acc = &mut best[..width];
                    acc.fill(if max { f32::NEG_INFINITY } else { 0.0 });
                    for y in ky.clone() {
                        let iy = (oy * p.stride + y) - p.padding;
                        for xx in kx.clone() {
                            let ix = (start + xx as isize) as usize;
                            let v = &src[(iy * w + ix) * width..][..width];
                            for (a, v) in acc.iter_mut().zip(v) {
                                *a = if max { a.max(*v) } else { *a + v };
                            }
                        }
                    }
                    let count = (ky.len() * kx.len()) as f32;
                    let dst = &mut o[(oy * ow + ox) * width..][..width];
                    for (d, a) in dst.iter_mut().zip(acc.iter()) {
                        *d = if max { *a } else { a / count };
                    }
                }
            }
        });
    out
}

/// Reorders one sample between NCHW and NCHW16c (`to_blocked`) or back.
pub(crate) fn reorder(x: &[f32], out: &mut [f32], shape: Shape, to_blocked: bool) {
    let [c, h, w] = shape;
    let plane = h * w;
    for b in 0..c.div_ceil(BLOCK) {
        let width = block_width(c, b);
        for j in 0..width {
            let ch = b * BLOCK + j;
            for p in 0..plane {
                let blocked = b * BLOCK * plane + p * width + j;
                let planar = ch * plane + p;
                if to_blocked {
                    out[blocked] = x[planar];
                } else {
                    out[planar] = x[blocked];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::Isa;
    use crate::testing::{self, F32_TOLERANCE};
    use crate::workload::Workload;
    use proptest::prelude::*;

    /// Full blocks and a remainder: `w`'s channels per group times `by`,
    /// plus one for a depthwise layer (which needs two channels or more).
    fn wider(w: Workload, by: usize, depthwise: bool) -> Workload {
        let (cin, cout) = match depthwise {
            true => (w.in_channels * by + 1, w.in_channels * by + 1),
            false => (
                w.in_channels_per_group() * by,
                w.out_channels_per_group() * by,
            ),
        };
        let groups = if depthwise { cin } else { 1 };
        Workload::new(
            cin, cout, w.kernel, w.stride, w.padding, groups, w.in_h, w.in_w,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// The operators around the convolutions give in NCHW16c exactly
        /// what they give in NCHW (the same sums in the same order):
        /// pooling (padded windows, strides), a batch norm with ReLU, the
        /// squeeze-and-excitation product, global pooling, concatenation.
        #[test]
        fn operators_in_the_blocked_layout_equal_nchw(
            (c, c2, h, w, batch) in (1usize..=40, 1usize..=40, 1usize..=9, 1usize..=9, 1usize..=2),
            (kernel, stride, padding, max) in (1usize..=3, 1usize..=2, 0usize..=1, any::<bool>()),
            seed in any::<u64>(),
        ) {
            use crate::ops;
            use dlas_core::Layout::{Nchw, Nchw16c};
            use rand::{Rng, SeedableRng};
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut draw = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
            let shape = [c, h, w];
            let x = draw(batch * c * h * w);
            let blocked = |v: &[f32], s: Shape| ops::relayout(v, s, Nchw, Nchw16c);
            let planar = |v: &[f32], s: Shape| ops::relayout(v, s, Nchw16c, Nchw);
            let p = dlas_zoo::Pool { kernel: kernel.max(1 + padding), stride, padding, end: 0 };
            if p.kernel <= h + 2 * padding && p.kernel <= w + 2 * padding {
                let out_shape = [c, p.out(h), p.out(w)];
                let want = ops::pool(&x, shape, &p, max, Nchw);
                let got = planar(&ops::pool(&blocked(&x, shape), shape, &p, max, Nchw16c), out_shape);
                prop_assert_eq!(got, want);
            }
            let (scale, shift) = (draw(c), draw(c));
            let mut want = x.clone();
            ops::affine(&mut want, &scale, &shift, Activation::Relu, shape, Nchw);
            let mut got = blocked(&x, shape);
            ops::affine(&mut got, &scale, &shift, Activation::Relu, shape, Nchw16c);
            prop_assert_eq!(planar(&got, shape), want);
            let se = draw(batch * c);
            let mut want = vec![0.0; x.len()];
            ops::mul(&x, &se, shape, Nchw, &mut want);
            let mut got = vec![0.0; x.len()];
            ops::mul(&blocked(&x, shape), &se, shape, Nchw16c, &mut got);
            prop_assert_eq!(planar(&got, shape), want);
            prop_assert_eq!(
                ops::global_avg_pool(&blocked(&x, shape), shape, Nchw16c),
                ops::global_avg_pool(&x, shape, Nchw)
            );
            let y = draw(batch * c2 * h * w);
            let parts = [(&x[..], c), (&y[..], c2)];
            let want = ops::concat(&parts, batch, [h, w], Nchw);
            let (xb, yb) = (blocked(&x, shape), blocked(&y, [c2, h, w]));
            let got = ops::concat(&[(&xb[..], c), (&yb[..], c2)], batch, [h, w], Nchw16c);
            prop_assert_eq!(planar(&got, [c + c2, h, w]), want);
        }

        /// The blocked direct kernel and stencil on every instruction set
        /// this CPU has, against the f64 reference, with every activation,
        /// with and without a residual, under any valid schedule (tasks of
        /// several blocks and rows included).
        #[test]
        fn blocked_kernels_match_the_reference_on_every_isa(
            dense in testing::dense_workload(),
            dw in testing::depthwise_workload(),
            by in 1usize..=8,
            (blocks, rows) in (1usize..=4, 1usize..=9),
            act in testing::activation(),
            residual in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let (dense, dw) = (wider(dense, by, false), wider(dw, by, true));
            let schedule = |w: &Workload| crate::BlockedSchedule {
                blocks: blocks.min(w.out_channels.div_ceil(BLOCK)),
                rows: rows.min(w.out_h),
            };
            for isa in Isa::available() {
                let weights = testing::weights(&dense, seed);
                let k = conv::BlockedConv::new(dense, schedule(&dense), &weights, isa);
                let e = testing::error(&dense, &weights, (act, residual, seed), |x, y, epi, r| {
                    testing::through_blocked(&dense, x, y, r, |x, y, r| k.run(x, y, epi, r))
                });
                prop_assert!(e < F32_TOLERANCE, "{isa:?} {dense}: error {e}");
                let weights = testing::weights(&dw, seed);
                let k = depthwise::BlockedDepthwise::new(dw, schedule(&dw), &weights, isa);
                let e = testing::error(&dw, &weights, (act, residual, seed), |x, y, epi, r| {
                    testing::through_blocked(&dw, x, y, r, |x, y, r| k.run(x, y, epi, r))
                });
                prop_assert!(e < F32_TOLERANCE, "{isa:?} {dw}: error {e}");
            }
        }
    }

    #[test]
    fn offsets_cover_a_sample_once_and_name_their_channel() {
        for shape in [[40, 3, 5], [16, 2, 2], [3, 4, 1], [33, 1, 7]] {
            let [c, h, w] = shape;
            let mut seen = vec![false; c * h * w];
            for ch in 0..c {
                for y in 0..h {
                    for x in 0..w {
                        let i = offset(shape, ch, y, x);
                        assert!(!seen[i], "{shape:?} {ch} {y} {x}");
                        seen[i] = true;
                        assert_eq!(channel_of(shape, i), ch);
                    }
                }
            }
            let x: Vec<f32> = (0..c * h * w).map(|i| i as f32).collect();
            let (mut b, mut back) = (vec![0.0; x.len()], vec![0.0; x.len()]);
            reorder(&x, &mut b, shape, true);
            reorder(&b, &mut back, shape, false);
            assert_eq!(back, x);
            assert_eq!(b[offset(shape, c - 1, h - 1, w - 1)], x[x.len() - 1]);
        }
    }
}
