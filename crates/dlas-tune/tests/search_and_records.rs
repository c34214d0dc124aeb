//! The search on a real (small) layer, resumption from records, and the
//! best-of file; the tuned table applied to a whole network.

use dlas_core::{Dataset, Layout};
use dlas_engine::{
    DType, Engine, EngineConfig, FormatChoice, KernelAlgorithm, LayerKey, Schedule, workload_of,
};
use dlas_tune::records::{self, Loaded};
use dlas_tune::search::State;
use dlas_tune::{BestOf, Budget, LayerProblem, Phase, Record, RecordLog, StopReason, Timer, tune};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashSet;

const QUICK: Timer = Timer {
    repeats: 3,
    min_repeat_ms: 0.2,
};

fn problem(algorithm: KernelAlgorithm, format: FormatChoice, out_channels: usize) -> LayerProblem {
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

fn record(p: &LayerProblem, s: Schedule, phase: Phase, r: &anyhow::Result<Vec<f64>>) -> Record {
    Record {
        version: records::VERSION,
        fingerprint: "test-machine".into(),
        task: p.task(),
        schedule: s,
        costs_ms: r.as_ref().ok().cloned().unwrap_or_default(),
        error: r.as_ref().err().map(|e| e.to_string()),
        timestamp: 0,
        phase,
    }
}

fn search_schedules(log: &[Record]) -> Vec<Schedule> {
    log.iter()
        .filter(|r| r.phase == Phase::Search)
        .map(|r| r.schedule)
        .collect()
}

#[test]
fn search_starts_at_the_default_measures_only_valid_new_candidates_and_resumes() {
    for (algorithm, format) in [
        (KernelAlgorithm::Gemm, FormatChoice::Dense),
        (KernelAlgorithm::SpatialPack, FormatChoice::Csr),
        (KernelAlgorithm::Winograd, FormatChoice::Dense),
        (
            KernelAlgorithm::Direct,
            FormatChoice::Bsr { rows: 4, cols: 4 },
        ),
    ] {
        let p = problem(algorithm, format, 32);
        let default = dlas_tune::measure::default_schedule(&p.task());
        let mut log = Vec::new();
        let mut sink = |s: Schedule, phase, r: &anyhow::Result<Vec<f64>>, _: State| {
            log.push(record(&p, s, phase, r));
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
        assert!(first.confirmed);
        // The four best and the default (if it is not among them), each
        // in three interleaved rounds after the search.
        let n = first.new_confirmations / 3;
        assert!(n == 4 || n == 5, "{first:?}");
        assert_eq!(first.new_confirmations, 3 * n);
        let confirmations: Vec<Schedule> = log[12..].iter().map(|r| r.schedule).collect();
        assert!(log[12..].iter().all(|r| r.phase == Phase::Confirm));
        assert_eq!(confirmations[..n], confirmations[n..2 * n]);
        assert_eq!(confirmations[..n], confirmations[2 * n..]);
        assert!(confirmations[..n].contains(&default));
        assert!(confirmations[..n].contains(&first.best));
        assert!(first.best_ms <= first.default_ms.unwrap());
        // The best-of file decides as the search did.
        let best = BestOf::from_records(&log);
        let e = &best.entries[0];
        assert_eq!(
            (e.schedule, e.cost_ms, e.default_ms, e.trials),
            (first.best, first.best_ms, first.default_ms, 12)
        );
        // Resuming with the same budget measures nothing.
        let again = tune(&p, budget, &QUICK, &log, 9, &mut |_, _, _, _| {
            panic!("a finished search measured again")
        })
        .unwrap();
        assert_eq!((again.best, again.best_ms), (first.best, first.best_ms));
        // Resume from the records: 8 more trials, none repeating a schedule.
        let mut more = Vec::new();
        let budget = Budget {
            trials: 20,
            early_stop: 1_000,
        };
        let second = tune(&p, budget, &QUICK, &log, 9, &mut |s, phase, r, _| {
            more.push(record(&p, s, phase, r));
            Ok(())
        })
        .unwrap();
        assert_eq!((second.trials, second.new_trials), (20, 8));
        assert!(second.search_best_ms <= first.search_best_ms);
        let all: Vec<Schedule> = search_schedules(&log)
            .into_iter()
            .chain(search_schedules(&more))
            .collect();
        let distinct: HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "no schedule is measured twice");
        for s in &all {
            s.validate(&p.key.workload).unwrap();
            assert_eq!(s.algorithm(), default.algorithm());
        }
    }
}

#[test]
fn early_stop_and_exhaustion_end_a_search() {
    // Direct's space has 10 oc_blocks x 7 row_blocks; with 16 output
    // channels, oc_blocks 24 and 32 are invalid: 56 valid points.
    let p = problem(KernelAlgorithm::Direct, FormatChoice::Dense, 16);
    let budget = Budget {
        trials: 10_000,
        early_stop: 3,
    };
    let out = tune(&p, budget, &QUICK, &[], 1, &mut |_, _, _, _| Ok(())).unwrap();
    assert!(out.trials < 56, "{out:?}");
    assert_eq!(out.stop, StopReason::EarlyStop);
    let budget = Budget {
        trials: 10_000,
        early_stop: 10_000,
    };
    let out = tune(&p, budget, &QUICK, &[], 1, &mut |_, _, _, _| Ok(())).unwrap();
    assert_eq!(out.stop, StopReason::Exhausted);
    assert_eq!((out.trials, out.rejected), (56, 14), "{out:?}");
}

#[test]
fn the_log_survives_a_torn_line_and_the_best_of_keeps_the_cheapest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.jsonl");
    let p = problem(KernelAlgorithm::Gemm, FormatChoice::Dense, 32);
    let default = dlas_tune::measure::default_schedule(&p.task());
    let other = dlas_tune::space::mutate(default, &mut ChaCha8Rng::seed_from_u64(2));
    let mut log = RecordLog::open(&path).unwrap();
    log.append(&record(
        &p,
        default,
        Phase::Search,
        &Ok(vec![2.0, 2.0, 2.0]),
    ))
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
    log.append(&record(&p, other, Phase::Search, &Ok(vec![1.0, 1.5, 1.0])))
        .unwrap();
    log.append(&record(
        &p,
        other,
        Phase::Search,
        &Err(anyhow::anyhow!("boom")),
    ))
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
    // A search record is written as before confirmation existed; a
    // confirmation record says what it is.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("phase"), "{text}");
    let confirm = record(&p, other, Phase::Confirm, &Ok(vec![1.0]));
    let line = serde_json::to_string(&confirm).unwrap();
    assert!(line.ends_with(r#","phase":"confirm"}"#), "{line}");
    assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), confirm);
    let saved = dir.path().join("best.json");
    best.save(&saved).unwrap();
    assert_eq!(BestOf::load(&saved).unwrap(), best);
    assert_eq!(best.table("test-machine", 2, 1).len(), 1);
    assert!(best.table("another-machine", 2, 1).is_empty());
    assert!(best.table("test-machine", 1, 1).is_empty());
}

use std::io::Write;

/// The winner's curse, by hand: the search ranks A (1.0 ms) over B
/// (1.2 ms) over the default (2.0 ms), but the confirmation rounds find A
/// slower than B. The kept schedule is B at the median of its pooled
/// rounds; until every finalist has a round, the search's ranking stands.
#[test]
fn confirmation_rounds_decide_the_winner_once_every_finalist_has_one() {
    let p = problem(KernelAlgorithm::Gemm, FormatChoice::Dense, 32);
    let default = dlas_tune::measure::default_schedule(&p.task());
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let mut distinct = vec![default];
    while distinct.len() < 3 {
        let s = dlas_tune::space::mutate(default, &mut rng);
        if !distinct.contains(&s) {
            distinct.push(s);
        }
    }
    let (a, b) = (distinct[1], distinct[2]);
    let at = |s, phase, ms: &[f64]| record(&p, s, phase, &Ok(ms.to_vec()));
    let mut log = vec![
        at(default, Phase::Search, &[2.0]),
        at(a, Phase::Search, &[1.0]),
        at(b, Phase::Search, &[1.2]),
        at(a, Phase::Confirm, &[1.5, 1.4]),
        at(b, Phase::Confirm, &[1.1, 1.3]),
    ];
    let decide = |log: &[Record]| {
        let history: Vec<_> = log.iter().map(Into::into).collect();
        dlas_tune::confirm::decide(&history).unwrap()
    };
    assert_eq!(
        dlas_tune::confirm::finalists(&log.iter().map(Into::into).collect::<Vec<_>>()),
        vec![a, b, default]
    );
    let d = decide(&log);
    assert_eq!(
        (d.best, d.best_ms, d.confirmed),
        (a, 1.0, false),
        "default unconfirmed"
    );
    log.push(at(default, Phase::Confirm, &[2.2, 2.0]));
    log.push(at(b, Phase::Confirm, &[1.0]));
    let d = decide(&log);
    assert_eq!(
        (d.best, d.best_ms, d.default_ms, d.confirmed),
        (b, 1.1, Some(2.1), true)
    );
    let e = BestOf::from_records(&log).entries[0].clone();
    assert_eq!(
        (e.schedule, e.cost_ms, e.default_ms, e.trials),
        (b, 1.1, Some(2.1), 3)
    );
}

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
        (KernelAlgorithm::Gemm, Layout::Nchw),
        (KernelAlgorithm::SpatialPack, Layout::Nchw),
        (KernelAlgorithm::Gemm, Layout::Nhwc),
        (KernelAlgorithm::Winograd, Layout::Nchw),
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
            let default = dlas_tune::measure::default_schedule(&task);
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
                kernels.contains(&KernelAlgorithm::Direct),
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

/// The committed best-of files are what their committed records decide:
/// derived, never edited, applicable to their layers, and unchanged by how the decision is made for
/// logs without confirmation rounds.
#[test]
fn committed_best_of_files_are_derived_from_their_records() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for study in ["dlas", "compilers"] {
        let dir = root.join("data/results").join(study).join("tuning");
        let loaded = records::load(&dir.join("records.jsonl")).unwrap();
        assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
        let committed = BestOf::load(&dir.join("best.json")).unwrap();
        assert!(!committed.entries.is_empty(), "{study}");
        let derived = BestOf::from_records(&loaded.records);
        assert_eq!(derived.entries.len(), committed.entries.len(), "{study}");
        for (d, c) in derived.entries.iter().zip(&committed.entries) {
            assert_eq!(d, c, "{study}: {}", c.task);
            // The engine builds a layer from a key and a schedule of the
            // key's kernel algorithm, so every entry can apply.
            assert_eq!(
                c.schedule.algorithm(),
                c.task.layer.kernel,
                "{study}: {}",
                c.task
            );
        }
    }
}
