//! How a layer is lowered to a kernel, decided once: [`LayerKey::of`] turns
//! a layer and an [`EngineConfig`] into a key naming the weight format,
//! kernel algorithm, layout, data type and the kernel class that
//! `dlas_core::kernel::kernel_class` decides (the same function the device
//! model prices with and the calibration times by), and everything
//! downstream reads the key. [`Conv2d::new`](crate::Conv2d::new) builds
//! the key's class with a schedule, the engine looks tuned schedules up by
//! it, and the tuner measures per key, so none of them can disagree about
//! which problem a schedule solves or which kernel runs.

use crate::algorithm::KernelAlgorithm;
use crate::config::{ConfigError, DType, EngineConfig, FormatChoice};
use crate::schedule::Schedule;
use crate::sparse::{block_fill, density};
use crate::untuned::default_schedule;
use crate::workload::Workload;
use dlas_core::kernel::{Cpu, KernelClass, KernelFamily, Lowering, Refusal, kernel_class};
use dlas_core::{Format, Layout};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Weight density below which `FormatChoice::Auto` goes sparse: under it a
/// sparse kernel's extra index traffic is paid back by skipped FMAs.
pub const SPARSE_DENSITY: f64 = 0.35;
/// Fraction of nonzeros within stored blocks above which Auto prefers BSR.
pub const BSR_FILL: f64 = 0.6;

/// One layer's lowering: its shape and everything about how it is computed
/// except the schedule. It is also one layer's tuning problem, and the
/// tuning records' key: its serialised form (shape, kernel, blocks,
/// layout, dtype) must not change, so `class`, which follows from those
/// and the CPU, is left out of it and computed again when a key is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "KeyRecord", try_from = "KeyRecord")]
pub struct LayerKey {
    pub workload: Workload,
    /// The algorithm whose schedule drives the layer's kernel: direct for
    /// the depthwise stencils, gemm for the GEMM's products (Winograd's
    /// layers without a tile, the fp16 GEMM's depthwise layers), else the
    /// configured algorithm (see [`LayerKey::of`]).
    pub kernel: KernelAlgorithm,
    /// The weight format as BSR block shape of sparse weights (1x1 is
    /// CSR); `None` is dense.
    pub blocks: Option<(usize, usize)>,
    pub layout: Layout,
    pub dtype: DType,
    /// The kernel that runs the layer, as `dlas_core::kernel::kernel_class`
    /// decides it for the engine, the device model and the calibration
    /// alike; [`Conv2d::new`](crate::Conv2d::new) builds this kernel.
    pub class: KernelClass,
}

/// A [`LayerKey`] as tuning records store it.
#[derive(Serialize, Deserialize)]
struct KeyRecord {
    workload: Workload,
    kernel: KernelAlgorithm,
    blocks: Option<(usize, usize)>,
    layout: Layout,
    dtype: DType,
}

impl From<LayerKey> for KeyRecord {
    fn from(k: LayerKey) -> KeyRecord {
        KeyRecord {
            workload: k.workload,
            kernel: k.kernel,
            blocks: k.blocks,
            layout: k.layout,
            dtype: k.dtype,
        }
    }
}

impl TryFrom<KeyRecord> for LayerKey {
    type Error = String;

    /// The key's kernel algorithm configured again gives the same class:
    /// each resolved algorithm is one the decision maps to itself.
    fn try_from(r: KeyRecord) -> Result<LayerKey, String> {
        let class = kernel_class(
            &r.workload,
            lowering(r.kernel, r.blocks, r.layout, r.dtype),
            cpu(),
        )
        .map_err(|e| format!("{}: {e}", r.workload))?;
        Ok(LayerKey {
            workload: r.workload,
            kernel: r.kernel,
            blocks: r.blocks,
            layout: r.layout,
            dtype: r.dtype,
            class,
        })
    }
}

/// What this machine's CPU offers the kernel decision: VNNI for the int8
/// GEMM where `int8::vnni` can run.
pub fn cpu() -> Cpu {
    Cpu {
        vnni: crate::int8::vnni_available(),
    }
}

/// The study's description of a configuration of one layer.
fn lowering(
    algorithm: KernelAlgorithm,
    blocks: Option<(usize, usize)>,
    layout: Layout,
    dtype: DType,
) -> Lowering {
    Lowering {
        algorithm: algorithm.study(),
        format: format_of(blocks),
        layout,
        precision: dtype.precision(),
    }
}

/// The algorithm whose schedule drives a kernel class (int8 kernels have
/// no schedule; their keys name the algorithm the same way).
pub fn schedule_algorithm(class: &KernelClass) -> KernelAlgorithm {
    match class.family {
        KernelFamily::Direct | KernelFamily::Depthwise => KernelAlgorithm::Direct,
        KernelFamily::Gemm | KernelFamily::DepthwiseGemm => KernelAlgorithm::Gemm,
        KernelFamily::SpatialPack => KernelAlgorithm::SpatialPack,
        KernelFamily::Winograd => KernelAlgorithm::Winograd,
    }
}

impl LayerKey {
    /// The lowering of a layer of shape `w` with (out, in / groups, k, k)
    /// weights `weights` under `config`, or why `config` cannot run it
    /// (the weights matter only to `FormatChoice::Auto`, which measures
    /// their density). Which kernel runs it is
    /// `dlas_core::kernel::kernel_class`'s decision (depthwise stencils,
    /// Winograd's tiles, the int8 kernels, what fp16 and NHWC run), made
    /// here once with this CPU's features; the key's `kernel` is the
    /// algorithm whose schedule drives that kernel.
    pub fn of(
        w: Workload,
        weights: &[f32],
        config: &EngineConfig,
    ) -> Result<LayerKey, ConfigError> {
        let blocks = resolve_format(config.format, &w, weights)?;
        let algorithm = config.algorithm;
        let what = || match blocks {
            Some(_) => "sparse weights".to_string(),
            None => algorithm.to_string(),
        };
        let lowering = lowering(algorithm, blocks, config.layout, config.dtype);
        let class = kernel_class(&w, lowering, cpu()).map_err(|refusal| match refusal {
            Refusal::I8 => {
                let format = if blocks.is_some() { "sparse" } else { "dense" };
                ConfigError::I8(format!("{algorithm} {format} {}", config.layout))
            }
            Refusal::F16 => ConfigError::F16(what()),
            Refusal::Layout(Layout::Nchw16c) => ConfigError::Blocked(format!(
                "{algorithm} {:?} {} with {} groups",
                config.dtype,
                format_of(blocks),
                w.groups
            )),
            Refusal::Layout(_) | Refusal::Auto => ConfigError::Nhwc(what()),
        })?;
        Ok(LayerKey {
            workload: w,
            kernel: schedule_algorithm(&class),
            blocks,
            layout: config.layout,
            dtype: config.dtype,
            class,
        })
    }

    /// Whether the layer's kernel has schedule knobs: the int8 kernels
    /// (GEMM, direct, spatial pack, depthwise) have none, their blocking
    /// being fixed. (The blocked layout's have: [`crate::BlockedSchedule`].)
    pub fn tunable(&self) -> bool {
        self.dtype != DType::I8
    }

    /// Whether `s` can drive this layer's kernel: a schedule of the key's
    /// algorithm, blocked exactly where the layout is NCHW16c.
    pub fn drives(&self, s: &Schedule) -> bool {
        s.algorithm() == self.kernel
            && matches!(s, Schedule::Blocked(_)) == (self.layout == Layout::Nchw16c)
    }

    /// The format choice that reproduces this key's weight storage.
    pub fn format(&self) -> FormatChoice {
        match self.blocks {
            None => FormatChoice::Dense,
            Some((1, 1)) => FormatChoice::Csr,
            Some((rows, cols)) => FormatChoice::Bsr { rows, cols },
        }
    }

    /// The study's name for this key's weight format.
    pub fn weight_format(&self) -> Format {
        format_of(self.blocks)
    }

    /// The schedule the layer runs on `threads` threads when nothing gives
    /// it a tuned one, and where a search for one starts.
    pub fn default_schedule(&self, threads: usize) -> Schedule {
        default_schedule(self.kernel, &self.workload, threads, self.layout)
    }
}

/// The study's weight format of BSR blocks (`None`: dense, 1x1: CSR).
fn format_of(blocks: Option<(usize, usize)>) -> Format {
    match blocks {
        None => Format::Dense,
        Some((1, 1)) => Format::Csr,
        Some(_) => Format::Bsr,
    }
}

impl fmt::Display for LayerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let format = match self.blocks {
            None => "dense".to_string(),
            Some((1, 1)) => "csr".to_string(),
            Some((r, c)) => format!("bsr{r}x{c}"),
        };
        write!(
            f,
            "{} | {} {format} {} {:?}",
            self.workload, self.kernel, self.layout, self.dtype
        )
    }
}

/// Resolves a format choice for one layer's weights to BSR block sizes
/// (`None`: dense; CSR is 1x1 blocks).
fn resolve_format(
    choice: FormatChoice,
    w: &Workload,
    weights: &[f32],
) -> Result<Option<(usize, usize)>, ConfigError> {
    Ok(match choice {
        FormatChoice::Dense => None,
        FormatChoice::Csr => Some((1, 1)),
        FormatChoice::Bsr { rows, cols } => {
            if ![1, 2, 4, 8].contains(&rows) || !(1..=16).contains(&cols) {
                return Err(ConfigError::Blocks { rows, cols });
            }
            Some((rows, cols))
        }
        FormatChoice::Auto => {
            if density(weights) >= SPARSE_DENSITY {
                None
            } else {
                let (rows, cols) = (w.out_channels, w.reduction());
                [(4, 4), (1, 4)]
                    .into_iter()
                    .find(|&(r, c)| {
                        w.out_channels_per_group().is_multiple_of(r)
                            && block_fill(weights, rows, cols, r, c) >= BSR_FILL
                    })
                    .or(Some((1, 1)))
            }
        }
    })
}
