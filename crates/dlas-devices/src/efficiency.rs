//! Kernel efficiency curves: the share of a CPU's arithmetic peak that each
//! kernel class of the native engine reaches on a layer, as a function of
//! the layer's shape.
//!
//! The curves are fitted to the layer micro-benchmarks of
//! `dlas devices calibrate` (a seeded grid of single layers, see
//! `dlas_runner::calibrate::layers`) and to nothing else: the fit takes
//! [`LayerTiming`]s, a type no network measurement produces. Per class,
//! `ln(efficiency)` is linear in the logarithms of the output channels per
//! group, the output pixels, the reduction length and (sparse) the weight
//! density, fitted by least squares with a small ridge so that classes
//! whose grid varies a feature little stay well posed.
//!
//! Efficiency is measured against the calibrated machine's peak for the
//! cores the kernel keeps busy, so the structure carries to another CPU: a
//! mocked device's peak (its cores, lanes and clock) times the same
//! efficiency. What does not carry is anything the host's efficiency owes
//! to its own micro-architecture (cache sizes, vector width); docs/devices.md
//! says so.

use crate::spec::DeviceSpec;
use anyhow::{Result, bail};
use dlas_core::calibration::{KernelClass, KernelFamily, LayerTiming, Precision};
use std::collections::BTreeMap;

/// What a curve needs to know of a layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Features {
    pub out_channels_per_group: f64,
    /// Output pixels times batch.
    pub out_pixels: f64,
    pub in_channels_per_group: f64,
    /// Kernel height x width: reuse of an input across taps, which 1x1 and
    /// 3x3 layers of the same reduction length do not share.
    pub kernel_area: f64,
    pub density: f64,
    /// The layer finds its weights out of cache: the network's weights
    /// exceed the last-level cache (timed with the caches flushed).
    pub cold: bool,
}

/// Coefficients of a curve: intercept, one per feature, and squares of
/// the three dimensions of the product (a kernel's efficiency rises with a
/// dimension and then saturates, or falls once the operands leave a cache:
/// curvature that one slope cannot follow).
const K: usize = 10;

impl Features {
    fn vector(&self) -> [f64; K] {
        let m = self.out_channels_per_group.max(1.0).ln();
        let n = self.out_pixels.max(1.0).ln();
        let c = self.in_channels_per_group.max(1.0).ln();
        [
            1.0,
            m,
            n,
            c,
            self.kernel_area.max(1.0).ln(),
            self.density.clamp(1e-3, 1.0).ln(),
            if self.cold { 1.0 } else { 0.0 },
            m * m,
            n * n,
            c * c,
        ]
    }
}

/// One class's fitted curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub beta: [f64; K],
    /// Layers it was fitted to.
    pub n: usize,
    /// Root mean square of the fit's residuals in `ln(efficiency)`.
    pub rms_log: f64,
    /// Median absolute residual: the in-sample error, in the units of the
    /// validation's median `|ln(predicted / measured)|`.
    pub median_abs_log: f64,
}

impl Curve {
    fn efficiency(&self, f: &Features) -> f64 {
        let x = f.vector();
        let ln: f64 = self.beta.iter().zip(x).map(|(b, x)| b * x).sum();
        ln.exp().clamp(1e-4, 1.0)
    }
}

/// The fitted curves of every class the calibration timed.
#[derive(Debug, Clone, PartialEq)]
pub struct Efficiency {
    pub curves: BTreeMap<KernelClass, Curve>,
    /// The engine's fixed cost per run on the calibrated machine, seconds.
    pub run_seconds: f64,
}

/// Ridge on every coefficient but the intercept, in units of `ln` squared.
const RIDGE: f64 = 1e-3;

impl Efficiency {
    /// Fits one curve per class to `layers`, timed on `host` (whose peaks,
    /// per-layer cost and fixed per-run cost turn a time into an efficiency).
    pub fn fit(host: &DeviceSpec, layers: &[LayerTiming]) -> Result<Efficiency> {
        let measured = host.measured.as_ref();
        let run_seconds = measured.map_or(0.0, |m| m.run_us * 1e-6);
        let mut by_class: BTreeMap<KernelClass, Vec<([f64; K], f64)>> = BTreeMap::new();
        for t in layers {
            let f = features(t);
            let seconds = t.median_us * 1e-6;
            // What the layer's own work took: the one-layer engine's run
            // less its fixed cost and, int8 and fp16, the conversion of its
            // input and output (a network pays both once per run, not per
            // layer), never less than a tenth of the run.
            let values =
                (t.in_channels * t.in_hw * t.in_hw + t.out_channels * t.out_hw * t.out_hw) as f64;
            let conversion = measured.map_or(0.0, |m| m.conversion_seconds(t.precision)) * values;
            let work =
                (seconds - run_seconds - conversion - host.launch_us * 1e-6).max(0.1 * seconds);
            let peak = peak_macs(host, t.precision, parallel_items(t), t.threads);
            let effective = t.macs() * if t.sparse { t.density } else { 1.0 };
            let efficiency = effective / (work * peak);
            by_class
                .entry(t.class())
                .or_default()
                .push((f.vector(), efficiency.ln()));
        }
        let mut curves = BTreeMap::new();
        for (class, points) in by_class {
            if points.len() < 3 {
                bail!(
                    "the calibration has {} layer(s) of class {class}; a curve needs at least 3",
                    points.len()
                );
            }
            curves.insert(class, fit_curve(&points));
        }
        Ok(Efficiency {
            curves,
            run_seconds,
        })
    }

    /// The efficiency of `class` on a layer with features `f`. A class the
    /// calibration does not time borrows the nearest one it does: tuned
    /// fp16, int8 and depthwise kernels have no schedule search of their
    /// own in the grid (int8 has no schedule at all), so they take their
    /// untuned curve.
    pub fn of(&self, class: KernelClass, f: &Features) -> Option<f64> {
        let untuned = self.curves.get(&KernelClass {
            tuned: false,
            ..class
        });
        let curve = self.curves.get(&class).or(untuned)?;
        // A search keeps the default schedule when nothing beats it, so a
        // tuned kernel is never less efficient than the untuned one.
        Some(match (class.tuned, untuned) {
            (true, Some(untuned)) => curve.efficiency(f).max(untuned.efficiency(f)),
            _ => curve.efficiency(f),
        })
    }
}

/// The features of a timed layer.
fn features(t: &LayerTiming) -> Features {
    Features {
        out_channels_per_group: (t.out_channels / t.groups) as f64,
        out_pixels: (t.out_hw * t.out_hw) as f64,
        in_channels_per_group: (t.in_channels / t.groups) as f64,
        kernel_area: (t.kernel * t.kernel) as f64,
        density: if t.sparse { t.density } else { 1.0 },
        cold: t.cold,
    }
}

/// Work items of a timed layer's outer parallel loop (output channels).
fn parallel_items(t: &LayerTiming) -> usize {
    t.out_channels
}

/// Multiply-accumulates per second of `spec` in `precision` when `items`
/// equal work items are shared among `threads` of its cores.
pub fn peak_macs(spec: &DeviceSpec, precision: Precision, items: usize, threads: usize) -> f64 {
    let cores = balanced_cores(items, threads.min(spec.cores).max(1));
    let rate = match precision {
        Precision::F32 => 1.0,
        Precision::F16 => spec.fp16_rate,
        Precision::I8 => spec.int8_rate,
    };
    cores * spec.fma_lanes as f64 * spec.clock_ghz * 1e9 * rate
}

/// Cores kept busy when `iterations` equal chunks are shared among `cores`.
pub(crate) fn balanced_cores(iterations: usize, cores: usize) -> f64 {
    if iterations == 0 {
        return 1.0;
    }
    let rounds = iterations.div_ceil(cores);
    iterations as f64 / rounds as f64
}

/// Least squares with a ridge on the slopes: solves
/// `(X'X + RIDGE I') beta = X'y` by Gaussian elimination.
fn fit_curve(points: &[([f64; K], f64)]) -> Curve {
    let mut a = [[0.0f64; K + 1]; K];
    for (x, y) in points {
        for i in 0..K {
            for j in 0..K {
                a[i][j] += x[i] * x[j];
            }
            a[i][K] += x[i] * y;
        }
    }
    for (i, row) in a.iter_mut().enumerate().skip(1) {
        row[i] += RIDGE * points.len() as f64;
    }
    for col in 0..K {
        let pivot = (col..K)
            .max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))
            .expect("rows");
        a.swap(col, pivot);
        let row = a[col];
        if row[col].abs() < 1e-12 {
            continue;
        }
        for (r, other) in a.iter_mut().enumerate() {
            if r != col {
                let factor = other[col] / row[col];
                for (x, y) in other.iter_mut().zip(row).skip(col) {
                    *x -= factor * y;
                }
            }
        }
    }
    let mut beta = [0.0; K];
    for (i, b) in beta.iter_mut().enumerate() {
        if a[i][i].abs() >= 1e-12 {
            *b = a[i][K] / a[i][i];
        }
    }
    let mut residuals: Vec<f64> = points
        .iter()
        .map(|(x, y)| {
            let fit: f64 = beta.iter().zip(x).map(|(b, x)| b * x).sum();
            (fit - y).abs()
        })
        .collect();
    let rms = (residuals.iter().map(|r| r * r).sum::<f64>() / points.len() as f64).sqrt();
    residuals.sort_by(f64::total_cmp);
    Curve {
        beta,
        n: points.len(),
        rms_log: rms,
        median_abs_log: residuals[residuals.len() / 2],
    }
}

/// The class of the engine's kernel for a convolution: depthwise layers
/// have one class per precision whatever the algorithm (fp32 runs the
/// stencil, int8 its depthwise kernel; fp16 runs the GEMM path's depthwise
/// kernel under GEMM and the stencil with f16 weights otherwise, both
/// described by the curve timed on the first), sparse fp32 depthwise layers
/// run direct CSR; every other layer runs the configured algorithm, in
/// every precision.
pub fn class_of(
    algorithm: KernelFamily,
    depthwise: bool,
    sparse: bool,
    precision: Precision,
    tuned: bool,
) -> KernelClass {
    let family = match (depthwise, sparse, precision) {
        (true, false, _) => KernelFamily::Depthwise,
        (true, true, Precision::F32) => KernelFamily::Direct,
        _ => algorithm,
    };
    KernelClass {
        family,
        sparse,
        precision,
        tuned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_a_planted_curve() {
        let beta = [-1.0, 0.2, 0.1, 0.3, -0.2, 0.5, -0.4, -0.02, 0.01, -0.03];
        let points: Vec<([f64; K], f64)> = (0..60)
            .map(|i| {
                let i = i as f64;
                let x = [
                    1.0,
                    (i % 7.0).ln_1p(),
                    (i % 5.0).ln_1p(),
                    (i % 3.0).ln_1p(),
                    (i % 11.0).ln_1p(),
                    -(i % 4.0) / 4.0,
                    i % 2.0,
                    (i % 7.0).ln_1p().powi(2),
                    (i % 5.0).ln_1p().powi(2),
                    (i % 3.0).ln_1p().powi(2),
                ];
                let y = beta.iter().zip(x).map(|(b, x)| b * x).sum();
                (x, y)
            })
            .collect();
        let curve = fit_curve(&points);
        for (fitted, planted) in curve.beta.iter().zip(beta) {
            assert!((fitted - planted).abs() < 0.05, "{:?}", curve.beta);
        }
        assert!(curve.rms_log < 0.05);
    }

    #[test]
    fn depthwise_layers_take_the_kernel_the_engine_runs() {
        let c = class_of(KernelFamily::Gemm, true, true, Precision::F32, false);
        assert_eq!(c.family, KernelFamily::Direct);
        let c = class_of(KernelFamily::SpatialPack, true, false, Precision::F32, true);
        assert_eq!(c.family, KernelFamily::Depthwise);
        let c = class_of(KernelFamily::SpatialPack, false, true, Precision::F32, true);
        assert_eq!(c.family, KernelFamily::SpatialPack);
    }
}
