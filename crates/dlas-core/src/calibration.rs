//! Calibration records: one kernel of the native engine timed on one layer
//! shape by `dlas devices calibrate`.
//!
//! The device model's efficiency curves are fitted to these records and to
//! nothing else. The shapes come from a seeded grid, not from the zoo's
//! networks, and no network timing is ever a record, so every network
//! measured on the same machine validates the model out of sample.

use crate::axes::Layout;
use crate::kernel::ConvShape;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

pub use crate::kernel::{
    Cpu, KernelClass, KernelFamily, Precision, WINOGRAD_MIN_CHANNELS, WINOGRAD_MIN_TILES,
    WinogradTile, winograd_tile,
};

/// What one efficiency curve of the device model describes: a kernel
/// class ([`crate::kernel::kernel_class`]), run with its default schedule
/// or with the best one a search found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CurveClass {
    pub kernel: KernelClass,
    pub tuned: bool,
}

impl fmt::Display for CurveClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tuned = if self.tuned { "tuned" } else { "untuned" };
        write!(f, "{} {tuned}", self.kernel)
    }
}

/// One layer shape timed with one kernel class on the calibrated machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerTiming {
    pub family: KernelFamily,
    pub sparse: bool,
    pub precision: Precision,
    pub tuned: bool,
    pub in_channels: usize,
    pub out_channels: usize,
    pub groups: usize,
    pub kernel: usize,
    pub stride: usize,
    /// Input height and width (square).
    pub in_hw: usize,
    /// Output height and width (square).
    pub out_hw: usize,
    /// Fraction of the weights that are non-zero.
    pub density: f64,
    pub threads: usize,
    /// Timed with the caches flushed before every run (calibrations before
    /// December 2026; the device model leaves such timings out), as a layer of a
    /// network whose weights exceed the last-level cache finds them.
    pub cold: bool,
    pub runs: usize,
    /// Median time of one run of the layer, microseconds.
    pub median_us: f64,
    /// The layout the layer ran in; empty in calibrations before issue 42,
    /// which ran NCHW only (and named the fp16 GEMM's depthwise kernel
    /// `depthwise`).
    #[serde(default)]
    pub layout: Option<Layout>,
    /// Whether the int8 GEMM ran with VNNI; empty before issue 42, when it
    /// did wherever the calibrated machine had it.
    #[serde(default)]
    pub vnni: Option<bool>,
}

impl LayerTiming {
    /// The curve this timing belongs to, on a calibrated machine offering
    /// `cpu` (what a timing of before issue 42 does not record itself).
    pub fn class(&self, cpu: Cpu) -> CurveClass {
        let legacy = self.layout.is_none();
        let family = match (self.family, self.precision) {
            (KernelFamily::Depthwise, Precision::F16) if legacy => KernelFamily::DepthwiseGemm,
            (family, _) => family,
        };
        let int8_gemm = family == KernelFamily::Gemm && self.precision == Precision::I8;
        CurveClass {
            kernel: KernelClass {
                family,
                sparse: self.sparse,
                precision: self.precision,
                layout: self.layout.unwrap_or(Layout::Nchw),
                vnni: self.vnni.unwrap_or(int8_gemm && cpu.vnni),
                tile: (family == KernelFamily::Winograd).then(|| self.tile()),
            },
            tuned: self.tuned,
        }
    }

    /// The layer's shape (the grid pads by half the kernel).
    pub fn shape(&self) -> ConvShape {
        ConvShape::new(
            self.in_channels,
            self.out_channels,
            self.kernel,
            self.stride,
            self.kernel / 2,
            self.groups,
            self.in_hw,
            self.in_hw,
        )
    }

    /// The Winograd tile of a Winograd timing's map.
    fn tile(&self) -> WinogradTile {
        WinogradTile::for_map([self.out_hw; 2]).unwrap_or(WinogradTile::F4x4)
    }

    /// Multiply-accumulates of the dense layer: those the kernel does, so
    /// Winograd's are its point-wise products (see [`WinogradTile::macs`]).
    pub fn macs(&self) -> f64 {
        if self.family == KernelFamily::Winograd {
            let map = [self.out_hw; 2];
            return self.tile().macs(self.in_channels, self.out_channels, map);
        }
        let per_output = (self.in_channels / self.groups) * self.kernel * self.kernel;
        (self.out_channels * self.out_hw * self.out_hw * per_output) as f64
    }
}

/// One arithmetic peak: an instruction set's kernel on a number of threads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peak {
    pub isa: String,
    pub threads: usize,
    /// Multiply-accumulates per second, in billions.
    pub gmacs: f64,
}

/// One data or unified cache of the first CPU, as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    pub level: u32,
    pub kib: usize,
    /// CPUs sharing it (1 for a private cache).
    pub shared_by: usize,
}

/// A STREAM triad's working set and the bandwidth it sustained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    /// "L1", "L2", "L3" or "DRAM".
    pub level: String,
    /// Bytes of the three arrays together, over all threads.
    pub bytes: usize,
    pub gbs: f64,
}

/// The machine-level micro-benchmarks of a calibration, kept in the
/// measured device specification beside the figures derived from them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub threads: usize,
    /// fp32 FMA peaks of every instruction set on 1..=threads threads.
    pub fma: Vec<Peak>,
    /// The int8 multiply-accumulate peak on 1..=threads threads.
    pub int8: Vec<Peak>,
    pub fma_latency_ns: f64,
    pub caches: Vec<Cache>,
    pub bandwidth: Vec<Bandwidth>,
    /// Fork and join of one parallel region of the pool, microseconds.
    pub region_us: f64,
    /// The engine's cost per layer beyond the layer's arithmetic, microseconds.
    pub layer_us: f64,
    /// The engine's fixed cost per run (input and output handling), microseconds.
    pub run_us: f64,
    /// The engine's cost per value of moving a network's input in and its
    /// output out in each precision (copies, and conversions to and from
    /// fp16 or int8), nanoseconds.
    pub conversions: Vec<Conversion>,
}

/// What one value of a network's input or output costs the engine in one
/// precision, beyond the layers' work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversion {
    pub precision: Precision,
    pub ns_per_value: f64,
}

impl Machine {
    /// What converting one value into and out of `precision` costs beyond
    /// an fp32 pass over it, seconds (0 for fp32, or if not measured). A
    /// one-layer run of an int8 or fp16 layer pays it on its input and
    /// output, a network once on its own input and output; the pass itself
    /// is part of every layer's work in every precision.
    pub fn conversion_seconds(&self, precision: Precision) -> f64 {
        let cost = |p: Precision| {
            self.conversions
                .iter()
                .find(|c| c.precision == p)
                .map(|c| c.ns_per_value * 1e-9)
        };
        match (cost(precision), cost(Precision::F32)) {
            (Some(p), Some(f32)) => (p - f32).max(0.0),
            _ => 0.0,
        }
    }
}

/// Reads a calibration's layer timings, with the file and line of any bad row.
pub fn read_layer_timings(path: &Path) -> Result<Vec<LayerTiming>> {
    let mut reader = csv::Reader::from_path(path)
        .with_context(|| format!("cannot read layer timings {}", path.display()))?;
    let mut rows = Vec::new();
    for (i, row) in reader.deserialize::<LayerTiming>().enumerate() {
        let line = i + 2;
        let row = row.map_err(|e| anyhow::anyhow!("{}:{line}: {e}", path.display()))?;
        if !(row.median_us.is_finite() && row.median_us > 0.0) {
            bail!(
                "{}:{line}: `median_us` is {}; it must be a positive time",
                path.display(),
                row.median_us
            );
        }
        if !(row.density > 0.0 && row.density <= 1.0) || row.groups == 0 || row.threads == 0 {
            bail!(
                "{}:{line}: `density` must be in (0, 1] and `groups` and `threads` at least 1",
                path.display()
            );
        }
        rows.push(row);
    }
    if rows.is_empty() {
        bail!("{}: no layer timings", path.display());
    }
    Ok(rows)
}

/// The CSV text of `rows` (written atomically by the caller).
pub fn layer_timings_csv(rows: &[LayerTiming]) -> Result<Vec<u8>> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    for row in rows {
        writer.serialize(row)?;
    }
    Ok(writer.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> LayerTiming {
        LayerTiming {
            family: KernelFamily::SpatialPack,
            sparse: true,
            precision: Precision::F32,
            tuned: false,
            in_channels: 16,
            out_channels: 32,
            groups: 1,
            kernel: 3,
            stride: 1,
            in_hw: 8,
            out_hw: 8,
            density: 0.5,
            threads: 2,
            cold: false,
            runs: 20,
            median_us: 12.5,
            layout: Some(Layout::Nchw),
            vnni: Some(false),
        }
    }

    #[test]
    fn round_trip_and_errors_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("layers.csv");
        let rows = vec![
            timing(),
            LayerTiming {
                median_us: 3.0,
                ..timing()
            },
        ];
        std::fs::write(&path, layer_timings_csv(&rows).unwrap()).unwrap();
        assert_eq!(read_layer_timings(&path).unwrap(), rows);
        assert_eq!(rows[0].macs(), (32 * 64 * 16 * 9) as f64);
        assert_eq!(
            rows[0].class(Cpu::default()).to_string(),
            "spatial-pack csr f32 untuned"
        );
        // A calibration of before issue 42 (no layout or VNNI columns)
        // reads as NCHW, its fp16 depthwise timings as the fp16 GEMM's
        // depthwise kernel, its int8 GEMM as VNNI where the machine had it.
        let legacy = "family,sparse,precision,tuned,in_channels,out_channels,groups,kernel,stride,in_hw,out_hw,density,threads,cold,runs,median_us\n\
            depthwise,false,f16,false,32,32,32,3,1,14,14,1.0,2,false,10,5.0\n\
            gemm,false,i8,false,32,64,1,1,1,14,14,1.0,2,false,10,5.0\n";
        std::fs::write(&path, legacy).unwrap();
        let old = read_layer_timings(&path).unwrap();
        let vnni = Cpu { vnni: true };
        assert_eq!(
            old[0].class(vnni).to_string(),
            "depthwise-gemm dense f16 untuned"
        );
        assert_eq!(old[1].class(vnni).to_string(), "gemm-vnni dense i8 untuned");
        assert_eq!(
            old[1].class(Cpu::default()).to_string(),
            "gemm dense i8 untuned"
        );

        let bad = vec![
            timing(),
            LayerTiming {
                median_us: -1.0,
                ..timing()
            },
        ];
        std::fs::write(&path, layer_timings_csv(&bad).unwrap()).unwrap();
        let error = read_layer_timings(&path).unwrap_err().to_string();
        assert!(
            error.contains("layers.csv:3") && error.contains("median_us"),
            "{error}"
        );
        std::fs::write(&path, "family\n").unwrap();
        assert!(read_layer_timings(&path).is_err());
    }
}
