//! Engine benchmark: this machine's fp32 FMA peak (with the widest FMA the
//! kernels use), then GFLOP/s and % of peak per layer of ResNet-18
//! (CIFAR-10, with Winograd's speed-up over the gemm on the 3x3 stride-1
//! layers it computes) and per network (ResNet-18 CIFAR-10; MobileNetV2,
//! ResNet-50 and ViT-S/16 ImageNet) for every algorithm, MobileNetV2's time by
//! layer kind, and dense vs CSR vs BSR at 90% sparsity (unstructured, and
//! pruned in the BSR block shape).
//!
//! cargo run --release -p dlas-engine --example bench_engine [-- runs [section...]]
//! sections: layers, networks, mobilenet, blocked, dtypes, sparse (default: all)

use dlas_core::Dataset;
use dlas_engine::{
    Conv2d, DType, Engine, EngineConfig, FormatChoice, GemmSchedule, KernelAlgorithm, LayerKey,
    ParallelLoop, Schedule, VectorAxis, Workload,
};
use dlas_zoo::weights::{Weights, generate, input};
use rand::{Rng, SeedableRng};
use std::time::Instant;

const THREADS: usize = 2;
const ALGORITHMS: [KernelAlgorithm; 4] = [
    KernelAlgorithm::Direct,
    KernelAlgorithm::Gemm,
    KernelAlgorithm::SpatialPack,
    KernelAlgorithm::Winograd,
];

/// Independent FMA chains per thread: more than latency (4) x ports (2).
const CHAINS: usize = 12;

/// `iters` rounds of CHAINS AVX-512 FMAs (16 lanes each).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fma_loop_avx512(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_set1_ps(1.0); CHAINS];
    let a = _mm512_set1_ps(0.999_999);
    let b = _mm512_set1_ps(1e-7);
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    acc.iter().map(|&x| _mm512_reduce_add_ps(x)).sum()
}

/// `iters` rounds of CHAINS AVX2 FMAs (8 lanes each).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_loop_avx2(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(1.0); CHAINS];
    let a = _mm256_set1_ps(0.999_999);
    let b = _mm256_set1_ps(1e-7);
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut sum = _mm256_setzero_ps();
    for x in acc {
        sum = _mm256_add_ps(sum, x);
    }
    let mut out = [0.0f32; 8];
    // SAFETY: out holds 8 floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
    out.iter().sum()
}

/// The widest FMA the engine's kernels use on this CPU: its name and f32
/// lanes, or None without FMA.
fn fma_width() -> Option<(&'static str, usize)> {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        if avx2 && std::is_x86_feature_detected!("avx512f") {
            return Some(("AVX-512", 16));
        }
        if avx2 {
            return Some(("AVX2", 8));
        }
    }
    None
}

/// Peak fp32 GFLOP/s of `threads` threads running the engine's widest FMAs
/// back to back.
fn peak_gflops(threads: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if let Some((_, lanes)) = fma_width() {
        let iters = if lanes == 16 {
            100_000_000u64
        } else {
            200_000_000
        };
        let start = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                std::thread::spawn(move || {
                    let iters = std::hint::black_box(iters);
                    // SAFETY: fma_width detected the instruction set.
                    std::hint::black_box(unsafe {
                        if lanes == 16 {
                            fma_loop_avx512(iters)
                        } else {
                            fma_loop_avx2(iters)
                        }
                    })
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let flops = threads as f64 * iters as f64 * (CHAINS * lanes * 2) as f64;
        return flops / start.elapsed().as_secs_f64() / 1e9;
    }
    f64::NAN
}

/// Median seconds of `runs` calls after two warm-ups.
fn median(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    f();
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[runs / 2]
}

fn config(algorithm: KernelAlgorithm, format: FormatChoice) -> EngineConfig {
    EngineConfig {
        threads: THREADS,
        algorithm,
        format,
        ..EngineConfig::default()
    }
}

/// Gemm schedules tried per layer: every register tile this CPU runs, both
/// vector axes, both parallel loops, three cache blockings (those that
/// `validate` accepts).
fn gemm_candidates(w: &Workload) -> Vec<Schedule> {
    let mut v = vec![];
    for &(mr, nr) in dlas_engine::schedule::GEMM_TILES {
        for vectors in [VectorAxis::Spatial, VectorAxis::OutputChannels] {
            for parallel in [ParallelLoop::OutputChannels, ParallelLoop::Spatial] {
                for (mc, nc) in [(mr * 8, nr * 16), (mr * 4, nr * 4), (mr * 2, nr * 32)] {
                    // The untuned GEMM's reduction blocks (at most 256, even).
                    let kc = w.reduction().div_ceil(w.reduction().div_ceil(256));
                    v.push(Schedule::Gemm(GemmSchedule {
                        mr,
                        nr,
                        kc,
                        mc,
                        nc,
                        parallel,
                        vectors,
                    }));
                }
            }
        }
    }
    v.retain(|s| s.validate(w).is_ok());
    v
}

/// Zeroes a random `sparsity` fraction of the `r` x `c` blocks of every 3x3
/// convolution's (out, in * 9) weight matrix; 1x1 blocks is unstructured.
fn prune(
    graph: &dlas_zoo::Graph,
    weights: &Weights,
    sparsity: f64,
    (r, c): (usize, usize),
) -> Weights {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut w = weights.clone();
    for (node, p) in graph.nodes.iter().zip(w.by_node.iter_mut()) {
        if let (dlas_zoo::Op::Conv(conv), Some(dlas_zoo::weights::Params::Conv { weight, .. })) =
            (&node.op, p)
            && conv.kernel == 3
            && conv.groups == 1
        {
            let cols = weight.len() / conv.out_channels;
            for br in 0..conv.out_channels.div_ceil(r) {
                for bc in 0..cols.div_ceil(c) {
                    if rng.random::<f64>() < sparsity {
                        for i in br * r..conv.out_channels.min((br + 1) * r) {
                            for j in bc * c..cols.min((bc + 1) * c) {
                                weight[i * cols + j] = 0.0;
                            }
                        }
                    }
                }
            }
        }
    }
    w
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = args.first().map_or(Ok(11), |s| s.parse())?;
    let want = |section: &str| args.len() < 2 || args[1..].iter().any(|a| a == section);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(THREADS)
        .build()?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    // Best of three: the machine may be shared, and a peak is a maximum.
    let peak = (0..3).map(|_| peak_gflops(THREADS)).fold(0.0, f64::max);
    dlas_core::outln!(
        "fp32 FMA peak ({}), {THREADS} threads: {peak:.1} GFLOP/s (single thread {:.1})\n",
        fma_width().map_or("none", |w| w.0),
        peak_gflops(1)
    );

    let resnet = (dlas_zoo::find(Dataset::Cifar10, "resnet18")?.build)();
    let weights = generate(&resnet, 1);
    let engines: Vec<Engine> = ALGORITHMS
        .iter()
        .map(|&a| Engine::compile(&resnet, &weights, &config(a, FormatChoice::Dense)))
        .collect::<anyhow::Result<_>>()?;
    if want("layers") {
        dlas_core::outln!(
            "ResNet-18 CIFAR-10 layers, batch 1, {THREADS} threads: GFLOP/s (% of peak); gemm* = best of {} gemm schedules",
            gemm_candidates(engines[0].layers().next().expect("a layer").workload()).len()
        );
        dlas_core::outln!(
            "winograd: (gemm) where the layer is not 3x3 stride 1 and runs the gemm; * where it is, but on fewer than 16 output tiles, so the network runs the gemm there (timed alone); gemm/wino = gemm's time over winograd's"
        );
        dlas_core::outln!(
            "{:<34} {:>14} {:>14} {:>14} {:>14} {:>9} {:>14}",
            "layer",
            "direct",
            "gemm",
            "spatial-pack",
            "winograd",
            "gemm/wino",
            "gemm*"
        );
        let layers: Vec<Vec<&Conv2d>> = engines.iter().map(|e| e.layers().collect()).collect();
        for i in 0..layers[0].len() {
            let w = *layers[0][i].workload();
            let x: Vec<f32> = (0..w.in_len())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            // Each layer writes into one output buffer, as the engine's
            // arena gives it one: no allocation or page faults are timed.
            let mut y = vec![0.0; w.out_len()];
            let gf = |t: f64| w.flops() as f64 / t / 1e9;
            let cell = |t: f64| format!("{:.1} ({:.0}%)", gf(t), 100.0 * gf(t) / peak);
            let mut row = format!("{:<34}", w.to_string());
            let mut times = Vec::new();
            for per_alg in &layers[..3] {
                let t = median(runs, || {
                    per_alg[i].run_into(&pool, &x, &mut y);
                    std::hint::black_box(&y);
                });
                times.push(t);
                row += &format!(" {:>14}", cell(t));
            }
            // Winograd's column and its speed-up over the gemm, measured
            // in the same run: the network's layer where it runs Winograd,
            // else (a 3x3 stride-1 layer on too few tiles) the Winograd
            // kernel built for the layer alone, marked `*`.
            let network_runs_it = layers[3][i].kernel_name() == "winograd";
            let alone = (w.kernel == 3 && w.stride == 1 && w.groups == 1 && !network_runs_it)
                .then(|| {
                    let wt: Vec<f32> = (0..w.out_channels * w.reduction())
                        .map(|_| rng.random_range(-1.0..1.0))
                        .collect();
                    let gemm = *layers[3][i].key();
                    let key = LayerKey {
                        kernel: KernelAlgorithm::Winograd,
                        class: dlas_core::KernelClass {
                            family: dlas_core::kernel::KernelFamily::Winograd,
                            tile: Some(dlas_core::kernel::WinogradTile::F4x4),
                            ..gemm.class
                        },
                        ..gemm
                    };
                    let s = key.default_schedule(THREADS);
                    Conv2d::new(key, s, &wt, None, dlas_engine::Activation::Relu)
                })
                .transpose()?;
            if network_runs_it || alone.is_some() {
                let layer = alone.as_ref().unwrap_or(layers[3][i]);
                let t = median(runs, || {
                    layer.run_into(&pool, &x, &mut y);
                    std::hint::black_box(&y);
                });
                let mark = if network_runs_it { "" } else { "*" };
                row += &format!(" {:>14} {:>8.2}x", cell(t) + mark, times[1] / t);
            } else {
                row += &format!(" {:>14} {:>9}", "(gemm)", "-");
            }
            // Per-layer tuning among a few gemm schedules (folded weights of the dense gemm layer
            // are not exposed, so the tuned layers use the layer's raw shape with random weights).
            let wt: Vec<f32> = (0..w.out_channels * w.reduction())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let key =
                LayerKey::of(w, &wt, &config(KernelAlgorithm::Gemm, FormatChoice::Dense)).unwrap();
            let best = gemm_candidates(&w)
                .into_iter()
                .map(|s| {
                    let c = Conv2d::new(key, s, &wt, None, dlas_engine::Activation::Relu).unwrap();
                    median(runs, || {
                        c.run_into(&pool, &x, &mut y);
                        std::hint::black_box(&y);
                    })
                })
                .fold(f64::INFINITY, f64::min);
            row += &format!(" {:>14}", cell(best));
            dlas_core::outln!("{row}");
        }
    }

    if want("networks") {
        dlas_core::outln!("\nWhole networks, batch 1, {THREADS} threads: ms (GFLOP/s, % of peak)");
        dlas_core::outln!(
            "{:<24} {:>22} {:>22} {:>22} {:>22}",
            "network",
            "direct",
            "gemm",
            "spatial-pack",
            "winograd"
        );
        for (dataset, name) in [
            (Dataset::Cifar10, "resnet18"),
            (Dataset::Imagenet, "mobilenetv2"),
            (Dataset::Imagenet, "resnet50"),
            (Dataset::Imagenet, "vit_s16"),
        ] {
            let g = (dlas_zoo::find(dataset, name)?.build)();
            let w = generate(&g, 1);
            let x = input(&g, 1, 1);
            let flops = 2.0 * g.macs() as f64;
            let mut row = format!("{:<24}", format!("{name} {dataset}"));
            for a in ALGORITHMS {
                let e = Engine::compile(&g, &w, &config(a, FormatChoice::Dense))?;
                let t = median(runs.min(7), || {
                    std::hint::black_box(e.run(&x, 1).unwrap());
                });
                let gf = flops / t / 1e9;
                row += &format!(
                    " {:>22}",
                    format!("{:.1} ({:.1}, {:.0}%)", t * 1e3, gf, 100.0 * gf / peak)
                );
            }
            dlas_core::outln!("{row}");
        }
    }

    if want("mobilenet") {
        // Where MobileNetV2's time goes: its layers by kind, each timed alone.
        let g = (dlas_zoo::find(Dataset::Imagenet, "mobilenetv2")?.build)();
        let e = Engine::compile(
            &g,
            &generate(&g, 1),
            &config(KernelAlgorithm::Gemm, FormatChoice::Dense),
        )?;
        let x = input(&g, 1, 1);
        let whole = median(runs, || {
            std::hint::black_box(e.run(&x, 1).unwrap());
        });
        dlas_core::outln!(
            "\nMobileNetV2 ImageNet with gemm, batch 1, {THREADS} threads, layers timed alone: ms (GFLOP/s)"
        );
        let mut kinds: Vec<(&str, usize, f64, f64)> = Vec::new();
        for layer in e.layers() {
            let w = *layer.workload();
            let kind = match (w.groups, w.kernel) {
                (g, _) if g > 1 && g == w.in_channels => "depthwise",
                (_, 1) => "pointwise (1x1, linear)",
                _ => "other",
            };
            let x: Vec<f32> = (0..w.in_len())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let mut y = vec![0.0; w.out_len()];
            let t = median(runs, || {
                layer.run_into(&pool, &x, &mut y);
                std::hint::black_box(&y);
            });
            match kinds.iter_mut().find(|k| k.0 == kind) {
                Some(k) => (k.1, k.2, k.3) = (k.1 + 1, k.2 + t, k.3 + w.flops() as f64),
                None => kinds.push((kind, 1, t, w.flops() as f64)),
            }
        }
        for (kind, n, t, flops) in &kinds {
            dlas_core::outln!(
                "{kind:<24} {n:>3} layers {:>8.2} ms ({:.1})",
                t * 1e3,
                flops / t / 1e9
            );
        }
        let layers: f64 = kinds.iter().map(|k| k.2).sum();
        dlas_core::outln!(
            "{:<24}            {:>8.2} ms (whole network; the rest is other operators and overhead)",
            "network",
            whole * 1e3
        );
        dlas_core::outln!(
            "{:<24}            {:>8.2} ms",
            "sum of layers",
            layers * 1e3
        );
    }

    if want("blocked") {
        // Each convolution of MobileNetV2, EfficientNet-B0 and ResNet-50
        // (ImageNet) in NCHW16c against the same layer in NCHW (gemm),
        // timed alone, alternated layer by layer; grouped by map size.
        for name in ["mobilenetv2", "efficientnet_b0", "resnet50"] {
            let g = (dlas_zoo::find(Dataset::Imagenet, name)?.build)();
            let weights = generate(&g, 1);
            let nchw = Engine::compile(
                &g,
                &weights,
                &config(KernelAlgorithm::Gemm, FormatChoice::Dense),
            )?;
            let blocked = Engine::compile(
                &g,
                &weights,
                &EngineConfig {
                    layout: dlas_core::Layout::Nchw16c,
                    ..config(KernelAlgorithm::Gemm, FormatChoice::Dense)
                },
            )?;
            dlas_core::outln!(
                "\n{name}: layers timed alone, NCHW gemm against NCHW16c, ms (GFLOP/s)"
            );
            let mut by: Vec<(String, f64, f64, f64)> = Vec::new();
            for (a, b) in nchw.layers().zip(blocked.layers()) {
                let w = *a.workload();
                let x: Vec<f32> = (0..w.in_len())
                    .map(|_| rng.random_range(-1.0..1.0))
                    .collect();
                let mut y = vec![0.0; w.out_len()];
                let (mut ta, mut tb) = (f64::MAX, f64::MAX);
                for _ in 0..3 {
                    ta = ta.min(median(runs, || {
                        a.run_into(&pool, &x, &mut y);
                        std::hint::black_box(&y);
                    }));
                    tb = tb.min(median(runs, || {
                        b.run_into(&pool, &x, &mut y);
                        std::hint::black_box(&y);
                    }));
                }
                let kind = match (w.is_depthwise(), w.kernel) {
                    (true, k) => format!("dw{k}x{k}"),
                    (false, 1) => "1x1".to_string(),
                    (false, k) => format!("{k}x{k}"),
                };
                let group = format!("{kind:>6} s{} on {:>3}x{:<3}", w.stride, w.in_h, w.in_w);
                match by.iter_mut().find(|r| r.0 == group) {
                    Some(r) => (r.1, r.2, r.3) = (r.1 + ta, r.2 + tb, r.3 + w.flops() as f64),
                    None => by.push((group, ta, tb, w.flops() as f64)),
                }
            }
            let (mut sa, mut sb) = (0.0, 0.0);
            for (group, ta, tb, flops) in &by {
                dlas_core::outln!(
                    "{group}  nchw {:>7.3} ({:>5.1})  nchw16c {:>7.3} ({:>5.1})  {:.2}x",
                    ta * 1e3,
                    flops / ta / 1e9,
                    tb * 1e3,
                    flops / tb / 1e9,
                    tb / ta
                );
                (sa, sb) = (sa + ta, sb + tb);
            }
            let x = input(&g, 1, 1);
            let (mut wa, mut wb) = (f64::MAX, f64::MAX);
            for _ in 0..3 {
                wa = wa.min(median(runs, || {
                    std::hint::black_box(nchw.run(&x, 1).unwrap());
                }));
                wb = wb.min(median(runs, || {
                    std::hint::black_box(blocked.run(&x, 1).unwrap());
                }));
            }
            dlas_core::outln!(
                "layers: nchw {:.3} ms, nchw16c {:.3} ms; whole network: nchw {:.3} ms, nchw16c {:.3} ms",
                sa * 1e3,
                sb * 1e3,
                wa * 1e3,
                wb * 1e3
            );
        }
    }

    if want("dtypes") {
        dlas_core::outln!(
            "\nResNet-18 CIFAR-10 with gemm, batch 1, {THREADS} threads, by storage type: ms"
        );
        let x = input(&resnet, 1, 1);
        let quant = dlas_zoo::quant::calibrate(&resnet, &weights, &x, 1);
        for dtype in [DType::F32, DType::F16, DType::I8] {
            let c = EngineConfig {
                dtype,
                quant: Some(quant.clone()),
                ..config(KernelAlgorithm::Gemm, FormatChoice::Dense)
            };
            let e = Engine::compile(&resnet, &weights, &c)?;
            let t = median(runs.min(7), || {
                std::hint::black_box(e.run(&x, 1).unwrap());
            });
            dlas_core::outln!("{dtype:?}: {:.1} ms", t * 1e3);
        }
    }

    if want("sparse") {
        dlas_core::outln!(
            "\n90% random sparsity, ResNet-18 CIFAR-10 3x3 layers with >= 128 channels: speed-up over the same algorithm dense"
        );
        // (column label, pruning block, format): unstructured pruning for all
        // formats, then block pruning matched to each BSR block shape.
        let cases = [
            ("csr", (1, 1), FormatChoice::Csr),
            ("bsr1x4", (1, 1), FormatChoice::Bsr { rows: 1, cols: 4 }),
            ("bsr4x4", (1, 1), FormatChoice::Bsr { rows: 4, cols: 4 }),
            ("bsr1x4/b", (1, 4), FormatChoice::Bsr { rows: 1, cols: 4 }),
            ("bsr4x4/b", (4, 4), FormatChoice::Bsr { rows: 4, cols: 4 }),
        ];
        dlas_core::outln!("(x/b: weights pruned in blocks of that shape; the others unstructured)");
        dlas_core::out!("{:<34} {:<13}", "layer", "algorithm");
        for (n, _, _) in cases {
            dlas_core::out!(" {n:>9}");
        }
        dlas_core::outln!();
        // Winograd runs sparse weights as the gemm: its rows would repeat
        // the gemm's.
        for a in ALGORITHMS
            .into_iter()
            .filter(|&a| a != KernelAlgorithm::Winograd)
        {
            let mut logsum = vec![0.0f64; cases.len()];
            let mut count = 0;
            // Per case: the dense and sparse engines on the same pruned weights.
            let engines: Vec<(Engine, Engine)> = cases
                .iter()
                .map(|&(_, blocks, f)| {
                    let pruned = prune(&resnet, &weights, 0.9, blocks);
                    Ok((
                        Engine::compile(&resnet, &pruned, &config(a, FormatChoice::Dense))?,
                        Engine::compile(&resnet, &pruned, &config(a, f))?,
                    ))
                })
                .collect::<anyhow::Result<_>>()?;
            let layers: Vec<(Vec<&Conv2d>, Vec<&Conv2d>)> = engines
                .iter()
                .map(|(d, s)| (d.layers().collect(), s.layers().collect()))
                .collect();
            for i in 0..layers[0].0.len() {
                let w = *layers[0].0[i].workload();
                if w.kernel != 3 || w.in_channels < 128 {
                    continue;
                }
                let x: Vec<f32> = (0..w.in_len())
                    .map(|_| rng.random_range(-1.0..1.0))
                    .collect();
                let mut y = vec![0.0; w.out_len()];
                dlas_core::out!("{:<34} {:<13}", w.to_string(), a.to_string());
                for (c, (dense, sparse)) in layers.iter().enumerate() {
                    let td = median(runs, || {
                        dense[i].run_into(&pool, &x, &mut y);
                        std::hint::black_box(&y);
                    });
                    let ts = median(runs, || {
                        sparse[i].run_into(&pool, &x, &mut y);
                        std::hint::black_box(&y);
                    });
                    logsum[c] += (td / ts).ln();
                    dlas_core::out!(" {:>8.2}x", td / ts);
                }
                count += 1;
                dlas_core::outln!();
            }
            dlas_core::out!("{:<34} {:<13}", "geometric mean", a.to_string());
            for l in logsum {
                dlas_core::out!(" {:>8.2}x", (l / count as f64).exp());
            }
            dlas_core::outln!("\n");
        }
    }
    Ok(())
}
