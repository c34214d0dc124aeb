//! `cargo xtask setup`: the runtimes that run beside the native engine, each
//! from a pinned PyPI wheel whose sha256 is checked before anything of it is
//! used: ONNX Runtime's `libonnxruntime.so` into `.cache/onnxruntime/<version>/`
//! and OpenVINO's C API with its CPU plugin and ONNX front end into
//! `.cache/openvino/<version>/`. With `--tvm`, also Apache TVM's Python
//! environment (`.cache/tvm/venv`, about 610 MB), built with pip from the
//! hash-pinned `crates/dlas-backends/tvm/requirements.txt`.
//!
//! The `ort` crate is built with `load-dynamic` and the `openvino` crate
//! with `runtime-linking`, both without a download of their own, so this is
//! the only step that fetches anything; it goes through pip (PyPI) and is
//! idempotent.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A pinned wheel and the files of it that are set up.
struct Wheel {
    /// The PyPI package and version (`name==version`).
    package: &'static str,
    version: &'static str,
    file: &'static str,
    sha256: &'static str,
    /// Under `.cache/`.
    cache: &'static str,
    /// The folder inside the wheel the members are in.
    folder: &'static str,
    /// The files extracted; the first is the one the programs load.
    members: &'static [&'static str],
    /// The variable that points the programs at another library.
    variable: &'static str,
}

const ONNXRUNTIME: Wheel = Wheel {
    package: "onnxruntime",
    version: "1.31.1",
    file: "onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl",
    sha256: "5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f",
    cache: "onnxruntime",
    folder: "onnxruntime/capi",
    members: &["libonnxruntime.so.1.31.1"],
    variable: "ORT_DYLIB_PATH",
};

/// OpenVINO's C API loads its core, which loads the CPU plugin and the ONNX
/// front end from its own folder; TBB and hwloc are their threading
/// libraries. The GPU, NPU and other front ends of the wheel are left out.
const OPENVINO: Wheel = Wheel {
    package: "openvino",
    version: "2026.4.1",
    file: "openvino-2026.4.1-22982-cp311-cp311-manylinux_2_28_x86_64.whl",
    sha256: "2d22b1da03f7caf74df30e9f6417d0ab2f637e4a38e08e1dcd294d2c37407aaf",
    cache: "openvino",
    folder: "openvino/libs",
    members: &[
        "libopenvino_c.so.2641",
        "libopenvino.so.2641",
        "libopenvino_intel_cpu_plugin.so",
        "libopenvino_onnx_frontend.so.2641",
        "libtbb.so.12",
        "libtbbbind_2_5.so.3",
        "libtbbmalloc.so.2",
        "libhwloc.so.15",
    ],
    variable: "DLAS_OPENVINO_LIB",
};

impl Wheel {
    fn dir(&self, root: &Path) -> PathBuf {
        root.join(".cache").join(self.cache).join(self.version)
    }

    /// The library the programs load.
    fn library(&self, root: &Path) -> PathBuf {
        self.dir(root).join(self.members[0])
    }

    fn is_set_up(&self, root: &Path) -> Result<bool> {
        let dir = self.dir(root);
        let wheel = dir.join(self.file);
        Ok(self.members.iter().all(|m| dir.join(m).is_file())
            && wheel.is_file()
            && sha256(&wheel)? == self.sha256)
    }

    fn set_up(&self, root: &Path) -> Result<()> {
        let name = format!("{}=={}", self.package, self.version);
        if self.is_set_up(root)? {
            eprintln!("{name} already set up: {}", self.library(root).display());
        } else {
            let dir = self.dir(root);
            std::fs::create_dir_all(&dir)?;
            let wheel = dir.join(self.file);
            if !wheel.is_file() {
                download(&name, &dir)?;
            }
            let digest = sha256(&wheel)?;
            if digest != self.sha256 {
                std::fs::remove_file(&wheel)?;
                bail!(
                    "{} has sha256 {digest}, expected {}; the file was removed, nothing was installed",
                    wheel.display(),
                    self.sha256
                );
            }
            for member in self.members {
                extract(
                    &wheel,
                    &format!("{}/{member}", self.folder),
                    &dir.join(member),
                )?;
            }
            eprintln!(
                "{name}: {} (wheel sha256 verified)",
                self.library(root).display()
            );
        }
        println!("export {}={}", self.variable, self.library(root).display());
        Ok(())
    }
}

/// The wheels `cargo xtask setup` always sets up.
const WHEELS: [&Wheel; 2] = [&ONNXRUNTIME, &OPENVINO];

pub fn run(root: &Path, tvm: bool) -> Result<()> {
    if std::env::consts::ARCH != "x86_64" || std::env::consts::OS != "linux" {
        bail!(
            "the pinned ONNX Runtime and OpenVINO wheels are for x86_64 Linux; on {} {} use \
             `nix develop` (it sets ORT_DYLIB_PATH) or point ORT_DYLIB_PATH at a libonnxruntime \
             of version >= 1.24 and DLAS_OPENVINO_LIB at a libopenvino_c of version >= 2025.1",
            std::env::consts::OS,
            std::env::consts::ARCH
        );
    }
    for wheel in WHEELS {
        wheel.set_up(root)?;
    }
    if tvm {
        set_up_tvm(root)?;
    }
    Ok(())
}

/// The TVM environment's interpreter.
pub fn tvm_python(root: &Path) -> PathBuf {
    root.join(".cache/tvm/venv/bin/python")
}

/// Whether the TVM environment is set up: its interpreter imports `tvm`
/// at the pinned version.
pub fn tvm_present(root: &Path) -> bool {
    Command::new(tvm_python(root))
        .args([
            "-c",
            "import tvm, sys; sys.exit(tvm.__version__ != '0.27.0.post1')",
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The command that sets TVM up, for messages.
pub const TVM_COMMAND: &str = "cargo xtask setup --tvm";

/// The tests that need TVM's environment: `cargo xtask test` leaves them
/// out (counted as skipped) where it is not set up.
pub const TVM_TESTS: &[(&str, &str)] = &[
    (
        "dlas-runner::tvm",
        "tvm_agrees_with_onnx_runtime_under_every_algorithm",
    ),
    (
        "dlas-runner::tvm",
        "a_tuned_session_applies_the_database_metaschedule_wrote",
    ),
    (
        "dlas-runner::tvm",
        "an_interrupted_tuning_resumes_where_it_stopped",
    ),
];

/// A virtual environment built with pip from the hash-pinned requirements:
/// pip refuses any wheel whose hash differs, and installs only wheels.
fn set_up_tvm(root: &Path) -> Result<()> {
    if tvm_present(root) {
        eprintln!("Apache TVM already set up: {}", tvm_python(root).display());
        return Ok(());
    }
    let venv = root.join(".cache/tvm/venv");
    let status = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status()
        .context("cannot run `python3 -m venv`; install python3-venv")?;
    if !status.success() {
        bail!("python3 -m venv {} failed ({status})", venv.display());
    }
    let requirements = root.join("crates/dlas-backends/tvm/requirements.txt");
    let status = Command::new(tvm_python(root))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-cache-dir",
            "--require-hashes",
            "--only-binary=:all:",
            "-r",
        ])
        .arg(&requirements)
        .status()
        .context("cannot run pip in the TVM environment")?;
    if !status.success() {
        bail!(
            "pip could not install {} ({status}); every wheel is pinned by sha256",
            requirements.display()
        );
    }
    if !tvm_present(root) {
        bail!(
            "{} does not import tvm 0.27.0.post1 after the install",
            tvm_python(root).display()
        );
    }
    eprintln!(
        "Apache TVM 0.27.0.post1: {} (every wheel's sha256 verified by pip)",
        venv.display()
    );
    Ok(())
}

fn download(name: &str, dir: &Path) -> Result<()> {
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
        .arg(name)
        .status()
        .context("cannot run `python3 -m pip`; install python3 and pip")?;
    if !status.success() {
        bail!("pip could not download {name} ({status})");
    }
    Ok(())
}

fn extract(wheel: &Path, member: &str, to: &Path) -> Result<()> {
    let status = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
             open(sys.argv[3], 'wb').write(z.read(sys.argv[2]))",
        ])
        .arg(wheel)
        .arg(member)
        .arg(to)
        .status()
        .context("cannot run python3 to unpack the wheel")?;
    if !status.success() {
        bail!("cannot extract {member} from {}", wheel.display());
    }
    Ok(())
}

fn sha256(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

#[cfg(test)]
mod tests {
    /// Every test of the TVM binary is in [`super::TVM_TESTS`], so that a
    /// checkout without TVM skips it rather than fails it.
    #[test]
    fn every_tvm_test_is_listed_for_skipping() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crates/dlas-runner/tests/tvm.rs"
        );
        let code = std::fs::read_to_string(path).unwrap();
        let tests: Vec<&str> = code
            .split("#[test]")
            .skip(1)
            .map(|rest| {
                let name = rest.split("fn ").nth(1).expect("a test function");
                &name[..name.find('(').expect("its arguments")]
            })
            .collect();
        assert!(!tests.is_empty());
        let listed: Vec<&str> = super::TVM_TESTS.iter().map(|&(_, t)| t).collect();
        assert_eq!(tests, listed);
    }
}
