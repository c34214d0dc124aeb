//! The native engine as a host backend: it reads the same ONNX file the
//! runtimes read (through `dlas_onnx::import`), so all compilers of a
//! combination run the same network and weights.

use crate::tuning::Tuned;
use anyhow::{Result, bail};
use dlas_backends::Session;
use dlas_core::{Combination, Compression, Dataset, Format};
use dlas_engine::{DType, Engine, EngineConfig, FormatChoice, KernelAlgorithm};
use dlas_zoo::Graph;
use dlas_zoo::quant::QuantParams;
use dlas_zoo::weights::Weights;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{LazyLock, Mutex};

/// The int8 parameters of each network, calibrated once per process: a
/// batch sweep loads the same network at every batch size.
static INT8_PARAMS: LazyLock<Mutex<HashMap<(Dataset, String), QuantParams>>> =
    LazyLock::new(Default::default);

/// The compression stage's int8 parameters of a network: the calibration
/// of the QDQ file the runtimes read ([`crate::models::int8_calibration`]),
/// extended to every node because the engine keeps every activation in int8.
fn int8_params(c: &Combination, graph: &Graph, weights: &Weights) -> Result<QuantParams> {
    let key = (c.dataset, c.model.clone());
    if let Some(q) = INT8_PARAMS.lock().expect("not poisoned").get(&key) {
        return Ok(q.clone());
    }
    let calibration = crate::models::int8_calibration(graph);
    let q = dlas_compress::engine_params(graph, weights, &calibration, &dlas_compress::Tract)?;
    INT8_PARAMS
        .lock()
        .expect("not poisoned")
        .insert(key, q.clone());
    Ok(q)
}

struct NativeSession {
    engine: Engine,
    batch: usize,
    description: String,
}

impl Session for NativeSession {
    fn run(&mut self, input: &[f32]) -> Result<Vec<f32>> {
        self.engine.run(input, self.batch)
    }

    fn provider(&self) -> String {
        self.description.clone()
    }
}

/// A tuned combination with layers the tuning records do not cover: it is
/// not run (and not recorded), so that it runs once `dlas tune` has covered it.
#[derive(Debug, thiserror::Error)]
#[error(
    "{missing} of {layers} layers have no tuned schedule in {} for machine {fingerprint}, e.g. {example}",
    path.display()
)]
pub struct Untuned {
    pub missing: usize,
    pub layers: usize,
    pub path: std::path::PathBuf,
    pub fingerprint: String,
    pub example: String,
}

/// The engine configuration of a combination: its algorithm, format,
/// layout and data type (int8 with the compression stage's parameters).
/// Fails for algorithm `auto`, naming the algorithms the engine has.
pub fn engine_config(
    c: &Combination,
    threads: usize,
    graph: &Graph,
    weights: &Weights,
) -> Result<EngineConfig> {
    let algorithm = KernelAlgorithm::try_from(c.algorithm)?;
    let dtype = match c.compression {
        Compression::Fp16 => DType::F16,
        Compression::Int8 => DType::I8,
        _ => DType::F32,
    };
    let quant = match dtype {
        DType::I8 => Some(int8_params(c, graph, weights)?),
        _ => None,
    };
    Ok(EngineConfig {
        threads,
        algorithm,
        format: match c.format {
            Format::Dense => FormatChoice::Dense,
            Format::Csr => FormatChoice::Csr,
            Format::Bsr => FormatChoice::Bsr { rows: 1, cols: 4 },
        },
        layout: c.layout,
        dtype,
        schedule: None,
        quant,
    })
}

/// Compiles the fp32 ONNX file `model` for the combination. Pruned models
/// carry their zeros in the file; fp16 and int8 are the engine's storage
/// types. A tuned combination applies `tuned`'s schedules and fails, naming
/// the `dlas tune` command to run, if a tunable layer has none.
pub fn load(
    model: &Path,
    c: &Combination,
    threads: usize,
    tuned: Option<&Tuned>,
) -> Result<Box<dyn Session>> {
    let bytes = std::fs::read(model)?;
    let (graph, weights) = dlas_onnx::import(&bytes, &c.model, c.dataset)?;
    let config = engine_config(c, threads, &graph, &weights)?;
    let (engine, schedules) = match (c.tuned, tuned) {
        (false, _) => (
            Engine::compile(&graph, &weights, &config)?,
            "default schedules".to_string(),
        ),
        (true, _) if config.dtype == DType::I8 => (
            Engine::compile(&graph, &weights, &config)?,
            "int8 kernels have no schedule knobs, so tuned is untuned".to_string(),
        ),
        (true, None) => bail!("a tuned combination needs tuning records (none were loaded)"),
        (true, Some(t)) => {
            let engine =
                Engine::compile_with(&graph, &weights, &config, &t.table(threads, c.batch))?;
            let missing = engine.default_scheduled();
            if !missing.is_empty() {
                return Err(Untuned {
                    missing: missing.len(),
                    layers: engine.layers().count(),
                    path: t.path.clone(),
                    fingerprint: t.fingerprint.clone(),
                    example: missing[0].to_string(),
                }
                .into());
            }
            let origin = if t.foreign {
                format!("tuned on another machine ({})", t.fingerprint)
            } else {
                "tuned".to_string()
            };
            (
                engine,
                format!("{origin} schedules from {}", t.path.display()),
            )
        }
    };
    Ok(Box::new(NativeSession {
        engine,
        batch: c.batch,
        description: format!(
            "dlas-engine {} {} {} {:?}, {schedules}, {threads} thread(s)",
            c.algorithm, c.format, c.layout, config.dtype
        ),
    }))
}
