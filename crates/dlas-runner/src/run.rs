//! The loop over a plan's host combinations.
//!
//! The combinations of one network are loaded together and measured
//! interleaved under the adaptive protocol of [`crate::rounds`]; each is
//! written (samples, then row) the moment it stops, so an interruption
//! loses only what was still being measured. One that fails is recorded
//! with its reason and the others go on. Combinations that cannot run in
//! this environment (a runtime not installed, a stage not built yet) are
//! reported and not recorded, so a later run, once the environment allows,
//! measures them.

use crate::environment;
use crate::models::{self, Models};
use crate::native::Untuned;
use crate::rounds::{self, Adaptive, NearState, Outcome, Slot};
use crate::store::{Samples, Store};
use crate::tuning::{self, Tuned};
use crate::tvm_tuning;
use crate::watchdog::Watchdog;
use anyhow::Result;
use dlas_backends::{Session, SessionConfig, openvino_runtime, ort_runtime, tvm_runtime};
use dlas_core::{Combination, Compression, ResultRow, Status, Study, Summary};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct HostConfig {
    pub project_root: PathBuf,
    /// The results CSV; samples and environment records go beside it.
    pub results: PathBuf,
    pub threads: usize,
    pub protocol: Adaptive,
    /// The most combinations of one network measured interleaved at once.
    pub interleave: usize,
    pub seed: u64,
    /// The best-of file tuned native combinations take their schedules from.
    pub tuning: PathBuf,
    /// Apply schedules tuned on another machine (when the file has no
    /// schedules for this one).
    pub foreign_tuning: bool,
    /// The study's results folder, whose `tuning/tvm` holds MetaSchedule's
    /// databases (`dlas tune` writes them there), wherever the rows go.
    pub tvm_tuning: PathBuf,
    /// Measure again the combinations the results file records as failed.
    pub retry_failed: bool,
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

impl RunReport {
    fn count(&mut self, status: Status) {
        match status {
            Status::Ok => self.measured += 1,
            Status::Unstable => self.unstable += 1,
            _ => self.failed += 1,
        }
    }
}

/// What this environment offers the runtimes beside the native engine:
/// each loaded library's description, or why it is not there.
struct Runtimes {
    ort: Result<String, String>,
    openvino: Result<String, String>,
    tvm: Result<PathBuf, String>,
}

impl Runtimes {
    fn detect(root: &std::path::Path) -> Runtimes {
        let library = ort_runtime::library_path(root);
        let ort = ort_runtime::init(&library)
            .and_then(|()| ort_runtime::info())
            .map(|info| format!("{} ({})", info.trim(), library.display()))
            .map_err(|e| e.to_string());
        let library = openvino_runtime::library_path(root);
        let openvino = openvino_runtime::init(&library)
            .and_then(|_| openvino_runtime::info())
            .map(|info| format!("{info} ({})", library.display()))
            .map_err(|e| e.to_string());
        let python = tvm_runtime::python(root);
        let tvm = tvm_runtime::check_installed(&python)
            .map(|()| python)
            .map_err(|e| e.to_string());
        Runtimes { ort, openvino, tvm }
    }
}

/// Why a combination cannot run here, if it cannot.
fn unavailable(
    study: &Study,
    c: &Combination,
    runtimes: &Runtimes,
    (tuned, tvm_tuning): (&Result<Tuned, String>, &std::path::Path),
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
    if c.compiler.starts_with("ort-") {
        return runtimes.ort.as_ref().err().cloned();
    }
    if c.compiler.starts_with("openvino-") {
        return runtimes.openvino.as_ref().err().cloned();
    }
    if c.compiler == dlas_backends::TVM {
        if let Err(e) = &runtimes.tvm {
            return Some(e.clone());
        }
        if c.tuned && !tvm_tuning::is_tuned(tvm_tuning, c) {
            return Some(format!(
                "tuned TVM combinations need MetaSchedule's database; `{}` tunes them",
                tvm_tuning::tune_command(study, c)
            ));
        }
    }
    None
}

/// Measures `combinations` (all on device `host`) into `config.results`.
pub fn run_host(
    study: &Study,
    combinations: &[Combination],
    config: &HostConfig,
) -> Result<RunReport> {
    let mut report = RunReport::default();
    // Every combination of a host run is measured on this machine, device `host`.
    let store = Arc::new(Mutex::new(Store::open(
        &config.results,
        &BTreeSet::from(["host"]),
        config.retry_failed,
    )?));
    let todo: Vec<&Combination> = combinations
        .iter()
        .filter(|c| {
            let done = lock(&store).is_done(&c.id());
            report.already_done += usize::from(done);
            !done
        })
        .collect();
    let runtimes = Runtimes::detect(&config.project_root);
    let p = &config.protocol;
    let protocol_record = vec![
        ("warmup".into(), p.warmup.to_string()),
        ("min_runs".into(), p.min_runs.to_string()),
        ("max_runs".into(), p.max_runs.to_string()),
        ("half_width".into(), p.half_width.to_string()),
        ("budget_s".into(), p.budget.as_secs_f64().to_string()),
        ("budget_runs".into(), p.budget_runs.to_string()),
        ("timeout_s".into(), p.timeout.as_secs_f64().to_string()),
        ("interleave".into(), config.interleave.to_string()),
        ("burst_ms".into(), rounds::BURST.as_millis().to_string()),
        ("threads".into(), config.threads.to_string()),
        ("seed".into(), config.seed.to_string()),
    ];
    let tuned = if todo.iter().any(|c| c.is_native() && c.tuned) {
        Tuned::load(&config.tuning, config.foreign_tuning)
            .and_then(|t| t.named_in(&config.project_root, &config.results))
            .map_err(|e| format!("{e:#}"))
    } else {
        Err("no tuned combination selected".into())
    };
    let mut environment = environment::detect(
        &config.project_root,
        runtimes
            .ort
            .clone()
            .unwrap_or_else(|e| format!("not loaded: {e}")),
        protocol_record,
    );
    if todo.iter().any(|c| c.compiler.starts_with("openvino-")) {
        environment.openvino = Some(
            runtimes
                .openvino
                .clone()
                .unwrap_or_else(|e| format!("not loaded: {e}")),
        );
    }
    if todo.iter().any(|c| c.compiler == dlas_backends::TVM) {
        environment.tvm = Some(match &runtimes.tvm {
            Ok(python) => format!("apache-tvm {} ({})", tvm_runtime::VERSION, python.display()),
            Err(e) => format!("not set up: {e}"),
        });
    }
    let results_dir = config.results.parent().unwrap_or(std::path::Path::new("."));
    // Every model file is resolved and hash-checked before anything is
    // measured: a missing, corrupt or mismatched file stops the run here,
    // with no partial results.
    let mut models = Models::new(&config.project_root)?;
    let mut runnable = Vec::new();
    for c in todo.iter().copied() {
        match unavailable(study, c, &runtimes, (&tuned, &config.tvm_tuning)) {
            Some(reason) => *report.not_run.entry(reason).or_default() += 1,
            None => {
                models.path(study, &models::model_file_of(c))?;
                runnable.push(c);
            }
        }
    }
    let progress = Progress::new(todo.len());
    progress.skip(todo.len() - runnable.len());
    let watchdog = watch(&store, &runnable, config, environment.id());
    let mut source = None;
    let mut near = None;
    let mut chunks: std::collections::VecDeque<Vec<(usize, &Combination)>> =
        networks(&runnable, config.interleave).into();
    while let Some(chunk) = chunks.pop_front() {
        let source = match &source {
            Some(s) => s,
            None => {
                report.environment = Some(environment.save(results_dir)?);
                source.insert(environment.id())
            }
        };
        let label = Progress::label(chunk[0].1);
        progress.message(&format!("{label}: loading {}", chunk.len()));
        let mut slots = Vec::new();
        let mut measured = Vec::new();
        for (i, &(key, c)) in chunk.iter().enumerate() {
            // Loaded models stay in memory while the chunk is measured: when
            // memory runs low, the rest of the chunk waits for the next one.
            if !slots.is_empty() && memory_low() {
                chunks.push_front(chunk[i..].to_vec());
                break;
            }
            watchdog.arm(key, "loading", Instant::now() + config.protocol.timeout);
            let loaded = load(study, c, config, &mut models, &tuned);
            watchdog.disarm();
            match loaded {
                Loaded::Session(session) => {
                    let mut provider = session.provider();
                    if c.compiler == dlas_backends::TVM && c.tuned {
                        provider +=
                            &tvm_tuning::describe(&config.project_root, &config.tvm_tuning, c)?;
                    }
                    measured.push((c, provider));
                    slots.push(Slot {
                        session,
                        input: models::input(c, config.seed),
                        key,
                    });
                }
                Loaded::Failed(reason) => {
                    let row = failed_row(c, config, &reason, source);
                    report.count(row.status);
                    lock(&store).record(&row, None)?;
                    progress.done(c, &format!("failed: {reason}"));
                }
                Loaded::Untuned(untuned) => {
                    let reason = format!("{untuned}; run `{}`", tuning::tune_command(study, c));
                    *report.not_run.entry(reason).or_default() += 1;
                    progress.done(c, "not run here");
                }
            }
        }
        let Some(first) = measured.first() else {
            continue;
        };
        let seed = config.seed ^ order_seed(&first.0.id());
        let total = measured.len();
        let near = near.get_or_insert_with(|| {
            progress.message(&format!("{label}: reading the machine's state"));
            NearState::probe(config.protocol.near_probe())
        });
        rounds::measure(
            slots,
            (&config.protocol, seed),
            (near, Some(&watchdog)),
            |i, outcome| {
                let (c, provider) = &measured[i];
                let (row, samples) = finish(c, outcome, config, provider, source);
                report.count(row.status);
                lock(&store).record(&row, samples.as_ref())?;
                let shown = row.median_ms.map_or_else(
                    || format!("{}: {}", row.status.name(), row.reason),
                    |m| format!("{m:.3} ms ({})", row.reason),
                );
                progress.done(c, &shown);
                Ok(())
            },
            |active| progress.message(&format!("{label}: {active} of {total} still measuring")),
        )?;
    }
    progress.finish();
    Ok(report)
}

/// The combinations of each network (dataset and model) in plan order, in
/// chunks of at most `interleave`: what is measured together. Each keeps
/// its index in `combinations`, its key for the watchdog.
fn networks<'a>(
    combinations: &[&'a Combination],
    interleave: usize,
) -> Vec<Vec<(usize, &'a Combination)>> {
    type Group<'a> = Vec<(usize, &'a Combination)>;
    let mut by_network: Vec<((dlas_core::Dataset, &str), Group<'a>)> = Vec::new();
    for (i, &c) in combinations.iter().enumerate() {
        let key = (c.dataset, c.model.as_str());
        match by_network.iter_mut().find(|(k, _)| *k == key) {
            Some((_, group)) => group.push((i, c)),
            None => by_network.push((key, vec![(i, c)])),
        }
    }
    by_network
        .into_iter()
        .flat_map(|(_, group)| {
            group
                .chunks(interleave.max(1))
                .map(<[_]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The store, locked: the watchdog's thread records through it too.
fn lock(store: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    store.lock().unwrap_or_else(|e| e.into_inner())
}

/// The run's watchdog: a load or run of `runnable[key]` that overruns the
/// combination's timeout is recorded as failed, and the process stops
/// (`crate::watchdog`). The environment record `source` is saved before
/// anything is armed.
fn watch(
    store: &Arc<Mutex<Store>>,
    runnable: &[&Combination],
    config: &HostConfig,
    source: String,
) -> Watchdog {
    let store = Arc::clone(store);
    let combinations: Vec<Combination> = runnable.iter().map(|&c| c.clone()).collect();
    let (timeout, threads, warmup) = (
        config.protocol.timeout,
        config.threads,
        config.protocol.warmup,
    );
    Watchdog::start(move |armed| {
        let c = &combinations[armed.key];
        let reason = format!(
            "timeout after {:.0} s: {} did not return ({threads} thread(s) on {} logical CPU(s)); \
             the process stopped, since a stuck run cannot be cancelled",
            timeout.as_secs_f64(),
            armed.doing,
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
        let row = ResultRow::without_timing(c, warmup, Status::Failed, &reason, &source);
        let recorded = lock(&store).record(&row, None);
        dlas_core::errln!("\nerror: {} {}: {reason}", c.id(), Progress::describe(c));
        match recorded {
            Ok(()) => dlas_core::errln!(
                "it is recorded as failed; run the same command again to go on with the rest \
                 (add --retry-failed to measure it again)"
            ),
            Err(e) => dlas_core::errln!("it could not be recorded: {e:#}"),
        }
        std::process::exit(3);
    })
}

/// Whether less than a quarter of the machine's memory is available
/// (`/proc/meminfo`; never where it cannot be read): loading one more
/// model could make the kernel kill the run.
fn memory_low() -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else {
        return false;
    };
    let kib = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    match (kib("MemAvailable:"), kib("MemTotal:")) {
        (Some(available), Some(total)) => available < total / 4,
        _ => false,
    }
}

/// The round-order seed of a chunk, from its first combination's id, so
/// that the same chunk is shuffled the same way whichever run measures it.
fn order_seed(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A combination ready to time, or why not.
enum Loaded {
    Session(Box<dyn Session>),
    Failed(String),
    /// A tuned combination whose layers lack schedules: not recorded, so
    /// it runs once they exist.
    Untuned(Untuned),
}

fn load(
    study: &Study,
    c: &Combination,
    config: &HostConfig,
    models: &mut Models,
    tuned: &Result<Tuned, String>,
) -> Loaded {
    let reason = |e: anyhow::Error| format!("{e:#}").replace('\n', " ");
    let path = match models.path(study, &models::model_file_of(c)) {
        Ok(p) => p,
        Err(e) => return Loaded::Failed(reason(e)),
    };
    let [ch, h, w] = c.dataset.input_chw();
    let session_config = SessionConfig {
        input_shape: [c.batch, ch, h, w],
        threads: config.threads,
        half_io: c.compression == Compression::Fp16,
        tvm: (c.compiler == dlas_backends::TVM).then(|| {
            tvm_tuning::options(
                &config.project_root,
                &config.tvm_tuning,
                c,
                config.foreign_tuning,
            )
        }),
    };
    let loaded = if c.is_native() {
        crate::native::load(&path, c, config.threads, tuned.as_ref().ok())
    } else {
        dlas_backends::load(&c.compiler, &path, &session_config)
    };
    match loaded {
        Ok(session) => Loaded::Session(session),
        Err(e) => match e.downcast::<Untuned>() {
            Ok(untuned) => Loaded::Untuned(untuned),
            Err(e) => Loaded::Failed(reason(e)),
        },
    }
}

fn failed_row(c: &Combination, config: &HostConfig, reason: &str, source: &str) -> ResultRow {
    ResultRow::without_timing(c, config.protocol.warmup, Status::Failed, reason, source)
}

/// The row and samples line of a combination that stopped.
fn finish(
    c: &Combination,
    outcome: Outcome,
    config: &HostConfig,
    provider: &str,
    source: &str,
) -> (ResultRow, Option<Samples>) {
    let Outcome::Measured {
        samples,
        far,
        far_only,
        floor_ns,
        stop,
        rounds,
        conditions,
    } = outcome
    else {
        let Outcome::Failed(reason) = outcome else {
            unreachable!("an outcome is measured or failed")
        };
        return (failed_row(c, config, &reason, source), None);
    };
    let Some(summary) = Summary::from_samples(&samples) else {
        let reason = "the timer produced no finite samples";
        return (failed_row(c, config, reason, source), None);
    };
    let mut row = ResultRow::measured(c, config.protocol.warmup, &summary, source);
    row.provider = provider.to_string();
    row.reason = format!(
        "stop {}: median ±{:.2}% (95%) after {} runs{}",
        stop.name(),
        summary.half_width() * 100.0,
        summary.runs,
        state_note(far.len(), far_only)
    );
    let samples = Samples {
        id: row.id.clone(),
        samples_ms: samples,
        stop: Some(stop.name().to_string()),
        rounds: Some(rounds),
        conditions: Some(conditions),
        far_ms: far,
        far_only,
        near_round_trip_ns: floor_ns.map(f64::round),
    };
    (row, Some(samples))
}

/// What a row's reason adds about the machine state its runs saw
/// (`rounds::NearState`): nothing when every burst ran in the near state.
fn state_note(far: usize, far_only: bool) -> String {
    match (far, far_only) {
        (_, true) => "; in the machine's far state only (docs/protocol.md, \"Two states\")".into(),
        (0, false) => String::new(),
        (n, false) => format!("; {n} runs in the machine's far state left out"),
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

    /// The network a chunk measures.
    fn label(c: &Combination) -> String {
        format!("{}/{}", c.dataset, c.model)
    }

    fn describe(c: &Combination) -> String {
        format!(
            "{}/{} {} {} {} {}{} b{}",
            c.dataset,
            c.model,
            c.compression,
            c.algorithm,
            c.format,
            c.compiler,
            if c.tuned { " tuned" } else { "" },
            c.batch
        )
    }

    fn message(&self, text: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(text.to_string());
        }
    }

    /// Counts combinations that will not run here (reported at the end).
    fn skip(&self, n: usize) {
        self.index.set(self.index.get() + n);
        if let Some(bar) = &self.bar {
            bar.inc(n as u64);
        }
    }

    fn done(&self, c: &Combination, outcome: &str) {
        self.index.set(self.index.get() + 1);
        match &self.bar {
            Some(bar) => bar.inc(1),
            None => dlas_core::errln!(
                "[{}/{}] {} {}: {outcome}",
                self.index.get(),
                self.total,
                c.id(),
                Self::describe(c)
            ),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
