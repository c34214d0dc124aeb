//! Every algorithm x format (x layout for gemm and winograd) against the f64 reference
//! convolution on random shapes: depthwise, grouped, strides, padding,
//! kernel sizes 1/3/5/7, odd spatial sizes, random sparsity.

use dlas_core::Layout;
use dlas_engine::{
    Activation, Conv2d, DType, DirectSchedule, EngineConfig, FormatChoice, GemmSchedule,
    Int8Scales, KernelAlgorithm, LayerKey, ParallelLoop, Schedule, SpatialPackSchedule, VectorAxis,
    WinogradSchedule, Workload,
};
use dlas_zoo::reference::conv2d_f64;
use dlas_zoo::reference::relative_l2 as rel_l2;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::OnceLock;

/// fp32 against f64: a dot product of n terms in f32 has relative error of
/// order sqrt(n) * 2^-24 (~6e-8 per term); 1e-5 leaves room for n in the
/// thousands with any summation order.
const F32_TOLERANCE: f64 = 1e-5;

/// fp16 stores weights and activations with unit roundoff u = 2^-11
/// (~4.9e-4); each product w * x then carries a relative error of at most
/// 2u + u^2 and f32 accumulation adds nothing visible. Cancellation can make
/// the error large relative to the output itself, so the error is measured
/// against the same convolution of |w| and |x| (plus |bias|), which bounds
/// it by 2u ~ 9.8e-4; 2e-3 is that bound with a factor-2 margin.
const F16_TOLERANCE: f64 = 2e-3;

/// Winograd F(4x4, 3x3) in f32: the transforms scale values by up to 5
/// (input) and 8 (output) per dimension before sums that cancel, so its
/// rounding error is larger than a direct sum's; 1e-4 bounds it on
/// unit-scale data (the largest observed in the kernel's own tests is
/// 3e-6, see `winograd.rs`).
const WINOGRAD_TOLERANCE: f64 = 1e-4;

fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
    })
}

#[derive(Debug, Clone)]
struct Case {
    w: Workload,
    batch: usize,
    sparsity: f64,
    seed: u64,
}

/// 3x3 stride-1 ungrouped layers with at least 8 input channels and 16
/// output tiles, the ones Winograd computes: padding 0 or 1, maps of 7 to
/// 22 pixels a side (F(2x2, 3x3) where they hold fewer than 16 4x4 tiles,
/// F(4x4, 3x3) elsewhere) leaving partial tiles, batch 1 and 2.
fn winograd_case() -> impl Strategy<Value = Case> {
    (
        (8usize..=24, 1usize..=24, 0usize..=1),
        (9usize..=22, 9usize..=22, 1usize..=2),
        any::<u64>(),
    )
        .prop_map(|((ic, oc, padding), (h, w, batch), seed)| Case {
            w: Workload::new(ic, oc, 3, 1, padding, 1, h, w),
            batch,
            sparsity: 0.0,
            seed,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(1usize), Just(3), Just(5), Just(7)],
        1usize..=2,
        0usize..3,
        1usize..=6,
        1usize..=9,
        1usize..=3,
        (0usize..=4, 0usize..=4, 1usize..=2),
        (0.0f64..0.95, any::<u64>()),
    )
        .prop_map(
            |(k, stride, kind, icg, ocg, groups, (dh, dw, batch), (sparsity, seed))| {
                // kind 0: plain, 1: grouped, 2: depthwise.
                let (cin, cout, g) = match kind {
                    0 => (icg, ocg, 1),
                    1 => (icg * groups, ocg * groups, groups),
                    _ => (icg + ocg, icg + ocg, icg + ocg),
                };
                let padding = (k / 2).min(dh % 4);
                let (h, w) = (k + dh * 2 + 1 - 2 * padding.min(k / 2), k + dw + 1);
                Case {
                    w: Workload::new(cin, cout, k, stride, padding, g, h, w),
                    batch,
                    sparsity,
                    seed,
                }
            },
        )
}

struct Data {
    input: Vec<f32>,
    weight: Vec<f32>,
    bias: Vec<f32>,
}

fn data(c: &Case, sparse: bool) -> Data {
    let mut rng = ChaCha8Rng::seed_from_u64(c.seed);
    let w = &c.w;
    let mut draw = |n: usize, zeros: f64| -> Vec<f32> {
        (0..n)
            .map(|_| {
                let v: f32 = rng.random_range(-1.0..1.0);
                if rng.random::<f64>() < zeros { 0.0 } else { v }
            })
            .collect()
    };
    Data {
        input: draw(c.batch * w.in_len(), 0.0),
        weight: draw(
            w.out_channels * w.reduction(),
            if sparse { c.sparsity } else { 0.0 },
        ),
        bias: draw(w.out_channels, 0.0),
    }
}

fn to_nhwc(x: &[f32], [c, h, w]: [usize; 3]) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for (n, s) in x.chunks(c * h * w).enumerate() {
        for ch in 0..c {
            for p in 0..h * w {
                out[n * c * h * w + p * c + ch] = s[ch * h * w + p];
            }
        }
    }
    out
}

/// NCHW to NCHW16c: blocks of 16 channels (the last holding the rest),
/// each a map of pixels of its channels.
fn to_blocked(x: &[f32], [c, h, w]: [usize; 3]) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for (n, s) in x.chunks(c * h * w).enumerate() {
        for ch in 0..c {
            let width = (c - ch / 16 * 16).min(16);
            for p in 0..h * w {
                out[n * c * h * w + ch / 16 * 16 * h * w + p * width + ch % 16] = s[ch * h * w + p];
            }
        }
    }
    out
}

fn from_blocked(x: &[f32], [c, h, w]: [usize; 3]) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for (n, s) in x.chunks(c * h * w).enumerate() {
        for ch in 0..c {
            let width = (c - ch / 16 * 16).min(16);
            for p in 0..h * w {
                out[n * c * h * w + ch * h * w + p] = s[ch / 16 * 16 * h * w + p * width + ch % 16];
            }
        }
    }
    out
}

/// Layers for the blocked layout: ungrouped ones of 1 to 40 input and
/// output channels (full and partial blocks of 16) and depthwise ones of
/// up to 40, kernels 1 to 7, strides 1 and 2, maps of the kernel's size
/// to 20 with and without padding, so that tiles, borders and remainders
/// all occur.
fn blocked_case() -> impl Strategy<Value = Case> {
    (
        (1usize..=40, 1usize..=40, any::<bool>()),
        (
            prop_oneof![Just(1usize), Just(3), Just(5), Just(7)],
            1usize..=2,
        ),
        (1usize..=20, 1usize..=20, 1usize..=2),
        any::<u64>(),
    )
        .prop_map(|((ic, oc, dw), (k, stride), (h, w, batch), seed)| {
            let padding = if seed % 3 == 0 { 0 } else { k / 2 };
            // The reference wants maps at least as wide as the kernel.
            let (h, w) = (h.max(k), w.max(k));
            let (cin, cout, g) = if dw { (ic, ic, ic) } else { (ic, oc, 1) };
            Case {
                w: Workload::new(cin, cout, k, stride, padding, g, h, w),
                batch,
                sparsity: 0.0,
                seed,
            }
        })
}

fn from_nhwc(x: &[f32], [c, h, w]: [usize; 3]) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for (n, s) in x.chunks(c * h * w).enumerate() {
        for ch in 0..c {
            for p in 0..h * w {
                out[n * c * h * w + ch * h * w + p] = s[p * c + ch];
            }
        }
    }
    out
}

/// The layer `config` makes of `w` with `weights` and `bias`, as the
/// engine makes it: the key of the layer under `config`, run with the
/// schedule of `config` where it is of the key's algorithm, else the
/// key's default.
fn layer(w: &Workload, weights: &[f32], bias: &[f32], config: &EngineConfig) -> Conv2d {
    let key = LayerKey::of(*w, weights, config).unwrap();
    let schedule = config
        .schedule
        .filter(|s| s.algorithm() == key.kernel)
        .unwrap_or_else(|| key.default_schedule(config.threads));
    Conv2d::new(key, schedule, weights, Some(bias), Activation::Identity).unwrap()
}

/// Runs `config` on `case` and returns the relative L2 error.
fn error(case: &Case, config: &EngineConfig) -> f64 {
    let sparse = !matches!(config.format, FormatChoice::Dense);
    let d = data(case, sparse);
    let w = &case.w;
    let conv = layer(w, &d.weight, &d.bias, config);
    let x64: Vec<f64> = d.input.iter().map(|&v| v as f64).collect();
    let conv_ir = dlas_zoo::Conv {
        in_channels: w.in_channels,
        out_channels: w.out_channels,
        kernel: w.kernel,
        stride: w.stride,
        padding: w.padding,
        groups: w.groups,
        bias: true,
    };
    let want = conv2d_f64(
        &x64,
        case.batch,
        [w.in_channels, w.in_h, w.in_w],
        &conv_ir,
        &d.weight,
        Some(&d.bias),
    );
    let (in_shape, out_shape) = (
        [w.in_channels, w.in_h, w.in_w],
        [w.out_channels, w.out_h, w.out_w],
    );
    let got = match config.layout {
        Layout::Nhwc => from_nhwc(
            &conv.run(pool(), &to_nhwc(&d.input, in_shape), case.batch),
            out_shape,
        ),
        Layout::Nchw16c => from_blocked(
            &conv.run(pool(), &to_blocked(&d.input, in_shape), case.batch),
            out_shape,
        ),
        Layout::Nchw => conv.run(pool(), &d.input, case.batch),
    };
    rel_l2(&got, &want)
}

/// Relative error of `algorithm` in fp16 against the reference, normalised
/// by the reference convolution of absolute values (see F16_TOLERANCE).
fn f16_error(case: &Case, algorithm: KernelAlgorithm) -> f64 {
    let d = data(case, false);
    let w = &case.w;
    let cfg = EngineConfig {
        dtype: DType::F16,
        ..config(algorithm, FormatChoice::Dense, Layout::Nchw)
    };
    let conv = layer(w, &d.weight, &d.bias, &cfg);
    // The engine stores activations in f16, so the layer sees rounded inputs.
    let x16: Vec<f32> = d
        .input
        .iter()
        .map(|&v| half::f16::from_f32(v).to_f32())
        .collect();
    let got = conv.run(pool(), &x16, case.batch);
    let conv_ir = dlas_zoo::Conv {
        in_channels: w.in_channels,
        out_channels: w.out_channels,
        kernel: w.kernel,
        stride: w.stride,
        padding: w.padding,
        groups: w.groups,
        bias: true,
    };
    let shape = [w.in_channels, w.in_h, w.in_w];
    let x64: Vec<f64> = d.input.iter().map(|&v| v as f64).collect();
    let want = conv2d_f64(&x64, case.batch, shape, &conv_ir, &d.weight, Some(&d.bias));
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
    let xa: Vec<f64> = x64.iter().map(|v| v.abs()).collect();
    let scale = conv2d_f64(
        &xa,
        case.batch,
        shape,
        &conv_ir,
        &abs(&d.weight),
        Some(&abs(&d.bias)),
    );
    let err: f64 = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| (g as f64 - w).powi(2))
        .sum();
    let norm: f64 = scale.iter().map(|v| v * v).sum();
    (err / norm).sqrt()
}

/// An int8 layer with its quantised input and the quantisation it ran with.
struct Int8Layer {
    conv: Conv2d,
    input: Vec<i8>,
    qi: dlas_zoo::quant::ActivationQuant,
    qo: dlas_zoo::quant::ActivationQuant,
    /// Per output channel.
    scales: Vec<f32>,
}

/// The int8 layer `algorithm` makes of `case` (identity activation) on
/// data `d`: the input and output ranges are those of the data and of its
/// reference output `want`.
fn int8_layer(case: &Case, d: &Data, want: &[f64], algorithm: KernelAlgorithm) -> Int8Layer {
    use dlas_zoo::quant::{ActivationQuant, channel_scales};
    let w = &case.w;
    let range = |v: &[f64]| {
        v.iter()
            .fold((0.0f64, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)))
    };
    let (xl, xh) = range(&d.input.iter().map(|&v| v as f64).collect::<Vec<_>>());
    let (yl, yh) = range(want);
    let qi = ActivationQuant::from_range(xl as f32, xh as f32);
    let qo = ActivationQuant::from_range(yl as f32, yh as f32);
    let scales = channel_scales(&d.weight, w.out_channels);
    let key = LayerKey::of(*w, &d.weight, &int8_config(algorithm)).unwrap();
    let scales_of = Int8Scales {
        weights: &scales,
        input: qi,
        output: qo,
    };
    let conv = Conv2d::new_int8(
        key,
        &d.weight,
        Some(&d.bias),
        Activation::Identity,
        scales_of,
    )
    .unwrap();
    let input = d.input.iter().map(|&v| qi.quantize(v)).collect();
    Int8Layer {
        conv,
        input,
        qi,
        qo,
        scales,
    }
}

/// The reference output of `case` on data `d`.
fn reference(case: &Case, d: &Data) -> Vec<f64> {
    let w = &case.w;
    let conv_ir = dlas_zoo::Conv {
        in_channels: w.in_channels,
        out_channels: w.out_channels,
        kernel: w.kernel,
        stride: w.stride,
        padding: w.padding,
        groups: w.groups,
        bias: true,
    };
    let x64: Vec<f64> = d.input.iter().map(|&v| v as f64).collect();
    let shape = [w.in_channels, w.in_h, w.in_w];
    conv2d_f64(&x64, case.batch, shape, &conv_ir, &d.weight, Some(&d.bias))
}

/// The int8 bytes of `algorithm` on `case` and the kernel that made them.
fn int8_bytes(case: &Case, algorithm: KernelAlgorithm) -> (&'static str, Vec<i8>) {
    let d = data(case, false);
    let want = reference(case, &d);
    let l = int8_layer(case, &d, &want, algorithm);
    (
        l.conv.kernel_name(),
        l.conv.run_i8(pool(), &l.input, case.batch),
    )
}

/// Checks an int8 layer element by element against a rigorous bound.
/// Activations are quantised with step sx (input) and so (output) and
/// weights with step sw[oc]; rounding moves a value by at most half a step,
/// and the zero point's own rounding can shift the representable range by
/// another half step, so each stored value is within one step of the real
/// one. The i32 accumulation is exact, hence for every output
///   |y_int8 - y| <= sx * sum|w| + sw[oc] * sum(|x| + sx) + so
/// over the taps that fall inside the input. Returns the worst ratio of
/// error to bound (must be < 1).
fn int8_worst_ratio(case: &Case, algorithm: KernelAlgorithm) -> f64 {
    let d = data(case, false);
    let w = &case.w;
    let conv_ir = dlas_zoo::Conv {
        in_channels: w.in_channels,
        out_channels: w.out_channels,
        kernel: w.kernel,
        stride: w.stride,
        padding: w.padding,
        groups: w.groups,
        bias: true,
    };
    let shape = [w.in_channels, w.in_h, w.in_w];
    let x64: Vec<f64> = d.input.iter().map(|&v| v as f64).collect();
    let want = reference(case, &d);
    let Int8Layer {
        conv,
        input: xq,
        qi,
        qo,
        scales,
    } = int8_layer(case, &d, &want, algorithm);
    let got: Vec<f32> = conv
        .run_i8(pool(), &xq, case.batch)
        .iter()
        .map(|&q| qo.dequantize(q))
        .collect();
    let sx = qi.scale as f64;
    let abs_w: Vec<f32> = d.weight.iter().map(|v| v.abs()).collect();
    let ones = vec![1.0; x64.len()];
    let sum_w = conv2d_f64(&ones, case.batch, shape, &conv_ir, &abs_w, None);
    let per_oc: Vec<f32> = (0..w.out_channels * w.reduction())
        .map(|i| scales[i / w.reduction()])
        .collect();
    let xs: Vec<f64> = x64.iter().map(|v| v.abs() + sx).collect();
    let sum_x = conv2d_f64(&xs, case.batch, shape, &conv_ir, &per_oc, None);
    got.iter()
        .zip(&want)
        .zip(sum_w.iter().zip(&sum_x))
        .map(|((&g, &y), (&a, &b))| {
            let bound = sx * a + b + qo.scale as f64;
            (g as f64 - y).abs() / (bound * (1.0 + 1e-5))
        })
        .fold(0.0, f64::max)
}

fn config(algorithm: KernelAlgorithm, format: FormatChoice, layout: Layout) -> EngineConfig {
    EngineConfig {
        threads: 2,
        algorithm,
        format,
        layout,
        ..EngineConfig::default()
    }
}

/// Dense int8 in NCHW, the int8 lowerings the engine has.
fn int8_config(algorithm: KernelAlgorithm) -> EngineConfig {
    EngineConfig {
        dtype: DType::I8,
        ..config(algorithm, FormatChoice::Dense, Layout::Nchw)
    }
}

const FORMATS: [FormatChoice; 5] = [
    FormatChoice::Dense,
    FormatChoice::Csr,
    FormatChoice::Bsr { rows: 1, cols: 4 },
    FormatChoice::Bsr { rows: 4, cols: 4 },
    FormatChoice::Bsr { rows: 8, cols: 2 },
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn direct_matches_reference(c in case()) {
        for f in FORMATS {
            let e = error(&c, &config(KernelAlgorithm::Direct, f, Layout::Nchw));
            prop_assert!(e < F32_TOLERANCE, "{f:?} {} error {e}", c.w);
        }
    }

    #[test]
    fn gemm_matches_reference(c in case()) {
        for f in FORMATS {
            let e = error(&c, &config(KernelAlgorithm::Gemm, f, Layout::Nchw));
            prop_assert!(e < F32_TOLERANCE, "{f:?} {} error {e}", c.w);
        }
        let nhwc = config(KernelAlgorithm::Gemm, FormatChoice::Dense, Layout::Nhwc);
        let e = error(&c, &nhwc);
        prop_assert!(e < F32_TOLERANCE, "nhwc {} error {e}", c.w);
        // NHWC depthwise layers run the channel-vectorised stencil.
        if c.w.is_depthwise() {
            let d = data(&c, false);
            prop_assert_eq!(layer(&c.w, &d.weight, &d.bias, &nhwc).kernel_name(), "depthwise");
        }
    }

    #[test]
    fn spatial_pack_matches_reference(c in case()) {
        for f in FORMATS {
            let e = error(&c, &config(KernelAlgorithm::SpatialPack, f, Layout::Nchw));
            prop_assert!(e < F32_TOLERANCE, "{f:?} {} error {e}", c.w);
        }
    }

    /// The blocked layout (NCHW16c) under every algorithm: the blocked
    /// direct kernel on ungrouped layers, the blocked stencil on depthwise
    /// ones, full and partial blocks, every kernel size, stride and border.
    #[test]
    fn blocked_matches_reference(c in blocked_case()) {
        for algorithm in KernelAlgorithm::ALL {
            let cfg = config(algorithm, FormatChoice::Dense, Layout::Nchw16c);
            let e = error(&c, &cfg);
            prop_assert!(e < F32_TOLERANCE, "{algorithm} {} error {e}", c.w);
            let d = data(&c, false);
            let want = if c.w.is_depthwise() { "depthwise" } else { "direct" };
            prop_assert_eq!(layer(&c.w, &d.weight, &d.bias, &cfg).kernel_name(), want);
        }
    }

    /// Winograd in both layouts on the layers it computes.
    #[test]
    fn winograd_matches_reference(c in winograd_case()) {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let cfg = config(KernelAlgorithm::Winograd, FormatChoice::Dense, layout);
            let d = data(&c, false);
            prop_assert_eq!(layer(&c.w, &d.weight, &d.bias, &cfg).kernel_name(), "winograd");
            let e = error(&c, &cfg);
            prop_assert!(e < WINOGRAD_TOLERANCE, "{layout} {} error {e}", c.w);
        }
    }

    /// Under winograd, every layer and format: 3x3 stride-1 ungrouped dense
    /// layers with at least 8 input channels and 16 output tiles of 4x4 or
    /// of 2x2 pixels (`dlas_core::calibration::winograd_tile`) run
    /// Winograd, the rest the kernel gemm would give them
    /// (depthwise NCHW layers direct, as under every algorithm: the stencil
    /// with dense weights).
    #[test]
    fn winograd_falls_back_to_the_gemm(c in case()) {
        let tiles = |side: usize| c.w.out_h.div_ceil(side) * c.w.out_w.div_ceil(side);
        let fits = c.w.kernel == 3
            && c.w.stride == 1
            && c.w.groups == 1
            && c.w.in_channels >= 8
            && (tiles(4) >= 16 || tiles(2) >= 16);
        for f in FORMATS {
            let cfg = config(KernelAlgorithm::Winograd, f, Layout::Nchw);
            let d = data(&c, f != FormatChoice::Dense);
            let name = layer(&c.w, &d.weight, &d.bias, &cfg).kernel_name();
            let want = match () {
                _ if c.w.is_depthwise() && f == FormatChoice::Dense => "depthwise",
                _ if c.w.is_depthwise() => "direct",
                _ if fits && f == FormatChoice::Dense => "winograd",
                _ => "gemm",
            };
            prop_assert_eq!(name, want, "{:?} {}", f, c.w);
            let e = error(&c, &cfg);
            prop_assert!(e < WINOGRAD_TOLERANCE, "{f:?} {} error {e}", c.w);
        }
    }

    /// fp16 under every algorithm (depthwise layers included: the stencil
    /// under direct and spatial pack, the GEMM under gemm).
    #[test]
    fn f16_matches_reference(c in case()) {
        for a in KernelAlgorithm::ALL {
            let e = f16_error(&c, a);
            prop_assert!(e < F16_TOLERANCE, "{a} {} error {e}", c.w);
        }
    }

    #[test]
    fn int8_within_quantisation_bound(c in case()) {
        for a in KernelAlgorithm::ALL {
            let r = int8_worst_ratio(&c, a);
            prop_assert!(r < 1.0, "{a} {} error / bound {r}", c.w);
        }
    }

    /// int8 direct and spatial pack give the int8 GEMM's bytes on the same
    /// quantisation (all accumulate exactly and share the requantisation),
    /// batch 1 and 2; depthwise layers run the same int8 depthwise kernel
    /// under every algorithm.
    #[test]
    fn int8_direct_and_spatial_pack_equal_the_gemm(c in case()) {
        let (gemm_kernel, want) = int8_bytes(&c, KernelAlgorithm::Gemm);
        for a in [KernelAlgorithm::Direct, KernelAlgorithm::SpatialPack] {
            let (kernel, got) = int8_bytes(&c, a);
            if c.w.is_depthwise() {
                prop_assert_eq!(kernel, "depthwise-int8");
            } else {
                prop_assert_eq!(kernel, format!("{a}-int8"));
            }
            prop_assert!(got == want, "{a} ({kernel}) against {gemm_kernel} on {}", c.w);
        }
    }

    /// Every schedule that validates computes the same convolution.
    #[test]
    fn every_valid_schedule_is_correct(
        c in case(),
        knobs in (0..dlas_engine::schedule::GEMM_TILES.len(), 1usize..5, 1usize..6, 0usize..3, 1usize..4, any::<bool>()),
        sparse in any::<bool>(),
    ) {
        let (tile, a, b, vc, kc, par) = knobs;
        let parallel = if par { ParallelLoop::OutputChannels } else { ParallelLoop::Spatial };
        let (mr, nr) = dlas_engine::schedule::GEMM_TILES[tile];
        let schedules = [
            Schedule::Direct(DirectSchedule { oc_block: a, row_block: b }),
            Schedule::Gemm(GemmSchedule {
                mr, nr, kc: 8 * kc, mc: mr * a, nc: nr * b, parallel,
                vectors: if vc % 2 == 0 { VectorAxis::Spatial } else { VectorAxis::OutputChannels },
            }),
            Schedule::SpatialPack(SpatialPackSchedule {
                vc: dlas_engine::schedule::SPATIAL_PACK_VC[vc], vh: a, vw: b, parallel,
            }),
            Schedule::Winograd(WinogradSchedule {
                mr, nr, kc: 8 * kc, tile_block: a * b,
                vectors: if vc % 2 == 0 { VectorAxis::Spatial } else { VectorAxis::OutputChannels },
            }),
        ];
        let format = if sparse { FormatChoice::Bsr { rows: 2, cols: 3 } } else { FormatChoice::Dense };
        for s in schedules {
            if s.validate(&c.w).is_err() {
                continue;
            }
            let algorithm = s.algorithm();
            let tolerance = if algorithm == KernelAlgorithm::Winograd {
                WINOGRAD_TOLERANCE
            } else {
                F32_TOLERANCE
            };
            let cfg = EngineConfig { schedule: Some(s), ..config(algorithm, format, Layout::Nchw) };
            let e = error(&c, &cfg);
            prop_assert!(e < tolerance, "{s:?} {} error {e}", c.w);
            if algorithm.has_nhwc() && !sparse {
                let cfg = EngineConfig { layout: Layout::Nhwc, ..cfg };
                let e = error(&c, &cfg);
                prop_assert!(e < tolerance, "nhwc {s:?} {} error {e}", c.w);
            }
        }
    }
}

/// An int8 layer whose i32 accumulators could overflow is refused with the
/// limit, not run.
#[test]
fn int8_refuses_reductions_that_could_overflow() {
    use dlas_zoo::quant::ActivationQuant;
    let w = Workload::new(8000, 1, 3, 1, 1, 1, 3, 3);
    let weights = vec![0.5; w.reduction()];
    let q = ActivationQuant::from_range(-1.0, 1.0);
    let key = LayerKey::of(w, &weights, &int8_config(KernelAlgorithm::Gemm)).unwrap();
    let scales = Int8Scales {
        weights: &[0.5],
        input: q,
        output: q,
    };
    let Err(err) = Conv2d::new_int8(key, &weights, None, Activation::Identity, scales) else {
        panic!("an int8 layer of {} products was accepted", w.reduction())
    };
    assert!(err.to_string().contains("at most 66311 are safe"), "{err}");
}
