//! Running cargo and the `dlas` binary from xtask's commands (a leaf: the
//! commands import it, it imports none of them).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root, from this crate's manifest folder.
pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

/// The `dlas` binary with `args`. It is built together with every test
/// target (`--workspace --all-targets`), so its dependencies resolve the same
/// features as the test build and tract is compiled once, not twice.
fn dlas_command<S: AsRef<std::ffi::OsStr>>(root: &Path, args: &[S]) -> Command {
    let built = cargo(root)
        .args([
            "build",
            "--release",
            "--quiet",
            "--workspace",
            "--all-targets",
        ])
        .status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("warning: the build failed; running the last built dlas");
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let mut cmd = Command::new(target.join("release").join("dlas"));
    cmd.current_dir(root);
    cmd.args(args);
    cmd
}

/// `cargo xtask reproduce`: the report needs neither the runtimes nor the
/// tests, so it builds `dlas` without its `host` feature (no tract, no ONNX
/// Runtime or OpenVINO crate, no test targets) into its own target folder,
/// showing cargo's progress, and runs it: on a fresh clone the first
/// figure comes in minutes, and the full build's `target/release/dlas` is
/// never replaced by the light one.
pub fn reproduce(root: &Path, args: &[String]) -> Result<()> {
    let target = light_target(root);
    run(cargo(root)
        .args([
            "build",
            "--release",
            "-p",
            "dlas-cli",
            "--no-default-features",
            "--bin",
            "dlas",
            "--target-dir",
        ])
        .arg(&target))?;
    run(Command::new(target.join("release").join("dlas"))
        .current_dir(root)
        .arg("reproduce")
        .args(args))
}

/// Where `cargo xtask reproduce` builds its light `dlas`.
fn light_target(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("light")
}

/// Runs `dlas <command> <args>`, its output going to the terminal.
pub fn dlas(root: &Path, command: &str, args: &[String]) -> Result<()> {
    let mut all = vec![command.to_string()];
    all.extend_from_slice(args);
    run(&mut dlas_command(root, &all))
}

/// Runs `dlas <args>` and returns its standard output.
pub fn dlas_output(root: &Path, args: &[&str]) -> Result<String> {
    let output = dlas_command(root, args)
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!(
            "dlas {} failed:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

pub fn cargo(root: &Path) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root);
    cmd
}

/// Runs `cmd`, failing unless it exits successfully.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}
