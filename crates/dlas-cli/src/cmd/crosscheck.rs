//! `dlas crosscheck`: every compiler the study runs on the host gives the
//! same logits on every selected network (relative L2 under 1e-4 against
//! ONNX Runtime unoptimized; under 1e-1 for OpenVINO in the device's native
//! precision, which may be bfloat16). A compiler that fails on a network is
//! reported with its reason and the others go on.

use crate::project::Project;
use anyhow::Result;
use dlas_core::{Filter, Plan};
use dlas_runner::crosscheck::{crosscheck, runners_of};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "dlas")]
    study: String,
    /// Select networks and compilers: dataset=…, model=…, compiler=….
    #[arg(long, default_value = "")]
    filter: String,
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    let specs = project.specs()?;
    let study = project.study(&args.study, &specs)?;
    let filter = Filter::parse(&args.filter)?;
    filter.check(&study)?;
    let networks = runners_of(&Plan::expand(&study).filtered(&filter).combinations);
    if networks.is_empty() {
        dlas_core::errln!("error: the selection has no dense host combination to cross-check");
        return Ok(ExitCode::FAILURE);
    }
    dlas_core::outln!("dataset,model,compiler,relative_l2,tolerance,verdict");
    // Each comparison is printed as soon as it is known.
    let agreements = crosscheck(
        &project.root,
        &study,
        &networks,
        study.protocol.seed,
        &mut |a| {
            let (value, verdict) = match &a.relative_l2 {
                Ok(e) if a.agrees() => (format!("{e:.3e}"), "agrees".to_string()),
                Ok(e) => (format!("{e:.3e}"), "differs".to_string()),
                Err(why) => (String::new(), format!("failed: {why}")),
            };
            dlas_core::outln!(
                "{},{},{},{value},{:e},\"{}\"",
                a.dataset,
                a.model,
                a.compiler,
                a.tolerance,
                verdict.replace('"', "'")
            );
        },
    )?;
    let agree = agreements.iter().filter(|a| a.agrees()).count();
    let differ = agreements
        .iter()
        .filter(|a| a.relative_l2.is_ok() && !a.agrees())
        .count();
    let failed = agreements.iter().filter(|a| a.relative_l2.is_err()).count();
    // The worst error against its tolerance, per tolerance.
    let mut worst: std::collections::BTreeMap<String, f64> = Default::default();
    for a in &agreements {
        if let Ok(e) = &a.relative_l2 {
            let w = worst.entry(format!("{:e}", a.tolerance)).or_default();
            *w = w.max(*e);
        }
    }
    let worst: Vec<String> = worst
        .iter()
        .map(|(tolerance, e)| format!("{e:.3e} against {tolerance}"))
        .collect();
    dlas_core::outln!(
        "{} networks, {} comparisons: {agree} agree, {differ} differ, {failed} failed (worst relative L2 {})",
        networks.len(),
        agreements.len(),
        worst.join(", ")
    );
    Ok(if differ + failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
