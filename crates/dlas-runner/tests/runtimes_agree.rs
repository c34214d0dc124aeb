//! tract, ONNX Runtime and the native engine's three algorithms agree on
//! every CIFAR-10 network (fp32, seeded input, same ONNX file, relative L2
//! under 1e-4). Needs the ONNX Runtime library from
//! `cargo xtask setup`; CI runs setup first, so there the test must run.

// Helpers outside #[test] functions print too (clippy.toml lets only tests print).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use dlas_core::{Dataset, Plan, Study};
use dlas_runner::crosscheck::{TOLERANCE, crosscheck, runners_of};
use std::path::{Path, PathBuf};

/// The project root and the ONNX Runtime library, or `None` (the test is
/// skipped, saying why) where `cargo xtask setup` has not fetched it; in CI
/// the library must be there, so a missing one fails the test that uses it.
fn ort_library() -> Option<(PathBuf, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let library = dlas_backends::ort_runtime::library_path(&root);
    if !library.is_file() && std::env::var_os("CI").is_none() {
        eprintln!(
            "skipped: {} missing (run `cargo xtask setup`)",
            library.display()
        );
        return None;
    }
    Some((root, library))
}

#[test]
fn cifar10_networks_agree_across_runtimes_and_the_native_engine() {
    let Some((root, _)) = ort_library() else {
        return;
    };
    let study = Study::load("dlas", &root.join("data/studies")).unwrap();
    let plan = Plan::expand(&study);
    // TVM builds each network for seconds per algorithm and needs its own
    // environment: `tests/tvm.rs` checks it.
    let networks: Vec<_> = runners_of(&plan.combinations)
        .into_iter()
        .filter(|((d, _), _)| *d == Dataset::Cifar10)
        .map(|(net, runners)| {
            let runners = runners
                .into_iter()
                .filter(|r| r.compiler != dlas_backends::TVM)
                .collect();
            (net, runners)
        })
        .collect();
    let agreements = crosscheck(&root, &study, &networks, 7, &mut |_| {}).unwrap();
    assert_eq!(
        agreements.len(),
        4 * 9,
        "tract (2), ONNX Runtime (1), OpenVINO (2) and 4 native algorithms per network against ort-noopt"
    );
    for a in &agreements {
        assert!(
            a.agrees(),
            "{} {} {}: {:?}",
            a.dataset,
            a.model,
            a.compiler,
            a.relative_l2
        );
    }
}

/// Only the compilers a study runs on the host are compared, and one that
/// fails is reported while the others go on.
#[test]
fn crosscheck_compares_the_listed_compilers_and_goes_past_a_failure() {
    use dlas_core::Filter;
    let Some((root, _)) = ort_library() else {
        return;
    };
    let study = Study::load("dlas", &root.join("data/studies")).unwrap();
    let filter =
        Filter::parse("model=mobilenetv1,compiler=ort-noopt|tract-opt|native,algorithm=auto|gemm")
            .unwrap();
    let mut networks = runners_of(&Plan::expand(&study).filtered(&filter).combinations);
    assert_eq!(networks.len(), 1);
    let names: Vec<String> = networks[0].1.iter().map(|r| r.compiler.clone()).collect();
    assert_eq!(names, ["native", "tract-opt", "ort-noopt"]);
    // A runner that cannot load: the study's file is there, the compiler is not.
    networks[0].1.insert(
        0,
        dlas_runner::crosscheck::Runner {
            compiler: "no-such-runtime".into(),
            algorithm: dlas_core::Algorithm::Auto,
        },
    );
    let agreements = crosscheck(&root, &study, &networks, 7, &mut |_| {}).unwrap();
    let of = |name: &str| agreements.iter().find(|a| a.compiler == name).unwrap();
    assert!(of("no-such-runtime").relative_l2.is_err());
    assert!(of("native gemm").agrees(), "{:?}", of("native gemm"));
    assert!(of("tract-opt").agrees(), "{:?}", of("tract-opt"));
    assert_eq!(agreements.len(), 3);
}

/// The compiler study's modern networks and the block models of the new
/// block kinds: ONNX Runtime optimized and both tract levels agree with
/// ONNX Runtime unoptimized (tract-opt itself agrees with the zoo's f64
/// reference in dlas-onnx's `transformers` tests, so every runtime is tied
/// to it). The files are exported here, as no study pins them yet.
#[test]
fn transformer_networks_agree_across_runtimes() {
    use dlas_backends::{SessionConfig, ort_runtime, relative_l2};
    let Some((_, library)) = ort_library() else {
        return;
    };
    ort_runtime::init(&library).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = SessionConfig {
        input_shape: [1, 3, 224, 224],
        threads: 2,
        half_io: false,
        tvm: None,
    };
    for name in [
        "convnext_t",
        "deit_tiny",
        "vit_s16",
        "swin_t",
        "blocks-convnext-2",
        "blocks-transformer-2",
    ] {
        let graph = (dlas_zoo::find(Dataset::Imagenet, name).unwrap().build)();
        let weights = dlas_zoo::weights::generate(&graph, dlas_zoo::weights::MODEL_SEED);
        let path = dir.path().join(format!("{name}.onnx"));
        std::fs::write(&path, dlas_onnx::export(&graph, &weights)).unwrap();
        let input = dlas_zoo::weights::input(&graph, 7, 1);
        let reference = dlas_backends::load("ort-noopt", &path, &config)
            .unwrap()
            .run(&input)
            .unwrap();
        for compiler in ["ort-opt", "tract-plain", "tract-opt"] {
            let output = dlas_backends::load(compiler, &path, &config)
                .unwrap()
                .run(&input)
                .unwrap();
            let e = relative_l2(&output, &reference);
            assert!(e < TOLERANCE, "{name} {compiler}: relative L2 {e}");
        }
    }
}

/// The native engine's int8 GEMM runs with the compression stage's
/// parameters (the calibration of the QDQ file), and its logits stay close
/// to ONNX Runtime running that QDQ file and to the fp32 network. The
/// engine keeps every activation in int8 while the QDQ file quantises only
/// what conv and linear layers read, so the two int8 results differ by the
/// rounding of the extra tensors: a few percent of relative L2 on a random-
/// weight network, where the fp32-to-int8 error itself is of that order.
#[test]
fn native_int8_uses_the_compression_parameters_and_stays_near_the_qdq_file() {
    use dlas_backends::{SessionConfig, ort_runtime, relative_l2};
    use dlas_core::{Algorithm, Combination, Compression};
    use dlas_runner::models::{self, Models};
    let Some((root, library)) = ort_library() else {
        return;
    };
    ort_runtime::init(&library).unwrap();
    let study = Study::load("dlas", &root.join("data/studies")).unwrap();
    let mut files = Models::new(&root).unwrap();
    let combination = |compiler: &str, compression| Combination {
        algorithm: Algorithm::Gemm,
        compression,
        ..Combination::host(Dataset::Cifar10, "resnet18", compiler)
    };
    let config = SessionConfig {
        input_shape: [1, 3, 32, 32],
        threads: 2,
        half_io: false,
        tvm: None,
    };
    let input = models::input(&combination("native", Compression::Int8), 11);
    let mut run_ort = |compression| {
        let c = combination("ort-noopt", compression);
        let path = files.path(&study, &c).unwrap();
        dlas_backends::load("ort-noopt", &path, &config)
            .unwrap()
            .run(&input)
            .unwrap()
    };
    let fp32 = run_ort(Compression::Dense);
    let qdq = run_ort(Compression::Int8);
    let native = combination("native", Compression::Int8);
    let path = files.path(&study, &models::model_file_of(&native)).unwrap();
    let int8 = dlas_runner::native::load(&path, &native, 2, None)
        .unwrap()
        .run(&input)
        .unwrap();
    let (to_qdq, to_fp32, qdq_to_fp32) = (
        relative_l2(&int8, &qdq),
        relative_l2(&int8, &fp32),
        relative_l2(&qdq, &fp32),
    );
    eprintln!("native int8 vs QDQ {to_qdq:.4}, vs fp32 {to_fp32:.4}; QDQ vs fp32 {qdq_to_fp32:.4}");
    assert!(qdq_to_fp32 > 1e-4, "the QDQ file is quantised");
    assert!(to_qdq < 0.05 && to_fp32 < 0.05, "{to_qdq} {to_fp32}");
}

/// tract computes an fp16 model in f32 on x86-64, as ONNX Runtime's CPU
/// provider does there (emulated f16 took about a minute per CIFAR-10
/// ResNet-18 inference): on the same fp16 file its logits stay near ONNX
/// Runtime's, which also rounds activations to f16 between nodes, and its
/// provider says what it computed in.
#[test]
fn tract_runs_fp16_models_in_f32_as_onnx_runtime_does() {
    use dlas_backends::{SessionConfig, ort_runtime, relative_l2};
    use dlas_core::{Combination, Compression};
    use dlas_runner::models::{self, Models};
    let Some((root, library)) = ort_library() else {
        return;
    };
    ort_runtime::init(&library).unwrap();
    let study = Study::load("dlas", &root.join("data/studies")).unwrap();
    let mut files = Models::new(&root).unwrap();
    let fp16 = |compiler: &str| Combination {
        compression: Compression::Fp16,
        ..Combination::host(Dataset::Cifar10, "resnet18", compiler)
    };
    let path = files.path(&study, &fp16("ort-noopt")).unwrap();
    let config = SessionConfig {
        input_shape: [1, 3, 32, 32],
        threads: 2,
        half_io: true,
        tvm: None,
    };
    let input = models::input(&fp16("ort-noopt"), 11);
    let reference = dlas_backends::load("ort-noopt", &path, &config)
        .unwrap()
        .run(&input)
        .unwrap();
    for compiler in ["tract-plain", "tract-opt"] {
        let mut session = dlas_backends::load(compiler, &path, &config).unwrap();
        if cfg!(target_arch = "x86_64") {
            assert!(
                session.provider().contains("fp16 computed in f32"),
                "{}",
                session.provider()
            );
        }
        let e = relative_l2(&session.run(&input).unwrap(), &reference);
        assert!(e < 1e-2, "{compiler}: relative L2 {e} against ort-noopt");
    }
}

/// Nanoseconds of CPU run by this thread and the threads it started,
/// which inherit its name (Linux's per-thread scheduler statistics; `None`
/// elsewhere). Tests running beside it in the process have other names.
fn own_threads_cpu_ns() -> Option<u64> {
    let name = std::fs::read_to_string("/proc/thread-self/comm").ok()?;
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        if std::fs::read_to_string(path.join("comm")).ok()? != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// A campaign times its configurations turn by turn in one process, so
/// whatever one leaves running when its run returns takes cores from the
/// next. ONNX Runtime's intra-op workers spin after a run unless told to
/// stop (`session.force_spinning_stop`); on the 2-vCPU host they made the
/// native engine's ResNet-18 take 12-24 ms instead of 4.3 when it ran
/// right after ONNX Runtime (docs/protocol.md). Here, after a few runs,
/// the session's threads must stay almost idle while this one sleeps.
#[test]
fn onnx_runtime_leaves_the_cores_idle_when_a_run_returns() {
    use dlas_backends::{SessionConfig, ort_runtime};
    use dlas_core::Combination;
    use dlas_runner::models::{self, Models};
    let Some((root, library)) = ort_library() else {
        return;
    };
    if own_threads_cpu_ns().is_none() {
        eprintln!("skipped: no /proc/self/task/*/schedstat here");
        return;
    }
    ort_runtime::init(&library).unwrap();
    let study = Study::load("dlas", &root.join("data/studies")).unwrap();
    let c = Combination::host(Dataset::Cifar10, "resnet18", "ort-opt");
    let path = Models::new(&root).unwrap().path(&study, &c).unwrap();
    let config = SessionConfig {
        input_shape: [1, 3, 32, 32],
        threads: 2,
        half_io: false,
        tvm: None,
    };
    let mut session = dlas_backends::load("ort-opt", &path, &config).unwrap();
    let input = models::input(&c, 7);
    for _ in 0..10 {
        session.run(&input).unwrap();
    }
    let idle = std::time::Duration::from_millis(200);
    let before = own_threads_cpu_ns().unwrap();
    std::thread::sleep(idle);
    let used = own_threads_cpu_ns().unwrap() - before;
    // A spinning worker would burn most of the 200 ms; allow 5%.
    assert!(
        (used as f64) < 0.05 * idle.as_nanos() as f64,
        "ONNX Runtime's threads ran {:.1} ms of CPU in the {} ms after its run",
        used as f64 / 1e6,
        idle.as_millis()
    );
}
