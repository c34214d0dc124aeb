//! `dlas accuracy`: top-1 and top-5 of an ONNX model on a dataset folder.

use anyhow::{Context, Result};
use dlas_compress::accuracy::{DatasetDir, accuracy};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The ONNX model (float32 or float16 input).
    #[arg(long)]
    model: PathBuf,
    /// `cifar10:DIR` (binary version, test_batch.bin) or `imagenet:DIR` (one sub-folder per class).
    #[arg(long)]
    dataset: DatasetDir,
    /// Evaluate only the first N samples.
    #[arg(long)]
    limit: Option<usize>,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let model = std::fs::read(&args.model)
        .with_context(|| format!("cannot read model {}", args.model.display()))?;
    let items = args.dataset.items(args.limit)?;
    let acc = accuracy(&model, args.dataset.dataset, &items)
        .with_context(|| format!("cannot evaluate {}", args.model.display()))?;
    dlas_core::outln!(
        "{} on {} ({} samples): top-1 {:.2}%, top-5 {:.2}%",
        args.model.display(),
        args.dataset.dataset,
        acc.samples,
        acc.top1,
        acc.top5
    );
    Ok(ExitCode::SUCCESS)
}
