//! SSH: edge boards reached with the system's OpenSSH client, one
//! multiplexed connection per board.
//!
//! Each board gets a small project of its own under its remote folder: the
//! `dlas` binary, the study, the device specifications, `models.lock`, the
//! model files its shards read and the ONNX Runtime library (when the
//! architectures match). Every file is compared by sha256 with what is
//! already there and only missing or different ones are copied, to a
//! temporary name of this connection's own (boards may share a home folder
//! over NFS) that is renamed once its hash is checked on the board.
//! Each shard is then an ordinary `dlas run --shard i/n` over `ssh`, whose
//! append-only store makes a rerun continue where a broken connection
//! stopped; its results, samples and environment records are fetched into
//! the shared results folder with atomic renames, in the order that keeps a
//! visible row's samples and environment already in place.
//!
//! The transport is `ssh` alone (files travel through `cat` on the
//! connection), so a board needs a POSIX shell, `sha256sum` and `uname`,
//! not an SFTP server; `flock` is used when the board has it.
//!
//! One module per concern: `address` (which board, which `ssh` options),
//! `upload` (what a board needs and what it lacks), `session` (the
//! connection, a shard's run and the fetch), `submit` (the executor),
//! `status` (what the results folder says) and `resume` (the command that
//! reruns incomplete devices).

pub mod address;
pub mod resume;
mod session;
mod status;
pub mod submit;
pub mod upload;

pub use address::{Destination, SshHost, Transport};
pub use submit::submit;
pub use upload::ModelFiles;
