//! Cross-check: every runtime, and every algorithm of the native engine,
//! gives the same logits on the same seeded input and the same ONNX file.
//! ONNX Runtime without graph optimizations is the reference.

use crate::models::{self, Models};
use anyhow::Result;
use dlas_backends::{SessionConfig, ort_runtime, relative_l2};
use dlas_core::{Algorithm, Combination, Dataset, Study};
use std::path::Path;

/// Agreement of one runtime with the reference on one network.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    pub dataset: Dataset,
    pub model: String,
    pub compiler: String,
    pub relative_l2: f64,
}

/// The largest relative L2 error accepted between fp32 runtimes.
pub const TOLERANCE: f64 = 1e-4;

/// Runs every runtime on each network and compares with `ort-noopt`.
pub fn crosscheck(
    project_root: &Path,
    study: &Study,
    networks: &[(Dataset, String)],
    seed: u64,
) -> Result<Vec<Agreement>> {
    ort_runtime::init(&ort_runtime::library_path(project_root))?;
    let mut models = Models::new(project_root)?;
    let mut out = Vec::new();
    for (dataset, model) in networks {
        let c = Combination::host(*dataset, model, "ort-noopt");
        let path = models.path(study, &c)?;
        let [ch, h, w] = dataset.input_chw();
        let config = SessionConfig {
            input_shape: [1, ch, h, w],
            threads: 2,
            half_io: false,
        };
        let input = models::input(&c, seed);
        let reference = dlas_backends::load("ort-noopt", &path, &config)?.run(&input)?;
        for compiler in ["ort-opt", "tract-plain", "tract-opt"] {
            let output = dlas_backends::load(compiler, &path, &config)?.run(&input)?;
            out.push(Agreement {
                dataset: *dataset,
                model: model.clone(),
                compiler: compiler.into(),
                relative_l2: relative_l2(&output, &reference),
            });
        }
        for algorithm in [Algorithm::Direct, Algorithm::Gemm, Algorithm::SpatialPack] {
            let native = Combination {
                compiler: dlas_core::NATIVE.into(),
                algorithm,
                ..c.clone()
            };
            let output = crate::native::load(&path, &native, 2, None)?.run(&input)?;
            out.push(Agreement {
                dataset: *dataset,
                model: model.clone(),
                compiler: format!("native {algorithm}"),
                relative_l2: relative_l2(&output, &reference),
            });
        }
    }
    Ok(out)
}
