//! tract: `tract-plain` runs the typed, decluttered model; `tract-opt` the
//! optimized one (`into_optimized`), with tract's multithreaded executor.
//!
//! An fp16 model runs its arithmetic in f32 on x86-64, as ONNX Runtime's
//! CPU provider does there (it inserts casts around every fp16 node it has
//! no kernel for): x86-64 CPUs without AVX512-FP16 have no f16 vector
//! arithmetic, tract has no f16 kernels for them and emulates f16 per
//! value, about 200x slower than f32 (`../shared/reference/toolchain-notes.md`;
//! one CIFAR-10 ResNet-18 inference took about a minute here). The weights
//! keep their f16 values; what the comparison loses is the rounding of
//! activations to f16 between layers. On AArch64 tract runs f16 natively.

use crate::{Session, SessionConfig};
use anyhow::{Context, Result};
use std::path::Path;
use tract_onnx::prelude::*;

/// Whether an fp16 model is computed in f32 (see the module's doc).
const F16_IN_F32: bool = cfg!(target_arch = "x86_64");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Typed and decluttered, not optimized: the uncompiled graph.
    Plain,
    /// `into_optimized`: tract's compiled plan.
    Optimized,
}

struct TractSession {
    plan: std::sync::Arc<TypedRunnableModel>,
    shape: [usize; 4],
    level: Level,
    threads: usize,
    half_io: bool,
    f16_in_f32: bool,
}

pub fn load(model: &Path, config: &SessionConfig, level: Level) -> Result<Box<dyn Session>> {
    let shape = config.input_shape;
    let inference = tract_onnx::onnx()
        .model_for_path(model)
        .with_context(|| format!("tract cannot read {}", model.display()))?
        .with_input_fact(
            0,
            if config.half_io {
                f16::fact(shape)
            } else {
                f32::fact(shape)
            }
            .into(),
        )?;
    let typed = inference
        .into_typed()
        .and_then(|m| m.into_decluttered())
        .with_context(|| format!("tract cannot type {}", model.display()))?;
    let half_io = config.half_io && !F16_IN_F32;
    let typed = if config.half_io && F16_IN_F32 {
        let mut m = typed;
        m.transform(
            &tract_onnx::tract_core::floats::FloatPrecisionTranslator::new(
                f16::datum_type(),
                f32::datum_type(),
            ),
        )
        .and_then(|()| m.into_decluttered())
        .with_context(|| format!("tract cannot run {} in f32", model.display()))?
    } else {
        typed
    };
    let typed = match level {
        Level::Plain => typed,
        Level::Optimized => typed
            .into_optimized()
            .with_context(|| format!("tract cannot optimize {}", model.display()))?,
    };
    let options = RunOptions {
        executor: (config.threads > 1)
            .then(|| tract_linalg::multithread::Executor::multithread(config.threads)),
        ..Default::default()
    };
    let plan = typed.into_runnable_with_options(&options)?;
    Ok(Box::new(TractSession {
        plan,
        shape,
        level,
        threads: config.threads,
        half_io,
        f16_in_f32: config.half_io && F16_IN_F32,
    }))
}

impl Session for TractSession {
    fn run(&mut self, input: &[f32]) -> Result<Vec<f32>> {
        if self.half_io {
            let half: Vec<f16> = input.iter().map(|x| f16::from_f32(*x)).collect();
            let tensor = Tensor::from_shape(&self.shape, &half)?;
            let outputs = self.plan.run(tvec!(tensor.into()))?;
            let view = outputs[0].to_plain_array_view::<f16>()?;
            return Ok(view.iter().map(|x| x.to_f32()).collect());
        }
        let tensor = Tensor::from_shape(&self.shape, input)?;
        let outputs = self.plan.run(tvec!(tensor.into()))?;
        let view = outputs[0].to_plain_array_view::<f32>()?;
        Ok(view.iter().copied().collect())
    }

    fn provider(&self) -> String {
        let level = match self.level {
            Level::Plain => "plain",
            Level::Optimized => "optimized",
        };
        let f16 = if self.f16_in_f32 {
            ", fp16 computed in f32"
        } else {
            ""
        };
        format!("tract {level}{f16}, {} thread(s)", self.threads)
    }
}
