//! The [`Device`] trait and its refusal, in a leaf module: the mocked
//! devices and the runner of a plan implement and call it, and the crate
//! root only re-exports it.

use crate::workload::Workload;
use dlas_core::Combination;

/// Something that turns a combination into timed runs.
pub trait Device {
    fn id(&self) -> &str;
    /// Timed runs in milliseconds (warm-up already discarded), or why none were made.
    fn measure(
        &self,
        combination: &Combination,
        workload: &Workload,
        runs: usize,
        seed: u64,
    ) -> Result<Vec<f64>, Unsupported>;
}

/// A combination this device cannot run, with the reason reported in results.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);
