//! Input checked at the boundary, as a user meets it: protocol flags out of
//! bounds, a study with duplicate or impossible entries, a huge bad line,
//! and a reader that closes `dlas`'s output early.

mod common;

use common::{dlas, fails, root};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The DLAS study, renamed `edited` (a study's name is its folders'),
/// with `edit` applied, written into `dir`.
fn study_with(dir: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(root().join("data/studies/dlas.toml"))
        .unwrap()
        .replace("name = \"dlas\"", "name = \"edited\"");
    let path = dir.join("edited.toml");
    std::fs::write(&path, edit(text)).unwrap();
    path
}

/// A one-line error (clap's own usage hint aside) that names `needle`.
#[track_caller]
fn one_line_error(args: &[&str], needle: &str) {
    let err = fails(args);
    let first = err.lines().next().unwrap_or_default();
    assert!(first.contains(needle), "{args:?}: {err}");
}

#[test]
fn protocol_flags_out_of_bounds_name_the_flag_and_range() {
    let run = ["run", "--study", "dlas", "--device", "i7", "--dry-run"];
    let with = |extra: &[&'static str]| -> Vec<&str> { run.iter().chain(extra).copied().collect() };
    one_line_error(
        &with(&["--runs", "1000000000000"]),
        "--runs is 1000000000000; valid: 1..=1000000",
    );
    one_line_error(&with(&["--runs", "0"]), "--runs is 0; valid: 1..=1000000");
    one_line_error(
        &with(&["--timeout", "inf"]),
        "--timeout is inf; valid: seconds above 0 and at most 86400",
    );
    one_line_error(&with(&["--timeout=-1"]), "--timeout is -1; valid");
    one_line_error(
        &with(&["--threads", "100000"]),
        "--threads is 100000; valid: 0..=1024",
    );
    one_line_error(&with(&["--batch", "1,0"]), "--batch is 0; valid: 1..=4096");
    one_line_error(
        &["bench", "harness", "--runs", "1000000000000"],
        "--runs is 1000000000000; valid: 1..=1000000",
    );
    one_line_error(
        &["tune", "--threads", "100000", "--dry-run"],
        "--threads is 100000; valid: 0..=1024",
    );
}

#[test]
fn protocol_fields_out_of_bounds_name_the_field_and_range() {
    let dir = tempfile::tempdir().unwrap();
    for (from, to, needle) in [
        (
            "runs = 150",
            "runs = 1000000000000",
            "protocol.runs is 1000000000000; valid: 1..=1000000",
        ),
        (
            "seed = 2023",
            "seed = 2023\ntimeout_s = inf",
            "protocol.timeout_s is inf; valid: seconds above 0",
        ),
        (
            "threads = 0 ",
            "threads = 100000 ",
            "protocol.threads is 100000; valid: 0..=1024",
        ),
    ] {
        let study = study_with(dir.path(), |t| t.replace(from, to));
        let err = fails(&["plan", "--study", study.to_str().unwrap(), "--count"]);
        assert!(err.contains(needle), "{to}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_huge_bad_line_makes_a_short_error() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(5_000_000);
    let study = study_with(dir.path(), |t| {
        t.replace("runs = 150", &format!("runs = 150 {long}"))
    });
    let err = fails(&["plan", "--study", study.to_str().unwrap()]);
    assert!(
        err.contains("TOML parse error at line 32"),
        "{}",
        &err[..200]
    );
    assert!(err.len() < 2_000, "{} bytes of error", err.len());
    // An unknown value of any length is quoted cut, too.
    let study = study_with(dir.path(), |t| {
        t.replace(
            "\"i7\", \"hikey970-cpu\"",
            &format!("\"i7{long}\", \"hikey970-cpu\""),
        )
    });
    let err = fails(&["plan", "--study", study.to_str().unwrap()]);
    assert!(err.contains("unknown device `i7xxx"), "{}", &err[..200]);
    assert!(err.len() < 2_000, "{} bytes of error", err.len());
}

#[test]
fn a_user_model_named_like_a_zoo_network_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let study = study_with(dir.path(), |t| {
        format!(
            "{t}\n[[onnx_model]]\nid = \"vgg16\"\ndataset = \"imagenet\"\npath = \"m.onnx\"\nsha256 = \"{}\"\n",
            "0".repeat(64)
        )
    });
    let err = fails(&["plan", "--study", study.to_str().unwrap()]);
    assert!(
        err.contains("edited.toml:")
            && err.contains("onnx_model `vgg16` has the name of a zoo network"),
        "{err}"
    );
}

#[test]
fn a_duplicate_model_is_refused_naming_both_places() {
    let dir = tempfile::tempdir().unwrap();
    let study = study_with(dir.path(), |t| {
        t.replace(
            "\"resnet18\", \"mobilenetv1\"",
            "\"resnet18\", \"resnet18\"",
        )
    });
    let err = fails(&["plan", "--study", study.to_str().unwrap()]);
    assert!(
        err.contains("edited.toml:45:23: model of cifar10 `resnet18` is listed twice (first at ")
            && err.contains("edited.toml:45:11); each may appear once"),
        "{err}"
    );
}

/// A reader that stops after one line: `dlas` ends quietly, whatever the command.
#[test]
fn a_closed_output_pipe_ends_dlas_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlas"))
        .arg("--root")
        .arg(root())
        .args(["plan", "--study", "dlas", "--format", "csv"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("id,dataset"), "{first}");
    // The reader is dropped here: the pipe is closed with most of the plan unread.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    assert!(out.status.success(), "{:?}", out.status);

    // Commands that print with `println!` (which panics on a closed pipe)
    // and one that prints only after working.
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("mock.csv");
    for args in [
        vec!["run", "--study", "dlas", "--device", "i7", "--dry-run"],
        vec![
            "run",
            "--study",
            "dlas",
            "--device",
            "i7",
            "--filter",
            "model=resnet18",
            "--out",
            results.to_str().unwrap(),
        ],
        vec!["zoo", "list"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlas"))
            .arg("--root")
            .arg(root())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
        assert!(out.status.success(), "{args:?}: {:?}", out.status);
    }
    assert!(results.is_file(), "the run did its work before printing");
}

/// Other failures are still errors: an unwritable output is not a closed pipe.
#[test]
fn an_error_is_still_reported_when_stdout_is_open() {
    let out = dlas(&["plan", "--study", "no-such-study"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: cannot read study file"));
}
