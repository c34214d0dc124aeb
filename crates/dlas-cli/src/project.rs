//! Where the project's data lives, and loading a study checked against it.

use anyhow::{Result, bail};
use dlas_core::Study;
use dlas_devices::DeviceSpec;
use std::path::{Path, PathBuf};

/// Compilers this build can plan for: the native engine, the runtimes and
/// the graph compilers of the mocked devices (`eager`, `vendor`).
pub fn compilers() -> Vec<String> {
    std::iter::once(dlas_core::NATIVE)
        .chain(dlas_core::HOST_COMPILERS.iter().copied())
        .chain(dlas_devices::GraphCompiler::IDS)
        .map(String::from)
        .collect()
}
/// The real device of this machine.
pub const HOST: &str = "host";

pub struct Project {
    pub root: PathBuf,
}

impl Project {
    /// Uses `root`, or the nearest folder upwards from here that holds `data/studies`.
    pub fn locate(root: Option<&Path>) -> Result<Project> {
        if let Some(root) = root {
            if !root.join("data/studies").is_dir() {
                bail!(
                    "{} has no data/studies folder; pass the project root with --root",
                    root.display()
                );
            }
            return Ok(Project {
                root: root.to_path_buf(),
            });
        }
        let here = std::env::current_dir()?;
        for dir in here.ancestors() {
            if dir.join("data/studies").is_dir() {
                return Ok(Project {
                    root: dir.to_path_buf(),
                });
            }
        }
        bail!(
            "no data/studies folder in {} or above; run dlas inside the project or pass --root",
            here.display()
        )
    }

    pub fn studies_dir(&self) -> PathBuf {
        self.root.join("data/studies")
    }

    pub fn specs(&self) -> Result<Vec<DeviceSpec>> {
        dlas_devices::load_specs(&self.root.join("data/devices"))
    }

    /// Loads a study and checks its open axes against the zoo, the device
    /// specifications and the compilers of this build.
    pub fn study(&self, name: &str, specs: &[DeviceSpec]) -> Result<Study> {
        let study = Study::load(name, &self.studies_dir())?;
        self.check_own_name(&study)?;
        for model in &study.onnx_models {
            // A user's model named like a zoo network would share its
            // combination ids, so results of the two could not be told apart.
            let id = model.id.get_ref();
            if dlas_core::Dataset::ALL
                .iter()
                .any(|&d| dlas_zoo::find(d, id).is_ok())
            {
                bail!(
                    "{}: onnx_model {} has the name of a zoo network (`dlas zoo list`); give it another id",
                    study.locate(model.id.span().start),
                    dlas_core::study::quote(id)
                );
            }
        }
        for (dataset, model) in study.models() {
            if study.onnx_model(&model).is_some() {
                continue;
            }
            dlas_zoo::find(dataset, &model).map_err(|e| {
                let entry = study
                    .datasets
                    .iter()
                    .flat_map(|d| &d.models)
                    .find(|m| m.get_ref() == &model);
                let at = entry.map_or(study.path.display().to_string(), |m| {
                    study.locate(m.span().start)
                });
                anyhow::anyhow!("{at}: {e}")
            })?;
        }
        let mut devices: Vec<String> = specs.iter().map(|s| s.id.clone()).collect();
        devices.push(HOST.into());
        study.check_open_axis("device", &devices)?;
        study.check_open_axis("compiler", &compilers())?;
        for c in &study.compilers {
            if let Some(trials) = &c.trials
                && c.id.get_ref() != dlas_core::TVM
            {
                bail!(
                    "{}: `trials` is MetaSchedule's budget per network and applies to the tvm \
                     compiler only, not to {} (the native tuner's budget is `dlas tune --trials`)",
                    study.locate(trials.span().start),
                    c.id.get_ref()
                );
            }
        }
        Ok(study)
    }

    /// A study's name is its folders' name (results, figures, tables): a
    /// study file may take the name of a study in `data/studies` only if it
    /// is that file, so a user's copy never writes over the committed
    /// study's results or report.
    fn check_own_name(&self, study: &Study) -> Result<()> {
        let committed = self.studies_dir().join(format!("{}.toml", study.name));
        let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if committed.is_file() && !same(&committed, &study.path) {
            bail!(
                "{}: the study is named `{}`, the name of {}, whose results and report it would \
                 overwrite; give it a name of its own",
                study.path.display(),
                study.name,
                committed.display()
            );
        }
        Ok(())
    }

    /// The results folder of a study.
    pub fn results_dir(&self, study: &Study) -> PathBuf {
        self.root.join("data/results").join(&study.name)
    }
}
