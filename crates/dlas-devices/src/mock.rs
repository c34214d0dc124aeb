//! The mocked devices' performance model.
//!
//! Each kernel takes `max(compute, memory) + launch`, and on a CPU also
//! its kernel class's fixed and per-value costs:
//! - compute, CPU: MACs (the non-zero ones, sparse) over the device's peak
//!   for the cores the kernel's outer loop keeps busy, times the efficiency
//!   the native engine's kernel class reaches on a layer of that shape
//!   (`efficiency.rs`: curves fitted to layer micro-benchmarks of the
//!   calibrated machine, never to a network's time). Version 1 derived the
//!   rate from issue-rate arguments (scalar chains untuned, full vectors
//!   tuned); measured on the host it was wrong by up to 10x and ordered the
//!   algorithms wrongly, so version 2 measures what kernels reach instead;
//!   version 3 fits each class's fixed and per-value costs with it.
//! - compute, GPU: the fraction of lanes that the available threads can
//!   keep busy (Little's law: lanes x FMA latency threads); untuned threads
//!   run their reduction as a dependent chain. Not validated: no GPU has
//!   been measured.
//! - memory: compulsory bytes (inputs, outputs, weights; CSR's indices) over
//!   DRAM bandwidth; on a GPU also what the algorithm adds (im2col, packed
//!   inputs) and, untuned, an input fetch per MAC. On a CPU the algorithm's
//!   own traffic is part of the measured efficiency.
//! - launch: the device's fixed cost per kernel or parallel region (on the
//!   calibrated machine, the engine's measured cost per layer).
//!
//! `docs/devices.md` documents the model and its error measured on the host
//! (`dlas validate`).

use crate::compiler::GraphCompiler;
use crate::efficiency::{Cost, Features, Layer, peak_macs};
use crate::spec::{DeviceKind, DeviceSpec};
use crate::workload::{Kernel, KernelKind, Workload};
use crate::{Device, Unsupported};
use dlas_core::calibration::{CurveClass, KernelFamily, Precision, WinogradTile};
use dlas_core::kernel::{Cpu, KernelClass, Lowering, kernel_class};
use dlas_core::{Algorithm, Combination, Compression, ConvShape};
use rand_distr::{Distribution, LogNormal};

/// Bumped whenever the model's equations change; recorded in every result row.
pub const MODEL_VERSION: u32 = 5;

/// A device whose time comes from [`DeviceSpec`] through the model above.
#[derive(Debug, Clone)]
pub struct MockDevice {
    pub spec: DeviceSpec,
}

/// Per-kernel predicted times for one combination, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub kernels: Vec<(String, f64)>,
}

impl Prediction {
    pub fn total_seconds(&self) -> f64 {
        self.kernels.iter().map(|(_, t)| t).sum()
    }
}

impl MockDevice {
    pub fn new(spec: DeviceSpec) -> MockDevice {
        MockDevice { spec }
    }

    /// The source tag written into result rows.
    pub fn source(&self) -> String {
        format!("mock-v{MODEL_VERSION}")
    }

    /// The source tag of rows timed by the graph-compiler model.
    pub fn graph_source(&self) -> String {
        format!("mock-v{MODEL_VERSION}-gc{}", crate::compiler::VERSION)
    }

    /// Predicts every kernel's time for a combination.
    pub fn predict(&self, c: &Combination, w: &Workload) -> Result<Prediction, Unsupported> {
        if c.algorithm == Algorithm::Auto {
            return Err(Unsupported(format!(
                "mocked devices model the native engine's algorithms; compiler `{}` chooses its own kernels",
                c.compiler
            )));
        }
        let mut kernels = w
            .kernels
            .iter()
            .map(|k| Ok((k.name.clone(), self.kernel_seconds(c, w, k)?)))
            .collect::<Result<Vec<_>, Unsupported>>()?;
        // The calibrated machine's own engine has a fixed cost per run and
        // converts the network's input and output once, at the cost of the
        // kernel class its regular (1x1) layers run.
        if let (Some(m), Some(e)) = (&self.spec.measured, &self.spec.efficiency) {
            let values = w.batch as f64 * (w.input_values + w.output_values);
            let precision = precision_of(w.compression);
            let regular = ConvShape::new(1, 1, 1, 1, 0, 1, 1, 1);
            let class = CurveClass {
                kernel: class_for(c, &regular, precision, e.cpu)?,
                tuned: c.tuned,
            };
            let conversion = m.conversion_seconds(precision) * values * e.conversion_scale(class);
            kernels.push(("run".into(), e.run_seconds + conversion));
        }
        Ok(Prediction { kernels })
    }

    fn kernel_seconds(
        &self,
        c: &Combination,
        w: &Workload,
        k: &Kernel,
    ) -> Result<f64, Unsupported> {
        let s = &self.spec;
        let batch = w.batch as f64;
        let value_bytes = w.compression.value_bytes();
        let launch = s.launch_us * 1e-6;
        let dram = s.memory_gbs * 1e9;
        let io_bytes = (k.input_elems + k.output_elems) * batch * value_bytes;
        let out_channels = match &k.kind {
            KernelKind::Conv(conv) => conv.out_channels,
            KernelKind::Linear | KernelKind::MatMul => k.output_elems as usize,
            KernelKind::Memory => return Ok(io_bytes / dram + launch),
        };
        let sparse = c.format.is_sparse();
        let winograd = self.winograd_layer(c, w, k)?;
        let macs = match winograd {
            Some((conv, tile)) => tile.macs(conv.in_channels, conv.out_channels, k.out_hw) * batch,
            None => k.macs * batch * if sparse { k.density } else { 1.0 },
        };
        let weight_bytes = if sparse {
            // CSR: a value and a 4-byte column index per non-zero, a 4-byte pointer per row.
            k.weight_elems * k.density * (value_bytes + 4.0) + 4.0 * (out_channels + 1) as f64
        } else if let Some((_, tile)) = winograd {
            // The transformed weights: a value per point for every 9.
            tile.points() as f64 / 9.0 * k.weight_elems * value_bytes
        } else {
            k.weight_elems * value_bytes
        };
        if s.kind == DeviceKind::Cpu {
            let (cost, calibrated) = self.cpu_cost(c, w, k, out_channels, macs)?;
            let memory = (io_bytes + weight_bytes) / dram;
            // A calibrated Winograd curve has the transforms in its times;
            // the GEMM curve that stands in for it until then does not.
            let transforms = match winograd {
                Some(layer) if !calibrated => transform_bytes(layer, k, batch, value_bytes) / dram,
                _ => 0.0,
            };
            return Ok(cost.compute_s.max(memory) + cost.extra_s + transforms + launch);
        }
        let (extra_bytes, extra_launches) =
            self.algorithm_traffic(c, k, batch, value_bytes, winograd.map(|(_, tile)| tile));
        let bytes = io_bytes + weight_bytes + extra_bytes;
        let rate = self.gpu_mac_rate(c, k, w.batch) * dtype_rate(s, w.compression);
        let memory = if c.tuned {
            bytes
        } else {
            // An untuned GPU kernel reads its operands through the caches per
            // MAC: each MAC fetches an input value (and an index when sparse).
            bytes.max(macs * (value_bytes + if sparse { 4.0 } else { 0.0 }))
        };
        Ok((macs / rate).max(memory / dram) + launch * (1.0 + extra_launches))
    }

    /// What the engine's kernel costs on one CPU kernel (see
    /// `efficiency.rs`): its `macs` at the calibrated efficiency of the
    /// kernel class on this shape, of the device's peak for the cores its
    /// output channels keep busy, and the class's fixed and per-value
    /// costs; and whether the class was calibrated itself. A Winograd
    /// layer's MACs are its point-wise products, which until the
    /// calibration times a Winograd class take the GEMM curve at their
    /// shape (a GEMM per point of output channels x input channels x tiles, run by
    /// the GEMM's microkernels); the layers Winograd does not compute run
    /// the gemm's kernels.
    fn cpu_cost(
        &self,
        c: &Combination,
        w: &Workload,
        k: &Kernel,
        out_channels: usize,
        macs: f64,
    ) -> Result<(Cost, bool), Unsupported> {
        let efficiency = self.spec.efficiency.as_ref().ok_or_else(|| {
            Unsupported(format!(
                "device `{}` has no kernel efficiency curves (`dlas devices calibrate`)",
                self.spec.id
            ))
        })?;
        let precision = precision_of(w.compression);
        let sparse = c.format.is_sparse();
        let batch = w.batch as f64;
        let density = if sparse { k.density } else { 1.0 };
        let shape = shape_of(k).expect("a kernel with MACs");
        let features = match &k.kind {
            KernelKind::Conv(conv) => Features {
                out_channels_per_group: conv.out_channels_per_group() as f64,
                out_pixels: (k.out_hw[0] * k.out_hw[1]) as f64 * batch,
                in_channels_per_group: conv.in_channels_per_group() as f64,
                kernel_area: (conv.kernel * conv.kernel) as f64,
                density,
            },
            _ => Features {
                out_channels_per_group: k.output_elems,
                out_pixels: batch,
                in_channels_per_group: k.macs / k.output_elems.max(1.0),
                kernel_area: 1.0,
                density,
            },
        };
        let (mut class, mut features) = (
            CurveClass {
                kernel: class_for(c, &shape, precision, efficiency.cpu)?,
                tuned: c.tuned,
            },
            features,
        );
        let calibrated = efficiency.has(class);
        if let (Some(tile), false) = (class.kernel.tile, calibrated) {
            // No Winograd class calibrated: the GEMM's curve at the
            // products' shape.
            class.kernel = KernelClass {
                family: KernelFamily::Gemm,
                tile: None,
                ..class.kernel
            };
            features.out_pixels = tile.tiles(k.out_hw) as f64 * batch;
            features.in_channels_per_group = shape.in_channels as f64;
            features.kernel_area = 1.0;
        }
        let layer = Layer {
            features,
            macs,
            peak: peak_macs(
                &self.spec,
                precision,
                out_channels * w.batch,
                self.spec.cores,
            ),
            values: (k.input_elems + k.output_elems) * batch,
        };
        let cost = efficiency.cost(class, &layer, &self.spec).ok_or_else(|| {
            Unsupported(format!(
                "the calibration has no curve for kernel class {class}"
            ))
        })?;
        Ok((cost, calibrated))
    }

    /// The convolution of kernel `k` and its tile if the engine runs it as
    /// Winograd under `c` (the class's tile; the engine runs every other
    /// layer of a Winograd configuration as the gemm would).
    fn winograd_layer<'a>(
        &self,
        c: &Combination,
        w: &Workload,
        k: &'a Kernel,
    ) -> Result<Option<(&'a ConvShape, WinogradTile)>, Unsupported> {
        let KernelKind::Conv(conv) = &k.kind else {
            return Ok(None);
        };
        if c.algorithm != Algorithm::Winograd {
            return Ok(None);
        }
        let cpu = self
            .spec
            .efficiency
            .as_ref()
            .map_or(Cpu::default(), |e| e.cpu);
        let class = class_for(c, conv, precision_of(w.compression), cpu)?;
        Ok(class.tile.map(|tile| (conv, tile)))
    }

    /// Bytes an algorithm moves beyond compulsory traffic, and extra kernels
    /// it launches (`winograd`: the tile the layer runs as Winograd with, see
    /// [`winograd_layer`]; under winograd the other layers run as gemm).
    fn algorithm_traffic(
        &self,
        c: &Combination,
        k: &Kernel,
        batch: f64,
        vb: f64,
        winograd: Option<WinogradTile>,
    ) -> (f64, f64) {
        let KernelKind::Conv(conv) = &k.kind else {
            return (0.0, 0.0);
        };
        let llc = (self.spec.llc_kib * 1024) as f64;
        let [oh, ow] = k.out_hw;
        let input_bytes = k.input_elems * batch * vb;
        let cores = self.spec.cores as f64;
        match (c.algorithm, winograd) {
            (Algorithm::Winograd, Some(tile)) => {
                // Three kernels (input transform, products, output
                // transform) instead of one.
                (transform_bytes((conv, tile), k, batch, vb), 2.0)
            }
            (Algorithm::Gemm | Algorithm::Winograd, _) => {
                // im2col writes a (k*k*ic) x (oh*ow) matrix and the GEMM reads it back.
                let cols =
                    (conv.kernel * conv.kernel * conv.in_channels * oh * ow) as f64 * batch * vb;
                let rereads = if !c.tuned && cols > llc / 2.0 {
                    cols * (conv.out_channels as f64 / cores - 1.0).max(0.0)
                } else {
                    0.0
                };
                (2.0 * cols + rereads, 1.0)
            }
            // Packing writes the input once into tiles that are then loaded once.
            (Algorithm::SpatialPack, _) => (2.0 * input_bytes, 1.0),
            (Algorithm::Direct, _) => {
                let rereads = if !c.tuned && input_bytes > llc / 2.0 {
                    input_bytes * (conv.out_channels as f64 / cores - 1.0).max(0.0)
                } else {
                    0.0
                };
                (rereads, 0.0)
            }
            (Algorithm::Auto, _) => (0.0, 0.0),
        }
    }

    /// MACs per second on a GPU: lanes kept busy by one thread per output.
    fn gpu_mac_rate(&self, c: &Combination, k: &Kernel, batch: usize) -> f64 {
        let s = &self.spec;
        let lanes = (s.cores * s.fma_lanes) as f64;
        let threads = k.output_elems * batch as f64;
        let busy = (threads / (lanes * s.fma_latency as f64)).min(1.0);
        let per_lane = if c.tuned {
            1.0
        } else {
            // Untuned: one thread per output runs its reduction as a dependent chain.
            1.0 / s.fma_latency as f64
        };
        lanes * busy * per_lane * s.clock_ghz * 1e9
    }
}

/// The kernel class the engine runs a layer of `shape` with under `c`
/// (`dlas_core::kernel::kernel_class`, the engine's own decision) on the
/// calibrated machine, whose CPU is `cpu`; what the model prices.
pub fn class_for(
    c: &Combination,
    shape: &ConvShape,
    precision: Precision,
    cpu: Cpu,
) -> Result<KernelClass, Unsupported> {
    let lowering = Lowering {
        algorithm: c.algorithm,
        format: c.format,
        layout: c.layout,
        precision,
    };
    kernel_class(shape, lowering, cpu).map_err(|e| Unsupported(format!("{}: {e}", c.compiler)))
}

/// The shape the engine runs a kernel with MACs as: a convolution's own,
/// a linear layer or attention product as a 1x1 convolution on one pixel
/// (`None` for memory-bound kernels).
pub fn shape_of(k: &Kernel) -> Option<ConvShape> {
    match &k.kind {
        KernelKind::Conv(conv) => Some(*conv),
        KernelKind::Linear | KernelKind::MatMul => {
            let out = (k.output_elems as usize).max(1);
            let reduction = (k.macs / out as f64).round().max(1.0) as usize;
            Some(ConvShape::new(reduction, out, 1, 1, 0, 1, 1, 1))
        }
        KernelKind::Memory => None,
    }
}

/// The precision the engine computes a compression in.
pub fn precision_of(compression: Compression) -> Precision {
    match compression {
        Compression::Fp16 => Precision::F16,
        Compression::Int8 => Precision::I8,
        _ => Precision::F32,
    }
}

/// Bytes Winograd's transforms add to a layer: the transformed input (a
/// value per point, tile and input channel) and the products (per point,
/// tile and output channel), each written once and read back once.
fn transform_bytes(
    (conv, tile): (&ConvShape, WinogradTile),
    k: &Kernel,
    batch: f64,
    value_bytes: f64,
) -> f64 {
    let values = (tile.points() * (conv.in_channels + conv.out_channels)) as f64;
    2.0 * values * tile.tiles(k.out_hw) as f64 * batch * value_bytes
}

/// Throughput of the stored data type relative to fp32.
fn dtype_rate(spec: &DeviceSpec, compression: Compression) -> f64 {
    match compression {
        Compression::Fp16 => spec.fp16_rate,
        Compression::Int8 => spec.int8_rate,
        _ => 1.0,
    }
}

/// Fraction of SIMD lanes filled when a loop of `n` is vectorised by `width`.
pub(crate) fn lane_fill(n: usize, width: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    n as f64 / (n.div_ceil(width) * width) as f64
}

impl Device for MockDevice {
    fn id(&self) -> &str {
        &self.spec.id
    }

    /// Seeded samples: the predicted time with log-normal run-to-run noise of
    /// the device's documented coefficient of variation.
    fn measure(
        &self,
        combination: &Combination,
        workload: &Workload,
        runs: usize,
        seed: u64,
    ) -> Result<Vec<f64>, Unsupported> {
        let total_ms = self.predict(combination, workload)?.total_seconds() * 1e3;
        Ok(self.samples(total_ms, combination, runs, seed))
    }
}

impl MockDevice {
    /// Seeded samples of a whole graph under a graph compiler
    /// (`compiler.rs`): dense fp32 graphs only.
    pub fn measure_graph(
        &self,
        combination: &Combination,
        graph: &dlas_zoo::Graph,
        compiler: GraphCompiler,
        runs: usize,
        seed: u64,
    ) -> Result<Vec<f64>, Unsupported> {
        if combination.compression != Compression::Dense {
            return Err(Unsupported(format!(
                "the graph-compiler model covers dense fp32 graphs; `{}` is {}",
                combination.compiler, combination.compression
            )));
        }
        let prediction = crate::compiler::predict(&self.spec, graph, compiler, combination.batch);
        Ok(self.samples(prediction.total_seconds() * 1e3, combination, runs, seed))
    }

    /// The predicted time with log-normal run-to-run noise of the device's
    /// documented coefficient of variation, seeded by the study seed, the
    /// device and the combination.
    fn samples(
        &self,
        total_ms: f64,
        combination: &Combination,
        runs: usize,
        seed: u64,
    ) -> Vec<f64> {
        let sigma = (1.0 + self.spec.noise_cv.powi(2)).ln().sqrt();
        let noise = LogNormal::new(0.0, sigma).expect("finite sigma");
        let mut rng = dlas_zoo::weights::stream(seed, &self.spec.id, &combination.id());
        (0..runs)
            .map(|_| total_ms * noise.sample(&mut rng))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        use crate::efficiency::balanced_cores;
        assert_eq!(balanced_cores(6, 4), 3.0);
        assert_eq!(balanced_cores(64, 6), 64.0 / 11.0);
        assert_eq!(lane_fill(10, 8), 10.0 / 16.0);
        assert_eq!(lane_fill(16, 8), 1.0);
    }
}
