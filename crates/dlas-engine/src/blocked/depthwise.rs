//! The depthwise stencil in NCHW16c: each output pixel of a block is its
//! taps' input pixels times the taps' 16 weights, summed, one 16-lane
//! vector per pixel (a tap is one load, wherever the pixel is, whatever
//! the stride). A task is the schedule's blocks by its output rows
//! ([`BlockedSchedule`]), block by block; four pixels of a row run
//! together, so each tap's weights are loaded once for four (8 of AVX2's
//! 16 registers accumulate). Edge pixels run one at a time with only
//! their inside taps, rows at the top and bottom with only their inside
//! rows, so no padded copy is made. A block of fewer than 16 channels (a
//! layer whose channels are not a multiple of 16) runs a scalar loop.

use super::{BLOCK, V16, block_width, clamp_of, finish, interior, smooth, taps_inside};
use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::Isa;
use crate::schedule::BlockedSchedule;
use crate::workload::Workload;

/// Pixels computed together.
const Q: usize = 4;

#[derive(Debug, Clone)]
pub(crate) struct BlockedDepthwise {
    w: Workload,
    /// `[block][ky][kx][16]`, lanes past the block's channels zero.
    weights: Vec<f32>,
    isa: Isa,
    schedule: BlockedSchedule,
}

impl BlockedDepthwise {
    /// `weights` is (channels, 1, k, k); `schedule` is valid for `w`.
    pub fn new(
        w: Workload,
        schedule: BlockedSchedule,
        weights: &[f32],
        isa: Isa,
    ) -> BlockedDepthwise {
        debug_assert!(w.is_depthwise());
        let (c, kk) = (w.out_channels, w.kernel * w.kernel);
        let mut packed = vec![0.0; c.div_ceil(BLOCK) * kk * BLOCK];
        for ch in 0..c {
            for t in 0..kk {
                packed[((ch / BLOCK) * kk + t) * BLOCK + ch % BLOCK] = weights[ch * kk + t];
            }
        }
        BlockedDepthwise {
            w,
            weights: packed,
            isa,
            schedule,
        }
    }

    pub(crate) fn workload(&self) -> &Workload {
        &self.w
    }

    /// One NCHW16c sample.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        debug_assert!(input.len() >= self.w.in_len() && out.len() >= self.w.out_len());
        let (rows, blocks) = (self.w.out_h, self.w.out_channels.div_ceil(BLOCK));
        let BlockedSchedule {
            blocks: per_block,
            rows: per_row,
        } = self.schedule;
        let row_tasks = rows.div_ceil(per_row);
        let out = SyncPtr::new(out);
        let in_plane = self.w.in_h * self.w.in_w;
        crate::awake::for_each(blocks.div_ceil(per_block) * row_tasks, |t| {
            let (bt, rt) = (t / row_tasks, t % row_tasks);
            let task_rows = rt * per_row..((rt + 1) * per_row).min(rows);
            for b in bt * per_block..((bt + 1) * per_block).min(blocks) {
                if block_width(self.w.out_channels, b) < BLOCK {
                    for oy in task_rows.clone() {
                        self.row_scalar(input, out, epi, residual, (b, oy));
                    }
                    continue;
                }
                let src = input.as_ptr().wrapping_add(b * BLOCK * in_plane);
                // SAFETY: this task alone writes its rows of its blocks;
                // `src` is block b's plane.
                unsafe { self.rows_from(src, (b, task_rows.clone()), out, epi, residual) }
            }
        });
    }

    /// Rows `rows` of full block `b`, reading input pixel (iy, ix) at `src
    /// + 16 (iy in_w + ix)` (block b's plane, or a band of it placed so).
    ///
    /// # Safety
    /// `src` addresses every input row the output rows read; no other task
    /// writes those rows of block `b`.
    pub(crate) unsafe fn rows_from(
        &self,
        src: *const f32,
        (b, rows): (usize, std::ops::Range<usize>),
        out: SyncPtr,
        epi: &Epilogue,
        residual: Option<&[f32]>,
    ) {
        for oy in rows {
            let args = (src, out, epi, residual, (b, oy));
            // SAFETY: the layer's isa is one this CPU has; the rest is the
            // caller's.
            unsafe {
                match self.isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => self.row_avx512(args),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => self.row_avx2(args),
                    _ => self.row::<super::Lanes>(args),
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn row_avx2(&self, args: Args<'_>) {
        // SAFETY: as `rows_from` says.
        unsafe { self.row::<super::Avx2>(args) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn row_avx512(&self, args: Args<'_>) {
        // SAFETY: as `rows_from` says.
        unsafe { self.row::<super::Avx512>(args) }
    }

    /// Row `oy` of full block `b`, input block at `x`.
    ///
    /// # Safety
    /// The CPU runs `V`'s instruction set; as [`BlockedDepthwise::rows_from`].
    #[inline(always)]
    unsafe fn row<V: V16>(&self, (x, out, epi, residual, (b, oy)): Args<'_>) {
        let w = &self.w;
        let (k, s, p) = (w.kernel, w.stride, w.padding);
        let out_plane = w.out_h * w.out_w;
        let iy = (oy * s) as isize - p as isize;
        let ky = taps_inside(iy, k, w.in_h);
        // SAFETY: the caller's contract; every pointer stays inside block
        // b's input rows, output row and weights.
        unsafe {
            let taps = self.weights.as_ptr().add(b * k * k * BLOCK);
            let o = out.get().add(b * BLOCK * out_plane + oy * w.out_w * BLOCK);
            let r = residual.map_or(std::ptr::null(), |r| {
                r.as_ptr().add(b * BLOCK * out_plane + oy * w.out_w * BLOCK)
            });
            let bias = V::load(epi.bias.as_ptr().add(b * BLOCK));
            let clamp = clamp_of::<V>(epi.act);
            let store = |q: usize, acc: V| {
                let res = if r.is_null() { r } else { r.add(q * BLOCK) };
                finish(acc, bias, (o.add(q * BLOCK), res, BLOCK), clamp);
            };
            // The input pixel (iy + ky, ix + kx) of output column ox.
            let at = |ox: usize, ky: usize, kx: usize| {
                let ix = (ox * s) as isize - p as isize + kx as isize;
                x.offset(((iy + ky as isize) * w.in_w as isize + ix) * BLOCK as isize)
            };
            let (lo, hi) = interior(w.in_w, w.out_w, (k, s, p));
            for ox in (0..lo).chain(hi..w.out_w) {
                let kx = taps_inside((ox * s) as isize - p as isize, k, w.in_w);
                let mut acc = V::zero();
                for ky in ky.clone() {
                    for kx in kx.clone() {
                        acc = acc.fma(
                            V::load(at(ox, ky, kx)),
                            V::load(taps.add((ky * k + kx) * BLOCK)),
                        );
                    }
                }
                store(ox, acc);
            }
            let mut ox = lo;
            while ox + Q <= hi {
                let mut acc = [V::zero(); Q];
                for ky in ky.clone() {
                    for kx in 0..k {
                        let t = V::load(taps.add((ky * k + kx) * BLOCK));
                        for (q, a) in acc.iter_mut().enumerate() {
                            *a = a.fma(V::load(at(ox + q, ky, kx)), t);
                        }
                    }
                }
                for (q, a) in acc.into_iter().enumerate() {
                    store(ox + q, a);
                }
                ox += Q;
            }
            for ox in ox..hi {
                let mut acc = V::zero();
                for ky in ky.clone() {
                    for kx in 0..k {
                        acc = acc.fma(
                            V::load(at(ox, ky, kx)),
                            V::load(taps.add((ky * k + kx) * BLOCK)),
                        );
                    }
                }
                store(ox, acc);
            }
            if smooth(epi.act) {
                epi.act
                    .apply_all(std::slice::from_raw_parts_mut(o, w.out_w * BLOCK));
            }
        }
    }

    /// Row `oy` of a block of fewer than 16 channels, value by value.
    fn row_scalar(
        &self,
        input: &[f32],
        out: SyncPtr,
        epi: &Epilogue,
        residual: Option<&[f32]>,
        (b, oy): (usize, usize),
    ) {
        let w = &self.w;
        let (k, s, p) = (w.kernel, w.stride, w.padding);
        let bw = block_width(w.out_channels, b);
        let (in_plane, out_plane) = (w.in_h * w.in_w, w.out_h * w.out_w);
        let iy = (oy * s) as isize - p as isize;
        let start = b * BLOCK * out_plane + oy * w.out_w * bw;
        // SAFETY: task (b, oy) alone writes this row of block b.
        let o = unsafe { out.slice(start, w.out_w * bw) };
        for ox in 0..w.out_w {
            let ix = (ox * s) as isize - p as isize;
            for j in 0..bw {
                let mut acc = 0.0;
                for ky in taps_inside(iy, k, w.in_h) {
                    for kx in taps_inside(ix, k, w.in_w) {
                        let pixel =
                            (iy + ky as isize) as usize * w.in_w + (ix + kx as isize) as usize;
                        let v = input[b * BLOCK * in_plane + pixel * bw + j];
                        acc += v * self.weights[(b * k * k + ky * k + kx) * BLOCK + j];
                    }
                }
                let r = residual.map_or(0.0, |r| r[start + ox * bw + j]);
                o[ox * bw + j] = epi.one(b * BLOCK + j, acc, r);
            }
        }
    }
}

/// A row's input block, output, epilogue, residual and (block, row).
type Args<'a> = (
    *const f32,
    SyncPtr,
    &'a Epilogue,
    Option<&'a [f32]>,
    (usize, usize),
);
