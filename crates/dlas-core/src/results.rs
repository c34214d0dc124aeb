//! The results schema (one row per combination) and its CSV files.
//!
//! `docs/results-schema.md` documents every column. Rows are only ever
//! appended; a results file is read back by id, so a resumed run skips what
//! is already there.

use crate::append::{self, LineFile};
use crate::axes::{Algorithm, Compression, Dataset, Format, Layout};
use crate::plan::{Combination, format_level};
use crate::stats::Summary;
use crate::study::cut;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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

impl ResultRow {
    /// Checks what the schema promises beyond the column types: every
    /// number finite; for `ok` and `unstable` rows a median, every time
    /// positive and the spread (`stddev_ms`, `cv`) not negative. The error
    /// is `field <column>: <why>`.
    pub fn check(&self) -> Result<(), String> {
        self.check_text()?;
        let timed = self.status.has_timing();
        let status = self.status.name();
        if timed && self.median_ms.is_none() {
            return Err(format!(
                "field median_ms: empty, but a row of status {status} needs its median time"
            ));
        }
        // (column, value, whether it is a time rather than a spread)
        let numbers = [
            ("median_ms", self.median_ms, true),
            ("p10_ms", self.p10_ms, true),
            ("p90_ms", self.p90_ms, true),
            ("p99_ms", self.p99_ms, true),
            ("mean_ms", self.mean_ms, true),
            ("ci95_low_ms", self.ci95_low_ms, true),
            ("ci95_high_ms", self.ci95_high_ms, true),
            ("stddev_ms", self.stddev_ms, false),
            ("cv", self.cv, false),
        ];
        for (column, value, is_time) in numbers {
            let Some(x) = value else { continue };
            if !x.is_finite() {
                return Err(format!("field {column}: {x} is not a finite number"));
            }
            if timed && is_time && x <= 0.0 {
                return Err(format!(
                    "field {column}: {x} is not a positive time, and the row's status is {status}"
                ));
            }
            if timed && x < 0.0 {
                return Err(format!(
                    "field {column}: {x} is negative, and the row's status is {status}"
                ));
            }
        }
        Ok(())
    }
}

impl ResultRow {
    /// The combination the row's axes name.
    pub fn combination(&self) -> Result<Combination, String> {
        let level: f64 = self
            .level
            .parse()
            .map_err(|_| format!("field level: `{}` is not a number", cut(&self.level)))?;
        Ok(Combination {
            dataset: self.dataset,
            model: self.model.clone(),
            compression: self.compression,
            level,
            algorithm: self.algorithm,
            format: self.format,
            layout: self.layout,
            compiler: self.compiler.clone(),
            tuned: self.tuned,
            device: self.device.clone(),
            batch: self.batch,
        })
    }

    /// The text fields: each one printable line; the id the hash of the
    /// row's own axes (so an empty, edited or copied id is caught); the
    /// source a whole `env-` or `mock-v` tag (it names a file).
    fn check_text(&self) -> Result<(), String> {
        for (field, text) in [
            ("id", &self.id),
            ("model", &self.model),
            ("level", &self.level),
            ("compiler", &self.compiler),
            ("device", &self.device),
            ("reason", &self.reason),
            ("provider", &self.provider),
            ("source", &self.source),
        ] {
            crate::text::check_printable(field, text)?;
        }
        let expected = self.combination()?.id();
        if self.id != expected {
            return Err(format!(
                "field id: `{}` is not the id of the row's combination, which is {expected} \
                 (the first 16 hex digits of the sha256 of its canonical form)",
                cut(&self.id)
            ));
        }
        if !has_whole_source(self) {
            return Err(format!(
                "field source: `{}` is neither `env-` and 12 hex digits (an environment record) \
                 nor `mock-v` and a model version",
                cut(&self.source)
            ));
        }
        Ok(())
    }
}

impl Status {
    /// The status as the results file spells it.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Unstable => "unstable",
            Status::Skipped => "skipped",
            Status::Failed => "failed",
        }
    }
}

/// Reads a results CSV. An empty file, a missing column, a malformed row
/// or a number the schema does not allow is an error naming the file (and
/// the line and column).
pub fn read_results(path: &Path) -> Result<Vec<ResultRow>> {
    let text = crate::regular_file::read_to_string(path)
        .with_context(|| format!("cannot read results file {}", path.display()))?;
    parse_results(path, &text)
}

/// Parses the text of the results file `path` (see [`read_results`]).
pub fn parse_results(path: &Path, text: &str) -> Result<Vec<ResultRow>> {
    if text.trim().is_empty() {
        bail!(
            "{}: empty file; a results file starts with the header line `{}` \
             (docs/results-schema.md)",
            path.display(),
            csv_header().trim_end()
        );
    }
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader
        .headers()
        .with_context(|| format!("{}:1: not a results header", path.display()))?
        .clone();
    let expected = csv_header();
    let missing: Vec<&str> = expected
        .trim_end()
        .split(',')
        .filter(|column| !header.iter().any(|h| h == *column))
        .collect();
    if !missing.is_empty() {
        bail!(
            "{}:1: no column {}; a results file has the columns `{}` (docs/results-schema.md)",
            path.display(),
            missing.join(", "),
            expected.trim_end()
        );
    }
    let mut rows: Vec<ResultRow> = Vec::new();
    // id -> (index in `rows`, line) of the row that stands for it.
    let mut seen: HashMap<String, (usize, u64)> = HashMap::new();
    let mut superseded = Vec::new();
    for record in reader.records() {
        let invalid = |line: u64, why: &dyn std::fmt::Display| {
            anyhow::anyhow!(
                "{}:{line}: not a valid results row ({why}); see docs/results-schema.md",
                path.display()
            )
        };
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            invalid(line, &e)
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let row: ResultRow = record
            .deserialize(Some(&header))
            .map_err(|e| invalid(line, &e))?;
        row.check()
            .map_err(|why| anyhow::anyhow!("{}:{line}: {why}", path.display()))?;
        if let Some(&(earlier, first_line)) = seen.get(&row.id) {
            if rows[earlier].status != Status::Failed {
                bail!(
                    "{}:{line}: id {} repeats the row of line {first_line} (status {}); a results \
                     file holds one row per combination, except that a failed row may be followed \
                     by its re-measurement (`dlas run --retry-failed`), which replaces it",
                    path.display(),
                    row.id,
                    rows[earlier].status.name()
                );
            }
            superseded.push(earlier);
        }
        seen.insert(row.id.clone(), (rows.len(), line));
        rows.push(row);
    }
    // A failed row followed by its re-measurement: the later row stands.
    if !superseded.is_empty() {
        let gone: HashSet<usize> = superseded.into_iter().collect();
        rows = rows
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !gone.contains(i))
            .map(|(_, r)| r)
            .collect();
    }
    Ok(rows)
}

/// Serialises rows to CSV text, with the header even when there is no row.
pub fn to_csv(rows: &[ResultRow]) -> Result<Vec<u8>> {
    if rows.is_empty() {
        return Ok(csv_header().into_bytes());
    }
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

/// Whether a row was computed by the mocked devices' model rather than measured.
pub fn is_mocked(row: &ResultRow) -> bool {
    row.source.starts_with("mock-")
}

/// Refuses to write rows of one kind (`mocked` or measured) on `devices`
/// into the file `path`, holding `existing`, when it holds rows of the
/// other kind or of other devices: mocked and measured results never share
/// a file, and no run drops another device's rows.
pub fn check_mixing(
    path: &Path,
    existing: &[ResultRow],
    mocked: bool,
    devices: &BTreeSet<&str>,
) -> Result<()> {
    let kind = |m: bool| if m { "mocked" } else { "measured" };
    let mut others: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for row in existing {
        if is_mocked(row) != mocked || !devices.contains(row.device.as_str()) {
            *others
                .entry((kind(is_mocked(row)), row.device.as_str()))
                .or_default() += 1;
        }
    }
    if others.is_empty() {
        return Ok(());
    }
    let held: Vec<String> = others
        .iter()
        .map(|((k, device), n)| format!("{n} {k} rows of device {device}"))
        .collect();
    let writes: Vec<&str> = devices.iter().copied().collect();
    bail!(
        "{} holds {}; this run writes {} rows of {} and never mixes them with other kinds \
         or devices, nor drops them: choose another --out",
        path.display(),
        held.join(", "),
        kind(mocked),
        writes.join(", ")
    )
}

/// An append-only results file, locked while it is open: each row is
/// written and flushed to disk before the next combination starts, so a
/// crash loses at most the one in progress, and no other process writes
/// the file meanwhile.
pub struct ResultsAppender {
    file: LineFile,
    rows: Vec<ResultRow>,
    /// Whether opening created the file; it is removed again if no row was
    /// appended, so a run that records nothing leaves no file.
    created: bool,
    appended: usize,
}

impl ResultsAppender {
    /// Locks `path` (creating it with a header if absent or empty), repairs
    /// a last row cut by a crash or a full disk (see [`crate::append`]) and
    /// reads the rows it holds. Returns a warning line when it repaired
    /// something.
    pub fn open(path: &Path) -> Result<(ResultsAppender, Option<String>)> {
        let header = csv_header();
        let locked = append::lock(path, true)?.expect("created when absent");
        let created = locked.created;
        let complete = |line: &str| {
            if !line.contains(',') || line.starts_with("id,") {
                return line == header.trim_end();
            }
            let text = format!("{header}{line}\n");
            parse_results(path, &text).is_ok()
        };
        let (mut file, text, warning) = LineFile::open(locked, complete)?;
        let rows = if text.is_empty() {
            file.append(header.as_bytes())?;
            Vec::new()
        } else {
            if text.split('\n').next().is_some_and(|l| l.ends_with('\r')) {
                bail!(
                    "{}:1: the file's lines end in CRLF (\\r\\n, as Windows editors write them); \
                     dlas appends LF lines and never mixes the two: convert it with \
                     `sed -i 's/\\r$//' {}` (or dos2unix), or write to another file",
                    path.display(),
                    path.display()
                );
            }
            if !text.starts_with(&header) {
                bail!(
                    "{}:1: the header differs from this dlas's columns `{}`, so rows cannot be \
                     appended to it; write to another file",
                    path.display(),
                    header.trim_end()
                );
            }
            parse_results(path, &text)?
        };
        let appender = ResultsAppender {
            file,
            rows,
            created,
            appended: 0,
        };
        Ok((appender, warning))
    }

    /// The rows the file held when it was opened.
    pub fn rows(&self) -> &[ResultRow] {
        &self.rows
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Appends `row`; on failure (a full disk) the file is left as it was.
    pub fn append(&mut self, row: &ResultRow) -> Result<()> {
        let mut writer = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        writer.serialize(row)?;
        let bytes = writer.into_inner()?;
        self.file.append(&bytes)?;
        self.appended += 1;
        Ok(())
    }
}

impl Drop for ResultsAppender {
    fn drop(&mut self) {
        // Still under the lock, so no other run has appended meanwhile.
        if self.created && self.appended == 0 {
            let _ = std::fs::remove_file(self.file.path());
        }
    }
}

/// Whether a row's source is a whole tag (`mock-v…`, or `env-` and 12 hex
/// digits): a row cut inside its last column would otherwise parse.
fn has_whole_source(row: &ResultRow) -> bool {
    match row.source.strip_prefix("env-") {
        Some(hex) => hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => row
            .source
            .strip_prefix("mock-v")
            .is_some_and(crate::text::is_identifier),
    }
}

/// The header line, with its newline. The csv crate writes a header only
/// with the first record, so it is taken from a placeholder row.
fn csv_header() -> String {
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
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer
        .serialize(ResultRow::without_timing(&c, 0, Status::Skipped, "", ""))
        .expect("a row serialises");
    let full = String::from_utf8(writer.into_inner().expect("writes to memory")).expect("UTF-8");
    let header = full.split_once('\n').expect("a header line").0;
    format!("{header}\n")
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

    fn measured() -> ResultRow {
        measured_at(1)
    }

    /// The measured row of [`combination`] at batch size `batch`: rows of
    /// one file are of different combinations.
    fn measured_at(batch: usize) -> ResultRow {
        let summary = Summary::from_samples(&[1.49, 1.5, 1.51]).unwrap();
        let c = Combination {
            batch,
            ..combination()
        };
        ResultRow::measured(&c, 1, &summary, "env-0123456789ab")
    }

    fn open(path: &Path) -> (ResultsAppender, Option<String>) {
        ResultsAppender::open(path).unwrap()
    }

    #[test]
    fn appended_rows_read_back_and_survive_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let row = measured();
        open(&path).0.append(&row).unwrap();
        // A crash in the middle of the next row.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"deadbeef,cifar10,res").unwrap();
        drop(f);
        let (mut appender, warning) = open(&path);
        let warning = warning.unwrap();
        assert!(
            warning.contains(
                "r.csv: dropped its partial last line (20 bytes, `deadbeef,cifar10,res…`)"
            ),
            "{warning}"
        );
        assert_eq!(appender.rows(), std::slice::from_ref(&row));
        appender.append(&measured_at(2)).unwrap();
        drop(appender);
        assert_eq!(read_results(&path).unwrap(), vec![row, measured_at(2)]);
    }

    /// A last row that is whole but for its newline is kept, not cut off;
    /// one cut inside its source tag is not whole.
    #[test]
    fn a_last_row_lacking_only_its_newline_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let (a, b, c) = (measured(), measured_at(2), measured_at(3));
        let text = String::from_utf8(to_csv(&[a.clone(), b.clone()]).unwrap()).unwrap();
        std::fs::write(&path, text.trim_end()).unwrap();
        let (mut appender, warning) = open(&path);
        assert!(warning.unwrap().contains("lacked its newline"));
        assert_eq!(appender.rows(), [a.clone(), b.clone()]);
        appender.append(&c).unwrap();
        drop(appender);
        assert_eq!(read_results(&path).unwrap(), vec![a.clone(), b, c]);
        std::fs::write(&path, &text[..text.len() - 3]).unwrap();
        let (appender, warning) = open(&path);
        assert!(warning.unwrap().contains("dropped its partial last line"));
        assert_eq!(appender.rows(), [a]);
    }

    /// A full disk in the middle of a row: the error names the file, the
    /// file is cut back, and the next run resumes without a warning.
    #[test]
    fn a_full_disk_leaves_the_file_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let row = measured();
        let (mut appender, _) = open(&path);
        appender.append(&row).unwrap();
        let before = std::fs::read(&path).unwrap();
        appender
            .file
            .set_sink(crate::append::tests::full_disk(&path, 30));
        let err = format!("{:#}", appender.append(&row).unwrap_err());
        assert!(
            err.contains(&format!("cannot append to {}", path.display())),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), before);
        drop(appender);
        let (appender, warning) = open(&path);
        assert_eq!((appender.rows(), warning), (&[row][..], None));
    }

    #[test]
    fn a_second_appender_is_refused_and_an_unused_new_file_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let (first, _) = open(&path);
        let err = ResultsAppender::open(&path).err().unwrap().to_string();
        assert!(
            err.contains("r.csv is being written by another process"),
            "{err}"
        );
        drop(first);
        assert!(!path.exists(), "a run that recorded nothing left a file");
    }

    #[track_caller]
    fn check_refused(text: &str, expected: &str) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        std::fs::write(&path, text).unwrap();
        let err = format!("{:#}", read_results(&path).unwrap_err());
        assert!(err.contains(&format!("r.csv{expected}")), "{err}");
    }

    #[test]
    fn readers_refuse_numbers_the_schema_does_not_allow() {
        let text = String::from_utf8(to_csv(&[measured()]).unwrap()).unwrap();
        let median = measured().median_ms.unwrap().to_string();
        let with_median = |m: &str| text.replacen(&format!(",{median},"), &format!(",{m},"), 1);
        check_refused(
            &with_median("NaN"),
            ":2: field median_ms: NaN is not a finite number",
        );
        check_refused(
            &with_median("inf"),
            ":2: field median_ms: inf is not a finite number",
        );
        check_refused(
            &with_median("0"),
            ":2: field median_ms: 0 is not a positive time, and the row's status is ok",
        );
        check_refused(
            &with_median("-1"),
            ":2: field median_ms: -1 is not a positive time",
        );
        check_refused(
            &with_median(""),
            ":2: field median_ms: empty, but a row of status ok needs its median time",
        );
        check_refused(
            "",
            ": empty file; a results file starts with the header line `id,",
        );
        let without_median: String = text
            .lines()
            .map(|l| {
                let fields: Vec<&str> = l.split(',').collect();
                format!("{},{}\n", fields[..14].join(","), fields[15..].join(","))
            })
            .collect();
        check_refused(
            &without_median,
            ":1: no column median_ms; a results file has",
        );
        // A failed row has no timing to check.
        let failed =
            ResultRow::without_timing(&combination(), 1, Status::Failed, "x", "env-0123456789ab");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.csv");
        std::fs::write(&path, to_csv(std::slice::from_ref(&failed)).unwrap()).unwrap();
        assert_eq!(read_results(&path).unwrap(), [failed]);
        std::fs::write(&path, to_csv(&[]).unwrap()).unwrap();
        assert_eq!(read_results(&path).unwrap(), []);
    }

    #[test]
    fn mocked_and_measured_rows_never_share_a_file() {
        let path = Path::new("r.csv");
        let mut mocked = measured();
        mocked.source = "mock-v1".into();
        let host = BTreeSet::from(["i7"]);
        check_mixing(path, &[measured()], false, &host).unwrap();
        check_mixing(path, &[mocked.clone()], true, &host).unwrap();
        let err = check_mixing(path, &[measured(), measured()], true, &host)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "r.csv holds 2 measured rows of device i7; this run writes mocked rows of i7"
            ),
            "{err}"
        );
        let err = check_mixing(path, &[mocked], true, &BTreeSet::from(["xavier-gpu"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds 1 mocked rows of device i7"), "{err}");
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
                "env-0123456789ab",
            )])
            .unwrap(),
        )
        .unwrap();
        text.push_str("id,cifar10\n");
        std::fs::write(&path, text).unwrap();
        let err = read_results(&path).unwrap_err().to_string();
        assert!(err.contains("bad.csv:3"), "{err}");
    }

    /// One row per combination, but for a failed row followed by its
    /// re-measurement (`dlas run --retry-failed`), which replaces it.
    #[test]
    fn a_repeated_id_is_refused_unless_it_re_measures_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        let failed =
            ResultRow::without_timing(&combination(), 1, Status::Failed, "x", "env-0123456789ab");
        let text = |rows: &[ResultRow]| to_csv(rows).unwrap();
        std::fs::write(&path, text(&[failed.clone(), measured_at(2), measured()])).unwrap();
        assert_eq!(read_results(&path).unwrap(), [measured_at(2), measured()]);
        std::fs::write(&path, text(&[failed.clone(), failed.clone()])).unwrap();
        assert_eq!(read_results(&path).unwrap(), std::slice::from_ref(&failed));
        std::fs::write(&path, text(&[measured(), measured_at(2), failed])).unwrap();
        let err = read_results(&path).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "r.csv:4: id {} repeats the row of line 2 (status ok)",
                measured().id
            )),
            "{err}"
        );
    }

    #[test]
    fn rounding_to_significant_digits() {
        assert_eq!(round_significant(123.456, 3), 123.0);
        assert_eq!(round_significant(0.0012345, 3), 0.00123);
        assert_eq!(round_significant(0.0, 3), 0.0);
    }
}
