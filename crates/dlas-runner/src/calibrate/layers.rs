//! Layer micro-benchmarks: the native engine's kernels timed one layer at a
//! time on a seeded grid of shapes, the only data the device model's
//! efficiency curves are fitted to.
//!
//! The shapes are drawn from value sets (channels, sizes, kernels, strides),
//! not copied from the zoo's networks, so that the networks are an
//! out-of-sample test of the fitted curves. Each layer is a one-layer graph
//! (convolution, batch norm, ReLU) compiled by the engine as a network's
//! layer is, so it runs the same lowering, packing, epilogue and thread
//! pool. Sparse layers are pruned by magnitude to a drawn density; tuned
//! layers take the fastest of the default schedule and a seeded sample of
//! the schedule space (a small stand-in for the tuner's search).

use super::timer::{Timed, Timer};
use anyhow::{Context, Result};
use dlas_core::calibration::{Conversion, KernelFamily, LayerTiming, Precision};
use dlas_core::{Dataset, Layout};
use dlas_engine::{DType, Engine, EngineConfig, FormatChoice, KernelAlgorithm};
use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, GraphBuilder, Op};
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashSet;

/// Seed of the shape grid and of the schedule samples.
pub const GRID_SEED: u64 = 0xca1b_2026;

/// Shapes per kernel class of a calibration (`--shapes`): six fitted
/// coefficients per class need several times as many points.
pub const DEFAULT_SHAPES: usize = 40;

/// A layer shape of the grid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub in_channels: usize,
    pub out_channels: usize,
    pub groups: usize,
    pub kernel: usize,
    pub stride: usize,
    pub in_hw: usize,
    pub density: f64,
}

impl Shape {
    fn out_hw(&self) -> usize {
        (self.in_hw + 2 * (self.kernel / 2) - self.kernel) / self.stride + 1
    }

    /// What identifies a layer's work: channels, groups, kernel, stride, input size.
    fn key(&self) -> LayerShape {
        (
            self.in_channels,
            self.out_channels,
            self.groups,
            self.kernel,
            self.stride,
            self.in_hw,
        )
    }

    fn macs(&self) -> f64 {
        let k = (self.in_channels / self.groups) * self.kernel * self.kernel;
        (self.out_channels * self.out_hw().pow(2) * k) as f64
    }
}

/// (in channels, out channels, groups, kernel, stride, input size).
pub type LayerShape = (usize, usize, usize, usize, usize, usize);

/// Every convolution of every network in the zoo, by shape: the grid
/// leaves these out, so that no layer of a network the model is validated
/// on is ever a calibration record.
pub fn zoo_layers() -> HashSet<LayerShape> {
    let mut shapes = HashSet::new();
    for network in dlas_zoo::all() {
        let graph = (network.build)();
        for node in &graph.nodes {
            if let Op::Conv(conv) = &node.op {
                let [_, h, w] = graph.nodes[node.inputs[0]].shape;
                if h == w {
                    shapes.insert((
                        conv.in_channels,
                        conv.out_channels,
                        conv.groups,
                        conv.kernel,
                        conv.stride,
                        h,
                    ));
                }
            }
        }
    }
    shapes
}

/// How much of the grid to time: `shapes` per class, `schedules` sampled
/// per tuned layer.
#[derive(Debug, Clone, Copy)]
pub struct Extent {
    pub shapes: usize,
    pub schedules: usize,
}

/// The grid: `n` shapes of regular convolutions and `n` depthwise ones,
/// each under a cap on multiply-accumulates so that no untuned layer takes
/// seconds.
pub fn grid(n: usize) -> (Vec<Shape>, Vec<Shape>) {
    let zoo = zoo_layers();
    let mut rng = ChaCha8Rng::seed_from_u64(GRID_SEED);
    let channels = [8, 16, 24, 32, 48, 64, 96, 128, 160, 256, 384, 512];
    let sizes = [4, 7, 8, 14, 16, 28, 32, 56];
    let densities = [0.1, 0.2, 0.35, 0.5, 0.7];
    let mut regular = Vec::new();
    while regular.len() < n {
        let shape = Shape {
            in_channels: *channels.choose(&mut rng).expect("values"),
            out_channels: *channels.choose(&mut rng).expect("values"),
            groups: 1,
            kernel: if rng.random_bool(0.5) { 3 } else { 1 },
            stride: if rng.random_bool(0.2) { 2 } else { 1 },
            in_hw: *sizes.choose(&mut rng).expect("values"),
            density: *densities.choose(&mut rng).expect("values"),
        };
        if (1e5..=1.2e8).contains(&shape.macs()) && !zoo.contains(&shape.key()) {
            regular.push(shape);
        }
    }
    let mut depthwise = Vec::new();
    let dw_channels = [16, 32, 64, 96, 144, 192, 384, 576, 960];
    while depthwise.len() < n {
        let c = *dw_channels.choose(&mut rng).expect("values");
        let shape = Shape {
            in_channels: c,
            out_channels: c,
            groups: c,
            kernel: if rng.random_bool(0.25) { 5 } else { 3 },
            stride: if rng.random_bool(0.3) { 2 } else { 1 },
            in_hw: *[4, 7, 8, 14, 16, 28, 32, 56, 112]
                .choose(&mut rng)
                .expect("values"),
            density: *densities.choose(&mut rng).expect("values"),
        };
        if (1e4..=2e7).contains(&shape.macs()) && !zoo.contains(&shape.key()) {
            depthwise.push(shape);
        }
    }
    (regular, depthwise)
}

/// The Winograd class's shapes: `n` 3x3 stride-1 convolutions of 8 or
/// more input channels on maps of 16 or more F(4x4, 3x3) tiles (14x14 and
/// up, layers a Winograd configuration runs as Winograd, see
/// `winograd_tile`; on the regular grid most would run the gemm) from the
/// regular grid's channel counts and under its cap, drawn from their own
/// seed so that the regular and depthwise grids stay as they were. The
/// F(2x2, 3x3) layers (7x7 and 8x8 maps) are not drawn: the model gives
/// them the class's curve at their own products, and the validation
/// measures its error there. (Calibrations before December 4, 2026 drew
/// from maps of 4-56, when Winograd ran on every 3x3 stride-1 layer.)
pub fn winograd_grid(n: usize) -> Vec<Shape> {
    let zoo = zoo_layers();
    let mut rng = ChaCha8Rng::seed_from_u64(GRID_SEED ^ 0x3a3);
    let channels = [8, 16, 24, 32, 48, 64, 96, 128, 160, 256, 384, 512];
    let sizes = [14, 16, 28, 32, 56];
    let mut out = Vec::new();
    while out.len() < n {
        let shape = Shape {
            in_channels: *channels.choose(&mut rng).expect("values"),
            out_channels: *channels.choose(&mut rng).expect("values"),
            groups: 1,
            kernel: 3,
            stride: 1,
            in_hw: *sizes.choose(&mut rng).expect("values"),
            density: 1.0,
        };
        if (1e5..=1.2e8).contains(&shape.macs()) && !zoo.contains(&shape.key()) {
            out.push(shape);
        }
    }
    out
}

/// A kernel class to time, as the engine is configured for it.
#[derive(Debug, Clone, Copy)]
struct Setup {
    family: KernelFamily,
    sparse: bool,
    precision: Precision,
    tuned: bool,
    /// Timed on the depthwise grid: the depthwise stencil, and the direct
    /// CSR kernel that sparse depthwise layers run under every algorithm.
    depthwise: bool,
}

/// Every class the study's native combinations run: the three algorithms
/// dense and CSR, untuned and tuned, in fp32; the three algorithms dense in
/// fp16 and int8 (untuned: tuned fp16 borrows the untuned curve, int8 has
/// no schedule); the depthwise kernels in each precision; direct CSR on
/// depthwise layers; Winograd dense fp32, untuned and tuned, on its own
/// grid (the layers it does not run, it runs as the gemm).
fn setups() -> Vec<Setup> {
    let mut out = Vec::new();
    for tuned in [false, true] {
        out.push(Setup {
            family: KernelFamily::Winograd,
            sparse: false,
            precision: Precision::F32,
            tuned,
            depthwise: false,
        });
        for family in [
            KernelFamily::Direct,
            KernelFamily::Gemm,
            KernelFamily::SpatialPack,
        ] {
            for sparse in [false, true] {
                out.push(Setup {
                    family,
                    sparse,
                    precision: Precision::F32,
                    tuned,
                    depthwise: false,
                });
            }
        }
        out.push(Setup {
            family: KernelFamily::Direct,
            sparse: true,
            precision: Precision::F32,
            tuned,
            depthwise: true,
        });
    }
    for precision in [Precision::F16, Precision::I8] {
        for family in [
            KernelFamily::Direct,
            KernelFamily::Gemm,
            KernelFamily::SpatialPack,
        ] {
            out.push(Setup {
                family,
                sparse: false,
                precision,
                tuned: false,
                depthwise: false,
            });
        }
    }
    for precision in [Precision::F32, Precision::F16, Precision::I8] {
        out.push(Setup {
            family: KernelFamily::Depthwise,
            sparse: false,
            precision,
            tuned: false,
            depthwise: true,
        });
    }
    out
}

/// The one-layer graph of `shape` and its seeded weights, pruned by
/// magnitude to the shape's density when `sparse`.
fn layer(shape: &Shape, sparse: bool) -> (Graph, Weights) {
    let mut b = GraphBuilder::with_input(
        "calibration-layer",
        Dataset::Cifar10,
        [shape.in_channels, shape.in_hw, shape.in_hw],
    );
    let x = b.input();
    b.conv_bn(
        x,
        shape.out_channels,
        shape.kernel,
        shape.stride,
        shape.groups,
        Some(Op::Relu),
    );
    let graph = b.finish();
    let mut weights = dlas_zoo::weights::generate(&graph, GRID_SEED);
    if sparse {
        for params in weights.by_node.iter_mut().flatten() {
            if let Params::Conv { weight, .. } = params {
                prune(weight, shape.density);
            }
        }
    }
    (graph, weights)
}

/// Zeroes the smallest-magnitude weights until `density` of them remain.
fn prune(weight: &mut [f32], density: f64) {
    let mut magnitudes: Vec<f32> = weight.iter().map(|w| w.abs()).collect();
    let cut = ((1.0 - density) * weight.len() as f64).round() as usize;
    if cut == 0 {
        return;
    }
    let (_, threshold, _) = magnitudes.select_nth_unstable_by(cut - 1, f32::total_cmp);
    let threshold = *threshold;
    for w in weight.iter_mut() {
        if w.abs() <= threshold {
            *w = 0.0;
        }
    }
}

fn config(setup: &Setup, threads: usize) -> EngineConfig {
    // fp32 depthwise layers run the stencil under every algorithm; int8
    // depthwise layers run the int8 depthwise kernel under every algorithm;
    // fp16 depthwise layers run the GEMM path's own kernel under GEMM and the
    // stencil with f16 weights under direct and spatial pack. The model has
    // one depthwise class per precision (`dlas_devices::efficiency::class_of`),
    // timed here on the GEMM path for fp16 and int8.
    let algorithm = match setup.family {
        KernelFamily::Depthwise if setup.precision != Precision::F32 => KernelAlgorithm::Gemm,
        KernelFamily::Direct | KernelFamily::Depthwise => KernelAlgorithm::Direct,
        KernelFamily::Gemm => KernelAlgorithm::Gemm,
        KernelFamily::SpatialPack => KernelAlgorithm::SpatialPack,
        KernelFamily::Winograd => KernelAlgorithm::Winograd,
    };
    EngineConfig {
        threads,
        algorithm,
        format: if setup.sparse {
            FormatChoice::Csr
        } else {
            FormatChoice::Dense
        },
        layout: Layout::Nchw,
        dtype: match setup.precision {
            Precision::F32 => DType::F32,
            Precision::F16 => DType::F16,
            Precision::I8 => DType::I8,
        },
        schedule: None,
        quant: None,
    }
}

/// The engine's cost per value of a run's input and output in each
/// precision: a one-layer graph whose layer does one multiply per value (a
/// 1x1 depthwise convolution on 64 x 56 x 56) costs the fixed run cost,
/// the conversions of its input and output, and almost nothing else, so
/// what exceeds `run_us` over the values moved is that cost.
pub fn conversions(timer: &mut Timer, threads: usize, run_us: f64) -> Result<Vec<Conversion>> {
    let shape = Shape {
        in_channels: 64,
        out_channels: 64,
        groups: 64,
        kernel: 1,
        stride: 1,
        in_hw: 56,
        density: 1.0,
    };
    let values = 2.0 * (64 * 56 * 56) as f64;
    [Precision::F32, Precision::F16, Precision::I8]
        .into_iter()
        .map(|precision| {
            let setup = Setup {
                family: KernelFamily::Depthwise,
                sparse: false,
                precision,
                tuned: false,
                depthwise: true,
            };
            let (us, _) = time(timer, &setup, &shape, threads, 0)?;
            Ok(Conversion {
                precision,
                ns_per_value: ((us - run_us) * 1e3 / values).max(0.0),
            })
        })
        .collect()
}

/// Times one class on one shape, warm: the untuned default, or the fastest
/// of the default and `schedules` sampled schedules. (Until December 2026
/// each layer was also timed with every cache flushed before each run;
/// the model no longer uses such timings, see
/// `dlas_devices::efficiency`, and with a last-level cache of hundreds of
/// MiB the flushes took most of the calibration's time.)
fn time(
    timer: &mut Timer,
    setup: &Setup,
    shape: &Shape,
    threads: usize,
    schedules: usize,
) -> Result<Timed> {
    let (graph, weights) = layer(shape, setup.sparse);
    let mut config = config(setup, threads);
    if setup.precision == Precision::I8 {
        let calibration = dlas_compress::Calibration::seeded(
            &graph,
            GRID_SEED,
            4,
            dlas_compress::CalibrationMethod::MinMax,
        );
        config.quant = Some(dlas_compress::engine_params(
            &graph,
            &weights,
            &calibration,
            &dlas_compress::Tract,
        )?);
    }
    let input = dlas_zoo::weights::input(&graph, GRID_SEED, 1);
    let engine = Engine::compile(&graph, &weights, &config)?;
    let mut best = timer.median_us(|| engine.run(&input, 1).map(drop))?;
    let default = engine.default_scheduled().first().copied();
    if let (true, Some(key)) = (setup.tuned, default) {
        let mut rng = ChaCha8Rng::seed_from_u64(GRID_SEED ^ shape.macs() as u64);
        let default = key.default_schedule(threads);
        for _ in 0..schedules {
            let candidate = dlas_tune::space::random(default, &mut rng);
            if candidate.validate(&key.workload).is_err() {
                continue;
            }
            config.schedule = Some(candidate);
            let Ok(candidate_engine) = Engine::compile(&graph, &weights, &config) else {
                continue;
            };
            let timed = timer.median_us(|| candidate_engine.run(&input, 1).map(drop))?;
            if timed.0 < best.0 {
                best = timed;
            }
        }
    }
    Ok(best)
}

/// Times every class on its shapes of the grid, reporting each layer to
/// `progress`.
pub fn benchmark(
    timer: &mut Timer,
    threads: usize,
    extent: Extent,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<LayerTiming>> {
    let (regular, depthwise) = grid(extent.shapes);
    let winograd = winograd_grid(extent.shapes);
    let setups = setups();
    let shapes_of = |setup: &Setup| match setup.family {
        KernelFamily::Winograd => &winograd,
        _ if setup.depthwise => &depthwise,
        _ => &regular,
    };
    let total = setups.iter().map(|s| shapes_of(s).len()).sum();
    let mut out = Vec::new();
    for setup in &setups {
        let shapes = shapes_of(setup);
        for shape in shapes {
            progress(out.len(), total);
            let (median_us, runs) = time(timer, setup, shape, threads, extent.schedules)
                .with_context(|| format!("timing {setup:?} on {shape:?}"))?;
            out.push(LayerTiming {
                family: setup.family,
                sparse: setup.sparse,
                precision: setup.precision,
                tuned: setup.tuned,
                in_channels: shape.in_channels,
                out_channels: shape.out_channels,
                groups: shape.groups,
                kernel: shape.kernel,
                stride: shape.stride,
                in_hw: shape.in_hw,
                out_hw: shape.out_hw(),
                density: if setup.sparse { shape.density } else { 1.0 },
                threads,
                cold: false,
                runs,
                median_us,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::calibration::winograd_tile;

    #[test]
    fn the_grid_is_seeded_and_bounded() {
        let (a, d) = grid(12);
        assert_eq!(grid(12), (a.clone(), d.clone()));
        assert!(a.iter().all(|s| s.macs() <= 1.2e8 && s.groups == 1));
        assert!(d.iter().all(|s| s.groups == s.in_channels));
        let w = winograd_grid(12);
        assert_eq!(winograd_grid(12), w);
        // Only layers a Winograd configuration runs as Winograd.
        assert!(w.iter().all(|s| {
            winograd_tile(s.kernel, s.stride, s.groups, s.in_channels, [s.out_hw(); 2]).is_some()
        }));
        // The Winograd grid did not move the others.
        assert_eq!(grid(12), (a, d));
    }

    /// The committed calibration times no layer of any network of the zoo:
    /// the networks stay out of sample for `dlas validate`.
    #[test]
    fn the_fit_never_sees_a_network_row() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/devices/measured/host-layers.csv");
        let timings = dlas_core::calibration::read_layer_timings(&path).unwrap();
        let zoo = zoo_layers();
        assert!(zoo.len() > 50, "the zoo's layers were not found");
        for t in &timings {
            let key = (
                t.in_channels,
                t.out_channels,
                t.groups,
                t.kernel,
                t.stride,
                t.in_hw,
            );
            assert!(!zoo.contains(&key), "{key:?} is a layer of a zoo network");
        }
        // And the grid that produced it is the seeded one.
        let (regular, depthwise) = grid(DEFAULT_SHAPES);
        let winograd = winograd_grid(DEFAULT_SHAPES);
        let grid: HashSet<LayerShape> = regular
            .iter()
            .chain(&depthwise)
            .chain(&winograd)
            .map(Shape::key)
            .collect();
        assert!(timings.iter().all(|t| grid.contains(&(
            t.in_channels,
            t.out_channels,
            t.groups,
            t.kernel,
            t.stride,
            t.in_hw
        ))));
    }

    #[test]
    fn pruning_keeps_the_density() {
        let mut w: Vec<f32> = (0..100).map(|i| i as f32 - 50.5).collect();
        prune(&mut w, 0.3);
        assert_eq!(w.iter().filter(|x| **x != 0.0).count(), 30);
    }

    #[test]
    fn every_class_times_a_small_layer() {
        let shape = Shape {
            in_channels: 8,
            out_channels: 16,
            groups: 1,
            kernel: 3,
            stride: 1,
            in_hw: 8,
            density: 0.5,
        };
        let dw = Shape {
            out_channels: 8,
            groups: 8,
            ..shape
        };
        let mut timer = Timer::ungated();
        for setup in setups() {
            let s = if setup.depthwise { &dw } else { &shape };
            let (us, runs) =
                time(&mut timer, &setup, s, 1, 2).unwrap_or_else(|e| panic!("{setup:?}: {e:#}"));
            assert!(us > 0.0 && runs >= 15, "{setup:?}");
        }
    }
}
