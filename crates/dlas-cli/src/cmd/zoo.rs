//! `dlas zoo`: list the networks, export them as ONNX.

use crate::project::Project;
use anyhow::Result;
use std::io::Write;
use std::process::ExitCode;
#[cfg(feature = "host")]
use {
    anyhow::Context,
    dlas_core::{Algorithm, Combination, Compression, Dataset, Format, Layout, Study},
    dlas_zoo::weights::MODEL_SEED as DEFAULT_SEED,
    dlas_zoo::{catalogue, weights},
    sha2::{Digest, Sha256},
    std::path::PathBuf,
};

#[derive(clap::Subcommand)]
pub enum Command {
    /// One line per network of the zoo (the DLAS study's, the modern
    /// architectures, the block-repeat models): model, dataset, params, MACs, layers.
    List {
        #[arg(long, value_enum, default_value_t = ListFormat::Csv)]
        format: ListFormat,
    },
    /// Write one network as an ONNX file with seeded weights.
    #[cfg(feature = "host")]
    Export {
        model: String,
        #[arg(long)]
        dataset: Dataset,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
    },
    /// Write the DLAS study's networks and every other zoo network a study
    /// names, and the DLAS study's compressions (into `compressed/`), into a
    /// folder; print `sha256  file` lines (the lock format).
    #[cfg(feature = "host")]
    ExportAll {
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ListFormat {
    Csv,
    Table,
}

#[cfg_attr(not(feature = "host"), allow(unused_variables))]
pub fn run(project: &Project, command: &Command) -> Result<ExitCode> {
    match command {
        Command::List { format } => list(*format)?,
        #[cfg(feature = "host")]
        Command::Export {
            model,
            dataset,
            out,
            seed,
        } => {
            let net = dlas_zoo::find(*dataset, model)?;
            let digest = export(net, out, *seed)?;
            dlas_core::outln!("{digest}  {}", out.display());
        }
        #[cfg(feature = "host")]
        Command::ExportAll { out, seed } => {
            for net in studied_networks(project)? {
                let file = format!("{}-{}.onnx", net.dataset, net.name);
                let digest = export(net, &out.join(&file), *seed)?;
                dlas_core::outln!("{digest}  {file}");
            }
            // The compressed models the dlas study runs: its pruning levels
            // (the native engine's sparse formats read their zeros) and the
            // fp16 and int8 files of the runtimes.
            let study = Study::load("dlas", &project.studies_dir())?;
            for net in catalogue() {
                for entry in &study.compressions {
                    let compression = entry.id;
                    if compression == Compression::Dense {
                        continue;
                    }
                    let level = study.level(entry, net.name);
                    let c = Combination {
                        dataset: net.dataset,
                        model: net.name.into(),
                        compression,
                        level,
                        algorithm: Algorithm::Auto,
                        format: Format::Dense,
                        layout: Layout::Nchw,
                        compiler: String::new(),
                        tuned: false,
                        device: String::new(),
                        batch: 1,
                    };
                    let bytes = dlas_runner::models::compressed_onnx(&c)?;
                    let file = format!(
                        "compressed/{}-{}-{compression}-{}.onnx",
                        net.dataset,
                        net.name,
                        dlas_core::plan::format_level(level)
                    );
                    dlas_core::atomic::write_atomic(&out.join(&file), &bytes)?;
                    dlas_core::outln!("{}  {file}", hex::encode(Sha256::digest(&bytes)));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "host")]
/// The DLAS study's networks, then every other zoo network some study names
/// (user ONNX models aside), in study order: the files `data/models.lock`
/// pins, so a study's host runs find their models pinned and networks no
/// study runs are not.
fn studied_networks(project: &Project) -> Result<Vec<&'static dlas_zoo::Network>> {
    let dir = project.studies_dir();
    let mut nets: Vec<&'static dlas_zoo::Network> = catalogue().iter().collect();
    for name in dlas_core::study::list_studies(&dir) {
        let study = Study::load(&name, &dir)?;
        for (dataset, model) in study.models() {
            if study.onnx_model(&model).is_some() {
                continue;
            }
            let net = dlas_zoo::find(dataset, &model)?;
            if !nets.iter().any(|n| std::ptr::eq(*n, net)) {
                nets.push(net);
            }
        }
    }
    Ok(nets)
}

fn list(format: ListFormat) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let header = ["model", "dataset", "params", "macs", "layers"];
    let rows: Vec<[String; 5]> = dlas_zoo::all()
        .map(|n| {
            let g = (n.build)();
            [
                n.name.to_string(),
                n.dataset.to_string(),
                g.params().to_string(),
                g.macs().to_string(),
                g.weighted_layers().count().to_string(),
            ]
        })
        .collect();
    match format {
        ListFormat::Csv => {
            let mut w = csv::Writer::from_writer(out);
            w.write_record(header)?;
            for r in &rows {
                w.write_record(r)?;
            }
            w.flush()?;
        }
        ListFormat::Table => {
            writeln!(
                out,
                "{:<22} {:<9} {:>11} {:>13} {:>7}",
                header[0], header[1], header[2], header[3], header[4]
            )?;
            for r in &rows {
                writeln!(
                    out,
                    "{:<22} {:<9} {:>11} {:>13} {:>7}",
                    r[0], r[1], r[2], r[3], r[4]
                )?;
            }
        }
    }
    Ok(())
}

/// Writes one network atomically and returns the file's sha256.
#[cfg(feature = "host")]
fn export(net: &dlas_zoo::Network, out: &std::path::Path, seed: u64) -> Result<String> {
    let graph = (net.build)();
    let bytes = dlas_onnx::export(&graph, &weights::generate(&graph, seed));
    dlas_core::atomic::write_atomic(out, &bytes)
        .with_context(|| format!("cannot export {} {}", net.dataset, net.name))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}
