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
use dlas_core::calibration::{Conversion, KernelFamily, LayerTiming, Precision, WinogradTile};
use dlas_core::{ConvShape, Dataset, KernelClass, Layout};
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

/// A layer of the grid: its shape (square maps, padded by half the
/// kernel) and the density its weights are pruned to when timed sparse.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub conv: ConvShape,
    pub density: f64,
}

impl Shape {
    /// A layer of `in_hw` x `in_hw` input.
    pub fn new(
        (in_channels, out_channels, groups): (usize, usize, usize),
        (kernel, stride): (usize, usize),
        in_hw: usize,
        density: f64,
    ) -> Shape {
        let conv = ConvShape::new(
            in_channels,
            out_channels,
            kernel,
            stride,
            kernel / 2,
            groups,
            in_hw,
            in_hw,
        );
        Shape { conv, density }
    }

    fn out_hw(&self) -> usize {
        self.conv.out_h
    }

    /// What identifies a layer's work: channels, groups, kernel, stride, input size.
    fn key(&self) -> LayerShape {
        let c = &self.conv;
        (
            c.in_channels,
            c.out_channels,
            c.groups,
            c.kernel,
            c.stride,
            c.in_h,
        )
    }

    fn macs(&self) -> f64 {
        self.conv.macs() as f64
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
        let in_channels = *channels.choose(&mut rng).expect("values");
        let out_channels = *channels.choose(&mut rng).expect("values");
        let kernel = if rng.random_bool(0.5) { 3 } else { 1 };
        let stride = if rng.random_bool(0.2) { 2 } else { 1 };
        let in_hw = *sizes.choose(&mut rng).expect("values");
        let density = *densities.choose(&mut rng).expect("values");
        let shape = Shape::new(
            (in_channels, out_channels, 1),
            (kernel, stride),
            in_hw,
            density,
        );
        if (1e5..=1.2e8).contains(&shape.macs()) && !zoo.contains(&shape.key()) {
            regular.push(shape);
        }
    }
    let mut depthwise = Vec::new();
    let dw_channels = [16, 32, 64, 96, 144, 192, 384, 576, 960];
    while depthwise.len() < n {
        let c = *dw_channels.choose(&mut rng).expect("values");
        let kernel = if rng.random_bool(0.25) { 5 } else { 3 };
        let stride = if rng.random_bool(0.3) { 2 } else { 1 };
        let in_hw = *[4, 7, 8, 14, 16, 28, 32, 56, 112]
            .choose(&mut rng)
            .expect("values");
        let density = *densities.choose(&mut rng).expect("values");
        let shape = Shape::new((c, c, c), (kernel, stride), in_hw, density);
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
        let in_channels = *channels.choose(&mut rng).expect("values");
        let out_channels = *channels.choose(&mut rng).expect("values");
        let in_hw = *sizes.choose(&mut rng).expect("values");
        let shape = Shape::new((in_channels, out_channels, 1), (3, 1), in_hw, 1.0);
        if (1e5..=1.2e8).contains(&shape.macs()) && !zoo.contains(&shape.key()) {
            out.push(shape);
        }
    }
    out
}

/// Which shapes of the grid a class is timed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grid {
    Regular,
    /// The depthwise stencils, the fp16 GEMM's depthwise products, and the
    /// direct CSR kernel that sparse depthwise layers run.
    Depthwise,
    /// Layers a Winograd configuration runs as Winograd F(4x4, 3x3).
    Winograd,
}

/// A kernel class to time, with its default schedule or tuned, and the
/// shapes it is timed on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setup {
    pub class: KernelClass,
    pub tuned: bool,
    pub grid: Grid,
}

/// Every class the study's native combinations run, as
/// `dlas_core::kernel::kernel_class` names them on a CPU offering `cpu`:
/// the three algorithms dense and CSR, untuned and tuned, in fp32; the
/// three algorithms dense in fp16 and int8 (untuned: tuned fp16 borrows
/// the untuned curve, int8 has no schedule; the int8 GEMM with VNNI where
/// the CPU has it); the depthwise stencils in each precision and the fp16
/// GEMM's depthwise products; direct CSR on depthwise layers; Winograd
/// F(4x4) dense fp32, untuned and tuned, on its own grid (the layers it
/// does not run, it runs as the gemm; F(2x2) takes F(4x4)'s curve); and
/// the blocked layout's direct kernel and stencil, untuned.
pub fn setups(cpu: dlas_core::kernel::Cpu) -> Vec<Setup> {
    let class = |family, sparse, precision| KernelClass {
        family,
        sparse,
        precision,
        layout: Layout::Nchw,
        vnni: family == KernelFamily::Gemm && precision == Precision::I8 && cpu.vnni,
        tile: (family == KernelFamily::Winograd).then_some(WinogradTile::F4x4),
    };
    let setup = |class, tuned, grid| Setup { class, tuned, grid };
    let families = [
        KernelFamily::Direct,
        KernelFamily::Gemm,
        KernelFamily::SpatialPack,
    ];
    let mut out = Vec::new();
    for tuned in [false, true] {
        let winograd = class(KernelFamily::Winograd, false, Precision::F32);
        out.push(setup(winograd, tuned, Grid::Winograd));
        for family in families {
            for sparse in [false, true] {
                out.push(setup(
                    class(family, sparse, Precision::F32),
                    tuned,
                    Grid::Regular,
                ));
            }
        }
        let csr = class(KernelFamily::Direct, true, Precision::F32);
        out.push(setup(csr, tuned, Grid::Depthwise));
    }
    for precision in [Precision::F16, Precision::I8] {
        for family in families {
            out.push(setup(class(family, false, precision), false, Grid::Regular));
        }
    }
    for precision in [Precision::F32, Precision::F16, Precision::I8] {
        let stencil = class(KernelFamily::Depthwise, false, precision);
        out.push(setup(stencil, false, Grid::Depthwise));
    }
    let products = class(KernelFamily::DepthwiseGemm, false, Precision::F16);
    out.push(setup(products, false, Grid::Depthwise));
    // The blocked layout's two kernels (issue 42), untuned.
    let blocked = |family| KernelClass {
        layout: Layout::Nchw16c,
        ..class(family, false, Precision::F32)
    };
    out.push(setup(blocked(KernelFamily::Direct), false, Grid::Regular));
    out.push(setup(
        blocked(KernelFamily::Depthwise),
        false,
        Grid::Depthwise,
    ));
    out
}

/// The one-layer graph of `shape` and its seeded weights, pruned by
/// magnitude to the shape's density when `sparse`.
fn layer(shape: &Shape, sparse: bool) -> (Graph, Weights) {
    let c = &shape.conv;
    let mut b = GraphBuilder::with_input(
        "calibration-layer",
        Dataset::Cifar10,
        [c.in_channels, c.in_h, c.in_w],
    );
    let x = b.input();
    b.conv_bn(
        x,
        c.out_channels,
        c.kernel,
        c.stride,
        c.groups,
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

/// The engine configuration the calibration times `class` with: the
/// algorithm whose configuration makes `dlas_core::kernel::kernel_class`
/// choose it (direct for the depthwise stencils, gemm for the fp16 GEMM's
/// depthwise products), its weight format, layout and data type. `time`
/// checks that the engine builds that class.
pub fn config_for(class: &KernelClass, threads: usize) -> EngineConfig {
    let algorithm = match class.family {
        KernelFamily::Direct | KernelFamily::Depthwise => KernelAlgorithm::Direct,
        KernelFamily::Gemm | KernelFamily::DepthwiseGemm => KernelAlgorithm::Gemm,
        KernelFamily::SpatialPack => KernelAlgorithm::SpatialPack,
        KernelFamily::Winograd => KernelAlgorithm::Winograd,
    };
    EngineConfig {
        threads,
        algorithm,
        format: if class.sparse {
            FormatChoice::Csr
        } else {
            FormatChoice::Dense
        },
        layout: class.layout,
        dtype: match class.precision {
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
    let shape = Shape::new((64, 64, 64), (1, 1), 56, 1.0);
    let values = 2.0 * (64 * 56 * 56) as f64;
    let cpu = dlas_engine::lowering::cpu();
    [Precision::F32, Precision::F16, Precision::I8]
        .into_iter()
        .map(|precision| {
            // The stencil in each precision, the layer the conversions
            // have always been measured on (fp16 on the GEMM's products,
            // as before issue 42).
            let setup = setups(cpu)
                .into_iter()
                .find(|s| {
                    s.grid == Grid::Depthwise
                        && !s.class.sparse
                        && s.class.precision == precision
                        && (precision != Precision::F16
                            || s.class.family == KernelFamily::DepthwiseGemm)
                })
                .expect("a depthwise class in every precision");
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
    let (graph, weights) = layer(shape, setup.class.sparse);
    let mut config = config_for(&setup.class, threads);
    if setup.class.precision == Precision::I8 {
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
    let built: Vec<KernelClass> = engine.layers().map(|l| l.kernel_class()).collect();
    anyhow::ensure!(
        built == [setup.class],
        "the engine runs {built:?} where the calibration times {}",
        setup.class
    );
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
    let setups = setups(dlas_engine::lowering::cpu());
    let shapes_of = |setup: &Setup| match setup.grid {
        Grid::Winograd => &winograd,
        Grid::Depthwise => &depthwise,
        Grid::Regular => &regular,
    };
    let total = setups.iter().map(|s| shapes_of(s).len()).sum();
    let mut out = Vec::new();
    for setup in &setups {
        let shapes = shapes_of(setup);
        for shape in shapes {
            progress(out.len(), total);
            let (median_us, runs) = time(timer, setup, shape, threads, extent.schedules)
                .with_context(|| format!("timing {setup:?} on {shape:?}"))?;
            let (class, c) = (&setup.class, &shape.conv);
            out.push(LayerTiming {
                family: class.family,
                sparse: class.sparse,
                precision: class.precision,
                tuned: setup.tuned,
                in_channels: c.in_channels,
                out_channels: c.out_channels,
                groups: c.groups,
                kernel: c.kernel,
                stride: c.stride,
                in_hw: c.in_h,
                out_hw: shape.out_hw(),
                density: if class.sparse { shape.density } else { 1.0 },
                threads,
                cold: false,
                runs,
                median_us,
                layout: Some(class.layout),
                vnni: Some(class.vnni),
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
        assert!(a.iter().all(|s| s.macs() <= 1.2e8 && s.conv.groups == 1));
        assert!(d.iter().all(|s| s.conv.groups == s.conv.in_channels));
        let w = winograd_grid(12);
        assert_eq!(winograd_grid(12), w);
        // Only layers a Winograd configuration runs as Winograd.
        assert!(w.iter().all(|s| {
            let c = &s.conv;
            winograd_tile(c.kernel, c.stride, c.groups, c.in_channels, [s.out_hw(); 2]).is_some()
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
        let shape = Shape::new((8, 16, 1), (3, 1), 8, 0.5);
        let wide = Shape::new((8, 16, 1), (3, 1), 16, 1.0);
        let dw = Shape::new((8, 8, 8), (3, 1), 8, 0.5);
        let mut timer = Timer::ungated();
        for setup in setups(dlas_engine::lowering::cpu()) {
            let s = match setup.grid {
                Grid::Depthwise => &dw,
                Grid::Winograd => &wide,
                Grid::Regular => &shape,
            };
            let (us, runs) =
                time(&mut timer, &setup, s, 1, 2).unwrap_or_else(|e| panic!("{setup:?}: {e:#}"));
            assert!(us > 0.0 && runs >= 15, "{setup:?}");
        }
    }
}
