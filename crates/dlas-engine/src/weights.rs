//! Convolution weights as the sliding-window kernels read them: one row of
//! (in / groups) * k * k values per output channel, dense or block-sparse.
//! Reduction index q = ic * k * k + ky * k + kx.

use crate::sparse::BlockSparse;
use crate::workload::Workload;

#[derive(Debug, Clone)]
pub(crate) enum Rows {
    /// (out, reduction) row-major.
    Dense(Vec<f32>),
    /// One matrix of (out / groups) rows per group.
    Sparse(Vec<BlockSparse>),
}

impl Rows {
    pub fn new(w: &Workload, weights: &[f32], blocks: Option<(usize, usize)>) -> Rows {
        match blocks {
            None => Rows::Dense(weights.to_vec()),
            Some((r, c)) => {
                let (ocg, red) = (w.out_channels_per_group(), w.reduction());
                Rows::Sparse(
                    weights
                        .chunks(ocg * red)
                        .map(|g| BlockSparse::from_dense(g, ocg, red, r, c))
                        .collect(),
                )
            }
        }
    }
}
