//! The native engine as a host backend: it reads the same ONNX file the
//! runtimes read (through `dlas_onnx::import`), so all compilers of a
//! combination run the same network and weights.

use anyhow::Result;
use dlas_backends::Session;
use dlas_core::{Combination, Compression, Format};
use dlas_engine::{DType, Engine, EngineConfig, FormatChoice};
use std::path::Path;

/// Calibration samples of int8 activation ranges (seeded inputs, f64 reference).
const CALIBRATION_SAMPLES: usize = 4;

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

/// Compiles the fp32 ONNX file `model` for the combination's algorithm,
/// format, layout and data type. Pruned models carry their zeros in the
/// file; fp16 and int8 are the engine's storage types (int8 calibrated on
/// seeded inputs against the f64 reference).
pub fn load(model: &Path, c: &Combination, threads: usize, seed: u64) -> Result<Box<dyn Session>> {
    let bytes = std::fs::read(model)?;
    let (graph, weights) = dlas_onnx::import(&bytes, &c.model, c.dataset)?;
    let dtype = match c.compression {
        Compression::Fp16 => DType::F16,
        Compression::Int8 => DType::I8,
        _ => DType::F32,
    };
    let quant = (dtype == DType::I8).then(|| {
        let inputs = dlas_zoo::weights::input(&graph, seed, CALIBRATION_SAMPLES);
        dlas_zoo::quant::calibrate(&graph, &weights, &inputs, CALIBRATION_SAMPLES)
    });
    let config = EngineConfig {
        threads,
        algorithm: c.algorithm,
        format: match c.format {
            Format::Dense => FormatChoice::Dense,
            Format::Csr => FormatChoice::Csr,
            Format::Bsr => FormatChoice::Bsr { rows: 1, cols: 4 },
        },
        layout: c.layout,
        dtype,
        schedule: None,
        quant,
    };
    let engine = Engine::compile(&graph, &weights, &config)?;
    Ok(Box::new(NativeSession {
        engine,
        batch: c.batch,
        description: format!(
            "dlas-engine {} {} {} {dtype:?}, default schedules, {threads} thread(s)",
            c.algorithm, c.format, c.layout
        ),
    }))
}
