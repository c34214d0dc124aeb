//! A small batch sweep on the host, then `dlas metrics` on it.

mod common;
use common::{fails, ok};

#[test]
fn a_host_batch_sweep_gives_rtr_ase_and_bsr() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep.csv");
    let out_s = out.to_str().unwrap();
    ok(&[
        "run",
        "--device",
        "host",
        "--filter",
        "dataset=cifar10,model=mobilenetv1,compression=dense",
        "--compiler",
        "tract-plain,tract-opt",
        "--batch",
        "1,2,4",
        "--runs",
        "3",
        "--warmup",
        "1",
        "--out",
        out_s,
    ]);
    let table = ok(&["metrics", out_s]);
    let row = table
        .lines()
        .find(|l| l.contains(",host,tract-opt,tract-plain,"))
        .unwrap_or_else(|| panic!("{table}"));
    let fields: Vec<&str> = row.split(',').collect();
    assert_eq!(fields[4], "1 2 4");
    for (i, name) in [
        (5, "rtr_b1"),
        (6, "rtr_bmax"),
        (7, "ase"),
        (8, "ase_baseline"),
        (9, "bsr"),
    ] {
        let v: f64 = fields[i]
            .parse()
            .unwrap_or_else(|_| panic!("{name}: {row}"));
        assert!(v.is_finite(), "{name} = {v}");
    }
    assert!(["1", "2", "4"].contains(&fields[10]));
    // Untimed-only results have nothing to compare.
    let err = fails(&["metrics", "data/does-not-exist.csv"]);
    assert!(err.contains("does-not-exist.csv"), "{err}");
}
