//! Project automation: `cargo xtask <command>`.
//!
//! Every command here drives the `dlas` binary or standard tools; the
//! project's logic lives in the crates, not in xtask.

mod commands;
mod flake;
mod imports;
mod lock;
mod setup;
mod system;
mod tidy;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use commands::{cargo, dlas, project_root, reproduce, run};
use std::path::Path;

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Regenerate (or with --check, compare) results, compression facts, figures, tables,
    /// claims and the report page. Arguments go to `dlas reproduce` (--all, --figure N,
    /// --table N, --check, --study S, --results FILE...).
    Reproduce {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Regenerate every model and hash every data file; compare with the lock files.
    Verify {
        /// Rewrite data/models.lock and data/files.lock instead of checking them.
        #[arg(long)]
        update: bool,
    },
    /// Check that tract and ONNX Runtime agree on every zoo network (`dlas crosscheck`).
    Crosscheck {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Benchmarks: `harness` (timing-loop overhead), `engine` (the native engine
    /// per layer against the measured peak, per network against ONNX Runtime and tract),
    /// `tune` (tuned against untuned native engine and against ONNX Runtime, with search time).
    /// `cluster` (the coordinator with a synthetic fleet, docs/scaling.md).
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Fetch the pinned ONNX Runtime and OpenVINO wheels from PyPI, check their sha256,
    /// extract their libraries.
    Setup {
        /// First install the Debian packages the tests need (slurm-wlm, openssh-server,
        /// openssh-client, chromium, python3-pip, python3-venv, nix-bin) with apt-get; needs root.
        #[arg(long)]
        system: bool,
        /// Also build Apache TVM's Python environment (.cache/tvm/venv, about 610 MB) from
        /// the hash-pinned crates/dlas-backends/tvm/requirements.txt.
        #[arg(long)]
        tvm: bool,
    },
    /// Feed the readers of user input (study, results, samples, tuning records, best-of,
    /// environment records, ONNX files) generated and mutated inputs for a time budget
    /// per target; each must return Ok or Err, never panic. Prints the inputs per target.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// One target (a test `fuzz_<NAME>` in crates/dlas-cli/tests/fuzz.rs); all by default.
        #[arg(long)]
        target: Option<String>,
    },
    /// Check what can be checked of the Nix flake offline.
    Flake,
    /// Check the crate ladder against docs/ARCHITECTURE.md, file headers and lengths,
    /// and import loops.
    Tidy,
    /// The whole test suite: format, lints, tests, snapshots and the report page in
    /// headless chromium, reproduce --check, verify, flake.
    Test,
}

fn main() -> Result<()> {
    let root = project_root();
    match Cli::parse().command {
        Task::Reproduce { args } => reproduce(&root, &args),
        Task::Verify { update } => lock::verify(&root, update),
        Task::Setup { system, tvm } => {
            if system {
                system::install()?;
            }
            setup::run(&root, tvm)
        }
        Task::Fuzz { seconds, target } => fuzz(&root, seconds, target.as_deref()),
        Task::Crosscheck { args } => {
            setup::run(&root, false)?;
            dlas(&root, "crosscheck", &args)
        }
        Task::Bench { args } => {
            setup::run(&root, false)?;
            if args.first().map(String::as_str) == Some("engine") {
                // Per layer against the measured FMA peak, then whole networks
                // against ONNX Runtime and tract.
                run(cargo(&root).args([
                    "run",
                    "--release",
                    "--quiet",
                    "-p",
                    "dlas-engine",
                    "--example",
                    "bench_engine",
                    "--",
                    "11",
                    "layers",
                    "sparse",
                ]))?;
            }
            dlas(&root, "bench", &args)
        }
        Task::Flake => flake::check(&root),
        Task::Tidy => tidy::run(&root),
        Task::Test => test(&root),
    }
}

fn step(name: &str) {
    eprintln!("\n==> {name}");
}

/// `cargo xtask fuzz`: the fuzz tests of `crates/dlas-cli/tests/fuzz.rs`
/// with a time budget instead of their fixed number of inputs.
fn fuzz(root: &Path, seconds: u64, target: Option<&str>) -> Result<()> {
    let filter = target.map_or_else(|| "all()".to_string(), |t| format!("test(=fuzz_{t})"));
    run(cargo(root)
        .args([
            "nextest",
            "run",
            "--release",
            "-p",
            "dlas-cli",
            "--test",
            "fuzz",
            "--no-capture",
            "--no-tests=fail",
            "-E",
            &filter,
        ])
        .env("DLAS_FUZZ_SECONDS", seconds.to_string()))
}

fn test(root: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    step("system packages");
    let missing = system::missing();
    let mut skipped = system::skipped_tests(&missing);
    if missing.is_empty() {
        eprintln!("all present");
    } else {
        let line = system::missing_line(&missing);
        if std::env::var_os(system::REQUIRE).is_some() {
            bail!(
                "{line}; {} is set, so no test may be skipped",
                system::REQUIRE
            );
        }
        eprintln!("{line}");
        for (binary, test) in &skipped {
            eprintln!("  skipping {binary}::{test}");
        }
    }
    step("setup (ONNX Runtime, OpenVINO)");
    setup::run(root, false)?;
    step("Apache TVM");
    let tvm_missing = !setup::tvm_present(root);
    if tvm_missing {
        let line = format!(
            "Apache TVM is not set up ({} does not import tvm 0.27.0.post1); set it up with `{}` \
             (about 610 MB)",
            setup::tvm_python(root).display(),
            setup::TVM_COMMAND
        );
        if std::env::var_os(system::REQUIRE).is_some() {
            bail!(
                "{line}; {} is set, so no test may be skipped",
                system::REQUIRE
            );
        }
        eprintln!("{line}");
        for (binary, test) in setup::TVM_TESTS {
            eprintln!("  skipping {binary}::{test}");
            skipped.push((binary, test));
        }
    } else {
        eprintln!("set up: {}", setup::tvm_python(root).display());
    }
    step("cargo fmt --check");
    run(cargo(root).args(["fmt", "--all", "--check"]))?;
    step("cargo clippy -D warnings");
    run(cargo(root).args([
        "clippy",
        "--release",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    step("cargo nextest (snapshots in check mode)");
    let mut nextest = cargo(root);
    nextest
        .args([
            "nextest",
            "run",
            "--release",
            "--workspace",
            "--no-fail-fast",
        ])
        .env("INSTA_UPDATE", "no")
        .env("CI", "true");
    if let Some(filter) = system::exclusion_filter(&skipped) {
        nextest.args(["-E", &filter]);
    }
    run(&mut nextest)?;
    step("reproduce --all --check");
    dlas(root, "reproduce", &["--all".into(), "--check".into()])?;
    step("reproduce --study compilers --all --check");
    dlas(
        root,
        "reproduce",
        &[
            "--study".into(),
            "compilers".into(),
            "--all".into(),
            "--check".into(),
        ],
    )?;
    step("bench harness (timing-loop overhead under 5 µs)");
    dlas(root, "bench", &["harness".into()])?;
    step("verify");
    lock::verify(root, false)?;
    step("flake");
    flake::check(root)?;
    eprintln!(
        "\nall checks passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if !skipped.is_empty() {
        let mut why = Vec::new();
        if !missing.is_empty() {
            why.push(system::missing_line(&missing));
        }
        if tvm_missing {
            why.push(format!(
                "Apache TVM is not set up (`{}`)",
                setup::TVM_COMMAND
            ));
        }
        eprintln!(
            "{} tests were skipped (counted as skipped above, not passed): {}",
            skipped.len(),
            why.join("; ")
        );
    }
    Ok(())
}
