//! The results store under abuse: a file of the other kind, a second
//! process, numbers the schema forbids, and `dlas run` / `dlas tune`
//! killed with SIGKILL at seeded random moments (issue 20).

mod common;
use common::{dlas, fails, ok, root};
use dlas_core::results::{ResultRow, read_results};
use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Host runs of this selection: the native engine's three untuned
/// schedules of MobileNet-v1 at three batch sizes, 9 combinations that
/// take about a second together (the kills fall within a run).
fn host_run(out: &Path, runs: &str) -> Vec<String> {
    [
        "run",
        "--device",
        "host",
        "--compiler",
        "native",
        "--filter",
        "dataset=cifar10,model=mobilenetv1,compression=dense,tuned=false",
        "--batch",
        "1,2,3",
        "--runs",
        runs,
        "--warmup",
        "0",
        "--threads",
        "1",
        "--out",
        s(out),
    ]
    .map(String::from)
    .to_vec()
}

fn spawn(args: &[String]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_dlas"))
        .arg("--root")
        .arg(root())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_mocked_run_never_replaces_measured_rows() {
    let dir = tempfile::tempdir().unwrap();
    let measured = dir.path().join("measured.csv");
    std::fs::copy(root().join("data/results/dlas/host.csv"), &measured).unwrap();
    let before = std::fs::read(&measured).unwrap();
    let rows = String::from_utf8_lossy(&before).lines().count() - 1;
    let err = fails(&["run", "--device", "i7", "--out", s(&measured)]);
    assert!(
        err.contains(&format!(
            "{} holds {rows} measured rows of device host",
            measured.display()
        )),
        "{err}"
    );
    assert_eq!(std::fs::read(&measured).unwrap(), before);

    // Mocked rows of other devices are not dropped either; the same
    // devices are regenerated whole.
    let mocked = dir.path().join("mocked.csv");
    let mock = |device: &str| {
        dlas(&[
            "run",
            "--device",
            device,
            "--filter",
            "model=resnet18",
            "--out",
            s(&mocked),
        ])
    };
    assert!(mock("i7").status.success());
    assert!(mock("i7").status.success());
    let err = String::from_utf8(mock("xavier-gpu").stderr).unwrap();
    assert!(
        err.contains("mocked rows of device i7; this run writes mocked rows of xavier-gpu"),
        "{err}"
    );

    // Nor does a host run append measured rows to mocked ones.
    let err = fails(&[
        "run",
        "--device",
        "host",
        "--compiler",
        "tract-opt",
        "--filter",
        "dataset=cifar10,model=resnet18,compression=dense",
        "--runs",
        "2",
        "--out",
        s(&mocked),
    ]);
    assert!(
        err.contains("mocked rows of device i7; this run writes measured rows of host"),
        "{err}"
    );
    assert!(
        read_results(&mocked)
            .unwrap()
            .iter()
            .all(|r| r.device == "i7")
    );

    // A file that is not results at all is not replaced.
    let notes = dir.path().join("notes.csv");
    std::fs::write(&notes, "my notes\n").unwrap();
    let err = fails(&["run", "--device", "i7", "--out", s(&notes)]);
    assert!(err.contains("refusing to replace"), "{err}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes\n");
}

#[test]
fn a_second_run_on_the_same_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("host.csv");
    let args = host_run(&out, "30");
    let mut first = spawn(&args);
    let started = Instant::now();
    while !out.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no results file"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = dlas(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let still_running = first.try_wait().unwrap().is_none();
    first.kill().unwrap();
    first.wait().unwrap();
    let err = String::from_utf8(second.stderr).unwrap();
    assert!(
        !second.status.success(),
        "both runs wrote {}",
        out.display()
    );
    assert!(
        still_running,
        "the first run ended before the second started"
    );
    assert_eq!(
        err.trim(),
        format!(
            "error: {} is being written by another process (it holds the file's lock); \
             wait until it ends, or write to another file",
            out.display()
        )
    );
}

#[test]
fn readers_refuse_numbers_the_schema_forbids_and_empty_files() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("data/results/dlas/host.csv")).unwrap();
    let nan = dir.path().join("nan.csv");
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut fields: Vec<&str> = lines[3].split(',').collect();
    fields[14] = "NaN";
    lines[3] = fields.join(",");
    std::fs::write(&nan, lines.join("\n") + "\n").unwrap();
    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    for (file, expected) in [
        (&nan, ":4: field median_ms: NaN is not a finite number"),
        (&empty, ": empty file"),
    ] {
        let expected = format!("{}{expected}", file.display());
        for args in [
            vec!["claims", s(file)],
            vec!["compare", s(file), s(file)],
            vec!["metrics", s(file)],
            vec!["reproduce", "--table", "8", "--check", "--results", s(file)],
        ] {
            let err = fails(&args);
            assert!(err.contains(&expected), "dlas {args:?}: {err}");
        }
    }
}

/// The rows of a results file as a killed run left it: its complete lines
/// (a partial last line is dropped by the next run), which must parse.
fn complete_rows(path: &Path) -> Vec<ResultRow> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    if whole.is_empty() {
        return Vec::new();
    }
    let copy = path.with_extension("whole.csv");
    std::fs::write(&copy, whole).unwrap();
    read_results(&copy).unwrap()
}

fn assert_unique(ids: impl Iterator<Item = String>, what: &str) {
    let mut seen = HashSet::new();
    for id in ids {
        assert!(seen.insert(id.clone()), "{what}: {id} twice");
    }
}

/// SIGKILL at 50 seeded random moments of a host run, resuming each
/// time: every file parses, no id appears twice, no row once on disk is
/// lost or changed, and the last run completes the plan.
#[test]
fn a_run_killed_at_random_moments_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("host.csv");
    let args = host_run(&out, "2");
    let planned = {
        let mut dry = args.clone();
        dry.push("--dry-run".into());
        ok(&dry.iter().map(String::as_str).collect::<Vec<_>>())
            .lines()
            .count()
            - 1
    };
    // How long a whole run takes here: the kills fall within it.
    let calibration = dir.path().join("calibration.csv");
    let started = Instant::now();
    ok(&host_run(&calibration, "2")
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>());
    let whole = started.elapsed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(20);
    let mut rows = Vec::new();
    let mut kills = 0;
    while kills < 50 {
        let mut child = spawn(&args);
        std::thread::sleep(whole.mul_f64(rng.random_range(0.0..1.0)));
        let killed = child.try_wait().unwrap().is_none();
        child.kill().unwrap();
        child.wait().unwrap();
        kills += usize::from(killed);
        let now = complete_rows(&out);
        assert!(now.starts_with(&rows), "rows on disk changed");
        assert_unique(now.iter().map(|r| r.id.clone()), "results");
        let samples =
            std::fs::read_to_string(out.with_extension("samples.jsonl")).unwrap_or_default();
        for line in samples.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            serde_json::from_str::<dlas_runner::store::Samples>(line)
                .unwrap_or_else(|e| panic!("a samples line does not parse ({e}): {line}"));
        }
        rows = now;
        if rows.len() == planned {
            // Complete: start again on a fresh file, so every kill lands in a run.
            std::fs::remove_file(&out).unwrap();
            std::fs::remove_file(out.with_extension("samples.jsonl")).unwrap();
            rows.clear();
        }
    }
    let last = dlas(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    let all = read_results(&out).unwrap();
    assert_eq!(all.len(), planned);
    assert!(all.starts_with(&rows), "rows on disk changed");
    assert_unique(all.iter().map(|r| r.id.clone()), "results");
    let samples = dlas_runner::store::read_samples(&out.with_extension("samples.jsonl")).unwrap();
    assert_unique(samples.iter().map(|s| s.id.clone()), "samples");
    let timed: HashSet<&str> = all
        .iter()
        .filter(|r| r.status.has_timing())
        .map(|r| r.id.as_str())
        .collect();
    let sampled: HashSet<&str> = samples.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(timed, sampled, "rows and samples lines differ");
}

/// SIGKILL at seeded random moments of a tuning search, resuming each
/// time: every record line parses, none is lost, and the last run ends the
/// search with its best-of file.
#[test]
fn a_tuning_search_killed_at_random_moments_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let args: Vec<String> = [
        "tune",
        "--filter",
        "dataset=cifar10,model=mobilenetv1,compression=dense,algorithm=spatial-pack,layout=nchw,compiler=native",
        "--trials",
        "8",
        "--early-stop",
        "8",
        "--repeats",
        "2",
        "--min-repeat-ms",
        "0.2",
        "--records",
        s(&records),
    ]
    .map(String::from)
    .to_vec();
    // In a folder of its own: the best-of file goes beside the records.
    let calibration = dir.path().join("calibration/records.jsonl");
    let mut calibrate = args.clone();
    calibrate[12] = s(&calibration).into();
    let started = Instant::now();
    ok(&calibrate.iter().map(String::as_str).collect::<Vec<_>>());
    let whole = started.elapsed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(20);
    let mut lines: Vec<String> = Vec::new();
    for _ in 0..10 {
        let mut child = spawn(&args);
        std::thread::sleep(whole.mul_f64(rng.random_range(0.0..1.0)));
        child.kill().unwrap();
        child.wait().unwrap();
        let text = std::fs::read_to_string(&records).unwrap_or_default();
        let now: Vec<String> = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(String::from)
            .collect();
        assert!(now.starts_with(&lines), "records on disk changed");
        for line in &now {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        lines = now;
    }
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let loaded = dlas_tune::records::load(&records).unwrap();
    assert_eq!(loaded.skipped, Vec::<String>::new());
    assert!(loaded.records.len() >= lines.len());
    assert!(dir.path().join("best.json").exists());
}
