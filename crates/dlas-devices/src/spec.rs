//! Device specifications: public figures of a platform, read from TOML.

use crate::efficiency::Efficiency;
use anyhow::{Context, Result, bail};
use dlas_core::calibration::Machine;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// Where a specification's figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Vendor documentation, cited in `sources`: a mocked device.
    #[default]
    Specification,
    /// `dlas devices calibrate` on the machine itself.
    Measured,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

/// A platform as its vendor documents it, or as `dlas devices calibrate`
/// measured it. Every figure is a public specification or a
/// micro-benchmark (see `sources`); none is fitted to a network's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    pub id: String,
    pub name: String,
    pub kind: DeviceKind,
    /// CPU cores used (one thread each) or GPU shader cores / streaming multiprocessors.
    pub cores: usize,
    /// fp32 lanes per core per cycle that can issue a fused multiply-add
    /// (SIMD width x FMA pipes on a CPU; ALU lanes per core on a GPU).
    pub fma_lanes: usize,
    /// fp32 lanes per core per cycle of 256-bit (AVX2) FMAs, where the
    /// widest FMA is wider and not at the same rate per lane (two AVX-512
    /// units: half of `fma_lanes`). Absent: the widest FMA is no wider, or
    /// runs at the 256-bit rate (Zen 4). The engine's AVX2-only kernels
    /// run at this rate (`scaling.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fma_lanes_256: Option<usize>,
    /// fp32 FMA pipes per core: the throughput of independent scalar FMAs.
    pub fma_pipes: usize,
    /// Cycles from one FMA to a dependent one (a reduction's loop-carried chain).
    pub fma_latency: usize,
    pub clock_ghz: f64,
    /// DRAM bandwidth, GB/s.
    pub memory_gbs: f64,
    /// Last-level cache, KiB; working sets above it stream from DRAM.
    pub llc_kib: usize,
    /// Throughput of fp16 arithmetic relative to fp32 (1 where fp16 is
    /// computed as fp32 after conversion).
    pub fp16_rate: f64,
    /// Throughput of int8 multiply-accumulates relative to fp32.
    pub int8_rate: f64,
    /// Fixed cost of launching one kernel (GPU) or one parallel region (CPU), microseconds.
    pub launch_us: f64,
    /// Host-side cost of an eager framework issuing one operator (interpreter,
    /// dispatcher, allocator), microseconds: what a graph compiler removes
    /// beside the launch itself. Used only by the graph-compiler model
    /// (`compiler.rs`); order of magnitude, cited in `sources`.
    pub dispatch_us: f64,
    /// L1 loads per cycle per core; bounds kernels that load an operand per FMA
    /// (sparse kernels, which cannot keep outputs in registers).
    pub loads_per_cycle: usize,
    /// Run-to-run coefficient of variation of the noise added to samples.
    pub noise_cv: f64,
    /// Where each figure comes from.
    pub sources: Vec<String>,
    #[serde(default)]
    pub origin: Origin,
    /// The environment record of a measured specification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// The micro-benchmarks a measured specification's figures come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Machine>,
    /// The kernel efficiency curves of the calibrated machine, attached by
    /// [`load_specs`] to every CPU (see `efficiency.rs`).
    #[serde(skip)]
    pub efficiency: Option<Arc<Efficiency>>,
}

impl DeviceSpec {
    /// Peak fp32 rate in GFLOP/s (2 flops per FMA).
    pub fn peak_gflops(&self) -> f64 {
        2.0 * (self.cores * self.fma_lanes) as f64 * self.clock_ghz
    }

    fn check(&self, path: &Path) -> Result<()> {
        let positive = [
            ("cores", self.cores as f64),
            ("fma_lanes", self.fma_lanes as f64),
            ("fma_pipes", self.fma_pipes as f64),
            ("fma_latency", self.fma_latency as f64),
            ("clock_ghz", self.clock_ghz),
            ("memory_gbs", self.memory_gbs),
            ("llc_kib", self.llc_kib as f64),
            ("fp16_rate", self.fp16_rate),
            ("int8_rate", self.int8_rate),
            ("loads_per_cycle", self.loads_per_cycle as f64),
        ];
        for (field, value) in positive {
            if !(value > 0.0 && value.is_finite()) {
                bail!(
                    "{}: `{field}` is {value}; it must be a positive number",
                    path.display()
                );
            }
        }
        if !(0.0..0.5).contains(&self.noise_cv) || self.launch_us < 0.0 || self.dispatch_us < 0.0 {
            bail!(
                "{}: `noise_cv` must be in [0, 0.5) and `launch_us` and `dispatch_us` at least 0",
                path.display()
            );
        }
        if self.sources.is_empty() {
            bail!(
                "{}: `sources` must cite where the figures come from",
                path.display()
            );
        }
        Ok(())
    }
}

/// The calibrated machine's folder under the devices folder.
pub const MEASURED_DIR: &str = "measured";

/// The calibrated machine: `host.toml` (its measured specification) and
/// `host-layers.csv` (its layer micro-benchmarks), with the curves fitted.
pub fn load_calibrated(dir: &Path) -> Result<DeviceSpec> {
    let path = dir.join("host.toml");
    read_spec(&path).with_context(|| {
        format!(
            "the device model needs this machine's calibration ({}); `dlas devices calibrate` writes it",
            path.display()
        )
    })?;
    load_calibration(&path)
}

/// A calibration saved under any name: `host<suffix>.toml` and the layer
/// timings beside it, `host-layers<suffix>.csv` (an archived calibration,
/// e.g. `archive/host-intel-xeon.toml`), with the curves fitted.
pub fn load_calibration(path: &Path) -> Result<DeviceSpec> {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let Some(suffix) = stem.strip_prefix("host") else {
        bail!(
            "{}: a calibration is named host<suffix>.toml, its layer timings host-layers<suffix>.csv",
            path.display()
        );
    };
    let mut host = read_spec_named(path, false)?;
    if host.origin != Origin::Measured || host.measured.is_none() {
        bail!(
            "{}: a calibration must have `origin = \"measured\"` and its `[measured]` micro-benchmarks",
            path.display()
        );
    }
    let layers = path.with_file_name(format!("host-layers{suffix}.csv"));
    let layers = dlas_core::calibration::read_layer_timings(&layers)?;
    host.efficiency = Some(Arc::new(Efficiency::fit(&host, &layers)?));
    Ok(host)
}

fn read_spec(path: &Path) -> Result<DeviceSpec> {
    read_spec_named(path, true)
}

/// A specification file; `named`: it must be named after its id.
fn read_spec_named(path: &Path, named: bool) -> Result<DeviceSpec> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let spec: DeviceSpec = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
    spec.check(path)?;
    if named && path.file_stem().and_then(|s| s.to_str()) != Some(spec.id.as_str()) {
        bail!(
            "{}: the file must be named after its id (`{}.toml`)",
            path.display(),
            spec.id
        );
    }
    Ok(spec)
}

/// Every `*.toml` in `dir`, sorted by id.
pub(crate) fn read_specs(dir: &Path) -> Result<Vec<DeviceSpec>> {
    let mut specs = Vec::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read device folder {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let spec = read_spec(&path)?;
        specs.push(spec);
    }
    specs.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(specs)
}
