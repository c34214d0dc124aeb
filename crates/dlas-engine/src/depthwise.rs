//! Depthwise convolution (one input and one output channel per group),
//! NCHW, dense weights: a stack of 2-D stencils, so the kernel slides each
//! channel's k x k taps over its own plane, vectorised along output columns
//! (four vectors at a time, masked at the row's end). Every algorithm runs
//! depthwise layers with it: im2col would build a one-row GEMM per channel
//! and spatial pack would fill one lane of each vector (TVM and XNNPACK
//! special-case them the same way). NHWC layers run [`DepthwiseNhwc`],
//! vectorised along channels.
//!
//! At stride 1 with AVX-512 every tap reads the input plane in place, its
//! masks dropping the columns of the padding. On maps narrower than two
//! vectors, and at every stride above 1, AVX-512 runs the layer over
//! flattened planes instead ([`flat`]). Otherwise each task copies
//! the input rows it needs into a zero-padded buffer, split by column phase
//! for strides above 1 (phase r holds padded columns r, r + s, r + 2s, ...;
//! stride 2 is split with vector permutes), so every tap reads contiguous
//! vectors whatever the stride. Bias, residual and a clamping activation
//! are applied in registers before the store. fp16 weights are widened to
//! f32 a channel's taps at a time (see `fp16`).

use crate::epilogue::{Epilogue, SyncPtr};
use crate::fp16::Store;
use crate::isa::Isa;
use crate::schedule::DirectSchedule;
use crate::workload::Workload;
use std::cell::RefCell;

mod flat;
mod nhwc;
use flat::FlatMasks;
pub(crate) use nhwc::DepthwiseNhwc;

#[derive(Debug, Clone)]
pub(crate) struct DepthwiseConv {
    w: Workload,
    s: DirectSchedule,
    /// k * k taps per channel, f32 or (fp16) f16.
    weights: Store,
    isa: Isa,
    /// The flattened-plane kernel's masks, where it runs (see the module
    /// doc).
    flat: Option<FlatMasks>,
}

/// A task's padded, phase-split input rows, kept by each pool thread. The
/// copy writes the same positions for every channel of a layer, so the
/// padding is zeroed only when the geometry changes.
#[derive(Default)]
struct Rows {
    buf: Vec<f32>,
    /// The layer and output rows the buffer's zeros were laid out for.
    geometry: Option<(Workload, usize, usize)>,
}

thread_local! {
    static ROWS: RefCell<Rows> = RefCell::default();
}

/// Most taps the depthwise kernel takes (7x7); larger kernels run direct.
pub(crate) const MAX_TAPS: usize = 49;

/// One channel's work for a task: its taps, where each tap's input starts
/// in the phase buffer for the first output row, the buffer distance
/// between consecutive output rows, and the output rows' width.
#[derive(Clone, Copy)]
struct Plane<'a> {
    buf: &'a [f32],
    taps: &'a [f32],
    offsets: &'a [usize],
    row_step: usize,
    width: usize,
}

/// Bias and clamp applied in registers (None: the epilogue runs after).
type Fused = Option<(f32, Option<(f32, f32)>)>;

impl DepthwiseConv {
    /// `weights` is (channels, 1, k, k), stored as f16 when `half`; tasks
    /// are `s.oc_block` channels by `s.row_block` output rows.
    pub fn new(
        w: Workload,
        s: DirectSchedule,
        weights: &[f32],
        half: bool,
        isa: Isa,
    ) -> DepthwiseConv {
        debug_assert!(w.in_channels_per_group() == 1 && w.out_channels_per_group() == 1);
        DepthwiseConv {
            w,
            s,
            weights: Store::new(weights.to_vec(), half),
            isa,
            flat: (isa == Isa::Avx512).then(|| FlatMasks::of(&w)).flatten(),
        }
    }

    /// Width of one phase row: the columns every tap of a row reads.
    fn phase_width(&self) -> usize {
        let w = &self.w;
        w.out_w + (w.kernel - 1) / w.stride
    }

    /// One NCHW sample.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        let w = &self.w;
        let (oh, ow, pix) = (w.out_h, w.out_w, w.out_pixels());
        let (k, s) = (w.kernel, w.stride);
        let row_block = self.s.row_block.min(oh);
        let row_blocks = oh.div_ceil(row_block);
        let oc_blocks = w.out_channels.div_ceil(self.s.oc_block);
        let c = SyncPtr::new(out);
        #[cfg(target_arch = "x86_64")]
        if let Some(flat) = &self.flat {
            return flat.run(self, input, c, epi, residual);
        }
        crate::awake::for_each(oc_blocks * row_blocks, |t| {
            let (ob, rb) = (t / row_blocks, t % row_blocks);
            let rows = rb * row_block..oh.min((rb + 1) * row_block);
            let chans = ob * self.s.oc_block..w.out_channels.min((ob + 1) * self.s.oc_block);
            // One channel's taps, widened from f16 (unused for f32 weights).
            let mut widened = Vec::new();
            #[cfg(target_arch = "x86_64")]
            if s == 1 && self.isa == Isa::Avx512 {
                for ch in chans {
                    let plane = &input[ch * w.in_h * w.in_w..][..w.in_h * w.in_w];
                    let off = ch * pix + rows.start * ow;
                    let len = rows.len() * ow;
                    // SAFETY: task t alone writes channels `chans` of rows `rows`.
                    let o = unsafe { c.slice(off, len) };
                    let res = residual.map(|r| &r[off..off + len]);
                    let fused = epi.act.clamp().map(|clamp| (epi.bias[ch], clamp));
                    let taps = self.weights.get(ch * k * k..(ch + 1) * k * k, &mut widened);
                    // SAFETY: the CPU has AVX-512F (`isa` never exceeds Isa::detect()).
                    unsafe { stride1_avx512(w, plane, taps, rows.start, o, fused, res) };
                    if fused.is_none() {
                        epi.channel(ch, o, res);
                    }
                }
                return;
            }
            let planes = |ch: usize| (&input[ch * w.in_h * w.in_w..][..w.in_h * w.in_w], 0);
            // SAFETY: task t alone writes channels `chans` of rows `rows`.
            unsafe { self.rows_of(planes, chans, rows, c, (epi, residual)) };
        });
    }

    /// Output rows `rows` of channels `chans` into the sample's output `c`,
    /// on this thread, through a padded buffer: `planes(ch)` holds input
    /// rows `top..` of channel `ch` (`top` and on, every row inside the map
    /// that the output rows read), as a whole plane or a band of one
    /// ([`crate::inverted`]).
    ///
    /// # Safety
    /// No other thread writes or reads those rows of those channels of `c`
    /// meanwhile.
    pub(crate) unsafe fn rows_of<'a>(
        &self,
        planes: impl Fn(usize) -> (&'a [f32], usize),
        chans: std::ops::Range<usize>,
        rows: std::ops::Range<usize>,
        c: SyncPtr,
        (epi, residual): (&Epilogue, Option<&[f32]>),
    ) {
        let w = &self.w;
        let (ow, pix) = (w.out_w, w.out_pixels());
        let (k, s, pw) = (w.kernel, w.stride, self.phase_width());
        let nrows = (rows.len() - 1) * s + k;
        let mut offsets = [0usize; MAX_TAPS];
        for (t, off) in offsets[..k * k].iter_mut().enumerate() {
            let (ky, kx) = (t / k, t % k);
            *off = ((kx % s) * nrows + ky) * pw + kx / s;
        }
        // One channel's taps, widened from f16 (unused for f32 weights).
        let mut widened = Vec::new();
        ROWS.with_borrow_mut(|buf| {
            for ch in chans {
                self.fill(planes(ch), rows.start, rows.len(), buf);
                let off = ch * pix + rows.start * ow;
                let len = rows.len() * ow;
                // SAFETY: the caller's promise.
                let o = unsafe { c.slice(off, len) };
                let p = Plane {
                    buf: &buf.buf,
                    taps: self.weights.get(ch * k * k..(ch + 1) * k * k, &mut widened),
                    offsets: &offsets[..k * k],
                    row_step: s * pw,
                    width: ow,
                };
                self.plane(p, ch, o, epi, residual.map(|r| &r[off..off + len]));
            }
        })
    }

    /// Copies the padded input rows under output rows first..first+count
    /// of one channel into `rows`, phase by phase, from `plane`, which
    /// holds the channel's input rows from row `top` on.
    fn fill(&self, (plane, top): (&[f32], usize), first: usize, count: usize, rows: &mut Rows) {
        let w = &self.w;
        let (s, p, iw) = (w.stride, w.padding, w.in_w);
        let pw = self.phase_width();
        let nrows = (count - 1) * s + w.kernel;
        let geometry = Some((*w, first, count));
        if rows.geometry != geometry {
            rows.buf.clear();
            rows.buf.resize(s * nrows * pw, 0.0);
            rows.geometry = geometry;
        }
        let buf = &mut rows.buf;
        for yy in 0..nrows {
            // Padded row first * s + yy is input row iy.
            let Some(iy) = (first * s + yy).checked_sub(p).filter(|&iy| iy < w.in_h) else {
                continue;
            };
            let src = &plane[(iy - top) * iw..][..iw];
            if s == 1 {
                buf[yy * pw + p..][..iw].copy_from_slice(src);
                continue;
            }
            if s == 2 {
                // Input columns 2t and 2t + 1 are padded columns 2t + p and
                // 2t + 1 + p: phase p % 2 at t + p / 2 and the other phase
                // at t + (p + 1) / 2.
                let (lo, hi) = buf.split_at_mut(nrows * pw);
                let (even, odd) = (&mut lo[yy * pw..][..pw], &mut hi[yy * pw..][..pw]);
                let (first, second) = if p % 2 == 0 { (even, odd) } else { (odd, even) };
                split_pairs(
                    src,
                    first.get_mut(p / 2..).unwrap_or_default(),
                    second.get_mut(p.div_ceil(2)..).unwrap_or_default(),
                    self.isa,
                );
                continue;
            }
            for r in 0..s {
                // Phase r, column j is padded column j * s + r, input column
                // j * s + r - p: j from ceil((p - r) / s) while inside the row.
                let j0 = p.saturating_sub(r).div_ceil(s);
                let dst = &mut buf[(r * nrows + yy) * pw..][..pw];
                let x0 = j0 * s + r - p;
                if j0 < pw && x0 < iw {
                    for (d, &v) in dst[j0..].iter_mut().zip(src[x0..].iter().step_by(s)) {
                        *d = v;
                    }
                }
            }
        }
    }

    /// The task's output rows of channel `ch` (`o`, rows of `p.width`),
    /// finished by `epi` with the residual rows `res`.
    fn plane(&self, p: Plane<'_>, ch: usize, o: &mut [f32], epi: &Epilogue, res: Option<&[f32]>) {
        let furthest = p.offsets.iter().max().expect("a tap");
        let rows = o.len() / p.width;
        assert!(
            furthest + (rows - 1) * p.row_step + p.width <= p.buf.len(),
            "the buffer covers every tap of every row"
        );
        let fused = epi.act.clamp().map(|clamp| (epi.bias[ch], clamp));
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512F (`isa` never exceeds Isa::detect());
            // every tap of every row reads inside the buffer (asserted above).
            Isa::Avx512 => unsafe { plane_avx512(p, o, fused, res) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 and FMA; bounds as above.
            Isa::Avx2 => unsafe { plane_avx2(p, o, fused, res) },
            _ => plane_portable(p, o),
        }
        if fused.is_none() || self.isa == Isa::Portable {
            epi.channel(ch, o, res);
        }
    }
}

/// `first[t] = src[2t]`, `second[t] = src[2t + 1]` (and `first` takes a
/// trailing odd element), with vector permutes where the CPU has them.
/// Values that fall past the end of `first` or `second` (input columns no
/// output reads) are dropped.
fn split_pairs(src: &[f32], first: &mut [f32], second: &mut [f32], isa: Isa) {
    let src = &src[..src.len().min(2 * first.len()).min(2 * second.len() + 1)];
    let pairs = src.len() / 2;
    let (first, second) = (&mut first[..src.len().div_ceil(2)], &mut second[..pairs]);
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: the CPU has AVX-512F; lengths are checked by the slicing above.
        done = unsafe { split_pairs_avx512(src, first, second) };
    }
    let _ = isa;
    for t in done..pairs {
        first[t] = src[2 * t];
        second[t] = src[2 * t + 1];
    }
    if src.len() % 2 == 1 {
        first[pairs] = src[2 * pairs];
    }
}

/// [`split_pairs`] with two vpermt2ps per 32 values, the last chunk
/// masked; returns the pairs done (all of them; a trailing odd value is
/// in `first` too).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn split_pairs_avx512(src: &[f32], first: &mut [f32], second: &mut [f32]) -> usize {
    use std::arch::x86_64::*;
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let chunks = src.len() / 32;
    assert!(first.len() >= chunks * 16 && second.len() >= chunks * 16);
    for i in 0..chunks {
        // SAFETY: chunk i is src[32i..32i + 32] and its halves go to
        // first/second[16i..16i + 16], all inside (asserted above).
        unsafe {
            let a = _mm512_loadu_ps(src.as_ptr().add(32 * i));
            let b = _mm512_loadu_ps(src.as_ptr().add(32 * i + 16));
            _mm512_storeu_ps(
                first.as_mut_ptr().add(16 * i),
                _mm512_permutex2var_ps(a, even, b),
            );
            _mm512_storeu_ps(
                second.as_mut_ptr().add(16 * i),
                _mm512_permutex2var_ps(a, odd, b),
            );
        }
    }
    // The last, partial chunk with masks: a 14- to 112-column row is
    // mostly tail.
    let rest = src.len() - 32 * chunks;
    let ones = |n: usize| ((1u32 << n.min(16)) - 1) as __mmask16;
    let (lo, hi) = (ones(rest), ones(rest.saturating_sub(16)));
    let (evens, odds) = (rest.div_ceil(2), rest / 2);
    assert!(first.len() >= chunks * 16 + evens && second.len() >= chunks * 16 + odds);
    // SAFETY: the loads are masked to src's last `rest` values and the
    // stores to the `evens` and `odds` values first and second hold
    // (asserted above).
    unsafe {
        let at = src.as_ptr().add(32 * chunks);
        let a = _mm512_maskz_loadu_ps(lo, at);
        let b = _mm512_maskz_loadu_ps(hi, at.wrapping_add(16));
        _mm512_mask_storeu_ps(
            first.as_mut_ptr().add(16 * chunks),
            ones(evens),
            _mm512_permutex2var_ps(a, even, b),
        );
        _mm512_mask_storeu_ps(
            second.as_mut_ptr().add(16 * chunks),
            ones(odds),
            _mm512_permutex2var_ps(a, odd, b),
        );
    }
    src.len() / 2
}

/// Runs `$block::<NV>(x0, nv-args...)` over the blocks of 64 output
/// columns of a `width`-wide row, NV the 16-lane vectors a block needs, so
/// the accumulators of narrow rows (7 or 14 columns) are one register, not
/// four.
#[cfg(target_arch = "x86_64")]
macro_rules! by_blocks {
    ($width:expr, $block:ident ($($arg:expr),*)) => {
        for x0 in (0..$width).step_by(64) {
            match ($width - x0).div_ceil(16) {
                1 => $block::<1>(x0, $($arg),*),
                2 => $block::<2>(x0, $($arg),*),
                3 => $block::<3>(x0, $($arg),*),
                _ => $block::<4>(x0, $($arg),*),
            }
        }
    };
}

/// Bits lo..hi of a 16-lane mask.
#[cfg(target_arch = "x86_64")]
fn lanes(lo: isize, hi: isize) -> u16 {
    let ones = |n: isize| ((1u32 << n.clamp(0, 16)) - 1) as u16;
    ones(hi) & !ones(lo)
}

/// Output rows first.. of one channel (`o`, rows of `w.out_w`) at stride
/// 1, reading the channel's input `plane` in place: up to four vectors of
/// output columns at a time, each tap one masked load per vector (the
/// masks, which depend on the column block and kx only, drop input columns
/// outside the plane), taps of input rows outside the plane skipped.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stride1_avx512(
    w: &Workload,
    plane: &[f32],
    taps: &[f32],
    first: usize,
    o: &mut [f32],
    fused: Fused,
    res: Option<&[f32]>,
) {
    assert!(plane.len() == w.in_h * w.in_w && o.len().is_multiple_of(w.out_w) && w.kernel <= 7);
    let s = Stencil {
        w,
        plane,
        taps,
        first,
        fused,
        res,
    };
    // SAFETY: forwarded (same CPU, sizes asserted).
    unsafe { by_blocks!(w.out_w, stride1_block(&s, &mut *o)) }
}

/// Output rows [`stride1_block`] computes together: each input row it
/// loads feeds the taps of every one of them it lies under, so a 3x3
/// layer loads 5 rows of vectors for 3 output rows instead of 9. The
/// stencil is load-bound: 144 channels on 56x56, 32 on 112x112 and 64 on
/// 32x32 (the layer alone, AMD EPYC Zen 4) took 0.77-0.79x the time of
/// one row at a time, with one thread or two; two rows at once took
/// 0.91-0.93x, four 0.84x and 1.02x.
const ROWS_AT_ONCE: usize = 3;

/// One channel's stride-1 stencil: the layer, the channel's input plane
/// and taps, the first output row, and the epilogue.
#[cfg(target_arch = "x86_64")]
struct Stencil<'a> {
    w: &'a Workload,
    plane: &'a [f32],
    taps: &'a [f32],
    first: usize,
    fused: Fused,
    res: Option<&'a [f32]>,
}

/// [`stride1_avx512`] on output columns x0..x0 + 16 * NV (clipped to the
/// row), [`ROWS_AT_ONCE`] rows at a time and the rest one by one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn stride1_block<const NV: usize>(x0: usize, s: &Stencil<'_>, o: &mut [f32]) {
    use std::arch::x86_64::*;
    let (k, p, ow) = (s.w.kernel, s.w.padding as isize, s.w.out_w);
    let iw = s.w.in_w as isize;
    // Output lanes of the block, and per kx the lanes whose input column
    // x0 + 16v + l + kx - p is inside the row.
    let stores: [__mmask16; NV] =
        std::array::from_fn(|v| lanes(0, ow as isize - (x0 + 16 * v) as isize));
    let mut loads = [[0 as __mmask16; NV]; 7];
    for (kx, m) in loads.iter_mut().enumerate().take(k) {
        for (v, m) in m.iter_mut().enumerate() {
            let x = (x0 + 16 * v + kx) as isize - p;
            *m = lanes(-x, iw - x) & stores[v];
        }
    }
    let rows = o.len() / ow;
    let grouped = rows - rows % ROWS_AT_ONCE;
    let masks = (&loads, stores);
    for r in (0..grouped).step_by(ROWS_AT_ONCE) {
        // SAFETY: forwarded.
        unsafe { stride1_rows::<NV, ROWS_AT_ONCE>(x0, s, masks, r, o) };
    }
    for r in grouped..rows {
        // SAFETY: forwarded.
        unsafe { stride1_rows::<NV, 1>(x0, s, masks, r, o) };
    }
}

/// Output rows r..r + R of [`stride1_block`]'s columns: input row
/// `oy + dy - p` feeds output row oy + j through tap row dy - j.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn stride1_rows<const NV: usize, const R: usize>(
    x0: usize,
    s: &Stencil<'_>,
    (loads, stores): (&[[u16; NV]; 7], [u16; NV]),
    r: usize,
    o: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (k, p, ow) = (s.w.kernel, s.w.padding as isize, s.w.out_w);
    let oy = (s.first + r) as isize;
    let mut acc = [[_mm512_setzero_ps(); NV]; R];
    for dy in 0..k + R - 1 {
        let iy = oy + dy as isize - p;
        if iy < 0 || iy >= s.w.in_h as isize {
            continue;
        }
        let src = s.plane[iy as usize * s.w.in_w..].as_ptr();
        for (kx, m) in loads.iter().enumerate().take(k) {
            let xs: [__m512; NV] = std::array::from_fn(|v| {
                let x = (x0 + 16 * v + kx) as isize - p;
                // SAFETY: the mask keeps input columns 0..iw of input row
                // iy, inside `plane` (wrapping_offset only forms the
                // address).
                unsafe { _mm512_maskz_loadu_ps(m[v], src.wrapping_offset(x)) }
            });
            for (j, acc) in acc.iter_mut().enumerate() {
                let Some(ky) = dy.checked_sub(j).filter(|&ky| ky < k) else {
                    continue;
                };
                let wv = _mm512_set1_ps(s.taps[ky * k + kx]);
                for (a, &x) in acc.iter_mut().zip(&xs) {
                    *a = _mm512_fmadd_ps(wv, x, *a);
                }
            }
        }
    }
    for (j, acc) in acc.into_iter().enumerate() {
        let at = (r + j) * ow;
        let res = s.res.map(|res| &res[at..][..ow]);
        // SAFETY: row r + j of `o` and `res` hold the row; stores are
        // masked to it.
        unsafe {
            finish_avx512(
                acc,
                o[at..at + ow].as_mut_ptr().wrapping_add(x0),
                stores,
                s.fused,
                res,
                x0,
            )
        };
    }
}

/// Stores a block's accumulators to `at` (lane masks `m`), with the fused
/// bias, residual (row `res`, from column x0) and clamp.
///
/// # Safety
/// The masked lanes of `at` and of `res` from x0 are valid.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn finish_avx512<const NV: usize>(
    acc: [std::arch::x86_64::__m512; NV],
    at: *mut f32,
    m: [std::arch::x86_64::__mmask16; NV],
    fused: Fused,
    res: Option<&[f32]>,
    x0: usize,
) {
    use std::arch::x86_64::*;
    for (v, mut a) in acc.into_iter().enumerate() {
        if let Some((bias, clamp)) = fused {
            a = _mm512_add_ps(a, _mm512_set1_ps(bias));
            if let Some(res) = res {
                let rv = res.as_ptr().wrapping_add(x0 + 16 * v);
                // SAFETY: masked to the row, which `res` holds.
                a = _mm512_add_ps(a, unsafe { _mm512_maskz_loadu_ps(m[v], rv) });
            }
            if let Some((lo, hi)) = clamp {
                a = _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), a));
            }
        }
        // SAFETY: the caller's contract.
        unsafe { _mm512_mask_storeu_ps(at.wrapping_add(16 * v), m[v], a) };
    }
}

fn plane_portable(p: Plane<'_>, o: &mut [f32]) {
    o.fill(0.0);
    for (r, row) in o.chunks_exact_mut(p.width).enumerate() {
        for (&wv, &off) in p.taps.iter().zip(p.offsets) {
            for (a, &x) in row.iter_mut().zip(&p.buf[off + r * p.row_step..]) {
                *a += wv * x;
            }
        }
    }
}

/// Each output row up to four vectors at a time (independent FMA chains),
/// the last ones masked.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn plane_avx512(p: Plane<'_>, o: &mut [f32], fused: Fused, res: Option<&[f32]>) {
    // SAFETY: forwarded (same CPU; the caller checked the buffer's size).
    unsafe { by_blocks!(p.width, plane_block(p, &mut *o, fused, res)) }
}

/// [`plane_avx512`] on output columns x0..x0 + 16 * NV (clipped to the row).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn plane_block<const NV: usize>(
    x0: usize,
    p: Plane<'_>,
    o: &mut [f32],
    fused: Fused,
    res: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    let n = p.width;
    let m: [__mmask16; NV] = std::array::from_fn(|v| lanes(0, n as isize - (x0 + 16 * v) as isize));
    for (r, row) in o.chunks_exact_mut(n).enumerate() {
        let buf = p.buf[r * p.row_step..].as_ptr();
        let mut acc = [_mm512_setzero_ps(); NV];
        for (&wv, &off) in p.taps.iter().zip(p.offsets) {
            let wv = _mm512_set1_ps(wv);
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: masked to the row's columns, inside the buffer (see
                // `plane`).
                let x = unsafe { _mm512_maskz_loadu_ps(m[v], buf.add(off + x0 + 16 * v)) };
                *a = _mm512_fmadd_ps(wv, x, *a);
            }
        }
        let res = res.map(|res| &res[r * n..][..n]);
        // SAFETY: `row` and `res` hold the row; stores are masked to it.
        unsafe { finish_avx512(acc, row.as_mut_ptr().wrapping_add(x0), m, fused, res, x0) };
    }
}

/// As [`plane_avx512`] with AVX2 vectors (vmaskmovps for the partial ones).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn plane_avx2(p: Plane<'_>, o: &mut [f32], fused: Fused, res: Option<&[f32]>) {
    use std::arch::x86_64::*;
    const L: usize = 8;
    let n = p.width;
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mask =
        |x: usize| _mm256_cmpgt_epi32(_mm256_set1_epi32(n.saturating_sub(x).min(L) as i32), lane);
    for r in 0..o.len() / n {
        let (buf, row) = (p.buf[r * p.row_step..].as_ptr(), r * n);
        for x0 in (0..n).step_by(4 * L) {
            let m: [__m256i; 4] = std::array::from_fn(|v| mask(x0 + v * L));
            let mut acc = [_mm256_setzero_ps(); 4];
            for (&wv, &off) in p.taps.iter().zip(p.offsets) {
                let wv = _mm256_set1_ps(wv);
                for (v, a) in acc.iter_mut().enumerate() {
                    // SAFETY: masked to the row's columns, inside the buffer
                    // (see `plane`).
                    let x = unsafe { _mm256_maskload_ps(buf.add(off + x0 + v * L), m[v]) };
                    *a = _mm256_fmadd_ps(wv, x, *a);
                }
            }
            for (v, mut a) in acc.into_iter().enumerate() {
                let at = row + x0 + v * L;
                if let Some((bias, clamp)) = fused {
                    a = _mm256_add_ps(a, _mm256_set1_ps(bias));
                    if let Some(res) = res {
                        // SAFETY: masked to the row, which `res` holds.
                        let rv = unsafe { _mm256_maskload_ps(res.as_ptr().add(at), m[v]) };
                        a = _mm256_add_ps(a, rv);
                    }
                    if let Some((lo, hi)) = clamp {
                        a = _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), a));
                    }
                }
                // SAFETY: masked to the row, inside `o`.
                unsafe { _mm256_maskstore_ps(o.as_mut_ptr().add(at), m[v], a) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, F32_TOLERANCE};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every instruction set the CPU has, every row blocking, fused
        /// and unfused epilogues, f32 and f16 weights (held to the
        /// reference of the rounded weights).
        #[test]
        fn every_isa_matches_reference(
            w in testing::depthwise_workload(),
            row_block in 1usize..5,
            act in testing::activation(),
            residual in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let weights = testing::weights(&w, seed);
            let s = DirectSchedule { oc_block: 1, row_block };
            for (half, reference) in [(false, weights.clone()), (true, testing::rounded_to_f16(&weights))] {
                for isa in Isa::available() {
                    let conv = DepthwiseConv::new(w, s, &weights, half, isa);
                    let e = testing::error(&w, &reference, (act, residual, seed), |x, y, epi, r| {
                        conv.run(x, y, epi, r)
                    });
                    prop_assert!(e < F32_TOLERANCE, "{isa:?} half {half} {w}: error {e}");
                }
            }
        }

        /// The flattened-plane kernel against the reference: narrow maps
        /// at stride 1 (it runs on every one with AVX-512), strides 2 and 3
        /// on maps of any width with their usual padding (it runs where
        /// every tap stays in the phase planes), and up to 39 channels, so
        /// that tasks take one plane or several.
        #[test]
        fn flattened_planes_match_reference(
            (k, h, wd) in (0usize..4).prop_flat_map(|r| {
                let k = 2 * r + 1;
                (Just(k), k..k + 20, k..k + 40)
            }),
            stride in 1usize..=3,
            channels in 1usize..40,
            act in testing::activation(),
            residual in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let wd = if stride == 1 { wd.min(flat::FLAT_BELOW - 1) } else { wd };
            let w = Workload::new(channels, channels, k, stride, k / 2, channels, h, wd);
            prop_assert!(stride > 1 || FlatMasks::of(&w).is_some());
            let weights = testing::weights(&w, seed);
            let s = DirectSchedule { oc_block: 1, row_block: 1 };
            for isa in Isa::available() {
                let conv = DepthwiseConv::new(w, s, &weights, false, isa);
                let e = testing::error(&w, &weights, (act, residual, seed), |x, y, epi, r| {
                    conv.run(x, y, epi, r)
                });
                prop_assert!(e < F32_TOLERANCE, "{isa:?} {w}: error {e}");
            }
        }
    }
}
