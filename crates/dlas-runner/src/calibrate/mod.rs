//! `dlas devices calibrate`: this machine measured as the device model
//! describes devices.
//!
//! - [`peak`]: FMA peak per instruction set and thread count, FMA latency,
//!   int8 multiply-accumulate peak.
//! - [`memory`]: caches and the sustained bandwidth of each level and of DRAM.
//! - overheads: a parallel region of the engine's thread pool, and the
//!   engine's cost per layer (the slope of a chain of tiny layers).
//! - [`layers`]: the engine's kernels timed one layer at a time.
//!
//! Every timing of the engine (overheads, conversions, layers) is a window
//! in the machine's near state ([`timer`]), as the campaign's bursts are.
//!
//! Nothing here runs a network of the zoo: network timings are what the
//! calibrated model is validated against (`dlas validate`), never an input.

pub mod layers;
pub mod memory;
pub mod peak;
pub mod timer;

use anyhow::Result;
use dlas_core::calibration::{LayerTiming, Machine, Peak};
use dlas_core::{Dataset, Layout};
use dlas_engine::{Engine, EngineConfig, FormatChoice, KernelAlgorithm};
use dlas_zoo::{GraphBuilder, Op};

pub use layers::Extent;
use timer::Timer;

/// Everything `dlas devices calibrate` measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    pub machine: Machine,
    pub layers: Vec<LayerTiming>,
    /// Timings taken, and those kept outside the near state after waiting
    /// for it ([`Timer`]).
    pub windows: usize,
    pub outside: usize,
}

/// What the calibration reports as it goes.
pub trait Progress {
    fn stage(&mut self, name: &str);
    fn layer(&mut self, done: usize, total: usize);
}

/// Measures this machine on `threads` threads.
pub fn calibrate(
    threads: usize,
    extent: Extent,
    progress: &mut dyn Progress,
) -> Result<Calibration> {
    progress.stage("the machine's near state");
    let mut timer = Timer::probe(crate::rounds::NEAR_PROBE);
    progress.stage("FMA peaks");
    let mut fma = Vec::new();
    let mut int8 = Vec::new();
    for t in 1..=threads {
        for isa in peak::Isa::available() {
            fma.push(Peak {
                isa: isa.name().into(),
                threads: t,
                gmacs: peak::fma_rate(isa, t) / 1e9,
            });
        }
        for step in peak::int8_steps() {
            int8.push(Peak {
                isa: step.into(),
                threads: t,
                gmacs: peak::int8_step_rate(step, t) / 1e9,
            });
        }
    }
    let fma_latency_ns = peak::fma_latency_ns();
    progress.stage("memory bandwidth");
    let caches = memory::caches();
    let bandwidth = memory::bandwidths(&caches, threads);
    progress.stage("overheads");
    let region_us = region_us(&mut timer, threads)?;
    let (run_us, layer_us) = run_and_layer_us(&mut timer, threads)?;
    let conversions = layers::conversions(&mut timer, threads, run_us)?;
    progress.stage("layer micro-benchmarks");
    let layers = layers::benchmark(&mut timer, threads, extent, |done, total| {
        progress.layer(done, total)
    })?;
    Ok(Calibration {
        machine: Machine {
            threads,
            fma,
            int8,
            fma_latency_ns,
            caches,
            bandwidth,
            region_us,
            layer_us,
            run_us,
            conversions,
        },
        layers,
        windows: timer.windows,
        outside: timer.outside,
    })
}

/// Median cost of one empty parallel region on a pool of `threads`.
fn region_us(timer: &mut Timer, threads: usize) -> Result<f64> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let (us, _) = timer.median_us(|| {
        pool.broadcast(|c| std::hint::black_box(c.index()));
        Ok(())
    })?;
    Ok(us)
}

/// The engine's fixed cost per run and its cost per layer: a chain of `n`
/// 1x1 convolutions on one channel of one pixel is almost nothing but
/// per-layer work, so the slope between 1 and 33 layers is the cost of a
/// layer and the intercept the cost of a run.
fn run_and_layer_us(timer: &mut Timer, threads: usize) -> Result<(f64, f64)> {
    let mut chain = |n: usize| -> Result<f64> {
        let mut b = GraphBuilder::with_input("calibration-chain", Dataset::Cifar10, [1, 1, 1]);
        let mut x = b.input();
        for _ in 0..n {
            x = b.conv_bn(x, 1, 1, 1, 1, Some(Op::Relu));
        }
        let graph = b.finish();
        let weights = dlas_zoo::weights::generate(&graph, layers::GRID_SEED);
        let config = EngineConfig {
            threads,
            algorithm: KernelAlgorithm::Gemm,
            format: FormatChoice::Dense,
            layout: Layout::Nchw,
            ..EngineConfig::default()
        };
        let engine = Engine::compile(&graph, &weights, &config)?;
        let input = [0.5f32];
        Ok(timer.median_us(|| engine.run(&input, 1).map(drop))?.0)
    };
    let one = chain(1)?;
    let layer = ((chain(33)? - one) / 32.0).max(0.0);
    Ok(((one - layer).max(0.0), layer))
}
