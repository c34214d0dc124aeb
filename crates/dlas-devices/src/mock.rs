//! The mocked devices' performance model.
//!
//! Each kernel takes `max(compute, memory) + launch`:
//! - compute: MACs over the rate the schedule can reach on this device. An
//!   untuned schedule (thread parallelism only, as the study's minimal TVM
//!   schedules) runs scalar code; its reductions are a loop-carried chain, so
//!   direct and GEMM issue one FMA per FMA latency, while spatial pack's
//!   packed channel block gives independent FMAs. A tuned schedule
//!   vectorises, with the lanes it cannot fill lost, and parallelises every
//!   outer loop. Sparse kernels load an input and an output per FMA and are
//!   bound by load ports; untuned, they reduce over a row's non-zeros as a chain. On a GPU the rate is the fraction of lanes that the
//!   available threads can keep busy (Little's law: lanes x FMA latency threads).
//! - memory: bytes over DRAM bandwidth; compulsory traffic plus what the
//!   algorithm adds (GEMM's im2col buffer, spatial pack's packed input, CSR's
//!   indices) and, for untiled (untuned) loops whose operand exceeds the
//!   last-level cache, the re-reads the loop order implies.
//! - launch: the device's fixed cost per kernel or parallel region.
//!
//! Every input is a specification from `data/devices/*.toml` or a count
//! from the workload; no coefficient is fitted. `docs/devices.md` documents
//! the model and its (not yet measured) error.

use crate::compiler::GraphCompiler;
use crate::spec::{DeviceKind, DeviceSpec};
use crate::workload::{Kernel, KernelKind, Workload};
use crate::{Device, Unsupported};
use dlas_core::{Algorithm, Combination, Compression};
use rand_distr::{Distribution, LogNormal};

/// Bumped whenever the model's equations change; recorded in every result row.
pub const MODEL_VERSION: u32 = 1;

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
        let kernels = w
            .kernels
            .iter()
            .map(|k| (k.name.clone(), self.kernel_seconds(c, w, k)))
            .collect();
        Ok(Prediction { kernels })
    }

    fn kernel_seconds(&self, c: &Combination, w: &Workload, k: &Kernel) -> f64 {
        let s = &self.spec;
        let batch = w.batch as f64;
        let value_bytes = w.compression.value_bytes();
        let launch = s.launch_us * 1e-6;
        let dram = s.memory_gbs * 1e9;
        let io_bytes = (k.input_elems + k.output_elems) * batch * value_bytes;
        let out_channels = match &k.kind {
            KernelKind::Conv(conv) => conv.out_channels,
            KernelKind::Linear | KernelKind::MatMul => k.output_elems as usize,
            KernelKind::Memory => return io_bytes / dram + launch,
        };
        let sparse = c.format.is_sparse();
        let macs = k.macs * batch * if sparse { k.density } else { 1.0 };
        let weight_bytes = if sparse {
            // CSR: a value and a 4-byte column index per non-zero, a 4-byte pointer per row.
            k.weight_elems * k.density * (value_bytes + 4.0) + 4.0 * (out_channels + 1) as f64
        } else {
            k.weight_elems * value_bytes
        };
        let (extra_bytes, extra_launches) = self.algorithm_traffic(c, k, batch, value_bytes);
        let bytes = io_bytes + weight_bytes + extra_bytes;
        let rate = match s.kind {
            DeviceKind::Cpu => self.cpu_mac_rate(c, k, out_channels, w.batch),
            DeviceKind::Gpu => self.gpu_mac_rate(c, k, w.batch),
        } * dtype_rate(s, w.compression);
        let memory = match (s.kind, c.tuned) {
            // An untuned GPU kernel reads its operands through the caches per
            // MAC: each MAC fetches an input value (and an index when sparse).
            (DeviceKind::Gpu, false) => {
                bytes.max(macs * (value_bytes + if sparse { 4.0 } else { 0.0 }))
            }
            _ => bytes,
        };
        (macs / rate).max(memory / dram) + launch * (1.0 + extra_launches)
    }

    /// Bytes an algorithm moves beyond compulsory traffic, and extra kernels it launches.
    fn algorithm_traffic(&self, c: &Combination, k: &Kernel, batch: f64, vb: f64) -> (f64, f64) {
        let KernelKind::Conv(conv) = &k.kind else {
            return (0.0, 0.0);
        };
        let llc = (self.spec.llc_kib * 1024) as f64;
        let [oh, ow] = k.out_hw;
        let input_bytes = k.input_elems * batch * vb;
        let cores = self.spec.cores as f64;
        match c.algorithm {
            Algorithm::Gemm => {
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
            Algorithm::SpatialPack => (2.0 * input_bytes, 1.0),
            Algorithm::Direct => {
                let rereads = if !c.tuned && input_bytes > llc / 2.0 {
                    input_bytes * (conv.out_channels as f64 / cores - 1.0).max(0.0)
                } else {
                    0.0
                };
                (rereads, 0.0)
            }
            Algorithm::Auto => (0.0, 0.0),
        }
    }

    /// MACs per second a CPU schedule reaches on one kernel.
    fn cpu_mac_rate(&self, c: &Combination, k: &Kernel, out_channels: usize, batch: usize) -> f64 {
        let s = &self.spec;
        let simd = (s.fma_lanes / s.fma_pipes).max(1);
        // The untuned schedule parallelises the outermost loop (batch x output
        // channels); a tuned one fuses outer loops until every core has work.
        let iterations = if c.tuned {
            batch * out_channels * k.out_hw[0]
        } else {
            batch * out_channels
        };
        let cores = balanced_cores(iterations, s.cores);
        let [_, ow] = k.out_hw;
        let per_core_per_cycle = match (c.format.is_sparse(), c.tuned) {
            // Sparse: each FMA loads an input and the partial output it updates.
            (true, true) => {
                (s.loads_per_cycle as f64 / 2.0).min(s.fma_pipes as f64)
                    * simd as f64
                    * lane_fill(ow, simd)
            }
            // Untuned sparse code reduces over a row's non-zeros innermost: a
            // dependent chain, as for dense direct and GEMM.
            (true, false) => (s.loads_per_cycle as f64 / 2.0).min(1.0 / s.fma_latency as f64),
            (false, true) => {
                let vector_dim = match c.algorithm {
                    Algorithm::Direct => ow,
                    _ => out_channels,
                };
                s.fma_lanes as f64 * lane_fill(vector_dim, simd)
            }
            (false, false) => match c.algorithm {
                Algorithm::SpatialPack => s.fma_pipes as f64,
                _ => 1.0 / s.fma_latency as f64,
            },
        };
        cores * per_core_per_cycle * s.clock_ghz * 1e9
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

/// Throughput of the stored data type relative to fp32.
fn dtype_rate(spec: &DeviceSpec, compression: Compression) -> f64 {
    match compression {
        Compression::Fp16 => spec.fp16_rate,
        Compression::Int8 => spec.int8_rate,
        _ => 1.0,
    }
}

/// Cores kept busy when `iterations` equal chunks are shared among `cores`.
pub(crate) fn balanced_cores(iterations: usize, cores: usize) -> f64 {
    if iterations == 0 {
        return 1.0;
    }
    let rounds = iterations.div_ceil(cores);
    iterations as f64 / rounds as f64
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
        assert_eq!(balanced_cores(6, 4), 3.0);
        assert_eq!(balanced_cores(64, 6), 64.0 / 11.0);
        assert_eq!(lane_fill(10, 8), 10.0 / 16.0);
        assert_eq!(lane_fill(16, 8), 1.0);
    }
}
