//! What happens to a convolution's accumulators before they are stored:
//! bias (which carries a folded batch norm), an optional residual addition,
//! then an activation. Applying it while the tile is still in cache is what
//! makes BN/activation/Add fusion pay.

/// What an int8 kernel calls with finished accumulators: `finish(oc, i,
/// acc, out)` turns those of channel `oc`'s consecutive outputs `i..` into
/// their int8 values in `out`, through the epilogue and requantisation.
pub(crate) type Int8Finish<'a> = dyn Fn(usize, usize, &[i32], &mut [i8]) + Sync + 'a;

/// An element-wise activation fused into the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    Identity,
    Relu,
    Relu6,
    Silu,
    Sigmoid,
}

impl Activation {
    /// Every activation, for tests that go through them all.
    #[cfg(test)]
    pub(crate) const ALL: [Activation; 5] = [
        Activation::Identity,
        Activation::Relu,
        Activation::Relu6,
        Activation::Silu,
        Activation::Sigmoid,
    ];

    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Identity => x,
            Activation::Relu => x.max(0.0),
            Activation::Relu6 => x.clamp(0.0, 6.0),
            Activation::Silu => x / (1.0 + exp(-x)),
            Activation::Sigmoid => 1.0 / (1.0 + exp(-x)),
        }
    }

    /// `f(x)` then the activation, over every value of `out`, with the
    /// activation chosen once so that each loop is specialised (and
    /// vectorised: SiLU and sigmoid through [`exp`]).
    #[inline(always)]
    fn map(self, out: &mut [f32], f: impl Fn(usize, f32) -> f32) {
        #[inline(always)]
        fn each(out: &mut [f32], f: impl Fn(usize, f32) -> f32, act: impl Fn(f32) -> f32) {
            for (i, o) in out.iter_mut().enumerate() {
                *o = act(f(i, *o));
            }
        }
        /// [`each`] compiled for AVX-512: SiLU and sigmoid are compute-bound
        /// (a polynomial and a division per value), so 16 lanes pay.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        fn each_avx512(out: &mut [f32], f: impl Fn(usize, f32) -> f32, act: impl Fn(f32) -> f32) {
            each(out, f, act)
        }
        /// [`each`] compiled for AVX2: 8 lanes where the build's baseline
        /// (SSE2) has 4. Without it an AVX2 CPU ran EfficientNet-B0's SiLU
        /// at about 1.2 ns a value, three times ONNX Runtime's
        /// (`dlas bench profile`, docs/performance.md). Multiplies and adds
        /// stay apart (Rust does not contract them into FMAs), so every
        /// instruction set computes the same values.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        fn each_avx2(out: &mut [f32], f: impl Fn(usize, f32) -> f32, act: impl Fn(f32) -> f32) {
            each(out, f, act)
        }
        let silu = |x: f32| x / (1.0 + exp(-x));
        let sigmoid = |x: f32| 1.0 / (1.0 + exp(-x));
        match self {
            Activation::Identity => each(out, f, |x| x),
            Activation::Relu => each(out, f, |x| x.max(0.0)),
            Activation::Relu6 => each(out, f, |x| x.clamp(0.0, 6.0)),
            #[cfg(target_arch = "x86_64")]
            // Each arm its own closure: a function pointer would not inline.
            #[cfg(target_arch = "x86_64")]
            Activation::Silu | Activation::Sigmoid => {
                use crate::isa::Isa;
                let is_silu = self == Activation::Silu;
                match Isa::detect() {
                    // SAFETY: the CPU has AVX-512F.
                    Isa::Avx512 if is_silu => unsafe { each_avx512(out, f, silu) },
                    // SAFETY: as above.
                    Isa::Avx512 => unsafe { each_avx512(out, f, sigmoid) },
                    // SAFETY: the CPU has AVX2 and FMA.
                    Isa::Avx2 if is_silu => unsafe { each_avx2(out, f, silu) },
                    // SAFETY: as above.
                    Isa::Avx2 => unsafe { each_avx2(out, f, sigmoid) },
                    _ if is_silu => each(out, f, silu),
                    _ => each(out, f, sigmoid),
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            Activation::Silu => each(out, f, silu),
            #[cfg(not(target_arch = "x86_64"))]
            Activation::Sigmoid => each(out, f, sigmoid),
        }
    }

    /// The activation over every value of `x`.
    pub(crate) fn apply_all(self, x: &mut [f32]) {
        self.map(x, |_, v| v);
    }

    /// The activation as `min(max(x, lo), hi)` (`Some(None)`: the
    /// identity), which a vector store applies in two instructions; `None`
    /// for the activations that are not a clamp.
    pub(crate) fn clamp(self) -> Option<Option<(f32, f32)>> {
        match self {
            Activation::Identity => Some(None),
            Activation::Relu => Some(Some((0.0, f32::INFINITY))),
            Activation::Relu6 => Some(Some((0.0, 6.0))),
            Activation::Silu | Activation::Sigmoid => None,
        }
    }
}

/// e^x in f32 without a libm call, so that loops over it vectorise (a
/// call per value does not): Cephes' `expf`, a rounding of x / ln 2 (by
/// the 1.5 x 2^23 trick, which needs no SSE4.1 `round`), a two-part ln 2
/// reduction and a degree-5 polynomial, within 2 ulp of e^x; x is clamped
/// to [-87.3, 88.3], where 2^n stays a normal f32.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    use exp_constants as c;
    let x = x.clamp(c::LO, c::HI);
    let t = x * std::f32::consts::LOG2_E + c::MAGIC;
    let n = t - c::MAGIC;
    let r = x - n * c::LN2_HI - n * c::LN2_LO;
    let mut p = c::P[0];
    for coefficient in &c::P[1..] {
        p = p * r + coefficient;
    }
    let e = p * r * r + r + 1.0;
    // t's low bits are n (its ulp is 1): 2^n built from its exponent field.
    let n = t.to_bits() as i32 - c::MAGIC.to_bits() as i32;
    e * f32::from_bits(((n + 127) << 23) as u32)
}

/// The constants of [`exp`], shared with the microkernels' vector copies.
pub(crate) mod exp_constants {
    /// 1.5 x 2^23: adding it rounds to an integer.
    pub const MAGIC: f32 = 12_582_912.0;
    /// The clamp that keeps 2^n a normal f32.
    pub const LO: f32 = -87.3;
    pub const HI: f32 = 88.3;
    /// ln 2 in two parts, so n ln 2 is subtracted exactly.
    pub const LN2_HI: f32 = 0.693_359_4;
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    /// The polynomial's coefficients, highest degree first.
    pub const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_2e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ];
}

/// `act(acc + bias[oc] + residual)`, in that order: ResNet adds the shortcut
/// before its ReLU, so the activation must come last.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Epilogue {
    pub bias: Vec<f32>,
    pub act: Activation,
}

impl Epilogue {
    /// Finishes values that all belong to output channel `oc` (NCHW rows).
    #[inline]
    pub fn channel(&self, oc: usize, out: &mut [f32], residual: Option<&[f32]>) {
        let b = self.bias[oc];
        match residual {
            Some(r) => {
                let r = &r[..out.len()];
                self.act.map(out, |i, o| o + b + r[i]);
            }
            None => self.act.map(out, |_, o| o + b),
        }
    }

    /// Finishes one value of output channel `oc`.
    #[inline(always)]
    pub fn one(&self, oc: usize, acc: f32, residual: f32) -> f32 {
        self.act.apply(acc + self.bias[oc] + residual)
    }

    /// Finishes consecutive channels `oc0..` of one pixel (NHWC rows).
    #[inline]
    pub fn pixel(&self, oc0: usize, out: &mut [f32], residual: Option<&[f32]>) {
        let bias = &self.bias[oc0..oc0 + out.len()];
        match residual {
            Some(r) => {
                let r = &r[..out.len()];
                self.act.map(out, |i, o| o + bias[i] + r[i]);
            }
            None => self.act.map(out, |i, o| o + bias[i]),
        }
    }
}

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr(*mut f32);

// SAFETY: every user hands disjoint index ranges to different tasks.
unsafe impl Send for SyncPtr {}
unsafe impl Sync for SyncPtr {}

impl SyncPtr {
    pub fn new(s: &mut [f32]) -> SyncPtr {
        SyncPtr(s.as_mut_ptr())
    }

    /// The same allocation, `n` floats further.
    pub fn offset(self, n: usize) -> SyncPtr {
        SyncPtr(self.0.wrapping_add(n))
    }

    pub fn get(self) -> *mut f32 {
        self.0
    }

    /// # Safety
    /// `offset..offset + len` must be inside the original slice and written
    /// by no other task while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, offset: usize, len: usize) -> &mut [f32] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(offset), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector loops (compiled for this CPU's widest instructions)
    /// compute bit for bit what one value at a time does, so results do
    /// not depend on the machine's instruction set.
    #[test]
    fn every_activation_over_a_slice_is_the_scalar_one() {
        let values: Vec<f32> = (-2000..2000).map(|i| i as f32 * 0.013 - 0.5).collect();
        for act in Activation::ALL {
            let mut all = values.clone();
            act.apply_all(&mut all);
            for (x, y) in values.iter().zip(&all) {
                assert_eq!(act.apply(*x).to_bits(), y.to_bits(), "{act:?} at {x}");
            }
        }
    }

    /// The vectorisable exp against f64's over its whole clamped range
    /// (relative error, 2 ulp = 2.4e-7) and at the ends.
    #[test]
    fn exp_is_within_two_ulp() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = -87.3 + (88.3 + 87.3) * i as f32 / 200_000.0;
            let want = (x as f64).exp();
            worst = worst.max(((exp(x) as f64 - want) / want).abs());
        }
        assert!(worst < 2.4e-7, "worst relative error {worst:e}");
        assert!(exp(-1000.0) > 0.0 && exp(-1000.0) < 1e-37);
        assert!(exp(1000.0).is_finite() && exp(1000.0) > 1e38);
        assert!(exp(f32::NAN).is_nan());
    }
}
