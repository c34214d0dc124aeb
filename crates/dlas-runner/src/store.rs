//! Results on disk: a results CSV and a samples file beside it, both
//! append-only and flushed per combination. The samples line is written
//! before the results row, so a row always has its samples; a resumed run
//! skips every id already in the results file.
//!
//! The results file is locked while a run writes it, so a second run on
//! the same file stops at once. Opening repairs what a crash or a full
//! disk left (see `dlas_core::append`): a partial last line of either
//! file is dropped, and so is a samples line whose row never reached the
//! disk, since its combination runs again.

use crate::conditions::Conditions;
use anyhow::{Context, Result};
use dlas_core::ResultRow;
use dlas_core::append::{self, LineFile};
use dlas_core::results::{ResultsAppender, check_mixing};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

/// One line of the samples file (JSON lines): every timed run of a
/// combination, in order, and how its measurement went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    pub id: String,
    pub samples_ms: Vec<f64>,
    /// Why it stopped (`precise`, `budget`, `max-runs`; see `rounds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
    /// The interleaved rounds it took part in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<usize>,
    /// The machine's load, steal time and clock while it ran (its bursts
    /// that count: those of `samples_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Conditions>,
    /// Timed runs of bursts in the machine's far state, left out of
    /// `samples_ms` and the median (`rounds::NearState`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub far_ms: Vec<f64>,
    /// No burst ran in the near state: `samples_ms` are far-state runs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub far_only: bool,
    /// The near state's core-to-core round trip (the lowest read in the
    /// run) when it stopped, in ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_round_trip_ns: Option<f64>,
}

impl Samples {
    /// Samples with nothing known about how they were taken.
    pub fn bare(id: &str, samples_ms: &[f64]) -> Samples {
        Samples {
            id: id.to_string(),
            samples_ms: samples_ms.to_vec(),
            stop: None,
            rounds: None,
            conditions: None,
            far_ms: Vec::new(),
            far_only: false,
            near_round_trip_ns: None,
        }
    }
}

pub struct Store {
    results: ResultsAppender,
    /// Opened at the first samples line when the file does not exist yet.
    samples: Option<LineFile>,
    samples_path: PathBuf,
    done: HashSet<String>,
}

pub use dlas_core::results::samples_path;

impl Store {
    /// Locks (or creates) a results file for measured rows of `devices`
    /// and opens its samples file; ids already present are reported done,
    /// but for rows recorded as failed when `retry_failed` is set: those
    /// are measured again, and the new row, appended after the failed one,
    /// replaces it (`dlas_core::results::parse_results`). A file holding
    /// mocked rows or other devices' rows is refused. What opening
    /// repaired is printed as one warning line per file.
    pub fn open(results: &Path, devices: &BTreeSet<&str>, retry_failed: bool) -> Result<Store> {
        let (appender, warning) = ResultsAppender::open(results)?;
        if let Some(warning) = warning {
            dlas_core::errln!("warning: {warning}");
        }
        check_mixing(results, appender.rows(), false, devices)?;
        let done: HashSet<String> = appender
            .rows()
            .iter()
            .filter(|r| !(retry_failed && r.status == dlas_core::Status::Failed))
            .map(|r| r.id.clone())
            .collect();
        let samples_path = samples_path(results);
        let samples = match append::lock(&samples_path, false)? {
            Some(locked) => Some(open_samples(locked, &done)?),
            None => None,
        };
        Ok(Store {
            results: appender,
            samples,
            samples_path,
            done,
        })
    }

    pub fn is_done(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    /// Appends the samples (if any), then the row; both reach the disk
    /// before it returns. If either write fails, both files are left as
    /// they were.
    pub fn record(&mut self, row: &ResultRow, samples: Option<&Samples>) -> Result<()> {
        let mut written = None;
        if let Some(samples) = samples {
            debug_assert_eq!(samples.id, row.id);
            let mut line = serde_json::to_string(samples)?;
            line.push('\n');
            let file = match &mut self.samples {
                Some(file) => file,
                None => {
                    let locked =
                        append::lock(&self.samples_path, true)?.expect("created when absent");
                    self.samples.insert(open_samples(locked, &self.done)?)
                }
            };
            let len = file.len();
            file.append(line.as_bytes())?;
            written = Some(len);
        }
        if let Err(e) = self.results.append(row) {
            // The samples line would have no row: cut it too.
            if let (Some(file), Some(len)) = (&mut self.samples, written) {
                file.truncate(len)?;
            }
            return Err(e);
        }
        self.done.insert(row.id.clone());
        Ok(())
    }
}

/// Opens a samples file after repairing its tail, and drops the samples
/// lines at its end whose combination has no row in `done` (a run stopped
/// between the two writes; the combination runs again).
fn open_samples(locked: append::Locked, done: &HashSet<String>) -> Result<LineFile> {
    let complete = |line: &str| serde_json::from_str::<Samples>(line).is_ok();
    let (mut file, text, warning) = LineFile::open(locked, complete)?;
    if let Some(warning) = warning {
        dlas_core::errln!("warning: {warning}");
    }
    let mut keep = text.len();
    let mut orphans = Vec::new();
    for line in text.lines().rev() {
        match serde_json::from_str::<Samples>(line) {
            Ok(s) if !done.contains(&s.id) => {
                keep -= line.len() + 1;
                orphans.push(s.id);
            }
            _ => break,
        }
    }
    if !orphans.is_empty() {
        file.truncate(keep as u64)?;
        dlas_core::errln!(
            "warning: {}: dropped the samples of {} (no results row; measured again)",
            file.path().display(),
            orphans.join(", ")
        );
    }
    Ok(file)
}

/// Reads a samples file; lines cut by a crash are skipped.
pub fn read_samples(path: &Path) -> Result<Vec<Samples>> {
    let text = dlas_core::regular_file::read_to_string(path)
        .with_context(|| format!("cannot read samples file {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::{Combination, Dataset, Summary};

    fn row(batch: usize) -> ResultRow {
        let c = Combination {
            batch,
            ..Combination::host(Dataset::Cifar10, "resnet18", "tract-opt")
        };
        let summary = Summary::from_samples(&[1.49, 1.5, 1.51]).unwrap();
        ResultRow::measured(&c, 1, &summary, "env-0123456789ab")
    }

    fn open(path: &Path) -> Store {
        Store::open(path, &BTreeSet::from(["host"]), false).unwrap()
    }

    /// A crash cut the last row and the last samples line: the next run
    /// opens the files (it used to refuse the results file for good),
    /// keeps every complete row and samples line, and glues nothing.
    #[test]
    fn a_row_and_samples_cut_by_a_crash_are_dropped_and_the_run_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.csv");
        let mut store = open(&path);
        store
            .record(&row(1), Some(&Samples::bare(&row(1).id, &[1.0, 2.0])))
            .unwrap();
        store
            .record(&row(2), Some(&Samples::bare(&row(2).id, &[3.0])))
            .unwrap();
        drop(store);
        let csv = std::fs::read_to_string(&path).unwrap();
        let jsonl = std::fs::read_to_string(samples_path(&path)).unwrap();
        std::fs::write(&path, &csv[..csv.len() - 20]).unwrap();
        std::fs::write(samples_path(&path), &jsonl[..jsonl.len() - 4]).unwrap();
        let mut store = open(&path);
        assert!(store.is_done(&row(1).id) && !store.is_done(&row(2).id));
        store
            .record(&row(2), Some(&Samples::bare(&row(2).id, &[3.0])))
            .unwrap();
        drop(store);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), csv);
        assert_eq!(std::fs::read_to_string(samples_path(&path)).unwrap(), jsonl);
    }

    /// Samples written, then killed before the row: the samples line is
    /// dropped, so the re-measured combination has one samples line.
    #[test]
    fn samples_without_their_row_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.csv");
        let mut store = open(&path);
        store
            .record(&row(1), Some(&Samples::bare(&row(1).id, &[1.0])))
            .unwrap();
        drop(store);
        let jsonl = std::fs::read_to_string(samples_path(&path)).unwrap();
        std::fs::write(
            samples_path(&path),
            format!("{jsonl}{{\"id\":\"{}\",\"samples_ms\":[2.0]}}\n", row(2).id),
        )
        .unwrap();
        let mut store = open(&path);
        store
            .record(&row(2), Some(&Samples::bare(&row(2).id, &[3.0])))
            .unwrap();
        drop(store);
        let ids: Vec<String> = read_samples(&samples_path(&path))
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(ids, [row(1).id, row(2).id]);
    }

    #[test]
    fn mocked_rows_or_a_second_run_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.csv");
        let mut mocked = row(1);
        mocked.source = "mock-v1".into();
        mocked.device = "i7".into();
        mocked.id = mocked.combination().unwrap().id();
        std::fs::write(&path, dlas_core::results::to_csv(&[mocked]).unwrap()).unwrap();
        let err = Store::open(&path, &BTreeSet::from(["host"]), false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("host.csv holds 1 mocked rows of device i7"),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
        let first = open(&path);
        let err = Store::open(&path, &BTreeSet::from(["host"]), false)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("host.csv is being written by another process"),
            "{err}"
        );
        drop(first);
    }
}
