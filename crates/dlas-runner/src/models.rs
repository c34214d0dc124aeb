//! The ONNX file behind a combination: a zoo network generated into the
//! cache and checked against `data/models.lock`, or a user's model checked
//! against the sha256 the study gives. A file that does not match is never used.

use anyhow::{Context, Result, bail};
use dlas_core::{Combination, Compression, Study};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dlas_zoo::weights::MODEL_SEED;

/// Resolves and verifies model files, each at most once per process.
pub struct Models {
    root: PathBuf,
    /// Each file's locked sha256s: a model may have several builds (the
    /// int8 scales come from tract's f32 kernels, which round differently
    /// with AVX-512 and AVX2), any of which is accepted, as by
    /// `cargo xtask verify`.
    lock: HashMap<String, Vec<String>>,
    verified: HashMap<String, PathBuf>,
}

impl Models {
    pub fn new(project_root: &Path) -> Result<Models> {
        let lock_path = project_root.join("data/models.lock");
        let text = std::fs::read_to_string(&lock_path)
            .with_context(|| format!("cannot read {}", lock_path.display()))?;
        let mut lock: HashMap<String, Vec<String>> = HashMap::new();
        for (hash, file) in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| l.split_once("  "))
        {
            lock.entry(file.trim().to_string())
                .or_default()
                .push(hash.trim().to_string());
        }
        Ok(Models {
            root: project_root.to_path_buf(),
            lock,
            verified: HashMap::new(),
        })
    }

    /// The verified ONNX file of a combination's model.
    pub fn path(&mut self, study: &Study, c: &Combination) -> Result<PathBuf> {
        let key = format!("{}-{}-{}-{}", c.dataset, c.model, c.compression, c.level);
        if let Some(path) = self.verified.get(&key) {
            return Ok(path.clone());
        }
        let path = match study.onnx_model(&c.model) {
            Some(user) => {
                let path = study.onnx_model_path(user);
                if !path.is_file() {
                    bail!(
                        "model file {} (onnx_model `{}` in {}) does not exist; fix its `path`",
                        path.display(),
                        c.model,
                        study.path.display()
                    );
                }
                check_hash(
                    &path,
                    std::slice::from_ref(&user.sha256),
                    &format!("the sha256 given in {}", study.path.display()),
                )?;
                path
            }
            None if c.compression == Compression::Dense => self.zoo_model(c)?,
            None => self.compressed_model(c)?,
        };
        self.verified.insert(key, path.clone());
        Ok(path)
    }

    fn zoo_model(&self, c: &Combination) -> Result<PathBuf> {
        let file = format!("{}-{}.onnx", c.dataset, c.model);
        let expected = self.lock.get(&file).with_context(|| {
            format!("data/models.lock pins no {file}; run `cargo xtask verify --update`")
        })?;
        let path = self.root.join(".cache/models").join(&file);
        if !path.exists() {
            let net = dlas_zoo::find(c.dataset, &c.model)?;
            let graph = (net.build)();
            let bytes = dlas_onnx::export(&graph, &dlas_zoo::weights::generate(&graph, MODEL_SEED));
            dlas_core::atomic::write_atomic(&path, &bytes)?;
        }
        check_hash(&path, expected, "data/models.lock")
            .map_err(|e| anyhow::anyhow!("{e}; delete the file and it is regenerated"))?;
        Ok(path)
    }
}

impl Models {
    /// The compressed ONNX file of a zoo network, generated on first use into
    /// `.cache/models/compressed/` from the pinned weights. fp16 models are
    /// exported in half precision; int8 models are quantised with a seeded
    /// min-max calibration set (32 samples) and exported as QDQ. Pruned
    /// models run on the runtimes only if the study asks for it (the dlas
    /// study runs them on the native engine's sparse kernels).
    fn compressed_model(&self, c: &Combination) -> Result<PathBuf> {
        let level = dlas_core::plan::format_level(c.level);
        let file = format!("{}-{}-{}-{level}.onnx", c.dataset, c.model, c.compression);
        let path = self.root.join(".cache/models/compressed").join(&file);
        if path.exists() {
            if let Some(expected) = self.lock.get(&format!("compressed/{file}")) {
                check_hash(&path, expected, "data/models.lock")
                    .map_err(|e| anyhow::anyhow!("{e}; delete the file and it is regenerated"))?;
            }
            return Ok(path);
        }
        let bytes = compressed_onnx(c)?;
        dlas_core::atomic::write_atomic(&path, &bytes)?;
        Ok(path)
    }
}

/// The combination whose model file a combination runs: the native engine
/// quantises or halves an fp32 model itself, while the runtimes read the fp16
/// or QDQ file.
pub fn model_file_of(c: &Combination) -> Combination {
    if c.is_native() && !c.compression.is_pruning() {
        Combination {
            compression: Compression::Dense,
            level: 0.0,
            ..c.clone()
        }
    } else {
        c.clone()
    }
}

/// The ONNX bytes of a compressed zoo network (see [`Models`] for the
/// recipe of each technique). Deterministic: the same combination gives the
/// same bytes, which `data/models.lock` pins for fp16 and int8.
pub fn compressed_onnx(c: &Combination) -> Result<Vec<u8>> {
    let net = dlas_zoo::find(c.dataset, &c.model)?;
    let graph = (net.build)();
    let weights = dlas_zoo::weights::generate(&graph, MODEL_SEED);
    Ok(match c.compression {
        Compression::Fp16 => dlas_onnx::export_with(
            &graph,
            &weights,
            &dlas_onnx::ExportOptions {
                dtype: dlas_onnx::Dtype::F16,
                qdq: None,
                node_outputs: false,
            },
        )?,
        Compression::Int8 => {
            let calibration = int8_calibration(&graph);
            let (_, qdq) =
                dlas_compress::quantize(&graph, &weights, &calibration, &dlas_compress::Tract)?;
            dlas_onnx::export_with(
                &graph,
                &weights,
                &dlas_onnx::ExportOptions {
                    dtype: dlas_onnx::Dtype::F32,
                    qdq: Some(&qdq),
                    node_outputs: false,
                },
            )?
        }
        pruning => {
            let pruned = dlas_compress::study_pruning(&graph, &weights, pruning, c.level)?;
            dlas_onnx::export(&graph, &pruned)
        }
    })
}

/// The calibration set of every int8 model: 32 seeded samples, min-max.
/// The QDQ files and the native engine's int8 parameters both come from it.
pub fn int8_calibration(graph: &dlas_zoo::Graph) -> dlas_compress::Calibration {
    dlas_compress::Calibration::seeded(
        graph,
        MODEL_SEED,
        32,
        dlas_compress::CalibrationMethod::MinMax,
    )
}

fn check_hash(path: &Path, expected: &[String], pinned_by: &str) -> Result<()> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read model {}", path.display()))?;
    let actual = hex::encode(Sha256::digest(&bytes));
    if !expected.iter().any(|e| actual.eq_ignore_ascii_case(e)) {
        bail!(
            "model {} has sha256 {actual}, but {pinned_by} pins {}: refusing to run it",
            path.display(),
            expected.join(" or ")
        );
    }
    Ok(())
}

/// The seeded input batch of a combination, shaped (batch, 3, h, w).
pub fn input(c: &Combination, seed: u64) -> Vec<f32> {
    use rand::Rng;
    let [ch, h, w] = c.dataset.input_chw();
    let mut rng = dlas_zoo::weights::stream(seed, &c.model, "input");
    (0..c.batch * ch * h * w)
        .map(|_| rng.random::<f32>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_matching_any_locked_build_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, b"model").unwrap();
        let own = hex::encode(Sha256::digest(b"model"));
        let other = hex::encode(Sha256::digest(b"another build"));
        check_hash(&path, &[other.clone(), own], "lock").unwrap();
        let err = check_hash(&path, &[other], "lock").unwrap_err().to_string();
        assert!(err.contains("refusing to run it"), "{err}");
    }
}
