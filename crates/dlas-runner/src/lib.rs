//! The runner: turns a plan into results on real and mocked devices, with a
//! measurement protocol a reviewer can trust and a store that never loses a
//! measurement.
//!
//! - [`timing`]: a fixed-count timed loop (warm-up discarded, monotonic clock, every sample kept), for tuning and benches.
//! - [`rounds`]: the campaign protocol: one network's configurations interleaved, each until its median is precise.
//! - [`conditions`]: load, steal time, clock and core-to-core round trip
//!   read between bursts.
//! - [`store`]: append-only results and samples files; resuming skips what is done.
//! - [`environment`]: the record of the machine and software each run used.
//! - [`models`]: the ONNX file of a combination, generated or the user's, hash-checked.
//! - [`profile`]: where a network's time goes, engine step by step beside ONNX Runtime's nodes.
//! - [`run`]: the loop over combinations, with failures isolated and progress shown.
//! - [`tuning`]: `dlas tune` on the host, and tuned schedules applied to tuned runs.

pub mod calibrate;
pub mod conditions;
pub mod crosscheck;
pub mod environment;
pub mod models;
pub mod native;
pub mod profile;
pub mod progress;
pub mod rounds;
pub mod run;
pub mod store;
pub mod timing;
pub mod tuning;
pub mod tvm_tuning;
pub mod watchdog;

pub use run::{HostConfig, RunReport, run_host};
