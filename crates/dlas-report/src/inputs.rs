//! What every study's report is computed from and the helpers all of them
//! share: the inputs the CLI hands over, what to regenerate, the files
//! that come out, the networks and device kinds of a study, and the
//! footers that name the sources of a figure.
//!
//! A leaf of the crate: it imports only the compression facts' plain rows,
//! so every study's catalogue and the claims machinery can read it without
//! reading each other.

pub use crate::architecture::Architecture;
use crate::compression::{LayerSlice, RecordedAccuracy, Sweeps};
use dlas_core::{Dataset, Plan, ResultRow, Study};
use dlas_devices::{DeviceKind, DeviceSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;

/// Everything a report is computed from (cloned to narrow its rows to
/// those a figure draws, so its footer speaks of them alone).
#[derive(Clone)]
pub struct Inputs<'a> {
    pub study: &'a Study,
    /// The study's plan, expanded by the CLI: the report reads plans, it
    /// never expands one.
    pub plan: &'a Plan,
    /// The rows of every results file, in file order.
    pub results: &'a [ResultRow],
    pub specs: &'a [DeviceSpec],
    /// Files the results were read from, named in footers and checked one
    /// by one against the study's observations.
    pub result_files: Vec<ResultsFile>,
    /// The measured machines behind real results.
    pub hosts: Vec<HostSummary>,
    /// The pruning sweeps of the study's networks (`data/compression/`);
    /// empty when the selection draws none of them.
    pub sweeps: &'a Sweeps,
    /// The layer Figure 2 shows, when the selection draws it.
    pub layer: Option<&'a LayerSlice>,
    /// Recorded accuracies (`data/accuracy/published.csv`).
    pub accuracy: &'a [RecordedAccuracy],
    /// The device model against rows measured on the calibrated machine
    /// (`dlas validate`), when the study has them.
    pub validation: Option<&'a crate::validation::Validation>,
    /// The device model on another machine (`dlas validate --transfer`,
    /// every pair of calibrated machines): the error a mocked CPU's
    /// numbers carry, which footers print.
    pub transfer: Option<&'a crate::transfer::Transfer>,
    /// The number of the study's table that shows it (its catalogue's
    /// `transfer_table`), which footers cite; passed by the caller that
    /// picked the catalogue, so the report's leaves never look it up.
    pub transfer_table: usize,
    /// The measured machine's drift between sittings, within which two
    /// measured times tie (computed by the caller from the rows measured on
    /// the calibrated machine, [`crate::drift::Drift::of`]).
    pub drift: Option<crate::drift::Drift>,
}

/// A results file and its rows in [`Inputs::results`].
#[derive(Debug, Clone, PartialEq)]
pub struct ResultsFile {
    /// The path as the user named it (relative to the project when inside it).
    pub path: String,
    pub rows: Range<usize>,
}

impl Inputs<'_> {
    /// The results files, comma separated, for footers.
    pub fn file_list(&self) -> String {
        self.result_files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What Table 1 shows of a measured machine (from its environment record).
#[derive(Debug, Clone, PartialEq)]
pub struct HostSummary {
    pub environment: String,
    pub cpu_model: String,
    pub logical_cpus: usize,
    pub cpu_flags: Vec<String>,
    pub os: String,
}

/// What to regenerate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    All,
    Figure(usize),
    Table(usize),
}

/// A generated file, relative to the project root.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// A network's size and kind, from the zoo.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub dataset: Dataset,
    pub model: String,
    pub params: usize,
    /// What it is made of (the compiler study's findings compare kinds).
    pub architecture: Architecture,
}

/// The size of every zoo network of `study` (user ONNX files have none).
pub fn networks_of(study: &Study) -> Vec<Network> {
    study
        .models()
        .into_iter()
        .filter_map(|(dataset, model)| {
            let net = dlas_zoo::find(dataset, &model).ok()?;
            let graph = (net.build)();
            Some(Network {
                dataset,
                params: graph.params(),
                architecture: Architecture::of(&graph),
                model,
            })
        })
        .collect()
}

/// The kind of every specified device, and of `host`: the runner measures
/// the host's CPU only.
pub fn device_kinds(specs: &[DeviceSpec]) -> BTreeMap<String, DeviceKind> {
    specs
        .iter()
        .map(|s| (s.id.clone(), s.kind))
        .chain([("host".to_string(), DeviceKind::Cpu)])
        .collect()
}

/// "Source: …" line naming the devices and result files behind a figure.
pub fn footer(inputs: &Inputs, devices: &[String]) -> String {
    let sources: BTreeSet<&str> = inputs
        .results
        .iter()
        .filter(|r| devices.contains(&r.device))
        .map(|r| r.source.as_str())
        .collect();
    format!(
        "Source: {} ({}); devices: {}. {}",
        inputs.file_list(),
        sources.into_iter().collect::<Vec<_>>().join(", "),
        devices.join(", "),
        crate::provenance::model_note(inputs, devices)
    )
    .trim_end()
    .to_string()
}

/// The study file's path relative to the project, as the footers name it.
pub fn study_path(inputs: &Inputs) -> String {
    let path = inputs.study.path.to_string_lossy().replace('\\', "/");
    match path.find("data/studies/") {
        Some(at) => path[at..].to_string(),
        None => path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_come_from_operators() {
        let g = (dlas_zoo::find(Dataset::Imagenet, "resnet50").unwrap().build)();
        assert_eq!(Architecture::of(&g), Architecture::Cnn);
    }
}
