//! Tuning a study's native combinations on the host, and applying the
//! result to tuned runs.
//!
//! A tuned combination's layers become tasks ([`TaskKey`]: layer shape,
//! kernel, weight format, layout, data type, threads, batch); identical
//! tasks across networks and combinations are searched once, with the
//! weights of the first layer that needs them (for sparse formats that is a
//! real pruned layer, so the kernel sees a real sparsity pattern). Records
//! go to the study's log and the best-of file is rewritten after every
//! task, so an interrupted tuning resumes where it stopped.

use crate::environment::Cpu;
use crate::models::Models;
use anyhow::{Context, Result, bail};
use dlas_core::{Combination, Compression, Study};
use dlas_engine::{KernelAlgorithm, LayerKey, ScheduleTable, workload_of};
use dlas_tune::allocate::{self, Split, TaskState};
use dlas_tune::records::{self, VERSION};
use dlas_tune::search::State;
use dlas_tune::{
    BestOf, Budget, LayerProblem, Phase, Record, RecordLog, StopReason, TaskKey, Timer,
};
use dlas_zoo::weights::Params;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where a study's tuning records and best-of file live.
pub fn records_path(results_dir: &Path) -> PathBuf {
    results_dir.join("tuning").join("records.jsonl")
}

pub fn best_path(results_dir: &Path) -> PathBuf {
    results_dir.join("tuning").join("best.json")
}

/// How a row names the best-of file its schedules came from: by its path
/// in the project. Rows written to a committed store (a results file under
/// the project's `data/`) may name only a file of that tree, so that a
/// reader has what every row names (an earlier campaign's rows named a
/// git-ignored scratch file).
pub fn committed_name(project_root: &Path, results: &Path, tuning: &Path) -> Result<PathBuf> {
    let root = real(project_root);
    let data = root.join("data");
    let store = real(results.parent().unwrap_or(Path::new(".")));
    let file = real(tuning);
    if store.starts_with(&data) && !file.starts_with(&data) {
        bail!(
            "{} lies outside {}, yet the rows go to {}, a committed store: its rows may name only committed files; copy the schedules to {} (or pass --tuning with a file under data/, or write the rows elsewhere with --out)",
            tuning.display(),
            data.display(),
            results.display(),
            best_path(&store).display()
        );
    }
    Ok(file
        .strip_prefix(&root)
        .map(Path::to_path_buf)
        .unwrap_or(file))
}

/// `p` with its links resolved: the nearest ancestor that exists,
/// canonicalized, and the rest as written (a results file's folder may not
/// exist yet, and a link in the project's path must not let a scratch file
/// pass for a committed one).
fn real(p: &Path) -> PathBuf {
    let absolute = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut rest = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(found) = at.canonicalize() {
            return rest.iter().rev().fold(found, |path, part| path.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return absolute,
        }
    }
}

/// The `dlas tune` command that produces records for combination `c`.
pub fn tune_command(study: &Study, c: &Combination) -> String {
    let filter: Vec<String> = [
        "dataset",
        "model",
        "compression",
        "algorithm",
        "format",
        "layout",
        "batch",
    ]
    .iter()
    .filter_map(|axis| c.get(axis).map(|v| format!("{axis}={v}")))
    .collect();
    format!(
        "dlas tune --study {} --device host --filter {},compiler=native,tuned=true",
        study.name,
        filter.join(",")
    )
}

#[derive(Debug, Clone)]
pub struct TuneConfig {
    pub project_root: PathBuf,
    pub records: PathBuf,
    pub best: PathBuf,
    pub threads: usize,
    pub budget: Budget,
    pub timer: Timer,
    pub seed: u64,
    /// How the budget is spread over the layers.
    pub split: Split,
}

/// One task to search, with the weights it is measured on.
pub struct Task {
    pub key: TaskKey,
    pub weights: Vec<f32>,
    /// The first combination that needs it (for messages).
    pub first_needed_by: String,
    /// How many times the layer runs in one inference of each tuned
    /// combination, summed over them: the task scheduler's weight.
    pub weight: f64,
}

/// What a tuning run did.
#[derive(Debug, Clone, Default)]
pub struct TuneReport {
    pub tasks: usize,
    /// Candidates measured for these tasks, in this run and earlier ones.
    pub trials: usize,
    /// Tasks whose search ended in this run (the others had already ended).
    pub searched: usize,
    pub new_trials: usize,
    /// Confirmation rounds of finalists measured in this run.
    pub new_confirmations: usize,
    /// Candidates the engine rejected before measurement (per task, summed
    /// over the chunks of its search: one rejected in two chunks counts
    /// twice).
    pub rejected: usize,
    pub failed: usize,
    pub seconds: f64,
    /// Combinations without knobs to tune (int8), by reason.
    pub skipped: BTreeMap<String, usize>,
    /// Lines of the log that could not be read.
    pub skipped_lines: Vec<String>,
    /// Default / best time of every task, for the summary (confirmed
    /// times where the task's finalists were re-measured).
    pub speedups: Vec<f64>,
    /// Search best / confirmed best of every confirmed task: how much the
    /// search's own best understated the winner's cost.
    pub curse: Vec<f64>,
}

/// The distinct tasks of `combinations` (native and tuned ones only);
/// combinations without knobs are counted in `skipped` by reason.
pub fn tasks(
    study: &Study,
    combinations: &[Combination],
    threads: usize,
    skipped: &mut BTreeMap<String, usize>,
    models: &mut Models,
) -> Result<Vec<Task>> {
    let mut index: HashMap<TaskKey, usize> = HashMap::new();
    let mut tasks: Vec<Task> = Vec::new();
    for c in combinations {
        if !c.is_native() || !c.tuned {
            continue;
        }
        if c.compression == Compression::Int8 {
            *skipped
                .entry(
                    "int8 kernels have no schedule knobs: their tuned time is their untuned time"
                        .into(),
                )
                .or_default() += 1;
            continue;
        }
        if let Err(e) = KernelAlgorithm::try_from(c.algorithm) {
            cannot_run(skipped, e);
            continue;
        }
        let path = models.path(study, &crate::models::model_file_of(c))?;
        let bytes = std::fs::read(&path)?;
        // The importer reads every network of the zoo (transformers
        // included), so a file it refuses is an error, not a skip.
        let (graph, weights) = dlas_onnx::import(&bytes, &c.model, c.dataset)
            .with_context(|| format!("{}", path.display()))?;
        let config = crate::native::engine_config(c, threads, &graph, &weights)?;
        let mut layers = Vec::new();
        let mut unsupported = None;
        for id in 0..graph.nodes.len() {
            let Some(w) = workload_of(&graph, id) else {
                continue;
            };
            let wt = match &weights.by_node[id] {
                Some(Params::Conv { weight, .. } | Params::Linear { weight, .. }) => weight,
                _ => bail!(
                    "{}: layer {} has no weights",
                    path.display(),
                    graph.nodes[id].name
                ),
            };
            match LayerKey::of(w, wt, &config) {
                Ok(layer) => layers.push((layer, wt)),
                Err(e) => {
                    unsupported = Some(e.to_string());
                    break;
                }
            }
        }
        if let Some(reason) = unsupported {
            cannot_run(skipped, reason);
            continue;
        }
        for (layer, wt) in layers {
            let key = TaskKey {
                layer,
                threads,
                batch: c.batch,
            };
            if !layer.tunable() {
                continue;
            }
            match index.get(&key) {
                Some(&i) => tasks[i].weight += 1.0,
                None => {
                    index.insert(key, tasks.len());
                    tasks.push(Task {
                        key,
                        weights: wt.clone(),
                        first_needed_by: c.canonical(),
                        weight: 1.0,
                    });
                }
            }
        }
    }
    Ok(tasks)
}

/// Counts a combination the engine cannot run at all (its untuned run
/// records why): there is nothing to tune.
fn cannot_run(skipped: &mut BTreeMap<String, usize>, reason: impl std::fmt::Display) {
    *skipped
        .entry(format!("the engine cannot run it: {reason}"))
        .or_default() += 1;
}

/// The record of one measurement of `task` on the machine `fingerprint`.
fn record_of(
    fingerprint: &str,
    task: TaskKey,
    schedule: dlas_engine::Schedule,
    phase: Phase,
    result: &Result<Vec<f64>>,
) -> Record {
    Record {
        version: VERSION,
        fingerprint: fingerprint.to_string(),
        task,
        schedule,
        costs_ms: result.as_ref().ok().cloned().unwrap_or_default(),
        error: result.as_ref().err().map(|e| format!("{e:#}")),
        timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        phase,
    }
}

/// Searches every task of `combinations` on this machine: one budget of
/// the configured trials per task, spread over the tasks by the task
/// scheduler ([`allocate`]), then each task's finalists confirmed.
pub fn tune_host(
    study: &Study,
    combinations: &[Combination],
    config: &TuneConfig,
) -> Result<TuneReport> {
    let started = Instant::now();
    let mut report = TuneReport::default();
    let mut models = Models::new(&config.project_root)?;
    let tasks = tasks(
        study,
        combinations,
        config.threads,
        &mut report.skipped,
        &mut models,
    )?;
    report.tasks = tasks.len();
    let fingerprint = Cpu::detect().fingerprint();
    let loaded = records::load(&config.records)?;
    report.skipped_lines = loaded.skipped;
    let mut all = loaded.records;
    let mut history: HashMap<TaskKey, Vec<Record>> = HashMap::new();
    for r in all.iter().filter(|r| r.fingerprint == fingerprint) {
        history.entry(r.task).or_default().push(r.clone());
    }
    let mut log = RecordLog::open(&config.records)?;
    let problems = tasks
        .iter()
        .map(|t| LayerProblem::new(t.key.layer, t.weights.clone(), t.key.threads, t.key.batch))
        .collect::<Result<Vec<_>>>()?;
    // The budget is the study's trials per task times the tasks, handed
    // out a chunk at a time by the task scheduler ([`allocate`]).
    let chunk = config.split.chunk(config.budget.trials);
    let total = config.budget.trials * tasks.len();
    let mut states: Vec<TaskState> = tasks
        .iter()
        .map(|t| {
            let past = history.get(&t.key).map_or(&[][..], Vec::as_slice);
            let search = past.iter().filter(|r| r.phase == Phase::Search);
            let trials = search.clone().count();
            // A resumed task starts from what its records found, so that
            // its share is priced as in the run that was interrupted.
            let best_ms = search
                .filter_map(|r| r.cost())
                .fold(f64::INFINITY, f64::min);
            TaskState {
                weight: t.weight,
                trials,
                best_ms,
                best_before_ms: best_ms,
                ended: config.split.one_chunk_each() && trials >= chunk,
            }
        })
        .collect();
    // What counts against this run's budget: every recorded trial (a
    // resumed or re-run search continues its budget); under the equal
    // split at most a task's own share.
    let spent_of = |states: &[TaskState]| -> usize {
        states
            .iter()
            .map(|t| match config.split {
                Split::Equal => t.trials.min(chunk),
                Split::ByShare => t.trials,
            })
            .sum()
    };
    let at_start: Vec<usize> = states.iter().map(|t| t.trials).collect();
    let mut rejected = vec![0usize; tasks.len()];
    let mut stops: Vec<Option<StopReason>> = vec![None; tasks.len()];
    let progress = Progress::new(total, tasks.len());
    progress.spent(spent_of(&states));
    let mut chunks = vec![0usize; tasks.len()];
    loop {
        let spent = spent_of(&states);
        if spent >= total {
            break;
        }
        let Some(i) = allocate::next(&states, chunk) else {
            break;
        };
        let task = &tasks[i];
        let trials = match config.split {
            Split::Equal => chunk,
            Split::ByShare => states[i].trials + chunk.min(total - spent),
        };
        let budget = Budget {
            trials,
            ..config.budget
        };
        let past = history.get(&task.key).map_or(&[][..], Vec::as_slice);
        let chunk_started = Instant::now();
        let mut fresh = Vec::new();
        let searched = dlas_tune::search(
            &problems[i],
            budget,
            &config.timer,
            past,
            config.seed,
            &mut |schedule, phase, result, state: State| {
                let record = record_of(&fingerprint, task.key, schedule, phase, result);
                log.append(&record)?;
                fresh.push(record);
                let rate = fresh.len() as f64 / chunk_started.elapsed().as_secs_f64();
                progress.trial(&task.key, state, Some(rate));
                Ok(())
            },
        )
        .with_context(|| {
            format!(
                "tuning {} (first needed by {})",
                task.key, task.first_needed_by
            )
        })?;
        progress.spent(fresh.len());
        history
            .entry(task.key)
            .or_default()
            .extend(fresh.iter().cloned());
        all.extend(fresh);
        chunks[i] += 1;
        rejected[i] += searched.rejected;
        stops[i] = Some(searched.stop);
        report.failed += searched.failed;
        let t = &mut states[i];
        t.best_before_ms = t.best_ms;
        t.best_ms = searched.best_ms;
        t.trials = searched.trials;
        t.ended = searched.stop != StopReason::Budget || config.split.one_chunk_each();
        if searched.new_trials > 0 {
            BestOf::from_records(&all).save(&config.best)?;
        }
    }
    // Each task's finalists confirmed once, when the budget is spent.
    for (i, task) in tasks.iter().enumerate() {
        let past = history.get(&task.key).map_or(&[][..], Vec::as_slice);
        let mut fresh = Vec::new();
        let mut outcome = dlas_tune::tune(
            &problems[i],
            Budget {
                trials: states[i].trials,
                ..config.budget
            },
            &config.timer,
            past,
            config.seed,
            &mut |schedule, phase, result, state: State| {
                let record = record_of(&fingerprint, task.key, schedule, phase, result);
                log.append(&record)?;
                fresh.push(record);
                progress.trial(&task.key, state, None);
                Ok(())
            },
        )
        .with_context(|| {
            format!(
                "confirming {} (first needed by {})",
                task.key, task.first_needed_by
            )
        })?;
        // Trials this run measured for the task, in its chunks.
        outcome.new_trials += states[i].trials.saturating_sub(at_start[i]);
        outcome.rejected = rejected[i];
        // The confirming call's search stops at once, at its budget; why
        // the task's search ended is its last chunk's reason.
        outcome.stop = stops[i].unwrap_or(outcome.stop);
        all.extend(fresh);
        if outcome.new_trials + outcome.new_confirmations > 0 {
            report.searched += 1;
            BestOf::from_records(&all).save(&config.best)?;
        }
        report.new_trials += outcome.new_trials;
        report.new_confirmations += outcome.new_confirmations;
        report.trials += outcome.trials;
        report.rejected += outcome.rejected;
        if let Some(d) = outcome.default_ms {
            report.speedups.push(d / outcome.best_ms);
        }
        if outcome.confirmed {
            report.curse.push(outcome.search_best_ms / outcome.best_ms);
        }
        progress.task_done(i, &task.key, &outcome, (chunks[i], task.weight));
    }
    if !config.best.exists() {
        BestOf::from_records(&all).save(&config.best)?;
    }
    progress.finish();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Tuned schedules for this machine from a best-of file.
#[derive(Debug, Clone)]
pub struct Tuned {
    pub path: PathBuf,
    best: BestOf,
    /// The fingerprint whose schedules are applied.
    pub fingerprint: String,
    /// Whether that is another machine's (only with the caller's consent).
    pub foreign: bool,
}

impl Tuned {
    /// Loads `path` for this machine. Schedules tuned on another machine
    /// are applied only if `accept_foreign` and the file holds exactly one
    /// machine; otherwise the error says whose they are and what to do.
    pub fn load(path: &Path, accept_foreign: bool) -> Result<Tuned> {
        let best = BestOf::load(path)?;
        let here = Cpu::detect().fingerprint();
        let theirs: Vec<String> = best.fingerprints().into_iter().map(String::from).collect();
        if theirs.contains(&here) {
            return Ok(Tuned {
                path: path.to_path_buf(),
                best,
                fingerprint: here,
                foreign: false,
            });
        }
        match (accept_foreign, theirs.as_slice()) {
            (true, [one]) => Ok(Tuned {
                path: path.to_path_buf(),
                fingerprint: one.clone(),
                best,
                foreign: true,
            }),
            _ => bail!(
                "{} holds schedules tuned on {} but this machine is {here}: run `dlas tune` here, or pass --foreign-tuning to apply another machine's schedules (one machine only)",
                path.display(),
                if theirs.is_empty() {
                    "no machine".to_string()
                } else {
                    theirs.join(", ")
                }
            ),
        }
    }

    /// Names the file as [`committed_name`] does, or refuses it.
    pub fn named_in(mut self, project_root: &Path, results: &Path) -> Result<Tuned> {
        self.path = committed_name(project_root, results, &self.path)?;
        Ok(self)
    }

    pub fn table(&self, threads: usize, batch: usize) -> ScheduleTable {
        self.best.table(&self.fingerprint, threads, batch)
    }
}

/// A progress bar over the trial budget on a terminal (the task searched,
/// its best so far, trials per second), one line per task otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    tasks: usize,
}

impl Progress {
    fn new(trials: usize, tasks: usize) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(trials as u64);
            bar.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} trials, eta {eta} {msg}")
                    .expect("valid template"),
            );
            bar
        });
        Progress { bar, tasks }
    }

    /// `n` more trials of the budget spent.
    fn spent(&self, n: usize) {
        if let Some(bar) = &self.bar {
            bar.inc(n as u64);
        }
    }

    /// A measurement of `task`: in its search, at `rate` trials a second,
    /// or (`None`) in its confirmation rounds.
    fn trial(&self, task: &TaskKey, state: State, rate: Option<f64>) {
        if let Some(bar) = &self.bar {
            let speedup = state.default_ms.map_or(String::new(), |d| {
                format!(" ({:.2}x default)", d / state.best_ms)
            });
            let step = match rate {
                Some(rate) => format!("trial {}, {rate:.1} trials/s", state.trials),
                None => "confirming finalists".to_string(),
            };
            bar.set_message(format!(
                "{}: {step}, best {:.4} ms{speedup}",
                task.layer.workload, state.best_ms
            ));
        }
    }

    /// A task's line once it is confirmed, with the chunks the scheduler
    /// gave it in this run and its weight.
    fn task_done(
        &self,
        i: usize,
        task: &TaskKey,
        o: &dlas_tune::Outcome,
        (chunks, weight): (usize, f64),
    ) {
        let stop = match o.stop {
            StopReason::Budget => "budget",
            StopReason::EarlyStop => "early stop",
            StopReason::Exhausted => "space exhausted",
        };
        let confirmed = if o.confirmed {
            format!(
                " (confirmed; the search measured {:.4} ms)",
                o.search_best_ms
            )
        } else {
            String::new()
        };
        let line = format!(
            "[{}/{}] {task} (runs {weight:.0}x in the networks): best {:.4} ms{confirmed}{} after {} trials ({} new in {chunks} chunk(s), {} rejected, {stop})",
            i + 1,
            self.tasks,
            o.best_ms,
            o.default_ms.map_or(String::new(), |d| format!(
                ", {:.2}x over default",
                d / o.best_ms
            )),
            o.trials,
            o.new_trials,
            o.rejected,
        );
        match &self.bar {
            Some(bar) => bar.println(line),
            None => dlas_core::errln!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed store takes schedules only from the committed tree; a
    /// store elsewhere (a scratch run) may take them from anywhere. The
    /// paths do not exist, so they are compared as written.
    #[test]
    fn committed_rows_name_only_committed_tuning_files() {
        let root = Path::new("/nowhere/dlas");
        let store = root.join("data/results/dlas/host.csv");
        let scratch = root.join(".probe-out/rec36/tuning/best.json");
        let committed = root.join("data/results/dlas/tuning/best.json");
        assert_eq!(
            committed_name(root, &store, &committed).unwrap(),
            Path::new("data/results/dlas/tuning/best.json")
        );
        let refused = committed_name(root, &store, &scratch).unwrap_err();
        assert!(
            format!("{refused}").contains("may name only committed files"),
            "{refused}"
        );
        let elsewhere = Path::new("/tmp/probe/host.csv");
        assert_eq!(
            committed_name(root, elsewhere, &scratch).unwrap(),
            Path::new(".probe-out/rec36/tuning/best.json")
        );
    }
}
