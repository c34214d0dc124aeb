//! The study file: the axes, their values, the protocol and the exclusion rules.
//!
//! A study is data. Parsing checks only what this crate can know (syntax,
//! closed axes, rule axes); open axes such as model and device names are
//! checked by the caller against the zoo and the device registry with
//! [`Study::check_open_axis`], which still points at the line in the file.

use crate::axes::{Algorithm, Compression, Dataset, Format, Layout};
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The measurement protocol of a study; command-line flags override it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// Batch sizes; each is a separate combination.
    pub batch: Vec<usize>,
    /// Runs executed and discarded before timing.
    pub warmup: usize,
    /// Timed runs per combination.
    pub runs: usize,
    /// Intra-op threads; 0 means one per physical core.
    pub threads: usize,
    /// Root seed for weights, inputs and mocked-device noise.
    pub seed: u64,
    /// Seconds one combination may take before it is recorded as failed.
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    /// The largest batch size per device (device id -> batch); batch sizes
    /// above it are not planned for that device. A device not listed runs
    /// every batch size. Small devices and a reduced host protocol need it.
    #[serde(default)]
    pub max_batch: BTreeMap<String, usize>,
}

impl Protocol {
    /// Whether `batch` is planned on `device`.
    pub fn batch_fits(&self, device: &str, batch: usize) -> bool {
        self.max_batch.get(device).is_none_or(|&max| batch <= max)
    }
}

fn default_timeout() -> f64 {
    600.0
}

/// A user's own ONNX model on the model axis, pinned by its sha256.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnnxModel {
    pub id: Spanned<String>,
    pub dataset: Dataset,
    /// Relative to the study file's folder, or absolute.
    pub path: PathBuf,
    pub sha256: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetEntry {
    pub id: Dataset,
    pub models: Vec<Spanned<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompressionEntry {
    pub id: Compression,
    /// Fraction pruned, for the pruning techniques.
    #[serde(default)]
    pub level: Option<f64>,
    /// Per-model overrides of `level`.
    #[serde(default)]
    pub levels: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompilerEntry {
    pub id: Spanned<String>,
    pub tuned: Vec<bool>,
    /// Whether the algorithm, format and layout axes apply to this compiler.
    pub algorithms: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    pub reason: String,
    /// Excludes a combination when, for every axis named, its value is listed.
    pub exclude: Spanned<BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StudyFile {
    name: String,
    title: String,
    protocol: Protocol,
    dataset: Vec<DatasetEntry>,
    compression: Vec<CompressionEntry>,
    algorithms: Vec<Algorithm>,
    formats: Vec<Format>,
    layouts: Vec<Layout>,
    compiler: Vec<CompilerEntry>,
    devices: Vec<Spanned<String>>,
    #[serde(default)]
    rule: Vec<Rule>,
    #[serde(default)]
    onnx_model: Vec<OnnxModel>,
}

/// The axes a rule or a filter may name.
pub const AXES: &[&str] = &[
    "dataset",
    "model",
    "compression",
    "level",
    "algorithm",
    "format",
    "layout",
    "compiler",
    "tuned",
    "device",
    "batch",
];

/// A parsed, checked study.
#[derive(Debug, Clone)]
pub struct Study {
    pub path: PathBuf,
    pub name: String,
    pub title: String,
    pub protocol: Protocol,
    pub datasets: Vec<DatasetEntry>,
    pub compressions: Vec<CompressionEntry>,
    pub algorithms: Vec<Algorithm>,
    pub formats: Vec<Format>,
    pub layouts: Vec<Layout>,
    pub compilers: Vec<CompilerEntry>,
    pub devices: Vec<Spanned<String>>,
    pub rules: Vec<Rule>,
    pub onnx_models: Vec<OnnxModel>,
    source: String,
}

impl Study {
    /// Loads a study by name from `studies_dir` (`dlas` → `dlas.toml`) or by path.
    pub fn load(name_or_path: &str, studies_dir: &Path) -> Result<Study> {
        let as_path = Path::new(name_or_path);
        let path = if as_path.extension().is_some_and(|e| e == "toml") {
            as_path.to_path_buf()
        } else {
            studies_dir.join(format!("{name_or_path}.toml"))
        };
        let source = std::fs::read_to_string(&path).with_context(|| {
            let known = list_studies(studies_dir).join(", ");
            format!(
                "cannot read study file {} (studies in {}: {known})",
                path.display(),
                studies_dir.display()
            )
        })?;
        Study::parse(&source, &path)
    }

    /// Parses study text; `path` is used in error messages only.
    pub fn parse(source: &str, path: &Path) -> Result<Study> {
        let file: StudyFile = toml::from_str(source)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
        let study = Study {
            path: path.to_path_buf(),
            name: file.name,
            title: file.title,
            protocol: file.protocol,
            datasets: file.dataset,
            compressions: file.compression,
            algorithms: file.algorithms,
            formats: file.formats,
            layouts: file.layouts,
            compilers: file.compiler,
            devices: file.devices,
            rules: file.rule,
            onnx_models: file.onnx_model,
            source: source.to_string(),
        };
        study.check()?;
        Ok(study)
    }

    /// `file:line:column` of a byte offset in the study file.
    pub fn locate(&self, offset: usize) -> String {
        let before = &self.source[..offset.min(self.source.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
        format!("{}:{line}:{column}", self.path.display())
    }

    fn check(&self) -> Result<()> {
        let p = &self.protocol;
        if p.timeout_s.is_nan() || p.timeout_s <= 0.0 {
            bail!(
                "{}: protocol.timeout_s must be a positive number of seconds",
                self.path.display()
            );
        }
        for m in &self.onnx_models {
            let valid_hash =
                m.sha256.len() == 64 && m.sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if !valid_hash {
                bail!(
                    "{}: onnx_model `{}` needs `sha256` as 64 hexadecimal digits",
                    self.locate(m.id.span().start),
                    m.id.get_ref()
                );
            }
        }
        if p.runs == 0 {
            bail!("{}: protocol.runs must be at least 1", self.path.display());
        }
        if p.batch.is_empty() || p.batch.contains(&0) {
            bail!(
                "{}: protocol.batch must list batch sizes of at least 1",
                self.path.display()
            );
        }
        let smallest = p.batch.iter().copied().min().unwrap_or(1);
        for (device, &max) in &p.max_batch {
            if !self.devices.iter().any(|d| d.get_ref() == device) {
                bail!(
                    "{}: protocol.max_batch names device `{device}`, which the study does not list; devices: {}",
                    self.path.display(),
                    self.devices
                        .iter()
                        .map(|d| d.get_ref().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if max < smallest {
                bail!(
                    "{}: protocol.max_batch of `{device}` is {max}, below the smallest batch size {smallest}; \
                     no batch would run on it",
                    self.path.display()
                );
            }
        }
        for c in &self.compressions {
            let levels = c.level.iter().chain(c.levels.values());
            for &level in levels {
                if !(0.0..1.0).contains(&level) {
                    bail!(
                        "{}: compression `{}` has level {level}; a level is a fraction in [0, 1)",
                        self.path.display(),
                        c.id
                    );
                }
            }
            if c.id.is_pruning() && c.level.is_none() {
                bail!(
                    "{}: compression `{}` needs a `level` (the fraction pruned, e.g. 0.5)",
                    self.path.display(),
                    c.id
                );
            }
        }
        for rule in &self.rules {
            for (axis, values) in rule.exclude.get_ref() {
                if !AXES.contains(&axis.as_str()) {
                    bail!(
                        "{}: rule `{}` names unknown axis `{axis}`; valid axes: {}",
                        self.locate(rule.exclude.span().start),
                        rule.name,
                        AXES.join(", ")
                    );
                }
                for value in values {
                    self.check_value(axis, value).with_context(|| {
                        format!(
                            "{}: in rule `{}`",
                            self.locate(rule.exclude.span().start),
                            rule.name
                        )
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Checks that `value` is valid for `axis` in this study.
    pub fn check_value(&self, axis: &str, value: &str) -> Result<()> {
        let open = |known: Vec<String>| -> Result<()> {
            if known.iter().any(|k| k == value) {
                Ok(())
            } else {
                bail!(
                    "unknown {axis} `{value}`; valid values: {}",
                    known.join(", ")
                )
            }
        };
        match axis {
            "dataset" => value.parse::<Dataset>().map(drop).map_err(Into::into),
            "compression" => value.parse::<Compression>().map(drop).map_err(Into::into),
            "algorithm" => value.parse::<Algorithm>().map(drop).map_err(Into::into),
            "format" => value.parse::<Format>().map(drop).map_err(Into::into),
            "layout" => value.parse::<Layout>().map(drop).map_err(Into::into),
            "tuned" => open(vec!["false".into(), "true".into()]),
            "model" => open(self.models().into_iter().map(|(_, m)| m).collect()),
            "device" => open(self.devices.iter().map(|d| d.get_ref().clone()).collect()),
            "compiler" => open(
                self.compilers
                    .iter()
                    .map(|c| c.id.get_ref().clone())
                    .collect(),
            ),
            "level" | "batch" => value
                .parse::<f64>()
                .map(drop)
                .map_err(|_| anyhow::anyhow!("{axis} `{value}` is not a number")),
            _ => bail!("unknown axis `{axis}`; valid axes: {}", AXES.join(", ")),
        }
    }

    /// Checks an open axis (model, device, compiler) against the values that
    /// exist downstream, pointing at the study file's line for each unknown one.
    pub fn check_open_axis(&self, axis: &str, known: &[String]) -> Result<()> {
        let entries: Vec<&Spanned<String>> = match axis {
            "model" => self.datasets.iter().flat_map(|d| &d.models).collect(),
            "device" => self.devices.iter().collect(),
            "compiler" => self.compilers.iter().map(|c| &c.id).collect(),
            _ => bail!("`{axis}` is not an open axis"),
        };
        for entry in entries {
            if !known.iter().any(|k| k == entry.get_ref()) {
                bail!(
                    "{}: unknown {axis} `{}`; valid values: {}",
                    self.locate(entry.span().start),
                    entry.get_ref(),
                    known.join(", ")
                );
            }
        }
        Ok(())
    }

    /// Every (dataset, model) pair, in study order: the zoo networks of each
    /// dataset, then the user's ONNX models.
    pub fn models(&self) -> Vec<(Dataset, String)> {
        self.datasets
            .iter()
            .flat_map(|d| d.models.iter().map(move |m| (d.id, m.get_ref().clone())))
            .chain(
                self.onnx_models
                    .iter()
                    .map(|m| (m.dataset, m.id.get_ref().clone())),
            )
            .collect()
    }

    /// The user's ONNX model of that id, if the model is one.
    pub fn onnx_model(&self, id: &str) -> Option<&OnnxModel> {
        self.onnx_models.iter().find(|m| m.id.get_ref() == id)
    }

    /// Where a user's model file is: relative paths start at the study file's folder.
    pub fn onnx_model_path(&self, model: &OnnxModel) -> PathBuf {
        if model.path.is_absolute() {
            model.path.clone()
        } else {
            self.path
                .parent()
                .unwrap_or(Path::new("."))
                .join(&model.path)
        }
    }

    /// The level of `compression` for `model`: the override, else the default, else 0.
    pub fn level(&self, compression: &CompressionEntry, model: &str) -> f64 {
        compression
            .levels
            .get(model)
            .copied()
            .or(compression.level)
            .unwrap_or(0.0)
    }
}

/// Study names found in a folder, for error messages.
pub fn list_studies(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "toml").then(|| p.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
name = "t"
title = "test"
algorithms = ["direct"]
formats = ["dense"]
layouts = ["nchw"]
devices = ["i7"]
[protocol]
batch = [1]
warmup = 1
runs = 10
threads = 1
seed = 1
[[dataset]]
id = "cifar10"
models = ["resnet18"]
[[compression]]
id = "dense"
[[compiler]]
id = "native"
tuned = [false]
algorithms = true
"#;

    fn parse_err(text: &str) -> String {
        format!("{:#}", Study::parse(text, Path::new("s.toml")).unwrap_err())
    }

    #[test]
    fn parses_minimal_study() {
        let s = Study::parse(MINIMAL, Path::new("s.toml")).unwrap();
        assert_eq!(s.models(), vec![(Dataset::Cifar10, "resnet18".to_string())]);
    }

    #[test]
    fn syntax_error_names_file_line_and_column() {
        let err = parse_err(&MINIMAL.replace("runs = 10", "runs = "));
        assert!(
            err.starts_with("s.toml: TOML parse error at line 11, column 8"),
            "{err}"
        );
    }

    #[test]
    fn unknown_closed_value_lists_valid_ones() {
        let err = parse_err(&MINIMAL.replace("[\"direct\"]", "[\"winograd\"]"));
        assert!(err.contains("line 4, column 15"), "{err}");
        assert!(err.contains("`direct`, `gemm`, `spatial-pack`"), "{err}");
    }

    #[test]
    fn unknown_open_value_points_at_its_line() {
        let s = Study::parse(MINIMAL, Path::new("s.toml")).unwrap();
        let err = s
            .check_open_axis("device", &["xavier-gpu".to_string()])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "s.toml:7:12: unknown device `i7`; valid values: xavier-gpu"
        );
    }

    #[test]
    fn rule_with_unknown_axis_is_refused() {
        let text = format!(
            "{MINIMAL}[[rule]]\nname = \"r\"\nreason = \"x\"\nexclude = {{ colour = [\"red\"] }}\n"
        );
        let err = parse_err(&text);
        assert!(err.contains("unknown axis `colour`"), "{err}");
        assert!(err.contains("s.toml:26:"), "{err}");
    }

    #[test]
    fn max_batch_names_study_devices_and_leaves_a_batch() {
        let with = |table: &str| {
            MINIMAL.replace("seed = 1\n", &format!("seed = 1\nmax_batch = {table}\n"))
        };
        let s = Study::parse(&with("{ i7 = 1 }"), Path::new("s.toml")).unwrap();
        assert!(s.protocol.batch_fits("i7", 1) && !s.protocol.batch_fits("i7", 2));
        assert!(
            s.protocol.batch_fits("host", 64),
            "unlisted devices run every batch"
        );
        let err = parse_err(&with("{ orin = 4 }"));
        assert!(
            err.contains("names device `orin`") && err.contains("devices: i7"),
            "{err}"
        );
        let err = parse_err(&with("{ i7 = 0 }"));
        assert!(
            err.contains("max_batch of `i7` is 0, below the smallest batch size 1"),
            "{err}"
        );
        let err = parse_err(&with("{ i7 = -1 }"));
        assert!(err.contains("s.toml: TOML parse error"), "{err}");
    }

    #[test]
    fn level_outside_unit_interval_is_refused() {
        let text = MINIMAL.replace("id = \"dense\"", "id = \"weight-pruning\"\nlevel = 1.5");
        assert!(parse_err(&text).contains("level 1.5; a level is a fraction in [0, 1)"));
    }
}
