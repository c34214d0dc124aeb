//! How compressed models are run to measure them.
//!
//! Calibration and fidelity only need "outputs of this graph in these
//! numerics"; the trait keeps them independent of the runtime, so the native
//! engine can replace tract without touching the transformations.

#[cfg(feature = "onnx")]
use dlas_onnx::{Dtype, ExportOptions};
use dlas_zoo::Graph;
use dlas_zoo::qdq::Qdq;
use dlas_zoo::reference::Evaluation;
use dlas_zoo::weights::Weights;

/// The arithmetic a compressed model runs in, beyond its graph and weights.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Numerics {
    #[default]
    F32,
    /// Float16 weights and activations.
    F16,
    /// Int8 weights and uint8 activations (quantize-dequantize form).
    Int8(Box<Qdq>),
}

#[cfg(feature = "onnx")]
impl Numerics {
    /// The ONNX export options that express these numerics.
    pub fn export_options(&self) -> ExportOptions<'_> {
        match self {
            Numerics::F32 => ExportOptions::default(),
            Numerics::F16 => ExportOptions {
                dtype: Dtype::F16,
                ..ExportOptions::default()
            },
            Numerics::Int8(qdq) => ExportOptions {
                qdq: Some(qdq),
                ..ExportOptions::default()
            },
        }
    }
}

/// Runs a graph on a batch of inputs.
pub trait Evaluator {
    /// Evaluates `batch` samples (flattened N, C, H, W) and returns the
    /// output and, if `per_node`, every node's output as float32.
    fn evaluate(
        &self,
        graph: &Graph,
        weights: &Weights,
        numerics: &Numerics,
        input: &[f32],
        batch: usize,
        per_node: bool,
    ) -> anyhow::Result<Evaluation>;
}

#[cfg(feature = "onnx")]
/// The reference evaluator: ONNX export run by tract ([`dlas_onnx::evaluate`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tract;

#[cfg(feature = "onnx")]
impl Evaluator for Tract {
    fn evaluate(
        &self,
        graph: &Graph,
        weights: &Weights,
        numerics: &Numerics,
        input: &[f32],
        batch: usize,
        per_node: bool,
    ) -> anyhow::Result<Evaluation> {
        dlas_onnx::evaluate(
            graph,
            weights,
            &numerics.export_options(),
            input,
            batch,
            per_node,
        )
    }
}
