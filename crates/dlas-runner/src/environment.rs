//! Filling in the environment record ([`Environment`], defined in core
//! beside the results it describes) on the machine that runs: the CPU, OS,
//! toolchain, runtime versions and protocol. Its id (a hash of its content)
//! is the `source` of every row, so a number can always be traced to the
//! machine, toolchain and protocol.

pub use dlas_core::Environment;
use sha2::{Digest, Sha256};
use std::path::Path;

/// Versions pinned in the workspace's Cargo.toml (`=` requirements).
pub const TRACT_VERSION: &str = "0.23.9";
pub const ORT_CRATE_VERSION: &str = "2.0.0-rc.15";

/// CPU features that matter to kernels, when present.
const FLAGS_OF_INTEREST: &[&str] = &[
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "amx_tile",
    "asimd",
    "asimddp",
    "fphp",
    "sve",
];

/// What a kernel's speed depends on: the CPU model, its vector features
/// and how many logical CPUs there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpu {
    pub model: String,
    pub flags: Vec<String>,
    pub logical_cpus: usize,
}

impl Cpu {
    pub fn detect() -> Cpu {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        Cpu {
            model: field("model name")
                .or_else(|| field("Hardware"))
                .unwrap_or_else(|| "unknown".into()),
            flags: field("flags")
                .or_else(|| field("Features"))
                .unwrap_or_default()
                .split_whitespace()
                .filter(|f| FLAGS_OF_INTEREST.contains(f))
                .map(String::from)
                .collect(),
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// The key tuning records are filed under: `cpu-` and 12 hex digits of
    /// the sha256 of model, features and CPU count. Two machines share it
    /// only if a schedule tuned on one is a fair guess for the other.
    pub fn fingerprint(&self) -> String {
        let text = format!(
            "{}|{}|{}",
            self.model,
            self.flags.join(","),
            self.logical_cpus
        );
        format!(
            "cpu-{}",
            &hex::encode(Sha256::digest(text.as_bytes()))[..12]
        )
    }
}

/// Detects the machine and software; `onnxruntime` comes from the caller
/// (it depends on whether the library was loaded).
pub fn detect(
    project_root: &Path,
    onnxruntime: String,
    protocol: Vec<(String, String)>,
) -> Environment {
    let cpu = Cpu::detect();
    let os = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    Environment {
        cpu_model: cpu.model,
        cpu_flags: cpu.flags,
        logical_cpus: cpu.logical_cpus,
        frequency_governor: read_trimmed("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
            .unwrap_or_else(|| "not readable".into()),
        os,
        kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
        rustc: env!("DLAS_RUSTC_VERSION").into(),
        dlas_version: env!("CARGO_PKG_VERSION").into(),
        tract_version: TRACT_VERSION.into(),
        ort_crate_version: ORT_CRATE_VERSION.into(),
        onnxruntime,
        openvino: None,
        tvm: None,
        git_revision: code_revision(project_root),
        load_average: None,
        protocol,
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// What decides the measured code: the sources, manifests, toolchain and
/// build flags (`.cargo/config.toml` sets the target CPU), as git pathspecs.
/// Integration tests, benches and their fixtures are not part of the binary
/// that measures: a commit touching only them must not split a campaign that
/// spans sittings into two environment records (it once did, and 27
/// DenseNet-161 rows had to be archived). Unit tests inside `src` still count:
/// git cannot tell them from the code around them.
const CODE_PATHS: &[&str] = &[
    "crates",
    "Cargo.toml",
    "Cargo.lock",
    "rust-toolchain.toml",
    ".cargo",
    ":(exclude)crates/*/tests/*",
    ":(exclude)crates/*/benches/*",
    ":(exclude)crates/*/proptest-regressions/*",
];

/// The last commit that changed [`CODE_PATHS`], `-dirty` if they have
/// uncommitted changes: committing measured rows does not change it.
fn code_revision(root: &Path) -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let last_change = [&["log", "-1", "--format=%H", "--"][..], CODE_PATHS].concat();
    let status = [
        &["status", "--porcelain", "--untracked-files=no", "--"][..],
        CODE_PATHS,
    ]
    .concat();
    match run(&last_change).filter(|rev| !rev.is_empty()) {
        Some(rev) => {
            let dirty = run(&status).is_some_and(|s| !s.is_empty());
            if dirty { format!("{rev}-dirty") } else { rev }
        }
        None => "not a git checkout".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_records_this_machine_and_the_given_protocol() {
        // The record's id and files are dlas-core's (tested there); here,
        // what detection fills in.
        let protocol = vec![("runs".to_string(), "3".to_string())];
        let env = detect(Path::new("."), "none".into(), protocol.clone());
        assert_eq!(env.protocol, protocol);
        assert_eq!(env.onnxruntime, "none");
        assert_eq!(env.tract_version, TRACT_VERSION);
        assert_eq!(env.logical_cpus, Cpu::detect().logical_cpus);
        assert!(env.logical_cpus >= 1);
        assert!(!env.cpu_model.is_empty() && !env.rustc.is_empty());
        assert_eq!(env.load_average, None);
    }

    #[test]
    fn committing_results_or_tests_keeps_the_code_revision() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .current_dir(root)
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        std::fs::create_dir_all(root.join("crates")).unwrap();
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::write(root.join("crates/kernel.rs"), "fn a() {}").unwrap();
        git(&["add", "."]);
        git(&["commit", "-q", "-m", "code"]);
        let code = code_revision(root);
        assert_eq!(code.len(), 40, "{code}");
        std::fs::write(root.join("data/host.csv"), "id\n").unwrap();
        git(&["add", "."]);
        git(&["commit", "-q", "-m", "rows"]);
        assert_eq!(code_revision(root), code);
        std::fs::create_dir_all(root.join("crates/engine/tests")).unwrap();
        std::fs::write(root.join("crates/engine/tests/ops.rs"), "#[test] fn t() {}").unwrap();
        git(&["add", "."]);
        git(&["commit", "-q", "-m", "a test"]);
        assert_eq!(code_revision(root), code, "a test-only commit");
        std::fs::write(root.join("crates/engine/tests/ops.rs"), "").unwrap();
        assert_eq!(code_revision(root), code, "an uncommitted test");
        std::fs::write(root.join("crates/kernel.rs"), "fn b() {}").unwrap();
        assert_eq!(code_revision(root), format!("{code}-dirty"));
    }
}
