//! `dlas compare A B`: per-combination ratios between two results files and
//! a summary a reviewer can act on.

use anyhow::Result;
use dlas_core::results::read_results;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The reference results (e.g. the recorded run in data/results/).
    a: PathBuf,
    /// The results to compare with it (e.g. a fresh run on your machine).
    b: PathBuf,
    /// Tolerance of the "within" share, as a fraction.
    #[arg(long, default_value_t = 0.10)]
    tolerance: f64,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let a = read_results(&args.a)?;
    let b = read_results(&args.b)?;
    let comparison = dlas_report::compare::compare(&a, &b);
    dlas_core::outln!("id,combination,a_ms,b_ms,ratio");
    for p in &comparison.pairs {
        dlas_core::outln!(
            "{},{},{:.4},{:.4},{:.3}",
            p.id,
            p.label,
            p.a_ms,
            p.b_ms,
            p.ratio()
        );
    }
    dlas_core::outln!();
    dlas_core::outln!(
        "{} combinations in both ({} only in A, {} only in B)",
        comparison.pairs.len(),
        comparison.only_a,
        comparison.only_b
    );
    dlas_core::outln!(
        "within ±{:.0}%: {:.1}%; geometric mean ratio B/A: {:.3}",
        args.tolerance * 100.0,
        comparison.share_within(args.tolerance) * 100.0,
        comparison.geomean_ratio()
    );
    dlas_core::outln!(
        "compiler rankings per network: {} of {} groups identical, mean Kendall tau {:.3}",
        comparison.same_ranking,
        comparison.groups,
        comparison.mean_kendall_tau
    );
    Ok(ExitCode::SUCCESS)
}
