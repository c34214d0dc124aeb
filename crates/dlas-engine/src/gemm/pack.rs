//! Packing GEMM operands into panels: `width` columns (or rows of A) side by
//! side for every reduction index, so a microkernel reads one contiguous
//! vector per reduction step.
//!
//! The im2col matrix is never materialised unpacked: its panels are filled
//! straight from the NCHW input, either whole (shared by the tasks that all
//! need it) or one reduction block of one task's columns at a time, so the
//! block is still in L2 when the microkernels read it.

use crate::aligned::AlignedVec;
use crate::isa::Isa;
use crate::workload::Workload;
use rayon::prelude::*;
use std::ops::Range;

/// Widest panel any caller packs (GEMM tiles, sparse strips, int8 strips).
const MAX_WIDTH: usize = 64;

/// Packs `count` vectors of length `k` (rows of A or columns of B) into
/// panels of `width` vectors: panel p holds, for each kk, the values
/// `get(p * width + j, kk)` for j in 0..width, zero past `count`.
pub(crate) fn pack_panels(
    count: usize,
    k: usize,
    width: usize,
    get: impl Fn(usize, usize) -> f32 + Sync,
) -> Vec<f32> {
    let mut out = vec![0.0; count.div_ceil(width) * k * width];
    out.par_chunks_mut(k * width)
        .enumerate()
        .for_each(|(p, panel)| {
            for j in 0..width.min(count - p * width) {
                for kk in 0..k {
                    panel[kk * width + j] = get(p * width + j, kk);
                }
            }
        });
    out
}

/// The patches of group `g` of an NHWC sample (rows: output pixels;
/// columns: reduction index (ky * k + kx) * icg + ic), packed in panels of
/// `width` pixels into `out` (resized; every value written), in parallel
/// over panels. A tap's channels are one contiguous run of the input, so
/// each is copied as a run, with the pixel's and tap's coordinates worked
/// out once (a closure per value, three divisions each, took half of
/// ResNet-18's NHWC time).
pub(crate) fn pack_nhwc_patches(
    input: &[f32],
    w: &Workload,
    g: usize,
    width: usize,
    out: &mut AlignedVec,
) {
    let (k, s, p) = (w.kernel, w.stride, w.padding as isize);
    let (icg, cin, ow) = (w.in_channels_per_group(), w.in_channels, w.out_w);
    let (red, pixels) = (w.reduction(), w.out_pixels());
    out.resize(pixels.div_ceil(width) * red * width);
    out[..]
        .par_chunks_mut(red * width)
        .enumerate()
        .for_each(|(panel, values)| {
            for j in 0..width {
                let pixel = panel * width + j;
                let (oy, ox) = (pixel / ow, pixel % ow);
                for pos in 0..k * k {
                    let iy = (oy * s + pos / k) as isize - p;
                    let ix = (ox * s + pos % k) as isize - p;
                    let inside = pixel < pixels
                        && (0..w.in_h as isize).contains(&iy)
                        && (0..w.in_w as isize).contains(&ix);
                    let to = values[pos * icg * width + j..].iter_mut().step_by(width);
                    if inside {
                        let at = (iy as usize * w.in_w + ix as usize) * cin + g * icg;
                        for (t, &x) in to.zip(&input[at..at + icg]) {
                            *t = x;
                        }
                    } else {
                        to.take(icg).for_each(|t| *t = 0.0);
                    }
                }
            }
        });
}

/// The im2col matrix of group `g` of an NCHW sample (rows: reduction index
/// ic * k * k + ky * k + kx, padded with zero rows to `krows`; columns:
/// output pixels), packed straight from the input in panels of `width`
/// columns into `out` (resized; every value written), in parallel.
pub(crate) fn pack_im2col(
    input: &[f32],
    w: &Workload,
    g: usize,
    (width, krows): (usize, usize),
    out: &mut AlignedVec,
    isa: Isa,
) {
    let ow = w.out_w;
    let pixel = |col: usize| Some((col / ow, col % ow));
    pack_columns(
        input,
        w,
        g,
        (width, krows),
        (w.out_pixels(), pixel),
        out,
        isa,
    );
}

/// [`pack_im2col`] with an arbitrary column order: column `col` (of
/// `columns`) is output pixel `pixel(col)` = (oy, ox), or all zeros for
/// `None`. Spatial pack uses it to lay pixels out tile by tile.
pub(crate) fn pack_columns(
    input: &[f32],
    w: &Workload,
    g: usize,
    (width, krows): (usize, usize),
    (columns, pixel): (usize, impl Fn(usize) -> Option<(usize, usize)> + Sync),
    out: &mut AlignedVec,
    isa: Isa,
) {
    out.resize(columns.div_ceil(width) * krows * width);
    out.par_chunks_mut(krows * width)
        .enumerate()
        .for_each(|(p, panel)| {
            let cols = p * width..columns.min((p + 1) * width);
            let pixels = Window::new(w, cols.map(&pixel));
            // Blocks of rows in parallel too: small feature maps have a
            // single panel.
            panel
                .par_chunks_mut(PACK_ROWS * width)
                .enumerate()
                .for_each(|(i, block)| {
                    let rows = i * PACK_ROWS..krows.min((i + 1) * PACK_ROWS);
                    pixels.fill_f32(input, w, g, width, rows, block, isa);
                });
        });
}

/// Reduction rows of a panel packed per parallel task.
const PACK_ROWS: usize = 128;

/// The im2col matrix of [`pack_im2col`] in a new buffer, with each input
/// value mapped by `f` (padding stays `T::default()`, so `f` must map the
/// input's zero to it): the int8 GEMM's operand.
pub(crate) fn pack_im2col_with<S: Copy + Sync, T: Copy + Default + Send>(
    input: &[S],
    w: &Workload,
    g: usize,
    width: usize,
    krows: usize,
    f: impl Fn(S) -> T + Sync,
) -> Vec<T> {
    let (ow, pix) = (w.out_w, w.out_pixels());
    let mut out = vec![T::default(); pix.div_ceil(width) * krows * width];
    out.par_chunks_mut(krows * width)
        .enumerate()
        .for_each(|(p, panel)| {
            let cols = p * width..pix.min((p + 1) * width);
            let pixels = Window::new(w, cols.map(|col| Some((col / ow, col % ow))));
            pixels.fill(input, w, g, width, 0..krows, panel, &f);
        });
    out
}

/// Panels `panels` of [`pack_im2col`]'s matrix restricted to reduction rows
/// `rows`, one after the other in `out` (each `rows.len() * width` long),
/// sequentially: one task's block of B.
pub(crate) fn pack_im2col_block(
    input: &[f32],
    w: &Workload,
    g: usize,
    width: usize,
    (panels, rows): (Range<usize>, Range<usize>),
    out: &mut [f32],
    isa: Isa,
) {
    let (ow, pix) = (w.out_w, w.out_pixels());
    let len = rows.len() * width;
    for (p, panel) in panels.zip(out.chunks_exact_mut(len)) {
        let cols = p * width..pix.min((p + 1) * width);
        let pixels = Window::new(w, cols.map(|col| Some((col / ow, col % ow))));
        pixels.fill_f32(input, w, g, width, rows.clone(), panel, isa);
    }
}

/// The windows of one panel's columns: their top-left input coordinates
/// and, at strides 1 and 2, runs of consecutive pixels of one output row,
/// for which each tap reads one stretch of an input row (every column at
/// stride 1, every other one at stride 2).
struct Window {
    /// Window origin (y, x) per column; padding columns get one outside
    /// every input.
    y0: [isize; MAX_WIDTH],
    x0: [isize; MAX_WIDTH],
    /// (first column, length, origin y, origin x) of each run (strides 1, 2).
    runs: [(usize, usize, isize, isize); MAX_WIDTH],
    n_runs: usize,
}

impl Window {
    fn new(w: &Workload, pixels: impl Iterator<Item = Option<(usize, usize)>>) -> Window {
        let (s, p) = (w.stride as isize, w.padding as isize);
        let (mut y0, mut x0) = ([isize::MIN / 2; MAX_WIDTH], [0; MAX_WIDTH]);
        let mut cols = 0;
        // Indexing the arrays bounds the panel width at MAX_WIDTH.
        for (j, px) in pixels.enumerate() {
            (y0[j], x0[j]) = match px {
                Some((oy, ox)) => (oy as isize * s - p, ox as isize * s - p),
                // Consecutive padding columns make one run (of zeros).
                None => (isize::MIN / 2, j as isize * s),
            };
            cols = j + 1;
        }
        let mut runs = [(0, 0, 0, 0); MAX_WIDTH];
        let mut n_runs = 0;
        if s <= 2 {
            for j in 0..cols {
                let (y, x) = (y0[j], x0[j]);
                match runs[..n_runs].last_mut() {
                    Some((j0, len, ry, rx))
                        if *ry == y && *rx + s * (j - *j0) as isize == x && *j0 + *len == j =>
                    {
                        *len += 1
                    }
                    _ => {
                        runs[n_runs] = (j, 1, y, x);
                        n_runs += 1;
                    }
                }
            }
        }
        Window {
            y0,
            x0,
            runs,
            n_runs,
        }
    }

    /// [`Window::fill`] of f32 values, with vector copies on AVX-512.
    #[allow(clippy::too_many_arguments)]
    fn fill_f32(
        &self,
        input: &[f32],
        w: &Workload,
        g: usize,
        width: usize,
        rows: Range<usize>,
        panel: &mut [f32],
        isa: Isa,
    ) {
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512 && w.stride <= 2 {
            // SAFETY: the CPU has AVX-512F (`isa` never exceeds Isa::detect()).
            return unsafe { self.fill_avx512(input, w, g, width, rows, panel) };
        }
        let _ = isa;
        self.fill(input, w, g, width, rows, panel, &|x| x)
    }

    /// [`Window::fill`] of f32 values at stride 1 or 2 with AVX-512. A
    /// tap (ky, kx) copies the same input stretches from every channel, so
    /// each tap's copies are worked out once, as masked 16-lane chunks of
    /// the runs (the masks drop input columns outside the row, and every
    /// column of rows outside the input), then replayed per channel: a
    /// masked load (two and a permute keeping the even columns at stride
    /// 2) and a masked store per chunk.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn fill_avx512(
        &self,
        input: &[f32],
        w: &Workload,
        g: usize,
        width: usize,
        rows: Range<usize>,
        panel: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        /// One masked copy: input offset in the channel's plane, panel
        /// column, input columns to load, panel columns to store.
        #[derive(Clone, Copy, Default)]
        struct Chunk {
            src: isize,
            dst: usize,
            load: u32,
            store: u16,
        }
        let (k, icg, red, s) = (w.kernel, w.in_channels_per_group(), w.reduction(), w.stride);
        let (ih, iw) = (w.in_h as isize, w.in_w as isize);
        let plane = w.in_h * w.in_w;
        let kk = k * k;
        assert!(
            panel.len() >= rows.len() * width && input.len() >= (g + 1) * icg * plane,
            "the panel and the group's input"
        );
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        // Bits lo..hi of a mask (clamped to 0..=32).
        let bits = |lo: isize, hi: isize| -> u32 {
            let ones = |n: isize| ((1u64 << n.clamp(0, 32)) - 1) as u32;
            ones(hi) & !ones(lo)
        };
        for q in rows.start.max(red)..rows.end {
            panel[(q - rows.start) * width..][..width].fill(0.0);
        }
        let channels = rows.start / kk..icg.min(rows.end.div_ceil(kk));
        let mut chunks = [Chunk::default(); MAX_WIDTH];
        for t in 0..kk {
            let (ky, kx) = ((t / k) as isize, (t % k) as isize);
            let mut n = 0;
            for &(j0, len, y0, x0) in &self.runs[..self.n_runs] {
                let iy = y0 + ky;
                for c in (0..len).step_by(16) {
                    // Input column of the chunk's lane l: x + s * l.
                    let x = x0 + kx + (s * c) as isize;
                    let store = bits(0, (len - c).min(16) as isize);
                    let load = if iy < 0 || iy >= ih {
                        0
                    } else if s == 1 {
                        bits(-x, iw - x) & store
                    } else {
                        bits(-x, iw - x)
                    };
                    chunks[n] = Chunk {
                        src: iy * iw + x,
                        dst: j0 + c,
                        load,
                        store: store as u16,
                    };
                    n += 1;
                }
            }
            for i in channels.clone() {
                let q = i * kk + t;
                if !rows.contains(&q) {
                    continue;
                }
                let src = input[(g * icg + i) * plane..].as_ptr();
                let dst = panel[(q - rows.start) * width..].as_mut_ptr();
                for ch in &chunks[..n] {
                    // SAFETY: loads are masked to input columns 0..iw of an
                    // input row 0..ih of this channel's plane (wrapping_offset
                    // only forms the address; a chunk whose row is outside
                    // loads nothing); stores are masked to the run's columns,
                    // inside the panel row (asserted sizes).
                    unsafe {
                        let at = src.wrapping_offset(ch.src);
                        let v = if s == 1 {
                            _mm512_maskz_loadu_ps(ch.load as __mmask16, at)
                        } else {
                            let a = _mm512_maskz_loadu_ps(ch.load as __mmask16, at);
                            let b = _mm512_maskz_loadu_ps(
                                (ch.load >> 16) as __mmask16,
                                at.wrapping_add(16),
                            );
                            _mm512_permutex2var_ps(a, even, b)
                        };
                        _mm512_mask_storeu_ps(dst.add(ch.dst), ch.store, v);
                    }
                }
            }
        }
    }

    /// Writes reduction rows `rows` of the panel (`width` values each) to
    /// `panel`: every value, zeros in the padding.
    #[allow(clippy::too_many_arguments)]
    fn fill<S: Copy, T: Copy + Default>(
        &self,
        input: &[S],
        w: &Workload,
        g: usize,
        width: usize,
        rows: Range<usize>,
        panel: &mut [T],
        f: &impl Fn(S) -> T,
    ) {
        let (k, icg, red) = (w.kernel, w.in_channels_per_group(), w.reduction());
        let (ih, iw) = (w.in_h as isize, w.in_w);
        let plane = w.in_h * w.in_w;
        for (q, dst) in rows.zip(panel.chunks_exact_mut(width)) {
            if q >= red {
                dst.fill(T::default());
                continue;
            }
            let (i, ky, kx) = (q / (k * k), (q / k % k) as isize, (q % k) as isize);
            let src = &input[(g * icg + i) * plane..][..plane];
            if w.stride == 1 {
                // Runs are in column order: zero the gaps between their
                // valid stretches as they come.
                let mut done = 0;
                for &(j0, len, y0, x0) in &self.runs[..self.n_runs] {
                    let (iy, x0) = (y0 + ky, x0 + kx);
                    // Columns j of the run with 0 <= x0 + j < iw, if the row is inside.
                    let (lo, hi) = if iy < 0 || iy >= ih {
                        (0, 0)
                    } else {
                        (
                            (-x0).clamp(0, len as isize) as usize,
                            (iw as isize - x0).clamp(0, len as isize) as usize,
                        )
                    };
                    if lo < hi {
                        dst[done..j0 + lo].fill(T::default());
                        let row = &src[iy as usize * iw..][..iw];
                        let start = (x0 + lo as isize) as usize;
                        for (d, &v) in dst[j0 + lo..j0 + hi].iter_mut().zip(&row[start..]) {
                            *d = f(v);
                        }
                        done = j0 + hi;
                    }
                }
                dst[done..].fill(T::default());
                continue;
            }
            for ((d, &y0), &x0) in dst.iter_mut().zip(&self.y0).zip(&self.x0) {
                let (iy, ix) = (y0 + ky, x0 + kx);
                *d = if iy >= 0 && iy < ih && ix >= 0 && (ix as usize) < iw {
                    f(src[iy as usize * iw + ix as usize])
                } else {
                    T::default()
                };
            }
        }
    }
}
