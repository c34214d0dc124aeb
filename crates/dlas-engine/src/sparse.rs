//! Block-sparse weight matrices. CSR is the 1x1 case of BSR, so one
//! structure and one set of kernels serve both formats.

/// Reduction indices per block of [`BlockSparse::k_starts`]. A sparse
/// GEMM task runs every row over one block of B before the next, so a
/// block is read from L1 or L2 (32 KiB with 16-column strips, 128 KiB with
/// 64), and each row's partial sums are stored once per block: at 90%
/// sparsity a row holds about 50 values per block, enough to amortise that
/// store (128-index blocks, with about 13, were slower by 15-40%).
pub(crate) const REDUCTION_BLOCK: usize = 512;

/// A `rows` x `cols` matrix stored as dense `r` x `c` blocks, block rows in
/// CSR order. Rows and columns are padded with zeros to whole blocks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BlockSparse {
    pub rows: usize,
    pub cols: usize,
    pub r: usize,
    pub c: usize,
    /// Start of each block row in `block_cols` (length rows/r + 1).
    pub row_ptr: Vec<usize>,
    /// First column of each stored block.
    pub block_cols: Vec<usize>,
    /// `r * c` values per block, row-major.
    pub values: Vec<f32>,
    /// Per block row, where its blocks starting in each reduction block of
    /// REDUCTION_BLOCK columns begin (`reduction_blocks() + 1` entries per
    /// block row, the last one the block row's end).
    pub k_starts: Vec<usize>,
}

impl BlockSparse {
    /// Keeps every block of the row-major `rows` x `cols` matrix `dense`
    /// that holds a nonzero.
    pub fn from_dense(dense: &[f32], rows: usize, cols: usize, r: usize, c: usize) -> BlockSparse {
        let mut row_ptr = vec![0];
        let mut block_cols = Vec::new();
        let mut values = Vec::new();
        let at = |i: usize, j: usize| {
            if i < rows && j < cols {
                dense[i * cols + j]
            } else {
                0.0
            }
        };
        let kblocks = cols.div_ceil(REDUCTION_BLOCK);
        let mut k_starts = Vec::new();
        for br in 0..rows.div_ceil(r) {
            let mut next = 0;
            for bc in 0..cols.div_ceil(c) {
                // Blocks belong to the reduction block of their first column.
                while next <= bc * c / REDUCTION_BLOCK {
                    k_starts.push(block_cols.len());
                    next += 1;
                }
                let block: Vec<f32> = (0..r * c)
                    .map(|e| at(br * r + e / c, bc * c + e % c))
                    .collect();
                if block.iter().any(|&v| v != 0.0) {
                    block_cols.push(bc * c);
                    values.extend(block);
                }
            }
            k_starts.extend(std::iter::repeat_n(block_cols.len(), kblocks + 1 - next));
            row_ptr.push(block_cols.len());
        }
        BlockSparse {
            rows,
            cols,
            r,
            c,
            row_ptr,
            block_cols,
            values,
            k_starts,
        }
    }

    /// Reduction blocks of REDUCTION_BLOCK columns.
    pub fn reduction_blocks(&self) -> usize {
        self.cols.div_ceil(REDUCTION_BLOCK)
    }

    /// The blocks of block row `br` that start in reduction block `kb`.
    pub fn blocks_in(&self, br: usize, kb: usize) -> std::ops::Range<usize> {
        let at = br * (self.reduction_blocks() + 1) + kb;
        self.k_starts[at]..self.k_starts[at + 1]
    }

    pub fn block_rows(&self) -> usize {
        self.row_ptr.len() - 1
    }

    /// Calls `f(column, value)` for every stored value of row `i`,
    /// including explicit zeros inside blocks but no padding column.
    pub fn for_each_in_row(&self, i: usize, mut f: impl FnMut(usize, f32)) {
        let (br, rr) = (i / self.r, i % self.r);
        for b in self.row_ptr[br]..self.row_ptr[br + 1] {
            let k0 = self.block_cols[b];
            let vals = &self.values[(b * self.r + rr) * self.c..][..self.c];
            for (cc, &v) in vals.iter().enumerate().take(self.cols - k0) {
                f(k0 + cc, v);
            }
        }
    }
}

/// Fraction of nonzero values.
pub(crate) fn density(w: &[f32]) -> f64 {
    w.iter().filter(|&&v| v != 0.0).count() as f64 / w.len().max(1) as f64
}

/// Fraction of stored values that are nonzero when `w` is blocked `r` x `c`.
pub(crate) fn block_fill(w: &[f32], rows: usize, cols: usize, r: usize, c: usize) -> f64 {
    let m = BlockSparse::from_dense(w, rows, cols, r, c);
    let nnz = w.iter().filter(|&&v| v != 0.0).count();
    nnz as f64 / m.values.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduction_blocks_partition_each_block_row() {
        let cols = 3 * REDUCTION_BLOCK + 5;
        let dense: Vec<f32> = (0..4 * cols).map(|i| (i % 7 == 0) as u8 as f32).collect();
        for (r, c) in [(1, 1), (2, 3), (4, 16)] {
            let m = BlockSparse::from_dense(&dense, 4, cols, r, c);
            for br in 0..m.block_rows() {
                let mut at = m.row_ptr[br];
                for kb in 0..m.reduction_blocks() {
                    let blocks = m.blocks_in(br, kb);
                    assert_eq!(blocks.start, at, "{r}x{c} block row {br}");
                    for b in blocks.clone() {
                        assert_eq!(m.block_cols[b] / REDUCTION_BLOCK, kb);
                    }
                    at = blocks.end;
                }
                assert_eq!(at, m.row_ptr[br + 1]);
            }
        }
    }

    #[test]
    fn rows_round_trip_through_blocks() {
        let dense = [
            1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 4.0, 5.0,
        ];
        for (r, c) in [(1, 1), (1, 4), (2, 2), (4, 4)] {
            let m = BlockSparse::from_dense(&dense, 3, 5, r, c);
            for i in 0..3 {
                let mut row = vec![0.0; 5];
                m.for_each_in_row(i, |j, v| row[j] += v);
                assert_eq!(row, dense[i * 5..(i + 1) * 5], "{r}x{c} row {i}");
            }
        }
    }
}
