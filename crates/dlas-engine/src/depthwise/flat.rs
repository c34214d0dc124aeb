//! The depthwise kernel over flattened planes, for AVX-512. On maps
//! narrower than two vectors (MobileNet's 28x28 to 7x7) a row fills its
//! vectors poorly (7 of 16 lanes on 7x7) and the per-row work dominates;
//! at strides above 1 the row kernel first copies every row into a
//! phase-split buffer. Here the vectors are 16 consecutive output pixels
//! across rows, each tap one masked load whose mask (per vector and tap,
//! computed once per layer) drops the pixels whose tap falls outside the
//! input. At stride s the input is first split into s x s phase planes of
//! the output's size (phase (ry, rx) holds input rows ry, ry + s, ... and
//! columns rx, rx + s, ...), so that a tap is one constant flat offset
//! into one of them; at stride 1 the input plane is read in place.
//! MobileNetV2 (ImageNet) ran 5% faster with it, its 7x7 and 14x14
//! depthwise layers about 2x.

use super::{DepthwiseConv, Fused, MAX_TAPS, finish_avx512, lanes, split_pairs};
use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::Isa;
use crate::workload::Workload;
use std::cell::RefCell;

thread_local! {
    /// A channel's phase planes (strides above 1).
    static PHASES: RefCell<Vec<f32>> = RefCell::default();
}

/// The flattened-plane kernel's tables: per 16-pixel vector of the output
/// plane and per tap, the lanes whose input pixel lies inside the input,
/// in vector-major order; per tap the distance from an output pixel to its
/// input in the phase planes.
#[derive(Debug, Clone)]
pub(super) struct FlatMasks {
    masks: Vec<u16>,
    deltas: Vec<isize>,
}

/// At stride 1, output rows narrower than this many columns run the
/// flattened-plane kernel: two vectors, above which a row fills its
/// vectors at least 69% (33 of 48 lanes at worst) and reads the input in
/// place.
pub(super) const FLAT_BELOW: usize = 32;

/// Output pixels a task covers, in whole channels (fewer where that would
/// leave a thread under four tasks). A narrow plane is a few vectors of
/// work, and a task of one channel cost about as much to hand out as to
/// compute: 960 channels on 7x7 took 35.9 µs with one channel a task and
/// 23.0 with 16 (two threads, the layer alone; ONNX Runtime 21-23 µs in
/// its network), and whole networks ran 0.91x (CIFAR-10 MobileNetV1),
/// 0.93x (CIFAR-10 MobileNetV2) and 0.98x (MobileNetV2) as long.
const TASK_PIXELS: usize = 1024;

impl FlatMasks {
    /// The tables of `w`, if the flattened kernel applies: every tap of
    /// every output pixel that reads inside the input reads inside the
    /// output-sized phase plane of its phase (at stride 1: the output is
    /// as large as the input).
    pub(super) fn of(w: &Workload) -> Option<FlatMasks> {
        let (k, s) = (w.kernel, w.stride);
        if (s == 1 && w.out_w >= FLAT_BELOW) || k * k > MAX_TAPS {
            return None;
        }
        let (oh, ow, p) = (w.out_h as isize, w.out_w as isize, w.padding as isize);
        let (ih, iw, si) = (w.in_h as isize, w.in_w as isize, s as isize);
        if s == 1 && (ih, iw) != (oh, ow) {
            return None;
        }
        // A tap's phase and its offset in the phase plane, per axis.
        let split = |d: usize| {
            (
                (d as isize - p).rem_euclid(si),
                (d as isize - p).div_euclid(si),
            )
        };
        let mut deltas = Vec::with_capacity(k * k);
        for t in 0..k * k {
            let ((ry, dy), (rx, dx)) = (split(t / k), split(t % k));
            deltas.push((ry * si + rx) * oh * ow + dy * ow + dx);
        }
        let pixels = w.out_pixels();
        let mut masks = Vec::with_capacity(pixels.div_ceil(16) * k * k);
        for v in 0..pixels.div_ceil(16) {
            for t in 0..k * k {
                let (ky, kx) = ((t / k) as isize, (t % k) as isize);
                let (dy, dx) = (split(t / k).1, split(t % k).1);
                let mut m = 0u16;
                for l in 0..16 {
                    let q = (16 * v + l) as isize;
                    let (oy, ox) = (q / ow, q % ow);
                    let (iy, ix) = (oy * si + ky - p, ox * si + kx - p);
                    if q >= oh * ow || !(0..ih).contains(&iy) || !(0..iw).contains(&ix) {
                        continue;
                    }
                    if !(0..oh).contains(&(oy + dy)) || !(0..ow).contains(&(ox + dx)) {
                        return None;
                    }
                    m |= 1 << l;
                }
                masks.push(m);
            }
        }
        Some(FlatMasks { masks, deltas })
    }

    /// Runs `conv` (whose tables these are) on one NCHW sample into `c`:
    /// tasks of whole planes, a narrow plane being a few vectors, too
    /// little to split by rows, and several planes a task
    /// ([`TASK_PIXELS`]).
    #[cfg(target_arch = "x86_64")]
    pub(super) fn run(
        &self,
        conv: &DepthwiseConv,
        input: &[f32],
        c: SyncPtr,
        epi: &Epilogue,
        residual: Option<&[f32]>,
    ) {
        let w = &conv.w;
        let (k, s, pix) = (w.kernel, w.stride, w.out_pixels());
        let per = TASK_PIXELS
            .div_ceil(pix)
            .min(w.out_channels.div_ceil(4 * rayon::current_num_threads()))
            .max(1);
        let oc_blocks = w.out_channels.div_ceil(per);
        crate::awake::for_each(oc_blocks, |ob| {
            let mut widened = Vec::new();
            let mut phases = PHASES.take();
            phases.resize(s * s * pix, 0.0);
            let chans = ob * per..w.out_channels.min((ob + 1) * per);
            for ch in chans {
                let mut plane = &input[ch * w.in_h * w.in_w..][..w.in_h * w.in_w];
                if s > 1 {
                    split_phases(w, plane, &mut phases, conv.isa);
                    plane = &phases;
                }
                // SAFETY: task ob alone writes channels `chans`.
                let o = unsafe { c.slice(ch * pix, pix) };
                let res = residual.map(|r| &r[ch * pix..][..pix]);
                let fused = epi.act.clamp().map(|clamp| (epi.bias[ch], clamp));
                let taps = conv.weights.get(ch * k * k..(ch + 1) * k * k, &mut widened);
                // SAFETY: `flat` exists only with AVX-512F; the output
                // and residual hold `pix` values, and every tap's
                // unmasked lanes read inside the planes (`FlatMasks::of`).
                unsafe { flat_avx512(self, plane, taps, o, fused, res) };
                if fused.is_none() {
                    epi.channel(ch, o, res);
                }
            }
            PHASES.set(phases);
        })
    }
}

/// Splits one channel's input `plane` into its stride x stride phase
/// planes of the output's size (see the module doc); input pixels outside
/// them are read by no tap and dropped.
fn split_phases(w: &Workload, plane: &[f32], phases: &mut [f32], isa: Isa) {
    let (s, oh, ow) = (w.stride, w.out_h, w.out_w);
    for (iy, src) in plane.chunks_exact(w.in_w).enumerate() {
        let (ry, a) = (iy % s, iy / s);
        if a >= oh {
            continue;
        }
        let row = |rx: usize| ((ry * s + rx) * oh + a) * ow;
        if s == 2 {
            let (even, odd) = phases.split_at_mut(row(1));
            split_pairs(src, &mut even[row(0)..][..ow], &mut odd[..ow], isa);
            continue;
        }
        for (ix, &x) in src.iter().enumerate() {
            if ix / s < ow {
                phases[row(ix % s) + ix / s] = x;
            }
        }
    }
}

/// One channel's flattened plane (see [`FlatMasks`]): four vectors of
/// pixels at a time, each tap one masked load per vector.
///
/// # Safety
/// The CPU has AVX-512F; `plane`, `o` and `res` hold the layer's output
/// pixels (as many as its input's).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn flat_avx512(
    flat: &FlatMasks,
    plane: &[f32],
    taps: &[f32],
    o: &mut [f32],
    fused: Fused,
    res: Option<&[f32]>,
) {
    let vectors = o.len().div_ceil(16);
    for v0 in (0..vectors).step_by(4) {
        // SAFETY: forwarded.
        unsafe {
            match vectors - v0 {
                1 => flat_block::<1>(flat, plane, taps, v0, o, fused, res),
                2 => flat_block::<2>(flat, plane, taps, v0, o, fused, res),
                3 => flat_block::<3>(flat, plane, taps, v0, o, fused, res),
                _ => flat_block::<4>(flat, plane, taps, v0, o, fused, res),
            }
        }
    }
}

/// [`flat_avx512`] on vectors v0..v0 + NV.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn flat_block<const NV: usize>(
    flat: &FlatMasks,
    plane: &[f32],
    taps: &[f32],
    v0: usize,
    o: &mut [f32],
    fused: Fused,
    res: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    let kk = taps.len();
    let masks = &flat.masks[v0 * kk..(v0 + NV) * kk];
    let base = plane.as_ptr().wrapping_add(16 * v0);
    let mut acc = [_mm512_setzero_ps(); NV];
    for (t, (&wv, &d)) in taps.iter().zip(&flat.deltas).enumerate() {
        let wv = _mm512_set1_ps(wv);
        for (v, a) in acc.iter_mut().enumerate() {
            // SAFETY: the mask keeps the lanes whose input pixel is inside
            // the plane (wrapping_offset only forms the address).
            let x = unsafe {
                _mm512_maskz_loadu_ps(masks[v * kk + t], base.wrapping_offset(16 * v as isize + d))
            };
            *a = _mm512_fmadd_ps(wv, x, *a);
        }
    }
    let stores: [__mmask16; NV] =
        std::array::from_fn(|v| lanes(0, o.len() as isize - (16 * (v0 + v)) as isize));
    // SAFETY: stores and residual loads are masked to the plane's pixels.
    unsafe {
        finish_avx512(
            acc,
            o.as_mut_ptr().wrapping_add(16 * v0),
            stores,
            fused,
            res,
            16 * v0,
        )
    };
}
