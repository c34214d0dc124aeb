//! How a layer is lowered to a kernel, decided once: [`LayerKey::of`] turns
//! a layer and an [`EngineConfig`] into a key naming the weight format,
//! kernel algorithm, layout and data type, and everything downstream reads
//! the key. [`Conv2d::new`](crate::Conv2d::new) packs a layer from a key and
//! a schedule, the engine looks tuned schedules up by it, and the tuner
//! measures per key, so the three cannot disagree about which problem a
//! schedule solves.

use crate::algorithm::KernelAlgorithm;
use crate::config::{ConfigError, DType, EngineConfig, FormatChoice};
use crate::depthwise::MAX_TAPS;
use crate::schedule::Schedule;
use crate::sparse::{block_fill, density};
use crate::untuned::default_schedule;
use crate::winograd;
use crate::workload::Workload;
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
/// tuning records' key (its serialised form must not change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayerKey {
    pub workload: Workload,
    /// The algorithm whose kernel runs the layer: the configured one, or
    /// direct for depthwise fp32 NCHW layers and depthwise fp16 ones not
    /// under gemm, or gemm for the layers winograd does not compute (see
    /// [`LayerKey::of`]).
    pub kernel: KernelAlgorithm,
    /// The weight format as BSR block shape of sparse weights (1x1 is
    /// CSR); `None` is dense.
    pub blocks: Option<(usize, usize)>,
    pub layout: Layout,
    pub dtype: DType,
}

impl LayerKey {
    /// The lowering of a layer of shape `w` with (out, in / groups, k, k)
    /// weights `weights` under `config`, or why `config` cannot run it
    /// (the weights matter only to `FormatChoice::Auto`, which measures
    /// their density).
    ///
    /// A depthwise layer (one input and one output channel per group) is a
    /// stack of 2-D stencils: im2col would build a one-row GEMM per channel
    /// and spatial pack would fill one lane of each vector, so in fp32
    /// every algorithm runs it as direct, as TVM and XNNPACK do (in NHWC,
    /// which gemm and winograd run, the channel-vectorised stencil of at
    /// most `MAX_TAPS` taps). fp16 does
    /// the same under direct and spatial pack, while fp16 gemm keeps running
    /// depthwise layers as its own GEMM (as it did when it was the only
    /// fp16 kernel), and int8 picks its own depthwise kernel under every
    /// algorithm (see `Int8Conv`).
    ///
    /// Winograd computes 3x3 stride-1 ungrouped layers of 16 or more output
    /// tiles of 4x4 or 2x2 pixels (below that the layer is bound by reading
    /// its transformed weights: `dlas_core::calibration::winograd_tile`) with dense fp32
    /// weights in either layout; every other layer of a Winograd
    /// configuration runs the kernel it would run under gemm (sparse
    /// weights the sparse GEMM, int8 the int8 GEMM, fp16 the fp16 GEMM
    /// (f16 transformed weights lose too much: see `winograd`), depthwise
    /// fp32 NCHW layers direct like every algorithm's, the rest the dense
    /// GEMM), as a Winograd library hands such layers to its GEMM.
    ///
    /// fp16 and int8 need dense weights, int8 also the NCHW layout; NHWC
    /// runs under gemm and winograd with dense weights.
    pub fn of(
        w: Workload,
        weights: &[f32],
        config: &EngineConfig,
    ) -> Result<LayerKey, ConfigError> {
        let blocks = resolve_format(config.format, &w, weights)?;
        let algorithm = config.algorithm;
        let nhwc = config.layout == Layout::Nhwc;
        let what = || match blocks {
            Some(_) => "sparse weights".to_string(),
            None => algorithm.to_string(),
        };
        let winograd = algorithm == KernelAlgorithm::Winograd;
        let kernel = match config.dtype {
            DType::I8 => {
                if blocks.is_some() || nhwc {
                    let format = if blocks.is_some() { "sparse" } else { "dense" };
                    let what = format!("{algorithm} {format} {}", config.layout);
                    return Err(ConfigError::I8(what));
                }
                if winograd {
                    KernelAlgorithm::Gemm
                } else {
                    algorithm
                }
            }
            _ if nhwc && (!algorithm.has_nhwc() || blocks.is_some()) => {
                return Err(ConfigError::Nhwc(what()));
            }
            DType::F16 if blocks.is_some() => return Err(ConfigError::F16(what())),
            DType::F16 if algorithm == KernelAlgorithm::Gemm => algorithm,
            DType::F16 if winograd => KernelAlgorithm::Gemm,
            DType::F32 | DType::F16 if w.is_depthwise() && !nhwc => KernelAlgorithm::Direct,
            DType::F32 if w.is_depthwise() && w.kernel * w.kernel <= MAX_TAPS => {
                KernelAlgorithm::Direct
            }
            DType::F32 if winograd && (blocks.is_some() || !winograd::fits(&w)) => {
                KernelAlgorithm::Gemm
            }
            DType::F32 | DType::F16 => algorithm,
        };
        Ok(LayerKey {
            workload: w,
            kernel,
            blocks,
            layout: config.layout,
            dtype: config.dtype,
        })
    }

    /// Whether the layer's kernel has schedule knobs: the int8 kernels
    /// (GEMM, direct, spatial pack, depthwise) have none, their blocking
    /// being fixed.
    pub fn tunable(&self) -> bool {
        self.dtype != DType::I8
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
        match self.blocks {
            None => Format::Dense,
            Some((1, 1)) => Format::Csr,
            Some(_) => Format::Bsr,
        }
    }

    /// The schedule the layer runs on `threads` threads when nothing gives
    /// it a tuned one, and where a search for one starts.
    pub fn default_schedule(&self, threads: usize) -> Schedule {
        default_schedule(
            self.kernel,
            &self.workload,
            threads,
            self.layout == Layout::Nhwc,
        )
    }

    /// Whether a direct layer runs the vectorised depthwise stencil rather
    /// than the sliding-window kernel: fp32 or fp16, depthwise, dense, and a
    /// kernel of at most [`MAX_TAPS`] taps. A direct schedule drives both.
    pub(crate) fn runs_depthwise_stencil(&self) -> bool {
        let w = &self.workload;
        self.kernel == KernelAlgorithm::Direct
            && self.dtype != DType::I8
            && w.is_depthwise()
            && self.blocks.is_none()
            && w.kernel * w.kernel <= MAX_TAPS
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
