//! The input as the int8 sliding-window kernels (direct and spatial pack)
//! read it, built once per sample: the zero point subtracted (to i16, so
//! padding is an exact 0, as in the GEMM's im2col), the input channels of
//! each group interleaved in pairs, the two values of a pair at one pixel
//! in one i32 (low half the even channel: the operand `vpmaddwd` multiplies
//! by a weight pair, and the GEMM's pairing of reduction indices), each
//! pair's plane zero-padded, and its columns split by phase modulo the
//! stride (phase r holds padded columns r, r + s, r + 2s, ...), so the
//! inputs of one tap for consecutive output columns are consecutive i32
//! whatever the stride.

use crate::workload::Workload;
use rayon::prelude::*;

pub(super) struct Window {
    pub data: Vec<i32>,
    /// Input channel pairs per group (the last one completed by a zero
    /// channel when the group's count is odd).
    pub pairs: usize,
    /// Output rows and columns whose taps the window covers.
    pub rows: usize,
    pub cols: usize,
    stride: usize,
    /// i32 per phase row, per padded row (all phases), per pair plane.
    phase_width: usize,
    row: usize,
    plane: usize,
}

/// Two i16 values in one i32, `lo` in the low half (little endian: the
/// first of two consecutive i16).
#[inline(always)]
pub(super) fn pair(lo: i16, hi: i16) -> i32 {
    (lo as u16 as u32 | (hi as u16 as u32) << 16) as i32
}

/// The two i16 of a [`pair`], widened.
#[inline(always)]
pub(super) fn unpair(v: i32) -> (i32, i32) {
    (v as i16 as i32, v >> 16)
}

impl Window {
    /// The window of one NCHW sample of layer `w` with input zero point
    /// `zp`, covering the taps of output rows `0..rows` and columns
    /// `0..cols` (at least the output's: kernels that compute whole blocks
    /// ask for more and drop the extra outputs).
    pub fn new(w: &Workload, input: &[i8], zp: i16, (rows, cols): (usize, usize)) -> Window {
        let (k, s, p) = (w.kernel, w.stride, w.padding);
        let (ih, iw, icg) = (w.in_h, w.in_w, w.in_channels_per_group());
        debug_assert!(rows >= w.out_h && cols >= w.out_w);
        let hp = (ih + 2 * p).max((rows - 1) * s + k);
        let phase_width = (iw + 2 * p).div_ceil(s).max(cols + (k - 1) / s);
        let row = s * phase_width;
        let plane = hp * row;
        let pairs = icg.div_ceil(2);
        let mut data = vec![0i32; w.groups * pairs * plane];
        data.par_chunks_mut(plane)
            .enumerate()
            .for_each(|(pl, dst)| {
                let (g, j) = (pl / pairs, pl % pairs);
                let c0 = g * icg + 2 * j;
                let channel = |c: usize| &input[c * ih * iw..][..ih * iw];
                let lo = channel(c0);
                let hi = (2 * j + 1 < icg).then(|| channel(c0 + 1));
                for y in 0..ih {
                    let d = &mut dst[(y + p) * row..][..row];
                    for xx in 0..iw {
                        let col = xx + p;
                        let a = lo[y * iw + xx] as i16 - zp;
                        let b = hi.map_or(0, |h| h[y * iw + xx] as i16 - zp);
                        d[(col % s) * phase_width + col / s] = pair(a, b);
                    }
                }
            });
        Window {
            data,
            pairs,
            rows,
            cols,
            stride: s,
            phase_width,
            row,
            plane,
        }
    }

    /// i32 of one pair plane.
    pub fn plane_len(&self) -> usize {
        self.plane
    }

    /// i32 between padded rows.
    pub fn row_len(&self) -> usize {
        self.row
    }

    /// Where tap column `kx` of output column `x` reads padded row `y` of
    /// pair plane `plane` (the output column's taps on the next output
    /// column are at the next index).
    #[inline(always)]
    pub fn at(&self, plane: usize, y: usize, x: usize, kx: usize) -> usize {
        let s = self.stride;
        plane * self.plane + y * self.row + (kx % s) * self.phase_width + x + kx / s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tap of every covered output reads the zero-point-subtracted
    /// input or, outside it, an exact 0, in both halves of its pair.
    #[test]
    fn every_tap_reads_its_input_or_zero() {
        for w in [
            Workload::new(3, 4, 3, 1, 1, 1, 5, 7),
            Workload::new(6, 4, 3, 2, 1, 2, 8, 9),
            Workload::new(5, 5, 5, 2, 2, 1, 9, 6),
            Workload::new(2, 2, 1, 2, 0, 1, 5, 5),
        ] {
            let input: Vec<i8> = (0..w.in_len()).map(|i| (i * 37 % 251) as i8).collect();
            let zp = -3i16;
            let (rows, cols) = (w.out_h + 1, w.out_w + 5);
            let win = Window::new(&w, &input, zp, (rows, cols));
            let (k, s, icg) = (w.kernel, w.stride, w.in_channels_per_group());
            let value = |c: Option<usize>, iy: isize, ix: isize| -> i32 {
                let p = w.padding as isize;
                let (iy, ix) = (iy - p, ix - p);
                match c {
                    Some(c)
                        if iy >= 0 && ix >= 0 && iy < w.in_h as isize && ix < w.in_w as isize =>
                    {
                        input[(c * w.in_h + iy as usize) * w.in_w + ix as usize] as i32 - zp as i32
                    }
                    _ => 0,
                }
            };
            for g in 0..w.groups {
                for j in 0..win.pairs {
                    let c0 = g * icg + 2 * j;
                    let c1 = (2 * j + 1 < icg).then_some(c0 + 1);
                    for oy in 0..rows {
                        for ox in 0..cols {
                            for ky in 0..k {
                                for kx in 0..k {
                                    let (iy, ix) = ((oy * s + ky) as isize, (ox * s + kx) as isize);
                                    let v =
                                        win.data[win.at(g * win.pairs + j, oy * s + ky, ox, kx)];
                                    let want = (value(Some(c0), iy, ix), value(c1, iy, ix));
                                    assert_eq!(unpair(v), want, "{w} {oy} {ox} {ky} {kx}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
