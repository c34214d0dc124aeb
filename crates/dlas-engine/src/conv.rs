//! One convolution layer: the kernel its [`LayerKey`] names, with weights
//! packed for it and its schedule at load, and its epilogue.

use crate::blocked::depthwise::BlockedDepthwise;
use crate::blocked::{self, conv::BlockedConv};
use crate::config::{ConfigError, DType};
use crate::depthwise::{DepthwiseConv, DepthwiseNhwc};
use crate::direct::DirectConv;
use crate::epilogue::{Activation, Epilogue};
use crate::gemm::GemmConv;
use crate::int8::Int8Conv;
use crate::inverted::{self, Tiles};
use crate::isa::Isa;
use crate::lowering::{LayerKey, schedule_algorithm};
use crate::schedule::Schedule;
use crate::spatial_pack::SpatialPackConv;
use crate::winograd::{self, WinogradConv};
use crate::workload::Workload;
use dlas_core::kernel::{KernelClass, KernelFamily, WinogradTile};
use dlas_core::{Format, Layout};
use dlas_zoo::quant::ActivationQuant;

#[derive(Debug, Clone)]
enum Kernel {
    Int8(Int8Conv),
    Blocked(BlockedConv),
    BlockedDepthwise(BlockedDepthwise),
    Depthwise(DepthwiseConv),
    DepthwiseNhwc(DepthwiseNhwc),
    Direct(DirectConv),
    Gemm(GemmConv),
    SpatialPack(SpatialPackConv),
    Winograd(WinogradConv),
}

/// A packed convolution (with bias and activation) ready to run.
#[derive(Debug, Clone)]
pub struct Conv2d {
    key: LayerKey,
    epi: Epilogue,
    kernel: Kernel,
}

/// How an int8 layer's values are quantised: per output channel for the
/// weights, per tensor for the activations it reads and writes.
#[derive(Debug, Clone, Copy)]
pub struct Int8Scales<'a> {
    /// One symmetric scale per output channel (BN folding included).
    pub weights: &'a [f32],
    pub input: ActivationQuant,
    pub output: ActivationQuant,
}

impl Conv2d {
    /// Packs `weights` ((out, in / groups, k, k) row-major, BN already
    /// folded) for the fp32 or fp16 lowering `key` names, run with
    /// `schedule`, which must belong to `key.kernel`. A direct depthwise
    /// layer runs the vectorised stencil where its key allows (see
    /// [`Conv2d::kernel_name`]); the direct schedule drives either kernel.
    pub fn new(
        key: LayerKey,
        schedule: Schedule,
        weights: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
    ) -> anyhow::Result<Conv2d> {
        let w = key.workload;
        anyhow::ensure!(
            key.dtype != DType::I8,
            "{w}: an int8 layer is built with Conv2d::new_int8"
        );
        anyhow::ensure!(
            weights.len() == w.out_channels * w.reduction(),
            "{w}: expected {} weights, got {}",
            w.out_channels * w.reduction(),
            weights.len()
        );
        schedule.validate(&w)?;
        anyhow::ensure!(
            schedule_algorithm(&key.class) == key.kernel,
            "{w}: the key's {} kernel is not driven by its {} schedules",
            key.class,
            key.kernel
        );
        anyhow::ensure!(
            schedule.algorithm() != key.kernel || key.drives(&schedule),
            "{w}: a {schedule:?} cannot drive the {} kernel in {} (NCHW16c layers take blocked schedules, other layouts none)",
            key.class,
            key.layout
        );
        let nhwc = key.layout == Layout::Nhwc;
        let half = key.dtype == DType::F16;
        let blocked = key.layout == Layout::Nchw16c;
        let kernel = match (key.class.family, schedule) {
            (KernelFamily::Depthwise, Schedule::Blocked(s)) if blocked => {
                Kernel::BlockedDepthwise(BlockedDepthwise::new(w, s, weights, Isa::detect()))
            }
            (KernelFamily::Direct, Schedule::Blocked(s)) if blocked => {
                Kernel::Blocked(BlockedConv::new(w, s, weights, Isa::detect()))
            }
            (KernelFamily::Depthwise, Schedule::Direct(_)) if nhwc => {
                Kernel::DepthwiseNhwc(DepthwiseNhwc::new(w, weights, Isa::detect()))
            }
            (KernelFamily::Depthwise, Schedule::Direct(s)) => {
                Kernel::Depthwise(DepthwiseConv::new(w, s, weights, half, Isa::detect()))
            }
            (KernelFamily::Direct, Schedule::Direct(s)) => {
                Kernel::Direct(DirectConv::new(w, s, weights, key.blocks, half))
            }
            (KernelFamily::Gemm | KernelFamily::DepthwiseGemm, Schedule::Gemm(s)) => Kernel::Gemm(
                GemmConv::new(w, s, weights, key.blocks, (nhwc, half), Isa::detect()),
            ),
            (KernelFamily::SpatialPack, Schedule::SpatialPack(s)) => {
                Kernel::SpatialPack(SpatialPackConv::new(w, s, weights, key.blocks, half))
            }
            (KernelFamily::Winograd, Schedule::Winograd(s)) => {
                let tile = key.class.tile.unwrap_or(winograd::tile_of(&w));
                Kernel::Winograd(WinogradConv::new(w, s, tile, weights, nhwc, Isa::detect()))
            }
            (_, s) => {
                return Err(ConfigError::ScheduleMismatch {
                    given: s.algorithm(),
                    algorithm: key.kernel,
                }
                .into());
            }
        };
        Ok(Conv2d {
            key,
            epi: epilogue(&w, bias, act),
            kernel,
        })
    }

    /// An int8 layer of the int8 lowering `key` names: `weights` quantised
    /// per output channel and activations as `scales` says, run by the int8
    /// kernel of `key.kernel` (depthwise layers by the int8 depthwise
    /// stencil under every algorithm).
    /// int8 kernels have no schedule: their blocking is fixed.
    pub fn new_int8(
        key: LayerKey,
        weights: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        scales: Int8Scales<'_>,
    ) -> anyhow::Result<Conv2d> {
        let w = key.workload;
        anyhow::ensure!(
            key.dtype == DType::I8,
            "{w}: a {:?} layer is built with Conv2d::new",
            key.dtype
        );
        anyhow::ensure!(
            weights.len() == w.out_channels * w.reduction()
                && scales.weights.len() == w.out_channels,
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
        let kernel = Int8Conv::new(
            w,
            &key.class,
            weights,
            scales.weights,
            scales.input,
            scales.output,
        )?;
        Ok(Conv2d {
            key,
            epi: epilogue(&w, bias, act),
            kernel: Kernel::Int8(kernel),
        })
    }

    /// The kernel that runs this layer: the algorithm's, or `depthwise`
    /// (`direct` with sparse weights) for a depthwise layer (see
    /// [`Conv2d::new`]).
    pub fn kernel_name(&self) -> &'static str {
        match &self.kernel {
            Kernel::Int8(k) => k.name(),
            Kernel::Depthwise(_) | Kernel::DepthwiseNhwc(_) | Kernel::BlockedDepthwise(_) => {
                "depthwise"
            }
            Kernel::Blocked(_) => "direct",
            Kernel::Direct(_) => "direct",
            Kernel::Gemm(_) => "gemm",
            Kernel::SpatialPack(_) => "spatial-pack",
            Kernel::Winograd(_) => "winograd",
        }
    }

    /// The class of the kernel that was built, read back from the kernel
    /// itself rather than from the key, so that a test can check that the
    /// engine runs what `dlas_core::kernel::kernel_class` decided.
    pub fn kernel_class(&self) -> KernelClass {
        let key = &self.key;
        let class = |family: KernelFamily, tile: Option<WinogradTile>| KernelClass {
            family,
            sparse: key.blocks.is_some(),
            precision: key.dtype.precision(),
            layout: key.layout,
            vnni: false,
            tile,
        };
        match &self.kernel {
            Kernel::Int8(k) => k.class(),
            Kernel::Depthwise(_) => class(KernelFamily::Depthwise, None),
            Kernel::DepthwiseNhwc(_) => KernelClass {
                layout: Layout::Nhwc,
                ..class(KernelFamily::Depthwise, None)
            },
            Kernel::Blocked(_) => KernelClass {
                layout: Layout::Nchw16c,
                ..class(KernelFamily::Direct, None)
            },
            Kernel::BlockedDepthwise(_) => KernelClass {
                layout: Layout::Nchw16c,
                ..class(KernelFamily::Depthwise, None)
            },
            Kernel::Direct(_) => class(KernelFamily::Direct, None),
            Kernel::Gemm(_) if key.workload.is_depthwise() => {
                class(KernelFamily::DepthwiseGemm, None)
            }
            Kernel::Gemm(_) => class(KernelFamily::Gemm, None),
            Kernel::SpatialPack(_) => class(KernelFamily::SpatialPack, None),
            Kernel::Winograd(k) => class(KernelFamily::Winograd, Some(k.tile())),
        }
    }

    /// Whether the layer computes in int8.
    pub fn is_int8(&self) -> bool {
        matches!(self.kernel, Kernel::Int8(_))
    }

    /// The lowering the layer was built for.
    pub fn key(&self) -> &LayerKey {
        &self.key
    }

    pub fn workload(&self) -> &Workload {
        &self.key.workload
    }

    /// The storage format chosen for the weights.
    pub fn format(&self) -> Format {
        self.key.weight_format()
    }

    /// BSR block shape of sparse weights (1x1 for CSR).
    pub fn blocks(&self) -> Option<(usize, usize)> {
        self.key.blocks
    }

    pub fn layout(&self) -> Layout {
        self.key.layout
    }

    /// One sample, inside the caller's thread pool.
    pub(crate) fn run_sample(&self, input: &[f32], out: &mut [f32], residual: Option<&[f32]>) {
        match &self.kernel {
            Kernel::Blocked(k) => k.run(input, out, &self.epi, residual),
            Kernel::BlockedDepthwise(k) => k.run(input, out, &self.epi, residual),
            Kernel::Depthwise(k) => k.run(input, out, &self.epi, residual),
            Kernel::DepthwiseNhwc(k) => k.run(input, out, &self.epi, residual),
            Kernel::Direct(k) => k.run(input, out, &self.epi, residual),
            Kernel::Gemm(k) => k.run(input, out, &self.epi, residual),
            Kernel::SpatialPack(k) => k.run(input, out, &self.epi, residual),
            Kernel::Winograd(k) => k.run(input, out, &self.epi, residual),
            Kernel::Int8(_) => panic!("an int8 layer takes int8 activations: use Conv2d::run_i8"),
        }
    }

    /// How this layer and `next`, the depthwise layer that alone reads its
    /// output, run as one step ([`crate::inverted`]) on `threads` threads:
    /// where this is a 1x1 expansion the GEMM runs in bands, `next` the
    /// NCHW depthwise stencil, and the map between them is at least
    /// [`inverted::FUSE_FROM_BYTES`].
    pub(crate) fn fuses_with(&self, next: &Conv2d, threads: usize) -> Option<Tiles> {
        let map_bytes = 4 * self.key.workload.out_len();
        match (&self.kernel, &next.kernel) {
            (Kernel::Gemm(g), Kernel::Depthwise(_))
                if g.runs_bands()
                    && map_bytes >= inverted::FUSE_FROM_BYTES
                    && next.key.workload.in_channels == self.key.workload.out_channels =>
            {
                Some(Tiles::of(&next.key.workload, g.panel_rows(), threads))
            }
            (Kernel::Blocked(e), Kernel::BlockedDepthwise(d))
                if blocked::inverted::fuses(e, d) && map_bytes >= inverted::FUSE_FROM_BYTES =>
            {
                Some(Tiles::of(&next.key.workload, blocked::BLOCK, threads))
            }
            _ => None,
        }
    }

    /// One sample of this layer and then `next`, as [`Conv2d::fuses_with`]
    /// allowed with `tiles`: `input` is this layer's, `out` and `residual`
    /// `next`'s.
    pub(crate) fn run_fused_sample(
        &self,
        (next, tiles): (&Conv2d, Tiles),
        input: &[f32],
        out: &mut [f32],
        residual: Option<&[f32]>,
    ) {
        match (&self.kernel, &next.kernel) {
            (Kernel::Gemm(g), Kernel::Depthwise(d)) => {
                let dw = (d, &next.key.workload, &next.epi);
                inverted::run((g, &self.epi), dw, tiles, input, out, residual);
            }
            (Kernel::Blocked(e), Kernel::BlockedDepthwise(d)) => {
                let (expand, dw) = ((e, &self.epi), (d, &next.epi));
                blocked::inverted::run(expand, dw, tiles, input, out, residual);
            }
            _ => unreachable!("only the layers `fuses_with` accepts run fused"),
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
        let (il, ol) = (self.key.workload.in_len(), self.key.workload.out_len());
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
        let mut out = vec![0.0; batch * self.key.workload.out_len()];
        self.run_into(pool, input, &mut out);
        out
    }

    /// Runs a batch into `out`, which it overwrites, as the engine runs a
    /// layer into its arena: a benchmark that times this times the kernel,
    /// not the allocation and page faults of a fresh output.
    pub fn run_into(&self, pool: &rayon::ThreadPool, input: &[f32], out: &mut [f32]) {
        let (il, ol) = (self.key.workload.in_len(), self.key.workload.out_len());
        assert_eq!(input.len() % il, 0, "input length");
        assert_eq!(out.len(), input.len() / il * ol, "output length");
        pool.install(|| {
            for (x, y) in input.chunks(il).zip(out.chunks_mut(ol)) {
                self.run_sample(x, y, None);
            }
        });
    }

    /// Seconds of each of `runs` runs of a batch into `out`, timed as a
    /// network runs its layers: on `pool`'s workers kept awake through
    /// them all (the engine's run, not a rayon `install` per run), and
    /// each run after `evict(0..tasks)` as a parallel loop (untimed), which
    /// a tuner uses to push the layer's weights and input out of the cores'
    /// caches, where a network's other layers leave them.
    pub fn time_runs(
        &self,
        pool: &rayon::ThreadPool,
        (input, out): (&[f32], &mut [f32]),
        runs: usize,
        (tasks, evict): (usize, &(dyn Fn(usize) + Sync)),
    ) -> Vec<f64> {
        let (il, ol) = (self.key.workload.in_len(), self.key.workload.out_len());
        assert_eq!(input.len() % il, 0, "input length");
        assert_eq!(out.len(), input.len() / il * ol, "output length");
        crate::awake::run_awake(pool, || {
            (0..runs)
                .map(|_| {
                    crate::awake::for_each(tasks, evict);
                    let t = std::time::Instant::now();
                    for (x, y) in input.chunks(il).zip(out.chunks_mut(ol)) {
                        self.run_sample(x, y, None);
                    }
                    t.elapsed().as_secs_f64()
                })
                .collect()
        })
    }
}

/// The epilogue of a layer: its bias (zeros without one) and activation.
fn epilogue(w: &Workload, bias: Option<&[f32]>, act: Activation) -> Epilogue {
    Epilogue {
        bias: bias.map_or_else(|| vec![0.0; w.out_channels], <[f32]>::to_vec),
        act,
    }
}
