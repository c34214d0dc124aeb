//! Layer normalisation ([`dlas_zoo::Op::LayerNorm`]) over the channels of
//! each position, on whole batches in either layout: the normalisation of
//! every transformer and ConvNeXt block, which, unlike a batch norm, cannot
//! be folded into a neighbouring convolution because its statistics depend
//! on the input.
//!
//! Mean and variance are two passes in f32 (the variance of the centred
//! values, so no cancellation), biased as PyTorch's.

use dlas_core::Layout;
use dlas_zoo::Shape;
use rayon::prelude::*;

/// A layer norm's learned per-channel scale and shift, and its epsilon.
#[derive(Debug)]
pub(crate) struct LayerNorm {
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
    pub eps: f32,
}

/// Positions per parallel task in NHWC.
const POSITIONS: usize = 64;

impl LayerNorm {
    /// Normalises a batch `x` of `shape` into `y` (every value written).
    pub fn run(&self, x: &[f32], y: &mut [f32], shape: Shape, layout: Layout) {
        let [c, h, w] = shape;
        match layout {
            Layout::Nhwc => y
                .par_chunks_mut(c * POSITIONS)
                .zip(x.par_chunks(c * POSITIONS))
                .for_each(|(y, x)| {
                    for (y, x) in y.chunks_mut(c).zip(x.chunks(c)) {
                        self.position(x, y);
                    }
                }),
            Layout::Nchw => {
                let plane = h * w;
                y.par_chunks_mut(c * plane)
                    .zip(x.par_chunks(c * plane))
                    .for_each(|(y, x)| self.planes(x, y, c, plane));
            }
            // Through NCHW: the blocked layout runs CNNs, and a layer norm
            // over channels is a transformer's.
            Layout::Nchw16c => {
                let plane = h * w;
                y.par_chunks_mut(c * plane)
                    .zip(x.par_chunks(c * plane))
                    .for_each(|(y, x)| {
                        let (mut a, mut b) = (vec![0.0; x.len()], vec![0.0; x.len()]);
                        crate::blocked::reorder(x, &mut a, shape, false);
                        self.planes(&a, &mut b, c, plane);
                        crate::blocked::reorder(&b, y, shape, true);
                    });
            }
        }
    }

    /// One position's `c` contiguous channels (NHWC).
    fn position(&self, x: &[f32], y: &mut [f32]) {
        let n = x.len() as f32;
        let mean = x.iter().sum::<f32>() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let inv = 1.0 / (var + self.eps).sqrt();
        for (((y, x), g), b) in y.iter_mut().zip(x).zip(&self.gamma).zip(&self.beta) {
            *y = (x - mean) * inv * g + b;
        }
    }

    /// One NCHW sample: the statistics of all positions accumulate plane by
    /// plane, so every pass reads memory in order.
    fn planes(&self, x: &[f32], y: &mut [f32], c: usize, plane: usize) {
        let mut mean = vec![0.0f32; plane];
        for p in x.chunks(plane) {
            mean.iter_mut().zip(p).for_each(|(m, v)| *m += v);
        }
        mean.iter_mut().for_each(|m| *m /= c as f32);
        let mut inv = vec![0.0f32; plane];
        for p in x.chunks(plane) {
            inv.iter_mut()
                .zip(p)
                .zip(&mean)
                .for_each(|((s, v), m)| *s += (v - m) * (v - m));
        }
        inv.iter_mut()
            .for_each(|s| *s = 1.0 / (*s / c as f32 + self.eps).sqrt());
        for (ch, (y, x)) in y.chunks_mut(plane).zip(x.chunks(plane)).enumerate() {
            let (g, b) = (self.gamma[ch], self.beta[ch]);
            for (((y, x), m), i) in y.iter_mut().zip(x).zip(&mean).zip(&inv) {
                *y = (x - m) * i * g + b;
            }
        }
    }
}
