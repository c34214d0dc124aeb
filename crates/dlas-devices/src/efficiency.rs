//! Kernel cost curves: what one layer of each kernel class of the native
//! engine costs on the calibrated machine, as a function of its shape.
//!
//! A layer of class `c` takes
//! `overhead_c + per_value_c x values + macs / (peak x efficiency_c(shape))`:
//! a fixed cost (scheduling, packing set-up), a cost per activation value
//! it reads and writes (im2col, packing, layout, the F16C and int8
//! conversions), and its multiply-accumulates at a share of the peak that
//! depends on the shape. `ln(efficiency)` is linear in the logarithms of
//! the output channels per group, the output pixels, the reduction length,
//! the kernel area and (sparse) the weight density, with the squares of the
//! first three (a kernel's efficiency rises with a dimension and then
//! saturates, or falls once the operands leave a cache).
//!
//! Version 2 of the model had the efficiency alone and subtracted fixed
//! costs from each timing before taking logarithms; on small layers the
//! difference of two large numbers swamped the fit (median in-sample error
//! `ln` 0.32 to 0.47 per class). Fitting the three terms together, in
//! `ln(time)` (`fit.rs`), halves it.
//!
//! The curves are fitted to the layer micro-benchmarks of
//! `dlas devices calibrate` (a seeded grid of single layers, see
//! `dlas_runner::calibrate::layers`) and to nothing else: the fit takes
//! [`LayerTiming`]s, a type no network measurement produces. Only the warm
//! timings enter: a layer timed after a flush of every cache pays 150 to
//! 250 µs of refill (page walks) whatever its size, which no network run
//! sees; a network whose weights exceed the last-level cache is bounded by
//! the model's DRAM term instead (`mock.rs`).
//!
//! The structure carries to another CPU: its peak (cores, lanes, clock)
//! times the same efficiency, the fixed cost scaled by the clocks and the
//! per-value cost by the memory bandwidths. What does not carry is what
//! the host's efficiency owes to its own micro-architecture (cache sizes,
//! vector width); docs/devices.md says so. The peak is that of the widest
//! FMA the calibration times, AVX-512 where the CPU has it, as the engine's
//! kernels use it.

use crate::fit::{levenberg_marquardt, solve};
use crate::spec::DeviceSpec;
use anyhow::{Result, bail};
use dlas_core::Layout;
use dlas_core::calibration::{
    Cpu, CurveClass, KernelClass, KernelFamily, LayerTiming, Precision, WinogradTile,
};
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
}

/// Coefficients of the efficiency: intercept, one per feature, and the
/// squares of the three dimensions of the product.
const K: usize = 9;

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
            m * m,
            n * n,
            c * c,
        ]
    }
}

/// Bounds of a fitted efficiency: a curve extrapolated far from its grid
/// must not predict a free or an endless layer, nor one faster than peak.
const MIN_EFFICIENCY: f64 = 1e-4;
const MAX_EFFICIENCY: f64 = 1.0;

/// One class's fitted curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub beta: [f64; K],
    /// Fixed cost of a layer beyond the engine's per-layer dispatch, seconds.
    pub overhead_s: f64,
    /// Cost per activation value read or written, seconds.
    pub per_value_s: f64,
    /// What the class pays to convert a run's input and output, as a
    /// multiple of the calibration's measured conversion cost (1 for fp32,
    /// whose conversion is a copy; fitted for fp16 and int8, see
    /// [`Efficiency::fit`]).
    pub conversion_scale: f64,
    /// Layers it was fitted to.
    pub n: usize,
    /// Root mean square of the fit's residuals in `ln(time)`.
    pub rms_log: f64,
    /// Median absolute residual in `ln(time)`: the in-sample error, in the
    /// units of the validation's median `|ln(predicted / measured)|`.
    pub median_abs_log: f64,
}

/// A layer as a curve prices it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layer {
    pub features: Features,
    /// Multiply-accumulates the kernel does.
    pub macs: f64,
    /// The device's multiply-accumulates per second for the cores it keeps busy.
    pub peak: f64,
    /// Activation values read and written.
    pub values: f64,
}

/// A layer's predicted cost: compute at the curve's efficiency, and the
/// fixed and per-value seconds on top of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub compute_s: f64,
    pub extra_s: f64,
}

impl Curve {
    fn efficiency(&self, f: &Features) -> f64 {
        self.efficiency_of(&f.vector())
    }

    fn efficiency_of(&self, x: &[f64; K]) -> f64 {
        let ln: f64 = self.beta.iter().zip(x).map(|(b, x)| b * x).sum();
        ln.exp().clamp(MIN_EFFICIENCY, MAX_EFFICIENCY)
    }

    /// The cost of `layer` on a device whose clock and memory are
    /// `clock_ratio` and `memory_ratio` times the calibrated machine's.
    fn cost(&self, layer: &Layer, clock_ratio: f64, memory_ratio: f64) -> Cost {
        Cost {
            compute_s: layer.macs / (layer.peak * self.efficiency(&layer.features)),
            extra_s: self.overhead_s / clock_ratio + self.per_value_s * layer.values / memory_ratio,
        }
    }
}

/// The fitted curves of every class the calibration timed.
#[derive(Debug, Clone, PartialEq)]
pub struct Efficiency {
    pub curves: BTreeMap<CurveClass, Curve>,
    /// What the calibrated machine's CPU offers the kernel decision (VNNI,
    /// from its measured int8 peaks): the classes the model asks for are
    /// those the engine ran there, whose curves these are.
    pub cpu: Cpu,
    /// The engine's fixed cost per run on the calibrated machine, seconds.
    pub run_seconds: f64,
    /// The calibrated machine's clock (GHz) and DRAM bandwidth (GB/s),
    /// against which another device's are scaled.
    pub clock_ghz: f64,
    pub memory_gbs: f64,
    /// Cold (cache-flushed) timings left out of the fit.
    pub cold_left_out: usize,
}

/// Ridge on every slope, in units of `ln` squared per layer.
const RIDGE: f64 = 1e-3;

/// A timed layer as the fit sees it.
struct Point {
    x: [f64; K],
    /// Seconds at efficiency 1.
    ideal_s: f64,
    values: f64,
    /// What the one-layer run costs besides the layer: the engine's fixed
    /// cost per run and per layer, and (apart, since fp16 and int8 scale
    /// it) the measured conversion of its input and output, which a
    /// network pays once, not per layer.
    fixed_s: f64,
    conversion_s: f64,
    seconds: f64,
}

impl Efficiency {
    /// Fits one curve per class to the warm timings of `layers`, timed on
    /// `host` (whose peaks, per-layer cost, fixed per-run cost and
    /// conversion costs are the known parts of a timing).
    pub fn fit(host: &DeviceSpec, layers: &[LayerTiming]) -> Result<Efficiency> {
        let measured = host.measured.as_ref();
        let run_seconds = measured.map_or(0.0, |m| m.run_us * 1e-6);
        let cpu = Cpu {
            vnni: measured.is_some_and(|m| m.int8.iter().any(|p| p.isa.contains("vnni"))),
        };
        let mut by_class: BTreeMap<CurveClass, Vec<Point>> = BTreeMap::new();
        let mut cold_left_out = 0;
        for t in layers {
            if t.cold {
                cold_left_out += 1;
                continue;
            }
            let values =
                (t.in_channels * t.in_hw * t.in_hw + t.out_channels * t.out_hw * t.out_hw) as f64;
            let conversion = measured.map_or(0.0, |m| m.conversion_seconds(t.precision)) * values;
            let peak = peak_macs(host, t.precision, parallel_items(t), t.threads);
            let effective = t.macs() * if t.sparse { t.density } else { 1.0 };
            by_class.entry(t.class(cpu)).or_default().push(Point {
                x: features(t).vector(),
                ideal_s: effective / peak,
                values,
                fixed_s: run_seconds + host.launch_us * 1e-6,
                conversion_s: conversion,
                seconds: t.median_us * 1e-6,
            });
        }
        for (class, points) in &by_class {
            if points.len() < 3 * K {
                bail!(
                    "the calibration has {} warm layer(s) of class {class}; a curve needs at least {}",
                    points.len(),
                    3 * K
                );
            }
        }
        // fp32 classes first: an fp16 or int8 kernel moves the same
        // activations as its family's fp32 kernel (f32 between layers, or
        // u8 through the same packing), so it takes that class's cost per
        // value; what its single-layer timings add per value is the
        // conversion of the run's input and output, which a network pays
        // once. A single layer cannot tell the two apart, so this split
        // is an assumption, and the reason the conversion is scaled
        // rather than the per-value cost fitted again.
        let mut curves: BTreeMap<CurveClass, Curve> = BTreeMap::new();
        for (class, points) in by_class
            .iter()
            .filter(|(c, _)| c.kernel.precision == Precision::F32)
        {
            curves.insert(*class, fit_curve(points, Free::PerValue));
        }
        for (class, points) in by_class
            .iter()
            .filter(|(c, _)| c.kernel.precision != Precision::F32)
        {
            let f32_kernel = KernelClass {
                precision: Precision::F32,
                vnni: false,
                ..class.kernel
            };
            // The fp16 GEMM's depthwise products have no fp32 timing of
            // their own: they move what the fp32 stencil moves.
            let per_value_s = stand_ins(f32_kernel).into_iter().find_map(|kernel| {
                let f32_class = CurveClass { kernel, ..*class };
                curves.get(&f32_class).map(|c| c.per_value_s)
            });
            let Some(per_value_s) = per_value_s else {
                bail!(
                    "the calibration times {class} but not {f32_kernel} (or a stand-in for it), whose cost per value it takes"
                );
            };
            curves.insert(
                *class,
                fit_curve(points, Free::ConversionScale { per_value_s }),
            );
        }
        Ok(Efficiency {
            curves,
            cpu,
            run_seconds,
            clock_ghz: host.clock_ghz,
            memory_gbs: host.memory_gbs,
            cold_left_out,
        })
    }

    /// The curves a layer of `class` is priced with: `class`'s own, or
    /// those of the nearest class the calibration times ([`stand_ins`]),
    /// tuned and untuned (`None` when tuning has no curve of its own).
    fn curves_of(&self, class: CurveClass) -> Option<(&Curve, Option<&Curve>)> {
        stand_ins(class.kernel).into_iter().find_map(|kernel| {
            let untuned = self.curves.get(&CurveClass {
                kernel,
                tuned: false,
            });
            let own = self.curves.get(&CurveClass { kernel, ..class });
            own.or(untuned).map(|c| (c, untuned))
        })
    }

    /// The cost of a layer of `class` on `device`. A class the calibration
    /// does not time borrows the nearest one it does ([`stand_ins`]); tuned
    /// fp16, int8 and depthwise kernels have no schedule search of their
    /// own in the grid (int8 has no schedule at all), so they take their
    /// untuned curve.
    pub fn cost(&self, class: CurveClass, layer: &Layer, device: &DeviceSpec) -> Option<Cost> {
        let (curve, untuned) = self.curves_of(class)?;
        let (clock, memory) = (
            device.clock_ghz / self.clock_ghz,
            device.memory_gbs / self.memory_gbs,
        );
        let cost = curve.cost(layer, clock, memory);
        // A search keeps the default schedule when nothing beats it, so a
        // tuned kernel is never slower than the untuned one.
        Some(match (class.tuned, untuned) {
            (true, Some(untuned)) => {
                let other = untuned.cost(layer, clock, memory);
                if other.compute_s + other.extra_s < cost.compute_s + cost.extra_s {
                    other
                } else {
                    cost
                }
            }
            _ => cost,
        })
    }

    /// The scale of the measured conversion cost for a network whose
    /// regular layers run `class` (see [`Curve::conversion_scale`]).
    pub fn conversion_scale(&self, class: CurveClass) -> f64 {
        self.curves_of(class)
            .map_or(1.0, |(c, _)| c.conversion_scale)
    }

    /// Whether the calibration has a curve for `class`, its own or a
    /// stand-in's.
    pub fn has(&self, class: CurveClass) -> bool {
        self.curves_of(class).is_some()
    }
}

/// `kernel` and the classes that stand in for it, nearest first, where the
/// calibration has not timed it: the same kernel in NCHW for another
/// layout (the layout changes how activations are addressed; until a
/// calibration times the blocked and NHWC kernels, the NCHW curve prices
/// them; the blocked direct kernel, a register tile of FMAs on operands
/// read in place, the GEMM's), F(4x4, 3x3)'s curve for F(2x2, 3x3) at its own products (the
/// grid draws F(4x4) maps only), and the fp32 stencil for the fp16 one
/// (it computes in fp32, widening f16 weights per channel).
pub fn stand_ins(kernel: KernelClass) -> Vec<KernelClass> {
    let mut out = vec![kernel];
    let mut next = kernel;
    if next.layout != Layout::Nchw {
        // The blocked direct kernel is register-tiled FMAs on operands
        // read in place, as the GEMM is, not the sliding window.
        if next.layout == Layout::Nchw16c && next.family == KernelFamily::Direct {
            next.family = KernelFamily::Gemm;
        }
        next.layout = Layout::Nchw;
        out.push(next);
    }
    if next.tile == Some(WinogradTile::F2x2) {
        next.tile = Some(WinogradTile::F4x4);
        out.push(next);
    }
    if next.family == KernelFamily::Depthwise && next.precision == Precision::F16 {
        next.precision = Precision::F32;
        out.push(next);
    }
    if next.family == KernelFamily::DepthwiseGemm && next.precision == Precision::F32 {
        next.family = KernelFamily::Depthwise;
        out.push(next);
    }
    out
}

/// The features of a timed layer.
fn features(t: &LayerTiming) -> Features {
    Features {
        out_channels_per_group: (t.out_channels / t.groups) as f64,
        out_pixels: (t.out_hw * t.out_hw) as f64,
        in_channels_per_group: (t.in_channels / t.groups) as f64,
        kernel_area: (t.kernel * t.kernel) as f64,
        density: if t.sparse { t.density } else { 1.0 },
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

/// The second free parameter of a class's fit besides overhead and
/// efficiency.
#[derive(Clone, Copy)]
enum Free {
    /// The cost per value (fp32; conversion as measured).
    PerValue,
    /// The conversion's scale, at this cost per value (fp16, int8).
    ConversionScale { per_value_s: f64 },
}

/// Fits a class's curve: a ridge regression of `ln(efficiency)` on the
/// timings less their known costs gives the start, then
/// Levenberg-Marquardt fits overhead, the `free` parameter and efficiency
/// together in `ln(time)`. Overhead, cost per value and conversion scale
/// are fitted as logarithms (so never negative), from 1 µs, 0.1 ns and 1.
fn fit_curve(points: &[Point], free: Free) -> Curve {
    let start = start_beta(points);
    let ridge = (RIDGE * points.len() as f64).sqrt();
    let (lo, hi) = (MIN_EFFICIENCY.ln(), MAX_EFFICIENCY.ln());
    // (cost per value, conversion scale) at the free parameter's log.
    let split = |q: f64| match free {
        Free::PerValue => (q.exp(), 1.0),
        Free::ConversionScale { per_value_s } => (per_value_s, q.exp()),
    };
    let model = |p: &[f64]| {
        let overhead = p[0].exp();
        let (per_value, scale) = split(p[1]);
        let beta = &p[2..];
        let mut r = Vec::with_capacity(points.len() + K - 1);
        let mut jac = Vec::with_capacity(points.len() + K - 1);
        for pt in points {
            let ln: f64 = beta.iter().zip(pt.x).map(|(b, x)| b * x).sum();
            let clamped = ln.clamp(lo, hi);
            let compute = pt.ideal_s / clamped.exp();
            let (per_value_s, conversion_s) = (per_value * pt.values, scale * pt.conversion_s);
            let pred = pt.fixed_s + overhead + conversion_s + per_value_s + compute;
            r.push(pred.ln() - pt.seconds.ln());
            let free_term = match free {
                Free::PerValue => per_value_s,
                Free::ConversionScale { .. } => conversion_s,
            };
            let mut row = vec![overhead / pred, free_term / pred];
            let slope = if clamped == ln { -compute / pred } else { 0.0 };
            row.extend(pt.x.iter().map(|x| slope * x));
            jac.push(row);
        }
        for j in 1..K {
            r.push(ridge * beta[j]);
            let mut row = vec![0.0; K + 2];
            row[j + 2] = ridge;
            jac.push(row);
        }
        (r, jac)
    };
    let free_start = match free {
        Free::PerValue => 1e-10f64.ln(),
        Free::ConversionScale { .. } => 0.0,
    };
    let mut p0 = vec![1e-6f64.ln(), free_start];
    p0.extend(start);
    let p = levenberg_marquardt(&p0, &model);
    let mut beta = [0.0; K];
    beta.copy_from_slice(&p[2..]);
    let (per_value_s, conversion_scale) = split(p[1]);
    let curve = Curve {
        beta,
        overhead_s: p[0].exp(),
        per_value_s,
        conversion_scale,
        n: points.len(),
        rms_log: 0.0,
        median_abs_log: 0.0,
    };
    let mut residuals: Vec<f64> = points
        .iter()
        .map(|pt| {
            let pred = pt.fixed_s
                + curve.overhead_s
                + curve.conversion_scale * pt.conversion_s
                + curve.per_value_s * pt.values
                + pt.ideal_s / curve.efficiency_of(&pt.x);
            (pred / pt.seconds).ln().abs()
        })
        .collect();
    let rms = (residuals.iter().map(|r| r * r).sum::<f64>() / points.len() as f64).sqrt();
    residuals.sort_by(f64::total_cmp);
    Curve {
        rms_log: rms,
        median_abs_log: residuals[residuals.len() / 2],
        ..curve
    }
}

/// Ridge least squares of `ln(efficiency)`, the efficiency taken from
/// each timing less its known costs (at least a tenth of it left).
fn start_beta(points: &[Point]) -> Vec<f64> {
    let mut a = vec![vec![0.0f64; K + 1]; K];
    for pt in points {
        let known = pt.fixed_s + pt.conversion_s;
        let work = (pt.seconds - known).max(0.1 * pt.seconds);
        let y = (pt.ideal_s / work).ln();
        for (row, xi) in a.iter_mut().zip(pt.x) {
            for (cell, xj) in row.iter_mut().zip(pt.x) {
                *cell += xi * xj;
            }
            row[K] += xi * y;
        }
    }
    for (i, row) in a.iter_mut().enumerate().skip(1) {
        row[i] += RIDGE * points.len() as f64;
    }
    solve(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_a_planted_curve() {
        // Layers of a seeded grid timed by a planted curve: the fit must
        // find its overhead, per-value cost and efficiency again.
        let planted = Curve {
            beta: [-1.0, 0.2, 0.1, 0.15, -0.2, 0.3, -0.01, -0.005, -0.01],
            overhead_s: 4e-6,
            per_value_s: 2e-9,
            conversion_scale: 1.0,
            n: 0,
            rms_log: 0.0,
            median_abs_log: 0.0,
        };
        let mut points = Vec::new();
        for (i, m) in [8.0, 16.0, 32.0, 64.0, 128.0, 256.0]
            .into_iter()
            .enumerate()
        {
            for (j, n) in [4.0, 16.0, 64.0, 256.0, 1024.0].into_iter().enumerate() {
                let c = [3.0, 16.0, 64.0, 256.0][(i + j) % 4];
                let k = [1.0, 9.0][(i * 5 + j) % 2];
                let density = [1.0, 0.5, 0.1][(i + 2 * j) % 3];
                let f = Features {
                    out_channels_per_group: m,
                    out_pixels: n,
                    in_channels_per_group: c,
                    kernel_area: k,
                    density,
                };
                let ideal_s = m * n * c * k * density / 1e11;
                let values = (c + m) * n;
                let fixed_s = 20e-6;
                let cost = planted.cost(
                    &Layer {
                        features: f,
                        macs: m * n * c * k * density,
                        peak: 1e11,
                        values,
                    },
                    1.0,
                    1.0,
                );
                points.push(Point {
                    x: f.vector(),
                    ideal_s,
                    values,
                    fixed_s,
                    conversion_s: 0.0,
                    seconds: fixed_s + cost.compute_s + cost.extra_s,
                });
            }
        }
        // The ridge pulls the slopes towards 0, so the times are recovered
        // to a few percent, not to the bit; a fit that missed a term
        // (per-value cost, or the efficiency's shape) is off by far more.
        let curve = fit_curve(&points, Free::PerValue);
        assert!(curve.median_abs_log < 0.08, "{curve:?}");
        assert!(
            (curve.per_value_s / planted.per_value_s - 1.0).abs() < 0.15,
            "{curve:?}"
        );
        assert!(curve.overhead_s < 10e-6, "{curve:?}");
    }

    #[test]
    fn classes_the_calibration_does_not_time_take_the_nearest_curve() {
        let kernel = |family, precision, layout, tile| KernelClass {
            family,
            sparse: false,
            precision,
            layout,
            vnni: false,
            tile,
        };
        let f2 = kernel(
            KernelFamily::Winograd,
            Precision::F32,
            Layout::Nhwc,
            Some(WinogradTile::F2x2),
        );
        let f4 = kernel(
            KernelFamily::Winograd,
            Precision::F32,
            Layout::Nchw,
            Some(WinogradTile::F4x4),
        );
        assert_eq!(stand_ins(f2).last(), Some(&f4));
        let stencil16 = kernel(KernelFamily::Depthwise, Precision::F16, Layout::Nchw, None);
        let stencil32 = kernel(KernelFamily::Depthwise, Precision::F32, Layout::Nchw, None);
        assert_eq!(stand_ins(stencil16), vec![stencil16, stencil32]);
        let gemm = kernel(KernelFamily::Gemm, Precision::F32, Layout::Nchw, None);
        assert_eq!(stand_ins(gemm), vec![gemm]);
    }
}
