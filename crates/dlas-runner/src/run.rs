//! The loop over a plan's host combinations.
//!
//! Each finished combination is written (samples, then row) before the next
//! starts; one that fails is recorded with its reason and the run goes on.
//! Combinations that cannot run in this environment (a runtime not
//! installed, a stage not built yet) are reported and not recorded, so a
//! later run, once the environment allows, measures them.

use crate::environment;
use crate::models::{self, Models};
use crate::native::Untuned;
use crate::store::Store;
use crate::timing::{self, Protocol};
use crate::tuning::{self, Tuned};
use anyhow::Result;
use dlas_backends::{SessionConfig, ort_runtime};
use dlas_core::{Combination, Compression, ResultRow, Status, Study, Summary};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct HostConfig {
    pub project_root: PathBuf,
    /// The results CSV; samples and environment records go beside it.
    pub results: PathBuf,
    pub threads: usize,
    pub protocol: Protocol,
    /// Re-measure a combination up to this many times while its CV exceeds the threshold.
    pub remeasure_unstable: usize,
    pub seed: u64,
    /// The best-of file tuned native combinations take their schedules from.
    pub tuning: PathBuf,
    /// Apply schedules tuned on another machine (when the file has no
    /// schedules for this one).
    pub foreign_tuning: bool,
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunReport {
    pub measured: usize,
    pub unstable: usize,
    pub failed: usize,
    pub already_done: usize,
    /// Reason → combinations not run in this environment.
    pub not_run: BTreeMap<String, usize>,
    pub environment: Option<PathBuf>,
}

/// Why a combination cannot run here, if it cannot.
fn unavailable(
    c: &Combination,
    ort: &Result<String, String>,
    tuned: &Result<Tuned, String>,
) -> Option<String> {
    if c.is_native()
        && c.tuned
        && c.compression != Compression::Int8
        && let Err(e) = tuned
    {
        return Some(format!(
            "tuned native combinations need tuning records: {e}; `dlas tune --study <study> --device host` searches them"
        ));
    }
    match ort {
        Err(e) if c.compiler.starts_with("ort-") => Some(e.clone()),
        _ => None,
    }
}

/// Measures `combinations` (all on device `host`) into `config.results`.
pub fn run_host(
    study: &Study,
    combinations: &[Combination],
    config: &HostConfig,
) -> Result<RunReport> {
    let mut report = RunReport::default();
    // Every combination of a host run is measured on this machine, device `host`.
    let mut store = Store::open(&config.results, &BTreeSet::from(["host"]))?;
    let todo: Vec<&Combination> = combinations
        .iter()
        .filter(|c| {
            let done = store.is_done(&c.id());
            report.already_done += usize::from(done);
            !done
        })
        .collect();
    let library = ort_runtime::library_path(&config.project_root);
    let ort = ort_runtime::init(&library)
        .and_then(|()| ort_runtime::info())
        .map(|info| format!("{} ({})", info.trim(), library.display()))
        .map_err(|e| e.to_string());
    let protocol_record = vec![
        ("warmup".into(), config.protocol.warmup.to_string()),
        ("runs".into(), config.protocol.runs.to_string()),
        ("threads".into(), config.threads.to_string()),
        (
            "timeout_s".into(),
            config.protocol.timeout.as_secs_f64().to_string(),
        ),
        ("seed".into(), config.seed.to_string()),
    ];
    let tuned = if todo.iter().any(|c| c.is_native() && c.tuned) {
        Tuned::load(&config.tuning, config.foreign_tuning).map_err(|e| format!("{e:#}"))
    } else {
        Err("no tuned combination selected".into())
    };
    let environment = environment::detect(
        &config.project_root,
        ort.clone().unwrap_or_else(|e| format!("not loaded: {e}")),
        protocol_record,
    );
    let results_dir = config.results.parent().unwrap_or(std::path::Path::new("."));
    // Every model file is resolved and hash-checked before anything is
    // measured: a missing, corrupt or mismatched file stops the run here,
    // with no partial results.
    let mut models = Models::new(&config.project_root)?;
    for c in todo
        .iter()
        .filter(|c| unavailable(c, &ort, &tuned).is_none())
    {
        models.path(study, &models::model_file_of(c))?;
    }
    let progress = Progress::new(todo.len());
    let mut source = None;
    for c in todo {
        progress.start(c);
        if let Some(reason) = unavailable(c, &ort, &tuned) {
            *report.not_run.entry(reason).or_default() += 1;
            progress.done(c, "not run here");
            continue;
        }
        let source = match &source {
            Some(s) => s,
            None => {
                report.environment = Some(environment.save(results_dir)?);
                source.insert(environment.id())
            }
        };
        let (row, samples) = match measure_one(study, c, config, &mut models, source, &tuned) {
            Ok(measured) => measured,
            Err(untuned) => {
                let reason = format!("{untuned}; run `{}`", tuning::tune_command(study, c));
                *report.not_run.entry(reason).or_default() += 1;
                progress.done(c, "not run here");
                continue;
            }
        };
        match row.status {
            Status::Ok => report.measured += 1,
            Status::Unstable => report.unstable += 1,
            _ => report.failed += 1,
        }
        store.record(&row, samples.as_deref())?;
        let shown = row.median_ms.map_or_else(
            || format!("{:?}: {}", row.status, row.reason),
            |m| format!("{m:.3} ms"),
        );
        progress.done(c, &shown);
    }
    progress.finish();
    Ok(report)
}

/// A combination's row and samples; `Err` when a tuned combination lacks
/// schedules (it is then not recorded, so it runs once they exist).
fn measure_one(
    study: &Study,
    c: &Combination,
    config: &HostConfig,
    models: &mut Models,
    source: &str,
    tuned: &Result<Tuned, String>,
) -> Result<(ResultRow, Option<Vec<f64>>), Untuned> {
    let failed = |e: anyhow::Error| {
        let reason = format!("{e:#}").replace('\n', " ");
        Ok((
            ResultRow::without_timing(c, config.protocol.warmup, Status::Failed, &reason, source),
            None,
        ))
    };
    let path = match models.path(study, &models::model_file_of(c)) {
        Ok(p) => p,
        Err(e) => return failed(e),
    };
    let [ch, h, w] = c.dataset.input_chw();
    let session_config = SessionConfig {
        input_shape: [c.batch, ch, h, w],
        threads: config.threads,
        half_io: c.compression == Compression::Fp16,
    };
    let loaded = if c.is_native() {
        crate::native::load(&path, c, config.threads, tuned.as_ref().ok())
    } else {
        dlas_backends::load(&c.compiler, &path, &session_config)
    };
    let mut session = match loaded {
        Ok(s) => s,
        Err(e) => match e.downcast::<Untuned>() {
            Ok(untuned) => return Err(untuned),
            Err(e) => return failed(e),
        },
    };
    let input = models::input(c, config.seed);
    let mut attempts = 0;
    loop {
        let samples = match timing::measure(session.as_mut(), &input, config.protocol) {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        let Some(summary) = Summary::from_samples(&samples) else {
            return failed(anyhow::anyhow!("the timer produced no finite samples"));
        };
        if summary.is_unstable() && attempts < config.remeasure_unstable {
            attempts += 1;
            continue;
        }
        let mut row = ResultRow::measured(c, config.protocol.warmup, &summary, source);
        row.provider = session.provider();
        if attempts > 0 {
            row.reason = format!("re-measured {attempts} time(s) for stability");
        }
        return Ok((row, Some(samples)));
    }
}

/// A progress bar on a terminal, plain log lines otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
    index: std::cell::Cell<usize>,
}

impl Progress {
    fn new(total: usize) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} eta {eta} {msg}")
                    .expect("valid template"),
            );
            bar
        });
        Progress {
            bar,
            total,
            index: std::cell::Cell::new(0),
        }
    }

    fn label(c: &Combination) -> String {
        format!(
            "{}/{} {} {} b{}",
            c.dataset, c.model, c.compression, c.compiler, c.batch
        )
    }

    fn start(&self, c: &Combination) {
        if let Some(bar) = &self.bar {
            bar.set_message(Self::label(c));
        }
    }

    fn done(&self, c: &Combination, outcome: &str) {
        self.index.set(self.index.get() + 1);
        match &self.bar {
            Some(bar) => bar.inc(1),
            None => eprintln!(
                "[{}/{}] {} {}: {outcome}",
                self.index.get(),
                self.total,
                c.id(),
                Self::label(c)
            ),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
