//! Running the `dlas` binary from integration tests, as a user would.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn dlas(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlas"))
        .arg("--root")
        .arg(root())
        .args(args)
        .output()
        .expect("the dlas binary runs")
}

/// Runs `dlas` and returns its standard output; fails the test if it fails.
pub fn ok(args: &[&str]) -> String {
    let out = dlas(args);
    assert!(
        out.status.success(),
        "dlas {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `dlas`, expects it to fail without panicking, returns its standard error.
pub fn fails(args: &[&str]) -> String {
    let out = dlas(args);
    assert!(!out.status.success(), "dlas {args:?} should fail");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        !stderr.contains("panicked"),
        "dlas {args:?} panicked: {stderr}"
    );
    stderr
}
