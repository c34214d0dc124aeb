//! `dlas compress` and `dlas sweep`: compress a zoo network and report on it.

use crate::facts;
use crate::project::Project;
use anyhow::{Context, Result};
use dlas_compress::{
    CalibrationMethod, CompressionReport, Removal, Request, Scope, Tract, compress, sweep_levels,
};
use dlas_core::{Compression, Dataset, Study};
use dlas_zoo::weights;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options shared by `compress` and `sweep`.
#[derive(clap::Args)]
pub struct Options {
    /// Network name (see `dlas zoo list`).
    model: String,
    #[arg(long)]
    dataset: Dataset,
    /// dense, weight-pruning, channel-pruning, fp16 or int8.
    #[arg(long)]
    technique: Compression,
    /// Channel pruning: zero the channels (sparse formats) or remove them.
    #[arg(long, default_value = "zero")]
    removal: Removal,
    /// Weight pruning: one global threshold, or each layer to the level.
    #[arg(long, value_enum, default_value_t = ScopeArg::Global)]
    scope: ScopeArg,
    /// Int8: number of seeded calibration inputs.
    #[arg(long, default_value_t = 32)]
    calibration: usize,
    /// Int8: `minmax` or `percentile:P` (e.g. percentile:99.99).
    #[arg(long, default_value = "minmax")]
    calibration_method: CalibrationMethod,
    /// Seed of the weights and of the calibration inputs.
    #[arg(long, default_value_t = dlas_zoo::weights::MODEL_SEED)]
    seed: u64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ScopeArg {
    Global,
    LayerWise,
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    options: Options,
    /// Fraction pruned (pruning only); by default the study's level for this network.
    #[arg(long)]
    level: Option<f64>,
    /// Where to write the ONNX file; by default the cache .cache/models/compressed/.
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(clap::Args)]
pub struct SweepArgs {
    #[command(flatten)]
    options: Options,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Json,
}

impl Options {
    fn request(&self, graph: &dlas_zoo::Graph, level: Option<f64>) -> Request {
        let mut request = Request::new(self.technique, level);
        request.removal = self.removal;
        request.scope = match self.scope {
            ScopeArg::Global => Scope::Global,
            ScopeArg::LayerWise => Scope::LayerWise,
        };
        if self.technique == Compression::Int8 {
            request = request.seeded_calibration(
                graph,
                self.seed,
                self.calibration,
                self.calibration_method,
            );
        }
        request
    }

    /// The cache key: everything that changes the compressed model.
    fn key(&self, level: Option<f64>) -> String {
        let canonical = format!(
            "model={};dataset={};technique={};level={level:?};seed={};removal={:?};scope={:?};calibration={};method={:?}",
            self.model,
            self.dataset,
            self.technique,
            self.seed,
            self.removal,
            self.scope as u8,
            self.calibration,
            self.calibration_method
        );
        hex::encode(&Sha256::digest(canonical.as_bytes())[..8])
    }
}

/// The level the study runs for `model`, where the pruning techniques need
/// one: the elbow of the accuracies recorded in data/accuracy/published.csv,
/// else the level of the dlas study file.
fn study_level(project: &Project, options: &Options) -> Result<Option<f64>> {
    if !options.technique.is_pruning() {
        return Ok(None);
    }
    let study = Study::load("dlas", &project.studies_dir())?;
    let published = facts::published(project)?;
    facts::chosen_level(
        &study,
        &published,
        options.dataset,
        &options.model,
        options.technique,
    )
    .with_context(|| {
        format!(
            "the dlas study has no {} level; pass --level",
            options.technique
        )
    })
    .map(Some)
}

pub fn run(project: &Project, args: &Args) -> Result<ExitCode> {
    let o = &args.options;
    let net = dlas_zoo::find(o.dataset, &o.model)?;
    let graph = (net.build)();
    let weights = weights::generate(&graph, o.seed);
    let level = match args.level {
        Some(level) => Some(level),
        None => study_level(project, o)?,
    };
    let compressed = compress(&graph, &weights, &o.request(&graph, level), &Tract)?;
    let out = args.out.clone().unwrap_or_else(|| {
        project.root.join(".cache/models/compressed").join(format!(
            "{}-{}-{}-{}.onnx",
            o.dataset,
            o.model,
            o.technique,
            o.key(level)
        ))
    });
    dlas_core::atomic::write_atomic(&out, &compressed.onnx()?)
        .with_context(|| format!("cannot write {}", out.display()))?;
    if let Some(params) = &compressed.int8 {
        let file = out.with_extension("int8.json");
        dlas_core::atomic::write_atomic(&file, serde_json::to_string_pretty(params)?.as_bytes())
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    let r = &compressed.report;
    let mut stdout = std::io::stdout().lock();
    match args.format {
        Format::Json => writeln!(stdout, "{}", serde_json::to_string_pretty(r)?)?,
        Format::Text => text(&mut stdout, r, &out)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn text(out: &mut impl Write, r: &CompressionReport, file: &std::path::Path) -> Result<()> {
    let level = r.level.map_or(String::new(), |l| format!(" {l}"));
    let removal = r
        .removal
        .map_or(String::new(), |m| format!(" ({m:?})").to_lowercase());
    writeln!(
        out,
        "{} {} {}{level}{removal}",
        r.dataset, r.model, r.technique
    )?;
    writeln!(out, "file         {}", file.display())?;
    writeln!(
        out,
        "params       {} of {} ({:.3}x)",
        r.params, r.params_dense, r.params_ratio
    )?;
    writeln!(
        out,
        "bytes        {} of {} ({:.3}x)",
        r.bytes, r.bytes_dense, r.bytes_ratio
    )?;
    writeln!(
        out,
        "macs         {} of {} ({:.1}%)",
        r.macs,
        r.macs_dense,
        100.0 * r.macs as f64 / r.macs_dense as f64
    )?;
    if let Some(c) = r.channels_pruned {
        writeln!(
            out,
            "channels     {:.1}% of convolution output channels pruned",
            100.0 * c
        )?;
    }
    // Global magnitude pruning can empty a layer whose weights are all
    // small (e.g. a classifier); the model then computes a constant.
    let empty: Vec<&str> = r
        .density
        .iter()
        .filter(|(_, d)| **d == 0.0)
        .map(|(name, _)| name.as_str())
        .collect();
    if !empty.is_empty() {
        writeln!(out, "empty layers {}", empty.join(", "))?;
    }
    let f = &r.fidelity;
    let snr = f.snr_db.map_or("inf".to_string(), |s| format!("{s:.2}"));
    writeln!(
        out,
        "fidelity     top-1 agreement {:.3}, relative L2 {:.4}, SNR {snr} dB ({} inputs)",
        f.top1_agreement, f.rel_l2, f.samples
    )?;
    Ok(())
}

pub fn sweep(args: &SweepArgs) -> Result<ExitCode> {
    let o = &args.options;
    let levels = sweep_levels(o.technique);
    anyhow::ensure!(
        !levels.is_empty(),
        "{} has no levels to sweep; sweep weight-pruning or channel-pruning",
        o.technique
    );
    let net = dlas_zoo::find(o.dataset, &o.model)?;
    let graph = (net.build)();
    let weights = weights::generate(&graph, o.seed);
    let mut w = csv::Writer::from_writer(std::io::stdout().lock());
    w.write_record([
        "level",
        "params_ratio",
        "bytes_ratio",
        "macs",
        "top1_agreement",
        "rel_l2",
        "snr_db",
    ])?;
    for level in levels {
        let c = compress(&graph, &weights, &o.request(&graph, Some(level)), &Tract)?;
        let (r, f) = (&c.report, &c.report.fidelity);
        w.write_record([
            level.to_string(),
            format!("{:.4}", r.params_ratio),
            format!("{:.4}", r.bytes_ratio),
            r.macs.to_string(),
            format!("{:.4}", f.top1_agreement),
            format!("{:.6}", f.rel_l2),
            f.snr_db.map_or("inf".into(), |s| format!("{s:.3}")),
        ])?;
        w.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}
