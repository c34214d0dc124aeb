//! What the compiler study reads from rows: the configurations it pairs,
//! the throughput curves per configuration and network, and the ranking
//! reversals between them. A leaf of the catalogue: the figures, tables
//! and findings import it, and it imports none of them (tidy's import
//! rule, docs/ARCHITECTURE.md).

use crate::claims::TOLERANCE;
use crate::claims::cells::num;
use crate::inputs::Inputs;
use crate::metrics::Curve;
use dlas_core::{Compression, Dataset, ResultRow, Study};
use std::collections::BTreeMap;

/// The (baseline, compiled) configurations the study compares, by the
/// labels of [`config`], in the order figures pick a device's first pair:
/// on the mocked devices the modelled eager framework against the
/// modelled vendor compiler; on the host, ONNX Runtime without graph
/// optimizations plays the uncompiled graph against OpenVINO, the papers'
/// vendor compiler for CPUs, at f32 (so the gain is compilation, not
/// precision) and at its default precision (bf16 on CPUs with AMX or
/// AVX512-BF16: compilation and precision together); then each tuner
/// untuned against tuned (the native engine's, and TVM's MetaSchedule,
/// whose untuned build has no schedule at all), and each runtime with its
/// graph optimizations off against on.
pub const PAIRS: [(&str, &str); 7] = [
    ("eager", "vendor"),
    ("ort-noopt", "openvino-f32"),
    ("ort-noopt", "openvino-native"),
    ("native untuned", "native tuned"),
    ("tvm untuned", "tvm tuned"),
    ("tract-plain", "tract-opt"),
    ("ort-noopt", "ort-opt"),
];

/// The compilers with a tuned axis: their configurations are
/// "<id> untuned" and "<id> tuned", and each has an algorithm axis
/// whose fastest counts.
pub const TUNERS: [&str; 2] = [dlas_core::NATIVE, "tvm"];

/// A configuration's label: its compiler, with the tuning of a tuner.
pub fn config_of(compiler: &str, tuned: bool) -> String {
    if TUNERS.contains(&compiler) {
        format!("{compiler} {}", if tuned { "tuned" } else { "untuned" })
    } else {
        compiler.to_string()
    }
}

/// A row's configuration: its compiler, with the tuning of the native
/// engine or TVM.
pub fn config(row: &ResultRow) -> String {
    config_of(&row.compiler, row.tuned)
}

/// A block-repeat model's block type and depth, from the zoo's naming
/// (`blocks-<kind>-<depth>`).
pub fn block_of(model: &str) -> Option<(&str, usize)> {
    let rest = model.strip_prefix("blocks-")?;
    let (kind, depth) = rest.rsplit_once('-')?;
    Some((kind, depth.parse().ok()?))
}

/// A network of a study: its dataset and model.
pub type Net = (Dataset, String);

/// Throughput curves of every (device, network, configuration) in the rows
/// with timing. Only dense networks enter (the compiler study's); where a
/// configuration was measured with several algorithms or formats (the
/// native engine), its best throughput at each batch size counts.
pub struct Curves {
    pub curves: BTreeMap<(String, Net, String), Curve>,
}

impl Curves {
    pub fn new(rows: &[ResultRow]) -> Curves {
        let mut curves: BTreeMap<(String, Net, String), Curve> = BTreeMap::new();
        for r in rows {
            let Some(ms) = r.median_ms.filter(|_| r.status.has_timing()) else {
                continue;
            };
            if r.compression != Compression::Dense || r.batch == 0 || !ms.is_finite() || ms <= 0.0 {
                continue;
            }
            let curve = curves
                .entry((r.device.clone(), (r.dataset, r.model.clone()), config(r)))
                .or_default();
            let throughput = r.batch as f64 * 1e3 / ms;
            if curve.at(r.batch).is_none_or(|t| t < throughput) {
                curve.points.insert(r.batch, throughput);
            }
        }
        Curves { curves }
    }

    pub fn get(&self, device: &str, net: &Net, config: &str) -> Option<&Curve> {
        self.curves
            .get(&(device.to_string(), net.clone(), config.to_string()))
    }

    /// Throughput at `batch`.
    pub fn at(&self, device: &str, net: &Net, config: &str, batch: usize) -> Option<f64> {
        self.get(device, net, config)?.at(batch)
    }

    /// The pairs of [`PAIRS`] with both configurations measured on `device`.
    pub fn pairs_on(&self, device: &str) -> Vec<(&'static str, &'static str)> {
        PAIRS
            .into_iter()
            .filter(|(base, compiled)| {
                let has = |c: &str| self.curves.keys().any(|(d, _, k)| d == device && k == c);
                has(base) && has(compiled)
            })
            .collect()
    }
}

/// Two networks whose order by throughput flips under compilation.
#[derive(Debug, Clone, PartialEq)]
pub struct Reversal {
    pub device: String,
    pub baseline: &'static str,
    pub compiled: &'static str,
    /// Faster uncompiled, slower compiled.
    pub first: Net,
    pub second: Net,
    /// Throughputs: first and second, uncompiled then compiled.
    pub throughputs: [f64; 4],
}

impl Reversal {
    pub fn describe(&self) -> String {
        let [b1, b2, c1, c2] = self.throughputs.map(num);
        format!(
            "on {} {} beats {} uncompiled ({b1} vs {b2} samples/s with {}) and loses compiled ({c1} vs {c2} with {})",
            self.device, self.first.1, self.second.1, self.baseline, self.compiled
        )
    }
}

/// Every pair of `models` whose ranking at `batch` flips between a
/// baseline and its compiled configuration on `device`, by more than the
/// run-to-run tolerance: the first network's lead uncompiled times the
/// second's lead compiled exceeds [`TOLERANCE`], so two
/// networks within noise of each other do not count as a reversal.
pub fn reversals(curves: &Curves, device: &str, models: &[Net], batch: usize) -> Vec<Reversal> {
    let mut out = Vec::new();
    for (baseline, compiled) in curves.pairs_on(device) {
        for (i, a) in models.iter().enumerate() {
            for b in &models[i + 1..] {
                let t = |m: &Net, c: &str| curves.at(device, m, c, batch);
                let (Some(ab), Some(bb), Some(ac), Some(bc)) = (
                    t(a, baseline),
                    t(b, baseline),
                    t(a, compiled),
                    t(b, compiled),
                ) else {
                    continue;
                };
                let (first, second, throughputs) = if ab > bb && ac < bc {
                    (a, b, [ab, bb, ac, bc])
                } else if bb > ab && bc < ac {
                    (b, a, [bb, ab, bc, ac])
                } else {
                    continue;
                };
                let [lead_before, behind_before, lead_after, behind_after] = throughputs;
                if (lead_before / behind_before) * (behind_after / lead_after) <= TOLERANCE {
                    continue;
                }
                out.push(Reversal {
                    device: device.to_string(),
                    baseline,
                    compiled,
                    first: first.clone(),
                    second: second.clone(),
                    throughputs,
                });
            }
        }
    }
    out
}

/// The study's networks that are not block-repeat models, in study order.
pub fn whole_networks(study: &Study) -> Vec<Net> {
    study
        .models()
        .into_iter()
        .filter(|(_, m)| block_of(m).is_none())
        .collect()
}

/// Devices of the study that have rows, in study order.
pub fn devices_with_rows(inputs: &Inputs) -> Vec<String> {
    inputs
        .study
        .devices
        .iter()
        .map(|d| d.get_ref().clone())
        .filter(|d| inputs.results.iter().any(|r| &r.device == d))
        .collect()
}
