//! `dlas bench tune`: what the native tuner buys, network by network.
//!
//! Each network's untuned and tuned engines (direct, GEMM and spatial
//! pack in NCHW, and the blocked layout NCHW16c, whose tasks the tuner
//! sizes) and ONNX Runtime are timed as the campaigns time rows
//! (`dlas_runner::rounds`: interleaved rounds, each configuration until
//! its median is known within ±1% or its budget is spent), each right
//! after its network's search, so every ratio carries its 95% interval.
//! Per configuration the geometric mean of tuned over untuned is decided
//! against issue 42's target (at least 1.15x): inside the interval is a
//! tie. With `--equal-split` each configuration is also searched with the
//! budget split equally over its layers and timed beside the task
//! scheduler's split.

use super::{apart, geometric_mean, ratio, time_configurations, verdict};
use anyhow::Result;
use dlas_core::{Algorithm, Combination, Dataset, Layout};
use dlas_runner::rounds::{Adaptive, NearState, Slot};
use dlas_runner::tuning::{self, TuneConfig, TuneReport, Tuned};
use dlas_tune::allocate::Split;
use dlas_tune::{Budget, Timer};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Candidates per layer on average (the campaigns' budget by default).
    #[arg(long, default_value_t = 24)]
    trials: usize,
    /// Stop a layer after this many candidates without improvement.
    #[arg(long, default_value_t = 8)]
    early_stop: usize,
    /// Networks as dataset/model, comma-separated (default: every network
    /// of the DLAS study).
    #[arg(long, value_delimiter = ',')]
    networks: Vec<String>,
    /// Timed runs of each configuration before it may stop.
    #[arg(long, default_value_t = 20, value_parser = crate::cmd::bounds::runs)]
    runs: usize,
    /// Seconds of runs after which a configuration stops once it has
    /// `runs` (earlier when its median is known within ±1%).
    #[arg(long, default_value_t = 10)]
    budget_s: u64,
    #[arg(long, default_value_t = 2, value_parser = crate::cmd::bounds::threads)]
    threads: usize,
    /// Also search each configuration with the budget split equally over
    /// its layers, and time it beside the task scheduler's split.
    #[arg(long)]
    equal_split: bool,
    /// Keep the records here (default: a fresh search in a temporary directory).
    #[arg(long)]
    records: Option<PathBuf>,
}

/// Tuned over untuned that issue 42 asks of the native tuner, as a
/// geometric mean over the networks, under each configuration.
const SPEEDUP_TARGET: f64 = 1.15;

/// One network's speedup under a configuration with its 95% interval,
/// and the two engines' median round trips (one machine state or not).
type Speedup = ((f64, f64, f64), (Option<f64>, Option<f64>));

/// A configuration of the native engine the tuner is asked about.
struct Config {
    name: &'static str,
    algorithm: Algorithm,
    layout: Layout,
}

const CONFIGS: [Config; 4] = [
    Config {
        name: "direct",
        algorithm: Algorithm::Direct,
        layout: Layout::Nchw,
    },
    Config {
        name: "gemm",
        algorithm: Algorithm::Gemm,
        layout: Layout::Nchw,
    },
    Config {
        name: "spatial-pack",
        algorithm: Algorithm::SpatialPack,
        layout: Layout::Nchw,
    },
    // The blocked layout's rows are kept under direct (rule
    // `nchw16c-under-direct`).
    Config {
        name: "nchw16c",
        algorithm: Algorithm::Direct,
        layout: Layout::Nchw16c,
    },
];

pub fn run(project: &crate::project::Project, args: &Args) -> Result<ExitCode> {
    let specs = project.specs()?;
    let study = project.study("dlas", &specs)?;
    let library = dlas_backends::ort_runtime::library_path(&project.root);
    dlas_backends::ort_runtime::init(&library)?;
    let networks = networks(&study, &args.networks)?;
    let scratch = tempfile::tempdir()?;
    let records = (args.records.clone()).unwrap_or_else(|| scratch.path().join("records.jsonl"));
    let mut models = dlas_runner::models::Models::new(&project.root)?;
    let budget = Budget {
        trials: args.trials,
        early_stop: args.early_stop,
    };
    let protocol = Adaptive {
        warmup: 2,
        min_runs: args.runs,
        max_runs: 1000,
        half_width: 0.01,
        budget: Duration::from_secs(args.budget_s),
        budget_runs: args.runs,
        timeout: Duration::from_secs(600),
    };
    let mut near = NearState::probe(protocol.near_probe());
    dlas_core::outln!(
        "network,configuration,layers,trials,search_s,layer_speedup_mean,search_vs_confirmed_mean,untuned_ms,tuned_ms,speedup,speedup_low,speedup_high,tuned_vs_ort,equal_split_ms,equal_split_over_scheduler"
    );
    let mut speedups: Vec<Vec<Speedup>> = vec![Vec::new(); CONFIGS.len()];
    let mut shares = Vec::new();
    for (dataset, model) in networks {
        let reference = Combination {
            algorithm: Algorithm::Auto,
            ..Combination::host(dataset, &model, "ort-opt")
        };
        let path = models.path(&study, &reference)?;
        let input = dlas_runner::models::input(&reference, study.protocol.seed);
        let [c, h, w] = dataset.input_chw();
        let session = dlas_backends::SessionConfig {
            input_shape: [1, c, h, w],
            threads: args.threads,
            half_io: false,
            tvm: None,
        };
        let mut names = vec!["ort-opt".to_string()];
        let mut slots = vec![Slot {
            session: dlas_backends::load("ort-opt", &path, &session)?,
            input: input.clone(),
            key: 0,
        }];
        let mut searches: Vec<(usize, TuneReport, f64)> = Vec::new();
        for (i, config) in CONFIGS.iter().enumerate() {
            let native = |tuned| Combination {
                algorithm: config.algorithm,
                layout: config.layout,
                tuned,
                ..Combination::host(dataset, &model, dlas_core::NATIVE)
            };
            let search = |split: Split, suffix: &str| -> Result<(TuneReport, f64, PathBuf)> {
                let records = records.with_extension(format!("{suffix}jsonl"));
                let best = records.with_extension("best.json");
                let tune = TuneConfig {
                    project_root: project.root.clone(),
                    records,
                    best: best.clone(),
                    threads: args.threads,
                    budget,
                    timer: Timer::default(),
                    seed: study.protocol.seed,
                    split,
                };
                let started = Instant::now();
                let report = tuning::tune_host(&study, &[native(true)], &tune)?;
                Ok((report, started.elapsed().as_secs_f64(), best))
            };
            let (report, seconds, best) = search(Split::ByShare, "")?;
            let mut add = |name: String, session| {
                slots.push(Slot {
                    session,
                    input: input.clone(),
                    key: names.len(),
                });
                names.push(name);
            };
            let load = |c: &Combination, t: Option<&Tuned>| {
                dlas_runner::native::load(&path, c, args.threads, t)
            };
            add(
                format!("{} untuned", config.name),
                load(&native(false), None)?,
            );
            let tuned = Tuned::load(&best, false)?;
            add(
                format!("{} tuned", config.name),
                load(&native(true), Some(&tuned))?,
            );
            if args.equal_split {
                let (_, _, best) = search(Split::Equal, "equal.")?;
                let tuned = Tuned::load(&best, false)?;
                add(
                    format!("{} equal split", config.name),
                    load(&native(true), Some(&tuned))?,
                );
            }
            searches.push((i, report, seconds));
        }
        let label = format!("{dataset}/{model}");
        let (summaries, trips) = time_configurations(
            slots,
            &names,
            (&protocol, study.protocol.seed),
            &mut near,
            &label,
        )?;
        let per = if args.equal_split { 3 } else { 2 };
        for (i, report, seconds) in searches {
            let at = 1 + i * per;
            let (untuned, tuned) = (&summaries[at], &summaries[at + 1]);
            // The speedup is untuned over tuned time; its interval the
            // widest the two medians' intervals allow.
            let (s, low, high) = ratio(untuned, tuned);
            let pair = (trips[at + 1], trips[at]);
            speedups[i].push(((s, low, high), pair));
            // Means over the tasks searched or confirmed (blank for none).
            let mean = |v: &[f64]| match v.len() {
                0 => String::new(),
                n => format!("{:.3}", v.iter().sum::<f64>() / n as f64),
            };
            let (mean, curse) = (mean(&report.speedups), mean(&report.curse));
            let (equal_ms, share) = if args.equal_split {
                let e = &summaries[at + 2];
                shares.push(e.median / tuned.median);
                (
                    format!("{:.3}", e.median),
                    format!("{:.3}", e.median / tuned.median),
                )
            } else {
                Default::default()
            };
            dlas_core::outln!(
                "{dataset}/{model},{},{},{},{seconds:.1},{mean},{curse},{:.3},{:.3},{s:.3},{low:.3},{high:.3},{:.2},{equal_ms},{share}",
                CONFIGS[i].name,
                report.tasks,
                report.trials,
                untuned.median,
                tuned.median,
                tuned.median / summaries[0].median,
            );
        }
    }
    dlas_core::outln!();
    for (config, pairs) in CONFIGS.iter().zip(&speedups) {
        // Decided on tuned over untuned time: at most 1 / 1.15 is met.
        let times = pairs
            .iter()
            .map(|&((s, low, high), _)| (1.0 / s, 1.0 / high, 1.0 / low));
        let (mean, low, high) = geometric_mean(times);
        let trip = pairs
            .iter()
            .map(|&(_, t)| t)
            .find(|&t| apart(t))
            .unwrap_or((None, None));
        dlas_core::outln!(
            "{}: tuned over untuned {:.3}x as a geometric mean over {} networks (95% at most {:.3}-{:.3}), target at least {SPEEDUP_TARGET:.2}x: {}",
            config.name,
            1.0 / mean,
            pairs.len(),
            1.0 / high,
            1.0 / low,
            verdict((low, high), 1.0 / SPEEDUP_TARGET, trip)
        );
    }
    if args.equal_split {
        let geomean =
            (shares.iter().map(|r| r.ln()).sum::<f64>() / shares.len().max(1) as f64).exp();
        dlas_core::outln!(
            "equal split over the task scheduler's, network time at the same budget: geometric mean {geomean:.3}x over {} networks and configurations (above 1: the scheduler's engines are faster)",
            shares.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The networks asked for (`dataset/model`), each one of the DLAS study's,
/// or all of them.
fn networks(study: &dlas_core::Study, asked: &[String]) -> Result<Vec<(Dataset, String)>> {
    let all: Vec<(Dataset, String)> = study
        .datasets
        .iter()
        .flat_map(|d| d.models.iter().map(move |m| (d.id, m.get_ref().clone())))
        .collect();
    if asked.is_empty() {
        return Ok(all);
    }
    asked
        .iter()
        .map(|a| {
            all.iter()
                .find(|(d, m)| format!("{d}/{m}") == *a)
                .cloned()
                .ok_or_else(|| {
                    let known: Vec<String> = all.iter().map(|(d, m)| format!("{d}/{m}")).collect();
                    anyhow::anyhow!(
                        "--networks: {a:?} is not a network of the DLAS study (one of {})",
                        known.join(", ")
                    )
                })
        })
        .collect()
}
