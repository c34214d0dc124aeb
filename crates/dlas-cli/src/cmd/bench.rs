//! `dlas bench harness`: the timing loop's own cost per timed run.
//!
//! The same `timing::measure` that times every combination times a session
//! that does no work (it returns its input), so what it measures is the
//! harness: clock reads, the call, and the output's allocation. It must stay
//! under 5 µs per run, far below the smallest inference time reported.

use anyhow::Result;
use dlas_backends::Session;
use dlas_core::Summary;
use dlas_runner::timing::{Protocol, measure};
use std::process::ExitCode;
use std::time::Duration;

/// The budget the harness must stay under, per timed run.
pub const BUDGET_US: f64 = 5.0;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Overhead of the timing loop per timed run (identity session on a CIFAR-10 input).
    Harness {
        #[arg(long, default_value_t = 10_000)]
        runs: usize,
    },
}

struct Identity;

impl Session for Identity {
    fn run(&mut self, input: &[f32]) -> Result<Vec<f32>> {
        Ok(input.to_vec())
    }

    fn provider(&self) -> String {
        "identity".into()
    }
}

pub fn run(command: &Command) -> Result<ExitCode> {
    match command {
        Command::Harness { runs } => {
            let input = vec![0.5f32; 3 * 32 * 32];
            let protocol = Protocol {
                warmup: 100,
                runs: *runs,
                timeout: Duration::from_secs(60),
            };
            let samples = measure(&mut Identity, &input, protocol)?;
            let summary =
                Summary::from_samples(&samples).ok_or_else(|| anyhow::anyhow!("no samples"))?;
            let median_us = summary.median * 1e3;
            println!(
                "harness overhead per timed run: median {median_us:.3} µs, p99 {:.3} µs over {runs} runs (budget {BUDGET_US} µs)",
                summary.p99 * 1e3
            );
            if median_us < BUDGET_US {
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("error: the harness costs more than {BUDGET_US} µs per run");
                Ok(ExitCode::FAILURE)
            }
        }
    }
}
