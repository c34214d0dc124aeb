//! Packing GEMM operands into panels: `width` columns (or rows of A) side by
//! side for every reduction index, so a microkernel reads one contiguous
//! vector per reduction step.
//!
//! The im2col matrix is never materialised unpacked: its panels are filled
//! straight from the NCHW input, either whole (shared by the tasks that all
//! need it) or one reduction block of one task's columns at a time, so the
//! block is still in L2 when the microkernels read it.

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

/// The im2col matrix of group `g` of an NCHW sample (rows: reduction index
/// ic * k * k + ky * k + kx, padded with zero rows to `krows`; columns:
/// output pixels), packed straight from the input in panels of `width`
/// columns into `out` (resized; every value written), in parallel.
pub(crate) fn pack_im2col(
    input: &[f32],
    w: &Workload,
    g: usize,
    (width, krows): (usize, usize),
    out: &mut Vec<f32>,
    isa: Isa,
) {
    let (ow, pix) = (w.out_w, w.out_pixels());
    out.resize(pix.div_ceil(width) * krows * width, 0.0);
    out.par_chunks_mut(krows * width)
        .enumerate()
        .for_each(|(p, panel)| {
            let cols = p * width..pix.min((p + 1) * width);
            let pixels = Window::new(w, cols.map(|col| Some((col / ow, col % ow))));
            pixels.fill_f32(input, w, g, width, 0..krows, panel, isa);
        });
}

/// [`pack_im2col`] into a new buffer, with each input value mapped by `f`
/// (padding stays `T::default()`, so `f` must map the input's zero to it).
pub(crate) fn pack_im2col_with<S: Copy + Sync, T: Copy + Default + Send>(
    input: &[S],
    w: &Workload,
    g: usize,
    width: usize,
    krows: usize,
    f: impl Fn(S) -> T + Sync,
) -> Vec<T> {
    let ow = w.out_w;
    pack_columns(
        input,
        w,
        g,
        (width, krows),
        w.out_pixels(),
        |col| Some((col / ow, col % ow)),
        f,
    )
}

/// The im2col matrix with an arbitrary column order: column `col` (of
/// `columns`) is output pixel `pixel(col)` = (oy, ox), or all zeros for
/// `None`. Spatial pack uses it to lay pixels out tile by tile. Panels are
/// filled in parallel.
pub(crate) fn pack_columns<S: Copy + Sync, T: Copy + Default + Send>(
    input: &[S],
    w: &Workload,
    g: usize,
    (width, krows): (usize, usize),
    columns: usize,
    pixel: impl Fn(usize) -> Option<(usize, usize)> + Sync,
    f: impl Fn(S) -> T + Sync,
) -> Vec<T> {
    let mut out = vec![T::default(); columns.div_ceil(width) * krows * width];
    out.par_chunks_mut(krows * width)
        .enumerate()
        .for_each(|(p, panel)| {
            let cols = p * width..columns.min((p + 1) * width);
            let pixels = Window::new(w, cols.map(&pixel));
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
/// and, at stride 1, runs of consecutive pixels of one output row, for
/// which each tap reads one contiguous stretch of an input row.
struct Window {
    /// Window origin (y, x) per column; padding columns get one outside
    /// every input. i32, the lane type of the vector gathers.
    y0: [i32; MAX_WIDTH],
    x0: [i32; MAX_WIDTH],
    /// (first column, length, origin y, origin x) of each run (stride 1).
    runs: [(usize, usize, isize, isize); MAX_WIDTH],
    n_runs: usize,
}

impl Window {
    fn new(w: &Workload, pixels: impl Iterator<Item = Option<(usize, usize)>>) -> Window {
        assert!(
            w.in_h * w.in_w + w.padding * (w.in_w + 1) < i32::MAX as usize,
            "input planes index in i32"
        );
        let (s, p) = (w.stride as i32, w.padding as i32);
        let (mut y0, mut x0) = ([i32::MIN / 2; MAX_WIDTH], [0; MAX_WIDTH]);
        let mut cols = 0;
        // Indexing the arrays bounds the panel width at MAX_WIDTH.
        for (j, px) in pixels.enumerate() {
            if let Some((oy, ox)) = px {
                (y0[j], x0[j]) = (oy as i32 * s - p, ox as i32 * s - p);
            }
            cols = j + 1;
        }
        let mut runs = [(0, 0, 0, 0); MAX_WIDTH];
        let mut n_runs = 0;
        if s == 1 {
            for j in 0..cols {
                let (y, x) = (y0[j] as isize, x0[j] as isize);
                match runs[..n_runs].last_mut() {
                    Some((j0, len, ry, rx))
                        if *ry == y && *rx + (j - *j0) as isize == x && *j0 + *len == j =>
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

    /// [`Window::fill`] of f32 values, with gathers on AVX-512.
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
        if isa == Isa::Avx512 && width.is_multiple_of(16) {
            // SAFETY: the CPU has AVX-512F (`isa` never exceeds Isa::detect()).
            return unsafe { self.fill_avx512(input, w, g, width, rows, panel) };
        }
        let _ = isa;
        self.fill(input, w, g, width, rows, panel, &|x| x)
    }

    /// [`Window::fill`] of an f32 panel whose width is a multiple of 16,
    /// one masked AVX-512 gather per 16 values: no per-run logic, which
    /// dominates on the short rows of small feature maps.
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
        let (k, icg, red) = (w.kernel, w.in_channels_per_group(), w.reduction());
        let plane = w.in_h * w.in_w;
        assert!(width.is_multiple_of(16) && width <= MAX_WIDTH);
        let vectors = width / 16;
        let (ih, iw) = (
            _mm512_set1_epi32(w.in_h as i32),
            _mm512_set1_epi32(w.in_w as i32),
        );
        // SAFETY: y0 and x0 hold MAX_WIDTH >= 16 * vectors values.
        let load = |a: &[i32; MAX_WIDTH], v: usize| unsafe {
            _mm512_loadu_si512(a.as_ptr().add(16 * v).cast())
        };
        let y0: [__m512i; MAX_WIDTH / 16] =
            std::array::from_fn(|v| load(&self.y0, v.min(vectors - 1)));
        let x0: [__m512i; MAX_WIDTH / 16] =
            std::array::from_fn(|v| load(&self.x0, v.min(vectors - 1)));
        for (q, dst) in rows.zip(panel.chunks_exact_mut(width)) {
            if q >= red {
                dst.fill(0.0);
                continue;
            }
            let (i, ky, kx) = (q / (k * k), q / k % k, q % k);
            let src = &input[(g * icg + i) * plane..][..plane];
            let (ky, kx) = (_mm512_set1_epi32(ky as i32), _mm512_set1_epi32(kx as i32));
            for v in 0..vectors {
                let (yy, xx) = (_mm512_add_epi32(y0[v], ky), _mm512_add_epi32(x0[v], kx));
                // Unsigned compares: negative coordinates are out too.
                let inside = _mm512_cmplt_epu32_mask(yy, ih) & _mm512_cmplt_epu32_mask(xx, iw);
                let at = _mm512_add_epi32(_mm512_mullo_epi32(yy, iw), xx);
                // SAFETY: only lanes with 0 <= yy < ih and 0 <= xx < iw load,
                // at yy * iw + xx < plane = src.len() (Window::new checked
                // that this fits i32); the store is dst[16v..16v + 16].
                unsafe {
                    let x = _mm512_mask_i32gather_ps::<4>(
                        _mm512_setzero_ps(),
                        inside,
                        at,
                        src.as_ptr().cast(),
                    );
                    _mm512_storeu_ps(dst.as_mut_ptr().add(16 * v), x);
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
                let (iy, ix) = (y0 as isize + ky, x0 as isize + kx);
                *d = if iy >= 0 && iy < ih && ix >= 0 && (ix as usize) < iw {
                    f(src[iy as usize * iw + ix as usize])
                } else {
                    T::default()
                };
            }
        }
    }
}
