//! The measurement protocol a study sets, and the bounds every protocol
//! field (in the study file or on the command line) must stay within.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;

/// The measurement protocol of a study; command-line flags override it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// Batch sizes; each is a separate combination.
    pub batch: Vec<usize>,
    /// Runs executed and discarded before timing.
    pub warmup: usize,
    /// Timed runs per combination on a mocked device (the papers' 150).
    pub runs: usize,
    /// Real devices: timed runs before a combination may stop (capped at
    /// the maximum: see [`Protocol::min_runs`]).
    #[serde(default = "default_min_runs")]
    pub(crate) min_runs: usize,
    /// Real devices: the most timed runs of one combination (default: `runs`).
    #[serde(default)]
    pub max_runs: Option<usize>,
    /// Real devices: a combination stops once the 95% interval of its
    /// median lies within ±this fraction of the median.
    #[serde(default = "default_half_width")]
    pub half_width: f64,
    /// Real devices: seconds of running after which a combination stops
    /// with the runs it has (once it has `min_runs`).
    #[serde(default = "default_budget")]
    pub budget_s: f64,
    /// Real devices: the budget stops a combination only once it also has
    /// this many timed runs, so that a slow row's budget grows with its
    /// time (a 1.5 s network gets about 20 runs from 60 s, too few for
    /// ±2% at a 6% spread; docs/protocol.md); the timeout still bounds
    /// it. Default: `min_runs`, a budget of time alone.
    #[serde(default)]
    pub(crate) budget_runs: Option<usize>,
    /// Real devices: the most configurations of one network measured
    /// interleaved at once (each holds its loaded model in memory).
    #[serde(default = "default_interleave")]
    pub interleave: usize,
    /// Intra-op threads; 0 means one per physical core.
    pub threads: usize,
    /// Root seed for weights, inputs and mocked-device noise.
    pub seed: u64,
    /// Seconds one combination may take before it is recorded as failed.
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    /// The largest batch size per device (device id -> batch); batch sizes
    /// above it are not planned for that device. A device not listed runs
    /// every batch size. Small devices and a reduced host protocol need it.
    #[serde(default)]
    pub max_batch: BTreeMap<String, usize>,
}

impl Protocol {
    /// The most timed runs of one combination on a real device.
    pub fn max_runs(&self) -> usize {
        self.max_runs.unwrap_or(self.runs)
    }

    /// Timed runs before a combination on a real device may stop.
    pub fn min_runs(&self) -> usize {
        self.min_runs.min(self.max_runs())
    }

    /// Timed runs before the budget may stop a combination on a real
    /// device: at least [`Protocol::min_runs`], at most the maximum.
    pub fn budget_runs(&self) -> usize {
        self.budget_runs
            .unwrap_or(0)
            .clamp(self.min_runs(), self.max_runs())
    }

    /// Whether `batch` is planned on `device`.
    pub fn batch_fits(&self, device: &str, batch: usize) -> bool {
        self.max_batch.get(device).is_none_or(|&max| batch <= max)
    }
}

fn default_timeout() -> f64 {
    600.0
}

fn default_min_runs() -> usize {
    20
}

fn default_half_width() -> f64 {
    0.01
}

fn default_budget() -> f64 {
    60.0
}

fn default_interleave() -> usize {
    16
}

/// Configurations interleaved at once.
pub const INTERLEAVE: RangeInclusive<usize> = 1..=256;

/// Timed runs per combination. A combination's samples are kept in memory
/// (8 bytes each), so a million is the most a run may ask for.
pub const RUNS: RangeInclusive<usize> = 1..=1_000_000;
/// Warm-up runs, discarded before timing.
pub const WARMUP: RangeInclusive<usize> = 0..=1_000_000;
/// Intra-op threads (0: one per physical core); every thread is a real
/// thread with its own stack, so the count stays within what a machine runs.
pub const THREADS: RangeInclusive<usize> = 0..=1024;
/// Batch sizes: the inputs of one batch are allocated at once.
pub const BATCH: RangeInclusive<usize> = 1..=4096;
/// The longest a combination may take, in seconds: one day.
pub const MAX_TIMEOUT_S: f64 = 86_400.0;

/// `value` if `range` holds it, else a one-line error naming `field` and the range.
pub fn check_bound(
    field: &str,
    value: usize,
    range: &RangeInclusive<usize>,
) -> std::result::Result<usize, String> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{field} is {value}; valid: {}..={}",
            range.start(),
            range.end()
        ))
    }
}

/// `seconds` if it is a finite positive timeout of at most [`MAX_TIMEOUT_S`].
pub fn check_timeout(field: &str, seconds: f64) -> std::result::Result<f64, String> {
    if seconds.is_finite() && seconds > 0.0 && seconds <= MAX_TIMEOUT_S {
        Ok(seconds)
    } else {
        Err(format!(
            "{field} is {seconds}; valid: seconds above 0 and at most {MAX_TIMEOUT_S} (one day)"
        ))
    }
}
