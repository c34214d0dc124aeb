//! An inverted-residual block's expansion and depthwise layer as one step
//! in NCHW16c, as `crate::inverted` runs them in NCHW: each task expands,
//! for its 16-channel blocks, the band of input rows that its tile of
//! depthwise output rows reads into a buffer its thread keeps (the
//! expansion's 1x1 kernel on the band's pixels, which are contiguous in a
//! block), and runs the blocked stencil on the band, so the expanded map
//! is never stored. Bands of neighbouring tiles overlap by the stencil's
//! halo, recomputed. The tiles are `crate::inverted::Tiles` with blocks
//! of 16 channels for panels. Both layers compute exactly what they
//! compute apart (the same kernels on the same values, in the same order),
//! so the fused step writes the same bits.

use super::BLOCK;
use super::conv::BlockedConv;
use super::depthwise::BlockedDepthwise;
use crate::epilogue::{Epilogue, SyncPtr};
use crate::inverted::{Tiles, band_of};
use std::cell::RefCell;

thread_local! {
    /// A task's expanded band, kept by each pool thread across runs.
    static BAND: RefCell<Vec<f32>> = RefCell::default();
}

/// Whether `expand` and `dw` (which reads only its output) can run as one
/// step: a 1x1 stride-1 expansion whose channels are whole blocks.
pub(crate) fn fuses(expand: &BlockedConv, dw: &BlockedDepthwise) -> bool {
    let (e, d) = (expand.workload(), dw.workload());
    expand.is_pointwise()
        && e.out_channels.is_multiple_of(BLOCK)
        && d.in_channels == e.out_channels
        && [d.in_h, d.in_w] == [e.out_h, e.out_w]
}

/// One sample of `expand` and then `dw` on its output: `input` is the
/// expansion's, `out` and `residual` the depthwise layer's.
pub(crate) fn run(
    (expand, expand_epi): (&BlockedConv, &Epilogue),
    (dw, dw_epi): (&BlockedDepthwise, &Epilogue),
    tiles: Tiles,
    input: &[f32],
    out: &mut [f32],
    residual: Option<&[f32]>,
) {
    let w = *dw.workload();
    let per_tile = tiles.channels / BLOCK;
    let groups = (w.in_channels / BLOCK).div_ceil(per_tile);
    let row_tiles = w.out_h.div_ceil(tiles.rows);
    let out = SyncPtr::new(out);
    crate::awake::for_each(groups * row_tiles, |t| {
        let (g, r) = (t / row_tiles, t % row_tiles);
        let rows = r * tiles.rows..w.out_h.min((r + 1) * tiles.rows);
        let band = band_of(&w, &rows);
        let pixels = band.start * w.in_w..band.end * w.in_w;
        BAND.with_borrow_mut(|values| {
            if values.len() < pixels.len() * BLOCK {
                values.resize(pixels.len() * BLOCK, 0.0);
            }
            let blocks = g * per_tile..(w.in_channels / BLOCK).min((g + 1) * per_tile);
            for b in blocks {
                // SAFETY: the band holds the pixels' 16 values each; block
                // b is full (`fuses`); task t alone writes rows `rows` of
                // block b, reading the band it just wrote, placed so that
                // input row `band.start` is where its pixels begin.
                unsafe {
                    expand.band(input, b, pixels.clone(), values.as_mut_ptr(), expand_epi);
                    let src = values.as_ptr().wrapping_sub(pixels.start * BLOCK);
                    dw.rows_from(src, (b, rows.clone()), out, dw_epi, residual);
                }
            }
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epilogue::Activation;
    use crate::isa::Isa;
    use crate::testing;
    use crate::untuned::default_blocked;
    use crate::workload::Workload;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// The fused step writes what the expansion and then the stencil
        /// write, bit for bit, on every instruction set, for tilings of
        /// any rows and blocks, strides 1 and 2, 3x3 and 5x5.
        #[test]
        fn the_fused_step_equals_the_two_layers(
            (cin, blocks, hw) in (1usize..=20, 1usize..=3, 3usize..=20),
            (k, stride) in (prop_oneof![Just(3usize), Just(5)], 1usize..=2),
            (rows, per_tile, residual) in (1usize..=6, 1usize..=3, any::<bool>()),
            seed in any::<u64>(),
        ) {
            let c = blocks * BLOCK;
            let e = Workload::new(cin, c, 1, 1, 0, 1, hw, hw);
            let d = Workload::new(c, c, k, stride, k / 2, c, hw, hw);
            let tiles = Tiles { channels: per_tile.min(blocks) * BLOCK, rows: rows.min(d.out_h) };
            let x: Vec<f32> = testing::weights(&Workload::new(1, e.in_len(), 1, 1, 0, 1, 1, 1), seed);
            let r = residual.then(|| testing::weights(&Workload::new(1, d.out_len(), 1, 1, 0, 1, 1, 1), seed ^ 1));
            let epi = |n: usize, act| Epilogue { bias: testing::weights(&Workload::new(1, n, 1, 1, 0, 1, 1, 1), seed ^ 2), act };
            let (ee, de) = (epi(c, Activation::Relu6), epi(c, Activation::Silu));
            for isa in Isa::available() {
                let expand = BlockedConv::new(e, default_blocked(&e), &testing::weights(&e, seed), isa);
                let dw = BlockedDepthwise::new(d, default_blocked(&d), &testing::weights(&d, seed ^ 3), isa);
                prop_assert!(fuses(&expand, &dw));
                let mut mid = vec![0.0; e.out_len()];
                let mut want = vec![0.0; d.out_len()];
                let mut got = vec![f32::NAN; d.out_len()];
                testing::on_pool(|| {
                    expand.run(&x, &mut mid, &ee, None);
                    dw.run(&mid, &mut want, &de, r.as_deref());
                    run((&expand, &ee), (&dw, &de), tiles, &x, &mut got, r.as_deref());
                });
                prop_assert!(got == want, "{isa:?} {e} then {d}, {tiles:?}");
            }
        }
    }
}
