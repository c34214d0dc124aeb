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
    /// The model zoo: list networks, export ONNX files.
    #[command(subcommand)]
    Zoo(cmd::zoo::Command),
    /// Measure a study's combinations on devices and write results.
    Run(cmd::run::Args),
    /// Search the schedules of a study's tuned native combinations on this machine.
    Tune(cmd::tune::Args),
    /// Regenerate figures and tables (and the mocked results behind them).
    Reproduce(cmd::reproduce::Args),
    /// Compare two results files: per-combination ratios and rank agreement.
    Compare(cmd::compare::Args),
    /// Throughput metrics of compiled against baseline configurations (RTR, ASE, BSR).
    Metrics(cmd::metrics::Args),
    /// Check the study's thirteen observations on results files.
    Claims(cmd::claims::Args),
    /// Check that every runtime gives the same logits on the zoo's networks.
    Crosscheck(cmd::crosscheck::Args),
    /// Run a study across a fleet: Slurm job arrays per device, status, merge.
    #[command(subcommand)]
    Cluster(cmd::cluster::Command),
    /// Benchmarks of the measurement machinery itself.
    #[command(subcommand)]
    Bench(cmd::bench::Command),
    /// Compress a network (pruning, fp16, int8), write its ONNX and report on it.
    Compress(cmd::compress::Args),
    /// Compress a network at every level of its technique's schedule: one CSV row per level.
    Sweep(cmd::compress::SweepArgs),
    /// Top-1 and top-5 accuracy of an ONNX model on a CIFAR-10 or ImageNet folder.
    Accuracy(cmd::accuracy::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result =
        project::Project::locate(cli.root.as_deref()).and_then(|project| match cli.command {
            Command::Plan(args) => cmd::plan::run(&project, &args),
            Command::Zoo(command) => cmd::zoo::run(&project, &command),
            Command::Run(args) => cmd::run::run(&project, &args),
            Command::Tune(args) => cmd::tune::run(&project, &args),
            Command::Reproduce(args) => cmd::reproduce::run(&project, &args),
            Command::Compare(args) => cmd::compare::run(&args),
            Command::Metrics(args) => cmd::metrics::run(&args),
            Command::Claims(args) => cmd::claims::run(&project, &args),
            Command::Crosscheck(args) => cmd::crosscheck::run(&project, &args),
            Command::Bench(command) => cmd::bench::run(&project, &command),
            Command::Cluster(command) => cmd::cluster::run(&project, &command),
            Command::Compress(args) => cmd::compress::run(&project, &args),
            Command::Sweep(args) => cmd::compress::sweep(&args),
            Command::Accuracy(args) => cmd::accuracy::run(&args),
        });
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
