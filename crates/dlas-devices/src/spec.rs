//! Device specifications: public figures of a platform, read from TOML.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

/// A platform as its vendor documents it. Every figure is a public
/// specification (see `sources`); none is fitted to a result.
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

/// Reads every `*.toml` in `dir`, sorted by id.
pub fn load_specs(dir: &Path) -> Result<Vec<DeviceSpec>> {
    let mut specs = Vec::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read device folder {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let spec: DeviceSpec = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
        spec.check(&path)?;
        if path.file_stem().and_then(|s| s.to_str()) != Some(spec.id.as_str()) {
            bail!(
                "{}: the file must be named after its id (`{}.toml`)",
                path.display(),
                spec.id
            );
        }
        specs.push(spec);
    }
    specs.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(specs)
}
