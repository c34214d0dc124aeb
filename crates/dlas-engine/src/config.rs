//! What an engine is asked to be: the study's axes for the backend layer
//! plus the thread count and an optional schedule.

use crate::algorithm::KernelAlgorithm;
use crate::schedule::Schedule;
use dlas_core::Layout;
use dlas_zoo::quant::QuantParams;
use serde::{Deserialize, Serialize};

/// How weights are stored. `Auto` measures each layer's weight density.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FormatChoice {
    Auto,
    Dense,
    Csr,
    /// Block-sparse rows with `rows` x `cols` blocks; rows in {1, 2, 4, 8},
    /// cols in 1..=16.
    Bsr {
        rows: usize,
        cols: usize,
    },
}

/// Storage type of weights and activations. Arithmetic is always f32:
/// F16 halves the bytes moved, not the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    /// Weights and activations stored as IEEE binary16.
    F16,
    /// int8 weights and activations with the scales of
    /// [`EngineConfig::quant`], i32 accumulation.
    I8,
}

impl DType {
    /// The study's name for the stored type (`dlas_core::kernel`).
    pub fn precision(self) -> dlas_core::kernel::Precision {
        use dlas_core::kernel::Precision;
        match self {
            DType::F32 => Precision::F32,
            DType::F16 => Precision::F16,
            DType::I8 => Precision::I8,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Threads of the engine's own pool (never the global rayon pool);
    /// the default is one per physical core, as in the study (hyperthreads
    /// share a core's FMA units, so a second thread per core adds
    /// contention, not arithmetic).
    pub threads: usize,
    /// One algorithm for every convolution, like the study's axis (whose
    /// `auto` converts to none: see [`KernelAlgorithm`]'s `TryFrom`).
    pub algorithm: KernelAlgorithm,
    pub format: FormatChoice,
    pub layout: Layout,
    pub dtype: DType,
    /// A schedule for every convolution of `algorithm`, to which it must
    /// belong; `None` takes each layer's tuned or untuned default. Depthwise
    /// layers that every algorithm runs as direct keep their default.
    pub schedule: Option<Schedule>,
    /// Quantisation of the graph (required by, and only read for, `I8`).
    pub quant: Option<QuantParams>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            threads: num_cpus::get_physical(),
            algorithm: KernelAlgorithm::Gemm,
            format: FormatChoice::Auto,
            layout: Layout::Nchw,
            dtype: DType::F32,
            schedule: None,
            quant: None,
        }
    }
}

/// A configuration the engine cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "layout nhwc is implemented by the gemm and winograd algorithms with dense weights only (got {0})"
    )]
    Nhwc(String),
    #[error(
        "layout nchw16c is implemented for dense fp32 layers, ungrouped or depthwise (got {0})"
    )]
    Blocked(String),
    #[error("fp16 is implemented for dense weights only (got {0})")]
    F16(String),
    #[error("int8 is implemented for dense weights in NCHW only (got {0})")]
    I8(String),
    #[error("int8 needs quantisation parameters (EngineConfig::quant) for every node")]
    MissingQuant,
    #[error("a {given} schedule cannot drive the {algorithm} algorithm")]
    ScheduleMismatch {
        given: KernelAlgorithm,
        algorithm: KernelAlgorithm,
    },
    #[error("BSR blocks must have rows in {{1, 2, 4, 8}} and cols in 1..=16 (got {rows}x{cols})")]
    Blocks { rows: usize, cols: usize },
    #[error("threads must be at least 1")]
    Threads,
}
