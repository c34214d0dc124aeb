//! The search on a real (small) layer, resumption from records, and the
//! best-of file; the tuned table applied to a whole network.

use dlas_core::{Algorithm, Dataset, Layout};
use dlas_engine::{DType, Engine, EngineConfig, FormatChoice, LayerKey, Schedule, workload_of};
use dlas_tune::records::{self, Loaded};
use dlas_tune::search::State;
use dlas_tune::{BestOf, Budget, LayerProblem, Record, RecordLog, StopReason, Timer, tune};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashSet;

const QUICK: Timer = Timer {
    repeats: 3,
    min_repeat_ms: 0.2,
};

fn problem(algorithm: Algorithm, format: FormatChoice, out_channels: usize) -> LayerProblem {
    let w = dlas_engine::Workload::new(16, out_channels, 3, 1, 1, 1, 10, 10);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let weights: Vec<f32> = (0..w.out_channels * w.reduction())
        .map(|_| {
            if rng.random_bool(0.2) {
                rng.random_range(-1.0..1.0)
            } else {
                0.0
            }
        })
        .collect();
    let config = EngineConfig {
        threads: 2,
        algorithm,
        format,
        ..EngineConfig::default()
    };
    let key = LayerKey::of(w, &weights, &config).unwrap();
    LayerProblem::new(key, weights, 2, 1).unwrap()
}

fn record(p: &LayerProblem, s: Schedule, r: &anyhow::Result<Vec<f64>>) -> Record {
    Record {
        version: records::VERSION,
        fingerprint: "test-machine".into(),
        task: p.task(),
        schedule: s,
        costs_ms: r.as_ref().ok().cloned().unwrap_or_default(),
        error: r.as_ref().err().map(|e| e.to_string()),
        timestamp: 0,
    }
}

#[test]
fn search_starts_at_the_default_measures_only_valid_new_candidates_and_resumes() {
    for (algorithm, format) in [
        (Algorithm::Gemm, FormatChoice::Dense),
        (Algorithm::SpatialPack, FormatChoice::Csr),
        (Algorithm::Direct, FormatChoice::Bsr { rows: 4, cols: 4 }),
    ] {
        let p = problem(algorithm, format, 32);
        let default = dlas_tune::measure::default_schedule(&p.task()).unwrap();
        let mut log = Vec::new();
        let mut sink = |s: Schedule, r: &anyhow::Result<Vec<f64>>, _: State| {
            log.push(record(&p, s, r));
            Ok(())
        };
        let budget = Budget {
            trials: 12,
            early_stop: 1_000,
        };
        let first = tune(&p, budget, &QUICK, &[], 9, &mut sink).unwrap();
        assert_eq!(first.stop, StopReason::Budget, "{algorithm}");
        assert_eq!(first.trials, 12);
        assert_eq!(log[0].schedule, default, "the search starts at the default");
        assert!(first.best_ms <= first.default_ms.unwrap());
        // Resume from the records: 8 more trials, none repeating a schedule.
        let history: Vec<_> = log.iter().map(|r| (r.schedule, r.cost())).collect();
        let mut more = Vec::new();
        let budget = Budget {
            trials: 20,
            early_stop: 1_000,
        };
        let second = tune(&p, budget, &QUICK, &history, 9, &mut |s, r, _| {
            more.push(record(&p, s, r));
            Ok(())
        })
        .unwrap();
        assert_eq!((second.trials, second.new_trials), (20, 8));
        assert!(second.best_ms <= first.best_ms);
        let all: Vec<Schedule> = log.iter().chain(&more).map(|r| r.schedule).collect();
        let distinct: HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "no schedule is measured twice");
        for s in &all {
            s.validate(&p.key.workload).unwrap();
            assert_eq!(s.algorithm_name(), default.algorithm_name());
        }
    }
}

#[test]
fn early_stop_and_exhaustion_end_a_search() {
    // Direct's space has 10 oc_blocks x 7 row_blocks; with 16 output
    // channels, oc_blocks 24 and 32 are invalid: 56 valid points.
    let p = problem(Algorithm::Direct, FormatChoice::Dense, 16);
    let budget = Budget {
        trials: 10_000,
        early_stop: 3,
    };
    let out = tune(&p, budget, &QUICK, &[], 1, &mut |_, _, _| Ok(())).unwrap();
    assert!(out.trials < 56, "{out:?}");
    assert_eq!(out.stop, StopReason::EarlyStop);
    let budget = Budget {
        trials: 10_000,
        early_stop: 10_000,
    };
    let out = tune(&p, budget, &QUICK, &[], 1, &mut |_, _, _| Ok(())).unwrap();
    assert_eq!(out.stop, StopReason::Exhausted);
    assert_eq!((out.trials, out.rejected), (56, 14), "{out:?}");
}

#[test]
fn the_log_survives_a_torn_line_and_the_best_of_keeps_the_cheapest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.jsonl");
    let p = problem(Algorithm::Gemm, FormatChoice::Dense, 32);
    let default = dlas_tune::measure::default_schedule(&p.task()).unwrap();
    let other = dlas_tune::space::mutate(default, &mut ChaCha8Rng::seed_from_u64(2));
    let mut log = RecordLog::open(&path).unwrap();
    log.append(&record(&p, default, &Ok(vec![2.0, 2.0, 2.0])))
        .unwrap();
    drop(log);
    // A crash in the middle of a write.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"version\":1,\"finger")
        .unwrap();
    let mut log = RecordLog::open(&path).unwrap();
    log.append(&record(&p, other, &Ok(vec![1.0, 1.5, 1.0])))
        .unwrap();
    log.append(&record(&p, other, &Err(anyhow::anyhow!("boom"))))
        .unwrap();
    let Loaded { records, skipped } = records::load(&path).unwrap();
    assert_eq!(records.len(), 3);
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].contains("records.jsonl:2"), "{skipped:?}");
    let best = BestOf::from_records(&records);
    assert_eq!(best.entries.len(), 1);
    let e = &best.entries[0];
    assert_eq!(
        (e.schedule, e.cost_ms, e.default_ms, e.trials),
        (other, 1.0, Some(2.0), 3)
    );
    let saved = dir.path().join("best.json");
    best.save(&saved).unwrap();
    assert_eq!(BestOf::load(&saved).unwrap(), best);
    assert_eq!(best.table("test-machine", 2, 1).len(), 1);
    assert!(best.table("another-machine", 2, 1).is_empty());
    assert!(best.table("test-machine", 1, 1).is_empty());
}

use std::io::Write;

/// Random valid schedules for every layer of MobileNetV2 (CIFAR-10, with
/// depthwise layers run by the direct kernel under gemm) change nothing
/// but the time: the tuned engine computes what the default one does.
#[test]
fn a_tuned_table_applies_to_every_layer_and_keeps_the_result() {
    let graph = (dlas_zoo::find(Dataset::Cifar10, "mobilenetv2")
        .unwrap()
        .build)();
    let weights = dlas_zoo::weights::generate(&graph, 3);
    let input = dlas_zoo::weights::input(&graph, 3, 1);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for (algorithm, layout) in [
        (Algorithm::Gemm, Layout::Nchw),
        (Algorithm::SpatialPack, Layout::Nchw),
        (Algorithm::Gemm, Layout::Nhwc),
    ] {
        let config = EngineConfig {
            threads: 2,
            algorithm,
            format: FormatChoice::Dense,
            layout,
            dtype: DType::F32,
            schedule: None,
            quant: None,
        };
        let mut table = dlas_engine::ScheduleTable::default();
        let mut kernels = HashSet::new();
        for id in 0..graph.nodes.len() {
            let Some(w) = workload_of(&graph, id) else {
                continue;
            };
            let wt = match &weights.by_node[id] {
                Some(dlas_zoo::weights::Params::Conv { weight, .. })
                | Some(dlas_zoo::weights::Params::Linear { weight, .. }) => weight,
                _ => panic!("a layer without weights"),
            };
            let key = LayerKey::of(w, wt, &config).unwrap();
            kernels.insert(key.kernel);
            let task = dlas_tune::TaskKey {
                layer: key,
                threads: 2,
                batch: 1,
            };
            let default = dlas_tune::measure::default_schedule(&task).unwrap();
            let s = loop {
                let s = dlas_tune::space::random(default, &mut rng);
                if s.validate(&w).is_ok() {
                    break s;
                }
            };
            table.insert(key, s);
        }
        if layout == Layout::Nchw {
            assert!(
                kernels.contains(&Algorithm::Direct),
                "depthwise runs direct"
            );
        }
        let plain = Engine::compile(&graph, &weights, &config).unwrap();
        let tuned = Engine::compile_with(&graph, &weights, &config, &table).unwrap();
        assert!(tuned.default_scheduled().is_empty());
        assert_eq!(plain.default_scheduled().len(), plain.layers().count());
        let (a, b) = (plain.run(&input, 1).unwrap(), tuned.run(&input, 1).unwrap());
        let err: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| ((x - y) as f64).powi(2))
            .sum();
        let norm: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum();
        assert!(
            (err / norm).sqrt() < 1e-5,
            "{algorithm} {layout}: {}",
            (err / norm).sqrt()
        );
    }
}
