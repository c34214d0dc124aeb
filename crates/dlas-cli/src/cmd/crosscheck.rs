//! `dlas crosscheck`: tract and ONNX Runtime give the same logits on every
//! selected network (relative L2 under 1e-4 against ONNX Runtime unoptimized).

use crate::project::Project;
use anyhow::Result;
use dlas_core::{Filter, Plan};
use dlas_runner::crosscheck::{TOLERANCE, crosscheck};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "dlas")]
    study: String,
    /// Select networks: dataset=…, model=….
    #[arg(long, default_value = "")]
    filter: String,
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    let specs = project.specs()?;
    let study = project.study(&args.study, &specs)?;
    let filter = Filter::parse(&args.filter)?;
    filter.check(&study)?;
    let mut networks = Vec::new();
    for c in Plan::expand(&study).filtered(&filter).combinations {
        if !networks.contains(&(c.dataset, c.model.clone())) {
            networks.push((c.dataset, c.model));
        }
    }
    let agreements = crosscheck(&project.root, &study, &networks, study.protocol.seed)?;
    let mut worst = 0f64;
    println!("dataset,model,compiler,relative_l2");
    for a in &agreements {
        println!(
            "{},{},{},{:.3e}",
            a.dataset, a.model, a.compiler, a.relative_l2
        );
        worst = worst.max(a.relative_l2);
    }
    if worst < TOLERANCE {
        println!(
            "all {} comparisons agree (worst {worst:.3e} < {TOLERANCE:e})",
            agreements.len()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("error: worst relative L2 {worst:.3e} exceeds {TOLERANCE:e}");
        Ok(ExitCode::FAILURE)
    }
}
