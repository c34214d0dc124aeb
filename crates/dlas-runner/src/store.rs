//! Results on disk: a results CSV and a samples file beside it, both
//! append-only and flushed per combination. The samples line is written
//! before the results row, so a row always has its samples; a resumed run
//! skips every id already in the results file.

use anyhow::{Context, Result};
use dlas_core::ResultRow;
use dlas_core::results::{ResultsAppender, read_results};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One line of the samples file (JSON lines).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    pub id: String,
    pub samples_ms: Vec<f64>,
}

pub struct Store {
    /// Opened at the first record, so a run that measures nothing leaves no file.
    results: Option<ResultsAppender>,
    results_path: PathBuf,
    samples_path: PathBuf,
    done: HashSet<String>,
}

pub use dlas_core::results::samples_path;

impl Store {
    /// Opens (or creates) a results file and its samples file; ids already
    /// present are reported done.
    pub fn open(results: &Path) -> Result<Store> {
        let done = if results.exists() {
            read_results(results)?.into_iter().map(|r| r.id).collect()
        } else {
            HashSet::new()
        };
        Ok(Store {
            results: None,
            results_path: results.to_path_buf(),
            samples_path: samples_path(results),
            done,
        })
    }

    pub fn is_done(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    /// Appends the samples (if any), then the row; both reach the disk before it returns.
    pub fn record(&mut self, row: &ResultRow, samples: Option<&[f64]>) -> Result<()> {
        if let Some(samples) = samples {
            let line = serde_json::to_string(&Samples {
                id: row.id.clone(),
                samples_ms: samples.to_vec(),
            })?;
            if let Some(dir) = self.samples_path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.samples_path)
                .with_context(|| format!("cannot open {}", self.samples_path.display()))?;
            file.write_all(format!("{line}\n").as_bytes())
                .and_then(|()| file.sync_data())
                .with_context(|| format!("cannot append to {}", self.samples_path.display()))?;
        }
        let results = match &mut self.results {
            Some(appender) => appender,
            None => self
                .results
                .insert(ResultsAppender::open(&self.results_path)?),
        };
        results.append(row)?;
        self.done.insert(row.id.clone());
        Ok(())
    }
}

/// Reads a samples file; lines cut by a crash are skipped.
pub fn read_samples(path: &Path) -> Result<Vec<Samples>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read samples file {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}
