//! One layer timed with one candidate schedule.
//!
//! The protocol is TVM's `time_evaluator` with its `cache_flush` option:
//! after one discarded warm-up run, `repeats` samples, each the mean of
//! enough runs to last at least `min_repeat_ms` (so microsecond layers are
//! not timed at the clock's resolution), and the candidate's cost is the
//! median sample. Before each run (untimed) the pool's threads read
//! [`EVICT_BYTES`] of other data, so the run finds its weights and input
//! where a network run does, in L3, not in the core's L2 from the run
//! before; and the runs are timed on the engine's awake pool, as a
//! network's layers run. Timed back to back in a rayon `install` each,
//! the candidates ranked under conditions no network has: the host
//! campaign's tuned configurations ran 0.999x their untuned ones (median),
//! and one record implied 500 GFLOP/s, the 2-thread FMA peak. Packing the
//! weights for the candidate happens before the clock starts: the engine
//! packs once at load, so packing is not part of inference time.

use crate::records::TaskKey;
use anyhow::{Context, Result};
use dlas_engine::{Activation, Conv2d, LayerKey, Schedule};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;
use std::panic::AssertUnwindSafe;

/// Bytes the threads read before each timed run: 2 MiB a core for two
/// threads, this machine's L2, which leaves little of the run before in
/// it. Twice as much gave the same schedules' network time (ResNet-18
/// tuned 4.78 against 4.77 ms) and took 1.5x as long to tune.
pub const EVICT_BYTES: usize = 4 << 20;

/// How each candidate is timed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timer {
    pub repeats: usize,
    pub min_repeat_ms: f64,
}

impl Default for Timer {
    /// Five samples of at least 2 ms: enough to rank candidates whose costs
    /// differ by a few percent on a quiet machine, cheap enough for hundreds
    /// of trials per layer.
    fn default() -> Self {
        Timer {
            repeats: 5,
            min_repeat_ms: 2.0,
        }
    }
}

/// A layer to tune: its key, its weights, and the threads and batch it
/// will run with.
pub struct LayerProblem {
    pub key: LayerKey,
    /// (out, in / groups, k, k): the real layer's, so sparse kernels see
    /// the real sparsity pattern.
    pub weights: Vec<f32>,
    pub threads: usize,
    pub batch: usize,
    input: Vec<f32>,
    /// What the threads read before each run ([`EVICT_BYTES`]).
    other: Vec<f32>,
    pool: rayon::ThreadPool,
}

/// Tasks the eviction is split into, so both threads take a share.
const EVICT_TASKS: usize = 64;

impl LayerProblem {
    /// A problem for `key` with the layer's `weights`; the input is seeded
    /// uniform noise (timing does not depend on activation values).
    pub fn new(
        key: LayerKey,
        weights: Vec<f32>,
        threads: usize,
        batch: usize,
    ) -> Result<LayerProblem> {
        let mut rng = ChaCha8Rng::seed_from_u64(0x7a5e);
        let input = (0..batch * key.workload.in_len())
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("dlas-tune-{i}"))
            .build()?;
        Ok(LayerProblem {
            key,
            weights,
            threads,
            batch,
            input,
            other: vec![1.0; EVICT_BYTES / 4],
            pool,
        })
    }

    /// The task this problem is: its key, threads and batch.
    pub fn task(&self) -> TaskKey {
        TaskKey {
            layer: self.key,
            threads: self.threads,
            batch: self.batch,
        }
    }

    /// Times the layer with `schedule`: per-run milliseconds of each
    /// repeat. A kernel that panics is reported as an error, not a crash,
    /// so one bad candidate cannot end a search.
    pub fn measure(&self, schedule: Schedule, timer: &Timer) -> Result<Vec<f64>> {
        let w = self.key.workload;
        let conv = Conv2d::new(
            self.key,
            schedule,
            &self.weights,
            None,
            Activation::Identity,
        )
        .with_context(|| format!("packing {w} for {schedule:?}"))?;
        // One output buffer for every run, as the engine's arena gives a
        // layer: a fresh one per run would time its allocation and page
        // faults too (a quarter of a 1x1 layer's time on a 56x56 map).
        let mut out = vec![0.0; self.batch * w.out_len()];
        let other = &self.other;
        let chunk = other.len().div_ceil(EVICT_TASKS);
        let evict = |task: usize| {
            let part = other.chunks(chunk).nth(task).unwrap_or(&[]);
            // One read per 64-byte line.
            black_box(part.iter().step_by(16).fold(0.0f32, |a, &b| a + b));
        };
        let mut runs = |n: usize| {
            let times = conv.time_runs(
                &self.pool,
                (black_box(&self.input), &mut out),
                n,
                (EVICT_TASKS, &evict),
            );
            black_box(&out);
            times.iter().sum::<f64>() * 1e3 / n as f64
        };
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            let first_ms = runs(1);
            let number = ((timer.min_repeat_ms / first_ms.max(1e-6)).ceil() as usize).max(1);
            (0..timer.repeats.max(1)).map(|_| runs(number)).collect()
        }))
        .map_err(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            anyhow::anyhow!("the kernel panicked on {w} with {schedule:?}: {what}")
        })
    }
}

/// The untuned schedule of `task`: what the engine runs without records,
/// and where every search starts.
pub fn default_schedule(task: &TaskKey) -> Schedule {
    task.layer.default_schedule(task.threads)
}
