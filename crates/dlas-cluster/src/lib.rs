//! The coordinator: plans once, hands each device its share of the matrix
//! through an existing scheduler (Slurm job arrays), and merges what comes
//! back into one results set, refusing results it cannot vouch for.
//!
//! The coordinator never schedules anything itself: Slurm decides where and
//! when each array task runs; every task is an ordinary `dlas run --shard i/n`.

pub mod collect;
pub mod slurm;

pub use collect::{Collected, collect};
pub use slurm::{DeviceMap, Manifest, SubmitConfig, status, submit};
