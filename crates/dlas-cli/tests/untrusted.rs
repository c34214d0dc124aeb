//! Untrusted paths and files (issue 39): what a careless user or a hostile
//! file does to `dlas`. No path may send a write outside the project or the
//! user's named folder, replace a device or a link, or read without bound;
//! no row the schema forbids may get through; closed streams, a failed row
//! and a stuck run must each end in a state a user can resume from.
//!
//! Devices are stood in for by FIFOs made with `mkfifo` (opening one for
//! reading and appending, as results files are, would block or read
//! forever just as `/dev/full` did); no test writes to a real device.

mod common;
use common::{fails, ok, root};
use dlas_core::results::read_results;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// A quick host run of the native engine on MobileNet-v1 (CIFAR-10): its
/// untuned direct, GEMM and spatial-pack schedules at batch 1 and 2,
/// three fixed runs each, on one thread.
fn host_run(out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--device",
        "host",
        "--compiler",
        "native",
        "--filter",
        "dataset=cifar10,model=mobilenetv1,compression=dense,tuned=false,algorithm=direct|gemm,layout=nchw",
        "--batch",
        "1,2",
        "--runs",
        "3",
        "--warmup",
        "0",
        "--threads",
        "1",
        "--out",
        s(out),
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn strings(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn devices_fifos_and_folders_are_refused_as_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("device.csv");
    mkfifo(&fifo);
    for args in [
        vec!["run", "--device", "i7", "--out", s(&fifo)],
        strings(&host_run(&fifo, &[])),
        vec!["run", "--device", "i7", "--out", s(dir.path())],
    ] {
        let started = Instant::now();
        let err = fails(&args);
        assert!(started.elapsed() < Duration::from_secs(30), "{args:?}");
        assert!(
            err.contains("is a FIFO (named pipe), not a regular file")
                || err.contains("is a folder, not a regular file"),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    assert!(is_fifo(&fifo), "the FIFO was replaced");
    // A link to a device is refused the same way, and left a link.
    let link = dir.path().join("link.csv");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    let err = fails(&["run", "--device", "i7", "--out", s(&link)]);
    assert!(err.contains("which is a FIFO (named pipe)"), "{err}");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
}

#[test]
fn a_study_name_is_an_identifier_not_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("data/studies/dlas.toml")).unwrap();
    for name in ["../../../../x", "/tmp/x", "a/b", "", "x\ny"] {
        let study = dir.path().join("bad.toml");
        std::fs::write(
            &study,
            text.replace("name = \"dlas\"", &format!("name = {name:?}")),
        )
        .unwrap();
        let err = fails(&["run", "--study", s(&study), "--device", "i7"]);
        assert!(err.contains("bad.toml:5:8: the study's name is `"), "{err}");
        assert!(err.contains("it must be an identifier"), "{err}");
    }
    assert!(!dir.path().join("x").exists());
    // A copy that keeps the committed study's name would write over its
    // results and report.
    let copy = dir.path().join("copy.toml");
    std::fs::write(&copy, &text).unwrap();
    let err = fails(&["reproduce", "--study", s(&copy), "--table", "1"]);
    assert!(
        err.contains("the study is named `dlas`, the name of"),
        "{err}"
    );
}

/// A project root with the inputs `reproduce` reads and the committed
/// outputs it must leave alone (figures and tables of the DLAS study).
fn project_copy(dir: &Path) -> PathBuf {
    let root = dir.join("project");
    for sub in ["data/studies", "data/devices", "data/accuracy"] {
        copy_tree(&common::root().join(sub), &root.join(sub));
    }
    std::fs::create_dir_all(root.join("data/results")).unwrap();
    for sub in ["figures", "paper-tables"] {
        copy_tree(&common::root().join(sub), &root.join(sub));
    }
    root
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every file under `dir` with its sha256.
fn hashes(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let digest = hex::encode(Sha256::digest(std::fs::read(&path).unwrap()));
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), digest);
            }
        }
    }
    out
}

#[test]
fn reproducing_a_users_study_writes_only_its_own_folders() {
    let dir = tempfile::tempdir().unwrap();
    let project = project_copy(dir.path());
    let text = std::fs::read_to_string(project.join("data/studies/dlas.toml")).unwrap();
    let study = dir.path().join("mine.toml");
    std::fs::write(
        &study,
        text.replace("name = \"dlas\"", "name = \"mine\"").replace(
            "models = [\"resnet18\", \"mobilenetv1\", \"mobilenetv2\", \"vgg16\"]",
            "models = [\"mobilenetv1\"]",
        ),
    )
    .unwrap();
    let before = hashes(&project);
    let out = Command::new(env!("CARGO_BIN_EXE_dlas"))
        .arg("--root")
        .arg(&project)
        .args(["reproduce", "--study", s(&study), "--all"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = hashes(&project);
    for (path, digest) in &before {
        assert_eq!(after.get(path), Some(digest), "{} changed", path.display());
    }
    let new: Vec<&PathBuf> = after.keys().filter(|p| !before.contains_key(*p)).collect();
    assert!(!new.is_empty());
    for path in new {
        let own = ["figures/mine/", "paper-tables/mine/", "data/results/mine/"]
            .iter()
            .any(|d| path.starts_with(d))
            || path.starts_with("data/compression")
                && path
                    .file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("mine");
        assert!(own, "{} is not the study's own output", path.display());
    }
    assert!(project.join("paper-tables/mine/table1.md").is_file());
    assert!(project.join("figures/mine/index.html").is_file());
}

#[test]
fn a_linked_output_is_followed_for_every_file_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let links = dir.path().join("links");
    std::fs::create_dir(&links).unwrap();

    // Mocked: the target is rewritten and the link stays a link.
    let target = real.join("mock.csv");
    std::fs::write(&target, "").unwrap();
    let link = links.join("mock.csv");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    ok(&[
        "run",
        "--device",
        "i7",
        "--filter",
        "model=mobilenetv1",
        "--out",
        s(&link),
    ]);
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(!read_results(&target).unwrap().is_empty());

    // Host: the rows go to the target, the samples and the environment
    // record beside it, nothing beside the link.
    let target = real.join("host.csv");
    std::fs::write(&target, "").unwrap();
    let link = links.join("host.csv");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    ok(&strings(&host_run(&link, &[])));
    assert_eq!(read_results(&target).unwrap().len(), 4);
    assert!(real.join("host.samples.jsonl").is_file());
    let beside_target: Vec<String> = std::fs::read_dir(&real)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        beside_target.iter().any(|n| n.starts_with("env-")),
        "{beside_target:?}"
    );
    let beside_link: Vec<String> = std::fs::read_dir(&links)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(beside_link.len(), 2, "only the two links: {beside_link:?}");

    // A link to nothing is refused.
    let dangling = links.join("gone.csv");
    std::os::unix::fs::symlink(real.join("gone.csv"), &dangling).unwrap();
    let err = fails(&["run", "--device", "i7", "--out", s(&dangling)]);
    assert!(err.contains("which does not exist"), "{err}");
}

/// The rows of the committed mocked results, as text, and a changed copy of
/// one row's median.
fn mocked_rows() -> (String, String) {
    let text = std::fs::read_to_string(root().join("data/results/dlas/mock.csv")).unwrap();
    let row = text.lines().nth(1).unwrap().to_string();
    let mut fields: Vec<String> = row.split(',').map(String::from).collect();
    fields[14] = "0.01".into();
    (text, fields.join(","))
}

#[test]
fn a_repeated_id_is_an_error_naming_both_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (text, copy) = mocked_rows();
    let path = dir.path().join("dup.csv");
    std::fs::write(&path, format!("{text}{copy}\n")).unwrap();
    let last = text.lines().count() + 1;
    for args in [
        vec!["claims", s(&path)],
        vec![
            "reproduce",
            "--table",
            "8",
            "--check",
            "--results",
            s(&path),
        ],
        vec!["compare", s(&path), s(&path)],
    ] {
        let err = fails(&args);
        assert!(
            err.contains(&format!("dup.csv:{last}: id "))
                && err.contains("repeats the row of line 2"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn ids_and_text_fields_must_be_whole_and_printable() {
    let dir = tempfile::tempdir().unwrap();
    let (text, _) = mocked_rows();
    let header = text.lines().next().unwrap();
    let row = text.lines().nth(1).unwrap();
    let id = row.split(',').next().unwrap();
    let cases = [
        (
            row.replacen(id, "", 1),
            "field id: `` is not the id of the row's combination",
        ),
        (
            row.replacen(id, &format!("{id}\u{202E}"), 1),
            "field id: holds the unprintable character U+202E",
        ),
        (
            row.replacen(",resnet18,", ",\"resnet18\nx\",", 1),
            "field model: holds the unprintable character U+000A",
        ),
        (
            row.replacen("mock-v", "../../etc/passwd-", 1),
            "field source: ",
        ),
    ];
    for (bad, expected) in cases {
        let path = dir.path().join("bad.csv");
        std::fs::write(&path, format!("{header}\n{bad}\n")).unwrap();
        let err = fails(&["claims", s(&path)]);
        assert!(err.contains("bad.csv:2: "), "{err}");
        assert!(err.contains(expected), "{expected}: {err}");
    }
}

#[test]
fn an_environment_record_must_hash_to_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("data/results/dlas");
    std::fs::create_dir_all(&results).unwrap();
    let committed = root().join("data/results/dlas");
    let host = read_results(&committed.join("host.csv")).unwrap();
    let env = &host[0].source;
    let record = std::fs::read_to_string(committed.join(format!("{env}.json"))).unwrap();
    let edited = results.join(format!("{env}.json"));
    let model = record
        .lines()
        .find(|l| l.contains("\"cpu_model\""))
        .unwrap();
    std::fs::write(
        &edited,
        record.replace(model, "  \"cpu_model\": \"Evil | CPU\","),
    )
    .unwrap();
    let err = dlas_core::Environment::load(&edited)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the record's content hashes to env-"), "{err}");
    assert!(err.contains(&format!("not to the id {env}")), "{err}");
}

#[test]
fn a_crlf_results_file_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.csv");
    let committed = std::fs::read_to_string(root().join("data/results/dlas/host.csv")).unwrap();
    let crlf: String = committed
        .lines()
        .take(3)
        .map(|l| format!("{l}\r\n"))
        .collect();
    std::fs::write(&path, &crlf).unwrap();
    let err = fails(&strings(&host_run(&path, &[])));
    assert!(
        err.contains("host.csv:1: the file's lines end in CRLF"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), crlf);
    // Readers take it as it is.
    assert_eq!(read_results(&path).unwrap().len(), 2);
}

#[test]
fn a_run_with_closed_output_streams_completes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("host.csv");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlas"))
        .arg("--root")
        .arg(root())
        .args(host_run(&out, &[]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `dlas run ... 2>&1 | head -1`: the reader goes at once.
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        read_results(&out).unwrap().len(),
        4,
        "every combination ran"
    );
}

#[test]
fn failed_rows_are_measured_again_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("host.csv");
    ok(&strings(&host_run(&out, &[])));
    // One row turned into a failure, as a bad input once made it.
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let row = read_results(&out).unwrap().remove(1);
    let mut failed = row.clone();
    failed.status = dlas_core::Status::Failed;
    failed.reason = "a bad best.json".into();
    failed.runs = 0;
    for v in [
        &mut failed.median_ms,
        &mut failed.p10_ms,
        &mut failed.p90_ms,
        &mut failed.p99_ms,
        &mut failed.mean_ms,
        &mut failed.stddev_ms,
        &mut failed.cv,
        &mut failed.ci95_low_ms,
        &mut failed.ci95_high_ms,
    ] {
        *v = None;
    }
    let csv = dlas_core::results::to_csv(std::slice::from_ref(&failed)).unwrap();
    lines[2] = String::from_utf8(csv)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .into();
    std::fs::write(&out, lines.join("\n") + "\n").unwrap();

    let again = ok(&strings(&host_run(&out, &[])));
    assert!(
        again.contains("0 measured, 0 unstable, 0 failed, 4 already done"),
        "{again}"
    );
    let retried = ok(&strings(&host_run(&out, &["--retry-failed"])));
    assert!(
        retried.contains("1 measured, 0 unstable, 0 failed, 3 already done")
            || retried.contains("0 measured, 1 unstable, 0 failed, 3 already done"),
        "{retried}"
    );
    // The file keeps the failed row; readers take the re-measured one.
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 6);
    let rows = read_results(&out).unwrap();
    assert_eq!(rows.len(), 4);
    let row_now = rows.iter().find(|r| r.id == row.id).unwrap();
    assert!(row_now.status.has_timing(), "{row_now:?}");
}

#[test]
fn a_timeout_bounds_a_combination_however_many_threads() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("host.csv");
    let started = Instant::now();
    let out_put = Command::new(env!("CARGO_BIN_EXE_dlas"))
        .arg("--root")
        .arg(root())
        .args([
            "run",
            "--device",
            "host",
            "--compiler",
            "native",
            "--filter",
            "dataset=cifar10,model=vgg16,compression=dense,tuned=false,algorithm=direct,layout=nchw",
            "--runs",
            "3",
            "--threads",
            "1024",
            "--timeout",
            "3",
            "--out",
            s(&out),
        ])
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out_put.stderr);
    assert!(took < Duration::from_secs(40), "took {took:?}: {stderr}");
    let rows = read_results(&out).unwrap();
    assert_eq!(rows.len(), 1, "{stderr}");
    // On two cores, 1,024 spinning threads do not finish a VGG-16 run in
    // 3 s; should some machine finish it, the row is measured instead.
    if rows[0].status == dlas_core::Status::Failed {
        assert!(
            rows[0].reason.starts_with("timeout after 3 s"),
            "{}",
            rows[0].reason
        );
        // Either the runner's own check stopped it between runs (the run
        // ends normally), or the watchdog stopped the process mid-run
        // (exit code 3, with what to do next).
        match out_put.status.code() {
            Some(0) => {}
            Some(3) => assert!(
                stderr.contains("it is recorded as failed; run the same command again"),
                "{stderr}"
            ),
            other => panic!("exit code {other:?}: {stderr}"),
        }
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_tuning_log_keeps_its_good_records_around_bad_bytes_and_costs() {
    let dir = tempfile::tempdir().unwrap();
    let committed = root().join("data/results/dlas/tuning/records.jsonl");
    let text = std::fs::read_to_string(&committed).unwrap();
    let good: Vec<&str> = text.lines().take(3).collect();
    let negative = good[1].replacen("\"costs_ms\":[", "\"costs_ms\":[-1.2,", 1);
    assert_ne!(negative, good[1]);
    let mut bytes = Vec::new();
    bytes.extend_from_slice(good[0].as_bytes());
    bytes.extend_from_slice(b"\n");
    bytes.extend_from_slice(negative.as_bytes());
    bytes.extend_from_slice(b"\n");
    bytes.extend_from_slice(b"{\"version\":1,\xff\xfe}\n");
    bytes.extend_from_slice(good[2].as_bytes());
    bytes.extend_from_slice(b"\n");
    let log = dir.path().join("records.jsonl");
    std::fs::write(&log, bytes).unwrap();
    let loaded = dlas_tune::records::load(&log).unwrap();
    assert_eq!(loaded.records.len(), 2);
    assert_eq!(loaded.skipped.len(), 2, "{:?}", loaded.skipped);
    assert!(loaded.skipped[0].contains("records.jsonl:2: a value of costs_ms is -1.2"));
    assert!(loaded.skipped[1].contains("records.jsonl:3: not UTF-8 text"));
    let best = dlas_tune::records::BestOf::from_records(&loaded.records);
    assert!(best.entries.iter().all(|e| e.cost_ms > 0.0));
    // A best-of file edited to a negative cost is refused, with its entry.
    let best_path = dir.path().join("best.json");
    let committed_best =
        std::fs::read_to_string(root().join("data/results/dlas/tuning/best.json")).unwrap();
    let cost = committed_best.find("\"cost_ms\":").unwrap() + "\"cost_ms\":".len();
    let end = cost + committed_best[cost..].find(',').unwrap();
    let edited = format!("{}-1.2{}", &committed_best[..cost], &committed_best[end..]);
    std::fs::write(&best_path, edited).unwrap();
    let err = dlas_tune::records::BestOf::load(&best_path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("best.json: entry 1 ("), "{err}");
    assert!(err.contains("cost_ms is -1.2"), "{err}");
}
