//! `dlas devices`: the device specifications, and `calibrate`, which
//! measures this machine into one (`data/devices/measured/`).

use crate::project::Project;
use anyhow::Result;
use dlas_devices::{DeviceKind, Origin};
use std::process::ExitCode;
#[cfg(feature = "host")]
use {
    anyhow::Context,
    dlas_core::calibration::{Machine, Peak},
    dlas_devices::DeviceSpec,
    dlas_runner::calibrate::{Extent, Progress},
    indicatif::{ProgressBar, ProgressStyle},
    std::path::PathBuf,
};

#[derive(clap::Subcommand)]
pub enum Command {
    /// One line per device: id, origin (specification or measured), peak GFLOP/s, DRAM GB/s.
    List,
    /// Measure this machine with micro-benchmarks (FMA and int8 peaks per
    /// instruction set and thread count, cache and DRAM bandwidth, parallel
    /// region and per-layer costs, the engine's kernels on a seeded grid of
    /// single layers) and write it as a device specification (origin
    /// "measured") with its layer timings. No network is run.
    #[cfg(feature = "host")]
    Calibrate {
        /// Threads, as the host runs use them (0: one per physical core).
        #[arg(long, default_value = "0", value_parser = super::bounds::threads)]
        threads: usize,
        /// Layer shapes per kernel class.
        #[arg(long, default_value_t = dlas_runner::calibrate::layers::DEFAULT_SHAPES)]
        shapes: usize,
        /// Schedules sampled per tuned layer.
        #[arg(long, default_value_t = 8)]
        schedules: usize,
        /// Folder to write `host.toml`, `host-layers.csv` and the environment record to.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn run(project: &Project, command: &Command) -> Result<ExitCode> {
    match command {
        Command::List => {
            let dir = project.root.join("data/devices");
            let host = dlas_devices::load_calibrated(&dir.join(dlas_devices::spec::MEASURED_DIR))?;
            dlas_core::outln!("id,origin,kind,peak_gflops,memory_gbs");
            for s in project.specs()?.iter().chain([&host]) {
                let origin = match s.origin {
                    Origin::Specification => "specification",
                    Origin::Measured => "measured",
                };
                let kind = match s.kind {
                    DeviceKind::Cpu => "cpu",
                    DeviceKind::Gpu => "gpu",
                };
                dlas_core::outln!(
                    "{},{origin},{kind},{:.1},{:.1}",
                    s.id,
                    s.peak_gflops(),
                    s.memory_gbs
                );
            }
        }
        #[cfg(feature = "host")]
        Command::Calibrate {
            threads,
            shapes,
            schedules,
            out,
        } => calibrate(project, *threads, *shapes, *schedules, out.clone())?,
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "host")]
struct Bar(ProgressBar);

#[cfg(feature = "host")]
impl Progress for Bar {
    fn stage(&mut self, name: &str) {
        self.0.set_message(name.to_string());
    }

    fn layer(&mut self, done: usize, total: usize) {
        self.0.set_length(total as u64);
        self.0.set_position(done as u64);
    }
}

#[cfg(feature = "host")]
fn calibrate(
    project: &Project,
    threads: usize,
    shapes: usize,
    schedules: usize,
    out: Option<PathBuf>,
) -> Result<()> {
    let threads = if threads == 0 {
        num_cpus::get_physical()
    } else {
        threads
    };
    let out = out.unwrap_or_else(|| {
        project
            .root
            .join("data/devices")
            .join(dlas_devices::spec::MEASURED_DIR)
    });
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} layers, {elapsed}")
            .expect("template"),
    );
    let calibration = dlas_runner::calibrate::calibrate(
        threads,
        Extent { shapes, schedules },
        &mut Bar(bar.clone()),
    )?;
    bar.finish_and_clear();
    let environment = dlas_runner::environment::detect(
        &project.root,
        "not used by the calibration".into(),
        vec![
            ("threads".into(), threads.to_string()),
            ("shapes".into(), shapes.to_string()),
            ("schedules".into(), schedules.to_string()),
        ],
    );
    environment.save(&out)?;
    let spec = spec_of(
        &calibration.machine,
        &environment.cpu_model,
        environment.id(),
    );
    let toml = format!(
        "# This machine, measured by `dlas devices calibrate` ({}); regenerate, do not edit.\n{}",
        environment.id(),
        toml::to_string(&spec)?
    );
    dlas_core::atomic::write_atomic(&out.join("host.toml"), toml.as_bytes())?;
    dlas_core::atomic::write_atomic(
        &out.join("host-layers.csv"),
        &dlas_core::calibration::layer_timings_csv(&calibration.layers)?,
    )?;
    // Fitting the curves now fails here, not in a later report, if the
    // calibration cannot carry them.
    let host = dlas_devices::load_calibrated(&out)?;
    let m = &calibration.machine;
    dlas_core::outln!(
        "{} on {threads} thread(s): fp32 peak {:.1} GFLOP/s, int8 {:.1} GMAC/s, FMA latency {:.2} ns, DRAM {:.1} GB/s, region {:.1} us, layer {:.1} us, run {:.1} us; {} layer timings in {} classes; wrote {}",
        spec.name,
        spec.peak_gflops(),
        best(&m.int8, threads),
        m.fma_latency_ns,
        spec.memory_gbs,
        m.region_us,
        m.layer_us,
        m.run_us,
        calibration.layers.len(),
        host.efficiency.as_ref().map_or(0, |e| e.curves.len()),
        out.display()
    );
    dlas_core::outln!(
        "{} of {} timings kept outside the machine's near state (it did not come within 10 s; docs/protocol.md, \"Two states\")",
        calibration.outside,
        calibration.windows
    );
    Ok(())
}

#[cfg(feature = "host")]
/// The fastest rate among `peaks` on `threads` threads, GMAC/s.
fn best(peaks: &[Peak], threads: usize) -> f64 {
    peaks
        .iter()
        .filter(|p| p.threads == threads)
        .map(|p| p.gmacs)
        .fold(0.0, f64::max)
}

#[cfg(feature = "host")]
/// The measured machine in the mocked devices' format. The widest FMA's
/// rate per thread is `fma_lanes x clock_ghz`: lanes come from the
/// instruction set (8 fp32 lanes in AVX2, 16 in AVX-512, two FMA pipes as the scalar
/// rate against the FMA latency shows), the clock is then what the
/// measurement implies (an effective clock, not the nominal one).
fn spec_of(m: &Machine, cpu: &str, environment: String) -> DeviceSpec {
    let threads = m.threads;
    let per_thread = |isa: &str, t: usize| {
        m.fma
            .iter()
            .filter(|p| p.isa == isa && p.threads == t)
            .map(|p| p.gmacs)
            .fold(0.0, f64::max)
            / t as f64
    };
    let widest = m
        .fma
        .iter()
        .max_by_key(|p| isa_lanes(&p.isa))
        .map_or("scalar", |p| &p.isa);
    let lanes = isa_lanes(widest);
    // A dependent FMA completes once per latency, independent ones `pipes`
    // per cycle; with the latency in cycles, the clock is that latency
    // over the measured nanoseconds, and pipes the scalar rate over it.
    let clock_from_latency = FMA_LATENCY_CYCLES as f64 / m.fma_latency_ns;
    let pipes = (per_thread("scalar", 1) / clock_from_latency)
        .round()
        .max(1.0) as usize;
    let fma_lanes = lanes * pipes;
    let clock_ghz = per_thread(widest, threads) / fma_lanes as f64;
    let fp32_all = per_thread(widest, threads) * threads as f64;
    let dram = m
        .bandwidth
        .iter()
        .find(|b| b.level == "DRAM")
        .map_or(1.0, |b| b.gbs);
    let llc_kib = m.caches.iter().map(|c| c.kib).max().unwrap_or(1);
    DeviceSpec {
        id: "host".into(),
        name: format!("{cpu} ({threads} threads, measured)"),
        kind: DeviceKind::Cpu,
        cores: threads,
        fma_lanes,
        fma_pipes: pipes,
        fma_latency: FMA_LATENCY_CYCLES,
        clock_ghz: round(clock_ghz, 4),
        memory_gbs: round(dram, 2),
        llc_kib,
        fp16_rate: 1.0,
        int8_rate: round(best(&m.int8, threads) / fp32_all, 4),
        launch_us: round(m.layer_us, 3),
        dispatch_us: round(m.layer_us, 3),
        loads_per_cycle: 2,
        noise_cv: 0.0,
        sources: vec![
            format!("`dlas devices calibrate` on this machine ({environment}); the micro-benchmarks are in [measured]"),
            format!("fma_pipes: the scalar FMA rate over the clock implied by the measured FMA latency ({:.2} ns) taken as {FMA_LATENCY_CYCLES} cycles (x86 since Skylake and Zen 2; an assumption)", m.fma_latency_ns),
            format!("clock_ghz: the {widest} FMA peak per thread over fma_lanes (an effective clock; only their product, the measured peak, enters the model)"),
            "fp16_rate: the engine stores fp16 and computes in fp32 (F16C conversions), so 1".into(),
            "int8_rate: the fastest int8 step's peak (vpmaddubsw/vpmaddwd, or AVX-512 VNNI vpdpbusd) over the widest fp32 FMA's peak, both on every thread".into(),
            "launch_us and dispatch_us: the engine's cost per layer (slope of a chain of tiny layers)".into(),
            "loads_per_cycle: not measured; unused by the CPU model since version 2".into(),
        ],
        origin: Origin::Measured,
        environment: Some(environment),
        measured: Some(m.clone()),
        efficiency: None,
    }
}

#[cfg(feature = "host")]
/// The FMA latency in cycles of every x86 core since Skylake and Zen 2,
/// used only to split the measured peak into pipes and clock.
const FMA_LATENCY_CYCLES: usize = 4;

#[cfg(feature = "host")]
fn isa_lanes(isa: &str) -> usize {
    match isa {
        "avx512-fma" => 16,
        "avx2-fma" => 8,
        "sse-fma" => 4,
        _ => 1,
    }
}

#[cfg(feature = "host")]
fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}
