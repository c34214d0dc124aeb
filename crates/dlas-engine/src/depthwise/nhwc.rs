//! The depthwise stencil on NHWC activations: a pixel's channels are
//! contiguous, so each output pixel is its taps' input pixels multiplied
//! channel-wise by the taps' weights and summed, vectorised along
//! channels (as ONNX Runtime's NCHWc and XNNPACK's NHWC depthwise kernels
//! are). Run as one-channel groups of the GEMM instead, MobileNetV2 took
//! about 100 ms in NHWC against 5.4 in NCHW. Tasks are output rows; the
//! weights are stored tap by tap, each tap's channels contiguous; no
//! knob is worth a schedule (a direct schedule is accepted and ignored).

use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::Isa;
use crate::workload::Workload;

#[derive(Debug, Clone)]
pub(crate) struct DepthwiseNhwc {
    w: Workload,
    /// Tap t's weights of every channel from t x channels on.
    taps: Vec<f32>,
    isa: Isa,
}

impl DepthwiseNhwc {
    /// `weights` is (channels, 1, k, k); `isa` one the CPU has.
    pub fn new(w: Workload, weights: &[f32], isa: Isa) -> DepthwiseNhwc {
        debug_assert!(w.in_channels_per_group() == 1 && w.out_channels_per_group() == 1);
        let (c, kk) = (w.out_channels, w.kernel * w.kernel);
        let mut taps = vec![0.0; kk * c];
        for (ch, g) in weights.chunks_exact(kk).enumerate() {
            for (t, &v) in g.iter().enumerate() {
                taps[t * c + ch] = v;
            }
        }
        DepthwiseNhwc { w, taps, isa }
    }

    /// One NHWC sample, with the epilogue (and residual) applied per pixel.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        let row = self.w.out_w * self.w.out_channels;
        let out = SyncPtr::new(out);
        crate::awake::for_each(self.w.out_h, |oy| {
            // SAFETY: task oy alone writes output row oy.
            let o = unsafe { out.slice(oy * row, row) };
            let r = residual.map(|r| &r[oy * row..][..row]);
            #[cfg(target_arch = "x86_64")]
            match self.isa {
                // SAFETY: the layer's isa is one this CPU has (`new`).
                Isa::Avx512 => return unsafe { self.row_avx512(input, oy, o, epi, r) },
                Isa::Avx2 => return unsafe { self.row_avx2(input, oy, o, epi, r) },
                Isa::Portable => {}
            }
            self.row(input, oy, o, epi, r)
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn row_avx512(&self, x: &[f32], oy: usize, o: &mut [f32], e: &Epilogue, r: Option<&[f32]>) {
        self.row(x, oy, o, e, r)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn row_avx2(&self, x: &[f32], oy: usize, o: &mut [f32], e: &Epilogue, r: Option<&[f32]>) {
        self.row(x, oy, o, e, r)
    }

    /// Output row `oy` into `out` (its `out_w` pixels), compiled for the
    /// widest instruction set the layer runs.
    #[inline(always)]
    fn row(
        &self,
        input: &[f32],
        oy: usize,
        out: &mut [f32],
        epi: &Epilogue,
        residual: Option<&[f32]>,
    ) {
        let w = &self.w;
        let (c, k, s, p) = (w.out_channels, w.kernel, w.stride, w.padding as isize);
        let inside = |at: isize, len: usize| (0..len as isize).contains(&at);
        for (ox, o) in out.chunks_exact_mut(c).enumerate() {
            o.fill(0.0);
            for ky in 0..k {
                let iy = (oy * s + ky) as isize - p;
                if !inside(iy, w.in_h) {
                    continue;
                }
                for kx in 0..k {
                    let ix = (ox * s + kx) as isize - p;
                    if !inside(ix, w.in_w) {
                        continue;
                    }
                    let x = &input[(iy as usize * w.in_w + ix as usize) * c..][..c];
                    let t = &self.taps[(ky * k + kx) * c..][..c];
                    for ((o, &x), &t) in o.iter_mut().zip(x).zip(t) {
                        *o += x * t;
                    }
                }
            }
            epi.pixel(0, o, residual.map(|r| &r[ox * c..][..c]));
        }
    }
}
