//! The compiler study's throughput metrics (`docs/metrics.md`).
//!
//! The paper names RTR, ASE and BSR without giving formulas; these are the
//! project's definitions:
//!
//! - throughput `T(c, b) = b / median latency`, samples per second;
//! - relative throughput ratio `RTR_c(b) = T(c, b) / T(baseline of c, b)`;
//! - average scaling efficiency `ASE_c = mean over b > 1 of
//!   ln(T(c, b) / T(c, 1)) / ln(b)`: 1 is linear scaling with batch size, 0 is
//!   no gain from batching;
//! - batch scaling ratio `BSR_c = RTR_c(b_max) / RTR_c(1)`, with `b_max` the
//!   largest batch both were measured at: above 1 the compiler's advantage
//!   grows with batch size, below 1 it shrinks;
//! - saturation batch: the smallest `b` whose throughput reaches 95% of the
//!   largest observed.

use dlas_core::ResultRow;
use std::collections::BTreeMap;

/// Throughput against batch size of one configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Curve {
    /// Batch size -> samples per second.
    pub points: BTreeMap<usize, f64>,
}

/// Fraction of the largest throughput that counts as saturated.
pub const SATURATION: f64 = 0.95;

impl Curve {
    /// Adds a measurement: `batch` samples in `median_ms` milliseconds.
    pub fn add(&mut self, batch: usize, median_ms: f64) {
        if batch > 0 && median_ms > 0.0 && median_ms.is_finite() {
            self.points.insert(batch, batch as f64 * 1e3 / median_ms);
        }
    }

    pub fn at(&self, batch: usize) -> Option<f64> {
        self.points.get(&batch).copied()
    }

    /// ASE; `None` without batch 1 and at least one larger batch.
    pub fn ase(&self) -> Option<f64> {
        let t1 = self.at(1)?;
        let terms: Vec<f64> = self
            .points
            .range(2..)
            .map(|(&b, &t)| (t / t1).ln() / (b as f64).ln())
            .collect();
        (!terms.is_empty()).then(|| terms.iter().sum::<f64>() / terms.len() as f64)
    }

    /// The smallest batch within [`SATURATION`] of the largest throughput.
    pub fn saturation_batch(&self) -> Option<usize> {
        let max = self.points.values().copied().fold(f64::NAN, f64::max);
        self.points
            .iter()
            .find(|&(_, &t)| t >= SATURATION * max)
            .map(|(&b, _)| b)
    }
}

/// `RTR_c(b)`.
pub fn rtr(compiled: &Curve, baseline: &Curve, batch: usize) -> Option<f64> {
    Some(compiled.at(batch)? / baseline.at(batch)?)
}

/// `BSR_c`: RTR at the largest common batch over RTR at batch 1; `None`
/// unless both curves have batch 1 and a larger common batch.
pub fn bsr(compiled: &Curve, baseline: &Curve) -> Option<f64> {
    let b_max = compiled
        .points
        .keys()
        .rev()
        .find(|b| **b > 1 && baseline.points.contains_key(b))?;
    Some(rtr(compiled, baseline, *b_max)? / rtr(compiled, baseline, 1)?)
}

/// The uncompiled configuration a compiled one is compared with: the same
/// runtime with its graph optimizations off, ONNX Runtime without graph
/// optimizations for OpenVINO (the host's uncompiled graph against its
/// vendor compiler), the native engine or TVM untuned, or (mocked devices)
/// the eager framework for the vendor compiler.
pub fn baseline_of(compiler: &str, tuned: bool) -> Option<(&'static str, bool)> {
    match (compiler, tuned) {
        ("ort-opt" | "openvino-f32" | "openvino-native", _) => Some(("ort-noopt", false)),
        ("tract-opt", _) => Some(("tract-plain", false)),
        (dlas_core::NATIVE, true) => Some((dlas_core::NATIVE, false)),
        ("tvm", true) => Some(("tvm", false)),
        ("vendor", _) => Some(("eager", false)),
        _ => None,
    }
}

/// The metrics of one compiled configuration on one device.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    /// dataset/model compression algorithm format layout (what is fixed).
    pub network: String,
    pub device: String,
    pub compiler: String,
    pub baseline: String,
    pub batches: Vec<usize>,
    pub rtr_1: Option<f64>,
    pub rtr_max: Option<f64>,
    pub ase: Option<f64>,
    pub ase_baseline: Option<f64>,
    pub bsr: Option<f64>,
    pub saturation_batch: Option<usize>,
}

/// Metrics of every compiled configuration in `rows` that has its baseline
/// measured too (rows without timing are ignored).
pub fn metrics(rows: &[ResultRow]) -> Vec<Metrics> {
    type Key = (String, String, String, bool);
    let mut curves: BTreeMap<Key, Curve> = BTreeMap::new();
    for r in rows {
        let Some(ms) = r.median_ms.filter(|_| r.status.has_timing()) else {
            continue;
        };
        let network = format!(
            "{}/{} {} {} {} {}",
            r.dataset, r.model, r.compression, r.algorithm, r.format, r.layout
        );
        curves
            .entry((network, r.device.clone(), r.compiler.clone(), r.tuned))
            .or_default()
            .add(r.batch, ms);
    }
    let name = |c: &str, tuned: bool| {
        if c == dlas_core::NATIVE || c == "tvm" {
            format!("{c} {}", if tuned { "tuned" } else { "untuned" })
        } else {
            c.to_string()
        }
    };
    curves
        .iter()
        .filter_map(|((network, device, compiler, tuned), c)| {
            let (bc, bt) = baseline_of(compiler, *tuned)?;
            // Runtimes have no tuned axis: their rows share one baseline.
            let base = curves
                .get(&(network.clone(), device.clone(), bc.to_string(), bt))
                .or_else(|| curves.get(&(network.clone(), device.clone(), bc.to_string(), !bt)))?;
            let b_max = c.points.keys().rev().find(|b| base.points.contains_key(b));
            Some(Metrics {
                network: network.clone(),
                device: device.clone(),
                compiler: name(compiler, *tuned),
                baseline: name(bc, bt),
                batches: c.points.keys().copied().collect(),
                rtr_1: rtr(c, base, 1),
                rtr_max: b_max.and_then(|&b| rtr(c, base, b)),
                ase: c.ase(),
                ase_baseline: base.ase(),
                bsr: bsr(c, base),
                saturation_batch: c.saturation_batch(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(points: &[(usize, f64)]) -> Curve {
        let mut c = Curve::default();
        for &(b, t) in points {
            // Throughput t at batch b is a latency of b / t seconds.
            c.add(b, b as f64 * 1e3 / t);
        }
        c
    }

    fn close(a: Option<f64>, b: f64) {
        let a = a.expect("a value");
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    /// Values computed by hand: compiled 100, 180, 300 samples/s at batch
    /// 1, 2, 4 against a baseline of 50, 100, 200.
    #[test]
    fn hand_computed_values() {
        let c = curve(&[(1, 100.0), (2, 180.0), (4, 300.0)]);
        let base = curve(&[(1, 50.0), (2, 100.0), (4, 200.0)]);
        close(c.at(2), 180.0);
        close(rtr(&c, &base, 1), 2.0);
        close(rtr(&c, &base, 4), 1.5);
        close(bsr(&c, &base), 0.75);
        // (ln 1.8 / ln 2 + ln 3 / ln 4) / 2
        close(
            c.ase(),
            (1.8f64.ln() / 2f64.ln() + 3f64.ln() / 4f64.ln()) / 2.0,
        );
        close(c.ase(), 0.820_239_078_457_764_1);
        // The baseline doubles with batch size: perfectly linear.
        close(base.ase(), 1.0);
        // 95% of 300 is 285: only batch 4 reaches it.
        assert_eq!(c.saturation_batch(), Some(4));
        let flat = curve(&[(1, 10.0), (2, 19.8), (4, 20.0), (8, 20.1)]);
        assert_eq!(flat.saturation_batch(), Some(2));
        close(
            flat.ase(),
            ((1.98f64).ln() / 2f64.ln() + 2f64.ln() / 4f64.ln() + 2.01f64.ln() / 8f64.ln()) / 3.0,
        );
    }

    #[test]
    fn missing_points_give_none() {
        let c = curve(&[(2, 100.0), (4, 150.0)]);
        assert_eq!(c.ase(), None, "no batch 1");
        let only_one = curve(&[(1, 100.0)]);
        assert_eq!(only_one.ase(), None);
        assert_eq!(bsr(&only_one, &only_one), None);
        assert_eq!(Curve::default().saturation_batch(), None);
    }

    #[test]
    fn baselines_pair_compiled_with_uncompiled() {
        assert_eq!(baseline_of("ort-opt", false), Some(("ort-noopt", false)));
        assert_eq!(
            baseline_of("tract-opt", false),
            Some(("tract-plain", false))
        );
        assert_eq!(baseline_of("native", true), Some(("native", false)));
        assert_eq!(baseline_of("native", false), None);
        assert_eq!(baseline_of("vendor", false), Some(("eager", false)));
        assert_eq!(baseline_of("eager", false), None);
        assert_eq!(baseline_of("ort-noopt", false), None);
    }
}
