//! One convolution layer: a workload, its epilogue, and the kernel of the
//! chosen algorithm with weights packed for it at load.

use crate::config::{ConfigError, DType, EngineConfig, FormatChoice};
use crate::depthwise::{self, DepthwiseConv};
use crate::direct::DirectConv;
use crate::epilogue::{Activation, Epilogue};
use crate::gemm::GemmConv;
use crate::int8::Int8Conv;
use crate::isa::Isa;
use crate::schedule::{
    DirectSchedule, GemmSchedule, ParallelLoop, Schedule, SpatialPackSchedule, VectorAxis,
};
use crate::sparse::{block_fill, density};
use crate::spatial_pack::SpatialPackConv;
use crate::workload::Workload;
use dlas_core::{Algorithm, Format, Layout};
use dlas_zoo::quant::ActivationQuant;

#[derive(Debug, Clone)]
enum Kernel {
    Int8(Int8Conv),
    Depthwise(DepthwiseConv),
    Direct(DirectConv),
    Gemm(GemmConv),
    SpatialPack(SpatialPackConv),
}

/// A packed convolution (with bias and activation) ready to run.
#[derive(Debug, Clone)]
pub struct Conv2d {
    workload: Workload,
    epi: Epilogue,
    kernel: Kernel,
    format: Format,
    blocks: Option<(usize, usize)>,
    layout: Layout,
}

/// Weight density below which `FormatChoice::Auto` goes sparse: under it a
/// sparse kernel's extra index traffic is paid back by skipped FMAs.
pub const SPARSE_DENSITY: f64 = 0.35;
/// Fraction of nonzeros within stored blocks above which Auto prefers BSR.
pub const BSR_FILL: f64 = 0.6;

/// The schedule a layer runs when the configuration names none: the
/// untuned `Default` of `algorithm`, fitted to the workload so that it is
/// valid (tiles no larger than the output, register blocks inside a group)
/// and, for gemm, fitted as [`default_gemm`] says.
pub fn default_schedule(
    algorithm: Algorithm,
    w: &Workload,
    threads: usize,
    nhwc: bool,
) -> Result<Schedule, ConfigError> {
    Ok(match algorithm {
        Algorithm::Direct => {
            let d = DirectSchedule::default();
            Schedule::Direct(DirectSchedule {
                oc_block: 8.min(w.out_channels_per_group()),
                ..d
            })
        }
        Algorithm::Gemm => Schedule::Gemm(default_gemm(w, threads, nhwc)),
        Algorithm::SpatialPack => {
            let d = SpatialPackSchedule::default();
            Schedule::SpatialPack(SpatialPackSchedule {
                vh: d.vh.min(w.out_h),
                vw: d.vw.min(w.out_w),
                ..d
            })
        }
        Algorithm::Auto => return Err(ConfigError::AutoAlgorithm),
    })
}

/// Register tiles the untuned GEMM chooses from on AVX-512, in order of
/// preference on equal cost.
const AVX512_TILES: [(usize, usize); 4] = [(8, 48), (6, 64), (12, 32), (8, 16)];
/// How much better one dimension's tasks must balance for the parallel
/// loop to take it over the one that splits the larger operand.
const BALANCE_MARGIN: f64 = 0.15;
/// Cycles per output value the orientation a layout does not produce
/// directly adds: C is transposed on its way out, one value at a time.
const TRANSPOSE_CYCLES: f64 = 4.0;

/// The untuned GEMM schedule of a layer. On AVX-512 its register tile and
/// vector axis are those of least modelled cost: the tiles' reduction steps
/// over the padded matrix, each costing max(FMAs / 2, loads) cycles, since
/// this machine retires two FMAs but about one vector load or broadcast per
/// cycle (a tile loads `mr` broadcasts and `nr / 16` vectors per step), plus
/// the transpose of C when the axis is not the layout's own. That matches
/// the tile to the layer (no 12-row tile over 64 channels, and 16 pixels on
/// the rows rather than half a 32-pixel vector) without timing anything. Elsewhere it is `GemmSchedule::default()` in the layout's own
/// orientation. Then the parallel loop runs over the dimension whose
/// blocks spread best over `threads` threads (see [`task_panels`]), or
/// that splits the larger operand.
pub fn default_gemm(w: &Workload, threads: usize, nhwc: bool) -> GemmSchedule {
    let natural = if nhwc {
        VectorAxis::OutputChannels
    } else {
        VectorAxis::Spatial
    };
    let (ocg, pix) = (w.out_channels_per_group(), w.out_pixels());
    // Rows and columns of C when `vectors` runs along its columns.
    let shape = |vectors: VectorAxis| match vectors {
        VectorAxis::Spatial => (ocg, pix),
        VectorAxis::OutputChannels => (pix, ocg),
    };
    let d = GemmSchedule::default();
    let (mr, nr, vectors) = if Isa::detect() == Isa::Avx512 {
        let other = match natural {
            VectorAxis::Spatial => VectorAxis::OutputChannels,
            VectorAxis::OutputChannels => VectorAxis::Spatial,
        };
        let cost = |(mr, nr): (usize, usize), vectors: VectorAxis| {
            let (m, n) = shape(vectors);
            let nv = nr / 16;
            let step = ((mr * nv) as f64 / 2.0).max((mr + nv) as f64);
            let steps = (m.div_ceil(mr) * n.div_ceil(nr) * w.reduction()) as f64;
            let transpose = if vectors == natural {
                0.0
            } else {
                (m * n) as f64 * TRANSPOSE_CYCLES
            };
            steps * step + transpose
        };
        [natural, other]
            .into_iter()
            .flat_map(|v| AVX512_TILES.map(|t| (t, v)))
            .min_by(|a, b| cost(a.0, a.1).total_cmp(&cost(b.0, b.1)))
            .map(|((mr, nr), v)| (mr, nr, v))
            .expect("candidates")
    } else {
        (d.mr, d.nr, natural)
    };
    // The largest kc whose B panel fits the L1 budget (16 KiB); blocks of
    // about 8 tiles of rows and 256 columns, except along the parallel
    // dimension, whose blocks are sized so the threads finish together.
    let kc = (4096 / nr).min(256);
    let (m, n) = shape(vectors);
    let (row_panels, row_balance) = task_panels(m.div_ceil(mr), threads, 65536 / kc / mr);
    let (col_panels, col_balance) = task_panels(n.div_ceil(nr), threads, 1024 / nr);
    // Every task reads all of the operand along the other dimension (B for
    // row tasks, A for column tasks), so unless one dimension balances
    // clearly better, the larger operand is the one split: A is m x k, B
    // is k x n (at batch 1, ResNet's last layers stream 9 MiB of weights).
    let rows_parallel = if (row_balance - col_balance).abs() > BALANCE_MARGIN {
        row_balance > col_balance
    } else {
        m >= n
    };
    let (mc, nc) = if rows_parallel {
        (row_panels * mr, (256 / nr).max(1) * nr)
    } else {
        (8 * mr, col_panels * nr)
    };
    // `ParallelLoop` names an output dimension: the rows' one, or the
    // vectorised one.
    let parallel = match (rows_parallel, vectors) {
        (true, VectorAxis::Spatial) | (false, VectorAxis::OutputChannels) => {
            ParallelLoop::OutputChannels
        }
        (false, VectorAxis::Spatial) | (true, VectorAxis::OutputChannels) => ParallelLoop::Spatial,
    };
    GemmSchedule {
        mr,
        nr,
        kc,
        mc,
        nc,
        parallel,
        vectors,
    }
}

/// Tiles per task when `panels` tiles of one dimension are split across
/// `threads` threads, at most `max` per task: the count whose tasks give
/// the shortest makespan (threads take the next task as they finish, and a
/// dimension rarely divides evenly: 22 panels of a 1024-pixel layer in
/// tasks of 5 leave one thread 12 and the other 10), the larger on a tie.
/// Returns it and the balance, ideal time over makespan (1 is perfect).
fn task_panels(panels: usize, threads: usize, max: usize) -> (usize, f64) {
    let makespan = |per: usize| {
        let mut loads = vec![0; threads];
        let tasks = panels.div_ceil(per);
        for t in 0..tasks {
            let size = if t + 1 == tasks {
                panels - per * t
            } else {
                per
            };
            *loads.iter_mut().min().expect("a thread") += size;
        }
        loads.into_iter().max().unwrap_or(0)
    };
    let best = (1..=max.clamp(1, panels.max(1)))
        .min_by_key(|&per| (makespan(per), std::cmp::Reverse(per)))
        .expect("a task size");
    let ideal = panels as f64 / threads as f64;
    (best, ideal / makespan(best).max(1) as f64)
}

/// Resolves a format choice for one layer's weights to BSR block sizes
/// (`None`: dense; CSR is 1x1 blocks).
pub(crate) fn resolve_format(
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

/// The algorithm whose kernel runs a layer of shape `w` with weight blocks
/// `blocks` under `config`, or why `config` cannot run it.
///
/// A depthwise layer (one input and one output channel per group) is a
/// stack of 2-D stencils: im2col would build a one-row GEMM per channel and
/// spatial pack would fill one lane of each vector, so in fp32 NCHW every
/// algorithm runs it with the sliding-window kernel, as TVM and XNNPACK do.
/// `Conv2d::kernel_name` reports what ran.
pub(crate) fn kernel_algorithm(
    config: &EngineConfig,
    w: &Workload,
    blocks: Option<(usize, usize)>,
) -> Result<Algorithm, ConfigError> {
    let nhwc = config.layout == Layout::Nhwc;
    let half = config.dtype == DType::F16;
    let what = || match blocks {
        Some(_) => "sparse weights".to_string(),
        None => config.algorithm.to_string(),
    };
    if nhwc && (config.algorithm != Algorithm::Gemm || blocks.is_some()) {
        return Err(ConfigError::Nhwc(what()));
    }
    if half && (config.algorithm != Algorithm::Gemm || blocks.is_some()) {
        return Err(ConfigError::F16(what()));
    }
    let depthwise =
        w.in_channels_per_group() == 1 && w.out_channels_per_group() == 1 && w.groups > 1;
    Ok(match config.algorithm {
        Algorithm::Auto => return Err(ConfigError::AutoAlgorithm),
        Algorithm::Gemm | Algorithm::SpatialPack if depthwise && !half && !nhwc => {
            Algorithm::Direct
        }
        a => a,
    })
}

impl Conv2d {
    /// Packs `weights` ((out, in / groups, k, k) row-major, BN already
    /// folded) for the algorithm, format, layout and schedule of `config`.
    /// Depthwise fp32 NCHW layers use the depthwise stencil kernel whatever
    /// the algorithm (a GEMM of one row has nothing to block).
    pub fn new(
        workload: Workload,
        weights: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        config: &EngineConfig,
    ) -> anyhow::Result<Conv2d> {
        let w = workload;
        anyhow::ensure!(
            weights.len() == w.out_channels * w.reduction(),
            "{w}: expected {} weights, got {}",
            w.out_channels * w.reduction(),
            weights.len()
        );
        let blocks = resolve_format(config.format, &w, weights)?;
        let schedule = match config.schedule {
            Some(s) => s,
            None => default_schedule(
                config.algorithm,
                &w,
                config.threads,
                config.layout == Layout::Nhwc,
            )?,
        };
        let nhwc = config.layout == Layout::Nhwc;
        let half = config.dtype == DType::F16;
        schedule.validate(&w)?;
        // A depthwise layer (one input and one output channel per group) is
        // a stack of 2-D stencils; in fp32 NCHW every algorithm runs it as
        // direct (see `kernel_algorithm`): with dense weights and kernels up to
        // 7x7 the vectorised depthwise kernel, otherwise the sliding-window
        // one. A direct schedule, tuned or given, drives both. `kernel_name`
        // reports what ran.
        let depthwise =
            w.in_channels_per_group() == 1 && w.out_channels_per_group() == 1 && w.groups > 1;
        let stencil = blocks.is_none() && w.kernel * w.kernel <= depthwise::MAX_TAPS;
        let kernel = match (kernel_algorithm(config, &w, blocks)?, schedule) {
            (Algorithm::Direct, schedule) if depthwise && !half && !nhwc => {
                let s = match schedule {
                    Schedule::Direct(s) => s,
                    _ => DirectSchedule::default(),
                };
                if stencil {
                    Kernel::Depthwise(DepthwiseConv::new(w, s, weights, Isa::detect()))
                } else {
                    Kernel::Direct(DirectConv::new(w, s, weights, blocks))
                }
            }
            (Algorithm::Direct, Schedule::Direct(s)) => {
                Kernel::Direct(DirectConv::new(w, s, weights, blocks))
            }
            (Algorithm::Gemm, Schedule::Gemm(s)) => Kernel::Gemm(GemmConv::new(
                w,
                s,
                weights,
                blocks,
                (nhwc, half),
                Isa::detect(),
            )),
            (Algorithm::SpatialPack, Schedule::SpatialPack(s)) => {
                Kernel::SpatialPack(SpatialPackConv::new(w, s, weights, blocks))
            }
            (_, s) => {
                return Err(ConfigError::ScheduleMismatch {
                    given: s.algorithm_name(),
                    algorithm: config.algorithm,
                }
                .into());
            }
        };
        Ok(Conv2d {
            workload: w,
            epi: Epilogue {
                bias: bias.map_or_else(|| vec![0.0; w.out_channels], <[f32]>::to_vec),
                act,
            },
            kernel,
            format: match blocks {
                None => Format::Dense,
                Some((1, 1)) => Format::Csr,
                Some(_) => Format::Bsr,
            },
            blocks,
            layout: config.layout,
        })
    }

    /// An int8 layer: `weights` quantised per output channel with `scales`,
    /// reading activations quantised by `input` and writing them by `output`.
    #[allow(clippy::too_many_arguments)]
    pub fn new_int8(
        workload: Workload,
        weights: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        scales: &[f32],
        input: ActivationQuant,
        output: ActivationQuant,
        config: &EngineConfig,
    ) -> anyhow::Result<Conv2d> {
        let w = workload;
        anyhow::ensure!(
            weights.len() == w.out_channels * w.reduction() && scales.len() == w.out_channels,
            "{w}: weights or scales of the wrong length"
        );
        // Each product is at most 255 x 127 in magnitude (an activation
        // less its zero point, or the unsigned activation of the VNNI
        // kernel, times a symmetric weight): beyond this many terms an i32
        // accumulator could overflow.
        const MAX_REDUCTION: usize = i32::MAX as usize / (255 * 127);
        anyhow::ensure!(
            w.reduction() <= MAX_REDUCTION,
            "{w}: int8 accumulates {} products per output in i32, at most {MAX_REDUCTION} are safe",
            w.reduction()
        );
        let blocks = resolve_format(config.format, &w, weights)?;
        if config.algorithm != Algorithm::Gemm || blocks.is_some() || config.layout != Layout::Nchw
        {
            let what = format!(
                "{} {} {}",
                config.algorithm,
                if blocks.is_some() { "sparse" } else { "dense" },
                config.layout
            );
            return Err(ConfigError::I8(what).into());
        }
        Ok(Conv2d {
            workload: w,
            epi: Epilogue {
                bias: bias.map_or_else(|| vec![0.0; w.out_channels], <[f32]>::to_vec),
                act,
            },
            kernel: Kernel::Int8(Int8Conv::new(w, weights, scales, input, output)),
            format: Format::Dense,
            blocks: None,
            layout: Layout::Nchw,
        })
    }

    /// The kernel that runs this layer: the algorithm's, or `depthwise`
    /// (`direct` with sparse weights) for a depthwise layer (see
    /// [`Conv2d::new`]).
    pub fn kernel_name(&self) -> &'static str {
        match &self.kernel {
            Kernel::Int8(k) => k.name(),
            Kernel::Depthwise(_) => "depthwise",
            Kernel::Direct(_) => "direct",
            Kernel::Gemm(_) => "gemm",
            Kernel::SpatialPack(_) => "spatial-pack",
        }
    }

    /// Whether the layer computes in int8.
    pub fn is_int8(&self) -> bool {
        matches!(self.kernel, Kernel::Int8(_))
    }

    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The storage format chosen for the weights.
    pub fn format(&self) -> Format {
        self.format
    }

    /// BSR block shape of sparse weights (1x1 for CSR).
    pub fn blocks(&self) -> Option<(usize, usize)> {
        self.blocks
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// One sample, inside the caller's thread pool.
    pub(crate) fn run_sample(&self, input: &[f32], out: &mut [f32], residual: Option<&[f32]>) {
        match &self.kernel {
            Kernel::Depthwise(k) => k.run(input, out, &self.epi, residual),
            Kernel::Direct(k) => k.run(input, out, &self.epi, residual),
            Kernel::Gemm(k) => k.run(input, out, &self.epi, residual),
            Kernel::SpatialPack(k) => k.run(input, out, &self.epi, residual),
            Kernel::Int8(_) => panic!("an int8 layer takes int8 activations: use Conv2d::run_i8"),
        }
    }

    /// One int8 sample; `residual` is real-valued.
    pub(crate) fn run_sample_i8(&self, input: &[i8], out: &mut [i8], residual: Option<&[f32]>) {
        match &self.kernel {
            Kernel::Int8(k) => k.run(input, out, &self.epi, residual),
            _ => panic!("only int8 layers take int8 activations: use Conv2d::run"),
        }
    }

    /// Runs an int8 layer on a quantised batch.
    pub fn run_i8(&self, pool: &rayon::ThreadPool, input: &[i8], batch: usize) -> Vec<i8> {
        let (il, ol) = (self.workload.in_len(), self.workload.out_len());
        assert_eq!(input.len(), batch * il, "input length");
        let mut out = vec![0; batch * ol];
        pool.install(|| {
            for (x, y) in input.chunks(il).zip(out.chunks_mut(ol)) {
                self.run_sample_i8(x, y, None);
            }
        });
        out
    }

    /// Runs a batch (in the layer's layout) on `pool`; not for int8 layers.
    pub fn run(&self, pool: &rayon::ThreadPool, input: &[f32], batch: usize) -> Vec<f32> {
        let (il, ol) = (self.workload.in_len(), self.workload.out_len());
        assert_eq!(input.len(), batch * il, "input length");
        let mut out = vec![0.0; batch * ol];
        pool.install(|| {
            for (x, y) in input.chunks(il).zip(out.chunks_mut(ol)) {
                self.run_sample(x, y, None);
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_split_evenly_across_threads() {
        // 1024 pixels in 48-wide panels: 22 panels, two tasks of 11.
        assert_eq!(task_panels(22, 2, 21), (11, 1.0));
        // Tasks of at most 5: only single panels balance.
        assert_eq!(task_panels(22, 2, 5), (1, 1.0));
        // 3 panels over 2 threads cannot balance: 2 and 1, or 1, 1 and 1.
        let (per, balance) = task_panels(3, 2, 8);
        assert_eq!((per, balance), (2, 0.75));
        assert_eq!(task_panels(7, 1, 4), (4, 1.0));
    }

    #[test]
    fn untuned_gemm_schedules_are_valid() {
        for (cin, cout, k, s, hw) in [
            (3, 64, 3, 1, 32),
            (64, 64, 3, 1, 32),
            (256, 512, 3, 2, 8),
            (512, 512, 3, 1, 4),
            (16, 96, 1, 1, 112),
            (960, 320, 1, 1, 7),
            (1280, 1000, 1, 1, 1),
        ] {
            let w = Workload::new(cin, cout, k, s, k / 2, 1, hw, hw);
            for (threads, nhwc) in [(1, false), (2, false), (2, true), (3, false)] {
                let s = Schedule::Gemm(default_gemm(&w, threads, nhwc));
                s.validate(&w).unwrap();
            }
        }
    }
}
