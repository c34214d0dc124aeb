//! int8 convolution (NCHW, dense): int8 weights with per-output-channel
//! symmetric scales, int8 activations with a per-tensor scale and zero
//! point, exact i32 accumulation, and a per-channel requantisation epilogue.
//!
//! Kernels, as `dlas_core::kernel::kernel_class` chooses them from the
//! layer's algorithm, shape and the CPU (the key's class; nothing is
//! decided here): depthwise
//! layers (one input and one output channel per group) run a sliding-window
//! stencil per channel ([`depthwise`]) under every algorithm; under gemm,
//! every other layer runs im2col and an integer GEMM, with AVX-512 VNNI's
//! `vpdpbusd` where the CPU has it ([`vnni`]) and AVX2's `vpmaddwd` (or
//! portable code) elsewhere ([`gemm`], also the reference the others are
//! tested against); under direct and spatial pack, the sliding-window
//! kernels [`direct`] and [`spatial_pack`] (AVX2 `vpmaddwd` or portable
//! code) read the input through one padded, pair-interleaved [`window`]
//! copy, without im2col. The GEMM would run a depthwise
//! layer as one one-row matrix product per channel, with its per-group
//! packing and a 4-row register tile of which one row is used, which made
//! int8 MobileNets an order of magnitude slower than fp32. All kernels
//! accumulate exactly, so they produce the same bytes (tested).

mod depthwise;
mod direct;
mod gemm;
mod spatial_pack;
mod vnni;
mod window;

/// Whether this CPU runs the VNNI int8 GEMM (the `vnni` of
/// `dlas_core::kernel::Cpu`).
pub(crate) fn vnni_available() -> bool {
    vnni::available()
}

use crate::epilogue::{Activation, Epilogue};
#[cfg(target_arch = "x86_64")]
use crate::isa::has_avx2_fma;
use crate::workload::Workload;
use dlas_core::Layout;
use dlas_core::kernel::{KernelClass, KernelFamily, Precision};
use dlas_zoo::quant::ActivationQuant;

#[derive(Debug, Clone)]
pub(crate) struct Int8Conv {
    w: Workload,
    kernel: Kernel,
    /// Per output channel: weight scale x input scale (the real value of one
    /// accumulator unit).
    unit: Vec<f32>,
    input: ActivationQuant,
    output: ActivationQuant,
}

/// Consecutive accumulators of one output channel, on their way out.
struct Segment<'a> {
    oc: usize,
    acc: &'a [i32],
    residual: Option<&'a [f32]>,
    out: &'a mut [i8],
}

#[derive(Debug, Clone)]
enum Kernel {
    Gemm(gemm::Packed),
    Vnni(vnni::Packed),
    Depthwise(depthwise::Packed),
    Direct(direct::Packed),
    SpatialPack(spatial_pack::Packed),
}

/// Which kernel runs a layer.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Choice {
    Gemm,
    Vnni,
    Depthwise,
    Direct,
    SpatialPack,
}

/// A weight quantised with its channel's scale: symmetric, in -127..=127.
fn quantize_weight(v: f32, scale: f32) -> i8 {
    (v / scale).round().clamp(-127.0, 127.0) as i8
}

impl Int8Conv {
    /// Quantises `weights` with `scales` (one per output channel), for the
    /// kernel of `class`, which `dlas_core::kernel::kernel_class` chose for
    /// the layer and this CPU (see `LayerKey::of`): nothing is decided here.
    pub fn new(
        w: Workload,
        class: &KernelClass,
        weights: &[f32],
        scales: &[f32],
        input: ActivationQuant,
        output: ActivationQuant,
    ) -> anyhow::Result<Int8Conv> {
        let choice = match class.family {
            KernelFamily::Depthwise => Choice::Depthwise,
            KernelFamily::Gemm if class.vnni => {
                anyhow::ensure!(vnni::available(), "{w}: VNNI is not available on this CPU");
                Choice::Vnni
            }
            KernelFamily::Gemm => Choice::Gemm,
            KernelFamily::Direct => Choice::Direct,
            KernelFamily::SpatialPack => Choice::SpatialPack,
            family @ (KernelFamily::Winograd | KernelFamily::DepthwiseGemm) => {
                anyhow::bail!("{w}: int8 has no {family:?} kernel")
            }
        };
        Ok(Int8Conv::with_kernel(
            w, weights, scales, input, output, choice,
        ))
    }

    /// The class of the kernel built: what runs, read back from the kernel
    /// itself (the test of the shared decision compares it with the key's).
    pub fn class(&self) -> KernelClass {
        let family = match self.kernel {
            Kernel::Gemm(_) | Kernel::Vnni(_) => KernelFamily::Gemm,
            Kernel::Depthwise(_) => KernelFamily::Depthwise,
            Kernel::Direct(_) => KernelFamily::Direct,
            Kernel::SpatialPack(_) => KernelFamily::SpatialPack,
        };
        KernelClass {
            family,
            sparse: false,
            precision: Precision::I8,
            layout: Layout::Nchw,
            vnni: matches!(self.kernel, Kernel::Vnni(_)),
            tile: None,
        }
    }

    fn with_kernel(
        w: Workload,
        weights: &[f32],
        scales: &[f32],
        input: ActivationQuant,
        output: ActivationQuant,
        choice: Choice,
    ) -> Int8Conv {
        let red = w.reduction();
        let q = |oc: usize, i: usize| quantize_weight(weights[oc * red + i], scales[oc]);
        let kernel = match choice {
            Choice::Depthwise => Kernel::Depthwise(depthwise::Packed::new(&w, q)),
            Choice::Vnni => Kernel::Vnni(vnni::Packed::new(&w, q)),
            Choice::Gemm => Kernel::Gemm(gemm::Packed::new(&w, q)),
            Choice::Direct => Kernel::Direct(direct::Packed::new(&w, q)),
            Choice::SpatialPack => Kernel::SpatialPack(spatial_pack::Packed::new(&w, q)),
        };
        Int8Conv {
            w,
            kernel,
            unit: scales.iter().map(|s| s * input.scale).collect(),
            input,
            output,
        }
    }

    pub fn name(&self) -> &'static str {
        match self.kernel {
            Kernel::Gemm(_) => "gemm-int8",
            Kernel::Vnni(_) => "gemm-int8-vnni",
            Kernel::Depthwise(_) => "depthwise-int8",
            Kernel::Direct(_) => "direct-int8",
            Kernel::SpatialPack(_) => "spatial-pack-int8",
        }
    }

    /// One NCHW sample; `residual` is the real-valued shortcut.
    pub fn run(&self, input: &[i8], out: &mut [i8], epi: &Epilogue, residual: Option<&[f32]>) {
        let zp = self.input.zero_point as i16;
        let finish = |oc: usize, i0: usize, acc: &[i32], out: &mut [i8]| {
            let residual = residual.map(|r| &r[i0..i0 + acc.len()]);
            let s = Segment {
                oc,
                acc,
                residual,
                out,
            };
            #[cfg(target_arch = "x86_64")]
            if has_avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA.
                return unsafe { self.finish_avx2(epi, s) };
            }
            self.finish(epi, s)
        };
        match &self.kernel {
            Kernel::Gemm(p) => p.run(&self.w, input, zp, out, &finish),
            Kernel::Vnni(p) => p.run(&self.w, input, zp, out, &finish),
            Kernel::Depthwise(p) => p.run(&self.w, input, zp, out, &finish),
            Kernel::Direct(p) => p.run(&self.w, input, zp, out, &finish),
            Kernel::SpatialPack(p) => p.run(&self.w, input, zp, out, &finish),
        }
    }

    /// Consecutive outputs of channel `oc` from their accumulators: scaled
    /// to real values, through the epilogue, requantised as
    /// `ActivationQuant::quantize` does. Written out per activation, with
    /// the zero point added and the range clamped in f32 (exact for every
    /// finite value: the rounded quotient is an integer, and any beyond
    /// 2^24 saturates either way), so that compiled for AVX2 the loop is
    /// vector code; one `roundf` call and a jump per value made the epilogue
    /// most of an int8 MobileNet's time.
    #[inline(always)]
    fn finish(&self, epi: &Epilogue, s: Segment<'_>) {
        let bias = epi.bias[s.oc];
        match epi.act {
            Activation::Identity => self.finish_with(bias, s, |x| x),
            Activation::Relu => self.finish_with(bias, s, |x| Activation::Relu.apply(x)),
            Activation::Relu6 => self.finish_with(bias, s, |x| Activation::Relu6.apply(x)),
            a @ (Activation::Silu | Activation::Sigmoid) => {
                self.finish_with(bias, s, |x| a.apply(x))
            }
        }
    }

    #[inline(always)]
    fn finish_with(&self, bias: f32, s: Segment<'_>, act: impl Fn(f32) -> f32) {
        let Segment {
            oc,
            acc,
            residual,
            out,
        } = s;
        let unit = self.unit[oc];
        let (scale, zp) = (self.output.scale, self.output.zero_point as f32);
        let q = |y: f32| {
            // `max` then `min` leave a finite value in [-128, 127] (NaN,
            // which finite inputs cannot produce, becomes -128), so the
            // unchecked conversion is exact: it vectorises, where the
            // saturating `as` conversion is a scalar instruction per value.
            #[expect(clippy::manual_clamp, reason = "clamp would keep a NaN")]
            let t = ((act(y) / scale).round() + zp).max(-128.0).min(127.0);
            // SAFETY: `t` is finite and within i32 (see above).
            unsafe { t.to_int_unchecked::<i32>() as i8 }
        };
        match residual {
            Some(r) => {
                for ((o, &a), &r) in out.iter_mut().zip(acc).zip(r) {
                    *o = q(a as f32 * unit + bias + r);
                }
            }
            None => {
                for (o, &a) in out.iter_mut().zip(acc) {
                    *o = q(a as f32 * unit + bias);
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn finish_avx2(&self, epi: &Epilogue, s: Segment<'_>) {
        self.finish(epi, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// One random layer `wl` run by kernel `choice`: its name and bytes.
    fn run(wl: Workload, choice: Choice, seed: u64) -> (&'static str, Vec<i8>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let weights: Vec<f32> = (0..wl.out_channels * wl.reduction())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let scales = dlas_zoo::quant::channel_scales(&weights, wl.out_channels);
        let input_q = ActivationQuant::from_range(-0.7, 1.9);
        let output_q = ActivationQuant::from_range(-2.0, 3.0);
        let x: Vec<i8> = (0..wl.in_len()).map(|_| rng.random()).collect();
        let residual: Vec<f32> = (0..wl.out_len())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let epi = Epilogue {
            bias: (0..wl.out_channels)
                .map(|_| rng.random_range(-0.5..0.5))
                .collect(),
            act: Activation::Relu6,
        };
        let conv = Int8Conv::with_kernel(wl, &weights, &scales, input_q, output_q, choice);
        let mut out = vec![0i8; wl.out_len()];
        conv.run(&x, &mut out, &epi, Some(&residual));
        (conv.name(), out)
    }

    /// Kernel `choice` gives the bytes of the reference GEMM on layer `wl`
    /// (case `i`).
    fn agree(choice: Choice, wl: Workload, i: usize) {
        let (a, b) = (run(wl, choice, i as u64), run(wl, Choice::Gemm, i as u64));
        assert_ne!(a.0, b.0, "the kernel under test ran");
        assert_eq!(a.1, b.1, "{} against {} on {wl}", a.0, b.0);
    }

    fn segment<'a>(acc: &'a [i32], residual: Option<&'a [f32]>, out: &'a mut [i8]) -> Segment<'a> {
        Segment {
            oc: 0,
            acc,
            residual,
            out,
        }
    }

    /// The depthwise kernel and the GEMM on the same depthwise layers give
    /// the same bytes: strides 1 and 2, kernels 1 to 7, padding, odd sizes,
    /// a residual and a clipping activation.
    #[test]
    fn depthwise_kernel_equals_the_gemm() {
        for (i, (c, k, s, p, h, w)) in [
            (3, 3, 1, 1, 7, 9),
            (5, 3, 2, 1, 11, 8),
            (4, 5, 1, 2, 6, 6),
            (2, 7, 2, 3, 13, 10),
            (6, 1, 1, 0, 5, 4),
            (3, 3, 2, 0, 9, 9),
            (16, 3, 1, 1, 1, 1),
        ]
        .into_iter()
        .enumerate()
        {
            agree(Choice::Depthwise, Workload::new(c, c, k, s, p, c, h, w), i);
        }
    }

    /// The direct and spatial-pack kernels give the bytes of the reference
    /// GEMM (exact i32 accumulation, the same requantisation): strides 1
    /// and 2, padding, kernels 1, 3, 5 and 7, groups, odd channel counts
    /// (a zero channel completes the last pair), register blocks and tiles
    /// cut by the output's edges and by groups, single-pixel outputs, and a
    /// residual with a clipping activation.
    #[test]
    fn direct_and_spatial_pack_equal_the_gemm() {
        for (i, wl) in [
            Workload::new(3, 5, 3, 1, 1, 1, 7, 9),
            Workload::new(16, 16, 3, 1, 1, 1, 8, 8),
            Workload::new(7, 17, 3, 2, 1, 1, 9, 8),
            Workload::new(5, 9, 1, 1, 0, 1, 6, 5),
            Workload::new(6, 10, 1, 2, 0, 1, 7, 7),
            Workload::new(12, 18, 5, 1, 2, 3, 11, 6),
            Workload::new(10, 12, 3, 2, 1, 2, 5, 7),
            Workload::new(9, 40, 7, 2, 3, 1, 15, 15),
            Workload::new(64, 24, 3, 1, 1, 1, 2, 3),
            Workload::new(1, 3, 3, 1, 0, 1, 3, 3),
            Workload::new(33, 13, 3, 1, 1, 1, 1, 1),
            Workload::new(4, 6, 3, 2, 0, 1, 20, 37),
        ]
        .into_iter()
        .enumerate()
        {
            agree(Choice::Direct, wl, i);
            agree(Choice::SpatialPack, wl, i);
        }
    }

    /// The VNNI GEMM and the reference GEMM give the same bytes, with both
    /// register tiles (up to 16 output pixels and more), partial row blocks
    /// and panels, reductions not a multiple of 4, groups, strides and
    /// padding (the zero-point correction must hold at the border), and
    /// 1x1 layers (packed straight from the input).
    #[test]
    fn vnni_gemm_equals_the_reference_gemm() {
        if !vnni::available() {
            dlas_core::errln!("skipped: this CPU has no AVX-512 VNNI");
            return;
        }
        for (i, wl) in [
            Workload::new(3, 5, 3, 1, 1, 1, 7, 9),
            Workload::new(16, 33, 1, 1, 0, 1, 4, 4),
            Workload::new(7, 17, 3, 2, 1, 1, 9, 8),
            Workload::new(64, 24, 3, 1, 1, 1, 2, 3),
            Workload::new(12, 18, 5, 1, 2, 3, 11, 6),
            Workload::new(128, 64, 1, 1, 0, 1, 14, 14),
            Workload::new(9, 40, 7, 2, 3, 1, 15, 15),
            Workload::new(10, 12, 1, 1, 0, 2, 5, 7),
            Workload::new(3, 20, 1, 1, 0, 1, 3, 3),
        ]
        .into_iter()
        .enumerate()
        {
            agree(Choice::Vnni, wl, i);
        }
    }

    /// The requantisation rounds exactly as `ActivationQuant::quantize`
    /// (half away from zero, then the zero point, then the int8 range) on
    /// every path: ties of both signs, saturation, a residual, ReLU6.
    #[test]
    fn requantisation_matches_the_quantiser_on_ties_and_saturation() {
        let w = Workload::new(1, 1, 1, 1, 0, 1, 1, 1);
        let output = ActivationQuant {
            scale: 0.5,
            zero_point: 3,
        };
        let conv = Int8Conv {
            w,
            kernel: Kernel::Depthwise(depthwise::Packed::new(&w, |_, _| 1)),
            unit: vec![0.25],
            input: output,
            output,
        };
        // y = acc / 4: acc / 2 after the output scale, a tie at every odd acc.
        let acc: Vec<i32> = (-700..700).collect();
        let residual: Vec<f32> = acc.iter().map(|&a| (a % 7) as f32 * 0.125).collect();
        for act in Activation::ALL {
            let epi = Epilogue {
                bias: vec![0.0],
                act,
            };
            for r in [None, Some(&residual[..])] {
                let want: Vec<i8> = acc
                    .iter()
                    .enumerate()
                    .map(|(i, &a)| {
                        let r = r.map_or(0.0, |r| r[i]);
                        output.quantize(epi.one(0, a as f32 * 0.25, r))
                    })
                    .collect();
                let mut got = vec![0i8; acc.len()];
                conv.finish(&epi, segment(&acc, r, &mut got));
                assert_eq!(got, want, "{act:?}");
                #[cfg(target_arch = "x86_64")]
                if has_avx2_fma() {
                    let mut got = vec![0i8; acc.len()];
                    // SAFETY: the CPU has AVX2 and FMA.
                    unsafe { conv.finish_avx2(&epi, segment(&acc, r, &mut got)) };
                    assert_eq!(got, want, "{act:?} avx2");
                }
            }
        }
    }
}
