//! Every command README.md and ARTIFACT.md tell a reader to type is
//! exercised, so the documents cannot rot: quick ones that write nothing
//! committed are run here exactly as printed (in a scratch folder, with the
//! reader's own results files stood in for by the recorded run); the others
//! are mapped to the test or the step of `cargo xtask test` that runs them,
//! which this test checks still exist; long-running ones must say so where
//! the document gives them. A documented command matching none of these
//! fails the test, as does a mapping no document uses any more.

mod common;

use common::root;
use std::path::Path;
use std::process::Command;

/// How a documented command is exercised.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Exercised {
    /// Run by this test, exactly as documented.
    Here,
    /// By this test function, in this file under the project root.
    Test(&'static str, &'static str),
    /// By this step of `cargo xtask test` (its name in xtask/src/main.rs).
    Xtask(&'static str),
    /// `cargo xtask test` itself, which `.ci/run` runs.
    Ci,
    /// Too slow for the test suite: the document must say "long-running";
    /// the named test exercises its machinery on a smaller case.
    LongRunning(&'static str, &'static str),
}

use Exercised::*;

const COMMANDS_RS: &str = "crates/dlas-cli/tests/commands.rs";
const COMPRESS_RS: &str = "crates/dlas-cli/tests/compress.rs";
const RUNTIMES_RS: &str = "crates/dlas-runner/tests/runtimes_agree.rs";
const ENGINE_RS: &str = "crates/dlas-engine/tests/networks.rs";
const TUNE_RS: &str = "crates/dlas-cli/tests/tune.rs";

/// Documented commands by prefix; the longest matching prefix applies.
const MAPPINGS: &[(&str, Exercised)] = &[
    ("cargo xtask test", Ci),
    ("cargo xtask setup", Xtask("setup (ONNX Runtime, OpenVINO)")),
    (
        "cargo xtask setup --tvm",
        Test(
            "crates/dlas-runner/tests/tvm.rs",
            "tvm_agrees_with_onnx_runtime_under_every_algorithm",
        ),
    ),
    ("cargo xtask reproduce", Xtask("reproduce --all --check")),
    (
        "cargo xtask reproduce --study compilers",
        Xtask("reproduce --study compilers --all --check"),
    ),
    (
        "dlas run --study compilers --device host",
        LongRunning(
            "crates/dlas-cli/tests/metrics.rs",
            "a_host_batch_sweep_gives_rtr_ase_and_bsr",
        ),
    ),
    ("cargo xtask verify", Xtask("verify")),
    (
        "dlas devices calibrate",
        LongRunning(
            "crates/dlas-runner/src/calibrate/layers.rs",
            "every_class_times_a_small_layer",
        ),
    ),
    ("dlas devices list", Here),
    ("dlas validate", Here),
    (
        "cargo xtask fuzz",
        LongRunning("crates/dlas-cli/tests/fuzz.rs", "fuzz_study"),
    ),
    ("cargo xtask flake", Xtask("flake")),
    (
        "cargo xtask tidy",
        Test("xtask/src/tidy.rs", "tidy_passes_on_this_tree"),
    ),
    (
        "cargo xtask crosscheck",
        LongRunning(
            RUNTIMES_RS,
            "cifar10_networks_agree_across_runtimes_and_the_native_engine",
        ),
    ),
    (
        "cargo xtask bench engine",
        LongRunning(ENGINE_RS, "resnet18_cifar"),
    ),
    (
        "cargo run --release -p dlas-engine --example bench_engine",
        LongRunning(ENGINE_RS, "resnet18_cifar"),
    ),
    (
        "cargo run --release -p dlas-cli --",
        Test(COMMANDS_RS, "plan_count_matches_the_study"),
    ),
    ("dlas plan", Here),
    ("dlas zoo", Here),
    ("dlas compare", Here),
    ("dlas claims", Here),
    (
        "dlas tune",
        Test(
            TUNE_RS,
            "tune_then_run_tuned_and_resume_without_remeasuring",
        ),
    ),
    (
        "dlas tune --study dlas --device host --filter compiler=tvm",
        LongRunning(
            "crates/dlas-runner/tests/tvm.rs",
            "a_tuned_session_applies_the_database_metaschedule_wrote",
        ),
    ),
    (
        "dlas run --device host --filter dataset=cifar10,compiler=native,tuned=true",
        Test(
            TUNE_RS,
            "tune_then_run_tuned_and_resume_without_remeasuring",
        ),
    ),
    (
        "cargo xtask bench tune",
        LongRunning(
            "crates/dlas-cli/tests/commands.rs",
            "a_tuning_bench_decides_each_configuration_with_its_interval",
        ),
    ),
    (
        "dlas metrics",
        Test(
            "crates/dlas-cli/tests/metrics.rs",
            "a_host_batch_sweep_gives_rtr_ase_and_bsr",
        ),
    ),
    (
        "dlas run --shard",
        Test(
            "crates/dlas-cli/tests/cluster.rs",
            "slurm_cluster_runs_and_merges_a_study",
        ),
    ),
    (
        "dlas run --study dlas --device mock",
        Test(COMMANDS_RS, "mocked_run_is_deterministic"),
    ),
    (
        "dlas run --study dlas --device host",
        LongRunning(COMMANDS_RS, "killed_host_run_resumes_without_duplicates"),
    ),
    (
        "dlas run --device host",
        LongRunning(COMMANDS_RS, "killed_host_run_resumes_without_duplicates"),
    ),
    (
        "dlas crosscheck",
        LongRunning(
            RUNTIMES_RS,
            "cifar10_networks_agree_across_runtimes_and_the_native_engine",
        ),
    ),
    (
        "dlas bench harness",
        Test(COMMANDS_RS, "harness_overhead_is_under_budget"),
    ),
    (
        "dlas bench profile",
        Test(
            COMMANDS_RS,
            "a_profile_sets_the_engines_steps_beside_onnx_runtimes_nodes",
        ),
    ),
    (
        "dlas reproduce --all --check",
        Xtask("reproduce --all --check"),
    ),
    (
        "dlas compress",
        Test(COMPRESS_RS, "compress_writes_onnx_and_a_json_report"),
    ),
    (
        "dlas sweep",
        Test(COMPRESS_RS, "sweep_prints_one_row_per_level"),
    ),
    (
        "dlas accuracy",
        Test(
            COMPRESS_RS,
            "accuracy_of_an_exported_model_on_a_cifar_folder",
        ),
    ),
    (
        "dlas cluster",
        Test(
            "crates/dlas-cli/tests/cluster.rs",
            "slurm_cluster_runs_and_merges_a_study",
        ),
    ),
];

/// A command as a document gives it.
#[derive(Debug)]
struct Documented {
    document: &'static str,
    command: String,
    /// Its line and comment (code blocks), or the words right after it (inline code).
    context: String,
    /// From a shell block, so meant to be typed as is (inline mentions
    /// may elide arguments).
    runnable: bool,
}

fn is_command(text: &str) -> bool {
    text.starts_with("dlas ") || text.starts_with("cargo xtask ") || text.starts_with("cargo run ")
}

/// Commands in `sh` blocks (one per line, a comment after ` #`) and
/// in inline code.
fn documented(document: &'static str) -> Vec<Documented> {
    let text = std::fs::read_to_string(root().join(document)).unwrap();
    let mut out = Vec::new();
    let mut in_block = false;
    let mut prose = String::new();
    for line in text.lines().chain([""]) {
        if line.starts_with("```") {
            in_block = line == "```sh";
            continue;
        }
        if in_block {
            // A comment on a line of its own continues the command above.
            if line.trim_start().starts_with('#') {
                if let Some(last) = out.last_mut().filter(|d: &&mut Documented| d.runnable) {
                    last.context += line;
                }
                continue;
            }
            let command = line.split(" #").next().unwrap().trim();
            if is_command(command) {
                out.push(Documented {
                    document,
                    command: command.to_string(),
                    context: line.to_string(),
                    runnable: true,
                });
            }
            continue;
        }
        if !line.trim().is_empty() {
            prose += line;
            prose += " ";
            continue;
        }
        let spans: Vec<&str> = prose.split('`').collect();
        for (i, code) in spans.iter().enumerate() {
            if i % 2 == 1 && is_command(code) {
                // What follows the command, up to the next code span.
                let after = spans.get(i + 1).copied().unwrap_or("");
                out.push(Documented {
                    document,
                    command: code.to_string(),
                    context: after.chars().take(40).collect(),
                    runnable: false,
                });
            }
        }
        prose.clear();
    }
    out
}

fn mapping(command: &str) -> Option<&'static (&'static str, Exercised)> {
    MAPPINGS
        .iter()
        .filter(|(prefix, _)| command.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
}

fn has_test(file: &str, name: &str) -> bool {
    std::fs::read_to_string(root().join(file))
        .is_ok_and(|text| text.contains(&format!("fn {name}()")))
}

/// Runs a documented `dlas` command in `dir`, the reader's own results
/// files standing in as copies of the recorded run.
fn run_here(command: &str, dir: &Path) -> Result<(), String> {
    let mut args: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(args.remove(0), "dlas");
    for file in ["my-host.csv", "mine.csv"] {
        if args.contains(&file) && !dir.join(file).exists() {
            std::fs::copy(root().join("data/results/dlas/host.csv"), dir.join(file)).unwrap();
        }
    }
    let output = Command::new(env!("CARGO_BIN_EXE_dlas"))
        .current_dir(dir)
        .arg("--root")
        .arg(root())
        .args(&args)
        .output()
        .unwrap();
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[test]
fn every_documented_command_is_exercised() {
    let commands: Vec<Documented> = ["README.md", "ARTIFACT.md"]
        .into_iter()
        .flat_map(documented)
        .collect();
    assert!(commands.len() > 20, "{commands:#?}");
    let xtask = std::fs::read_to_string(root().join("xtask/src/main.rs")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    // The reader's paths: `dlas ... resnet18.onnx` writes into the scratch folder.
    let dir = scratch.path();
    std::fs::create_dir_all(dir.join("data/results/dlas")).unwrap();
    for name in ["mock.csv", "host.csv"] {
        std::fs::copy(
            root().join("data/results/dlas").join(name),
            dir.join("data/results/dlas").join(name),
        )
        .unwrap();
    }
    std::fs::create_dir_all(dir.join("data/results/compilers")).unwrap();
    std::fs::copy(
        root().join("data/results/compilers/mock.csv"),
        dir.join("data/results/compilers/mock.csv"),
    )
    .unwrap();
    let mut problems = Vec::new();
    let mut used = vec![false; MAPPINGS.len()];
    for doc in &commands {
        let Some(entry) = mapping(&doc.command) else {
            problems.push(format!(
                "{}: `{}` is exercised by no test",
                doc.document, doc.command
            ));
            continue;
        };
        used[MAPPINGS
            .iter()
            .position(|m| std::ptr::eq(m, entry))
            .unwrap()] = true;
        let problem = match entry.1 {
            Here if doc.runnable => run_here(&doc.command, dir).err(),
            Here => None,
            Test(file, name) => {
                (!has_test(file, name)).then(|| format!("test {file}::{name} is gone"))
            }
            Xtask(step) => (!xtask.contains(&format!("step(\"{step}")))
                .then(|| format!("`cargo xtask test` has no step {step}")),
            Ci => (!ci.contains("cargo xtask test")).then(|| ".ci/run does not run it".into()),
            LongRunning(file, name) => {
                if !doc.context.contains("long-running") {
                    Some("it is long-running and the document does not say so".into())
                } else {
                    (!has_test(file, name)).then(|| format!("test {file}::{name} is gone"))
                }
            }
        };
        if let Some(problem) = problem {
            problems.push(format!("{}: `{}`: {problem}", doc.document, doc.command));
        }
    }
    for (i, (prefix, _)) in MAPPINGS.iter().enumerate() {
        if !used[i] {
            problems.push(format!("no document uses `{prefix}` any more"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
