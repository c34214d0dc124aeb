//! Devices: where a combination's inference time comes from.
//!
//! A mocked device is a performance model of a real platform, described by
//! its public specifications in `data/devices/*.toml`. It predicts each
//! kernel's time from the work a layer does under the chosen algorithm and
//! format, and produces seeded per-run samples, so mocked and real results go
//! through the same statistics. Real devices (the host) join through the
//! same [`Device`] trait in later work.

pub mod compiler;
mod device;
pub mod efficiency;
mod fit;
pub mod mock;
pub mod run;
pub mod scaling;
pub mod spec;
pub mod workload;

pub use compiler::GraphCompiler;
pub use device::{Device, Unsupported};
pub use efficiency::Efficiency;
pub use mock::MockDevice;
pub use run::{MockProtocol, is_mocked, predict_measured, run_mocked};
pub use scaling::load_specs;
pub use spec::{DeviceKind, DeviceSpec, Origin, load_calibrated, load_calibration};
pub use workload::{Kernel, KernelKind, Workload};
