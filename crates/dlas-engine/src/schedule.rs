//! Schedules: every knob of every convolution algorithm as a value.
//!
//! A schedule changes how a convolution is computed (tiling, vector width,
//! which loop runs in parallel), never what it computes: every valid
//! schedule gives the same result up to float reassociation. `Default` is
//! the untuned point; a tuner searches the rest and relies on
//! [`Schedule::validate`] to reject candidates before running them.

use crate::algorithm::KernelAlgorithm;
use crate::isa::Isa;
pub use crate::tiles::GEMM_TILES;
use crate::tiles::tile_registers;
use crate::workload::Workload;
use serde::{Deserialize, Serialize};

/// Which loop of a kernel is split across the thread pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParallelLoop {
    /// Output channels (rows of the weight matrix).
    OutputChannels,
    /// Output pixels (columns of the im2col matrix, spatial tiles).
    Spatial,
}

/// The output dimension a GEMM's vectors run along: the `nr` columns of
/// its register tile, the B operand's panels. The other one is the tile's
/// `mr` rows, one broadcast each. A tile does `mr * nr / lanes` FMAs for
/// `mr + nr / lanes` loads per reduction step, so when one dimension is
/// small (16 pixels at ResNet's 4x4 maps) vectorising the other keeps the
/// tile full.
///
/// Tuning records written before this knob existed lack it and mean
/// `Spatial`, the only form the GEMM had then (hence the serde default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VectorAxis {
    /// Output pixels: C is (output channels x pixels), the weights are A.
    /// The natural form of NCHW.
    #[default]
    Spatial,
    /// Output channels: C is (pixels x output channels), the weights are B.
    /// The natural form of NHWC; for NCHW, C is transposed on its way out.
    OutputChannels,
}

/// Sliding-window convolution: each task owns `oc_block` output channels
/// over `row_block` output rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DirectSchedule {
    pub oc_block: usize,
    pub row_block: usize,
}

impl Default for DirectSchedule {
    fn default() -> Self {
        DirectSchedule {
            oc_block: 1,
            row_block: usize::MAX,
        }
    }
}

/// im2col + blocked GEMM. The microkernel computes an `mr` x `nr` tile of C
/// in registers; `kc`, `mc`, `nc` block K, M and N for the caches; M and N
/// are the output's channels and pixels, in the order `vectors` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmSchedule {
    pub mr: usize,
    /// A multiple of the vector width (8 f32 lanes on AVX2; a multiple of
    /// 16 runs on AVX-512 where the CPU has it).
    pub nr: usize,
    pub kc: usize,
    pub mc: usize,
    pub nc: usize,
    pub parallel: ParallelLoop,
    /// Which output dimension is N, the one `nr` vectorises.
    #[serde(default)]
    pub vectors: VectorAxis,
}

impl Default for GemmSchedule {
    /// The untuned point of this CPU: a 6x16 tile (12 AVX2 accumulators)
    /// or, with AVX-512, 12x32 (24 of its 32 registers), with reduction
    /// blocks of the untuned length.
    fn default() -> Self {
        let (mr, nr) = match Isa::detect() {
            Isa::Avx512 => (12, 32),
            Isa::Avx2 | Isa::Portable => (6, 16),
        };
        let kc = UNTUNED_KC;
        GemmSchedule {
            mr,
            nr,
            kc,
            mc: 8 * mr,
            nc: 256,
            parallel: ParallelLoop::OutputChannels,
            vectors: VectorAxis::Spatial,
        }
    }
}

/// Spatial pack: an output tile of `vh` x `vw` pixels times `vc` output
/// channels (the vector) is accumulated at once from a padded input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpatialPackSchedule {
    pub vc: usize,
    pub vh: usize,
    pub vw: usize,
    pub parallel: ParallelLoop,
}

impl Default for SpatialPackSchedule {
    fn default() -> Self {
        SpatialPackSchedule {
            vc: 8,
            vh: 2,
            vw: 4,
            parallel: ParallelLoop::OutputChannels,
        }
    }
}

/// Winograd F(4x4, 3x3) or F(2x2, 3x3) (the layer's map decides: see
/// `dlas_core::calibration::winograd_tile`): per pass, `tile_block` output
/// tiles of 4x4 (2x2) pixels are transformed, multiplied point by point as
/// 36 (16) GEMMs (output channels x input channels times input channels x
/// tiles, or transposed) on the GEMM's `mr` x `nr` microkernels with
/// reduction blocks of `kc` input channels, and transformed back.
/// `tile_block` trades the size of the transformed input and products
/// (points x channels x tiles each, which should stay in cache) against the
/// width of the GEMMs (a block narrower than `nr` leaves the microkernel's
/// vectors partly empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WinogradSchedule {
    pub mr: usize,
    pub nr: usize,
    pub kc: usize,
    pub tile_block: usize,
    /// What the products' `nr` columns run along: tiles (`Spatial`) or
    /// output channels.
    pub vectors: VectorAxis,
}

impl Default for WinogradSchedule {
    /// The GEMM's untuned tile and `kc`, and 64 tiles (a 32x32 map) a pass.
    fn default() -> Self {
        let g = GemmSchedule::default();
        WinogradSchedule {
            mr: g.mr,
            nr: g.nr,
            kc: g.kc,
            tile_block: 64,
            vectors: VectorAxis::Spatial,
        }
    }
}

/// The blocked layout's kernels (NCHW16c: the direct convolution and the
/// depthwise stencil, which run under the direct algorithm): a task is
/// `blocks` output blocks of 16 channels by `rows` output rows. A
/// flattened 1x1 stride-1 layer runs its map as one row, and its task's
/// pixels are `rows` rows of the map, consecutive in memory. Within a task
/// each block's weights are read once for all of its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlockedSchedule {
    pub blocks: usize,
    pub rows: usize,
}

impl Default for BlockedSchedule {
    fn default() -> Self {
        BlockedSchedule { blocks: 1, rows: 1 }
    }
}

/// The schedule of one algorithm's kernels (`Blocked`: the direct
/// algorithm's in NCHW16c).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "kebab-case")]
pub enum Schedule {
    Direct(DirectSchedule),
    Gemm(GemmSchedule),
    SpatialPack(SpatialPackSchedule),
    Winograd(WinogradSchedule),
    Blocked(BlockedSchedule),
}

/// Why a schedule cannot run a workload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid schedule {schedule:?} for {workload}: {reason}")]
pub struct InvalidSchedule {
    pub schedule: Schedule,
    pub workload: String,
    pub reason: String,
}

/// Output-channel vector widths spatial pack is compiled for.
pub const SPATIAL_PACK_VC: &[usize] = &[4, 8, 16];
/// Floats per AVX2 register (spatial pack's kernels are AVX2).
const LANES: usize = 8;
/// Vector registers on x86-64 with AVX2.
const REGISTERS: usize = 16;
/// The untuned GEMM's largest reduction block. C's tiles are read and
/// written once per block, so longer blocks pay that less often; measured
/// on this project's 2-vCPU Xeon (AVX-512, interleaved runs of one layer),
/// 256 ran ResNet-18's 3x3 layers 10-25% faster than the 64-85 an
/// L1-sized B panel allowed, and 512 no faster than 256.
pub(crate) const UNTUNED_KC: usize = 256;
/// Bytes a `kc` x `nr` panel of B may occupy. The microkernels stream it
/// once per `mr` rows of A, in order, so the hardware prefetcher feeds it
/// from L2: it need not fit L1 (an L1-sized panel, 16 KiB, held `kc` to
/// 64-85 on AVX-512 tiles and cost 10-25% on ResNet's 3x3 layers in C's
/// extra passes). 128 KiB admits `kc` 512 on the widest tile.
const PANEL_BUDGET: usize = 128 * 1024;
/// Bytes an `mc` x `kc` block of A may occupy: half of a 512 KiB L2.
const L2_BUDGET: usize = 256 * 1024;

impl Schedule {
    /// The algorithm whose kernel this schedule drives.
    pub fn algorithm(&self) -> KernelAlgorithm {
        match self {
            Schedule::Direct(_) | Schedule::Blocked(_) => KernelAlgorithm::Direct,
            Schedule::Gemm(_) => KernelAlgorithm::Gemm,
            Schedule::SpatialPack(_) => KernelAlgorithm::SpatialPack,
            Schedule::Winograd(_) => KernelAlgorithm::Winograd,
        }
    }

    /// Accepts the schedule for `w` or says why not.
    pub fn validate(&self, w: &Workload) -> Result<(), InvalidSchedule> {
        let reject = |reason: String| {
            Err(InvalidSchedule {
                schedule: *self,
                workload: w.to_string(),
                reason,
            })
        };
        match *self {
            Schedule::Direct(s) => {
                if s.oc_block == 0 || s.row_block == 0 {
                    return reject("blocks must be positive".into());
                }
                if s.oc_block > w.out_channels_per_group() {
                    return reject(format!(
                        "oc_block {} exceeds the {} output channels of a group",
                        s.oc_block,
                        w.out_channels_per_group()
                    ));
                }
            }
            Schedule::Gemm(s) => {
                if !GEMM_TILES.contains(&(s.mr, s.nr)) {
                    return reject(format!(
                        "no microkernel for a {}x{} tile (have {GEMM_TILES:?})",
                        s.mr, s.nr
                    ));
                }
                if let Some(reason) = tile_unfit(s.mr, s.nr) {
                    return reject(reason);
                }
                if s.kc == 0 || s.mc == 0 || s.nc == 0 {
                    return reject("blocks must be positive".into());
                }
                if !s.mc.is_multiple_of(s.mr) || !s.nc.is_multiple_of(s.nr) {
                    return reject(format!(
                        "mc {} and nc {} must be multiples of mr {} and nr {}",
                        s.mc, s.nc, s.mr, s.nr
                    ));
                }
                if s.kc * s.nr * 4 > PANEL_BUDGET {
                    return reject(format!(
                        "a kc x nr panel of B ({} bytes) exceeds {PANEL_BUDGET} bytes",
                        s.kc * s.nr * 4
                    ));
                }
                if s.kc * s.mc * 4 > L2_BUDGET {
                    return reject(format!(
                        "an mc x kc block of A ({} bytes) exceeds the L2 budget",
                        s.kc * s.mc * 4
                    ));
                }
            }
            Schedule::Winograd(s) => {
                if !w.winograd_computes() {
                    return reject("Winograd runs 3x3 stride-1 ungrouped convolutions only".into());
                }
                if !GEMM_TILES.contains(&(s.mr, s.nr)) {
                    return reject(format!(
                        "no microkernel for a {}x{} tile (have {GEMM_TILES:?})",
                        s.mr, s.nr
                    ));
                }
                if let Some(reason) = tile_unfit(s.mr, s.nr) {
                    return reject(reason);
                }
                if s.kc == 0 || s.tile_block == 0 {
                    return reject("blocks must be positive".into());
                }
                if s.kc * s.nr * 4 > PANEL_BUDGET {
                    return reject(format!(
                        "a kc x nr panel of B ({} bytes) exceeds {PANEL_BUDGET} bytes",
                        s.kc * s.nr * 4
                    ));
                }
            }
            Schedule::SpatialPack(s) => {
                if !SPATIAL_PACK_VC.contains(&s.vc) {
                    return reject(format!("vc must be one of {SPATIAL_PACK_VC:?}"));
                }
                if s.vh == 0 || s.vw == 0 {
                    return reject("tiles must be positive".into());
                }
                let accumulators = s.vh * s.vw * s.vc.div_ceil(LANES);
                if accumulators > REGISTERS - 2 {
                    return reject(format!(
                        "a {}x{}x{} tile needs {accumulators} accumulator registers",
                        s.vh, s.vw, s.vc
                    ));
                }
                if s.vh > w.out_h || s.vw > w.out_w {
                    return reject(format!(
                        "tile {}x{} exceeds the {}x{} output",
                        s.vh, s.vw, w.out_h, w.out_w
                    ));
                }
            }
            Schedule::Blocked(s) => {
                let blocks = w.out_channels.div_ceil(crate::blocked::BLOCK);
                if s.blocks == 0 || s.rows == 0 {
                    return reject("blocks and rows must be positive".into());
                }
                if s.blocks > blocks || s.rows > w.out_h {
                    return reject(format!(
                        "{} blocks by {} rows exceed the output's {blocks} blocks by {} rows",
                        s.blocks, s.rows, w.out_h
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Why this CPU cannot run an `mr` x `nr` microkernel, if it cannot.
fn tile_unfit(mr: usize, nr: usize) -> Option<String> {
    let (needed, available) = tile_registers(mr, nr, Isa::detect());
    (needed > available)
        .then(|| format!("the tile needs {needed} vector registers ({available} on this CPU)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> Workload {
        Workload::new(64, 64, 3, 1, 1, 1, 16, 16)
    }

    #[test]
    fn defaults_are_valid() {
        let w = workload();
        for s in [
            Schedule::Direct(DirectSchedule::default()),
            Schedule::Gemm(GemmSchedule::default()),
            Schedule::SpatialPack(SpatialPackSchedule::default()),
            Schedule::Winograd(WinogradSchedule::default()),
            Schedule::Blocked(BlockedSchedule::default()),
        ] {
            s.validate(&w).unwrap();
        }
        let strided = Workload::new(64, 64, 3, 2, 1, 1, 16, 16);
        let winograd = Schedule::Winograd(WinogradSchedule::default());
        assert!(
            winograd
                .validate(&strided)
                .unwrap_err()
                .reason
                .contains("stride-1")
        );
    }

    #[test]
    fn rejects_with_a_reason() {
        let w = workload();
        let bad = Schedule::Gemm(GemmSchedule {
            mr: 8,
            nr: 24,
            ..GemmSchedule::default()
        });
        assert!(bad.validate(&w).unwrap_err().reason.contains("microkernel"));
        let bad = Schedule::Gemm(GemmSchedule {
            mc: 70,
            ..GemmSchedule::default()
        });
        assert!(bad.validate(&w).unwrap_err().reason.contains("multiples"));
        let bad = Schedule::SpatialPack(SpatialPackSchedule {
            vh: 4,
            vw: 4,
            vc: 16,
            ..SpatialPackSchedule::default()
        });
        assert!(bad.validate(&w).unwrap_err().reason.contains("registers"));
        let bad = Schedule::Direct(DirectSchedule {
            oc_block: 65,
            ..DirectSchedule::default()
        });
        assert!(bad.validate(&w).is_err());
    }
}
