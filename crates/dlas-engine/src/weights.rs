//! Convolution weights as the direct kernel reads them: dense rows of
//! (in / groups) * k * k values per output channel, or, for sparse formats,
//! each output channel's nonzero taps with their offsets into the padded
//! input precomputed at load, so the inner loop does no index arithmetic.

use crate::fp16::Store;
use crate::sparse::BlockSparse;
use crate::workload::Workload;

#[derive(Debug, Clone)]
pub(crate) enum Rows {
    /// (out, reduction) row-major; reduction index ic * k * k + ky * k + kx;
    /// f32, or f16 for fp16 layers.
    Dense(Store),
    /// Taps of output channel oc: `offset[row_ptr[oc]..row_ptr[oc + 1]]`
    /// (into a padded input of `hw` = (height, width) planes) and values.
    Taps {
        row_ptr: Vec<usize>,
        offset: Vec<usize>,
        value: Vec<f32>,
    },
}

impl Rows {
    /// `blocks`: the BSR block shape of the sparse format (CSR is 1x1); the
    /// blocks' explicit zeros are dropped, since a sliding window gains
    /// nothing from computing them. `half` stores dense rows as f16 (the
    /// lowering gives sparse formats f32 only).
    pub fn new(
        w: &Workload,
        weights: &[f32],
        blocks: Option<(usize, usize)>,
        (hp, wp): (usize, usize),
        half: bool,
    ) -> Rows {
        let Some((r, c)) = blocks else {
            return Rows::Dense(Store::new(weights.to_vec(), half));
        };
        debug_assert!(!half, "sparse weights are stored in f32");
        let (ocg, red, k, icg) = (
            w.out_channels_per_group(),
            w.reduction(),
            w.kernel,
            w.in_channels_per_group(),
        );
        let (mut row_ptr, mut offset, mut value) = (vec![0], Vec::new(), Vec::new());
        for (g, gw) in weights.chunks(ocg * red).enumerate() {
            let m = BlockSparse::from_dense(gw, ocg, red, r, c);
            for row in 0..ocg {
                m.for_each_in_row(row, |q, v| {
                    if v != 0.0 {
                        let (i, ky, kx) = (q / (k * k), q % (k * k) / k, q % k);
                        offset.push(((g * icg + i) * hp + ky) * wp + kx);
                        value.push(v);
                    }
                });
                row_ptr.push(offset.len());
            }
        }
        Rows::Taps {
            row_ptr,
            offset,
            value,
        }
    }
}
