//! The `dlas` binary as a user runs it: the README's commands and the
//! errors a user sees for bad input.

mod common;

use common::{fails, ok, root};
use std::path::Path;
use std::process::Command;

#[test]
fn plan_count_matches_the_study() {
    let out = ok(&["plan", "--study", "dlas", "--count"]);
    assert!(out.starts_with("study dlas: 1316 combinations\n"), "{out}");
    assert!(
        out.contains("excluded by no-imagenet-tuning-on-hikey: 256"),
        "{out}"
    );
}

#[test]
fn plan_csv_with_filter() {
    let out = ok(&[
        "plan",
        "--study",
        "dlas",
        "--format",
        "csv",
        "--filter",
        "model=resnet18,device=i7,tuned=false,compression=dense",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "id,dataset,model,compression,level,algorithm,format,layout,compiler,tuned,device,batch"
    );
    assert_eq!(
        lines.len(),
        6,
        "four algorithms, and direct in the blocked layout: {out}"
    );
    assert!(lines[1].ends_with(",cifar10,resnet18,dense,0,direct,dense,nchw,native,false,i7,1"));
    assert!(lines[2].ends_with(",cifar10,resnet18,dense,0,direct,dense,nchw16c,native,false,i7,1"));
}

#[test]
fn unknown_filter_value_lists_valid_ones() {
    let err = fails(&["plan", "--filter", "device=tpu"]);
    assert!(
        err.contains("unknown device `tpu`; valid values: i7, hikey970-cpu"),
        "{err}"
    );
}

#[test]
fn malformed_study_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("data/studies/dlas.toml"))
        .unwrap()
        .replace("name = \"dlas\"", "name = \"edited\"");
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, text.replace("runs = 150", "runs = \"many\"")).unwrap();
    let err = fails(&["plan", "--study", broken.to_str().unwrap()]);
    assert!(
        err.contains("broken.toml: TOML parse error at line"),
        "{err}"
    );
    assert!(err.contains("invalid type: string \"many\""), "{err}");

    let unknown = dir.path().join("unknown.toml");
    std::fs::write(&unknown, text.replace("\"vgg16\"", "\"vgg19\"")).unwrap();
    let err = fails(&["plan", "--study", unknown.to_str().unwrap()]);
    assert!(err.contains("unknown.toml:45:"), "{err}");
    assert!(
        err.contains(
            "unknown cifar10 model `vgg19`; valid values: resnet18, mobilenetv1, mobilenetv2, vgg16"
        ),
        "{err}"
    );
}

#[test]
fn missing_study_lists_the_known_ones() {
    let err = fails(&["plan", "--study", "nope"]);
    assert!(err.contains("cannot read study file"), "{err}");
    assert!(err.contains("dlas"), "{err}");
}

#[test]
fn zoo_list_and_export() {
    let out = ok(&["zoo", "list", "--format", "csv"]);
    assert!(out.starts_with("model,dataset,params,macs,layers\n"));
    assert!(
        out.contains("resnet18,cifar10,11173962,555422720,21\n"),
        "{out}"
    );
    // The compiler study's models are listed too, block models at every depth.
    assert!(out.contains("\nswin_t,imagenet,28288354,"), "{out}");
    for depth in [1, 2, 4, 8, 16] {
        assert!(
            out.contains(&format!("\nblocks-transformer-{depth},imagenet,")),
            "{out}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.onnx");
    let printed = ok(&[
        "zoo",
        "export",
        "mobilenetv1",
        "--dataset",
        "cifar10",
        "--out",
        file.to_str().unwrap(),
    ]);
    let lock = std::fs::read_to_string(root().join("data/models.lock")).unwrap();
    let digest = printed.split_whitespace().next().unwrap();
    assert!(
        lock.contains(&format!("{digest}  cifar10-mobilenetv1.onnx")),
        "exported hash {digest} is not the pinned one"
    );
}

#[test]
fn unknown_device_lists_valid_ones() {
    let err = fails(&["run", "--device", "tpu"]);
    assert!(
        err.contains("unknown device `tpu`; valid values: mock, host, "),
        "{err}"
    );
}

#[test]
fn mocked_run_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.csv");
    let b = dir.path().join("b.csv");
    for out in [&a, &b] {
        ok(&[
            "run",
            "--device",
            "i7,xavier-gpu",
            "--filter",
            "dataset=cifar10",
            "--out",
            out.to_str().unwrap(),
        ]);
    }
    let text = std::fs::read_to_string(&a).unwrap();
    assert_eq!(text, std::fs::read_to_string(&b).unwrap());
    let planned = ok(&[
        "plan",
        "--format",
        "ids",
        "--filter",
        "dataset=cifar10,device=i7|xavier-gpu",
    ]);
    assert_eq!(text.lines().count(), 1 + planned.lines().count());
}

#[test]
fn missing_onnx_runtime_is_one_clear_line_and_no_results_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("host.csv");
    let output = Command::new(env!("CARGO_BIN_EXE_dlas"))
        .env(
            "ORT_DYLIB_PATH",
            dir.path().join("nowhere/libonnxruntime.so"),
        )
        .args(["--root", root().to_str().unwrap()])
        .args([
            "run",
            "--device",
            "host",
            "--compiler",
            "ort-opt",
            "--filter",
            "model=resnet18",
        ])
        .args(["--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("nowhere/libonnxruntime.so does not exist; run `cargo xtask setup`"),
        "{stderr}"
    );
    assert!(!out.exists(), "a results file was written");
}

#[test]
fn user_model_with_wrong_hash_is_refused_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("mine.onnx");
    std::fs::write(&model, b"not really onnx").unwrap();
    let study = std::fs::read_to_string(root().join("data/studies/dlas.toml"))
        .unwrap()
        .replace("name = \"dlas\"", "name = \"mine\"");
    let study = format!(
        "{study}\n[[onnx_model]]\nid = \"mine\"\ndataset = \"cifar10\"\npath = \"mine.onnx\"\nsha256 = \"{}\"\n",
        "0".repeat(64)
    );
    let study_path = dir.path().join("mine.toml");
    std::fs::write(&study_path, study).unwrap();
    let out = dir.path().join("host.csv");
    let err = fails(&[
        "run",
        "--study",
        study_path.to_str().unwrap(),
        "--device",
        "host",
        "--compiler",
        "tract-opt",
        "--filter",
        "model=mine",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(err.contains("mine.onnx has sha256"), "{err}");
    assert!(err.contains("refusing to run it"), "{err}");
    assert!(!out.exists());
}

#[test]
fn harness_overhead_is_under_budget() {
    let out = ok(&["bench", "harness", "--runs", "2000"]);
    assert!(
        out.starts_with("harness overhead per timed run: median"),
        "{out}"
    );
}

/// The comma-separated rows of the table whose header line starts with
/// `header`, up to the first blank line.
fn csv_rows_after<'a>(out: &'a str, header: &str) -> Vec<Vec<&'a str>> {
    out.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split(',').collect())
        .collect()
}

/// `dlas bench profile` sets the engine's steps beside ONNX Runtime's
/// nodes: on ResNet-18 CIFAR-10 each of its maps has steps on both sides,
/// the `all` row sums the maps, and every listed step has a time.
#[test]
fn a_profile_sets_the_engines_steps_beside_onnx_runtimes_nodes() {
    let out = ok(&[
        "bench",
        "profile",
        "--dataset",
        "cifar10",
        "--model",
        "resnet18",
        "--algorithm",
        "gemm",
        "--layout",
        "nchw",
        "--runs",
        "5",
        "--threads",
        "1",
        "--steps",
    ]);
    let rows = csv_rows_after(&out, "input_map,");
    let maps: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        maps,
        ["32x32", "16x16", "8x8", "4x4", "1x1", "all", "whole run"],
        "{out}"
    );
    let number = |s: &str| s.parse::<f64>().unwrap();
    let (mut native, mut ort) = (0.0, 0.0);
    for r in &rows[..rows.len() - 2] {
        assert!(number(r[2]) > 0.0 && number(r[4]) > 0.0, "{out}");
        (native, ort) = (native + number(r[1]), ort + number(r[3]));
    }
    let all = &rows[rows.len() - 2];
    assert!((number(all[1]) - native).abs() < 0.01, "{out}");
    // A whole run is its steps and what runs between them.
    let whole = &rows[rows.len() - 1];
    assert!(number(whole[1]) > 0.9 * number(all[1]), "{out}");
    assert!(number(whole[3]) > 0.9 * number(all[3]), "{out}");
    assert!((number(all[3]) - ort).abs() < 0.01, "{out}");
    assert!(
        out.contains("\nnative_kind,ms,count,share\ngemm 3x3,"),
        "{out}"
    );
    let steps = out
        .lines()
        .skip_while(|l| !l.starts_with("native_step,"))
        .skip(1);
    let listed: Vec<&str> = steps.take_while(|l| !l.is_empty()).collect();
    assert_eq!(listed.len().to_string(), all[2], "{out}");
    assert!(
        listed
            .iter()
            .all(|l| number(l.rsplit(',').next().unwrap()) > 0.0)
    );
}

/// `dlas bench tune` on one network at the smallest budget: a row per
/// configuration (the blocked layout's included, its tasks now tunable)
/// with a speedup inside its interval, and a verdict per configuration on
/// the tuner's target; the records it keeps profile the tuned engine; a
/// network outside the study is refused by name.
#[test]
fn a_tuning_bench_decides_each_configuration_with_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let out = ok(&[
        "bench",
        "tune",
        "--records",
        records.to_str().unwrap(),
        "--networks",
        "cifar10/resnet18",
        "--trials",
        "1",
        "--early-stop",
        "1",
        "--runs",
        "5",
        "--budget-s",
        "1",
    ]);
    let rows = csv_rows_after(&out, "network,");
    let configs: Vec<&str> = rows.iter().map(|r| r[1]).collect();
    assert_eq!(
        configs,
        ["direct", "gemm", "spatial-pack", "nchw16c"],
        "{out}"
    );
    let number = |s: &str| s.parse::<f64>().unwrap();
    for r in &rows {
        assert_eq!(r[0], "cifar10/resnet18", "{out}");
        assert!(
            number(r[2]) > 0.0 && number(r[3]) > 0.0,
            "layers and trials: {out}"
        );
        let (s, low, high) = (number(r[9]), number(r[10]), number(r[11]));
        assert!(low <= s && s <= high, "{out}");
    }
    for config in configs {
        assert!(
            out.contains(&format!("\n{config}: tuned over untuned "))
                && out.contains("target at least 1.15x: "),
            "{out}"
        );
    }
    let best = dir.path().join("records.best.json");
    let profile = ok(&[
        "bench",
        "profile",
        "--dataset",
        "cifar10",
        "--model",
        "resnet18",
        "--layout",
        "nchw16c",
        "--runs",
        "5",
        "--tuning",
        best.to_str().unwrap(),
    ]);
    assert!(
        profile.contains(&format!("(tuned schedules from {})", best.display())),
        "{profile}"
    );
    let err = fails(&["bench", "tune", "--networks", "cifar10/resnet50"]);
    assert!(
        err.contains(
            "\"cifar10/resnet50\" is not a network of the DLAS study (one of cifar10/resnet18,"
        ),
        "{err}"
    );
}

/// kill -9 in the middle of a host run, then the same command again: the
/// run resumes, nothing measured is lost and no row is duplicated.
#[test]
fn killed_host_run_resumes_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("host.csv");
    let args = [
        "run",
        "--device",
        "host",
        "--compiler",
        "tract-opt,tract-plain",
        "--filter",
        "dataset=cifar10,compression=dense",
        "--runs",
        "40",
        "--warmup",
        "1",
        "--threads",
        "1",
        "--out",
        out.to_str().unwrap(),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlas"))
        .arg("--root")
        .arg(root())
        .args(args)
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let rows = |path: &Path| {
        std::fs::read_to_string(path)
            .map(|t| t.lines().count().saturating_sub(1))
            .unwrap_or(0)
    };
    while rows(&out) < 2 && started.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = dlas_core::results::read_results(&out).unwrap();
    assert!(
        before.len() >= 2 && before.len() < 8,
        "{} rows",
        before.len()
    );
    ok(&args);
    let after = dlas_core::results::read_results(&out).unwrap();
    assert_eq!(after.len(), 8, "4 networks x 2 compilers");
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "measured rows were rewritten"
    );
    let mut ids: Vec<&str> = after.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8, "duplicate rows");
    let samples = std::fs::read_to_string(out.with_extension("samples.jsonl")).unwrap();
    assert!(samples.lines().count() >= 8);
}

#[test]
fn claims_are_checked_on_each_results_file() {
    let results = root().join("data/results/dlas");
    let (mock, host) = (results.join("mock.csv"), results.join("host.csv"));
    let (mock, host) = (mock.to_str().unwrap(), host.to_str().unwrap());
    let out = ok(&["claims", mock, host]);
    for file in [mock, host] {
        assert!(out.contains(&format!("{file}\n")), "{out}");
    }
    // Fifteen verdicts per file (the thirteen, and XI and XII again on
    // TVM's rows), each with the devices it checked and its basis.
    assert_eq!(out.matches("        devices: ").count(), 30, "{out}");
    assert_eq!(out.matches("        basis: ").count(), 30, "{out}");
    assert!(out.contains("        basis: measured on host\n"), "{out}");
    assert!(out.contains("  XIII  holds\n"), "{out}");
    assert!(
        out.contains("no cell measured on both i7 and hikey970-cpu"),
        "the host run cannot test the hardware claim: {out}"
    );
    let markdown = ok(&["claims", "--markdown", mock]);
    assert!(markdown.starts_with("# The study's observations, checked\n"));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    let text = std::fs::read_to_string(root().join("data/results/dlas/host.csv")).unwrap();
    std::fs::write(
        &bad,
        text.replacen(",native,false,host,1,", ",native,maybe,host,1,", 1),
    )
    .unwrap();
    let err = fails(&["claims", bad.to_str().unwrap()]);
    assert!(
        err.contains("bad.csv:") && err.contains(": not a valid results row"),
        "{err}"
    );
    let err = fails(&["claims"]);
    assert!(err.contains("<RESULTS>..."), "{err}");
}

#[test]
fn reproduce_check_names_every_file_that_differs() {
    let out = ok(&["reproduce", "--table", "1", "--check"]);
    assert!(out.starts_with("checked 4 files"), "{out}");
    // It says what the table reproduces, from the catalogue's map of the paper.
    assert!(
        out.contains("\nTable 1: reproduces the DLAS paper's Table 1 (the hardware platforms). What differs: "),
        "{out}"
    );
    // Another results file is named in Table 3's footer: --check exits 1 and names the files.
    let dir = tempfile::tempdir().unwrap();
    let extra = dir.path().join("mine.csv");
    std::fs::copy(root().join("data/results/dlas/host.csv"), &extra).unwrap();
    let err = fails(&[
        "reproduce",
        "--table",
        "3",
        "--results",
        extra.to_str().unwrap(),
        "--check",
    ]);
    for file in ["table3.md", "table3.tex"] {
        assert!(
            err.contains(&format!(
                "differs from the regenerated output: paper-tables/{file}"
            )),
            "{err}"
        );
    }
    assert!(err.contains("of 4 files differ"), "{err}");
    assert!(
        !err.contains("table1"),
        "only the selection is compared: {err}"
    );
}

#[test]
fn validate_transfer_prices_another_machines_rows_three_ways() {
    let root = root();
    let path = |p: &str| root.join(p).display().to_string();
    let out = ok(&[
        "validate",
        "--transfer",
        &path("data/devices/measured/host.toml"),
        &path("data/results/dlas/archive/validation-intel-xeon.csv"),
    ]);
    // The other machine's specification is found by the rows' records.
    assert!(out.contains("host-intel-xeon.toml"), "{out}");
    for scaling in ["unscaled", "specification", "per instruction set"] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("| {scaling}"))),
            "{scaling}: {out}"
        );
    }
    // Without the other machine's rows it says what it needs.
    let err = fails(&[
        "validate",
        "--transfer",
        &path("data/devices/measured/host.toml"),
    ]);
    assert!(err.contains("--transfer needs"), "{err}");
}
