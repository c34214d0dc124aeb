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
    let env = environment()?;
    let opt = match level {
        Level::Disabled => GraphOptimizationLevel::Disable,
        Level::All => GraphOptimizationLevel::All,
    };
    let session = ort::session::Session::builder(env)?
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
        .map_err(ort::Error::<()>::from)?
        .commit_from_file(model)
        .with_context(|| format!("ONNX Runtime cannot load {}", model.display()))?;
    Ok(Box::new(OrtSession {
        session,
        shape: config.input_shape,
        level,
        threads: config.threads,
        half_io: config.half_io,
    }))
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
