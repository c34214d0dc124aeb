//! ONNX Runtime through the `ort` crate, loaded at run time from the library
//! that `cargo xtask setup` extracts from the pinned wheel (or Nix provides).
//! `ort-noopt` disables graph optimizations; `ort-opt` enables all of them.

use crate::{Session, SessionConfig};
use anyhow::{Context, Result, anyhow, bail};
use ort::session::builder::GraphOptimizationLevel;
use ort::value::TensorRef;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The variable naming the ONNX Runtime shared library (same as the `ort` crate's).
pub const DYLIB_VAR: &str = "ORT_DYLIB_PATH";
/// The ONNX Runtime version `cargo xtask setup` installs.
pub const VERSION: &str = "1.31.1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Disabled,
    All,
}

static ENVIRONMENT: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();

/// Where the library is expected: `$ORT_DYLIB_PATH`, else the setup cache
/// under `<project>/.cache/onnxruntime/<version>/`.
pub fn library_path(project_root: &Path) -> PathBuf {
    std::env::var_os(DYLIB_VAR).map_or_else(
        || {
            project_root
                .join(".cache/onnxruntime")
                .join(VERSION)
                .join(format!("libonnxruntime.so.{VERSION}"))
        },
        PathBuf::from,
    )
}

/// Loads the library once per process. The error says what to run.
pub fn init(library: &Path) -> Result<()> {
    let env = ENVIRONMENT.get_or_init(|| {
        if !library.is_file() {
            return Err(format!(
                "the ONNX Runtime library {} does not exist; run `cargo xtask setup` \
                 (or set {DYLIB_VAR} to a libonnxruntime.so)",
                library.display()
            ));
        }
        ort::init_from(library)
            .map_err(|e| format!("cannot load ONNX Runtime from {}: {e}", library.display()))?
            .with_name("dlas")
            .build()
            .map_err(|e| format!("cannot start ONNX Runtime: {e}"))
    });
    env.as_ref().map(drop).map_err(|e| anyhow!("{e}"))
}

fn environment() -> Result<&'static ort::environment::Environment> {
    match ENVIRONMENT.get() {
        Some(Ok(env)) => Ok(env),
        Some(Err(e)) => bail!("{e}"),
        None => bail!("ONNX Runtime is not initialised; call ort_runtime::init first"),
    }
}

/// The loaded library's build information.
pub fn info() -> Result<String> {
    environment()?;
    Ok(ort::info().to_string())
}

struct OrtSession {
    session: ort::session::Session,
    shape: [usize; 4],
    level: Level,
    threads: usize,
    half_io: bool,
}

pub fn load(model: &Path, config: &SessionConfig, level: Level) -> Result<Box<dyn Session>> {
    let session = open(model, config, level, None)?;
    Ok(Box::new(OrtSession {
        session,
        shape: config.input_shape,
        level,
        threads: config.threads,
        half_io: config.half_io,
    }))
}

/// The session `load` runs, with ONNX Runtime's profiler writing to a file
/// starting with `profile` when given.
fn open(
    model: &Path,
    config: &SessionConfig,
    level: Level,
    profile: Option<&Path>,
) -> Result<ort::session::Session> {
    let env = environment()?;
    let opt = match level {
        Level::Disabled => GraphOptimizationLevel::Disable,
        Level::All => GraphOptimizationLevel::All,
    };
    let builder = ort::session::Session::builder(env)?
        .with_optimization_level(opt)
        .map_err(ort::Error::<()>::from)?
        .with_intra_threads(config.threads)
        .map_err(ort::Error::<()>::from)?
        .with_inter_threads(1)
        .map_err(ort::Error::<()>::from)?
        // Its workers still spin between the nodes of a run, as ONNX
        // Runtime's default has them do, but stop when the run returns:
        // otherwise they spin on for tens of ms and take the cores of
        // whatever the campaign times next (docs/protocol.md).
        .with_config_entry("session.force_spinning_stop", "1")
        .map_err(ort::Error::<()>::from)?;
    let mut builder = match profile {
        Some(prefix) => builder
            .with_profiling(prefix)
            .map_err(ort::Error::<()>::from)?,
        None => builder,
    };
    builder
        .commit_from_file(model)
        .with_context(|| format!("ONNX Runtime cannot load {}", model.display()))
}

/// One node's kernel time in ONNX Runtime's own profile of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTime {
    /// The node's name in the optimized graph: the same node in every run
    /// (their order may differ between runs where nodes are independent).
    pub name: String,
    /// The operator that ran, after the graph optimizations (`FusedConv`,
    /// `ReorderInput`).
    pub op: String,
    /// Its first input's and first output's shapes (batch included),
    /// empty where the profile gives none.
    pub input: Vec<usize>,
    pub output: Vec<usize>,
    pub seconds: f64,
}

/// One run in ONNX Runtime's profile: its whole time (the `model_run`
/// event) and each node's kernel time.
#[derive(Debug, Clone, PartialEq)]
pub struct RunProfile {
    pub seconds: f64,
    pub nodes: Vec<NodeTime>,
}

/// ONNX Runtime's profile of `runs` runs of `model` on `input` after
/// `warmup` untimed ones: per run, its time and the kernel time of each
/// node that ran, as its profiler (`SessionOptions::EnableProfiling`)
/// records them. What `dlas bench profile` sets beside the engine's steps.
pub fn profile(
    model: &Path,
    config: &SessionConfig,
    level: Level,
    input: &[f32],
    (warmup, runs): (usize, usize),
) -> Result<Vec<RunProfile>> {
    anyhow::ensure!(!config.half_io, "profiles are of f32 models");
    let dir = tempfile::tempdir()?;
    let mut session = open(model, config, level, Some(&dir.path().join("ort")))?;
    for _ in 0..warmup + runs {
        let tensor = TensorRef::from_array_view((config.input_shape, input))?;
        session.run(ort::inputs![tensor])?;
    }
    let file = session.end_profiling()?;
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read ONNX Runtime's profile {file}"))?;
    let mut per_run =
        parse_profile(&text).with_context(|| format!("ONNX Runtime's profile {file}"))?;
    anyhow::ensure!(
        per_run.len() == warmup + runs,
        "ONNX Runtime's profile {file} has {} runs, {} were made",
        per_run.len(),
        warmup + runs
    );
    Ok(per_run.split_off(warmup))
}

/// A profile's runs: each `model_run` event with the `Node` events
/// (`..._kernel_time`) inside it.
fn parse_profile(text: &str) -> Result<Vec<RunProfile>> {
    let events: Vec<serde_json::Value> = serde_json::from_str(text)?;
    let span = |e: &serde_json::Value| -> Option<(f64, f64)> {
        let ts = e["ts"].as_f64()?;
        Some((ts, ts + e["dur"].as_f64()?))
    };
    let mut runs: Vec<(f64, f64)> = events
        .iter()
        .filter(|e| e["cat"] == "Session" && e["name"] == "model_run")
        .filter_map(span)
        .collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut profiles: Vec<RunProfile> = runs
        .iter()
        .map(|&(start, end)| RunProfile {
            seconds: (end - start) / 1e6,
            nodes: Vec::new(),
        })
        .collect();
    for e in &events {
        let name = e["name"]
            .as_str()
            .and_then(|n| n.strip_suffix("_kernel_time"));
        let (Some(name), Some((start, end))) = (name, span(e).filter(|_| e["cat"] == "Node"))
        else {
            continue;
        };
        let Some(run) = runs.iter().position(|&(a, b)| a <= start && end <= b) else {
            bail!("node event at {start} µs lies in no model_run");
        };
        // `[{"float": [1, 32, 112, 112]}, ...]`
        let shape = |key: &str| {
            e["args"][key][0]
                .as_object()
                .and_then(|m| m.values().next())
                .and_then(|v| v.as_array())
                .map_or_else(Vec::new, |dims| {
                    dims.iter()
                        .filter_map(|d| d.as_u64())
                        .map(|d| d as usize)
                        .collect()
                })
        };
        profiles[run].nodes.push(NodeTime {
            name: name.to_string(),
            op: e["args"]["op_name"].as_str().unwrap_or("?").to_string(),
            input: shape("input_type_shape"),
            output: shape("output_type_shape"),
            seconds: (end - start) / 1e6,
        });
    }
    Ok(profiles)
}

impl Session for OrtSession {
    fn run(&mut self, input: &[f32]) -> Result<Vec<f32>> {
        if self.half_io {
            let half: Vec<half::f16> = input.iter().map(|x| half::f16::from_f32(*x)).collect();
            let tensor = TensorRef::from_array_view((self.shape, &half[..]))?;
            let outputs = self.session.run(ort::inputs![tensor])?;
            let (_, values) = outputs[0].try_extract_tensor::<half::f16>()?;
            return Ok(values.iter().map(|x| x.to_f32()).collect());
        }
        let tensor = TensorRef::from_array_view((self.shape, input))?;
        let outputs = self.session.run(ort::inputs![tensor])?;
        let (_, values) = outputs[0].try_extract_tensor::<f32>()?;
        Ok(values.to_vec())
    }

    fn provider(&self) -> String {
        let level = match self.level {
            Level::Disabled => "optimizations disabled",
            Level::All => "all optimizations",
        };
        format!(
            "onnxruntime CPUExecutionProvider, {level}, {} thread(s)",
            self.threads
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{NodeTime, parse_profile};

    /// Node events are assigned to the run whose span holds them; events
    /// of other kinds (the session's load, a node's fence) are left out.
    #[test]
    fn a_profile_is_read_run_by_run() {
        let text = r#"[
          {"cat":"Session","name":"session_initialization","ts":10,"dur":50},
          {"cat":"Session","name":"model_run","ts":100,"dur":40},
          {"cat":"Node","name":"conv_fence_before","ts":101,"dur":0,"args":{"op_name":"Conv"}},
          {"cat":"Node","name":"conv_kernel_time","ts":102,"dur":30,
           "args":{"op_name":"FusedConv","input_type_shape":[{"float":[1,3,224,224]},{"float":[32,3,3,3]}],
                   "output_type_shape":[{"float":[1,32,112,112]}]}},
          {"cat":"Session","name":"model_run","ts":200,"dur":40},
          {"cat":"Node","name":"gemm_kernel_time","ts":210,"dur":5,"args":{"op_name":"Gemm"}}
        ]"#;
        let runs = parse_profile(text).unwrap();
        assert_eq!(
            runs.iter().map(|r| r.seconds).collect::<Vec<_>>(),
            [40e-6; 2]
        );
        let nodes: Vec<Vec<NodeTime>> = runs.into_iter().map(|r| r.nodes).collect();
        assert_eq!(
            nodes,
            [
                vec![NodeTime {
                    name: "conv".into(),
                    op: "FusedConv".into(),
                    input: vec![1, 3, 224, 224],
                    output: vec![1, 32, 112, 112],
                    seconds: 30e-6
                }],
                vec![NodeTime {
                    name: "gemm".into(),
                    op: "Gemm".into(),
                    input: vec![],
                    output: vec![],
                    seconds: 5e-6
                }]
            ]
        );
        let outside = r#"[{"cat":"Node","name":"x_kernel_time","ts":1,"dur":1,"args":{}}]"#;
        assert!(parse_profile(outside).is_err());
    }
}
