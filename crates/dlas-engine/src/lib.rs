//! dlas-engine: the study's own inference engine, for the zoo's CNNs and
//! transformers.
//!
//! It exists so the backend axes of the study (algorithm, weight format,
//! layout, schedule) are real code paths whose cost can be measured, not
//! labels on someone else's runtime. Each convolution algorithm lives in its
//! own module (`direct`, `gemm`, `spatial_pack`, `winograd` for 3x3
//! stride-1 layers, `depthwise` for the layers
//! every algorithm runs as stencils, and `int8` for quantised GEMM) beside
//! the f64 reference in `dlas_zoo::reference` that tests hold them to; the
//! knobs of each are values ([`Schedule`]) so a tuner can search them.
//! Compiling is two passes: graph fusion (`fusion`: batch norm and layer
//! scale folded, residual Add and activation fused into a convolution's
//! epilogue), then
//! lowering, where each layer's [`LayerKey`] (weight format, kernel
//! algorithm, layout, dtype) is decided once and, with a schedule, packed
//! into a [`Conv2d`]. A run executes a 1x1 expansion and the depthwise
//! layer that alone reads its large output as one step (`inverted`).
//! The transformer operators run beside the convolutions in both layouts
//! and stay f32 whatever the layers' dtype: attention (`attention`, its two
//! products on the GEMM microkernels), layer norm (`norm`), GELU (`ops`),
//! and the token operators (`tokens`: class token, position embedding,
//! first token, patch merging); projections are 1x1 convolutions.
//! Weight formats (dense, CSR, BSR) are one block-sparse structure
//! (`sparse`), CSR being its 1x1 case. Vectorised kernels come in AVX-512,
//! AVX2 and portable versions, picked at run time (`isa`).
//!
//! ```no_run
//! use dlas_engine::{Engine, EngineConfig};
//! let graph = (dlas_zoo::find(dlas_core::Dataset::Cifar10, "resnet18").unwrap().build)();
//! let weights = dlas_zoo::weights::generate(&graph, 1);
//! let engine = Engine::compile(&graph, &weights, &EngineConfig::default()).unwrap();
//! let logits = engine.run(&dlas_zoo::weights::input(&graph, 1, 1), 1).unwrap();
//! assert_eq!(logits.len(), 10);
//! ```
//!
//! Invariants: weights are packed once, at [`Engine::compile`]; a run
//! never repacks weights, and reuses the activation and packing buffers of
//! earlier runs; every parallel loop runs on the engine's own thread pool,
//! never rayon's global one.

pub mod algorithm;
mod aligned;
mod attention;
mod awake;
mod blocked;
pub mod config;
pub mod conv;
mod depthwise;
mod direct;
pub mod engine;
pub mod epilogue;
mod fp16;
mod fusion;
mod gemm;
mod imported;
mod int8;
mod inverted;
mod isa;
pub mod lowering;
mod norm;
mod ops;
pub mod schedule;
mod sparse;
mod spatial_pack;
#[cfg(test)]
mod testing;
mod tiles;
mod tokens;
pub mod tuning;
mod untuned;
mod weights;
mod winograd;
pub mod workload;

pub use algorithm::{AutoAlgorithm, KernelAlgorithm};
pub use config::{ConfigError, DType, EngineConfig, FormatChoice};
pub use conv::{Conv2d, Int8Scales};
pub use engine::{Engine, StepTime};
pub use epilogue::Activation;
pub use lowering::LayerKey;
pub use schedule::{
    BlockedSchedule, DirectSchedule, GemmSchedule, InvalidSchedule, ParallelLoop, Schedule,
    SpatialPackSchedule, VectorAxis, WinogradSchedule,
};
pub use tuning::ScheduleTable;
pub use workload::{Workload, workload_of};
