//! Calibration records: one kernel of the native engine timed on one layer
//! shape by `dlas devices calibrate`.
//!
//! The device model's efficiency curves are fitted to these records and to
//! nothing else. The shapes come from a seeded grid, not from the zoo's
//! networks, and no network timing is ever a record, so every network
//! measured on the same machine validates the model out of sample.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// The kernel a layer runs, as far as the device model tells kernels apart:
/// the study's four algorithms, and the stencil every algorithm uses for
/// depthwise layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelFamily {
    Direct,
    Gemm,
    SpatialPack,
    Depthwise,
    /// Winograd F(4x4, 3x3) or F(2x2, 3x3): 3x3 stride-1 ungrouped dense
    /// fp32 layers of 8 or more input channels and 16 or more output tiles
    /// only (see [`winograd_tile`]).
    Winograd,
}

/// The stored data type of weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    F16,
    I8,
}

/// A family of kernels whose efficiency the model describes by one curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelClass {
    pub family: KernelFamily,
    /// Weights stored sparse (CSR): the kernel skips zero weights.
    pub sparse: bool,
    pub precision: Precision,
    /// Run with the best schedule found by a search rather than the default.
    pub tuned: bool,
}

impl fmt::Display for KernelClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let family = match self.family {
            KernelFamily::Direct => "direct",
            KernelFamily::Gemm => "gemm",
            KernelFamily::SpatialPack => "spatial-pack",
            KernelFamily::Depthwise => "depthwise",
            KernelFamily::Winograd => "winograd",
        };
        let precision = match self.precision {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::I8 => "i8",
        };
        let format = if self.sparse { "csr" } else { "dense" };
        let tuned = if self.tuned { "tuned" } else { "untuned" };
        write!(f, "{family} {format} {precision} {tuned}")
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
}

impl LayerTiming {
    pub fn class(&self) -> KernelClass {
        KernelClass {
            family: self.family,
            sparse: self.sparse,
            precision: self.precision,
            tuned: self.tuned,
        }
    }

    /// Multiply-accumulates of the dense layer: those the kernel does, so
    /// Winograd's are its point-wise products (see [`WinogradTile::macs`]).
    pub fn macs(&self) -> f64 {
        if self.family == KernelFamily::Winograd {
            let map = [self.out_hw; 2];
            let tile = WinogradTile::for_map(map).unwrap_or(WinogradTile::F4x4);
            return tile.macs(self.in_channels, self.out_channels, map);
        }
        let per_output = (self.in_channels / self.groups) * self.kernel * self.kernel;
        (self.out_channels * self.out_hw * self.out_hw * per_output) as f64
    }
}

/// The output tile a Winograd layer computes: F(4x4, 3x3) transforms 6x6
/// input tiles (36 products per tile and channel pair, against the direct
/// sum's 144), F(2x2, 3x3) 4x4 ones (16 against 36). The larger tile does
/// fewer multiplications per pixel, the smaller has 4x as many tiles on a
/// map, so the products' GEMMs have enough columns on small maps, and
/// transformed weights half the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WinogradTile {
    F4x4,
    F2x2,
}

impl WinogradTile {
    /// Output pixels along a tile's side.
    pub fn side(self) -> usize {
        match self {
            WinogradTile::F4x4 => 4,
            WinogradTile::F2x2 => 2,
        }
    }

    /// Point-wise products per tile and channel pair, (side + 2)².
    pub fn points(self) -> usize {
        (self.side() + 2).pow(2)
    }

    /// Output tiles on an `out_hw` map, partial tiles at the edges counting
    /// whole.
    pub fn tiles(self, out_hw: [usize; 2]) -> usize {
        out_hw[0].div_ceil(self.side()) * out_hw[1].div_ceil(self.side())
    }

    /// The multiplications the layer does: its products, one per point,
    /// output tile and pair of input and output channels (a 2x2 map is one
    /// F(4x4) tile, 36 against the direct sum's 36).
    pub fn macs(self, in_channels: usize, out_channels: usize, out_hw: [usize; 2]) -> f64 {
        (self.tiles(out_hw) * self.points() * in_channels * out_channels) as f64
    }

    /// The tile a Winograd configuration computes an `out_hw` map with:
    /// F(4x4, 3x3) with [`WINOGRAD_MIN_TILES`] tiles or more, else F(2x2,
    /// 3x3) with as many of its tiles, else none (the GEMM).
    pub fn for_map(out_hw: [usize; 2]) -> Option<WinogradTile> {
        [WinogradTile::F4x4, WinogradTile::F2x2]
            .into_iter()
            .find(|t| t.tiles(out_hw) >= WINOGRAD_MIN_TILES)
    }
}

/// Output tiles below which a Winograd configuration of the engine does
/// not compute a 3x3 stride-1 layer with a tile size. The products read the
/// transformed weights (points x out x in values: 4x the layer's for
/// F(4x4), 16/9 for F(2x2)) once per pass, and a pass's GEMMs have one
/// column per tile: with the 4 F(4x4) tiles of an 8x8 or 7x7 map, or the
/// one of a 4x4 map, they do about one FMA per value loaded and the layer
/// is bound by memory. Measured on the project's Xeon (AVX-512, 2
/// threads, `bench_engine -- 11 layers` and single layers): F(4x4) took
/// 1.1-1.9x less time than the untuned GEMM on 32x32, 28x28, 16x16 and
/// 14x14 maps (64-256 channels), as long on 512 channels at 7x7, and
/// 1.1-1.5x longer at 8x8 (256 channels) and 1.8-2x longer at 4x4 (512). A
/// 16x16 or 14x14 map has 16 F(4x4) tiles, an 8x8 or 7x7 map 16 F(2x2)
/// ones.
pub const WINOGRAD_MIN_TILES: usize = 16;

/// Input channels below which a Winograd configuration runs a 3x3
/// stride-1 layer as the GEMM: the products reduce over one value per
/// input channel, while the transforms cost the same per channel whatever
/// the products save. A CIFAR-10 stem (3 -> 64 on 32x32) took 90-103 µs
/// as Winograd and 39 µs as the GEMM inside ResNet-18 (per-step times of
/// 200 runs, same machine, 5 December 2026), and the network ran 2.6%
/// faster without it (faster in 4 of 6 alternations). 8 is the fewest the
/// calibration's Winograd grid draws.
pub const WINOGRAD_MIN_CHANNELS: usize = 8;

/// The tile a Winograd configuration computes a convolution with, given
/// its kernel, stride, groups, input channels and output size: a 3x3,
/// stride-1, one-group layer of at least [`WINOGRAD_MIN_CHANNELS`] input
/// channels whose map has tiles enough ([`WinogradTile::for_map`]). Every
/// other layer of such a configuration (`None`) runs the kernel the gemm
/// would. The engine and the device model both decide with this.
pub fn winograd_tile(
    kernel: usize,
    stride: usize,
    groups: usize,
    in_channels: usize,
    out_hw: [usize; 2],
) -> Option<WinogradTile> {
    let computes = kernel == 3 && stride == 1 && groups == 1;
    if !computes || in_channels < WINOGRAD_MIN_CHANNELS {
        return None;
    }
    WinogradTile::for_map(out_hw)
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
        assert_eq!(rows[0].class().to_string(), "spatial-pack csr f32 untuned");

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
