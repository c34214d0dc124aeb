//! Backends: real runtimes that execute an ONNX file on this machine.
//!
//! A backend turns a model file into a [`Session`] for one input shape and
//! thread count; the runner owns the timing loop, so every backend is timed
//! the same way (input in, output out). Backends know nothing about studies,
//! plans or results.

pub mod ort_runtime;
pub mod tract_runtime;

use anyhow::Result;
use std::path::Path;

/// A loaded model, ready to run repeatedly on inputs of one shape.
pub trait Session {
    /// Runs one inference; returns the flattened output.
    fn run(&mut self, input: &[f32]) -> Result<Vec<f32>>;
    /// The execution provider or executor that actually ran (recorded in results).
    fn provider(&self) -> String;
}

/// How a session is built.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionConfig {
    /// Input shape (batch, channels, height, width).
    pub input_shape: [usize; 4],
    /// Intra-op threads.
    pub threads: usize,
    /// The model takes and returns float16 tensors (an fp16-compressed model);
    /// inputs are converted before the call and outputs after it, inside the timing.
    pub half_io: bool,
}

/// The compilers this build runs on the host, by id.
pub const COMPILERS: &[&str] = &["tract-plain", "tract-opt", "ort-noopt", "ort-opt"];

/// Loads `model` with the compiler `compiler` (one of [`COMPILERS`]).
pub fn load(compiler: &str, model: &Path, config: &SessionConfig) -> Result<Box<dyn Session>> {
    match compiler {
        "tract-plain" => tract_runtime::load(model, config, tract_runtime::Level::Plain),
        "tract-opt" => tract_runtime::load(model, config, tract_runtime::Level::Optimized),
        "ort-noopt" => ort_runtime::load(model, config, ort_runtime::Level::Disabled),
        "ort-opt" => ort_runtime::load(model, config, ort_runtime::Level::All),
        other => anyhow::bail!(
            "unknown compiler `{other}`; valid values: {}",
            COMPILERS.join(", ")
        ),
    }
}

/// Relative L2 distance ||a - b|| / ||b||, for cross-checking runtimes.
pub fn relative_l2(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        num += (f64::from(*x) - f64::from(*y)).powi(2);
        den += f64::from(*y).powi(2);
    }
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}
