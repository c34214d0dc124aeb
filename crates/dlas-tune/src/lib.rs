//! dlas-tune: the study's "tuned" axis, as a schedule search over the
//! native engine with reusable tuning records.
//!
//! The engine names what a schedule applies to ([`LayerKey`]) and checks
//! candidates ([`Schedule::validate`]); this crate decides which candidates
//! to try and measures them on the machine it runs on:
//!
//! - [`space`]: each algorithm's knobs, with random sampling, mutation and
//!   crossover over schedule values;
//! - [`measure`]: one layer timed with a candidate schedule (TVM's
//!   `time_evaluator` protocol: repeats of enough runs to last a minimum time);
//! - [`search`]: the evolutionary search with a trial budget and early stop,
//!   resumable from the records of an interrupted search;
//! - [`allocate`]: the task scheduler, one budget spread over a run's layers
//!   by their share of the networks' time (Ansor's);
//! - [`confirm`]: which schedule a search keeps: its finalists re-measured
//!   in interleaved rounds (against the winner's curse);
//! - [`records`]: one JSON line per measured candidate, appended crash-safely,
//!   and the best-of file derived from them.
//!
//! Invariants: a record is written before the next candidate is measured;
//! every schedule applied to an engine came from a record measured on a
//! machine with the same fingerprint, unless the caller chose otherwise.
//!
//! [`LayerKey`]: dlas_engine::LayerKey
//! [`Schedule::validate`]: dlas_engine::Schedule::validate

pub mod allocate;
pub mod confirm;
pub mod measure;
pub mod records;
pub mod search;
pub mod space;

pub use measure::{LayerProblem, Timer};
pub use records::{BestEntry, BestOf, Phase, Record, RecordLog, TaskKey};
pub use search::{Budget, Outcome, Searched, StopReason, search, tune};
