//! Apache TVM as a measured compiler (issue 41): under each of the three
//! algorithms its convolutions are legalized to, untuned and tuned, it
//! gives ONNX Runtime's logits, and a tuned session applies the database
//! MetaSchedule wrote. Needs TVM's environment (`cargo xtask setup --tvm`)
//! and the ONNX Runtime library (`cargo xtask setup`); `cargo xtask test`
//! leaves these tests out, counted as skipped, where TVM is not set up,
//! and `.ci/run` sets it up.

use dlas_backends::{Session, SessionConfig, TVM, relative_l2, tvm_runtime};
use dlas_core::{Algorithm, Combination, Dataset};
use dlas_runner::tvm_tuning;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A small CIFAR-10 network with what the legalization handles (dense
/// 3x3 and 1x1 convolutions, stride 2) and what it leaves to TVM's own
/// (a depthwise convolution), pooling and a linear layer.
fn small_model(dir: &Path) -> PathBuf {
    use dlas_zoo::Op;
    let mut g = dlas_zoo::GraphBuilder::new("small", Dataset::Cifar10);
    let x = g.input();
    let x = g.conv_bn(x, 16, 3, 1, 1, Some(Op::Relu));
    let x = g.conv_bn(x, 16, 3, 2, 1, Some(Op::Relu));
    let x = g.conv(x, 16, 3, 1, 1, 16, true);
    let x = g.conv_bn(x, 32, 1, 1, 1, Some(Op::Relu6));
    let x = g.global_avg_pool(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    let graph = g.finish();
    let path = dir.join("small.onnx");
    std::fs::write(
        &path,
        dlas_onnx::export(&graph, &dlas_zoo::weights::generate(&graph, 3)),
    )
    .unwrap();
    path
}

/// The small network's tuned TVM combination under `algorithm`.
fn tuned_small(algorithm: Algorithm) -> Combination {
    Combination {
        algorithm,
        tuned: true,
        ..Combination::host(Dataset::Cifar10, "small", TVM)
    }
}

/// A tuning of `c`'s small network with a budget small enough for a test.
fn small_job<'a>(
    c: &'a Combination,
    model: &Path,
    trials_per_task: usize,
    population: usize,
) -> tvm_tuning::Job<'a> {
    tvm_tuning::Job {
        combination: c,
        model: model.to_path_buf(),
        input_shape: [1, 3, 32, 32],
        threads: 2,
        trials_per_task,
        population,
        seed: 5,
    }
}

fn config(tvm: Option<tvm_runtime::Options>) -> SessionConfig {
    SessionConfig {
        input_shape: [1, 3, 32, 32],
        threads: 2,
        half_io: false,
        tvm,
    }
}

fn input() -> Vec<f32> {
    (0..3 * 32 * 32)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect()
}

/// ONNX Runtime's logits, the reference.
fn reference(model: &Path) -> Vec<f32> {
    let library = dlas_backends::ort_runtime::library_path(&root());
    dlas_backends::ort_runtime::init(&library).unwrap();
    dlas_backends::load("ort-noopt", model, &config(None))
        .unwrap()
        .run(&input())
        .unwrap()
}

fn options(algorithm: &str, database: Option<PathBuf>) -> tvm_runtime::Options {
    tvm_runtime::Options {
        python: tvm_runtime::python(&root()),
        algorithm: algorithm.into(),
        database,
        foreign: false,
    }
}

fn run(model: &Path, options: tvm_runtime::Options) -> (Box<dyn Session>, Vec<f32>) {
    let mut session = dlas_backends::load(TVM, model, &config(Some(options))).unwrap();
    let output = session.run(&input()).unwrap();
    (session, output)
}

#[test]
fn tvm_agrees_with_onnx_runtime_under_every_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let model = small_model(dir.path());
    let expected = reference(&model);
    for algorithm in tvm_runtime::ALGORITHMS {
        let (session, output) = run(&model, options(algorithm, None));
        let error = relative_l2(&output, &expected);
        assert!(error < 1e-4, "{algorithm}: relative L2 {error}");
        let provider = session.provider();
        assert!(
            provider.contains(&format!("{algorithm} convolutions, untuned")),
            "{provider}"
        );
        let time = session.inner_time().expect("TVM reports its own time");
        assert!(time.as_nanos() > 0);
    }
}

#[test]
fn a_tuned_session_applies_the_database_metaschedule_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let model = small_model(dir.path());
    let expected = reference(&model);
    let results = dir.path().join("results");
    let c = tuned_small(Algorithm::Gemm);
    let job = small_job(&c, &model, 2, 16);
    let summary = tvm_tuning::tune(&root(), &results, &job)
        .unwrap()
        .expect("tuned now");
    assert!(summary.tuned_tasks > 0 && summary.trials > 0, "{summary:?}");
    let database = tvm_tuning::database_dir(&results, &c);
    assert!(database.join("database_tuning_record.json").is_file());
    assert!(
        !database.join("logs").exists(),
        "MetaSchedule's logs are not kept"
    );
    assert!(tvm_tuning::is_tuned(&results, &c));
    // A second tuning of the same network keeps the database.
    assert_eq!(tvm_tuning::tune(&root(), &results, &job).unwrap(), None);
    let (session, output) = run(&model, tvm_tuning::options(&root(), &results, &c, false));
    let provider = session.provider();
    assert!(
        provider.contains("gemm convolutions, tuned: "),
        "{provider}"
    );
    assert!(!provider.contains("tuned: 0 of"), "{provider}");
    let error = relative_l2(&output, &expected);
    assert!(error < 1e-4, "tuned: relative L2 {error}");
    let described = tvm_tuning::describe(dir.path(), &results, &c).unwrap();
    assert!(
        described.starts_with(
            "; MetaSchedule database results/tuning/tvm/cifar10-small-dense-gemm-b1: "
        ),
        "{described}"
    );

    // The same database as if tuned on another CPU: refused, unless the
    // caller accepts another CPU's schedules, and then the row says so.
    let records = database.join("database_tuning_record.json");
    let moved: String = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(|line| {
            let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
            record[1][2]["mcpu"] = "bdver1".into();
            format!("{record}\n")
        })
        .collect();
    std::fs::write(&records, moved).unwrap();
    let refused = dlas_backends::load(
        TVM,
        &model,
        &config(Some(tvm_tuning::options(&root(), &results, &c, false))),
    )
    .err()
    .expect("another CPU's database is refused")
    .to_string();
    assert!(
        refused.contains("tuned on bdver1") && refused.contains("--foreign-tuning"),
        "{refused}"
    );
    let (session, output) = run(&model, tvm_tuning::options(&root(), &results, &c, true));
    let provider = session.provider();
    assert!(
        provider.contains("tuned on another CPU (bdver1)"),
        "{provider}"
    );
    assert!(relative_l2(&output, &expected) < 1e-4);
}

#[test]
fn an_interrupted_tuning_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let model = small_model(dir.path());
    let results = dir.path().join("results");
    let c = tuned_small(Algorithm::Direct);
    let job = small_job(&c, &model, 1, 8);
    let whole = tvm_tuning::tune(&root(), &results, &job)
        .unwrap()
        .expect("tuned now");
    assert_eq!(whole.sessions, 1);
    // The finished tuning made unfinished again, as if interrupted after
    // its first task: moved back to `.partial`, the first task's records
    // kept, and a session that started 100 s before its last record.
    let database = tvm_tuning::database_dir(&results, &c);
    let partial = database.with_extension("partial");
    std::fs::rename(&database, &partial).unwrap();
    std::fs::remove_file(partial.join("tuning.json")).unwrap();
    let records = partial.join("database_tuning_record.json");
    let first_task = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()[0] == 0)
            .map(String::from)
            .collect()
    };
    let kept = first_task(&std::fs::read_to_string(&records).unwrap());
    assert!(!kept.is_empty() && kept.len() < whole.trials, "{whole:?}");
    let write_records = |mcpu: Option<&str>| {
        let text: String = kept
            .iter()
            .map(|line| match mcpu {
                None => format!("{line}\n"),
                Some(mcpu) => {
                    let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
                    record[1][2]["mcpu"] = mcpu.into();
                    format!("{record}\n")
                }
            })
            .collect();
        std::fs::write(&records, text).unwrap();
    };
    let interrupted = |started: f64| {
        let progress = serde_json::json!({
            "earlier_s": 0.0, "sessions": 1, "started_unix_s": started,
        });
        std::fs::write(partial.join("progress.json"), progress.to_string()).unwrap();
    };
    let last_record = || {
        std::fs::metadata(&records)
            .unwrap()
            .modified()
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    // Another CPU's unfinished tuning is not resumed here: its candidates'
    // times are that CPU's.
    write_records(Some("bdver1"));
    interrupted(last_record() - 100.0);
    let refused = tvm_tuning::tune(&root(), &results, &job)
        .expect_err("another CPU's unfinished tuning is refused")
        .to_string();
    assert!(
        refused.contains("unfinished tuning measured on bdver1") && refused.contains("remove"),
        "{refused}"
    );
    // The kill also left a half-written record, which is dropped.
    write_records(None);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&records)
        .unwrap();
    std::io::Write::write_all(&mut file, b"[0,[[[[\"GetSBlock\"").unwrap();
    drop(file);
    interrupted(last_record() - 100.0);
    let resumed = tvm_tuning::tune(&root(), &results, &job)
        .unwrap()
        .expect("tuned now");
    assert_eq!(resumed.sessions, 2);
    assert!(resumed.wall_s >= 100.0, "{resumed:?}");
    assert_eq!(resumed.tasks, whole.tasks);
    assert_eq!(resumed.tuned_tasks, whole.tuned_tasks, "{resumed:?}");
    // The first task was not tuned again; the others were.
    let text = std::fs::read_to_string(database.join("database_tuning_record.json")).unwrap();
    assert_eq!(first_task(&text), kept);
    assert_eq!(resumed.trials, text.lines().count());
    assert!(resumed.trials > kept.len(), "{resumed:?}");
    assert!(!database.join("progress.json").exists());
    assert!(!partial.exists());
    let described = tvm_tuning::describe(dir.path(), &results, &c).unwrap();
    assert!(
        described.contains(" s in 2 sessions on 2 thread(s)"),
        "{described}"
    );
}
