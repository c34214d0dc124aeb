//! Cross-check: every compiler a study runs on the host (each runtime, and
//! each algorithm of the native engine) gives the same logits on the same
//! seeded input and the same ONNX file. ONNX Runtime without graph
//! optimizations is the reference where the study lists it.

use crate::models::{self, Models};
use anyhow::Result;
use dlas_backends::{SessionConfig, openvino_runtime, ort_runtime, relative_l2, tvm_runtime};
use dlas_core::{Algorithm, Combination, Compression, Dataset, Study};
use std::path::Path;

/// What one compiler gave on one network, against the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    pub dataset: Dataset,
    pub model: String,
    /// The compiler, and for the native engine its algorithm (`native gemm`).
    pub compiler: String,
    /// The relative L2 error against the reference, or why there is none
    /// (this compiler or the reference failed to load or run).
    pub relative_l2: Result<f64, String>,
    /// The largest error accepted for this compiler ([`tolerance`]).
    pub tolerance: f64,
}

impl Agreement {
    /// Whether it ran and agrees within its tolerance.
    pub fn agrees(&self) -> bool {
        self.relative_l2.as_ref().is_ok_and(|e| *e < self.tolerance)
    }
}

/// The largest relative L2 error accepted between fp32 runtimes.
pub const TOLERANCE: f64 = 1e-4;

/// The largest relative L2 error accepted from a compiler that may infer
/// in bfloat16 (`openvino-native` on CPUs with AMX or AVX512-BF16): its 8
/// bits of mantissa gave 3e-3 to 5e-2 on the zoo's networks on an Intel
/// Xeon (toolchain notes, section 9). Where it runs f32 it agrees at fp32's
/// error, which the report shows.
pub const REDUCED_TOLERANCE: f64 = 1e-1;

/// The tolerance `compiler` is held to.
pub fn tolerance(compiler: &str) -> f64 {
    if compiler == "openvino-native" {
        REDUCED_TOLERANCE
    } else {
        TOLERANCE
    }
}

/// The runtime every other is compared with, when the study lists it.
pub const REFERENCE: &str = "ort-noopt";

/// A compiler as the cross-check runs it: a runtime, or the native
/// engine with one algorithm.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Runner {
    pub compiler: String,
    pub algorithm: Algorithm,
}

impl Runner {
    fn name(&self) -> String {
        if self.compiler == dlas_core::NATIVE || self.compiler == dlas_backends::TVM {
            format!("{} {}", self.compiler, self.algorithm)
        } else {
            self.compiler.clone()
        }
    }
}

/// The dense fp32 host runners of each network that `combinations` (a
/// study's plan, filtered) lists, networks in plan order: only what the
/// study runs on the host is compared.
pub fn runners_of(combinations: &[Combination]) -> Vec<((Dataset, String), Vec<Runner>)> {
    let mut out: Vec<((Dataset, String), Vec<Runner>)> = Vec::new();
    for c in combinations {
        if c.device != "host" || c.compression != Compression::Dense || c.tuned {
            continue;
        }
        let key = (c.dataset, c.model.clone());
        let runner = Runner {
            compiler: c.compiler.clone(),
            algorithm: c.algorithm,
        };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, runners)) if !runners.contains(&runner) => runners.push(runner),
            Some(_) => {}
            None => out.push((key, vec![runner])),
        }
    }
    out
}

/// Runs every runner of each network on one seeded input and compares it
/// with the reference: [`REFERENCE`] when the network lists it, otherwise
/// its first runner. A runner that fails is reported with its reason and
/// the others go on; so is every runner of a network whose reference fails.
/// Each agreement goes to `found` as soon as it is known (an untuned TVM
/// build of an ImageNet network runs for minutes, and a check of a whole
/// study for hours: what is done is shown, and kept if it is stopped), and
/// each runner's step is shown on standard error while it runs.
pub fn crosscheck(
    project_root: &Path,
    study: &Study,
    networks: &[((Dataset, String), Vec<Runner>)],
    seed: u64,
    found: &mut dyn FnMut(&Agreement),
) -> Result<Vec<Agreement>> {
    let steps: usize = networks.iter().map(|(_, r)| r.len()).sum();
    let mut step = 0;
    let needs_ort = networks
        .iter()
        .any(|(_, runners)| runners.iter().any(|r| r.compiler.starts_with("ort-")));
    let ort = if needs_ort {
        ort_runtime::init(&ort_runtime::library_path(project_root)).map_err(|e| format!("{e:#}"))
    } else {
        Ok(())
    };
    let needs_openvino = networks
        .iter()
        .any(|(_, runners)| runners.iter().any(|r| r.compiler.starts_with("openvino-")));
    let openvino = if needs_openvino {
        openvino_runtime::init(&openvino_runtime::library_path(project_root))
            .map(drop)
            .map_err(|e| format!("{e:#}"))
    } else {
        Ok(())
    };
    let mut models = Models::new(project_root)?;
    let mut out = Vec::new();
    for ((dataset, model), runners) in networks {
        let c = Combination::host(*dataset, model, REFERENCE);
        let path = models.path(study, &c)?;
        let [ch, h, w] = dataset.input_chw();
        let config = SessionConfig {
            input_shape: [1, ch, h, w],
            threads: 2,
            half_io: false,
            tvm: None,
        };
        let input = models::input(&c, seed);
        let mut run = |r: &Runner| -> Result<Vec<f32>, String> {
            step += 1;
            let _shown = crate::progress::spinner(&format!(
                "crosscheck {step}/{steps}: {dataset}/{model} {}",
                r.name()
            ));
            if let (true, Err(e)) = (r.compiler.starts_with("ort-"), &ort) {
                return Err(e.clone());
            }
            if let (true, Err(e)) = (r.compiler.starts_with("openvino-"), &openvino) {
                return Err(e.clone());
            }
            let config = SessionConfig {
                tvm: (r.compiler == dlas_backends::TVM).then(|| tvm_runtime::Options {
                    python: tvm_runtime::python(project_root),
                    algorithm: r.algorithm.to_string(),
                    database: None,
                    foreign: false,
                }),
                ..config.clone()
            };
            let session = if r.compiler == dlas_core::NATIVE {
                let native = Combination {
                    compiler: r.compiler.clone(),
                    algorithm: r.algorithm,
                    ..c.clone()
                };
                crate::native::load(&path, &native, 2, None)
            } else {
                dlas_backends::load(&r.compiler, &path, &config)
            };
            session
                .and_then(|mut s| s.run(&input))
                .map_err(|e| format!("{e:#}").replace('\n', " "))
        };
        let reference = runners
            .iter()
            .find(|r| r.compiler == REFERENCE)
            .or(runners.first());
        let Some(reference) = reference else {
            continue;
        };
        let expected =
            run(reference).map_err(|e| format!("reference {} failed: {e}", reference.name()));
        for runner in runners.iter().filter(|r| *r != reference) {
            let relative_l2 = match &expected {
                Err(e) => Err(e.clone()),
                Ok(expected) => run(runner).map(|output| relative_l2(&output, expected)),
            };
            let agreement = Agreement {
                dataset: *dataset,
                model: model.clone(),
                compiler: runner.name(),
                relative_l2,
                tolerance: tolerance(&runner.compiler),
            };
            found(&agreement);
            out.push(agreement);
        }
    }
    Ok(out)
}
