//! Observations as checks that run on any results: the verdicts, the
//! evidence, the words of degree and their rendering. Each study states its
//! own observations with this machinery (the DLAS study's thirteen in
//! `dlas/observations/`, the compiler study's findings in
//! `compilers/findings.rs`); nothing here knows a particular study.
//!
//! An observation is a predicate over a results set and, where it speaks of
//! accuracy or of what pruning should save, over recorded accuracies and
//! the pruning sweeps. A check says whether the observation holds, does not
//! hold, or cannot be tested on the data, with the numbers it rests on and
//! the devices whose rows entered, so a reviewer can put the study's claims
//! to their own hardware's numbers (`dlas claims`).
//!
//! Words of degree have one meaning throughout, fixed from the paper's
//! wording and not from any results: "generally" and "most" are a strict
//! majority of cells ([`GENERALLY`]); "rarely" is under a quarter
//! ([`RARELY`]); two numbers "differ" or "vary" when they are more than
//! [`TOLERANCE`] apart, the run-to-run variation ARTIFACT.md asks a
//! reviewer to accept; "dramatic" is at least [`DRAMATIC`] times.

pub mod cells;
mod render;

pub use render::{agreement, devices, headline, sections, statement, text_of, why_not};

use crate::compression::{RecordedAccuracy, Sweeps};
use crate::inputs::Network;
use dlas_core::ResultRow;
use dlas_devices::DeviceKind;
use serde::Serialize;
use std::collections::BTreeMap;

/// "Generally", "most": more than this share of the cells.
pub const GENERALLY: f64 = 0.5;
/// "Rarely": in fewer than this share of the cells.
pub const RARELY: f64 = 0.25;
/// Two times or speedups differ when their ratio exceeds this.
pub const TOLERANCE: f64 = 1.10;
/// A "dramatic" speedup: at least this factor.
pub const DRAMATIC: f64 = 2.0;

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Holds,
    DoesNotHold,
    CannotBeTested,
}

impl Verdict {
    /// The verdict of a predicate whose inputs were all found.
    pub fn of(holds: bool) -> Verdict {
        if holds {
            Verdict::Holds
        } else {
            Verdict::DoesNotHold
        }
    }

    /// Conjunction: a failed part fails the whole; otherwise an untestable
    /// part leaves the whole untestable.
    pub fn and(self, other: Verdict) -> Verdict {
        use Verdict::*;
        match (self, other) {
            (DoesNotHold, _) | (_, DoesNotHold) => DoesNotHold,
            (CannotBeTested, _) | (_, CannotBeTested) => CannotBeTested,
            (Holds, Holds) => Holds,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "does not hold",
            Verdict::CannotBeTested => "cannot be tested on this data",
        }
    }
}

/// One part of a predicate: its verdict, the sentence of evidence and,
/// where it does not hold, what in the data goes against it.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub verdict: Verdict,
    pub evidence: String,
    /// The cells that go against the part and by how much (or the number
    /// that misses its threshold), generated from the data; a reader of a
    /// "does not hold" sees why without opening the results.
    pub against: String,
}

impl Part {
    pub fn new(verdict: Verdict, evidence: impl Into<String>) -> Part {
        Part {
            verdict,
            evidence: evidence.into(),
            against: String::new(),
        }
    }

    pub fn untestable(evidence: impl Into<String>) -> Part {
        Part::new(Verdict::CannotBeTested, evidence)
    }

    /// The part with what goes against it, kept only if it does not hold.
    pub fn against(mut self, against: impl Into<String>) -> Part {
        if self.verdict == Verdict::DoesNotHold {
            self.against = against.into();
        }
        self
    }
}

/// What a check found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub verdict: Verdict,
    /// One sentence per part of the predicate, with its numbers.
    pub evidence: Vec<String>,
    /// Why it does not hold: one sentence per failed part, from the data.
    /// Empty unless the verdict is "does not hold".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub explanation: Vec<String>,
    /// Devices whose results entered the check.
    pub devices: Vec<String>,
    /// What the verdict rests on: measured rows, modelled rows whose
    /// verdict a model assumption sets, or modelled rows that inherit the
    /// calibrated machine's kernels ([`Basis`]); set by [`Observation::check`].
    pub basis: Basis,
}

/// What a verdict rests on, from the devices whose rows entered it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Basis {
    /// Devices timed on real hardware.
    pub measured: Vec<String>,
    /// Mocked CPUs: their kernels' efficiencies are the calibrated
    /// machine's, scaled by the specification.
    pub inherited: Vec<String>,
    /// Mocked GPUs: never measured, so the model's error on them is unknown.
    pub unvalidated: Vec<String>,
    /// The model assumptions that set the verdict on the modelled devices
    /// that entered, in words.
    pub assumptions: Vec<&'static str>,
}

impl Basis {
    /// The basis in a few words, for verdict tables.
    pub fn tag(&self) -> &'static str {
        let modelled = !self.inherited.is_empty() || !self.unvalidated.is_empty();
        match (
            self.measured.is_empty(),
            modelled,
            self.assumptions.is_empty(),
        ) {
            (true, false, _) => "no rows",
            (false, false, _) => "measured",
            (false, true, _) => "measured and modelled",
            (true, true, false) => "modelled, set by an assumption",
            (true, true, true) if self.unvalidated.is_empty() => "modelled from the calibration",
            (true, true, true) => "modelled, partly unvalidated",
        }
    }

    /// The basis in a sentence, naming devices and assumptions.
    pub fn sentence(&self) -> String {
        let mut parts = Vec::new();
        if !self.measured.is_empty() {
            parts.push(format!("measured on {}", self.measured.join(", ")));
        }
        if !self.inherited.is_empty() {
            parts.push(format!(
                "modelled on {} (mocked CPUs: the calibrated machine's kernel efficiencies scaled by the specification; error: \"another CPU\" in the cross-machine table)",
                self.inherited.join(", ")
            ));
        }
        if !self.unvalidated.is_empty() {
            parts.push(format!(
                "modelled on {} (GPU: not validated, error unknown)",
                self.unvalidated.join(", ")
            ));
        }
        if !self.assumptions.is_empty() {
            parts.push(format!(
                "on the modelled devices the verdict is set by the model's assumption that {}",
                self.assumptions.join("; and that ")
            ));
        }
        if parts.is_empty() {
            "no rows".into()
        } else {
            parts.join("; ")
        }
    }
}

/// A model assumption that decides an observation on modelled devices of
/// some kinds: the verdict there follows from it, not from a measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Assumption {
    pub on: &'static [DeviceKind],
    /// The assumption, worded to follow "the model's assumption that".
    pub text: &'static str,
}

impl Outcome {
    /// The conjunction of `parts`, over the rows of `devices`.
    pub fn of(parts: Vec<Part>, devices: Vec<String>) -> Outcome {
        let explanation = parts
            .iter()
            .filter(|p| p.verdict == Verdict::DoesNotHold && !p.against.is_empty())
            .map(|p| p.against.clone())
            .collect();
        Outcome {
            verdict: parts.iter().fold(Verdict::Holds, |v, p| v.and(p.verdict)),
            evidence: parts.into_iter().map(|p| p.evidence).collect(),
            explanation,
            devices,
            basis: Basis::default(),
        }
    }
}

/// Whether the paper numbers an observation or we worded it from its discussion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Wording {
    /// The paper states it with this numeral.
    Quoted,
    /// The paper's numbered statement is not in the text we have; the
    /// observation is worded from the sentence it discusses.
    FromDiscussion,
}

/// What the checks read besides results.
pub struct Context<'a> {
    pub rows: &'a [ResultRow],
    /// The kind of each device with a specification (and of `host`).
    pub kinds: &'a BTreeMap<String, DeviceKind>,
    pub networks: &'a [Network],
    pub sweeps: &'a Sweeps,
    pub accuracy: &'a [RecordedAccuracy],
    /// The measured machine's drift between sittings, within which two
    /// measured times tie ([`crate::drift::Drift`]).
    pub drift: Option<crate::drift::Drift>,
}

impl<'a> Context<'a> {
    pub fn kind(&self, device: &str) -> Option<DeviceKind> {
        self.kinds.get(device).copied()
    }

    /// The native engine's cells of these rows, compared under this
    /// context's drift.
    pub fn cells(&self) -> cells::Cells<'a> {
        cells::Cells::new(self.rows, cells::tie_factor(self.drift))
    }

    /// The cells of `compiler`'s rows ([`cells::Cells::of_compiler`]).
    pub fn cells_of(&self, compiler: &str) -> cells::Cells<'a> {
        cells::Cells::of_compiler(self.rows, compiler, cells::tie_factor(self.drift))
    }
}

/// One observation of the study and its check.
pub struct Observation {
    /// Its numeral in the paper (I to XIII; C1 to C3 for the compiler study).
    pub numeral: &'static str,
    /// The layer of the stack it is about.
    pub layer: &'static str,
    pub statement: &'static str,
    pub wording: Wording,
    /// The paper's sentence it comes from.
    pub source: &'static str,
    /// The predicate, in words.
    pub predicate: &'static str,
    /// The predicate itself.
    pub check: fn(&Context) -> Outcome,
    /// The model assumptions that set its verdict on modelled devices.
    pub assumptions: &'static [Assumption],
}

impl Observation {
    /// The predicate's outcome, with the basis of the devices that entered.
    pub fn check(&self, context: &Context) -> Outcome {
        let mut outcome = (self.check)(context);
        let mut basis = Basis::default();
        for device in &outcome.devices {
            let mocked = context
                .rows
                .iter()
                .any(|r| &r.device == device && dlas_core::results::is_mocked(r));
            let kind = context.kind(device);
            let list = match (mocked, kind) {
                (false, _) => &mut basis.measured,
                (true, Some(DeviceKind::Gpu)) => &mut basis.unvalidated,
                (true, _) => &mut basis.inherited,
            };
            list.push(device.clone());
            if mocked {
                for a in self.assumptions {
                    let applies = kind.is_some_and(|k| a.on.contains(&k));
                    if applies && !basis.assumptions.contains(&a.text) {
                        basis.assumptions.push(a.text);
                    }
                }
            }
        }
        outcome.basis = basis;
        outcome
    }
}

/// Observations checked on one results file.
pub struct Checked {
    /// The results file, as the user named it.
    pub file: String,
    pub outcomes: Vec<Outcome>,
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Hand-built results for the checks' tests: each check is shown to
    //! hold on one set and to fail on another.

    use super::*;
    use crate::compression::SweepPoint;
    use dlas_core::results::Status;
    use dlas_core::{Algorithm, Compression, Dataset, Format, Layout};

    /// A native batch-1 row.
    pub fn row(
        device: &str,
        dataset: Dataset,
        model: &str,
        compression: Compression,
        algorithm: Algorithm,
        tuned: bool,
        ms: f64,
    ) -> ResultRow {
        ResultRow {
            id: format!("{device}-{model}-{compression}-{algorithm}-{tuned}"),
            dataset,
            model: model.into(),
            compression,
            level: "0".into(),
            algorithm,
            format: if compression.is_pruning() {
                Format::Csr
            } else {
                Format::Dense
            },
            layout: Layout::Nchw,
            compiler: "native".into(),
            tuned,
            device: device.into(),
            batch: 1,
            warmup: 1,
            runs: 10,
            median_ms: Some(ms),
            p10_ms: None,
            p90_ms: None,
            p99_ms: None,
            mean_ms: None,
            stddev_ms: None,
            cv: None,
            ci95_low_ms: None,
            ci95_high_ms: None,
            status: Status::Ok,
            reason: String::new(),
            provider: String::new(),
            source: "test".into(),
        }
    }

    /// One row per algorithm, with the times given in the order direct,
    /// gemm, spatial-pack.
    pub fn cell(
        device: &str,
        dataset: Dataset,
        model: &str,
        compression: Compression,
        tuned: bool,
        times: [f64; 3],
    ) -> Vec<ResultRow> {
        [Algorithm::Direct, Algorithm::Gemm, Algorithm::SpatialPack]
            .into_iter()
            .zip(times)
            .map(|(a, t)| row(device, dataset, model, compression, a, tuned, t))
            .collect()
    }

    pub fn kinds() -> BTreeMap<String, DeviceKind> {
        [
            ("i7", DeviceKind::Cpu),
            ("hikey970-cpu", DeviceKind::Cpu),
            ("host", DeviceKind::Cpu),
            ("hikey970-gpu", DeviceKind::Gpu),
            ("xavier-gpu", DeviceKind::Gpu),
        ]
        .map(|(d, k)| (d.to_string(), k))
        .into()
    }

    /// Chosen points: weight pruning leaves `weight` of the MACs and
    /// parameters, channel pruning `channel`.
    pub fn sweeps(models: &[(Dataset, &str)], weight: f64, channel: f64) -> Sweeps {
        let mut points = Vec::new();
        for (dataset, model) in models {
            for (technique, left) in [
                (Compression::Dense, 1.0),
                (Compression::WeightPruning, weight),
                (Compression::ChannelPruning, channel),
            ] {
                points.push(SweepPoint {
                    dataset: *dataset,
                    model: model.to_string(),
                    technique,
                    level: 1.0 - left,
                    chosen: true,
                    params: (1000.0 * left) as usize,
                    bytes: (4000.0 * left) as u64,
                    macs: (1000.0 * left) as u64,
                });
            }
        }
        Sweeps { points }
    }

    /// Runs the observation of `all` numbered `numeral` on `rows` with the
    /// given facts.
    pub fn verdict_in(
        all: &[Observation],
        numeral: &str,
        rows: &[ResultRow],
        networks: &[Network],
        sweeps: &Sweeps,
        accuracy: &[RecordedAccuracy],
    ) -> Outcome {
        let kinds = kinds();
        let context = Context {
            rows,
            kinds: &kinds,
            networks,
            sweeps,
            accuracy,
            drift: None,
        };
        all.iter()
            .find(|o| o.numeral == numeral)
            .expect("a numeral of the study")
            .check(&context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conjunction_of_verdicts() {
        use Verdict::*;
        assert_eq!(Holds.and(Holds), Holds);
        assert_eq!(Holds.and(CannotBeTested), CannotBeTested);
        assert_eq!(CannotBeTested.and(DoesNotHold), DoesNotHold);
        assert_eq!(Holds.and(DoesNotHold), DoesNotHold);
    }
}
