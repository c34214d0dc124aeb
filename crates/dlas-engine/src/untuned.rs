//! The untuned schedule of a layer: what it runs without a tuned one, and
//! where every tuning search starts. Each is the algorithm's `Default`
//! fitted to the layer's shape; the GEMM's is chosen by a cost model of
//! this CPU's microkernels and of the thread pool's balance.

use crate::algorithm::KernelAlgorithm;
use crate::isa::Isa;
use crate::schedule::{
    BlockedSchedule, DirectSchedule, GemmSchedule, ParallelLoop, Schedule, SpatialPackSchedule,
    UNTUNED_KC, VectorAxis, WinogradSchedule,
};
use crate::workload::Workload;
use dlas_core::Layout;

/// The schedule a layer runs when neither the configuration nor a tuned
/// table names one: the untuned `Default` of `algorithm`, fitted to the
/// workload so that it is valid (tiles no larger than the output, register
/// blocks inside a group) and, for gemm, fitted as [`default_gemm`] says.
/// In NCHW16c every layer runs a blocked kernel ([`default_blocked`]).
pub(crate) fn default_schedule(
    algorithm: KernelAlgorithm,
    w: &Workload,
    threads: usize,
    layout: Layout,
) -> Schedule {
    let nhwc = layout == Layout::Nhwc;
    if layout == Layout::Nchw16c {
        return Schedule::Blocked(default_blocked(w));
    }
    match algorithm {
        KernelAlgorithm::Direct => {
            let d = DirectSchedule::default();
            Schedule::Direct(DirectSchedule {
                oc_block: 8.min(w.out_channels_per_group()),
                ..d
            })
        }
        KernelAlgorithm::Gemm => Schedule::Gemm(default_gemm(w, threads, nhwc)),
        KernelAlgorithm::SpatialPack => {
            let d = SpatialPackSchedule::default();
            Schedule::SpatialPack(SpatialPackSchedule {
                vh: d.vh.min(w.out_h),
                vw: d.vw.min(w.out_w),
                ..d
            })
        }
        KernelAlgorithm::Winograd => Schedule::Winograd(default_winograd(w, threads)),
    }
}

/// Pixels of a flattened 1x1 layer's task: 8 AVX2 tiles of 6.
const BLOCKED_PIXELS: usize = 48;

/// The untuned blocked schedule: one output block a task, by one row, or
/// for a flattened 1x1 stride-1 layer (whose rows are consecutive) the
/// rows nearest [`BLOCKED_PIXELS`] pixels. Other task sizes were tried on
/// the Zen 3 (16, 24, 49 pixels, a whole map): each layer moved by up to
/// 10% either way, none was best everywhere (docs/performance.md), which
/// is what the tuner's per-layer choice is for.
pub(crate) fn default_blocked(w: &Workload) -> BlockedSchedule {
    let flat = (w.kernel, w.stride, w.padding) == (1, 1, 0);
    let rows = if flat {
        ((BLOCKED_PIXELS + w.out_w / 2) / w.out_w).clamp(1, w.out_h)
    } else {
        1
    };
    BlockedSchedule { blocks: 1, rows }
}

/// Bytes the transformed input and products of one Winograd pass may
/// take: about this machine's L2 (1 MiB a core), so the GEMMs read V from
/// L2 and the output transform reads M from it.
const WINOGRAD_PASS_BYTES: usize = 1 << 20;

/// The untuned Winograd schedule: the GEMM's untuned tile for the
/// products' shape (output channels x tiles), vectors along tiles (a
/// Winograd layer has 16 or more); along output channels, which the model
/// chose on 16x16 and 14x14 maps when it weighed both, the output
/// transform gathers each point from a row of channels, and ResNet-18
/// CIFAR-10 ran 6.5% slower (5 of 5 alternations), ResNet-50 3.8% (3 of
/// 3). And as many tiles a pass as keep the pass's points x (in + out
/// channels) values a tile within [`WINOGRAD_PASS_BYTES`], rounded to
/// whole `nr` panels and at least one.
pub(crate) fn default_winograd(w: &Workload, threads: usize) -> WinogradSchedule {
    let tile = crate::winograd::tile_of(w);
    let tiles = tile.tiles([w.out_h, w.out_w]);
    let per_tile = tile.points() * (w.in_channels + w.out_channels) * 4;
    let products = Workload::new(w.in_channels, w.out_channels, 1, 1, 0, 1, 1, tiles);
    let g = gemm_schedule(&products, threads, false, false);
    let fit = (WINOGRAD_PASS_BYTES / per_tile) / g.nr * g.nr;
    WinogradSchedule {
        mr: g.mr,
        nr: g.nr,
        kc: g.kc,
        tile_block: fit.max(g.nr).min(tiles),
        vectors: g.vectors,
    }
}

/// Register tiles the untuned GEMM chooses from on AVX-512, in order of
/// preference on equal cost.
const AVX512_TILES: [(usize, usize); 4] = [(8, 48), (6, 64), (12, 32), (8, 16)];
/// How much longer than the shortest makespan a task size may make it and
/// still be preferred for being larger: each task has a fixed cost (its
/// scratch, a copy of B's partial edge panel), and 214 one-panel tasks of a
/// 320->1280 1x1 layer on a 7x7 map, the only size that split its 214 row
/// panels exactly, ran 2.8x slower than the 4 tasks of 56 this slack
/// picks (470 against 171 µs, the layer timed alone).
const TASK_SLACK: f64 = 0.05;

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
/// the rows rather than half a 32-pixel vector) without timing anything.
/// A convolution keeps its layout's orientation unless that would run its
/// vectors along fewer values than one holds (a linear layer's one pixel
/// in NCHW): the model, which prices the transposed orientation at its
/// transpose alone, chose it for maps of 4x4 to 14x14, where it ran
/// 1.3-1.9x slower than the best tile in the layout's own (512->512 3x3
/// on 4x4: 530 against 348 µs; 256->512 3x3 stride 2 on 8x8: 277 against
/// 149 µs; 960->320 1x1 on 7x7: 260 against 172 µs; each timed alone, 31
/// runs). Elsewhere it is `GemmSchedule::default()` in the layout's own
/// orientation. Then the parallel loop runs over the dimension whose
/// blocks spread best over `threads` threads (see [`task_panels`]), or
/// that splits the larger operand. 1x1 layers on small maps price 16-wide
/// tiles as the wide ones (see [`narrow_tiles_pay`]).
pub(crate) fn default_gemm(w: &Workload, threads: usize, nhwc: bool) -> GemmSchedule {
    gemm_schedule(w, threads, nhwc, narrow_tiles_pay(w, nhwc))
}

/// How much more of its columns every wide tile must leave empty than a
/// 16-wide one for the model to weigh the narrow tile (see
/// [`narrow_tiles_pay`]).
const NARROW_WASTE_MARGIN: f64 = 0.05;

/// Whether the model prices a 16-wide tile as it prices the wide ones
/// (by its FMAs alone), so that the columns each leaves empty decide: for
/// 1x1 stride-1 NCHW convolutions whose map every wide tile (32, 48 or 64
/// pixels) leaves at least [`NARROW_WASTE_MARGIN`] more empty than a
/// 16-wide one. On a 14x14 map (196 pixels) the wide tiles leave 12.5-23%
/// of their columns empty and a 16-wide one 6%. The load term makes an
/// 8x16 tile 2.25x as costly per product as an 8x48 one, so the model
/// never chose it, while the tuner's best schedule for six of the seven
/// 1x1 layers of MobileNetV2 on 14x14 was 16 wide, 1.19-1.32x faster than
/// the default (each timed alone, AMD EPYC Zen 4). Elsewhere the load term
/// stands: where a wide tile divides the map (CIFAR-10's 32x32 to 8x8),
/// pricing narrow tiles as wide ones chose them for their rows (8 divides
/// more channel counts than 6) and made CIFAR-10 MobileNetV1 1.12x and
/// MobileNetV2 1.03x as long.
fn narrow_tiles_pay(w: &Workload, nhwc: bool) -> bool {
    let n = w.out_pixels();
    let empty = |nr: usize| 1.0 - n as f64 / n.next_multiple_of(nr) as f64;
    let wide = [32, 48, 64]
        .map(empty)
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    !nhwc
        && (w.kernel, w.stride, w.padding, w.groups) == (1, 1, 0, 1)
        && empty(16) + NARROW_WASTE_MARGIN < wide
}

/// [`default_gemm`]'s model, with 16-wide tiles priced as wide ones where
/// `narrow` (Winograd's products never are).
fn gemm_schedule(w: &Workload, threads: usize, nhwc: bool, narrow: bool) -> GemmSchedule {
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
            let fmas = (mr * nv) as f64 / 2.0;
            let step = if narrow && nv == 1 {
                fmas
            } else {
                fmas.max((mr + nv) as f64)
            };
            let steps = (m.div_ceil(mr) * n.div_ceil(nr) * w.reduction()) as f64;
            let transpose = if vectors == natural {
                0.0
            } else {
                (m * n) as f64 * TRANSPOSE_CYCLES
            };
            steps * step + transpose
        };
        // The layout's own orientation unless its vectors would run along
        // fewer values than one holds (a linear layer's single pixel).
        let axes = if shape(natural).1 < 16 {
            vec![natural, other]
        } else {
            vec![natural]
        };
        axes.into_iter()
            .flat_map(|v| AVX512_TILES.map(|t| (t, v)))
            .min_by(|a, b| cost(a.0, a.1).total_cmp(&cost(b.0, b.1)))
            .map(|((mr, nr), v)| (mr, nr, v))
            .expect("candidates")
    } else {
        (d.mr, d.nr, natural)
    };
    // Reduction blocks of at most UNTUNED_KC, split evenly (576 = 3 x 192,
    // not 256 + 256 + 64); blocks of about 8 tiles of rows and 256
    // columns, except along the parallel dimension, whose blocks are sized
    // so the threads finish together.
    let k = w.reduction();
    let kc = k.div_ceil(k.div_ceil(UNTUNED_KC));
    let (m, n) = shape(vectors);
    let (row_panels, row_balance) = task_panels(m.div_ceil(mr), threads, (65536 / kc / mr).max(1));
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
/// `threads` threads, at most `max` per task: the largest count whose
/// tasks' makespan is within [`TASK_SLACK`] of the shortest (threads take
/// the next task as they finish, and a dimension rarely divides evenly: 22
/// panels of a 1024-pixel layer in tasks of 5 leave one thread 12 and the
/// other 10).
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
    let sizes = 1..=max.clamp(1, panels.max(1));
    let shortest = sizes.clone().map(makespan).min().expect("a task size");
    let best = sizes
        .filter(|&per| makespan(per) as f64 <= shortest as f64 * (1.0 + TASK_SLACK))
        .max()
        .expect("a task size");
    let ideal = panels as f64 / threads as f64;
    (best, ideal / makespan(best).max(1) as f64)
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
        // 214 panels split exactly only into single ones; four tasks of 56
        // leave the threads 112 and 102, within the slack.
        let (per, balance) = task_panels(214, 2, 68);
        assert_eq!(per, 56);
        assert!((balance - 107.0 / 112.0).abs() < 1e-12);
    }

    /// 14x14 maps and ViT's 197 tokens, not maps a wide tile divides or
    /// fills as well (32x32, 28x28, 56x56, 7x7), nor 3x3 or NHWC layers.
    #[test]
    fn narrow_tiles_only_where_every_wide_one_leaves_columns_empty() {
        let one = |(h, w): (usize, usize)| Workload::new(96, 576, 1, 1, 0, 1, h, w);
        assert!(narrow_tiles_pay(&one((14, 14)), false));
        assert!(narrow_tiles_pay(&one((1, 197)), false));
        for map in [(32, 32), (28, 28), (56, 56), (7, 7)] {
            assert!(!narrow_tiles_pay(&one(map), false), "{map:?}");
        }
        assert!(!narrow_tiles_pay(&one((14, 14)), true));
        let three = Workload::new(96, 576, 3, 1, 1, 1, 14, 14);
        assert!(!narrow_tiles_pay(&three, false));
        if Isa::detect() == Isa::Avx512 {
            assert_eq!(default_gemm(&one((14, 14)), 2, false).nr, 16);
            assert!(default_gemm(&one((32, 32)), 2, false).nr > 16);
        }
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
            if dlas_core::calibration::winograd_tile(k, s, 1, cin, [w.out_h, w.out_w]).is_some() {
                Schedule::Winograd(default_winograd(&w, 2))
                    .validate(&w)
                    .unwrap();
            }
            Schedule::Blocked(default_blocked(&w)).validate(&w).unwrap();
        }
    }

    /// A flattened 1x1 layer's task is the rows nearest 48 pixels; any
    /// other layer's one row.
    #[test]
    fn untuned_blocked_tasks_are_about_48_pixels_of_a_flat_layer() {
        let rows = |k: usize, hw: usize| {
            default_blocked(&Workload::new(64, 64, k, 1, k / 2, 1, hw, hw)).rows
        };
        assert_eq!(
            [
                rows(1, 112),
                rows(1, 56),
                rows(1, 28),
                rows(1, 14),
                rows(1, 7)
            ],
            [1, 1, 2, 3, 7]
        );
        assert_eq!([rows(3, 56), rows(3, 7)], [1, 1]);
        assert_eq!(rows(1, 1), 1);
    }
}
