//! `dlas bench harness`: the timing loop's own cost per timed run.
//! (`dlas bench cluster`, the coordinator at scale, is in [`cluster`].)
//!
//! The same `timing::measure` that times every combination times a session
//! that does no work (it returns its input), so what it measures is the
//! harness: clock reads, the call, and the output's allocation. It must stay
//! under 5 µs per run, far below the smallest inference time reported.

mod cluster;

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
        #[arg(long, default_value_t = 10_000, value_parser = super::bounds::runs)]
        runs: usize,
    },
    /// The native engine's algorithms against ONNX Runtime and tract on whole
    /// networks (ResNet-18 CIFAR-10; MobileNetV2, ResNet-50, EfficientNet-B0
    /// and ViT-S/16 ImageNet), batch 1, in one run.
    Engine {
        #[arg(long, default_value_t = 20, value_parser = super::bounds::runs)]
        runs: usize,
        #[arg(long, default_value_t = 2, value_parser = super::bounds::threads)]
        threads: usize,
    },
    /// Tuned against untuned native engine, per layer and per network, and
    /// against ONNX Runtime (ResNet-18 CIFAR-10, MobileNetV2 ImageNet), with
    /// the search time, in one run.
    Tune {
        /// Candidates per layer.
        #[arg(long, default_value_t = 200)]
        trials: usize,
        /// Stop a layer after this many candidates without improvement.
        #[arg(long, default_value_t = 50)]
        early_stop: usize,
        /// Timed runs of each whole network.
        #[arg(long, default_value_t = 20, value_parser = super::bounds::runs)]
        runs: usize,
        #[arg(long, default_value_t = 2, value_parser = super::bounds::threads)]
        threads: usize,
        /// Keep the records here (default: a fresh search in a temporary directory).
        #[arg(long)]
        records: Option<std::path::PathBuf>,
    },
    /// The coordinator at scale: a synthetic study of mocked devices is
    /// planned, submitted (Slurm, dry run), run and collected, each step timed.
    Cluster(cluster::Args),
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

pub fn run(project: &crate::project::Project, command: &Command) -> Result<ExitCode> {
    match command {
        Command::Engine { runs, threads } => engine(project, *runs, *threads),
        Command::Tune {
            trials,
            early_stop,
            runs,
            threads,
            records,
        } => super::tune::bench(
            project,
            dlas_tune::Budget {
                trials: *trials,
                early_stop: *early_stop,
            },
            *runs,
            *threads,
            records.clone(),
        ),
        Command::Cluster(args) => cluster::run(project, args),
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

/// Times every compiler on the same ONNX file and prints ratios against
/// ONNX Runtime and tract measured in the same run: the DLAS study's
/// ResNet-18 (CIFAR-10), MobileNetV2 and ResNet-50 (ImageNet) with int8
/// too, its EfficientNet-B0 (dense fp32: SiLU and squeeze-and-excitation,
/// which the other three lack), and the compiler study's ViT-S/16 (dense
/// fp32 only, as that study runs it).
fn engine(project: &crate::project::Project, runs: usize, threads: usize) -> Result<ExitCode> {
    use dlas_core::{Algorithm, Combination, Compression, Dataset};
    let specs = project.specs()?;
    let dlas = project.study("dlas", &specs)?;
    let compilers = project.study("compilers", &specs)?;
    let library = dlas_backends::ort_runtime::library_path(&project.root);
    dlas_backends::ort_runtime::init(&library)?;
    let mut models = dlas_runner::models::Models::new(&project.root)?;
    let protocol = Protocol {
        warmup: 2,
        runs,
        timeout: Duration::from_secs(600),
    };
    println!("network,compiler,median_ms,gflops,ratio_vs_ort_opt,ratio_vs_tract_opt");
    for (study, dataset, model, int8) in [
        (&dlas, Dataset::Cifar10, "resnet18", true),
        (&dlas, Dataset::Imagenet, "mobilenetv2", true),
        (&dlas, Dataset::Imagenet, "resnet50", true),
        (&dlas, Dataset::Imagenet, "efficientnet_b0", false),
        (&compilers, Dataset::Imagenet, "vit_s16", false),
    ] {
        let combination = |compiler: &str, algorithm: Algorithm, compression| Combination {
            algorithm,
            compression,
            ..Combination::host(dataset, model, compiler)
        };
        let reference = combination("ort-opt", Algorithm::Auto, Compression::Dense);
        let path = models.path(study, &reference)?;
        let input = dlas_runner::models::input(&reference, study.protocol.seed);
        let macs = (dlas_zoo::find(dataset, model)?.build)().macs() as f64;
        let [c, h, w] = dataset.input_chw();
        let config = dlas_backends::SessionConfig {
            input_shape: [1, c, h, w],
            threads,
            half_io: false,
        };
        let mut timed = Vec::new();
        for compiler in ["ort-opt", "tract-opt"] {
            let mut session = dlas_backends::load(compiler, &path, &config)?;
            timed.push((
                compiler.to_string(),
                median(measure(session.as_mut(), &input, protocol)?),
            ));
        }
        for algorithm in [
            Algorithm::Direct,
            Algorithm::Gemm,
            Algorithm::SpatialPack,
            Algorithm::Winograd,
        ] {
            let c = combination(dlas_core::NATIVE, algorithm, Compression::Dense);
            let mut session = dlas_runner::native::load(&path, &c, threads, None)?;
            timed.push((
                format!("native {algorithm}"),
                median(measure(session.as_mut(), &input, protocol)?),
            ));
        }
        if int8 {
            // int8: ONNX Runtime on the QDQ file, the engine with the same
            // quantisation parameters (its ratios are still against fp32 ORT).
            let int8 = combination("ort-opt", Algorithm::Auto, Compression::Int8);
            let int8_path = models.path(study, &int8)?;
            let mut session = dlas_backends::load("ort-opt", &int8_path, &config)?;
            timed.push((
                "ort-opt int8".into(),
                median(measure(session.as_mut(), &input, protocol)?),
            ));
            // The engine quantises the fp32 file itself (as `dlas run` does).
            let c = combination(dlas_core::NATIVE, Algorithm::Gemm, Compression::Int8);
            let mut session = dlas_runner::native::load(&path, &c, threads, None)?;
            timed.push((
                "native gemm int8".into(),
                median(measure(session.as_mut(), &input, protocol)?),
            ));
        }
        let (ort, tract) = (timed[0].1, timed[1].1);
        for (compiler, ms) in &timed {
            println!(
                "{dataset}/{model},{compiler},{ms:.3},{:.1},{:.2},{:.2}",
                2.0 * macs / (ms * 1e6),
                ms / ort,
                ms / tract
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn median(samples: Vec<f64>) -> f64 {
    Summary::from_samples(&samples).map_or(f64::NAN, |s| s.median)
}
