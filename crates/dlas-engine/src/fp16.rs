//! fp16 weights of the direct, depthwise and spatial-pack kernels: stored
//! as IEEE binary16 and widened to f32 inside the kernel, a block at a time
//! (a register block's rows, a channel's taps, an output-channel block),
//! as the GEMM widens its f16 panels once per cache block. Arithmetic stays
//! f32, so fp16 halves the weight bytes a layer streams, not its work; the
//! widened block is small and reused by every output the task computes, so
//! the conversion is a vanishing fraction of the FMAs.

use half::f16;
use std::ops::Range;

/// Dense weights in the storage type of a layer.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Store {
    /// `values` as f32, or rounded to f16 when `half`.
    pub fn new(values: Vec<f32>, half: bool) -> Store {
        if half {
            Store::F16(values.iter().map(|&v| f16::from_f32(v)).collect())
        } else {
            Store::F32(values)
        }
    }

    /// `values[range]` as f32: the stored values themselves, or the f16
    /// ones widened into `buf` (grown as needed, so a task can keep one).
    #[inline]
    pub fn get<'a>(&'a self, range: Range<usize>, buf: &'a mut Vec<f32>) -> &'a [f32] {
        match self {
            Store::F32(v) => &v[range],
            Store::F16(h) => {
                if buf.len() < range.len() {
                    buf.resize(range.len(), 0.0);
                }
                let dst = &mut buf[..range.len()];
                widen(&h[range], dst);
                dst
            }
        }
    }
}

/// Whether the F16C conversion instructions can run (with AVX2, the level
/// every vectorised kernel needs).
#[inline]
pub(crate) fn has_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::isa::has_avx2_fma() && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Widens `src` into `dst` (of the same length): `vcvtph2ps`, eight values
/// an instruction, where the CPU has F16C; a scalar conversion elsewhere.
pub(crate) fn widen(src: &[f16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "widen: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if has_f16c() {
        // SAFETY: the CPU has AVX2 and F16C.
        return unsafe { widen_f16c(src, dst) };
    }
    widen_portable(src, dst)
}

fn widen_portable(src: &[f16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
fn widen_f16c(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let (heads, tail) = (src.chunks_exact(8), src.len() / 8 * 8);
    for (s, d) in heads.zip(dst.chunks_exact_mut(8)) {
        // SAFETY: `s` holds 8 f16 (16 bytes) and `d` 8 f32 (32 bytes).
        unsafe {
            let h = _mm_loadu_si128(s.as_ptr().cast());
            _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    widen_portable(&src[tail..], &mut dst[tail..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// F16C and the portable conversion agree on every f16 bit pattern
    /// (NaNs compared as bits), with tails of every length below 8.
    #[test]
    fn widen_paths_agree_on_every_value() {
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        for skip in 0..8 {
            let src = &all[skip..];
            let mut a = vec![0.0; src.len()];
            let mut b = vec![0.0; src.len()];
            widen(src, &mut a);
            widen_portable(src, &mut b);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b));
        }
    }

    #[test]
    fn store_widens_what_it_rounded() {
        let values = vec![0.1f32, -2.5, 1e-6, 65504.0, 3.0];
        let mut buf = Vec::new();
        let half = Store::new(values.clone(), true);
        let got = half.get(1..4, &mut buf).to_vec();
        let want: Vec<f32> = values[1..4]
            .iter()
            .map(|&v| f16::from_f32(v).to_f32())
            .collect();
        assert_eq!(got, want);
        let full = Store::new(values.clone(), false);
        assert_eq!(full.get(0..5, &mut buf), &values[..]);
    }
}
