//! How the calibrated machine's kernel curves carry to another CPU, and
//! the cross-machine test of that step: predict one machine's measured
//! rows from another machine's calibration and the first one's
//! specification (`dlas validate --transfer`).
//!
//! A curve is a share of the calibrated machine's peak (`efficiency.rs`);
//! another CPU multiplies the same share by its own peak. What "its peak"
//! is decides whether the step carries. Three ways are compared
//! ([`Scaling`]):
//!
//! - [`Scaling::Unscaled`]: the other machine is priced as the calibrated
//!   one (its own figures ignored): the reference a scaling must beat.
//! - [`Scaling::Specification`]: `fma_lanes x clock` of the widest FMA, the
//!   clock ratio for fixed costs and the DRAM ratio for per-value costs,
//!   as the model has priced every mocked CPU since version 2.
//! - [`Scaling::PerIsa`]: each kernel class at the peak of the instruction
//!   set the engine's kernels of that class are written in
//!   ([`width_of`]), measured per instruction set where the machine was
//!   calibrated, and fixed costs by the core clock rather than the
//!   calibration's effective clock. Both are what the first cross-machine
//!   test exposed (docs/devices.md, "Another CPU"): a calibration takes
//!   `clock_ghz` as the widest FMA's peak over the lanes, so on Zen 4,
//!   which runs AVX-512 at half rate, the "clock" is half the core's, and
//!   the engine's direct and spatial-pack kernels, written in AVX2, do not
//!   gain the AVX-512 units of an Intel server core that `fma_lanes x
//!   clock` credits them with.
//!
//! Nothing here is fitted: every factor is a ratio of micro-benchmarks or
//! specification figures of the two machines, and which instruction set a
//! class uses is read from the engine's source (listed at [`width_of`]),
//! not from any network's time.

use crate::efficiency::Efficiency;
use crate::spec::{DeviceKind, DeviceSpec, MEASURED_DIR, load_calibrated, read_specs};
use anyhow::Result;
use dlas_core::calibration::{KernelClass, KernelFamily, Precision};
use std::path::Path;
use std::sync::Arc;

/// Reads every `*.toml` in `dir`, sorted by id, and attaches to every CPU
/// the efficiency curves fitted to the calibration in `dir/measured`,
/// carried to the CPU per instruction set ([`carry`]): a class reaches
/// the same share of the peak of the instruction set its kernels are
/// written in.
pub fn load_specs(dir: &Path) -> Result<Vec<DeviceSpec>> {
    let host = load_calibrated(&dir.join(MEASURED_DIR))?;
    let mut specs = read_specs(dir)?;
    for spec in specs.iter_mut().filter(|s| s.kind == DeviceKind::Cpu) {
        spec.efficiency = host
            .efficiency
            .as_deref()
            .map(|e| Arc::new(carry(e, &host, spec)));
    }
    Ok(specs)
}

/// How a calibration's curves are carried to another CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scaling {
    /// The other machine priced as the calibrated one.
    Unscaled,
    /// `fma_lanes x clock`, the clock and the DRAM bandwidth (model
    /// versions 2-4 for every mocked CPU).
    Specification,
    /// Each class at the peak of its instruction set; fixed costs by the
    /// core clock.
    PerIsa,
}

impl Scaling {
    pub const ALL: [Scaling; 3] = [Scaling::Unscaled, Scaling::Specification, Scaling::PerIsa];

    pub fn label(self) -> &'static str {
        match self {
            Scaling::Unscaled => "unscaled (priced as the calibrated machine)",
            Scaling::Specification => "specification (lanes x clock of the widest FMA)",
            Scaling::PerIsa => "per instruction set (each class at its ISA's measured peak)",
        }
    }

    pub fn id(self) -> &'static str {
        match self {
            Scaling::Unscaled => "unscaled",
            Scaling::Specification => "specification",
            Scaling::PerIsa => "per-isa",
        }
    }
}

/// The vector width the engine's kernels of a class are written in on an
/// x86 CPU with AVX-512.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// 256-bit AVX2 + FMA only.
    Avx2,
    /// The widest FMA the CPU has (AVX-512 where present).
    Widest,
}

/// Which width a class runs at, read from the engine's source
/// (`crates/dlas-engine/src/isa.rs`: "an AVX-512 version where the wider
/// registers pay"): dense direct convolution (`direct.rs`: `dense_avx2`,
/// `sparse_avx2`) and dense spatial pack (`spatial_pack.rs`: its tiles
/// take an `avx` flag, AVX2) have AVX2 kernels only; the GEMM microkernels
/// and the sparse GEMM that sparse spatial pack also runs
/// (`gemm/micro.rs`, `gemm/sparse.rs`), the depthwise stencils
/// (`depthwise.rs`), Winograd (`winograd/avx512.rs`) and every int8 kernel
/// (`int8/`: VNNI) have AVX-512 versions. If the engine changes which
/// kernels have AVX-512 versions, this table must follow.
pub fn width_of(class: KernelClass) -> Width {
    match (class.family, class.sparse, class.precision) {
        (_, _, Precision::I8) => Width::Widest,
        // The blocked layout's kernels use the widest vectors (V16).
        _ if class.layout == dlas_core::Layout::Nchw16c => Width::Widest,
        (KernelFamily::Direct, _, _) => Width::Avx2,
        (KernelFamily::SpatialPack, false, _) => Width::Avx2,
        _ => Width::Widest,
    }
}

/// A CPU's FMA rates per core (multiply-accumulates per second) and its
/// core clock, as the model reads them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// The widest FMA's rate: `fma_lanes x clock_ghz`, what the curves
    /// are a share of.
    pub widest: f64,
    /// The 256-bit (AVX2) FMA rate: measured where the machine was
    /// calibrated, else `fma_lanes_256 x clock_ghz` (or the widest, for a
    /// CPU whose widest FMA is no wider).
    pub avx2: f64,
    /// The core clock in GHz: the scalar FMA rate over the FMA pipes where
    /// measured (a calibration's `clock_ghz` is an effective clock), else
    /// the specification's clock.
    pub clock_ghz: f64,
}

impl Rates {
    pub fn of(spec: &DeviceSpec) -> Rates {
        let widest = spec.fma_lanes as f64 * spec.clock_ghz * 1e9;
        let measured = |isa: &str| -> Option<f64> {
            let m = spec.measured.as_ref()?;
            let peak = m
                .fma
                .iter()
                .filter(|p| p.isa == isa)
                .max_by_key(|p| p.threads)?;
            Some(peak.gmacs * 1e9 / peak.threads as f64)
        };
        let avx2 = measured("avx2-fma").unwrap_or_else(|| {
            spec.fma_lanes_256.unwrap_or(spec.fma_lanes) as f64 * spec.clock_ghz * 1e9
        });
        let clock_ghz = measured("scalar")
            .map(|scalar| scalar / spec.fma_pipes.max(1) as f64 / 1e9)
            .unwrap_or(spec.clock_ghz);
        Rates {
            widest,
            // A CPU without AVX-512 runs its AVX2 kernels at its widest rate.
            avx2: avx2.min(widest),
            clock_ghz,
        }
    }

    fn at(&self, width: Width) -> f64 {
        match width {
            Width::Avx2 => self.avx2,
            Width::Widest => self.widest,
        }
    }
}

/// `calibrated`'s curves carried to `device` per instruction set: each
/// class's efficiency (a share of the widest peak) is multiplied by how
/// much more of its widest peak the class's width is on `device` than on
/// the calibrated machine, and fixed costs scale by the core clocks. On
/// the calibrated machine itself every factor is 1.
pub fn carry(efficiency: &Efficiency, calibrated: &DeviceSpec, device: &DeviceSpec) -> Efficiency {
    let (from, to) = (Rates::of(calibrated), Rates::of(device));
    let mut carried = efficiency.clone();
    for (class, curve) in carried.curves.iter_mut() {
        let width = width_of(class.kernel);
        let factor = (to.at(width) / to.widest) / (from.at(width) / from.widest);
        curve.beta[0] += factor.ln();
    }
    // `Curve::cost` scales fixed costs by `device.clock_ghz` over this.
    carried.clock_ghz = device.clock_ghz * from.clock_ghz / to.clock_ghz;
    carried
}

/// The specification a calibration's model predicts `target`'s rows
/// with: `target`'s figures (its id made the calibrated machine's, as
/// rows measured on a calibrated machine name it) with `calibration`'s
/// curves carried by `scaling`.
pub fn transferred(calibration: &DeviceSpec, target: &DeviceSpec, scaling: Scaling) -> DeviceSpec {
    let Some(efficiency) = calibration.efficiency.as_deref() else {
        return target.clone();
    };
    let mut spec = match scaling {
        Scaling::Unscaled => calibration.clone(),
        Scaling::Specification => DeviceSpec {
            efficiency: Some(Arc::new(efficiency.clone())),
            ..target.clone()
        },
        Scaling::PerIsa => DeviceSpec {
            efficiency: Some(Arc::new(carry(efficiency, calibration, target))),
            ..target.clone()
        },
    };
    spec.id = calibration.id.clone();
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::calibration::{Machine, Peak};

    fn cpu(lanes: usize, clock: f64, lanes_256: Option<usize>) -> DeviceSpec {
        let text = format!(
            "id = \"cpu\"\nname = \"a CPU\"\nkind = \"cpu\"\ncores = 2\nfma_lanes = {lanes}\nfma_pipes = 2\nfma_latency = 4\nclock_ghz = {clock}\nmemory_gbs = 50.0\nllc_kib = 1024\nfp16_rate = 1.0\nint8_rate = 4.0\nlaunch_us = 0.1\ndispatch_us = 0.1\nloads_per_cycle = 2\nnoise_cv = 0.0\nsources = [\"test\"]\n"
        );
        let mut spec: DeviceSpec = toml::from_str(&text).unwrap();
        spec.fma_lanes_256 = lanes_256;
        spec
    }

    fn measured(mut spec: DeviceSpec, scalar: f64, avx2: f64) -> DeviceSpec {
        let peak = |isa: &str, gmacs: f64| Peak {
            isa: isa.into(),
            threads: 2,
            gmacs,
        };
        spec.measured = Some(Machine {
            threads: 2,
            fma: vec![peak("scalar", scalar), peak("avx2-fma", avx2)],
            int8: vec![],
            fma_latency_ns: 1.0,
            caches: vec![],
            bandwidth: vec![],
            region_us: 1.0,
            layer_us: 0.1,
            run_us: 1.0,
            conversions: vec![],
        });
        spec
    }

    #[test]
    fn rates_read_measured_peaks_before_the_specification() {
        // Zen 4 as the calibration records it: AVX-512 at the AVX2 rate,
        // so its "clock" is half the core's.
        let zen4 = measured(cpu(32, 1.8, None), 14.4, 115.2);
        let r = Rates::of(&zen4);
        assert!((r.widest / 1e9 - 57.6).abs() < 1e-9);
        assert!((r.avx2 / 1e9 - 57.6).abs() < 1e-9);
        assert!((r.clock_ghz - 3.6).abs() < 1e-9);
        // An AVX-512 server core on its specification: two 512-bit units,
        // 16 lanes per cycle at 256 bits.
        let xeon = Rates::of(&cpu(32, 2.5, Some(16)));
        assert!((xeon.avx2 / xeon.widest - 0.5).abs() < 1e-12);
        assert_eq!(xeon.clock_ghz, 2.5);
        // A CPU whose widest FMA is AVX2 (or NEON) has one rate.
        let i7 = Rates::of(&cpu(16, 3.2, None));
        assert_eq!(i7.avx2, i7.widest);
    }

    #[test]
    fn avx2_classes_lose_the_share_of_peak_avx512_adds_and_nothing_moves_at_home() {
        let class = |family, sparse, precision| KernelClass {
            family,
            sparse,
            precision,
            layout: dlas_core::Layout::Nchw,
            vnni: false,
            tile: None,
        };
        let curve_of = |kernel| dlas_core::calibration::CurveClass {
            kernel,
            tuned: false,
        };
        let direct = class(KernelFamily::Direct, false, Precision::F32);
        let gemm = class(KernelFamily::Gemm, false, Precision::F32);
        assert_eq!(width_of(direct), Width::Avx2);
        assert_eq!(
            width_of(class(KernelFamily::SpatialPack, false, Precision::F16)),
            Width::Avx2
        );
        assert_eq!(
            width_of(class(KernelFamily::SpatialPack, true, Precision::F32)),
            Width::Widest
        );
        assert_eq!(
            width_of(class(KernelFamily::Direct, false, Precision::I8)),
            Width::Widest
        );
        assert_eq!(width_of(gemm), Width::Widest);
        let zen4 = measured(cpu(32, 1.8, None), 14.4, 115.2);
        let server = cpu(32, 2.5, Some(16));
        let curve = crate::efficiency::Curve {
            beta: [0.0; 9],
            overhead_s: 1e-6,
            per_value_s: 1e-10,
            conversion_scale: 1.0,
            n: 0,
            rms_log: 0.0,
            median_abs_log: 0.0,
        };
        let efficiency = Efficiency {
            curves: [(curve_of(direct), curve.clone()), (curve_of(gemm), curve)].into(),
            cpu: dlas_core::kernel::Cpu::default(),
            run_seconds: 0.0,
            clock_ghz: 1.8,
            memory_gbs: 50.0,
            cold_left_out: 0,
        };
        let carried = carry(&efficiency, &zen4, &server);
        // Direct reaches half the share of the server's widest peak; GEMM
        // the same share.
        assert!((carried.curves[&curve_of(direct)].beta[0] - 0.5f64.ln()).abs() < 1e-12);
        assert_eq!(carried.curves[&curve_of(gemm)].beta[0], 0.0);
        // Fixed costs scale by the core clocks (3.6 GHz against 2.5), not
        // by the calibration's effective 1.8 GHz.
        assert!((server.clock_ghz / carried.clock_ghz - 2.5 / 3.6).abs() < 1e-12);
        let home = carry(&efficiency, &zen4, &zen4);
        assert_eq!(home.curves, efficiency.curves);
        assert!((home.clock_ghz - efficiency.clock_ghz).abs() < 1e-12);
    }
}
