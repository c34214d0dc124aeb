//! Tuning records: one JSON line per measured candidate, like the tuning
//! logs TVM users know, and the best-of file derived from them.
//!
//! The log is the truth and is only ever appended to: each record is one
//! `write` of a whole line followed by `fsync`, so a crash loses at most the
//! candidate being measured, and a torn last line is skipped (and reported)
//! when the log is read back. The best-of file is derived, rewritten
//! atomically, and small enough to commit: it is what tuned runs apply.

use crate::confirm::{self, Measured};
use anyhow::{Context, Result, bail};
use dlas_engine::{LayerKey, Schedule, ScheduleTable};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A candidate's cost: the median of its samples (the study's statistic).
/// It lives with the records because every decision read from them
/// (search, confirmation, best-of) ranks by it.
pub fn cost(samples: &[f64]) -> Option<f64> {
    dlas_core::Summary::from_samples(samples).map(|s| s.median)
}

/// Format version of records and best-of files.
pub const VERSION: u32 = 1;

/// What one search is about: a layer, on some threads, at some batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskKey {
    pub layer: LayerKey,
    pub threads: usize,
    pub batch: usize,
}

impl std::fmt::Display for TaskKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} | {}t b{}", self.layer, self.threads, self.batch)
    }
}

/// Which step of a search measured a record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// A candidate of the search, ranked by this one measurement.
    #[default]
    Search,
    /// One round of re-measuring a finalist (see [`crate::confirm`]).
    Confirm,
}

impl Phase {
    fn is_search(&self) -> bool {
        *self == Phase::Search
    }
}

/// One measured candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    /// The machine it was measured on (see `dlas_runner::environment`).
    pub fingerprint: String,
    pub task: TaskKey,
    pub schedule: Schedule,
    /// Milliseconds per run of each repeat; empty when `error` is set.
    pub costs_ms: Vec<f64>,
    pub error: Option<String>,
    /// Seconds since the Unix epoch.
    pub timestamp: u64,
    /// Absent in the log for search records (and in logs written before
    /// confirmation existed, which hold search records only).
    #[serde(default, skip_serializing_if = "Phase::is_search")]
    pub phase: Phase,
}

impl Record {
    /// The candidate's cost (median of its repeats), `None` if it failed.
    pub fn cost(&self) -> Option<f64> {
        match self.error {
            Some(_) => None,
            None => cost(&self.costs_ms),
        }
    }
}

/// The append-only log of records.
pub struct RecordLog {
    path: PathBuf,
    file: File,
}

impl RecordLog {
    /// Opens (creating) the log at `path` for appending. If a crash left
    /// a torn last line, a newline is written first so the next record
    /// starts a line of its own.
    pub fn open(path: &Path) -> Result<RecordLog> {
        let path = &dlas_core::regular_file::resolve_output(path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the directory of {}", path.display()))?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening tuning records {}", path.display()))?;
        dlas_core::regular_file::check(&file, path)?;
        let len = file.metadata()?.len();
        if len > 0 {
            let mut last = [0u8];
            file.seek(SeekFrom::Start(len - 1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
            }
        }
        Ok(RecordLog {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Appends `record` as one line and waits until it is on disk.
    pub fn append(&mut self, record: &Record) -> Result<()> {
        let mut line = serde_json::to_string(record)?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.sync_data())
            .with_context(|| format!("appending to {}", self.path.display()))
    }
}

/// The records of a log, and the lines that could not be read.
#[derive(Debug, Default)]
pub struct Loaded {
    pub records: Vec<Record>,
    /// `file:line: why` for every skipped line (a torn write, an edit).
    pub skipped: Vec<String>,
}

/// Reads the log at `path` (a missing log has no records). Lines that do
/// not parse (a torn write, an edit, bytes that are not UTF-8) and records
/// whose costs are not finite positive times are skipped and listed with
/// their line, and the rest of the log is kept; a record of another format
/// version is an error, since its fields cannot be trusted to mean the same
/// thing.
pub fn load(path: &Path) -> Result<Loaded> {
    let bytes = match dlas_core::regular_file::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut loaded = Loaded::default();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let at = || format!("{}:{}", path.display(), i + 1);
        let line = match std::str::from_utf8(line) {
            Ok(line) => line,
            Err(e) => {
                loaded.skipped.push(format!(
                    "{}: not UTF-8 text (byte {} of the line)",
                    at(),
                    e.valid_up_to() + 1
                ));
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) if r.version != VERSION => bail!(
                "{}: tuning record of format version {}, this dlas reads version {VERSION}",
                at(),
                r.version
            ),
            Ok(r) => match r.check() {
                Ok(()) => loaded.records.push(r),
                Err(why) => loaded.skipped.push(format!("{}: {why}", at())),
            },
            Err(e) => loaded.skipped.push(format!("{}: {e}", at())),
        }
    }
    Ok(loaded)
}

/// `Err(why)` unless `ms` is a finite, positive time.
fn check_time(field: &str, ms: f64) -> Result<(), String> {
    if ms.is_finite() && ms > 0.0 {
        Ok(())
    } else {
        Err(format!(
            "{field} is {ms}; a cost is a finite, positive time in ms"
        ))
    }
}

impl Record {
    /// What the log promises of a record: finite, positive costs, and none
    /// when the candidate failed; a printable machine fingerprint.
    pub fn check(&self) -> Result<(), String> {
        for &ms in &self.costs_ms {
            check_time("a value of costs_ms", ms)?;
        }
        if self.error.is_none() && self.costs_ms.is_empty() {
            return Err("costs_ms is empty, and the record has no error".into());
        }
        dlas_core::text::check_printable("fingerprint", &self.fingerprint)
    }
}

/// The best measured schedule of one task on one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestEntry {
    pub fingerprint: String,
    pub task: TaskKey,
    pub schedule: Schedule,
    /// Its cost: the median of its confirmation rounds' samples once the
    /// search's finalists were re-measured, its search cost before.
    pub cost_ms: f64,
    /// The untuned default's cost (the schedule the search started from),
    /// measured the same way.
    pub default_ms: Option<f64>,
    /// Candidates the search measured for this task (not counting
    /// confirmation rounds).
    pub trials: usize,
}

/// The best schedule of every task of every machine in a log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestOf {
    pub version: u32,
    pub entries: Vec<BestEntry>,
}

impl BestOf {
    /// Derives the best-of from `records`: per machine and task, the
    /// schedule [`crate::confirm::decide`] keeps. The result depends only
    /// on the log's content.
    pub fn from_records(records: &[Record]) -> BestOf {
        let mut tasks: BTreeMap<(String, String), (&Record, Vec<Measured>)> = BTreeMap::new();
        for r in records {
            tasks
                .entry((r.fingerprint.clone(), r.task.to_string()))
                .or_insert_with(|| (r, Vec::new()))
                .1
                .push(r.into());
        }
        let entries = tasks
            .into_values()
            .filter_map(|(first, history)| {
                let d = confirm::decide(&history)?;
                Some(BestEntry {
                    fingerprint: first.fingerprint.clone(),
                    task: first.task,
                    schedule: d.best,
                    cost_ms: d.best_ms,
                    default_ms: d.default_ms,
                    trials: history.iter().filter(|m| m.phase == Phase::Search).count(),
                })
            })
            .collect();
        BestOf {
            version: VERSION,
            entries,
        }
    }

    /// Writes the file atomically: JSON with one entry per line, in a
    /// fixed order, so a re-tuned layer is a one-line diff.
    pub fn save(&self, path: &Path) -> Result<()> {
        let entries: Vec<String> = self
            .entries
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<_, _>>()?;
        let json = format!(
            "{{\"version\": {},\n\"entries\": [\n{}\n]}}\n",
            self.version,
            entries.join(",\n")
        );
        dlas_core::atomic::write_atomic(path, json.as_bytes())
    }

    pub fn load(path: &Path) -> Result<BestOf> {
        let text = dlas_core::regular_file::read_to_string(path)
            .with_context(|| format!("reading tuning best-of file {}", path.display()))?;
        let best: BestOf = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a tuning best-of file", path.display()))?;
        if best.version != VERSION {
            bail!(
                "{}: best-of format version {}, this dlas reads version {VERSION}",
                path.display(),
                best.version
            );
        }
        for (i, entry) in best.entries.iter().enumerate() {
            check_time("cost_ms", entry.cost_ms)
                .and_then(|()| entry.default_ms.map_or(Ok(()), |ms| check_time("default_ms", ms)))
                .and_then(|()| dlas_core::text::check_printable("fingerprint", &entry.fingerprint))
                .map_err(|why| {
                    anyhow::anyhow!(
                        "{}: entry {} ({}): {why}; re-derive the file from the records with `dlas tune`",
                        path.display(),
                        i + 1,
                        entry.task
                    )
                })?;
        }
        Ok(best)
    }

    /// The machines the file has schedules for.
    pub fn fingerprints(&self) -> BTreeSet<&str> {
        self.entries
            .iter()
            .map(|e| e.fingerprint.as_str())
            .collect()
    }

    /// The schedules measured on `fingerprint` for `threads` and `batch`.
    pub fn table(&self, fingerprint: &str, threads: usize, batch: usize) -> ScheduleTable {
        self.entries
            .iter()
            .filter(|e| {
                e.fingerprint == fingerprint && e.task.threads == threads && e.task.batch == batch
            })
            .map(|e| (e.task.layer, e.schedule))
            .collect()
    }
}
