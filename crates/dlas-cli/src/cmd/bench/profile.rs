//! `dlas bench profile`: where a network's time goes, the native engine's
//! steps beside ONNX Runtime's nodes (`dlas_runner::profile` measures
//! both), printed by output map and by kind.

use anyhow::Result;
use dlas_core::{Algorithm, Combination, Compression, Dataset, Layout};
use dlas_runner::profile::ROUNDS;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The study whose model file is profiled.
    #[arg(long, default_value = "dlas")]
    study: String,
    #[arg(long, default_value = "imagenet")]
    dataset: Dataset,
    #[arg(long, default_value = "mobilenetv2")]
    model: String,
    /// The engine's algorithm (direct, gemm, spatial-pack, winograd).
    #[arg(long, default_value = "direct")]
    algorithm: Algorithm,
    #[arg(long, default_value = "nchw16c")]
    layout: Layout,
    /// Also list every step and node, in order, with its shapes.
    #[arg(long)]
    steps: bool,
    /// Timed runs of each side (after untimed ones in each round).
    #[arg(long, default_value_t = 100, value_parser = crate::cmd::bounds::runs)]
    runs: usize,
    #[arg(long, default_value_t = 2, value_parser = crate::cmd::bounds::threads)]
    threads: usize,
    /// Profile the engine with the tuned schedules of this best-of file
    /// (`dlas tune`, `dlas bench tune --records`; layers it lacks keep
    /// their default) instead of the untuned one.
    #[arg(long)]
    tuning: Option<std::path::PathBuf>,
}

pub fn run(project: &crate::project::Project, args: &Args) -> Result<ExitCode> {
    let specs = project.specs()?;
    let study = project.study(&args.study, &specs)?;
    let library = dlas_backends::ort_runtime::library_path(&project.root);
    dlas_backends::ort_runtime::init(&library)?;
    let mut models = dlas_runner::models::Models::new(&project.root)?;
    let reference = Combination {
        algorithm: Algorithm::Auto,
        compression: Compression::Dense,
        ..Combination::host(args.dataset, &args.model, "ort-opt")
    };
    let path = models.path(&study, &reference)?;
    let input = dlas_runner::models::input(&reference, study.protocol.seed);
    let native = Combination {
        algorithm: args.algorithm,
        layout: args.layout,
        ..Combination::host(args.dataset, &args.model, dlas_core::NATIVE)
    };
    let bar = indicatif::ProgressBar::new(ROUNDS as u64).with_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} rounds, {elapsed}")
            .expect("template"),
    );
    bar.set_message(format!("{}/{}", args.dataset, args.model));
    let tuned = (args.tuning.as_deref())
        .map(|t| dlas_runner::tuning::Tuned::load(t, false))
        .transpose()?;
    let profile = dlas_runner::profile::profile(
        &path,
        (&native, tuned.as_ref()),
        &input,
        (args.runs, args.threads),
        || bar.inc(1),
    )?;
    bar.finish_and_clear();
    let (a, b) = (&profile.native, &profile.ort);
    dlas_core::outln!(
        "# {}/{} batch 1, {} thread(s), {} timed runs each, medians: native {} {} ({}) against ONNX Runtime {} (all optimizations)",
        args.dataset,
        args.model,
        args.threads,
        profile.runs,
        args.algorithm,
        args.layout,
        args.tuning
            .as_ref()
            .map_or("default schedules".to_string(), |t| format!(
                "tuned schedules from {}",
                t.display()
            )),
        dlas_backends::ort_runtime::VERSION
    );
    dlas_core::outln!("input_map,native_ms,native_steps,ort_ms,ort_nodes,native_over_ort");
    let (a_maps, b_maps) = (a.by_map(), b.by_map());
    let maps: std::collections::BTreeSet<_> = a_maps.keys().chain(b_maps.keys()).copied().collect();
    for map in maps.into_iter().rev() {
        let (x, n) = a_maps.get(&map).copied().unwrap_or_default();
        let (y, m) = b_maps.get(&map).copied().unwrap_or_default();
        dlas_core::outln!(
            "{}x{},{:.3},{n},{:.3},{m},{}",
            map.0,
            map.1,
            x * 1e3,
            y * 1e3,
            ratio(x, y)
        );
    }
    dlas_core::outln!(
        "all,{:.3},{},{:.3},{},{}",
        a.total() * 1e3,
        a.items.len(),
        b.total() * 1e3,
        b.items.len(),
        ratio(a.total(), b.total())
    );
    dlas_core::outln!(
        "whole run,{:.3},,{:.3},,{}",
        a.run * 1e3,
        b.run * 1e3,
        ratio(a.run, b.run)
    );
    for (name, side) in [("native", a), ("ort", b)] {
        dlas_core::outln!();
        dlas_core::outln!("{name}_kind,ms,count,share");
        let mut kinds: Vec<_> = side.by_kind().into_iter().collect();
        kinds.sort_by(|x, y| y.1.0.total_cmp(&x.1.0).then(x.0.cmp(&y.0)));
        for (kind, (t, n)) in kinds {
            dlas_core::outln!("{kind},{:.3},{n},{:.1}%", t * 1e3, 100.0 * t / side.total());
        }
    }
    if args.steps {
        for (name, side) in [("native", a), ("ort", b)] {
            dlas_core::outln!();
            dlas_core::outln!("{name}_step,kind,input,output,ms");
            let shape = |[c, h, w]: [usize; 3]| format!("{c}x{h}x{w}");
            for (i, item) in side.items.iter().enumerate() {
                dlas_core::outln!(
                    "{i},{},{},{},{:.4}",
                    item.kind,
                    shape(item.input),
                    shape(item.output),
                    item.seconds * 1e3
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `a / b` with two decimals, empty where `b` has no time.
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        String::new()
    }
}
