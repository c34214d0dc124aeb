//! `dlas`: plan, run and report the deep-learning acceleration stack study.

mod cmd;
mod facts;
mod project;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "dlas",
    version,
    about = "Across-stack inference benchmarking: plan, run, report"
)]
struct Cli {
    /// Project root (the folder holding data/); found from the current folder by default.
    #[arg(long, global = true)]
    root: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Expand a study into its combinations.
    Plan(cmd::plan::Args),
    /// The devices: list their specifications, calibrate this machine as one.
    #[command(subcommand)]
    Devices(cmd::devices::Command),
    /// The device model against this machine's measured rows: per-row ratios, error per group.
    Validate(cmd::validate::Args),
    /// The model zoo: list networks, export ONNX files.
    #[command(subcommand)]
    Zoo(cmd::zoo::Command),
    /// Measure a study's combinations on devices and write results.
    Run(cmd::run::Args),
    /// Search the schedules of a study's tuned native combinations on this machine.
    #[cfg(feature = "host")]
    Tune(cmd::tune::Args),
    /// Regenerate figures and tables (and the mocked results behind them).
    Reproduce(cmd::reproduce::Args),
    /// Compare two results files: per-combination ratios and rank agreement.
    Compare(cmd::compare::Args),
    /// Throughput metrics of compiled against baseline configurations (RTR, ASE, BSR).
    Metrics(cmd::metrics::Args),
    /// Check the study's thirteen observations (XI and XII twice: native engine, TVM) on results files.
    Claims(cmd::claims::Args),
    /// Check that every runtime gives the same logits on the zoo's networks.
    #[cfg(feature = "host")]
    Crosscheck(cmd::crosscheck::Args),
    /// Run a study across a fleet: Slurm job arrays per device, status, merge.
    #[cfg(feature = "host")]
    #[command(subcommand)]
    Cluster(cmd::cluster::Command),
    /// Benchmarks of the measurement machinery itself.
    #[cfg(feature = "host")]
    #[command(subcommand)]
    Bench(cmd::bench::Command),
    /// Compress a network (pruning, fp16, int8), write its ONNX and report on it.
    #[cfg(feature = "host")]
    Compress(cmd::compress::Args),
    /// Compress a network at every level of its technique's schedule: one CSV row per level.
    #[cfg(feature = "host")]
    Sweep(cmd::compress::SweepArgs),
    /// Top-1 and top-5 accuracy of an ONNX model on a CIFAR-10 or ImageNet folder.
    #[cfg(feature = "host")]
    Accuracy(cmd::accuracy::Args),
}

/// The most bytes of an error message `dlas` prints: an error quotes user
/// input (cut to a few hundred characters where it is quoted) and lists
/// valid values, and no user input may make it longer than this.
const MAX_ERROR_BYTES: usize = 4096;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result =
        project::Project::locate(cli.root.as_deref()).and_then(|project| match cli.command {
            Command::Plan(args) => cmd::plan::run(&project, &args),
            Command::Zoo(command) => cmd::zoo::run(&project, &command),
            Command::Devices(command) => cmd::devices::run(&project, &command),
            Command::Validate(args) => cmd::validate::run(&project, &args),
            Command::Run(args) => cmd::run::run(&project, &args),
            #[cfg(feature = "host")]
            Command::Tune(args) => cmd::tune::run(&project, &args),
            Command::Reproduce(args) => cmd::reproduce::run(&project, &args),
            Command::Compare(args) => cmd::compare::run(&args),
            Command::Metrics(args) => cmd::metrics::run(&args),
            Command::Claims(args) => cmd::claims::run(&project, &args),
            #[cfg(feature = "host")]
            Command::Crosscheck(args) => cmd::crosscheck::run(&project, &args),
            #[cfg(feature = "host")]
            Command::Bench(command) => cmd::bench::run(&project, &command),
            #[cfg(feature = "host")]
            Command::Cluster(command) => cmd::cluster::run(&project, &command),
            #[cfg(feature = "host")]
            Command::Compress(args) => cmd::compress::run(&project, &args),
            #[cfg(feature = "host")]
            Command::Sweep(args) => cmd::compress::sweep(&args),
            #[cfg(feature = "host")]
            Command::Accuracy(args) => cmd::accuracy::run(&args),
        });
    match result {
        Ok(code) => code,
        Err(error) if is_broken_pipe(&error) && stdout_closed() => ExitCode::SUCCESS,
        Err(error) => {
            dlas_core::errln!("error: {}", capped(&format!("{error:#}")));
            ExitCode::FAILURE
        }
    }
}

/// `text` cut to [`MAX_ERROR_BYTES`] at a character boundary, saying how much was left out.
fn capped(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_string();
    }
    let end = (0..=MAX_ERROR_BYTES)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!(
        "{}… ({} more bytes left out)",
        &text[..end],
        text.len() - end
    )
}

/// A reader that closes `dlas`'s output early (`dlas plan | head`) ends the
/// command quietly and successfully, as it ends coreutils' commands: Rust
/// ignores SIGPIPE, so a command that writes with `writeln!` gets an error
/// it returns, which `main` recognises here; lines printed with
/// `dlas_core::outln!` are dropped. Restoring SIGPIPE instead would also
/// kill `dlas` when a child process (ssh, Slurm) closes a pipe, which must
/// stay an error, and would stop a measurement between two rows.
///
/// Whether the error comes from a write to a closed pipe.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let io = cause.downcast_ref::<std::io::Error>().or_else(|| {
            match cause.downcast_ref::<csv::Error>().map(csv::Error::kind) {
                Some(csv::ErrorKind::Io(io)) => Some(io),
                _ => None,
            }
        });
        io.is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Whether standard output is a pipe or socket whose reader has gone
/// (`poll` reports an error or hang-up on it); a file or terminal never is.
fn stdout_closed() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: `poll` reads and writes exactly the one `pollfd` it is given,
    // which lives on this stack frame for the whole call; timeout 0 never blocks.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready == 1 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}
