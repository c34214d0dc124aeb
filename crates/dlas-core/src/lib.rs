//! The study's vocabulary and bookkeeping: the axes a combination is made of,
//! the study file, plan expansion, results rows and their statistics.
//!
//! This crate sits at the top of the data flow. It knows nothing about
//! networks, devices or drawing; every other crate speaks its types.

pub mod append;
pub mod atomic;
pub mod axes;
pub mod calibration;
pub mod console;
pub mod environment;
pub mod filter;
pub mod kernel;
pub mod plan;
pub mod protocol;
pub mod regular_file;
pub mod results;
pub mod stats;
pub mod study;
pub mod text;

pub use axes::{Algorithm, Compression, Dataset, Format, Layout};
pub use environment::Environment;
pub use filter::Filter;
pub use kernel::{ConvShape, KernelClass, Lowering, kernel_class};
pub use plan::{Combination, HOST_COMPILERS, NATIVE, Plan, Shard, TVM};
pub use results::{ResultRow, Status};
pub use stats::Summary;
pub use study::Study;
