//! What happens to a convolution's accumulators before they are stored:
//! bias (which carries a folded batch norm), an optional residual addition,
//! then an activation. Applying it while the tile is still in cache is what
//! makes BN/activation/Add fusion pay.

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
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Identity => x,
            Activation::Relu => x.max(0.0),
            Activation::Relu6 => x.clamp(0.0, 6.0),
            Activation::Silu => x / (1.0 + (-x).exp()),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        }
    }
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
                for (o, r) in out.iter_mut().zip(r) {
                    *o = self.act.apply(*o + b + r);
                }
            }
            None => {
                for o in out.iter_mut() {
                    *o = self.act.apply(*o + b);
                }
            }
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
                for ((o, b), r) in out.iter_mut().zip(bias).zip(r) {
                    *o = self.act.apply(*o + b + r);
                }
            }
            None => {
                for (o, b) in out.iter_mut().zip(bias) {
                    *o = self.act.apply(*o + b);
                }
            }
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

/// Whether the AVX2 + FMA code paths can run on this CPU.
#[inline]
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `a * b + c`, fused when the caller was compiled with FMA (a libm call
/// otherwise, which the portable paths avoid).
#[inline(always)]
pub(crate) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}
