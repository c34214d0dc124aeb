//! `dlas compress` and `dlas sweep` as a user runs them.

mod common;

use common::ok;

/// A failure whose message is exactly one line.
fn fails(args: &[&str]) -> String {
    let stderr = common::fails(args);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn compress_writes_onnx_and_a_json_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.onnx");
    let json = ok(&[
        "compress",
        "mobilenetv1",
        "--dataset",
        "cifar10",
        "--technique",
        "channel-pruning",
        "--level",
        "0.5",
        "--removal",
        "remove",
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["technique"], "channel-pruning");
    assert_eq!(report["removal"], "remove");
    assert!(report["params_ratio"].as_f64().unwrap() > 2.0);
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
}

#[test]
fn int8_writes_the_engine_parameters_next_to_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.onnx");
    let text = ok(&[
        "compress",
        "mobilenetv1",
        "--dataset",
        "cifar10",
        "--technique",
        "int8",
        "--calibration",
        "4",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(text.contains("fidelity"), "{text}");
    let params: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("q.int8.json")).unwrap()).unwrap();
    assert_eq!(params["calibration_samples"], 4);
    assert_eq!(params["layers"][0]["input"], "input");
}

#[test]
fn sweep_prints_one_row_per_level() {
    let csv = ok(&[
        "sweep",
        "mobilenetv1",
        "--dataset",
        "cifar10",
        "--technique",
        "weight-pruning",
    ]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "level,params_ratio,bytes_ratio,macs,top1_agreement,rel_l2,snr_db"
    );
    assert_eq!(lines.len(), 8);
    assert!(lines[7].starts_with("0.99,"));
}

#[test]
fn bad_levels_and_values_are_one_line_errors() {
    let e = fails(&[
        "compress",
        "resnet18",
        "--dataset",
        "cifar10",
        "--technique",
        "weight-pruning",
        "--level",
        "1.5",
    ]);
    assert!(e.contains("1.5") && e.contains("[0, 1)"), "{e}");
    let e = fails(&[
        "sweep",
        "resnet18",
        "--dataset",
        "cifar10",
        "--technique",
        "fp16",
    ]);
    assert!(e.contains("no levels"), "{e}");
}

#[test]
fn accuracy_of_an_exported_model_on_a_cifar_folder() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    ok(&[
        "zoo",
        "export",
        "mobilenetv1",
        "--dataset",
        "cifar10",
        "--out",
        model.to_str().unwrap(),
    ]);
    let mut bytes = Vec::new();
    for label in 0..4u8 {
        bytes.push(label);
        bytes.extend((0..3072).map(|i| (i * 7 + label as usize * 31) as u8));
    }
    std::fs::write(dir.path().join("test_batch.bin"), bytes).unwrap();
    let data = format!("cifar10:{}", dir.path().display());
    let out = ok(&[
        "accuracy",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        &data,
        "--limit",
        "3",
    ]);
    assert!(out.contains("(3 samples): top-1 "), "{out}");
    let e = fails(&[
        "accuracy",
        "--model",
        model.to_str().unwrap(),
        "--dataset",
        &format!("imagenet:{}", dir.path().display()),
    ]);
    assert!(e.contains("one sub-folder per class"), "{e}");
}

/// Without --level, the study's level: no pruned accuracy is recorded, so no elbow moves it.
#[test]
fn the_default_level_is_the_studys() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.onnx");
    let text = ok(&[
        "compress",
        "mobilenetv1",
        "--dataset",
        "cifar10",
        "--technique",
        "weight-pruning",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        text.starts_with("cifar10 mobilenetv1 weight-pruning 0.8\n"),
        "{text}"
    );
}
