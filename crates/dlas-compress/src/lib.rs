//! Model compression: transformations of a zoo graph and its weights, and
//! the report every compressed model carries.
//!
//! The study compresses each network four ways (its `compression` axis):
//! unstructured weight pruning, structured channel pruning, float16 and
//! int8. Each transformation is a module taking `(Graph, Weights)`; the
//! numerics that only an exporter or engine can express (float16, int8 QDQ)
//! are described by [`Numerics`] next to the graph. Fidelity against the
//! dense model is measured through the [`Evaluator`] trait, so the tract
//! reference evaluator and, later, the native engine give comparable reports.
//!
//! The feature `onnx` (on by default) adds what needs the ONNX exporter and
//! tract: the [`Tract`] evaluator, [`Compressed::onnx`] and accuracy
//! measurement. Crates that only transform weights (the mocked devices read
//! pruned densities) turn it off and stay free of tract.

pub mod accuracy;
pub mod channels;
mod checks;
pub mod compress;
pub mod evaluator;
pub mod int8;
pub mod prune;
pub mod report;
pub mod schedule;

pub use channels::{Removal, prune_channels};
pub use checks::{check_level, check_weights, layer_weight};
pub use compress::{Compressed, Request, compress};
#[cfg(feature = "onnx")]
pub use evaluator::Tract;
pub use evaluator::{Evaluator, Numerics};
pub use int8::{Calibration, CalibrationMethod, Int8Params, engine_params, quantize};
pub use prune::{Scope, prune_weights};
pub use report::{CompressionReport, Fidelity, Footprint, footprint};
pub use schedule::{choose_level, sweep_levels};

use dlas_zoo::Graph;
use dlas_zoo::weights::Weights;

/// The study's pruning step (the DLAS paper's schedules): global L1
/// unstructured pruning for `weight-pruning`, L1 channels zeroed in place
/// (kept in the graph, so sparse formats see them) for `channel-pruning`.
/// The mocked devices' densities, the runner's model files and the report's
/// sweeps all prune through this one function, so they cannot drift apart.
pub fn study_pruning(
    graph: &Graph,
    dense: &Weights,
    technique: dlas_core::Compression,
    level: f64,
) -> anyhow::Result<Weights> {
    use dlas_core::Compression;
    match technique {
        Compression::WeightPruning => prune_weights(graph, dense, level, Scope::Global),
        Compression::ChannelPruning => Ok(prune_channels(graph, dense, level, Removal::Zero)?.1),
        other => anyhow::bail!("{other} does not prune weights"),
    }
}
