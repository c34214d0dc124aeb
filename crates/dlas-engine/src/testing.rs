//! Support for the kernels' own tests, which run each kernel on every
//! instruction set the CPU has (the public API always takes the widest):
//! random workloads, the f64 reference convolution with the epilogue
//! applied, and the relative error the integration tests also use.

use crate::epilogue::{Activation, Epilogue};
use crate::workload::Workload;
use dlas_zoo::reference::conv2d_f64;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::OnceLock;

/// fp32 against f64, as in `tests/conv_props.rs`.
pub(crate) const F32_TOLERANCE: f64 = 1e-5;

fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a pool")
    })
}

/// Runs `f` on the tests' two-thread pool, as [`error`] runs a kernel.
pub(crate) fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    pool().install(f)
}

/// Plain and grouped convolutions, kernels 1/3/5/7, strides 1-2, odd
/// sizes; a third are 1x1 stride-1 unpadded (the GEMM's in-place B).
pub(crate) fn dense_workload() -> impl Strategy<Value = Workload> {
    (
        prop_oneof![Just(1usize), Just(3), Just(5), Just(7)],
        1usize..=2,
        (1usize..=12, 1usize..=30, 1usize..=2),
        (0usize..=9, 0usize..=9),
        0usize..3,
    )
        .prop_map(|(k, stride, (icg, ocg, groups), (dh, dw), kind)| {
            let (k, stride, padding) = match kind {
                0 => (1, 1, 0),
                _ => (k, stride, (k / 2).min(dh % 4)),
            };
            let (h, w) = (k + dh, k + dw);
            Workload::new(icg * groups, ocg * groups, k, stride, padding, groups, h, w)
        })
}

/// Depthwise convolutions: kernels 1-7, strides 1-3, any padding below
/// the kernel, planes from one pixel up to wider than 4 AVX-512 vectors.
pub(crate) fn depthwise_workload() -> impl Strategy<Value = Workload> {
    (
        1usize..=7,
        1usize..=3,
        1usize..=5,
        (0usize..=7, 0usize..=70),
        0usize..7,
    )
        .prop_map(|(k, stride, channels, (dh, dw), padding)| {
            let padding = padding.min(k - 1);
            Workload::new(
                channels,
                channels,
                k,
                stride,
                padding,
                channels,
                k + dh,
                k + dw,
            )
        })
}

pub(crate) fn activation() -> impl Strategy<Value = Activation> {
    prop_oneof![
        Just(Activation::Identity),
        Just(Activation::Relu),
        Just(Activation::Relu6),
        Just(Activation::Silu),
    ]
}

/// Random weights ((out, in / groups, k, k)) of `w`, drawn from `seed`.
pub(crate) fn weights(w: &Workload, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..w.out_channels * w.reduction())
        .map(|_| rng.random_range(-1.0..1.0))
        .collect()
}

/// `weights` as an fp16 kernel computes with them: rounded to f16. Held
/// to the reference of these, an fp16 kernel's only error is its f32
/// arithmetic, so it meets [`F32_TOLERANCE`] (and a kernel that rounded
/// differently, or read a weight from the wrong place, would not).
pub(crate) fn rounded_to_f16(weights: &[f32]) -> Vec<f32> {
    weights
        .iter()
        .map(|&v| half::f16::from_f32(v).to_f32())
        .collect()
}

/// `weights` with a random `fraction` of them zeroed.
pub(crate) fn sparsify(weights: &[f32], fraction: f64, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x2e40);
    weights
        .iter()
        .map(|&v| {
            if rng.random::<f64>() < fraction {
                0.0
            } else {
                v
            }
        })
        .collect()
}

/// Runs an NHWC kernel `run(input, out, residual)` on NCHW data: the input
/// and residual transposed to NHWC, the output back to NCHW, so
/// [`error`] can hold an NHWC kernel to the NCHW reference.
pub(crate) fn through_nhwc(
    w: &Workload,
    input: &[f32],
    out: &mut [f32],
    residual: Option<&[f32]>,
    run: impl Fn(&[f32], &mut [f32], Option<&[f32]>),
) {
    let to_nhwc = |x: &[f32], c: usize, hw: usize| -> Vec<f32> {
        (0..c * hw).map(|i| x[(i % c) * hw + i / c]).collect()
    };
    let (ihw, ohw) = (w.in_h * w.in_w, w.out_pixels());
    let x = to_nhwc(input, w.in_channels, ihw);
    let r = residual.map(|r| to_nhwc(r, w.out_channels, ohw));
    let mut y = vec![f32::NAN; out.len()];
    run(&x, &mut y, r.as_deref());
    for (i, &v) in y.iter().enumerate() {
        out[(i % w.out_channels) * ohw + i / w.out_channels] = v;
    }
}

/// Runs an NCHW16c kernel `run(input, out, residual)` on NCHW data, as
/// [`through_nhwc`] runs an NHWC one.
pub(crate) fn through_blocked(
    w: &Workload,
    input: &[f32],
    out: &mut [f32],
    residual: Option<&[f32]>,
    run: impl Fn(&[f32], &mut [f32], Option<&[f32]>),
) {
    use crate::blocked::reorder;
    let (in_shape, out_shape) = (
        [w.in_channels, w.in_h, w.in_w],
        [w.out_channels, w.out_h, w.out_w],
    );
    let mut x = vec![0.0; input.len()];
    reorder(input, &mut x, in_shape, true);
    let r = residual.map(|r| {
        let mut b = vec![0.0; r.len()];
        reorder(r, &mut b, out_shape, true);
        b
    });
    let mut y = vec![f32::NAN; out.len()];
    run(&x, &mut y, r.as_deref());
    reorder(&y, out, out_shape, false);
}

/// Runs one sample through `run(input, out, epilogue, residual)` on a
/// two-thread pool (an input, bias and, if `with_residual`, residual drawn
/// from `seed`) and returns its L2 error against the f64 reference of
/// `act(conv(input) + bias + residual)`, relative to the larger of that
/// reference's norm and the norm of the sums before `act`: a ReLU over a
/// 1x1 output of two channels, one negative, left one small value whose
/// error, the rounding of sums far larger, was 3e-4 of it.
pub(crate) fn error(
    w: &Workload,
    weights: &[f32],
    (act, with_residual, seed): (Activation, bool, u64),
    run: impl Fn(&[f32], &mut [f32], &Epilogue, Option<&[f32]>) + Sync,
) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let mut draw = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
    let input = draw(w.in_len());
    let bias = draw(w.out_channels);
    let residual = with_residual.then(|| draw(w.out_len()));
    let epi = Epilogue {
        bias: bias.clone(),
        act,
    };
    // Stale values where the output goes: a kernel must write every one.
    let mut got = vec![f32::NAN; w.out_len()];
    on_pool(|| run(&input, &mut got, &epi, residual.as_deref()));
    let conv = dlas_zoo::Conv {
        in_channels: w.in_channels,
        out_channels: w.out_channels,
        kernel: w.kernel,
        stride: w.stride,
        padding: w.padding,
        groups: w.groups,
        bias: true,
    };
    let x64: Vec<f64> = input.iter().map(|&v| v as f64).collect();
    let shape = [w.in_channels, w.in_h, w.in_w];
    let mut want = conv2d_f64(&x64, 1, shape, &conv, weights, Some(&bias));
    // The sums before the activation: their size is what f32 rounding
    // scales with, and a ReLU can leave one tiny value of them.
    let mut sums = 0.0;
    for (i, y) in want.iter_mut().enumerate() {
        *y += residual.as_ref().map_or(0.0, |r| r[i] as f64);
        sums += *y * *y;
        *y = match act {
            Activation::Identity => *y,
            Activation::Relu => y.max(0.0),
            Activation::Relu6 => y.clamp(0.0, 6.0),
            Activation::Silu => *y / (1.0 + (-*y).exp()),
            Activation::Sigmoid => 1.0 / (1.0 + (-*y).exp()),
        };
    }
    let err: f64 = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| (g as f64 - w).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    (err / norm.max(sums).max(1e-30)).sqrt()
}
