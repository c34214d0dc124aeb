//! `dlas plan`: print a study's combinations or their totals.

use crate::project::Project;
use anyhow::Result;
use dlas_core::{Filter, Plan};
use std::io::Write;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Study name (in data/studies) or path to a study file.
    #[arg(long, default_value = "dlas")]
    study: String,
    /// Output format of the combination list.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    format: Format,
    /// Print totals per axis and per excluding rule instead of the list.
    #[arg(long)]
    count: bool,
    /// Select combinations: axis=value[|value][,axis=value…].
    #[arg(long, default_value = "")]
    filter: String,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Csv,
    Ids,
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    let specs = project.specs()?;
    let study = project.study(&args.study, &specs)?;
    let filter = Filter::parse(&args.filter)?;
    filter.check(&study)?;
    let plan = Plan::expand(&study).filtered(&filter);
    let mut out = std::io::stdout().lock();
    if args.count {
        writeln!(
            out,
            "study {}: {} combinations",
            study.name,
            plan.combinations.len()
        )?;
        writeln!(out, "before rules: {}", plan.total_before_rules)?;
        for (rule, reason, n) in &plan.excluded {
            writeln!(out, "excluded by {rule}: {n} ({reason})")?;
        }
        for (axis, values) in plan.counts() {
            let listed: Vec<String> = values.iter().map(|(v, n)| format!("{v}={n}")).collect();
            writeln!(out, "{axis}: {}", listed.join(" "))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    match args.format {
        Format::Ids => {
            for c in &plan.combinations {
                writeln!(out, "{}", c.id())?;
            }
        }
        Format::Csv => {
            let mut writer = csv::Writer::from_writer(out);
            writer.write_record([
                "id",
                "dataset",
                "model",
                "compression",
                "level",
                "algorithm",
                "format",
                "layout",
                "compiler",
                "tuned",
                "device",
                "batch",
            ])?;
            for c in &plan.combinations {
                let mut record = vec![c.id()];
                record.extend(
                    dlas_core::study::AXES
                        .iter()
                        .map(|a| c.get(a).unwrap_or_default()),
                );
                writer.write_record(&record)?;
            }
            writer.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
