//! One entry point: compress a network by a technique and report on it.

use crate::channels::{Removal, prune_channels};
use crate::evaluator::{Evaluator, Numerics};
use crate::int8::{Calibration, CalibrationMethod, Int8Params, quantize};
use crate::prune::{Scope, prune_weights};
use crate::report::{CompressionReport, Fidelity, live_channels, size};
use crate::{check_level, check_weights};
use dlas_core::Compression;
use dlas_zoo::Graph;
use dlas_zoo::weights::{self, Weights};

/// The seed of the fixed input set fidelity is measured on; distinct from
/// calibration seeds so a model is not judged on the data it was calibrated on.
pub const FIDELITY_SEED: u64 = 0x00F1_DE11;
/// Samples in the fidelity set.
pub const FIDELITY_SAMPLES: usize = 8;

/// What to compress and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub technique: Compression,
    /// Fraction pruned; required by the pruning techniques, refused by others.
    pub level: Option<f64>,
    pub scope: Scope,
    pub removal: Removal,
    /// Int8 only: the calibration set.
    pub calibration: Option<Calibration>,
}

impl Request {
    /// A request with the defaults: global pruning, zeroed channels, no calibration.
    pub fn new(technique: Compression, level: Option<f64>) -> Request {
        Request {
            technique,
            level,
            scope: Scope::Global,
            removal: Removal::Zero,
            calibration: None,
        }
    }

    /// Adds a seeded calibration set of `samples` inputs (int8).
    pub fn seeded_calibration(
        mut self,
        graph: &Graph,
        seed: u64,
        samples: usize,
        method: CalibrationMethod,
    ) -> Request {
        self.calibration = Some(Calibration::seeded(graph, seed, samples, method));
        self
    }
}

/// A compressed model: graph, weights, numerics and its report.
#[derive(Debug, Clone)]
pub struct Compressed {
    pub graph: Graph,
    pub weights: Weights,
    pub numerics: Numerics,
    /// Int8 only: what a native engine needs.
    pub int8: Option<Int8Params>,
    pub report: CompressionReport,
}

#[cfg(feature = "onnx")]
impl Compressed {
    /// The model as ONNX (float16 or QDQ where the numerics say so).
    pub fn onnx(&self) -> anyhow::Result<Vec<u8>> {
        dlas_onnx::export_with(&self.graph, &self.weights, &self.numerics.export_options())
    }
}

/// Compresses `graph` with `weights` as `request` says, then measures the
/// result against the dense model with `evaluator`.
pub fn compress(
    graph: &Graph,
    weights: &Weights,
    request: &Request,
    evaluator: &dyn Evaluator,
) -> anyhow::Result<Compressed> {
    check_weights(graph, weights)?;
    let technique = request.technique;
    let level = match (technique.is_pruning(), request.level) {
        (true, Some(level)) => Some(check_level(level)?),
        (true, None) => anyhow::bail!("{technique} needs a level in [0, 1)"),
        (false, Some(level)) => anyhow::bail!(
            "{technique} takes no level (got {level}); levels are for weight-pruning and channel-pruning"
        ),
        (false, None) => None,
    };
    let mut int8 = None;
    let (cgraph, cweights, numerics) = match technique {
        Compression::Dense => (graph.clone(), weights.clone(), Numerics::F32),
        Compression::WeightPruning => {
            let w = prune_weights(graph, weights, level.expect("checked"), request.scope)?;
            (graph.clone(), w, Numerics::F32)
        }
        Compression::ChannelPruning => {
            let (g, w) = prune_channels(graph, weights, level.expect("checked"), request.removal)?;
            (g, w, Numerics::F32)
        }
        Compression::Fp16 => (graph.clone(), weights.clone(), Numerics::F16),
        Compression::Int8 => {
            let calibration = request
                .calibration
                .as_ref()
                .ok_or_else(|| anyhow::anyhow!("int8 needs a calibration set"))?;
            let (params, qdq) = quantize(graph, weights, calibration, evaluator)?;
            int8 = Some(params);
            (
                graph.clone(),
                weights.clone(),
                Numerics::Int8(Box::new(qdq)),
            )
        }
    };
    let x = weights::input(graph, FIDELITY_SEED, FIDELITY_SAMPLES);
    let dense_out =
        evaluator.evaluate(graph, weights, &Numerics::F32, &x, FIDELITY_SAMPLES, false)?;
    let out = evaluator.evaluate(&cgraph, &cweights, &numerics, &x, FIDELITY_SAMPLES, false)?;
    let fidelity = Fidelity::measure(&dense_out.output, &out.output, FIDELITY_SAMPLES);
    let dense = size(graph, weights, Compression::Dense, false, &Numerics::F32);
    let removal = (technique == Compression::ChannelPruning).then_some(request.removal);
    let sparse = technique == Compression::WeightPruning || removal == Some(Removal::Zero);
    let s = size(&cgraph, &cweights, technique, sparse, &numerics);
    let report = CompressionReport {
        model: graph.name.clone(),
        dataset: graph.dataset,
        technique,
        level,
        removal,
        params_dense: dense.params,
        params: s.params,
        params_ratio: dense.params as f64 / s.params as f64,
        bytes_dense: dense.bytes,
        bytes: s.bytes,
        bytes_ratio: dense.bytes as f64 / s.bytes as f64,
        macs_dense: dense.macs,
        macs: s.macs,
        channels_pruned: removal.map(|_| {
            1.0 - live_channels(&cgraph, &cweights) as f64 / live_channels(graph, weights) as f64
        }),
        density: s.density,
        fidelity,
    };
    Ok(Compressed {
        graph: cgraph,
        weights: cweights,
        numerics,
        int8,
        report,
    })
}
