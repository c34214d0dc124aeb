//! Backends: real runtimes that execute an ONNX file on this machine.
//!
//! A backend turns a model file into a [`Session`] for one input shape and
//! thread count; the runner owns the timing loop, so every backend is timed
//! the same way (input in, output out). Backends know nothing about studies,
//! plans or results.

pub mod openvino_runtime;
pub mod ort_runtime;
pub mod tract_runtime;
pub mod tvm_runtime;

use anyhow::Result;
use std::path::Path;
use std::time::Duration;

/// A loaded model, ready to run repeatedly on inputs of one shape.
pub trait Session {
    /// Runs one inference; returns the flattened output.
    fn run(&mut self, input: &[f32]) -> Result<Vec<f32>>;
    /// The execution provider or executor that actually ran (recorded in results).
    fn provider(&self) -> String;
    /// The batches one [`Session::run`] computes: more than one where a
    /// compiler keeps several requests in flight to reach its throughput
    /// (OpenVINO's THROUGHPUT hint); the runner divides a run's time by it.
    fn batches_per_run(&self) -> usize {
        1
    }
    /// The last run's time as the backend took it next to the model, where
    /// a run crosses a process boundary whose cost is not the model's
    /// (TVM's Python process); the runner records it instead of its own
    /// clock's. `None`: the runner's clock times the call.
    fn inner_time(&self) -> Option<Duration> {
        None
    }
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
    /// TVM's interpreter, algorithm and database; required by `tvm` only.
    pub tvm: Option<tvm_runtime::Options>,
}

/// The compilers this build runs on the host, by id.
pub const COMPILERS: &[&str] = &[
    "tract-plain",
    "tract-opt",
    "ort-noopt",
    "ort-opt",
    "openvino-f32",
    "openvino-native",
    TVM,
];

/// Apache TVM's compiler id: the one host compiler with an algorithm axis
/// and a tuned axis of its own.
pub const TVM: &str = "tvm";

/// Loads `model` with the compiler `compiler` (one of [`COMPILERS`]).
pub fn load(compiler: &str, model: &Path, config: &SessionConfig) -> Result<Box<dyn Session>> {
    match compiler {
        "tract-plain" => tract_runtime::load(model, config, tract_runtime::Level::Plain),
        "tract-opt" => tract_runtime::load(model, config, tract_runtime::Level::Optimized),
        "ort-noopt" => ort_runtime::load(model, config, ort_runtime::Level::Disabled),
        "ort-opt" => ort_runtime::load(model, config, ort_runtime::Level::All),
        "openvino-f32" => openvino_runtime::load(model, config, openvino_runtime::Precision::F32),
        "openvino-native" => {
            openvino_runtime::load(model, config, openvino_runtime::Precision::Native)
        }
        TVM => match &config.tvm {
            Some(options) => tvm_runtime::load(model, config, options),
            None => anyhow::bail!("the tvm compiler needs its options (SessionConfig::tvm)"),
        },
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

#[cfg(test)]
mod tests {
    /// The planner's list (core, which builds without the runtimes) and
    /// the loader's are one list.
    #[test]
    fn core_names_the_compilers_this_crate_loads() {
        assert_eq!(super::COMPILERS, dlas_core::HOST_COMPILERS);
        assert_eq!(super::TVM, dlas_core::TVM);
    }
}
