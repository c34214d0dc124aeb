//! The study file: the axes, their values, the protocol and the exclusion rules.
//!
//! A study is data. Parsing checks only what this crate can know (syntax,
//! closed axes, rule axes); open axes such as model and device names are
//! checked by the caller against the zoo and the device registry with
//! [`Study::check_open_axis`], which still points at the line in the file.

use crate::axes::{Algorithm, Compression, Dataset, Format, Layout};
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

pub use crate::protocol::{
    BATCH, INTERLEAVE, MAX_TIMEOUT_S, Protocol, RUNS, THREADS, WARMUP, check_bound, check_timeout,
};

/// User text in backquotes for an error message, cut by [`cut`], with
/// characters that do not print on one line (`crate::text::unprintable`)
/// written as escapes, so a quoted newline cannot split the message.
pub fn quote(text: &str) -> String {
    let shown: String = cut(text)
        .chars()
        .map(|c| match crate::text::unprintable(&c.to_string()) {
            Some(_) => c.escape_unicode().to_string(),
            None => c.to_string(),
        })
        .collect();
    format!("`{shown}`")
}

/// User text cut to [`QUOTE_CHARS`] characters, so that a huge value or line
/// cannot make a huge message.
pub fn cut(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(QUOTE_CHARS) {
        None => text.into(),
        Some((end, _)) => format!("{}… ({} bytes in all)", &text[..end], text.len()).into(),
    }
}

/// The most characters of user text an error quotes.
pub const QUOTE_CHARS: usize = 200;

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
    /// The tuning budget of compilers that tune whole networks (Apache
    /// TVM's MetaSchedule), in candidates measured per task (distinct
    /// kernel) of the network: the budget curve in docs/compilers.md levels
    /// off per task, and networks have 18 to 80 tasks. The native engine's
    /// budget is per layer too (`dlas tune --trials`).
    #[serde(default)]
    pub trials_per_task: Option<Spanned<usize>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    pub reason: String,
    /// Excludes a combination when, for every axis named, its value is listed.
    pub exclude: Spanned<BTreeMap<String, Vec<String>>>,
}

/// The file as written, with the places of the entries whose ids must be
/// unique; [`Study::parse`] checks them and drops the places it no longer needs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StudyFile {
    name: Spanned<String>,
    title: String,
    protocol: Spanned<Protocol>,
    dataset: Vec<Spanned<DatasetEntry>>,
    compression: Vec<Spanned<CompressionEntry>>,
    algorithms: Vec<Spanned<Algorithm>>,
    formats: Vec<Spanned<Format>>,
    layouts: Vec<Spanned<Layout>>,
    compiler: Vec<CompilerEntry>,
    devices: Vec<Spanned<String>>,
    #[serde(default)]
    rule: Vec<Spanned<Rule>>,
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
        let source = crate::regular_file::read_to_string(&path).with_context(|| {
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
        let file: StudyFile = toml::from_str(source).map_err(|e| syntax_error(source, path, &e))?;
        let study = Study {
            path: path.to_path_buf(),
            name: file.name.get_ref().clone(),
            title: file.title.clone(),
            protocol: file.protocol.get_ref().clone(),
            datasets: file.dataset.iter().map(|d| d.get_ref().clone()).collect(),
            compressions: file
                .compression
                .iter()
                .map(|c| c.get_ref().clone())
                .collect(),
            algorithms: file.algorithms.iter().map(|a| *a.get_ref()).collect(),
            formats: file.formats.iter().map(|f| *f.get_ref()).collect(),
            layouts: file.layouts.iter().map(|l| *l.get_ref()).collect(),
            compilers: file.compiler.clone(),
            devices: file.devices.clone(),
            rules: file.rule.iter().map(|r| r.get_ref().clone()).collect(),
            onnx_models: file.onnx_model.clone(),
            source: source.to_string(),
        };
        study.check_names(&file)?;
        study.check_unique(&file)?;
        study.check_not_empty(&file)?;
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
        let at = self.path.display();
        check_timeout("protocol.timeout_s", p.timeout_s)
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        check_bound("protocol.runs", p.runs, &RUNS).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        check_bound("protocol.warmup", p.warmup, &WARMUP)
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        check_bound("protocol.min_runs", p.min_runs, &RUNS)
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        check_bound("protocol.max_runs", p.max_runs(), &RUNS)
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        if let Some(n) = p.budget_runs {
            check_bound("protocol.budget_runs", n, &RUNS)
                .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        }
        check_bound("protocol.interleave", p.interleave, &INTERLEAVE)
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        check_timeout("protocol.budget_s", p.budget_s).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        if !(p.half_width > 0.0 && p.half_width < 1.0) {
            bail!(
                "{at}: protocol.half_width is {}; valid: a fraction of the median above 0 and below 1 (0.01 is ±1%)",
                p.half_width
            );
        }
        check_bound("protocol.threads", p.threads, &THREADS)
            .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        for &batch in &p.batch {
            check_bound("a protocol.batch size", batch, &BATCH)
                .map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
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
        let smallest = p.batch.iter().copied().min().unwrap_or(1);
        for (device, &max) in &p.max_batch {
            if !self.devices.iter().any(|d| d.get_ref() == device) {
                bail!(
                    "{}: protocol.max_batch names device {}, which the study does not list; devices: {}",
                    self.path.display(),
                    quote(device),
                    self.devices
                        .iter()
                        .map(|d| d.get_ref().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if max < smallest {
                bail!(
                    "{}: protocol.max_batch of {} is {max}, below the smallest batch size {smallest}; \
                     no batch would run on it",
                    self.path.display(),
                    quote(device)
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
                        "{}: rule {} names unknown axis {}; valid axes: {}",
                        self.locate(rule.exclude.span().start),
                        quote(&rule.name),
                        quote(axis),
                        AXES.join(", ")
                    );
                }
                for value in values {
                    self.check_value(axis, value).with_context(|| {
                        format!(
                            "{}: in rule {}",
                            self.locate(rule.exclude.span().start),
                            quote(&rule.name)
                        )
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Checks that `value` is valid for `axis` in this study.
    pub fn check_value(&self, axis: &str, value: &str) -> Result<()> {
        let known: Vec<String> = match axis {
            "dataset" => names(Dataset::ALL),
            "compression" => names(Compression::ALL),
            "algorithm" => names(Algorithm::ALL),
            "format" => names(Format::ALL),
            "layout" => names(Layout::ALL),
            "tuned" => vec!["false".into(), "true".into()],
            "model" => self.models().into_iter().map(|(_, m)| m).collect(),
            "device" => self.devices.iter().map(|d| d.get_ref().clone()).collect(),
            "compiler" => self
                .compilers
                .iter()
                .map(|c| c.id.get_ref().clone())
                .collect(),
            "level" | "batch" => {
                return value
                    .parse::<f64>()
                    .map(drop)
                    .map_err(|_| anyhow::anyhow!("{axis} {} is not a number", quote(value)));
            }
            _ => bail!(
                "unknown axis {}; valid axes: {}",
                quote(axis),
                AXES.join(", ")
            ),
        };
        if known.iter().any(|k| k == value) {
            Ok(())
        } else {
            bail!(
                "unknown {axis} {}; valid values: {}",
                quote(value),
                known.join(", ")
            )
        }
    }

    /// Checks an open axis (model, device, compiler) against the values that
    /// exist downstream, pointing at the study file's line for each unknown one.
    pub fn check_open_axis(&self, axis: &str, known: &[String]) -> Result<()> {
        let entries: Vec<&Spanned<String>> = match axis {
            "model" => self.datasets.iter().flat_map(|d| &d.models).collect(),
            "device" => self.devices.iter().collect(),
            "compiler" => self.compilers.iter().map(|c| &c.id).collect(),
            _ => bail!("{} is not an open axis", quote(axis)),
        };
        for entry in entries {
            if !known.iter().any(|k| k == entry.get_ref()) {
                bail!(
                    "{}: unknown {axis} {}; valid values: {}",
                    self.locate(entry.span().start),
                    quote(entry.get_ref()),
                    known.join(", ")
                );
            }
        }
        Ok(())
    }

    /// Refuses an id listed twice (a model of a dataset, an ONNX model, a
    /// device, compiler, compression, rule or value of a closed axis): the
    /// plan would hold the same combination twice and results keyed by id
    /// would keep one copy silently. The error names both places.
    /// The study's name and its users' model ids become folder and file
    /// names (`data/results/<name>/`, `figures/<name>/`, model files), so
    /// each must be an identifier, not a path.
    fn check_names(&self, file: &StudyFile) -> Result<()> {
        let names = std::iter::once(("name", &file.name))
            .chain(file.onnx_model.iter().map(|m| ("onnx_model id", &m.id)));
        for (what, name) in names {
            if !crate::text::is_identifier(name.get_ref()) {
                bail!(
                    "{}: the study's {what} is {}; it names files and folders, so it must be {}",
                    self.locate(name.span().start),
                    quote(name.get_ref()),
                    crate::text::IDENTIFIER_RULE
                );
            }
        }
        Ok(())
    }

    fn check_unique(&self, file: &StudyFile) -> Result<()> {
        let datasets = file
            .dataset
            .iter()
            .map(|d| (d.get_ref().id.to_string(), d.span()));
        self.unique("dataset", datasets)?;
        // Datasets are unique now, so a (dataset, model) pair repeats only
        // within one dataset's list or between it and an ONNX model.
        for &dataset in Dataset::ALL {
            let zoo = file
                .dataset
                .iter()
                .filter(|d| d.get_ref().id == dataset)
                .flat_map(|d| &d.get_ref().models);
            let onnx = file
                .onnx_model
                .iter()
                .filter(|m| m.dataset == dataset)
                .map(|m| &m.id);
            let models = zoo.chain(onnx).map(|m| (m.get_ref().clone(), m.span()));
            self.unique(&format!("model of {dataset}"), models)?;
        }
        let onnx = file
            .onnx_model
            .iter()
            .map(|m| (m.id.get_ref().clone(), m.id.span()));
        self.unique("onnx_model id", onnx)?;
        let compressions = file
            .compression
            .iter()
            .map(|c| (c.get_ref().id.to_string(), c.span()));
        self.unique("compression", compressions)?;
        let compilers = file
            .compiler
            .iter()
            .map(|c| (c.id.get_ref().clone(), c.id.span()));
        self.unique("compiler", compilers)?;
        let devices = file.devices.iter().map(|d| (d.get_ref().clone(), d.span()));
        self.unique("device", devices)?;
        let rules = file
            .rule
            .iter()
            .map(|r| (r.get_ref().name.clone(), r.span()));
        self.unique("rule", rules)?;
        self.unique("algorithm", texts(&file.algorithms))?;
        self.unique("format", texts(&file.formats))?;
        self.unique("layout", texts(&file.layouts))?;
        let protocol = file.protocol.span();
        let batches = file.protocol.get_ref().batch.iter();
        self.unique(
            "protocol.batch size",
            batches.map(|b| (b.to_string(), protocol.clone())),
        )?;
        for c in &file.compiler {
            let tuned = c.tuned.iter().map(|t| (t.to_string(), c.id.span()));
            self.unique(
                &format!("`tuned` value of compiler {}", quote(c.id.get_ref())),
                tuned,
            )?;
        }
        Ok(())
    }

    fn unique(
        &self,
        what: &str,
        entries: impl IntoIterator<Item = (String, Range<usize>)>,
    ) -> Result<()> {
        let mut seen: HashMap<String, Range<usize>> = HashMap::new();
        for (key, span) in entries {
            if let Some(first) = seen.get(&key) {
                bail!(
                    "{}: {what} {} is listed twice (first at {}); each may appear once",
                    self.locate(span.start),
                    quote(&key),
                    self.locate(first.start)
                );
            }
            seen.insert(key, span);
        }
        Ok(())
    }

    /// Refuses an empty axis: the plan is a product, so one empty list
    /// would silently plan nothing for every compiler that uses it.
    fn check_not_empty(&self, file: &StudyFile) -> Result<()> {
        let at = self.path.display();
        let list = |all: Vec<String>| all.join(", ");
        if file.dataset.is_empty() && file.onnx_model.is_empty() {
            bail!(
                "{at}: the study has no models; add a [[dataset]] with `id` and `models` (or an [[onnx_model]])"
            );
        }
        for d in &file.dataset {
            if d.get_ref().models.is_empty() {
                bail!(
                    "{}: dataset {} has `models = []`; list at least one (`dlas zoo list` shows them)",
                    self.locate(d.span().start),
                    d.get_ref().id
                );
            }
        }
        if file.compression.is_empty() {
            bail!(
                "{at}: the study has no [[compression]]; add at least one, e.g. `id = \"dense\"` (valid: {})",
                list(names(Compression::ALL))
            );
        }
        if file.compiler.is_empty() {
            bail!("{at}: the study has no [[compiler]]; add at least one, e.g. `id = \"native\"`");
        }
        for c in &file.compiler {
            if c.tuned.is_empty() {
                bail!(
                    "{}: compiler {} has `tuned = []`; list `false`, `true` or both",
                    self.locate(c.id.span().start),
                    quote(c.id.get_ref())
                );
            }
        }
        if file.devices.is_empty() {
            bail!("{at}: `devices = []`; list at least one device (e.g. `host`)");
        }
        if file.protocol.get_ref().batch.is_empty() {
            bail!("{at}: `protocol.batch = []`; list at least one batch size, e.g. [1]");
        }
        if let Some(c) = file.compiler.iter().find(|c| c.algorithms) {
            let axes = [
                (
                    "algorithms",
                    file.algorithms.is_empty(),
                    names(Algorithm::ALL),
                ),
                ("formats", file.formats.is_empty(), names(Format::ALL)),
                ("layouts", file.layouts.is_empty(), names(Layout::ALL)),
            ];
            for (field, empty, valid) in axes {
                if empty {
                    bail!(
                        "{at}: `{field} = []`, so compiler {} (`algorithms = true`) would plan nothing; \
                         list at least one of {}",
                        quote(c.id.get_ref()),
                        list(valid)
                    );
                }
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

/// Each value's text and place.
fn texts<T: std::fmt::Display>(
    values: &[Spanned<T>],
) -> impl Iterator<Item = (String, Range<usize>)> + '_ {
    values.iter().map(|v| (v.get_ref().to_string(), v.span()))
}

/// The text of every member of a closed axis.
fn names<T: std::fmt::Display>(all: &[T]) -> Vec<String> {
    all.iter().map(ToString::to_string).collect()
}

/// A TOML syntax or type error as `file: TOML parse error at line L, column
/// C: message`, then the line, both cut to a few hundred characters: toml's
/// own rendering repeats the whole offending line and underlines it.
fn syntax_error(source: &str, path: &Path, error: &toml::de::Error) -> anyhow::Error {
    let start = error.span().map_or(0, |s| s.start).min(source.len());
    let start = (0..=start)
        .rev()
        .find(|&i| source.is_char_boundary(i))
        .unwrap_or(0);
    let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = source[start..]
        .find('\n')
        .map_or(source.len(), |i| start + i);
    let line = source[..start].matches('\n').count() + 1;
    let column = source[line_start..start].chars().count() + 1;
    let message = error.message().trim_end().replace('\n', " ");
    anyhow::anyhow!(
        "{}: TOML parse error at line {line}, column {column}: {}\n{line} | {}",
        path.display(),
        cut(&message),
        cut(source[line_start..line_end].trim_end())
    )
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
        assert!(err.ends_with("\n11 | runs ="), "{err}");
    }

    #[test]
    fn unknown_closed_value_lists_valid_ones() {
        let err = parse_err(&MINIMAL.replace("[\"direct\"]", "[\"fft\"]"));
        assert!(err.contains("line 4, column 15"), "{err}");
        assert!(
            err.contains("`direct`, `gemm`, `spatial-pack`, `winograd`"),
            "{err}"
        );
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

    #[test]
    fn ids_listed_twice_name_both_places() {
        let cases = [
            (
                MINIMAL.replace("[\"resnet18\"]", "[\"resnet18\", \"resnet18\"]"),
                "s.toml:16:23: model of cifar10 `resnet18` is listed twice (first at s.toml:16:11)",
            ),
            (
                MINIMAL.replace("[\"i7\"]", "[\"i7\", \"i7\"]"),
                "s.toml:7:18: device `i7` is listed twice (first at s.toml:7:12)",
            ),
            (
                MINIMAL.replace("[\"direct\"]", "[\"direct\", \"direct\"]"),
                "s.toml:4:25: algorithm `direct` is listed twice (first at s.toml:4:15)",
            ),
            (
                format!("{MINIMAL}[[compression]]\nid = \"dense\"\n"),
                "s.toml:23:1: compression `dense` is listed twice (first at s.toml:17:1)",
            ),
            (
                format!(
                    "{MINIMAL}[[compiler]]\nid = \"native\"\ntuned = [false]\nalgorithms = true\n"
                ),
                "s.toml:24:6: compiler `native` is listed twice (first at s.toml:20:6)",
            ),
            (
                MINIMAL.replace("tuned = [false]", "tuned = [false, false]"),
                "`tuned` value of compiler `native` `false` is listed twice",
            ),
            (
                MINIMAL.replace("batch = [1]", "batch = [1, 1]"),
                "protocol.batch size `1` is listed twice",
            ),
            (
                format!("{MINIMAL}{ONNX}{ONNX}"),
                "s.toml:29:6: model of cifar10 `mine` is listed twice (first at s.toml:24:6)",
            ),
            (
                format!("{MINIMAL}{}", ONNX.replace("\"mine\"", "\"resnet18\"")),
                "s.toml:24:6: model of cifar10 `resnet18` is listed twice (first at s.toml:16:11)",
            ),
            (
                format!("{MINIMAL}{}{}", ONNX, ONNX.replace("cifar10", "imagenet")),
                "s.toml:29:6: onnx_model id `mine` is listed twice (first at s.toml:24:6)",
            ),
            (
                format!("{MINIMAL}[[dataset]]\nid = \"cifar10\"\nmodels = [\"vgg16\"]\n"),
                "dataset `cifar10` is listed twice",
            ),
        ];
        for (text, expected) in cases {
            let err = parse_err(&text);
            assert!(err.contains(expected), "{expected}\n{err}");
        }
    }

    const ONNX: &str = "[[onnx_model]]\nid = \"mine\"\ndataset = \"cifar10\"\npath = \"m.onnx\"\n\
                        sha256 = \"0000000000000000000000000000000000000000000000000000000000000000\"\n";

    #[test]
    fn an_empty_axis_is_refused_naming_the_field() {
        for (from, to, expected) in [
            (
                "[\"direct\"]",
                "[]",
                "`algorithms = []`, so compiler `native`",
            ),
            ("[\"dense\"]", "[]", "`formats = []`"),
            ("[\"nchw\"]", "[]", "`layouts = []`"),
            ("[\"i7\"]", "[]", "`devices = []`"),
            (
                "[\"resnet18\"]",
                "[]",
                "s.toml:14:1: dataset cifar10 has `models = []`",
            ),
            (
                "tuned = [false]",
                "tuned = []",
                "compiler `native` has `tuned = []`",
            ),
            ("batch = [1]", "batch = []", "`protocol.batch = []`"),
        ] {
            let err = parse_err(&MINIMAL.replacen(from, to, 1));
            assert!(err.contains(expected), "{expected}\n{err}");
        }
        // Without a compiler that uses them, the kernel axes may be empty.
        let runtime_only = MINIMAL
            .replace("[\"direct\"]", "[]")
            .replace("algorithms = true", "algorithms = false");
        Study::parse(&runtime_only, Path::new("s.toml")).unwrap();
    }

    #[test]
    fn protocol_numbers_are_bounded_naming_the_field_and_range() {
        for (from, to, expected) in [
            (
                "runs = 10",
                "runs = 1000000000000",
                "s.toml: protocol.runs is 1000000000000; valid: 1..=1000000",
            ),
            (
                "runs = 10",
                "runs = 0",
                "protocol.runs is 0; valid: 1..=1000000",
            ),
            (
                "warmup = 1",
                "warmup = 2000000",
                "protocol.warmup is 2000000; valid: 0..=1000000",
            ),
            (
                "threads = 1",
                "threads = 100000",
                "protocol.threads is 100000; valid: 0..=1024",
            ),
            (
                "batch = [1]",
                "batch = [100000]",
                "a protocol.batch size is 100000; valid: 1..=4096",
            ),
            (
                "seed = 1",
                "seed = 1\ntimeout_s = inf",
                "protocol.timeout_s is inf; valid: seconds above 0",
            ),
            (
                "seed = 1",
                "seed = 1\ntimeout_s = nan",
                "protocol.timeout_s is NaN",
            ),
            (
                "seed = 1",
                "seed = 1\ntimeout_s = 0.0",
                "protocol.timeout_s is 0",
            ),
            (
                "seed = 1",
                "seed = 1\ntimeout_s = 86401",
                "at most 86400 (one day)",
            ),
        ] {
            let err = parse_err(&MINIMAL.replace(from, to));
            assert!(err.contains(expected), "{expected}\n{err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
        let day = MINIMAL.replace("seed = 1", "seed = 1\ntimeout_s = 86400");
        Study::parse(&day, Path::new("s.toml")).unwrap();
    }

    #[test]
    fn errors_quote_at_most_a_few_hundred_characters_of_input() {
        let long = "y".repeat(5_000_000);
        let err = parse_err(&MINIMAL.replace("runs = 10", &format!("runs = 10 {long}")));
        assert!(err.contains("line 11, column 8"), "{}", &err[..300]);
        assert!(err.len() < 1_000, "{} bytes", err.len());
        let err = parse_err(&MINIMAL.replace("[\"direct\"]", &format!("[\"{long}\"]")));
        assert!(err.len() < 1_000, "{} bytes", err.len());
        let s = Study::parse(
            &MINIMAL.replace("\"i7\"", &format!("\"{long}\"")),
            Path::new("s.toml"),
        )
        .unwrap();
        let err = s
            .check_open_axis("device", &["i7".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown device `yyy"), "{}", &err[..100]);
        assert!(err.len() < 1_000, "{} bytes", err.len());
        let err = s.check_value("model", &long).unwrap_err().to_string();
        assert!(err.len() < 1_000, "{} bytes", err.len());
        assert_eq!(quote("ab"), "`ab`");
        assert_eq!(
            cut(&"é".repeat(300)).chars().count(),
            QUOTE_CHARS + " (600 bytes in all)".len() + 1
        );
    }
}
