//! `dlas metrics RESULTS…`: the compiler study's throughput metrics (RTR,
//! ASE, BSR, saturation batch; `docs/metrics.md`) of every compiled
//! configuration whose baseline is in the same results.

use anyhow::{Result, bail};
use dlas_core::results::read_results;
use dlas_report::metrics::metrics;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Results files (CSV), e.g. a batch sweep: `dlas run --batch 1,2,4,8`.
    #[arg(required = true)]
    results: Vec<PathBuf>,
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.3}"))
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let mut rows = Vec::new();
    for path in &args.results {
        rows.extend(read_results(path)?);
    }
    let all = metrics(&rows);
    if all.is_empty() {
        bail!(
            "no compiled configuration has its baseline measured in these results (pairs: ort-opt/ort-noopt, tract-opt/tract-plain, native tuned/untuned, same network and device)"
        );
    }
    dlas_core::outln!(
        "network,device,compiler,baseline,batches,rtr_b1,rtr_bmax,ase,ase_baseline,bsr,saturation_batch"
    );
    for m in &all {
        let batches: Vec<String> = m.batches.iter().map(usize::to_string).collect();
        dlas_core::outln!(
            "{},{},{},{},{},{},{},{},{},{},{}",
            m.network,
            m.device,
            m.compiler,
            m.baseline,
            batches.join(" "),
            num(m.rtr_1),
            num(m.rtr_max),
            num(m.ase),
            num(m.ase_baseline),
            num(m.bsr),
            m.saturation_batch
                .map_or_else(String::new, |b| b.to_string())
        );
    }
    Ok(ExitCode::SUCCESS)
}
