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
