//! Apache TVM 0.27 (Relax and MetaSchedule), the auto-scheduling compiler
//! of the DLAS paper, as a measured compiler. TVM compiles and tunes only
//! from Python, so a session is a child process: the environment's
//! interpreter (`cargo xtask setup --tvm` builds it from the hash-pinned
//! `tvm/requirements.txt`) running `tvm/dlas_tvm.py`, whose text is built
//! into this crate, `serve`ing one compiled model over a binary protocol
//! on its standard input and output.
//!
//! The runner's protocol is the same as for every compiler, but the time
//! of a run is the one the child takes next to the VM call
//! ([`crate::Session::inner_time`]): the pipe's round trip (tens of µs)
//! is not the model's. `dlas bench harness` measures that round trip.
//!
//! A convolution's algorithm is chosen by legalizing it to a direct, an
//! im2col-GEMM or a spatial-pack TE compute, which MetaSchedule schedules
//! when tuned; untuned means no schedule at all in this TVM (there are no
//! fallback CPU schedules since Relay left), so untuned rows run serial,
//! untiled loops. Tuning (`tune`) writes MetaSchedule's database, which a
//! tuned session applies without tuning again.

use crate::{Session, SessionConfig};
use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The helper script, run with `python -c`.
pub const SCRIPT: &str = include_str!("../tvm/dlas_tvm.py");
/// The TVM version the pinned environment holds.
pub const VERSION: &str = "0.27.0.post1";
/// The variable that points at another interpreter than the set-up one.
pub const PYTHON_VAR: &str = "DLAS_TVM_PYTHON";
/// The algorithms the helper legalizes convolutions to.
pub const ALGORITHMS: &[&str] = &["direct", "gemm", "spatial-pack"];
/// The command that sets TVM up, for messages.
pub const SETUP: &str = "cargo xtask setup --tvm";

/// The interpreter: `$DLAS_TVM_PYTHON`, else the environment `cargo xtask
/// setup --tvm` builds under `<project>/.cache/tvm/venv`.
pub fn python(project_root: &Path) -> PathBuf {
    std::env::var_os(PYTHON_VAR).map_or_else(
        || project_root.join(".cache/tvm/venv/bin/python"),
        PathBuf::from,
    )
}

/// Whether the interpreter exists; the error says what to run.
pub fn check_installed(python: &Path) -> Result<()> {
    if python.is_file() {
        Ok(())
    } else {
        bail!(
            "Apache TVM is not set up ({} does not exist); run `{SETUP}` (about 610 MB) \
             or set {PYTHON_VAR} to a Python with apache-tvm {VERSION}",
            python.display()
        )
    }
}

/// This CPU as LLVM names it (`znver4`, `sapphirerapids`): the `mcpu` that
/// MetaSchedule's records carry and the helper checks a database against.
pub fn this_cpu(python: &Path) -> Result<String> {
    #[derive(Deserialize)]
    struct Cpu {
        mcpu: String,
    }
    let cpu: Cpu = report(python, 1, &["cpu".to_string()], "name this CPU")?;
    Ok(cpu.mcpu)
}

/// Runs a one-shot subcommand of the helper and parses the JSON line it
/// reports; `doing` completes "TVM could not …" when it fails.
fn report<T: serde::de::DeserializeOwned>(
    python: &Path,
    threads: usize,
    args: &[String],
    doing: &str,
) -> Result<T> {
    let (mut child, stderr) = spawn(python, threads, args)?;
    drop(child.stdin.take());
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout is piped")
        .read_to_string(&mut out)?;
    if !child.wait()?.success() {
        bail!("TVM could not {doing}: {}", why(&stderr));
    }
    serde_json::from_str(out.trim())
        .map_err(|e| anyhow!("TVM's report `{}` does not parse: {e}", out.trim()))
}

/// How a TVM session is built.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub python: PathBuf,
    /// One of [`ALGORITHMS`].
    pub algorithm: String,
    /// MetaSchedule's database (a tuning work folder), or `None`: untuned.
    pub database: Option<PathBuf>,
    /// Apply a database tuned on another CPU (the helper refuses one
    /// otherwise: TVM itself would apply it without a word).
    pub foreign: bool,
}

/// What the helper says once the model is built.
#[derive(Debug, Clone, Deserialize)]
struct Ready {
    tvm: String,
    target: String,
    /// The CPUs the database's records were measured on (empty: untuned).
    #[serde(default)]
    tuned_on: Vec<String>,
    tasks: usize,
    tuned_tasks: usize,
    threads: usize,
    dtype: String,
}

/// What `tune` reports.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Tuning {
    /// Distinct kernels (MetaSchedule tasks) of the model.
    pub tasks: usize,
    /// Candidates this call measured, and the budget it had (the trials
    /// per task times the tasks).
    pub trials: usize,
    pub budget: usize,
    /// Tasks with at least one valid record in the database.
    pub tuned_tasks: usize,
    /// Candidates in the database, this call's and those of the
    /// interrupted tuning it resumed.
    pub records: usize,
    /// Tasks the interrupted tuning had finished, not tuned again.
    pub resumed_tasks: usize,
    /// This call's wall time.
    pub wall_s: f64,
}

struct TvmSession {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The input last sent, so an unchanged input is not sent again.
    sent: Vec<f32>,
    last: Option<Duration>,
    provider: String,
}

/// Spawns the helper with `args`, its standard error kept (the last 16
/// KiB) for error messages.
fn spawn(python: &Path, threads: usize, args: &[String]) -> Result<(Child, Arc<Mutex<Vec<u8>>>)> {
    check_installed(python)?;
    let mut child = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .args(args)
        .env("TVM_NUM_THREADS", threads.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", python.display()))?;
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let mut pipe = child.stderr.take().expect("stderr is piped");
    let kept = Arc::clone(&stderr);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.extend_from_slice(&buf[..n]);
            let excess = kept.len().saturating_sub(16 * 1024);
            kept.drain(..excess);
        }
    });
    Ok((child, stderr))
}

/// The helper's last error line (`{"error": ...}`), or its last output.
fn why(stderr: &Mutex<Vec<u8>>) -> String {
    let text =
        String::from_utf8_lossy(&stderr.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    let error = text.lines().rev().find_map(|l| {
        serde_json::from_str::<serde_json::Value>(l)
            .ok()?
            .get("error")?
            .as_str()
            .map(String::from)
    });
    error.unwrap_or_else(|| {
        let tail: Vec<&str> = text.lines().rev().take(3).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    })
}

fn shape_arg(shape: [usize; 4]) -> String {
    shape.map(|d| d.to_string()).join(",")
}

/// Compiles `model` with TVM and serves it.
pub fn load(model: &Path, config: &SessionConfig, options: &Options) -> Result<Box<dyn Session>> {
    let database = options
        .database
        .as_ref()
        .map_or_else(|| "none".to_string(), |d| d.display().to_string());
    let mut args = [
        "serve",
        "--model",
        &model.display().to_string(),
        "--input-shape",
        &shape_arg(config.input_shape),
        "--algorithm",
        &options.algorithm,
        "--threads",
        &config.threads.to_string(),
        "--database",
        &database,
    ]
    .map(String::from)
    .to_vec();
    if options.foreign {
        args.push("--foreign".into());
    }
    let (mut child, stderr) = spawn(&options.python, config.threads, &args)?;
    let stdin = child.stdin.take().expect("stdin is piped");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    BufReader::new(&mut stdout).read_line(&mut line)?;
    let ready: Ready = serde_json::from_str(&line).map_err(|_| {
        let _ = child.wait();
        anyhow!("TVM could not build {}: {}", model.display(), why(&stderr))
    })?;
    if let Some(db) = &options.database
        && ready.tuned_tasks == 0
        && ready.tasks > 0
    {
        // Records are looked up by workload and target: a database tuned
        // for another CPU matches nothing, and the build would be the
        // untuned one under a tuned row's name.
        let _ = child.kill();
        let _ = child.wait();
        bail!(
            "MetaSchedule's database {} schedules none of the {} kernels of {} for this CPU's target (tuned on another CPU?); tune it here with `dlas tune`",
            db.display(),
            ready.tasks,
            model.display()
        );
    }
    // The target is TVM's JSON; its CPU is what a reader needs.
    let cpu = serde_json::from_str::<serde_json::Value>(&ready.target)
        .ok()
        .and_then(|t| t.get("mcpu")?.as_str().map(String::from))
        .unwrap_or_else(|| ready.target.clone());
    let tuning = match &options.database {
        None => "untuned (no schedule: serial, untiled loops)".to_string(),
        // The caller names the database by its place in the project (an
        // absolute path names one machine's checkout).
        Some(_) => format!(
            "tuned: {} of {} kernels scheduled from MetaSchedule's database{}",
            ready.tuned_tasks,
            ready.tasks,
            if ready.tuned_on.contains(&cpu) {
                String::new()
            } else {
                format!(" tuned on another CPU ({})", ready.tuned_on.join(", "))
            }
        ),
    };
    let provider = format!(
        "Apache TVM {} (Relax, MetaSchedule), {} convolutions, {tuning}, {} on llvm -mcpu={cpu}, \
         {} thread(s); time taken in the TVM process",
        ready.tvm, options.algorithm, ready.dtype, ready.threads
    );
    Ok(Box::new(TvmSession {
        child,
        stdin,
        stdout,
        stderr,
        sent: Vec::new(),
        last: None,
        provider,
    }))
}

impl TvmSession {
    fn exchange(&mut self, input: &[f32]) -> Result<(Duration, Vec<f32>)> {
        if self.sent != input {
            let mut frame = Vec::with_capacity(9 + 4 * input.len());
            frame.push(b'I');
            frame.extend_from_slice(&(4 * input.len() as u64).to_le_bytes());
            for x in input {
                frame.extend_from_slice(&x.to_le_bytes());
            }
            self.stdin.write_all(&frame)?;
            self.sent = input.to_vec();
        }
        self.stdin.write_all(b"R")?;
        self.stdin.flush()?;
        let mut head = [0u8; 16];
        self.stdout.read_exact(&mut head)?;
        let ns = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(head[8..].try_into().expect("8 bytes")) as usize;
        let mut bytes = vec![0u8; len];
        self.stdout.read_exact(&mut bytes)?;
        let output = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        Ok((Duration::from_nanos(ns), output))
    }
}

impl Session for TvmSession {
    fn run(&mut self, input: &[f32]) -> Result<Vec<f32>> {
        match self.exchange(input) {
            Ok((time, output)) => {
                self.last = Some(time);
                Ok(output)
            }
            Err(e) => {
                self.sent.clear();
                let _ = self.child.try_wait();
                Err(anyhow!(
                    "the TVM process failed ({e}): {}",
                    why(&self.stderr)
                ))
            }
        }
    }

    fn inner_time(&self) -> Option<Duration> {
        self.last
    }

    fn provider(&self) -> String {
        self.provider.clone()
    }
}

impl Drop for TvmSession {
    fn drop(&mut self) {
        let _ = self.stdin.write_all(b"Q");
        let _ = self.stdin.flush();
        // A helper that does not quit within a second is killed.
        for _ in 0..20 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A MetaSchedule search: its budget in candidates measured per task of the
/// network (the whole budget is this times the tasks TVM extracts), the
/// population its evolutionary search scores with the cost model per
/// round, and its seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Search {
    pub trials_per_task: usize,
    pub population: usize,
    pub seed: u64,
}

/// Tunes `model` with MetaSchedule into the database folder of `options`
/// and returns what the helper reports. Tuning into a folder that holds a
/// database adds to it.
pub fn tune(
    model: &Path,
    input_shape: [usize; 4],
    threads: usize,
    options: &Options,
    search: Search,
) -> Result<Tuning> {
    let work_dir = options
        .database
        .as_ref()
        .ok_or_else(|| anyhow!("tuning needs a database folder"))?;
    let args = [
        "tune",
        "--model",
        &model.display().to_string(),
        "--input-shape",
        &shape_arg(input_shape),
        "--algorithm",
        &options.algorithm,
        "--threads",
        &threads.to_string(),
        "--trials-per-task",
        &search.trials_per_task.to_string(),
        "--population",
        &search.population.to_string(),
        "--work-dir",
        &work_dir.display().to_string(),
        "--seed",
        &search.seed.to_string(),
    ]
    .map(String::from);
    report(
        &options.python,
        threads,
        &args,
        &format!("tune {}", model.display()),
    )
}
