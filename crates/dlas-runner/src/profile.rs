//! Where a network's time goes: the native engine's steps beside ONNX
//! Runtime's nodes, on the same ONNX file in one run (`dlas bench
//! profile` prints it).
//!
//! A whole-network ratio (`dlas bench engine`) says by how much the engine
//! is behind; this says where. The engine times each step of a run
//! ([`dlas_engine::Engine::profile`]); ONNX Runtime, with all graph
//! optimizations, times each node with its own profiler. The two run in
//! alternating rounds, so the machine's drift falls on both, and each
//! step's and node's time is its median over the timed runs. Steps and
//! nodes are grouped by the map they read (224x224 down to 7x7; the
//! classifier's vectors as `1x1`), where the two graphs correspond even
//! though they fuse differently, and by kind within each side.

use anyhow::{Context, Result, bail};
use dlas_backends::SessionConfig;
use dlas_backends::ort_runtime::{self, Level, NodeTime};
use dlas_core::{Combination, Summary};
use dlas_engine::StepTime;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Rounds the timed runs are split into, the two sides alternating.
pub const ROUNDS: usize = 5;
/// Untimed runs of each side in each round.
pub const WARMUP: usize = 10;

/// Both sides' profiles of one network.
#[derive(Debug)]
pub struct Profile {
    pub native: Side,
    pub ort: Side,
    /// Timed runs of each side.
    pub runs: usize,
}

/// Profiles the native engine under `native`'s configuration (with the
/// schedules of `tuned` where given, layers without one at their default;
/// else default schedules) and ONNX Runtime with all optimizations on the fp32 file
/// `model`, batch 1, `runs` timed runs each (rounded down to whole
/// rounds); `round_done` is called after each of the [`ROUNDS`] rounds.
pub fn profile(
    model: &Path,
    (native, tuned): (&Combination, Option<&crate::tuning::Tuned>),
    input: &[f32],
    (runs, threads): (usize, usize),
    mut round_done: impl FnMut(),
) -> Result<Profile> {
    if runs < ROUNDS {
        bail!("profiles take at least {ROUNDS} timed runs (one per round), not {runs}");
    }
    let bytes = std::fs::read(model).with_context(|| format!("cannot read {}", model.display()))?;
    let (graph, weights) = dlas_onnx::import(&bytes, &native.model, native.dataset)?;
    let config = crate::native::engine_config(native, threads, &graph, &weights)?;
    let engine = match tuned {
        None => dlas_engine::Engine::compile(&graph, &weights, &config)?,
        Some(t) => {
            let table = t.table(threads, native.batch);
            dlas_engine::Engine::compile_with(&graph, &weights, &config, &table)?
        }
    };
    let [c, h, w] = native.dataset.input_chw();
    let session = SessionConfig {
        input_shape: [1, c, h, w],
        threads,
        half_io: false,
        tvm: None,
    };
    let per_round = runs / ROUNDS;
    let (mut steps, mut nodes) = (Vec::new(), Vec::new());
    let (mut native_runs, mut ort_runs) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for run in 0..WARMUP + per_round {
            let started = std::time::Instant::now();
            let (_, times) = engine.profile(input, 1)?;
            if run >= WARMUP {
                native_runs.push(started.elapsed().as_secs_f64());
                steps.push(times);
            }
        }
        for run in ort_runtime::profile(model, &session, Level::All, input, (WARMUP, per_round))? {
            ort_runs.push(run.seconds);
            nodes.push(run.nodes);
        }
        round_done();
    }
    let median = |runs: &[f64]| Summary::from_samples(runs).map_or(f64::NAN, |s| s.median);
    Ok(Profile {
        native: Side {
            run: median(&native_runs),
            ..Side::of_engine(&steps)?
        },
        ort: Side {
            run: median(&ort_runs),
            ..Side::of_ort(&nodes)?
        },
        runs: ROUNDS * per_round,
    })
}

/// One step (or node) of a side's profile: its median time over the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The step's kind (the engine's) or operator (ONNX Runtime's).
    pub kind: String,
    /// Its first input's and its output's (c, h, w) per sample; a vector
    /// (the classifier's) as (n, 1, 1).
    pub input: [usize; 3],
    pub output: [usize; 3],
    pub seconds: f64,
}

/// One side's profile: each step's (or node's) median time, in order.
#[derive(Debug, Default)]
pub struct Side {
    pub items: Vec<Item>,
    /// The median whole run: the steps and what runs between them
    /// (the engine's bookkeeping of values, ONNX Runtime's executor).
    pub run: f64,
}

impl Side {
    /// Time and steps per input map (h, w): grouped by what they read, a
    /// fused expansion and stride-2 depthwise layer fall where ONNX
    /// Runtime's two nodes do.
    pub fn by_map(&self) -> BTreeMap<(usize, usize), (f64, usize)> {
        self.sum_by(|i| (i.input[1], i.input[2]))
    }

    pub fn by_kind(&self) -> BTreeMap<String, (f64, usize)> {
        self.sum_by(|i| i.kind.clone())
    }

    pub fn total(&self) -> f64 {
        self.items.iter().map(|i| i.seconds).sum()
    }

    fn sum_by<K: Ord>(&self, key: impl Fn(&Item) -> K) -> BTreeMap<K, (f64, usize)> {
        let mut sums = BTreeMap::new();
        for item in &self.items {
            let s: &mut (f64, usize) = sums.entry(key(item)).or_default();
            (s.0, s.1) = (s.0 + item.seconds, s.1 + 1);
        }
        sums
    }

    /// Per step, the median over runs, in the first run's order: steps
    /// are the same in every run by their `key` (a node's name, a step's
    /// position), which must be in every run once.
    fn from_runs<T>(
        runs: &[Vec<T>],
        describe: impl Fn(usize, &T) -> (String, Item, f64),
    ) -> Result<Side> {
        let Some(first) = runs.first() else {
            bail!("no timed runs");
        };
        let keyed: Vec<HashMap<String, f64>> = runs
            .iter()
            .map(|run| {
                let map: HashMap<String, f64> = run
                    .iter()
                    .enumerate()
                    .map(|(i, step)| {
                        let (key, _, seconds) = describe(i, step);
                        (key, seconds)
                    })
                    .collect();
                anyhow::ensure!(map.len() == run.len(), "a run's profile lists a step twice");
                Ok(map)
            })
            .collect::<Result<_>>()?;
        let mut side = Side::default();
        for (i, step) in first.iter().enumerate() {
            let (key, item, _) = describe(i, step);
            let samples = keyed
                .iter()
                .map(|run| {
                    run.get(&key).copied().with_context(|| {
                        format!(
                            "the runs' profiles list different steps: {key} is missing from one"
                        )
                    })
                })
                .collect::<Result<Vec<f64>>>()?;
            let seconds = Summary::from_samples(&samples)
                .context("a step without a finite time")?
                .median;
            side.items.push(Item { seconds, ..item });
        }
        Ok(side)
    }

    fn of_engine(runs: &[Vec<StepTime>]) -> Result<Side> {
        Side::from_runs(runs, |i, s| {
            let item = Item {
                kind: s.kind.clone(),
                input: s.input,
                output: s.output,
                seconds: 0.0,
            };
            (format!("step {i} ({})", s.kind), item, s.seconds)
        })
    }

    fn of_ort(runs: &[Vec<NodeTime>]) -> Result<Side> {
        // A shape with its batch: (c, h, w), a vector as (n, 1, 1).
        let chw = |shape: &[usize]| match shape {
            [_, c, h, w, ..] => [*c, *h, *w],
            [_, n] => [*n, 1, 1],
            _ => [0, 1, 1],
        };
        Side::from_runs(runs, |_, n| {
            let item = Item {
                kind: n.op.clone(),
                input: chw(&n.input),
                output: chw(&n.output),
                seconds: 0.0,
            };
            (n.name.clone(), item, n.seconds)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_summed_by_map_and_kind_from_their_medians() {
        let step = |kind: &str, input, seconds| StepTime {
            kind: kind.into(),
            input,
            output: [16, 7, 7],
            seconds,
        };
        let runs = vec![
            vec![
                step("direct 1x1", [32, 7, 7], 1.0),
                step("add", [16, 7, 7], 0.1),
            ],
            vec![
                step("direct 1x1", [32, 7, 7], 3.0),
                step("add", [16, 7, 7], 0.3),
            ],
            vec![
                step("direct 1x1", [32, 7, 7], 2.0),
                step("add", [16, 7, 7], 0.2),
            ],
        ];
        let side = Side::of_engine(&runs).unwrap();
        let (t, n) = side.by_map()[&(7, 7)];
        assert!((t - 2.2).abs() < 1e-12 && n == 2);
        assert!((side.by_kind()["add"].0 - 0.2).abs() < 1e-12);
        assert!((side.total() - 2.2).abs() < 1e-12);
        let mut other = runs.clone();
        other[1][1].kind = "mul".into();
        assert!(Side::of_engine(&other).is_err());
    }

    #[test]
    fn onnx_runtime_nodes_are_read_as_maps_or_vectors() {
        let node = |name: &str, input: Vec<usize>| NodeTime {
            name: name.into(),
            op: "Conv".into(),
            input,
            output: vec![1, 1000],
            seconds: 1e-3,
        };
        let (a, b) = (node("a", vec![1, 16, 14, 14]), node("b", vec![1, 1280]));
        // The second run lists the same nodes in another order.
        let side = Side::of_ort(&[vec![a.clone(), b.clone()], vec![b, a]]).unwrap();
        assert_eq!(side.items[0].input, [16, 14, 14]);
        assert_eq!(side.items[1].input, [1280, 1, 1]);
        assert_eq!(side.items[1].output, [1000, 1, 1]);
        assert_eq!(side.by_map().len(), 2);
    }
}
