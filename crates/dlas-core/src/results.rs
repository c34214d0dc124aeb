//! The results schema (one row per combination) and its CSV files.
//!
//! `docs/results-schema.md` documents every column. Rows are only ever
//! appended; a results file is read back by id, so a resumed run skips what
//! is already there.

use crate::axes::{Algorithm, Compression, Dataset, Format, Layout};
use crate::plan::{Combination, format_level};
use crate::stats::Summary;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

/// What happened to a combination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Measured; the statistics are valid.
    Ok,
    /// Measured, but the coefficient of variation exceeds the stability threshold.
    Unstable,
    /// Not measured on purpose (e.g. a runtime that is not installed); see `reason`.
    Skipped,
    /// The attempt failed (unsupported operator, timeout, error); see `reason`.
    Failed,
}

impl Status {
    pub fn has_timing(self) -> bool {
        matches!(self, Status::Ok | Status::Unstable)
    }
}

/// One row of a results CSV. Times are milliseconds per batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub id: String,
    pub dataset: Dataset,
    pub model: String,
    pub compression: Compression,
    pub level: String,
    pub algorithm: Algorithm,
    pub format: Format,
    pub layout: Layout,
    pub compiler: String,
    pub tuned: bool,
    pub device: String,
    pub batch: usize,
    pub warmup: usize,
    pub runs: usize,
    pub median_ms: Option<f64>,
    pub p10_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub mean_ms: Option<f64>,
    pub stddev_ms: Option<f64>,
    pub cv: Option<f64>,
    pub ci95_low_ms: Option<f64>,
    pub ci95_high_ms: Option<f64>,
    pub status: Status,
    pub reason: String,
    /// The execution provider or executor that actually ran (real devices).
    pub provider: String,
    /// Where the numbers come from: `mock:<model-version>` or an environment record id.
    pub source: String,
}

impl ResultRow {
    /// A measured row; the status is `unstable` when the samples vary too much.
    pub fn measured(c: &Combination, warmup: usize, summary: &Summary, source: &str) -> ResultRow {
        let status = if summary.is_unstable() {
            Status::Unstable
        } else {
            Status::Ok
        };
        let mut row = ResultRow::without_timing(c, warmup, status, "", source);
        row.runs = summary.runs;
        row.median_ms = Some(summary.median);
        row.p10_ms = Some(summary.p10);
        row.p90_ms = Some(summary.p90);
        row.p99_ms = Some(summary.p99);
        row.mean_ms = Some(summary.mean);
        row.stddev_ms = Some(summary.stddev);
        row.cv = Some(summary.cv);
        row.ci95_low_ms = Some(summary.ci_low);
        row.ci95_high_ms = Some(summary.ci_high);
        row
    }

    /// A row that records why a combination has no timing.
    pub fn without_timing(
        c: &Combination,
        warmup: usize,
        status: Status,
        reason: &str,
        source: &str,
    ) -> ResultRow {
        ResultRow {
            id: c.id(),
            dataset: c.dataset,
            model: c.model.clone(),
            compression: c.compression,
            level: format_level(c.level),
            algorithm: c.algorithm,
            format: c.format,
            layout: c.layout,
            compiler: c.compiler.clone(),
            tuned: c.tuned,
            device: c.device.clone(),
            batch: c.batch,
            warmup,
            runs: 0,
            median_ms: None,
            p10_ms: None,
            p90_ms: None,
            p99_ms: None,
            mean_ms: None,
            stddev_ms: None,
            cv: None,
            ci95_low_ms: None,
            ci95_high_ms: None,
            status,
            reason: reason.to_string(),
            provider: String::new(),
            source: source.to_string(),
        }
    }

    /// Rounds every time to `digits` significant digits, so files written on
    /// different machines from the same model agree byte for byte.
    pub fn rounded(mut self, digits: i32) -> ResultRow {
        for v in [
            &mut self.median_ms,
            &mut self.p10_ms,
            &mut self.p90_ms,
            &mut self.p99_ms,
            &mut self.mean_ms,
            &mut self.stddev_ms,
            &mut self.cv,
            &mut self.ci95_low_ms,
            &mut self.ci95_high_ms,
        ] {
            *v = v.map(|x| round_significant(x, digits));
        }
        self
    }
}

/// Rounds to `digits` significant decimal digits.
pub fn round_significant(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let magnitude = x.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits - 1 - magnitude);
    (x * scale).round() / scale
}

/// Reads a results CSV; a malformed row is an error naming the file and line.
pub fn read_results(path: &Path) -> Result<Vec<ResultRow>> {
    let mut reader = csv::Reader::from_path(path)
        .with_context(|| format!("cannot read results file {}", path.display()))?;
    let mut rows = Vec::new();
    for (i, record) in reader.deserialize().enumerate() {
        let row: ResultRow = record.map_err(|e| {
            let line = e.position().map_or(i as u64 + 2, |p| p.line());
            anyhow::anyhow!(
                "{}:{line}: not a valid results row ({e}); see docs/results-schema.md",
                path.display()
            )
        })?;
        rows.push(row);
    }
    Ok(rows)
}

/// Serialises rows to CSV text (with header).
pub fn to_csv(rows: &[ResultRow]) -> Result<Vec<u8>> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    for row in rows {
        writer.serialize(row)?;
    }
    Ok(writer.into_inner()?)
}

/// The samples file that belongs to a results file.
pub fn samples_path(results: &Path) -> std::path::PathBuf {
    results.with_extension("samples.jsonl")
}

/// An append-only results file: each row is written and flushed to disk
/// before the next combination starts, so a crash loses at most the one in progress.
pub struct ResultsAppender {
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl ResultsAppender {
    /// Opens (or creates, with a header) `path` for appending. A file whose
    /// last line was cut by a crash is truncated back to its last full row.
    pub fn open(path: &Path) -> Result<ResultsAppender> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create folder {}", dir.display()))?;
        }
        let existing = std::fs::read(path).unwrap_or_default();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open results file {}", path.display()))?;
        if existing.is_empty() {
            file.write_all(csv_header()?.as_bytes())?;
        } else if !existing.ends_with(b"\n") {
            let keep = existing
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            file.set_len(keep as u64)?;
        }
        file.sync_all()?;
        Ok(ResultsAppender {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn append(&mut self, row: &ResultRow) -> Result<()> {
        let mut writer = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        writer.serialize(row)?;
        let bytes = writer.into_inner()?;
        self.file
            .write_all(&bytes)
            .and_then(|()| self.file.sync_data())
            .with_context(|| format!("cannot append to {}", self.path.display()))
    }
}

/// The header line. The csv crate writes a header only with the first
/// record, so it is taken from a placeholder row.
fn csv_header() -> Result<String> {
    let c = Combination {
        dataset: Dataset::Cifar10,
        model: String::new(),
        compression: Compression::Dense,
        level: 0.0,
        algorithm: Algorithm::Direct,
        format: Format::Dense,
        layout: Layout::Nchw,
        compiler: String::new(),
        tuned: false,
        device: String::new(),
        batch: 1,
    };
    let full = String::from_utf8(to_csv(&[ResultRow::without_timing(
        &c,
        0,
        Status::Skipped,
        "",
        "",
    )])?)?;
    match full.split_once('\n') {
        Some((header, _)) => Ok(format!("{header}\n")),
        None => bail!("the csv writer produced no header"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn combination() -> Combination {
        Combination {
            dataset: Dataset::Cifar10,
            model: "resnet18".into(),
            compression: Compression::WeightPruning,
            level: 0.8,
            algorithm: Algorithm::Gemm,
            format: Format::Csr,
            layout: Layout::Nchw,
            compiler: "native".into(),
            tuned: false,
            device: "i7".into(),
            batch: 1,
        }
    }

    #[test]
    fn appended_rows_read_back_and_survive_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let summary = Summary::from_samples(&[1.0, 1.1, 0.9]).unwrap();
        let row = ResultRow::measured(&combination(), 1, &summary, "mock:1");
        ResultsAppender::open(&path).unwrap().append(&row).unwrap();
        // Simulate a crash in the middle of the next row.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"deadbeef,cifar10,res").unwrap();
        drop(f);
        let mut appender = ResultsAppender::open(&path).unwrap();
        appender.append(&row).unwrap();
        let rows = read_results(&path).unwrap();
        assert_eq!(rows, vec![row.clone(), row]);
    }

    #[test]
    fn malformed_row_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.csv");
        let mut text = String::from_utf8(
            to_csv(&[ResultRow::without_timing(
                &combination(),
                1,
                Status::Skipped,
                "x",
                "s",
            )])
            .unwrap(),
        )
        .unwrap();
        text.push_str("id,cifar10\n");
        std::fs::write(&path, text).unwrap();
        let err = read_results(&path).unwrap_err().to_string();
        assert!(err.contains("bad.csv:3"), "{err}");
    }

    #[test]
    fn rounding_to_significant_digits() {
        assert_eq!(round_significant(123.456, 3), 123.0);
        assert_eq!(round_significant(0.0012345, 3), 0.00123);
        assert_eq!(round_significant(0.0, 3), 0.0);
    }
}
