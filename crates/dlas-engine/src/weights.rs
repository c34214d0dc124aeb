//! Convolution weights as the sliding-window kernels read them: one row of
//! (in / groups) * k * k values per output channel, dense or block-sparse.

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

    /// Calls `f(q, value)` for the stored values of output channel `oc`
    /// (q indexes the reduction: ic * k * k + ky * k + kx).
    #[inline(always)]
    pub fn for_each(&self, w: &Workload, oc: usize, mut f: impl FnMut(usize, f32)) {
        match self {
            Rows::Dense(d) => {
                let red = w.reduction();
                for (q, &v) in d[oc * red..(oc + 1) * red].iter().enumerate() {
                    f(q, v);
                }
            }
            Rows::Sparse(m) => {
                let ocg = w.out_channels_per_group();
                m[oc / ocg].for_each_in_row(oc % ocg, f);
            }
        }
    }
}
