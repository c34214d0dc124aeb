//! tract, ONNX Runtime and the native engine's three algorithms agree on
//! every CIFAR-10 network (fp32, seeded input, same ONNX file, relative L2
//! under 1e-4). Needs the ONNX Runtime library from
//! `cargo xtask setup`; CI runs setup first, so there the test must run.

use dlas_core::{Dataset, Study};
use dlas_runner::crosscheck::{TOLERANCE, crosscheck};
use std::path::Path;

#[test]
fn cifar10_networks_agree_across_runtimes_and_the_native_engine() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let library = dlas_backends::ort_runtime::library_path(&root);
    if !library.is_file() && std::env::var_os("CI").is_none() {
        eprintln!(
            "skipped: {} missing (run `cargo xtask setup`)",
            library.display()
        );
        return;
    }
    let study = Study::load("dlas", &root.join("data/studies")).unwrap();
    let networks: Vec<(Dataset, String)> = study
        .models()
        .into_iter()
        .filter(|(d, _)| *d == Dataset::Cifar10)
        .collect();
    let agreements = crosscheck(&root, &study, &networks, 7).unwrap();
    assert_eq!(
        agreements.len(),
        4 * 6,
        "3 runtimes and 3 native algorithms per network"
    );
    for a in &agreements {
        assert!(
            a.relative_l2 < TOLERANCE,
            "{} {} {}: relative L2 {}",
            a.dataset,
            a.model,
            a.compiler,
            a.relative_l2
        );
    }
}

/// The compiler study's modern networks and the block models of the new
/// block kinds: ONNX Runtime optimized and both tract levels agree with
/// ONNX Runtime unoptimized (tract-opt itself agrees with the zoo's f64
/// reference in dlas-onnx's `transformers` tests, so every runtime is tied
/// to it). The files are exported here, as no study pins them yet.
#[test]
fn transformer_networks_agree_across_runtimes() {
    use dlas_backends::{SessionConfig, ort_runtime, relative_l2};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let library = ort_runtime::library_path(&root);
    if !library.is_file() && std::env::var_os("CI").is_none() {
        eprintln!(
            "skipped: {} missing (run `cargo xtask setup`)",
            library.display()
        );
        return;
    }
    ort_runtime::init(&library).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = SessionConfig {
        input_shape: [1, 3, 224, 224],
        threads: 2,
        half_io: false,
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
