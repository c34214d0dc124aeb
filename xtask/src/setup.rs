//! `cargo xtask setup`: the ONNX Runtime shared library from its PyPI wheel,
//! pinned by version and sha256, extracted into `.cache/onnxruntime/<version>/`.
//!
//! The `ort` crate is built with `load-dynamic` and without its binary
//! download, so this is the only step that fetches anything; it goes through
//! pip (PyPI), checks the wheel's hash before using it, and is idempotent.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = "1.31.1";
const WHEEL: &str = "onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl";
const WHEEL_SHA256: &str = "5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f";
const LIBRARY: &str = "libonnxruntime.so.1.31.1";

/// The library's path after setup.
pub fn library(root: &Path) -> PathBuf {
    root.join(".cache/onnxruntime").join(VERSION).join(LIBRARY)
}

pub fn run(root: &Path) -> Result<()> {
    if std::env::consts::ARCH != "x86_64" || std::env::consts::OS != "linux" {
        bail!(
            "the pinned ONNX Runtime wheel is for x86_64 Linux; on {} {} use `nix develop` \
             (it sets ORT_DYLIB_PATH) or point ORT_DYLIB_PATH at a libonnxruntime of version >= 1.24",
            std::env::consts::OS,
            std::env::consts::ARCH
        );
    }
    let target = library(root);
    let dir = target.parent().expect("library path has a folder");
    let wheel = dir.join(WHEEL);
    if target.is_file() && wheel.is_file() && sha256(&wheel)? == WHEEL_SHA256 {
        eprintln!(
            "ONNX Runtime {VERSION} already set up: {}",
            target.display()
        );
        println!("export ORT_DYLIB_PATH={}", target.display());
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    if !wheel.is_file() {
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                "--implementation",
                "cp",
                "--platform",
                "manylinux_2_28_x86_64",
                "--dest",
            ])
            .arg(dir)
            .arg(format!("onnxruntime=={VERSION}"))
            .status()
            .context("cannot run `python3 -m pip`; install python3 and pip")?;
        if !status.success() {
            bail!("pip could not download onnxruntime=={VERSION} ({status})");
        }
    }
    let digest = sha256(&wheel)?;
    if digest != WHEEL_SHA256 {
        std::fs::remove_file(&wheel)?;
        bail!(
            "{} has sha256 {digest}, expected {WHEEL_SHA256}; the file was removed, nothing was installed",
            wheel.display()
        );
    }
    let status = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
             open(sys.argv[3], 'wb').write(z.read(sys.argv[2]))",
        ])
        .arg(&wheel)
        .arg(format!("onnxruntime/capi/{LIBRARY}"))
        .arg(&target)
        .status()
        .context("cannot run python3 to unpack the wheel")?;
    if !status.success() {
        bail!("cannot extract {LIBRARY} from {}", wheel.display());
    }
    eprintln!(
        "ONNX Runtime {VERSION}: {} (wheel sha256 verified)",
        target.display()
    );
    println!("export ORT_DYLIB_PATH={}", target.display());
    Ok(())
}

fn sha256(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}
