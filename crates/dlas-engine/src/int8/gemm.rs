//! The int8 GEMM: im2col with the input's zero point subtracted (to i16,
//! so padding is an exact 0), reduction indices paired so the AVX2 inner
//! loop is `vpmaddwd` (16 multiply-accumulates per instruction) into i32.

use crate::epilogue::Int8Finish;
use crate::gemm::pack_im2col_with;
use crate::isa::has_avx2_fma;
use crate::workload::Workload;
use rayon::prelude::*;

/// Output columns per register strip and output rows per task step.
const STRIP: usize = 16;
const ROWS: usize = 4;

#[derive(Debug, Clone)]
pub(super) struct Packed {
    /// Quantised weights, rows padded to a multiple of ROWS, as i16 pairs
    /// (reduction indices 2j and 2j + 1) packed in one i32 each: the operand
    /// `vpmaddwd` broadcasts.
    qw: Vec<i32>,
}

impl Packed {
    /// Packs the weights `q(oc, i)` (reduction index `i`) of layer `w`.
    pub fn new(w: &Workload, q: impl Fn(usize, usize) -> i8) -> Packed {
        let red = w.reduction();
        let pairs = red.div_ceil(2);
        let ocg = w.out_channels_per_group();
        let padded = ocg.next_multiple_of(ROWS);
        let mut qw = vec![0i32; padded * w.groups * pairs];
        for oc in 0..w.out_channels {
            let (g, r) = (oc / ocg, oc % ocg);
            for i in 0..red {
                // Low half: even index, high half: odd index (little endian).
                qw[(g * padded + r) * pairs + i / 2] |=
                    ((q(oc, i) as i16 as u16 as u32) << (16 * (i % 2))) as i32;
            }
        }
        Packed { qw }
    }

    /// One NCHW sample, finished by `finish`.
    pub fn run(&self, w: &Workload, input: &[i8], zp: i16, out: &mut [i8], finish: &Int8Finish) {
        let (ocg, red, pix) = (w.out_channels_per_group(), w.reduction(), w.out_pixels());
        let padded = ocg.next_multiple_of(ROWS);
        let pairs = red.div_ceil(2);
        for g in 0..w.groups {
            // im2col (zero point subtracted) in STRIP-column panels, then
            // reduction rows interleaved in pairs: panel[j][col][2].
            let flat = pack_im2col_with(input, w, g, STRIP, 2 * pairs, |x: i8| x as i16 - zp);
            let mut b = vec![0i16; flat.len()];
            b.par_chunks_mut(2 * pairs * STRIP)
                .zip(flat.par_chunks(2 * pairs * STRIP))
                .for_each(|(dst, src)| {
                    for j in 0..pairs {
                        for col in 0..STRIP {
                            dst[(j * STRIP + col) * 2] = src[2 * j * STRIP + col];
                            dst[(j * STRIP + col) * 2 + 1] = src[(2 * j + 1) * STRIP + col];
                        }
                    }
                });
            let rows_out = &mut out[g * ocg * pix..(g + 1) * ocg * pix];
            rows_out
                .par_chunks_mut(ROWS * pix)
                .enumerate()
                .for_each(|(rb, o)| {
                    let a = &self.qw[(g * padded + rb * ROWS) * pairs..][..ROWS * pairs];
                    for p in 0..pix.div_ceil(STRIP) {
                        let panel = &b[p * 2 * pairs * STRIP..][..2 * pairs * STRIP];
                        let acc = strip(a, panel, pairs);
                        let x0 = p * STRIP;
                        let n = STRIP.min(pix - x0);
                        for (r, acc) in acc.iter().enumerate().take(o.len() / pix) {
                            let oc = g * ocg + rb * ROWS + r;
                            finish(oc, oc * pix + x0, &acc[..n], &mut o[r * pix + x0..][..n]);
                        }
                    }
                });
        }
    }
}

/// ROWS x STRIP i32 accumulators of `a` (ROWS rows of `pairs` weight
/// pairs) times a pair-interleaved panel.
fn strip(a: &[i32], panel: &[i16], pairs: usize) -> [[i32; STRIP]; ROWS] {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2.
        return unsafe { strip_avx2(a, panel, pairs) };
    }
    strip_portable(a, panel, pairs)
}

/// `vpmaddwd`: each 32-bit lane multiplies a weight pair by an input pair
/// and adds both products, so one instruction does 16 MACs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn strip_avx2(a: &[i32], panel: &[i16], pairs: usize) -> [[i32; STRIP]; ROWS] {
    use std::arch::x86_64::*;
    assert!(a.len() >= ROWS * pairs && panel.len() >= pairs * STRIP * 2);
    let mut acc = [[_mm256_setzero_si256(); 2]; ROWS];
    for j in 0..pairs {
        // SAFETY: 32 i16 = columns 0..16 of pair j, inside the panel (asserted).
        let (b0, b1) = unsafe {
            let p = panel.as_ptr().add(j * STRIP * 2) as *const __m256i;
            (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1)))
        };
        for (r, acc) in acc.iter_mut().enumerate() {
            let w = _mm256_set1_epi32(a[r * pairs + j]);
            acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(w, b0));
            acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(w, b1));
        }
    }
    let mut out = [[0i32; STRIP]; ROWS];
    for (o, acc) in out.iter_mut().zip(&acc) {
        // SAFETY: each row of `out` holds 16 i32, two vectors.
        unsafe {
            let p = o.as_mut_ptr() as *mut __m256i;
            _mm256_storeu_si256(p, acc[0]);
            _mm256_storeu_si256(p.add(1), acc[1]);
        }
    }
    out
}

fn strip_portable(a: &[i32], panel: &[i16], pairs: usize) -> [[i32; STRIP]; ROWS] {
    let mut acc = [[0i32; STRIP]; ROWS];
    for j in 0..pairs {
        let b = &panel[j * STRIP * 2..][..STRIP * 2];
        for (r, acc) in acc.iter_mut().enumerate() {
            let pair = a[r * pairs + j];
            let (w0, w1) = (pair as i16 as i32, (pair >> 16) as i16 as i32);
            for (x, bv) in acc.iter_mut().zip(b.chunks_exact(2)) {
                *x += w0 * bv[0] as i32 + w1 * bv[1] as i32;
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 path (where the CPU has it) and the portable path agree
    /// exactly: integer arithmetic has no rounding to hide differences in.
    #[test]
    fn strip_paths_agree() {
        let pairs = 37;
        let a: Vec<i32> = (0..ROWS * pairs)
            .map(|i| {
                let (lo, hi) = ((i * 37 % 255) as i16 - 127, (i * 91 % 255) as i16 - 127);
                ((lo as u16 as u32) | ((hi as u16 as u32) << 16)) as i32
            })
            .collect();
        let panel: Vec<i16> = (0..pairs * STRIP * 2)
            .map(|i| (i * 53 % 511) as i16 - 255)
            .collect();
        let want = strip_portable(&a, &panel, pairs);
        assert_eq!(strip(&a, &panel, pairs), want);
        // And the portable path is the plain double loop.
        let mut plain = [[0i32; STRIP]; ROWS];
        for (r, row) in plain.iter_mut().enumerate() {
            for (col, x) in row.iter_mut().enumerate() {
                for j in 0..pairs {
                    let pair = a[r * pairs + j];
                    *x += (pair as i16 as i32) * panel[(j * STRIP + col) * 2] as i32;
                    *x += ((pair >> 16) as i16 as i32) * panel[(j * STRIP + col) * 2 + 1] as i32;
                }
            }
        }
        assert_eq!(want, plain);
    }
}
