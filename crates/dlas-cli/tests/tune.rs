//! `dlas tune` and tuned runs, end to end on a small selection: records
//! and best-of written, tuned schedules applied, missing and foreign
//! records refused with the command that fixes them.

mod common;
use common::{fails, ok};

const SELECTION: &str =
    "dataset=cifar10,model=mobilenetv1,compression=dense,algorithm=spatial-pack,layout=nchw";

/// What the native tuner tunes of [`SELECTION`] (`dlas tune` tunes TVM's
/// tuned combinations of a selection too, with MetaSchedule).
const NATIVE: &str = "dataset=cifar10,model=mobilenetv1,compression=dense,algorithm=spatial-pack,layout=nchw,compiler=native";

fn tune(records: &str) -> String {
    ok(&[
        "tune",
        "--filter",
        NATIVE,
        "--trials",
        "4",
        "--early-stop",
        "2",
        "--repeats",
        "2",
        "--min-repeat-ms",
        "0.2",
        "--records",
        records,
    ])
}

fn run_tuned(out: &str, tuning: &str, extra: &[&str]) -> std::process::Output {
    let filter = format!("{SELECTION},compiler=native,tuned=true");
    let mut args = vec![
        "run", "--device", "host", "--filter", &filter, "--runs", "3", "--warmup", "1", "--out",
        out, "--tuning", tuning,
    ];
    args.extend_from_slice(extra);
    common::dlas(&args)
}

#[test]
fn tune_then_run_tuned_and_resume_without_remeasuring() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("tuning/records.jsonl");
    let best = dir.path().join("tuning/best.json");
    let out = dir.path().join("host.csv");
    let (records_s, best_s, out_s) = (
        records.to_str().unwrap(),
        best.to_str().unwrap(),
        out.to_str().unwrap(),
    );

    // Dry run: the distinct layers, nothing measured.
    let plan = ok(&[
        "tune",
        "--filter",
        NATIVE,
        "--dry-run",
        "--records",
        records_s,
    ]);
    let layers: usize = plan
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|n| n.parse().ok())
        .expect("a count of layers");
    assert!(layers > 5, "{plan}");
    assert!(!records.exists());

    // Without records, a tuned run is not run, and says what to run.
    let refused = run_tuned(out_s, best_s, &[]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("dlas tune --study"), "{stderr}");
    assert!(
        !out.exists()
            || !std::fs::read_to_string(&out)
                .unwrap()
                .contains("native,true")
    );

    let summary = tune(records_s);
    assert!(
        summary.contains(&format!("{layers} layers ({layers} searched now)")),
        "{summary}"
    );
    let text = std::fs::read_to_string(&records).unwrap();
    let lines = text.lines().count();
    // At most 4 candidates per layer, then each finalist (at most 4 here)
    // re-measured in 3 rounds.
    assert!(
        lines >= layers && lines <= (4 + 3 * 4) * layers,
        "{lines} records for {layers} layers"
    );
    assert!(text.contains(r#""phase":"confirm""#), "{text}");
    assert!(summary.contains("confirmation rounds"), "{summary}");
    let best_text = std::fs::read_to_string(&best).unwrap();
    assert_eq!(best_text.matches("\"fingerprint\"").count(), layers);

    // Tuning again with the same budget measures nothing new.
    let again = tune(records_s);
    assert!(again.contains("(0 searched now): 0 new trials"), "{again}");
    assert_eq!(
        std::fs::read_to_string(&records).unwrap().lines().count(),
        lines
    );

    // The tuned run applies the schedules and says so.
    let run = run_tuned(out_s, best_s, &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let csv = std::fs::read_to_string(&out).unwrap();
    let row = csv
        .lines()
        .find(|l| l.contains(",native,true,"))
        .expect("a tuned row");
    assert!(row.contains("tuned schedules from"), "{row}");

    // Another machine's schedules are refused unless asked for.
    let foreign = best_text.replace("\"fingerprint\":\"cpu-", "\"fingerprint\":\"cpu-0ther");
    let foreign_path = dir.path().join("foreign.json");
    std::fs::write(&foreign_path, foreign).unwrap();
    let out2 = dir.path().join("host2.csv");
    let (foreign_s, out2_s) = (foreign_path.to_str().unwrap(), out2.to_str().unwrap());
    let refused = run_tuned(out2_s, foreign_s, &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("--foreign-tuning") && stderr.contains("cpu-0ther"),
        "{stderr}"
    );
    let accepted = run_tuned(out2_s, foreign_s, &["--foreign-tuning"]);
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    let csv = std::fs::read_to_string(&out2).unwrap();
    assert!(csv.contains("tuned on another machine (cpu-0ther"), "{csv}");
}

#[test]
fn tune_refuses_other_devices_and_bad_budgets() {
    let err = fails(&["tune", "--device", "i7", "--dry-run"]);
    assert!(err.contains("only valid value is `host`"), "{err}");
    let err = fails(&["tune", "--trials", "0", "--dry-run"]);
    assert!(err.contains("--trials"), "{err}");
    let err = fails(&["tune", "--filter", "model=resnet9", "--dry-run"]);
    assert!(err.contains("resnet9"), "{err}");
}

/// kill -9 in the middle of a search, then the same command again: the
/// search resumes from its records, measures no schedule twice, and ends
/// within its budget.
#[test]
fn killed_tuning_resumes_without_measuring_twice() {
    use std::collections::{HashMap, HashSet};
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let root = common::root();
    let args = [
        "--root",
        root.to_str().unwrap(),
        "tune",
        "--filter",
        NATIVE,
        "--trials",
        "12",
        "--early-stop",
        "12",
        "--repeats",
        "3",
        "--min-repeat-ms",
        "1",
        "--records",
        records.to_str().unwrap(),
    ];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dlas"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&records).map_or(0, |t| t.lines().count()) < 8 {
        assert!(started.elapsed().as_secs() < 60, "no records after 60 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = std::fs::read_to_string(&records).unwrap().lines().count();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlas"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&records).unwrap();
    let mut per_task: HashMap<String, usize> = HashMap::new();
    let mut seen = HashSet::new();
    let mut rounds: HashMap<(String, String), usize> = HashMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with('{') && l.ends_with('}'))
    {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (task, schedule) = (v["task"].to_string(), v["schedule"].to_string());
        if v["phase"] == "confirm" {
            let n = rounds.entry((task, schedule)).or_default();
            *n += 1;
            assert!(*n <= 3, "a fourth confirmation round: {line}");
            continue;
        }
        *per_task.entry(task.clone()).or_default() += 1;
        assert!(seen.insert((task, schedule)), "measured twice: {line}");
    }
    assert!(
        text.lines().count() > before,
        "the second run measured more"
    );
    // One budget of 12 trials per layer for the whole run, spread by the
    // task scheduler: some layers get more than 12, the run no more.
    assert!(
        per_task.values().sum::<usize>() <= 12 * per_task.len(),
        "{per_task:?}"
    );
    assert!(dir.path().join("best.json").exists());
}
