//! An inverted-residual block's expansion (1x1, GEMM) and depthwise layer
//! run as one step, tile by tile, so the expanded map is never stored.
//!
//! MobileNetV2's expansions widen a map six times: its first one writes
//! 96 channels of 112x112 (4.8 MB) that the depthwise layer after it reads
//! once and drops. Stored, that map leaves the caches on its way to memory
//! and comes back: the expansion took 966 µs in the network against
//! 495-563 µs timed alone with a warm output, and the depthwise layer 472
//! µs against ONNX Runtime's 216 (one thread, docs/performance.md). Here
//! each task expands the band of input rows one tile of depthwise output
//! rows reads, for a block of channels, into a buffer its thread keeps
//! (a few hundred KiB, so in L2), and runs the depthwise stencil on it.
//! Bands of neighbouring tiles overlap by the stencil's halo (k - s rows),
//! which the tile height keeps to a small share of the expansion's work.
//!
//! The fused step computes exactly what the two layers compute (the same
//! kernels, the same epilogues); only an fp16 engine differs, by not
//! rounding the expanded map to f16 between them.

use crate::depthwise::DepthwiseConv;
use crate::epilogue::{Epilogue, SyncPtr};
use crate::gemm::GemmConv;
use crate::workload::Workload;
use std::cell::RefCell;
use std::ops::Range;

/// Values a tile's band of the expanded map may hold: 48 Ki f32 (192
/// KiB), which leaves room in a 1 MiB (Zen 4) or 2 MiB (Xeon) L2 for the
/// input band and the depthwise kernel's own buffer.
const BAND_VALUES: usize = 48 * 1024;

/// Expanded maps smaller than this run unfused. Fusing pays for what the
/// map costs at rest beyond L2, and costs the stencil its specialised
/// paths (it reads padded copies of the band's rows): on MobileNetV2
/// (ImageNet, 2 threads, AMD EPYC) fusing took 290 µs off the 112x112
/// pair (4.8 MB), 30-36 µs off each 56x56 pair (1.8 MB), and added 5-34
/// µs to each pair from 28x28 (0.6 MB) down.
pub(crate) const FUSE_FROM_BYTES: usize = 1 << 20;

thread_local! {
    /// The expanded band of a task, kept by each pool thread across runs.
    static BAND: RefCell<Vec<f32>> = RefCell::default();
}

/// How the depthwise output is cut into tasks: blocks of `channels`
/// channels by `rows` output rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tiles {
    pub channels: usize,
    pub rows: usize,
}

impl Tiles {
    /// The tiles of depthwise layer `dw` after an expansion whose weight
    /// panels are `panel` channels high: of the tilings whose bands fit
    /// [`BAND_VALUES`] and that give `threads` threads four tasks each
    /// (where the layer has that many), the one that expands the fewest
    /// rows (halos counted), then the one with the fewest channel blocks
    /// (each re-reads the input band).
    pub fn of(dw: &Workload, panel: usize, threads: usize) -> Tiles {
        let panels = dw.in_channels.div_ceil(panel);
        let tilings = (1..=panels).flat_map(|blocks| {
            let channels = (panels.div_ceil(blocks) * panel).min(dw.in_channels);
            (1..=dw.out_h).map(move |rows| Tiles { channels, rows })
        });
        let cost = |t: &Tiles| {
            let blocks = dw.in_channels.div_ceil(t.channels);
            let tiles = dw.out_h.div_ceil(t.rows);
            let expanded: usize = (0..tiles)
                .map(|i| band_of(dw, &(i * t.rows..dw.out_h.min((i + 1) * t.rows))).len())
                .sum();
            let fits = t.channels * band_of(dw, &(0..t.rows)).len() * dw.in_w <= BAND_VALUES;
            let shared = blocks * tiles >= 4 * threads;
            (!fits, !shared, expanded, blocks, tiles)
        };
        tilings
            .min_by_key(cost)
            .expect("a layer has a channel and a row")
    }
}

/// Runs one sample of `expand` (1x1, [`GemmConv::runs_bands`]) and then
/// `dw` on its output, without storing that output: `input` is the
/// expansion's, `out` and `residual` the depthwise layer's.
pub(crate) fn run(
    (expand, expand_epi): (&GemmConv, &Epilogue),
    (dw, dw_w, dw_epi): (&DepthwiseConv, &Workload, &Epilogue),
    tiles: Tiles,
    input: &[f32],
    out: &mut [f32],
    residual: Option<&[f32]>,
) {
    let (oh, iw) = (dw_w.out_h, dw_w.in_w);
    let blocks = dw_w.in_channels.div_ceil(tiles.channels);
    let row_tiles = oh.div_ceil(tiles.rows);
    let c = SyncPtr::new(out);
    crate::awake::for_each(blocks * row_tiles, |t| {
        let (b, r) = (t / row_tiles, t % row_tiles);
        let chans = b * tiles.channels..dw_w.in_channels.min((b + 1) * tiles.channels);
        let rows = r * tiles.rows..oh.min((r + 1) * tiles.rows);
        let band = band_of(dw_w, &rows);
        let n = band.len() * iw;
        BAND.with_borrow_mut(|values| {
            if values.len() < chans.len() * n {
                values.resize(chans.len() * n, 0.0);
            }
            let cols = band.start * iw..band.end * iw;
            expand.band(input, chans.clone(), cols, values, expand_epi);
            let first = chans.start;
            let planes = |ch: usize| (&values[(ch - first) * n..][..n], band.start);
            // SAFETY: task t alone writes channels `chans` of rows `rows`.
            unsafe { dw.rows_of(planes, chans, rows, c, (dw_epi, residual)) };
        })
    });
}

/// The input rows inside the map that depthwise output rows `rows` read.
pub(crate) fn band_of(w: &Workload, rows: &Range<usize>) -> Range<usize> {
    let first = (rows.start * w.stride).saturating_sub(w.padding);
    let end = ((rows.end - 1) * w.stride + w.kernel).saturating_sub(w.padding);
    first..end.min(w.in_h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::Isa;
    use crate::schedule::{DirectSchedule, GemmSchedule};
    use crate::testing;
    use crate::tiles::{GEMM_TILES, tile_registers};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any tiling, stride, halo and map: the fused step writes what the
        /// expansion and then the depthwise layer write, on every
        /// instruction set and GEMM tile the CPU has.
        #[test]
        fn the_fused_pair_writes_what_its_two_layers_write(
            (cin, cexp) in (1usize..=20, 1usize..=40),
            (k, stride) in (prop_oneof![Just(3usize), Just(5)], 1usize..=2),
            (h, wd) in (1usize..=20, 1usize..=40),
            (blocks, rows) in (1usize..=4, 1usize..=8),
            tile in 0..GEMM_TILES.len(),
            (act, residual) in (testing::activation(), any::<bool>()),
            seed in any::<u64>(),
        ) {
            let expand_w = Workload::new(cin, cexp, 1, 1, 0, 1, h, wd);
            let dw_w = Workload::new(cexp, cexp, k, stride, k / 2, cexp, h, wd);
            let (mr, nr) = GEMM_TILES[tile];
            let s = GemmSchedule { mr, nr, ..GemmSchedule::default() };
            let draw = |n: usize, salt: u64| {
                testing::weights(&Workload::new(1, n, 1, 1, 0, 1, 1, 1), seed ^ salt)
            };
            let (input, res) = (draw(expand_w.in_len(), 1), draw(dw_w.out_len(), 2));
            let res = residual.then_some(&res[..]);
            let epis = [3, 4].map(|salt| Epilogue { bias: draw(cexp, salt), act });
            let tiles = Tiles { channels: blocks * mr, rows };
            for isa in Isa::available() {
                let (needed, available) = tile_registers(mr, nr, isa);
                if needed > available {
                    continue;
                }
                let expand = GemmConv::new(
                    expand_w, s, &testing::weights(&expand_w, seed), None, (false, false), isa,
                );
                let dw_s = DirectSchedule::default();
                let dw = DepthwiseConv::new(dw_w, dw_s, &testing::weights(&dw_w, seed), false, isa);
                let (want, got) = testing::on_pool(|| {
                    let mut mid = vec![f32::NAN; expand_w.out_len()];
                    let mut want = vec![f32::NAN; dw_w.out_len()];
                    expand.run(&input, &mut mid, &epis[0], None);
                    dw.run(&mid, &mut want, &epis[1], res);
                    let mut got = vec![f32::NAN; dw_w.out_len()];
                    run((&expand, &epis[0]), (&dw, &dw_w, &epis[1]), tiles, &input, &mut got, res);
                    (want, got)
                });
                let err: f64 = want.iter().zip(&got).map(|(&a, &b)| (a - b) as f64).map(|d| d * d).sum();
                let norm: f64 = want.iter().map(|&a| a as f64 * a as f64).sum();
                let e = (err / norm.max(1e-30)).sqrt();
                prop_assert!(e < 1e-6, "{isa:?} {tiles:?} {expand_w} then {dw_w}: {e:e}");
            }
        }
    }

    /// MobileNetV2's first expansion (96 channels of 112x112, then a
    /// stride-2 depthwise layer) and a 7x7 one: tiles stay inside the band
    /// budget, cover whole panels, and give two threads work to share.
    #[test]
    fn tiles_fit_the_band_and_share_the_work() {
        for (dw, panel) in [
            (Workload::new(96, 96, 3, 2, 1, 96, 112, 112), 12),
            (Workload::new(144, 144, 3, 1, 1, 144, 56, 56), 12),
            (Workload::new(960, 960, 3, 1, 1, 960, 7, 7), 12),
            (Workload::new(40, 40, 5, 2, 2, 40, 9, 9), 8),
        ] {
            let t = Tiles::of(&dw, panel, 2);
            let band = band_of(&dw, &(0..t.rows));
            assert!(t.channels * band.len() * dw.in_w <= BAND_VALUES || t.rows == 1);
            assert!(
                t.channels.is_multiple_of(panel) || t.channels == dw.in_channels,
                "{t:?}"
            );
            let tasks = dw.in_channels.div_ceil(t.channels) * dw.out_h.div_ceil(t.rows);
            assert!(tasks >= 4 || t.rows == 1, "{dw}: {t:?}");
        }
    }

    #[test]
    fn a_band_is_the_rows_its_tile_reads_inside_the_map() {
        let w = Workload::new(8, 8, 3, 2, 1, 8, 9, 9);
        assert_eq!(w.out_h, 5);
        assert_eq!(band_of(&w, &(0..2)), 0..4);
        assert_eq!(band_of(&w, &(2..5)), 3..9);
    }
}
