//! Engine benchmark: this machine's fp32 FMA peak, then GFLOP/s and % of
//! peak per layer of ResNet-18 (CIFAR-10) and per network for every
//! algorithm, and dense vs CSR vs BSR at 90% random sparsity.
//!
//! cargo run --release -p dlas-engine --example bench_engine [-- runs [section...]]
//! sections: layers, networks, sparse (default: all)

use dlas_core::{Algorithm, Dataset};
use dlas_engine::{
    Conv2d, Engine, EngineConfig, FormatChoice, GemmSchedule, ParallelLoop, Schedule,
};
use dlas_zoo::weights::{Weights, generate, input};
use rand::{Rng, SeedableRng};
use std::time::Instant;

const THREADS: usize = 2;
const ALGORITHMS: [Algorithm; 3] = [Algorithm::Direct, Algorithm::Gemm, Algorithm::SpatialPack];

/// FMAs per thread for the peak measurement.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_loop(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    // 12 independent accumulators: more than latency (4) x ports (2) = 8 chains.
    let mut acc = [_mm256_set1_ps(1.0); 12];
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

/// Peak fp32 GFLOP/s of `threads` threads running FMAs back to back.
fn peak_gflops(threads: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        let iters = 200_000_000u64;
        let start = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                std::thread::spawn(move || {
                    // SAFETY: AVX2 and FMA were detected.
                    std::hint::black_box(unsafe { fma_loop(std::hint::black_box(iters)) })
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let flops = threads as f64 * iters as f64 * 12.0 * 8.0 * 2.0;
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

fn config(algorithm: Algorithm, format: FormatChoice) -> EngineConfig {
    EngineConfig {
        threads: THREADS,
        algorithm,
        format,
        ..EngineConfig::default()
    }
}

/// Gemm schedules tried per layer: the untuned default and a few others.
fn gemm_candidates() -> Vec<Schedule> {
    let mut v = vec![];
    for (mr, nr) in [(6, 16), (4, 24)] {
        for parallel in [ParallelLoop::OutputChannels, ParallelLoop::Spatial] {
            for (mc, nc) in [(mr * 8, nr * 16), (mr * 4, nr * 4), (mr * 2, nr * 32)] {
                v.push(Schedule::Gemm(GemmSchedule {
                    mr,
                    nr,
                    kc: 256,
                    mc,
                    nc,
                    parallel,
                }));
            }
        }
    }
    v
}

/// Zeroes a random 90% of every 3x3 convolution's weights.
fn prune(graph: &dlas_zoo::Graph, weights: &Weights, sparsity: f64) -> Weights {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut w = weights.clone();
    for (node, p) in graph.nodes.iter().zip(w.by_node.iter_mut()) {
        if let (dlas_zoo::Op::Conv(c), Some(dlas_zoo::weights::Params::Conv { weight, .. })) =
            (&node.op, p)
            && c.kernel == 3
            && c.groups == 1
        {
            weight.iter_mut().for_each(|v| {
                if rng.random::<f64>() < sparsity {
                    *v = 0.0;
                }
            });
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
    let peak = peak_gflops(THREADS);
    println!(
        "fp32 FMA peak, {THREADS} threads: {peak:.1} GFLOP/s (single thread {:.1})\n",
        peak_gflops(1)
    );

    let resnet = (dlas_zoo::find(Dataset::Cifar10, "resnet18")?.build)();
    let weights = generate(&resnet, 1);
    let engines: Vec<Engine> = ALGORITHMS
        .iter()
        .map(|&a| Engine::compile(&resnet, &weights, &config(a, FormatChoice::Dense)))
        .collect::<anyhow::Result<_>>()?;
    if want("layers") {
        println!(
            "ResNet-18 CIFAR-10 layers, batch 1, {THREADS} threads: GFLOP/s (% of peak); gemm* = best of {} gemm schedules",
            gemm_candidates().len()
        );
        println!(
            "{:<34} {:>14} {:>14} {:>14} {:>14}",
            "layer", "direct", "gemm", "spatial-pack", "gemm*"
        );
        let layers: Vec<Vec<&Conv2d>> = engines.iter().map(|e| e.layers().collect()).collect();
        for i in 0..layers[0].len() {
            let w = *layers[0][i].workload();
            let x: Vec<f32> = (0..w.in_len())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let gf = |t: f64| w.flops() as f64 / t / 1e9;
            let cell = |t: f64| format!("{:.1} ({:.0}%)", gf(t), 100.0 * gf(t) / peak);
            let mut row = format!("{:<34}", w.to_string());
            for per_alg in &layers {
                let t = median(runs, || {
                    std::hint::black_box(per_alg[i].run(&pool, &x, 1));
                });
                row += &format!(" {:>14}", cell(t));
            }
            // Per-layer tuning among a few gemm schedules (folded weights of the dense gemm layer
            // are not exposed, so the tuned layers use the layer's raw shape with random weights).
            let wt: Vec<f32> = (0..w.out_channels * w.reduction())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let best = gemm_candidates()
                .into_iter()
                .filter(|s| s.validate(&w).is_ok())
                .map(|s| {
                    let c = Conv2d::new(
                        w,
                        &wt,
                        None,
                        dlas_engine::Activation::Relu,
                        &EngineConfig {
                            schedule: Some(s),
                            ..config(Algorithm::Gemm, FormatChoice::Dense)
                        },
                    )
                    .unwrap();
                    median(runs, || {
                        std::hint::black_box(c.run(&pool, &x, 1));
                    })
                })
                .fold(f64::INFINITY, f64::min);
            row += &format!(" {:>14}", cell(best));
            println!("{row}");
        }
    }

    if want("networks") {
        println!("\nWhole networks, batch 1, {THREADS} threads: ms (GFLOP/s, % of peak)");
        println!(
            "{:<24} {:>22} {:>22} {:>22}",
            "network", "direct", "gemm", "spatial-pack"
        );
        for (dataset, name) in [
            (Dataset::Cifar10, "resnet18"),
            (Dataset::Imagenet, "mobilenetv2"),
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
            println!("{row}");
        }
    }

    if want("sparse") {
        println!(
            "\n90% random sparsity, ResNet-18 CIFAR-10 3x3 layers with >= 128 channels: speed-up over the same algorithm dense"
        );
        let pruned = prune(&resnet, &weights, 0.9);
        let formats = [
            ("csr", FormatChoice::Csr),
            ("bsr1x4", FormatChoice::Bsr { rows: 1, cols: 4 }),
            ("bsr4x4", FormatChoice::Bsr { rows: 4, cols: 4 }),
        ];
        print!("{:<34} {:<13}", "layer", "algorithm");
        for (n, _) in formats {
            print!(" {n:>8}");
        }
        println!();
        for a in ALGORITHMS {
            let dense = Engine::compile(&resnet, &pruned, &config(a, FormatChoice::Dense))?;
            let sparse: Vec<Engine> = formats
                .iter()
                .map(|(_, f)| Engine::compile(&resnet, &pruned, &config(a, *f)))
                .collect::<anyhow::Result<_>>()?;
            let dl: Vec<&Conv2d> = dense.layers().collect();
            let sl: Vec<Vec<&Conv2d>> = sparse.iter().map(|e| e.layers().collect()).collect();
            for i in 0..dl.len() {
                let w = *dl[i].workload();
                if w.kernel != 3 || w.in_channels < 128 {
                    continue;
                }
                let x: Vec<f32> = (0..w.in_len())
                    .map(|_| rng.random_range(-1.0..1.0))
                    .collect();
                let td = median(runs, || {
                    std::hint::black_box(dl[i].run(&pool, &x, 1));
                });
                print!("{:<34} {:<13}", w.to_string(), a.to_string());
                for s in &sl {
                    let ts = median(runs, || {
                        std::hint::black_box(s[i].run(&pool, &x, 1));
                    });
                    print!(" {:>7.2}x", td / ts);
                }
                println!();
            }
        }
    }
    Ok(())
}
