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
