//! A growable f32 buffer aligned to a cache line, for packed operands.
//!
//! A vector load that straddles two cache lines costs two L1 accesses. A
//! 64-byte AVX-512 load from a `Vec<f32>` (16-byte aligned by the
//! allocator) straddles one in three times out of four, which halves the
//! speed of kernels that stream packed panels from L1 (measured on the sparse
//! GEMM: 4.9 against 10 cycles per stored weight). Panels packed into this
//! buffer start on a cache line, and so does every row of a panel whose
//! width is a multiple of 16.

use std::ops::{Deref, DerefMut};

/// One cache line of f32 values.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// `len` f32 values starting on a cache line.
#[derive(Debug, Clone, Default)]
pub(crate) struct AlignedVec {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedVec {
    /// Sets the length to `len`. Values up to the old length stay; the
    /// others are unspecified (zeros, or what an earlier, longer use left):
    /// every user packs its whole buffer, and not zeroing it again is the
    /// point of keeping it.
    pub fn resize(&mut self, len: usize) {
        let lines = len.div_ceil(16);
        if lines > self.lines.len() {
            self.lines.resize(lines, Line::default());
        }
        self.len = len;
    }
}

impl From<&[f32]> for AlignedVec {
    fn from(values: &[f32]) -> AlignedVec {
        let mut v = AlignedVec::default();
        v.resize(values.len());
        v.copy_from_slice(values);
        v
    }
}

impl Deref for AlignedVec {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        // SAFETY: `Line` is 16 f32 values with no padding (repr(C), 64
        // bytes), so `lines` is `16 * lines.len() >= len` contiguous
        // initialised f32 values.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }
}

impl DerefMut for AlignedVec {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as for `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_cache_line_and_keeps_values_when_resized() {
        let mut v = AlignedVec::default();
        v.resize(20);
        assert_eq!(v.as_ptr() as usize % 64, 0);
        v.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32);
        v.resize(5);
        v.resize(40);
        assert_eq!(&v[..5], &[0.0, 1.0, 2.0, 3.0, 4.0]);
        assert!(
            v[20..].iter().all(|&x| x == 0.0),
            "never-used values are zeros"
        );
        assert_eq!(v.len(), 40);
    }
}
