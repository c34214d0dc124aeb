//! `dlas tune` and tuned runs, end to end on a small selection: records
//! and best-of written, tuned schedules applied, missing and foreign
//! records refused with the command that fixes them.

mod common;
use common::{fails, ok};

const SELECTION: &str =
    "dataset=cifar10,model=mobilenetv1,compression=dense,algorithm=spatial-pack,layout=nchw";

fn tune(records: &str) -> String {
    ok(&[
        "tune",
        "--filter",
        SELECTION,
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
        SELECTION,
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
    let lines = std::fs::read_to_string(&records).unwrap().lines().count();
    assert!(
        lines >= layers && lines <= 4 * layers,
        "{lines} records for {layers} layers"
    );
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
