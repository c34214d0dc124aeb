//! Apache TVM's tuned axis: MetaSchedule tunes the network of each tuned
//! TVM combination once, into a database under the study's results
//! (`tuning/tvm/<dataset>-<model>-<compression>-<algorithm>-b<batch>/`),
//! which tuned runs apply and which is committed, so measuring and
//! reproducing never tune again. Beside MetaSchedule's two database files,
//! `tuning.json` says what the search was (trials, tasks, wall time,
//! threads, seed, TVM and target); its presence marks a finished tuning.
//! A tuning runs in a `.partial` folder and is moved into place when it
//! ends, so a run never applies half a database; an interrupted tuning is
//! resumed from that folder by the next `dlas tune` on the same CPU (the
//! tasks it had finished are not tuned again; its wall time and sessions
//! are summed in [`Progress`]).

use anyhow::{Context, Result, bail};
use dlas_backends::tvm_runtime::{self, Options};
use dlas_core::{Combination, Study};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What one tuning was, saved as `tuning.json` beside its database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The study's budget per task, and what it came to for the network
    /// (times its tasks), in candidates.
    pub trials_per_task: usize,
    pub budget: usize,
    /// Candidates measured.
    pub trials: usize,
    /// The network's distinct kernels, and how many got a valid record.
    pub tasks: usize,
    pub tuned_tasks: usize,
    pub wall_s: f64,
    pub threads: usize,
    pub seed: u64,
    /// The evolutionary search's population per round ([`POPULATION`]).
    pub population: usize,
    pub tvm: String,
    /// How many runs of `dlas tune` it took (more than one when an
    /// interrupted tuning was resumed; `wall_s` sums theirs).
    #[serde(default = "one")]
    pub sessions: usize,
    /// sha256 of the ONNX file tuned: another study's tuning is reused
    /// only for the same file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_sha256: Option<String>,
    /// The database this one is a copy of, relative to the project root:
    /// another study's tuning of the same file, algorithm, batch size and
    /// budget on this CPU, which tuning again would only repeat (the
    /// copies' files are the same git objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_from: Option<String>,
}

fn one() -> usize {
    1
}

/// The sessions of an unfinished tuning so far, kept in its `.partial`
/// folder: an interrupted session cannot say when it stopped, so its wall
/// time is read when the next one starts, as the time from its start to
/// the last record it wrote (MetaSchedule appends one per candidate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Progress {
    /// Wall time of the sessions before this one.
    earlier_s: f64,
    /// Sessions, this one included.
    sessions: usize,
    /// When this session started (seconds since the Unix epoch).
    started_unix_s: f64,
}

impl Progress {
    const FILE: &str = "progress.json";

    /// This session's progress in `partial`: the first, or the next after
    /// the interrupted session recorded there.
    fn start(partial: &Path) -> Result<Progress> {
        let now = unix_s(std::time::SystemTime::now());
        let path = partial.join(Self::FILE);
        let earlier = match std::fs::read_to_string(&path) {
            Ok(text) => Some(
                serde_json::from_str::<Progress>(&text)
                    .with_context(|| format!("{} does not parse", path.display()))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let progress = match earlier {
            None => Progress {
                earlier_s: 0.0,
                sessions: 1,
                started_unix_s: now,
            },
            // A session that wrote no record (refused, or stopped while
            // extracting tasks) is replaced by this one, not counted.
            Some(p) => {
                let last_record = std::fs::metadata(partial.join("database_tuning_record.json"))
                    .and_then(|m| m.modified())
                    .map(unix_s)
                    .unwrap_or(p.started_unix_s);
                let worked = last_record - p.started_unix_s;
                Progress {
                    earlier_s: p.earlier_s + worked.max(0.0),
                    sessions: p.sessions + usize::from(worked > 0.0),
                    started_unix_s: now,
                }
            }
        };
        let mut json = serde_json::to_string_pretty(&progress)?;
        json.push('\n');
        dlas_core::atomic::write_atomic(&path, json.as_bytes())?;
        Ok(progress)
    }
}

fn unix_s(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The population MetaSchedule's evolutionary search scores per round. Its
/// default, 512, spends 33-55 s of search per task and round on 2 cores
/// whatever the trials; 128 took 25-30 s under load (docs/compilers.md has
/// the budget curve measured with it).
pub const POPULATION: usize = 128;

/// The database folder of combination `c` under the study's results.
pub fn database_dir(results_dir: &Path, c: &Combination) -> PathBuf {
    results_dir.join("tuning").join("tvm").join(format!(
        "{}-{}-{}-{}-b{}",
        c.dataset, c.model, c.compression, c.algorithm, c.batch
    ))
}

fn summary_path(results_dir: &Path, c: &Combination) -> PathBuf {
    database_dir(results_dir, c).join("tuning.json")
}

/// Whether `c`'s network has been tuned (on any CPU).
pub fn is_tuned(results_dir: &Path, c: &Combination) -> bool {
    summary_path(results_dir, c).is_file()
}

/// Whether `c`'s network has been tuned on `cpu` (LLVM's name for it, as
/// [`tvm_runtime::this_cpu`] gives it): another CPU's database is refused
/// by runs here, so `dlas tune` tunes it again for this one.
pub fn is_tuned_on(results_dir: &Path, c: &Combination, cpu: &str) -> Result<bool> {
    Ok(is_tuned(results_dir, c)
        && database_cpu(&database_dir(results_dir, c))?.as_deref() == Some(cpu))
}

/// The CPU (LLVM's `mcpu`) the candidates in database folder `dir` were
/// measured on, read from its first record; `None` without records.
pub fn database_cpu(dir: &Path) -> Result<Option<String>> {
    use std::io::BufRead;
    let path = dir.join("database_tuning_record.json");
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut line = String::new();
    std::io::BufReader::new(file)
        .read_line(&mut line)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if line.trim().is_empty() {
        return Ok(None);
    }
    let record: serde_json::Value = serde_json::from_str(&line)
        .with_context(|| format!("{}: line 1 is not a MetaSchedule record", path.display()))?;
    Ok(record[1][2]["mcpu"].as_str().map(String::from))
}

/// The tuning of `c`'s network, if it has been tuned.
pub fn summary(results_dir: &Path, c: &Combination) -> Result<Option<Summary>> {
    let path = summary_path(results_dir, c);
    if !path.is_file() {
        return Ok(None);
    }
    let text = dlas_core::regular_file::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .map(Some)
        .with_context(|| format!("{} is not a TVM tuning summary", path.display()))
}

/// How the runner builds `c`'s TVM session: untuned, or from its database
/// (another CPU's only if `foreign`, as `--foreign-tuning` says).
pub fn options(project_root: &Path, results_dir: &Path, c: &Combination, foreign: bool) -> Options {
    Options {
        python: tvm_runtime::python(project_root),
        algorithm: c.algorithm.to_string(),
        database: c.tuned.then(|| database_dir(results_dir, c)),
        foreign,
    }
}

/// What a tuned row's provider adds: the database (relative to the
/// project) and the search that filled it.
pub fn describe(project_root: &Path, results_dir: &Path, c: &Combination) -> Result<String> {
    let Some(s) = summary(results_dir, c)? else {
        return Ok(String::new());
    };
    let dir = database_dir(results_dir, c);
    let shown = dir.strip_prefix(project_root).unwrap_or(&dir);
    let sessions = if s.sessions > 1 {
        format!(" in {} sessions", s.sessions)
    } else {
        String::new()
    };
    let copied = s
        .copied_from
        .as_ref()
        .map_or(String::new(), |from| format!(" (a copy of {from})"));
    Ok(format!(
        "; MetaSchedule database {}{copied}: {} trials of a budget of {}, {} of {} tasks tuned, {:.0} s{sessions} on {} thread(s)",
        shown.display(),
        s.trials,
        s.budget,
        s.tuned_tasks,
        s.tasks,
        s.wall_s,
        s.threads
    ))
}

/// The `dlas tune` command that tunes `c`.
pub fn tune_command(study: &Study, c: &Combination) -> String {
    format!(
        "dlas tune --study {} --device host --filter dataset={},model={},compression={},algorithm={},batch={},compiler=tvm,tuned=true",
        study.name, c.dataset, c.model, c.compression, c.algorithm, c.batch
    )
}

/// The study's budget per task for TVM (`trials_per_task` of its `tvm`
/// compiler).
pub fn trials_per_task(study: &Study) -> Result<usize> {
    study
        .compilers
        .iter()
        .find(|c| c.id.get_ref() == dlas_backends::TVM)
        .and_then(|c| c.trials_per_task.as_ref())
        .map(|t| *t.get_ref())
        .filter(|&t| t > 0)
        .with_context(|| {
            format!(
                "{}: the study's tvm compiler sets no `trials_per_task` (MetaSchedule's budget per task of a network)",
                study.path.display()
            )
        })
}

/// Whether `c` has an interrupted tuning with records to resume.
fn resumable(results_dir: &Path, c: &Combination) -> bool {
    database_dir(results_dir, c)
        .with_extension("partial")
        .join("database_tuning_record.json")
        .is_file()
}

/// What tuning a network needs: its ONNX file, input shape, threads,
/// budget per task and seed.
#[derive(Clone)]
pub struct Job<'a> {
    pub combination: &'a Combination,
    pub model: PathBuf,
    pub input_shape: [usize; 4],
    pub threads: usize,
    pub trials_per_task: usize,
    pub population: usize,
    pub seed: u64,
}

/// Tunes `job`'s network into its database folder under `results_dir`,
/// unless it is there already, tuned on this CPU (`None`). Another CPU's
/// database there is replaced; another study's tuning of the same model
/// file, algorithm, batch size and budget on this CPU is copied rather
/// than repeated.
pub fn tune(project_root: &Path, results_dir: &Path, job: &Job) -> Result<Option<Summary>> {
    let here = tvm_runtime::this_cpu(&tvm_runtime::python(project_root))?;
    tune_on(project_root, results_dir, job, &here, &|_| {})
}

/// How often a tuning's progress is read from its database.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// [`tune`] on CPU `here`, calling `measured` with the candidates in the
/// database every [`PROGRESS_EVERY`] while MetaSchedule runs (a network
/// tunes for up to 45 minutes).
fn tune_on(
    project_root: &Path,
    results_dir: &Path,
    job: &Job,
    here: &str,
    measured: &(dyn Fn(usize) + Sync),
) -> Result<Option<Summary>> {
    let c = job.combination;
    let dir = database_dir(results_dir, c);
    if is_tuned(results_dir, c) {
        match database_cpu(&dir)? {
            Some(cpu) if cpu == here => return Ok(None),
            theirs => dlas_core::errln!(
                "{} was tuned on {}; tuning it for this CPU ({here}) replaces it",
                dir.display(),
                theirs.as_deref().unwrap_or("no CPU")
            ),
        }
    }
    let model_sha256 = {
        use sha2::Digest;
        let bytes = std::fs::read(&job.model)
            .with_context(|| format!("cannot read {}", job.model.display()))?;
        hex::encode(sha2::Sha256::digest(&bytes))
    };
    if let Some(summary) = copy_identical(project_root, results_dir, job, here, &model_sha256)? {
        return Ok(Some(summary));
    }
    let partial = dir.with_extension("partial");
    std::fs::create_dir_all(&partial)?;
    let progress = Progress::start(&partial)?;
    let options = Options {
        database: Some(partial.clone()),
        ..options(project_root, results_dir, c, false)
    };
    let records = partial.join("database_tuning_record.json");
    let finished = std::sync::atomic::AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        scope.spawn(|| {
            use std::sync::atomic::Ordering::Relaxed;
            let step = std::time::Duration::from_millis(100);
            while !finished.load(Relaxed) {
                if let Ok(bytes) = std::fs::read(&records) {
                    measured(bytes.iter().filter(|&&b| b == b'\n').count());
                }
                for _ in 0..PROGRESS_EVERY.as_millis() / step.as_millis() {
                    if finished.load(Relaxed) {
                        return;
                    }
                    std::thread::sleep(step);
                }
            }
        });
        let report = tvm_runtime::tune(
            &job.model,
            job.input_shape,
            job.threads,
            &options,
            tvm_runtime::Search {
                trials_per_task: job.trials_per_task,
                population: job.population,
                seed: job.seed,
            },
        );
        finished.store(true, std::sync::atomic::Ordering::Relaxed);
        report
    })?;
    if report.tuned_tasks == 0 {
        bail!(
            "MetaSchedule measured no valid candidate for {}/{} ({} trials); nothing is kept",
            c.dataset,
            c.model,
            report.trials
        );
    }
    // MetaSchedule's per-task logs are large and differ run to run; the
    // database is what a tuned run applies.
    let logs = partial.join("logs");
    if logs.exists() {
        std::fs::remove_dir_all(&logs)?;
    }
    std::fs::remove_file(partial.join(Progress::FILE))?;
    let summary = Summary {
        trials_per_task: job.trials_per_task,
        budget: report.budget,
        trials: report.records,
        tasks: report.tasks,
        tuned_tasks: report.tuned_tasks,
        wall_s: ((progress.earlier_s + report.wall_s) * 10.0).round() / 10.0,
        sessions: progress.sessions,
        model_sha256: Some(model_sha256),
        copied_from: None,
        threads: job.threads,
        seed: job.seed,
        population: job.population,
        tvm: tvm_runtime::VERSION.into(),
    };
    finish(&partial, &dir, &summary)?;
    Ok(Some(summary))
}

/// Writes `summary` into the finished database in `partial` and moves it
/// into place at `dir`, replacing what was there.
fn finish(partial: &Path, dir: &Path, summary: &Summary) -> Result<()> {
    let mut json = serde_json::to_string_pretty(summary)?;
    json.push('\n');
    dlas_core::atomic::write_atomic(&partial.join("tuning.json"), json.as_bytes())?;
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::rename(partial, dir)
        .with_context(|| format!("cannot move {} into place", partial.display()))
}

/// Copies another study's tuning of `job`'s network, if one under
/// `results_dir`'s parent matches it: the same model file (sha256), the
/// same algorithm and batch size (its folder name), the same budget,
/// population and threads, measured on this CPU, and not itself a copy.
/// An interrupted tuning of this study's own is resumed instead.
fn copy_identical(
    project_root: &Path,
    results_dir: &Path,
    job: &Job,
    here: &str,
    model_sha256: &str,
) -> Result<Option<Summary>> {
    let c = job.combination;
    let Some(all) = results_dir.parent() else {
        return Ok(None);
    };
    if resumable(results_dir, c) || !all.is_dir() {
        return Ok(None);
    }
    let mut studies: Vec<PathBuf> = std::fs::read_dir(all)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && p.as_path() != results_dir)
        .collect();
    studies.sort();
    for other in studies {
        let Some(theirs) = summary(&other, c)? else {
            continue;
        };
        let source = database_dir(&other, c);
        let same = theirs.copied_from.is_none()
            && theirs.model_sha256.as_deref() == Some(model_sha256)
            && theirs.trials_per_task == job.trials_per_task
            && theirs.population == job.population
            && theirs.threads == job.threads
            && database_cpu(&source)?.as_deref() == Some(here);
        if !same {
            continue;
        }
        let dir = database_dir(results_dir, c);
        let partial = dir.with_extension("partial");
        std::fs::create_dir_all(&partial)?;
        for file in ["database_workload.json", "database_tuning_record.json"] {
            std::fs::copy(source.join(file), partial.join(file))
                .with_context(|| format!("cannot copy {}", source.join(file).display()))?;
        }
        let shown = source.strip_prefix(project_root).unwrap_or(&source);
        let summary = Summary {
            copied_from: Some(shown.display().to_string()),
            ..theirs
        };
        finish(&partial, &dir, &summary)?;
        return Ok(Some(summary));
    }
    Ok(None)
}

/// What [`tune_all`] did.
#[derive(Debug, Default)]
pub struct Report {
    /// Networks tuned now, with their summaries.
    pub tuned: Vec<(String, Summary)>,
    /// Networks whose database was there already.
    pub already: usize,
}

/// Tunes the network of every tuned TVM combination of `combinations`
/// (each database once), one after the other, showing which is being
/// tuned and for how long.
pub fn tune_all(
    study: &Study,
    combinations: &[Combination],
    (project_root, results_dir): (&Path, &Path),
    threads: usize,
    trials_per_task: usize,
) -> Result<Report> {
    let mut models = crate::models::Models::new(project_root)?;
    let mut report = Report::default();
    let here = tvm_runtime::this_cpu(&tvm_runtime::python(project_root))?;
    let mut seen = std::collections::HashSet::new();
    let jobs: Vec<&Combination> = combinations
        .iter()
        .filter(|c| c.compiler == dlas_backends::TVM && c.tuned)
        .filter(|c| seen.insert(database_dir(results_dir, c)))
        .collect();
    for (i, &c) in jobs.iter().enumerate() {
        let label = format!("{}/{} {} b{}", c.dataset, c.model, c.algorithm, c.batch);
        if is_tuned_on(results_dir, c, &here)? {
            report.already += 1;
            continue;
        }
        let model = models.path(study, &crate::models::model_file_of(c))?;
        let [ch, h, w] = c.dataset.input_chw();
        let verb = if resumable(results_dir, c) {
            "resuming the interrupted tuning of"
        } else {
            "tuning"
        };
        let message = format!(
            "[{}/{}] {verb} {label} with MetaSchedule ({trials_per_task} trials per task)",
            i + 1,
            jobs.len()
        );
        let spinner = crate::progress::spinner(&message);
        // Without a terminal (a log file), a line a minute at most.
        let logged = std::sync::Mutex::new((std::time::Instant::now(), 0));
        let measured = |n: usize| {
            if !spinner.is_hidden() {
                spinner.set_message(format!("{message}: {n} candidates measured"));
                return;
            }
            let mut last = logged.lock().unwrap_or_else(|e| e.into_inner());
            if n != last.1 && last.0.elapsed() >= std::time::Duration::from_secs(60) {
                dlas_core::errln!(
                    "[{}/{}] {label}: {n} candidates measured",
                    i + 1,
                    jobs.len()
                );
                *last = (std::time::Instant::now(), n);
            }
        };
        let job = Job {
            combination: c,
            model,
            input_shape: [c.batch, ch, h, w],
            threads,
            trials_per_task,
            population: POPULATION,
            seed: study.protocol.seed,
        };
        let tuned = tune_on(project_root, results_dir, &job, &here, &measured);
        spinner.finish_and_clear();
        let summary = tuned?.expect("not tuned on this CPU before");
        let copied = summary
            .copied_from
            .as_ref()
            .map_or(String::new(), |from| format!(" (copied from {from})"));
        dlas_core::errln!(
            "[{}/{}] {label}: {} trials, {} of {} tasks tuned, {:.0} s{copied}",
            i + 1,
            jobs.len(),
            summary.trials,
            summary.tuned_tasks,
            summary.tasks,
            summary.wall_s
        );
        report.tuned.push((label, summary));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::{Algorithm, Dataset};

    #[test]
    fn each_network_algorithm_and_batch_has_its_own_database() {
        let c = Combination {
            algorithm: Algorithm::SpatialPack,
            tuned: true,
            batch: 8,
            ..Combination::host(Dataset::Imagenet, "swin_t", "tvm")
        };
        let dir = database_dir(Path::new("data/results/compilers"), &c);
        assert_eq!(
            dir,
            Path::new("data/results/compilers/tuning/tvm/imagenet-swin_t-dense-spatial-pack-b8")
        );
        let untuned = Combination {
            tuned: false,
            ..c.clone()
        };
        let opts = options(Path::new("/p"), Path::new("r"), &untuned, false);
        assert_eq!(opts.database, None);
        assert_eq!(opts.algorithm, "spatial-pack");
        assert_eq!(
            options(Path::new("/p"), Path::new("r"), &c, false).database,
            Some(database_dir(Path::new("r"), &c))
        );
    }

    /// A finished database of `c` under `results`, one record measured on
    /// `cpu`, tuned from a file with sha256 `model`.
    fn fake_tuning(results: &Path, c: &Combination, cpu: &str, model: &str) -> Summary {
        let dir = database_dir(results, c);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("database_workload.json"), "[\"1\",{}]\n").unwrap();
        let record = serde_json::json!([0, [[], [0.001], {"kind": "llvm", "mcpu": cpu}, []]]);
        std::fs::write(
            dir.join("database_tuning_record.json"),
            format!("{record}\n"),
        )
        .unwrap();
        let summary = Summary {
            trials_per_task: 16,
            budget: 16,
            trials: 1,
            tasks: 1,
            tuned_tasks: 1,
            wall_s: 12.0,
            threads: 2,
            seed: 2023,
            population: POPULATION,
            tvm: tvm_runtime::VERSION.into(),
            sessions: 1,
            model_sha256: Some(model.into()),
            copied_from: None,
        };
        let json = serde_json::to_string_pretty(&summary).unwrap();
        std::fs::write(dir.join("tuning.json"), json).unwrap();
        summary
    }

    #[test]
    fn another_studys_tuning_of_the_same_file_on_this_cpu_is_copied_not_repeated() {
        let root = tempfile::tempdir().unwrap();
        let results = |study: &str| root.path().join("data/results").join(study);
        let c = Combination {
            algorithm: Algorithm::Gemm,
            tuned: true,
            ..Combination::host(Dataset::Imagenet, "resnet50", "tvm")
        };
        let job = Job {
            combination: &c,
            model: PathBuf::from("unused.onnx"),
            input_shape: [1, 3, 224, 224],
            threads: 2,
            trials_per_task: 16,
            population: POPULATION,
            seed: 7,
        };
        let theirs = fake_tuning(&results("dlas"), &c, "znver4", "aa");
        std::fs::create_dir_all(results("compilers")).unwrap();
        let copy = |cpu: &str, model: &str, job: &Job| {
            copy_identical(root.path(), &results("compilers"), job, cpu, model).unwrap()
        };
        // Not the same: another file, another CPU, another budget.
        assert_eq!(copy("znver4", "bb", &job), None);
        assert_eq!(copy("sapphirerapids", "aa", &job), None);
        let other_budget = Job {
            trials_per_task: 32,
            ..job.clone()
        };
        assert_eq!(copy("znver4", "aa", &other_budget), None);
        assert!(!is_tuned(&results("compilers"), &c));
        // The same: copied, saying from where, and tuned on this CPU now.
        let copied = copy("znver4", "aa", &job).expect("copied");
        assert_eq!(
            copied,
            Summary {
                copied_from: Some(
                    "data/results/dlas/tuning/tvm/imagenet-resnet50-dense-gemm-b1".into()
                ),
                ..theirs
            }
        );
        assert_eq!(summary(&results("compilers"), &c).unwrap(), Some(copied));
        assert!(is_tuned_on(&results("compilers"), &c, "znver4").unwrap());
        assert!(!is_tuned_on(&results("compilers"), &c, "sapphirerapids").unwrap());
        let file = |study: &str| {
            std::fs::read(database_dir(&results(study), &c).join("database_tuning_record.json"))
                .unwrap()
        };
        assert_eq!(file("compilers"), file("dlas"));
        // A copy is not copied again.
        std::fs::create_dir_all(results("third")).unwrap();
        std::fs::remove_dir_all(database_dir(&results("dlas"), &c)).unwrap();
        assert_eq!(
            copy_identical(root.path(), &results("third"), &job, "znver4", "aa").unwrap(),
            None
        );
    }
}
