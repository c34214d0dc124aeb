//! The direct convolution in NCHW16c, any kernel size and stride, one
//! group: a tile is `P` consecutive output pixels of one row by the 16
//! channels of one output block, `P` x 16 accumulators in registers (6
//! pixels on AVX2, two registers each, 12 of its 16; 12 on AVX-512). Each
//! reduction step loads the 16 weights of one input channel and one tap
//! and broadcasts that channel's value at each of the tile's pixels, read
//! in place (a pixel's channels of one block are contiguous, so the
//! broadcasts of a block's 16 channels walk one cache line per pixel).
//! A 1x1 stride-1 layer is this GEMM of pixels by channels on the map
//! flattened, so its tiles run across rows: 196 pixels are 33 tiles of 6
//! or 5 and 49 are 9, every lane full, where the NCHW GEMM's 16-wide
//! tiles of pixels leave 2% and 8% of theirs empty and its 8-wide rows of
//! channels are what 16-channel blocks are here.
//!
//! Borders: an output row's pixels whose taps all lie inside the input
//! run in tiles; the few at the left and right edges run one at a time
//! with only their inside taps, and rows at the top and bottom with only
//! their inside rows of taps, so no padded copy of the input is made.
//! Tiles are balanced over each run of pixels (14 as 5, 5, 4; 7 as 4, 3).
//! A task is the schedule's output blocks by its output rows
//! ([`BlockedSchedule`]; a flattened layer's rows are one piece of the
//! flat row), block by block; where the layer's weights outweigh its
//! input, consecutive tasks share output blocks (their weights stay in L2
//! while the input streams), else rows.
//! Bias, residual and a clamping activation are applied before the store;
//! SiLU and sigmoid over a task's stored values.

use super::{BLOCK, V16, block_width, clamp_of, finish, interior, smooth, taps_inside};
use crate::epilogue::{Epilogue, SyncPtr};
use crate::isa::Isa;
use crate::schedule::BlockedSchedule;
use crate::workload::Workload;

#[derive(Debug, Clone)]
pub(crate) struct BlockedConv {
    w: Workload,
    /// Per output block, `[cb][ky][kx][j][16]` for input channel `16 cb +
    /// j` of block `cb`, lanes past the output block's channels zero.
    weights: Vec<f32>,
    isa: Isa,
    /// The geometry the kernel runs: the layer's, or a 1x1 stride-1
    /// layer's map as one row.
    g: Geometry,
    /// Row pieces (output row, first and end column).
    pieces: Vec<(usize, usize, usize)>,
    /// Output blocks and pieces of a task.
    task: (usize, usize),
    /// Consecutive tasks take consecutive output blocks of the same pieces
    /// (`false`) or consecutive pieces of the same output blocks (`true`).
    weight_major: bool,
}

#[derive(Debug, Clone, Copy)]
struct Geometry {
    in_h: usize,
    in_w: usize,
    out_h: usize,
    out_w: usize,
}

/// One tile's operands.
struct Tile<V> {
    /// The input pixel of the tile's first output pixel at tap (0, 0),
    /// row and column (negative in the padding).
    iy: isize,
    ix: isize,
    ky: std::ops::Range<usize>,
    kx: std::ops::Range<usize>,
    /// The tile's first output value and residual (or null).
    out: *mut f32,
    residual: *const f32,
    /// The output block's channels (values per pixel).
    width: usize,
    bias: V,
    clamp: Option<(V, V)>,
}

impl BlockedConv {
    /// Whether the layer is a 1x1 stride-1 unpadded one, its map one row
    /// (what a fused inverted-residual step expands with).
    pub(crate) fn is_pointwise(&self) -> bool {
        (self.w.kernel, self.w.stride, self.w.padding) == (1, 1, 0)
    }

    pub(crate) fn workload(&self) -> &Workload {
        &self.w
    }

    /// `weights` is (out, in, k, k) row-major; the layer has one group;
    /// `schedule` is valid for `w`.
    pub fn new(w: Workload, schedule: BlockedSchedule, weights: &[f32], isa: Isa) -> BlockedConv {
        debug_assert_eq!(w.groups, 1);
        let (cin, cout, kk) = (w.in_channels, w.out_channels, w.kernel * w.kernel);
        let per_block = cin * kk * BLOCK;
        let blocks = cout.div_ceil(BLOCK);
        let mut packed = vec![0.0; blocks * per_block];
        for ob in 0..blocks {
            for cb in 0..cin.div_ceil(BLOCK) {
                let bw = block_width(cin, cb);
                for t in 0..kk {
                    for j in 0..bw {
                        let at = ob * per_block + cb * BLOCK * kk * BLOCK + (t * bw + j) * BLOCK;
                        for lane in 0..block_width(cout, ob) {
                            let (o, i) = (ob * BLOCK + lane, cb * BLOCK + j);
                            packed[at + lane] = weights[(o * cin + i) * kk + t];
                        }
                    }
                }
            }
        }
        let flat = w.kernel == 1 && w.stride == 1 && w.padding == 0;
        let g = if flat {
            let n = w.in_h * w.in_w;
            Geometry {
                in_h: 1,
                in_w: n,
                out_h: 1,
                out_w: n,
            }
        } else {
            Geometry {
                in_h: w.in_h,
                in_w: w.in_w,
                out_h: w.out_h,
                out_w: w.out_w,
            }
        };
        // A flattened layer's task is one piece of `rows` map rows; any
        // other layer's is `rows` pieces of one row each.
        let (piece, per_task) = if flat {
            (schedule.rows * w.out_w, 1)
        } else {
            (g.out_w, schedule.rows)
        };
        let pieces = (0..g.out_h)
            .flat_map(|oy| {
                (0..g.out_w)
                    .step_by(piece)
                    .map(move |x0| (oy, x0, (x0 + piece).min(g.out_w)))
            })
            .collect();
        BlockedConv {
            w,
            weights: packed,
            isa,
            g,
            pieces,
            task: (schedule.blocks.min(blocks), per_task),
            weight_major: blocks * per_block > w.in_len(),
        }
    }

    /// One NCHW16c sample.
    pub fn run(&self, input: &[f32], out: &mut [f32], epi: &Epilogue, residual: Option<&[f32]>) {
        debug_assert!(input.len() >= self.w.in_len() && out.len() >= self.w.out_len());
        let (blocks, pieces) = (self.w.out_channels.div_ceil(BLOCK), self.pieces.len());
        let (per_block, per_piece) = self.task;
        let (block_tasks, piece_tasks) = (blocks.div_ceil(per_block), pieces.div_ceil(per_piece));
        let plane = self.g.out_h * self.g.out_w;
        let out = SyncPtr::new(out);
        crate::awake::for_each(block_tasks * piece_tasks, |t| {
            let (pt, bt) = if self.weight_major {
                (t % piece_tasks, t / piece_tasks)
            } else {
                (t / block_tasks, t % block_tasks)
            };
            for ob in bt * per_block..((bt + 1) * per_block).min(blocks) {
                let at = ob * BLOCK * plane;
                let dst = Dst {
                    out: out.get().wrapping_add(at),
                    residual: residual.map_or(std::ptr::null(), |r| r.as_ptr().wrapping_add(at)),
                };
                for piece in &self.pieces[pt * per_piece..((pt + 1) * per_piece).min(pieces)] {
                    // SAFETY: this task alone writes its pieces' pixels of
                    // its blocks, inside `out`.
                    unsafe { self.piece(input, dst, epi, *piece, ob) }
                }
            }
        });
    }

    /// Pixels `pixels` of output block `ob` of a 1x1 stride-1 layer (whose
    /// map is one row), into `band`, which holds them (16 values each)
    /// from its start: the expansion of a fused inverted-residual step.
    ///
    /// # Safety
    /// `band` holds `16 * pixels.len()` writable values; block `ob` is full.
    pub(crate) unsafe fn band(
        &self,
        input: &[f32],
        ob: usize,
        pixels: std::ops::Range<usize>,
        band: *mut f32,
        epi: &Epilogue,
    ) {
        debug_assert!(self.g.out_h == 1 && block_width(self.w.out_channels, ob) == BLOCK);
        let dst = Dst {
            out: band.wrapping_sub(pixels.start * BLOCK),
            residual: std::ptr::null(),
        };
        // SAFETY: the caller's contract.
        unsafe { self.piece(input, dst, epi, (0, pixels.start, pixels.end), ob) }
    }

    /// Row piece `(oy, x0, x1)` of output block `ob`.
    ///
    /// # Safety
    /// `dst` addresses the piece's pixels (row-major over the kernel's
    /// geometry, `width` values each) and no other task writes them.
    unsafe fn piece(
        &self,
        input: &[f32],
        dst: Dst,
        epi: &Epilogue,
        piece: (usize, usize, usize),
        ob: usize,
    ) {
        let args = (input, dst, epi, piece, ob);
        // SAFETY: the isa is one this CPU has (the layer was built for
        // `Isa::detect()` or a narrower one); the rest is the caller's.
        unsafe {
            match self.isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => self.task_avx512(args),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => self.task_avx2(args),
                _ => self.task::<super::Lanes, 6>(args),
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn task_avx2(&self, args: Args<'_>) {
        // SAFETY: as `piece` says.
        unsafe { self.task::<super::Avx2, 6>(args) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn task_avx512(&self, args: Args<'_>) {
        // SAFETY: as `piece` says.
        unsafe { self.task::<super::Avx512, 12>(args) }
    }

    /// Output block `ob` of row piece `(oy, x0, x1)`.
    ///
    /// # Safety
    /// The CPU runs `V`'s instruction set; as [`BlockedConv::piece`].
    #[inline(always)]
    unsafe fn task<V: V16, const PMAX: usize>(
        &self,
        (input, dst, epi, (oy, x0, x1), ob): Args<'_>,
    ) {
        let (w, g) = (&self.w, &self.g);
        let (k, s, p) = (w.kernel, w.stride, w.padding);
        let width = block_width(w.out_channels, ob);
        let mut bias = [0.0f32; BLOCK];
        bias[..width].copy_from_slice(&epi.bias[ob * BLOCK..][..width]);
        // SAFETY: the caller's contract; every pointer below stays inside
        // the sample's input, the destination and the block's weights.
        unsafe {
            let iy = (oy * s) as isize - p as isize;
            let mut tile = Tile {
                iy,
                ix: 0,
                ky: taps_inside(iy, k, g.in_h),
                kx: 0..k,
                out: std::ptr::null_mut(),
                residual: std::ptr::null(),
                width,
                bias: V::load(bias.as_ptr()),
                clamp: clamp_of::<V>(epi.act),
            };
            let weights = self
                .weights
                .as_ptr()
                .add(ob * w.in_channels * k * k * BLOCK);
            let at = |ox: usize, tile: &mut Tile<V>| {
                let o = (oy * g.out_w + ox) * width;
                tile.ix = (ox * s) as isize - p as isize;
                tile.out = dst.out.wrapping_add(o);
                tile.residual = if dst.residual.is_null() {
                    dst.residual
                } else {
                    dst.residual.wrapping_add(o)
                };
            };
            let (lo, hi) = interior(g.in_w, g.out_w, (k, s, p));
            let (lo, hi) = (lo.clamp(x0, x1), hi.clamp(x0, x1));
            for ox in (x0..lo).chain(hi..x1) {
                at(ox, &mut tile);
                tile.kx = taps_inside(tile.ix, k, g.in_w);
                self.tile::<V, 1>(input.as_ptr(), weights, &tile);
            }
            tile.kx = 0..k;
            let n = hi - lo;
            let tiles = n.div_ceil(PMAX);
            let mut ox = lo;
            for i in 0..tiles {
                let len = n * (i + 1) / tiles - n * i / tiles;
                at(ox, &mut tile);
                macro_rules! dispatch {
                    ($($n:literal)*) => {
                        match len {
                            $($n => self.tile::<V, $n>(input.as_ptr(), weights, &tile),)*
                            _ => unreachable!("tiles are at most PMAX <= 12 pixels"),
                        }
                    };
                }
                dispatch!(1 2 3 4 5 6 7 8 9 10 11 12);
                ox += len;
            }
            if smooth(epi.act) {
                let from = dst.out.wrapping_add((oy * g.out_w + x0) * width);
                let values = std::slice::from_raw_parts_mut(from, (x1 - x0) * width);
                epi.act.apply_all(values);
            }
        }
    }

    /// `P` pixels of `tile` (a stride apart in the input, consecutive in
    /// the output) by one output block, whose weights start at `weights`.
    ///
    /// # Safety
    /// As [`BlockedConv::task`]; the tile's taps lie inside the input.
    #[inline(always)]
    unsafe fn tile<V: V16, const P: usize>(&self, x: *const f32, weights: *const f32, t: &Tile<V>) {
        let (w, g) = (&self.w, &self.g);
        let (k, s, cin) = (w.kernel, w.stride, w.in_channels);
        let in_plane = g.in_h * g.in_w;
        // SAFETY: the caller's contract.
        unsafe {
            let mut acc = [V::zero(); P];
            for cb in 0..cin.div_ceil(BLOCK) {
                let bw = block_width(cin, cb);
                let xb = x.add(cb * BLOCK * in_plane);
                let wb = weights.add(cb * BLOCK * k * k * BLOCK);
                for ky in t.ky.clone() {
                    let row = xb.offset((t.iy + ky as isize) * (g.in_w * bw) as isize);
                    for kx in t.kx.clone() {
                        let px = row.offset((t.ix + kx as isize) * bw as isize);
                        let wk = wb.add((ky * k + kx) * bw * BLOCK);
                        let step = s * bw;
                        if bw == BLOCK {
                            for j in 0..BLOCK {
                                let wv = V::load(wk.add(j * BLOCK));
                                for (q, a) in acc.iter_mut().enumerate() {
                                    *a = a.fma(V::splat(px.add(q * step + j)), wv);
                                }
                            }
                        } else {
                            for j in 0..bw {
                                let wv = V::load(wk.add(j * BLOCK));
                                for (q, a) in acc.iter_mut().enumerate() {
                                    *a = a.fma(V::splat(px.add(q * step + j)), wv);
                                }
                            }
                        }
                    }
                }
            }
            for (q, a) in acc.into_iter().enumerate() {
                let residual = if t.residual.is_null() {
                    t.residual
                } else {
                    t.residual.add(q * t.width)
                };
                finish(
                    a,
                    t.bias,
                    (t.out.add(q * t.width), residual, t.width),
                    t.clamp,
                );
            }
        }
    }
}

/// Where a task writes: output block `ob`'s pixel (oy, ox) at `out +
/// (oy * out_w + ox) * width`, its residual at the same offset from
/// `residual` (or null).
#[derive(Clone, Copy)]
struct Dst {
    out: *mut f32,
    residual: *const f32,
}

/// A task's input, destination, epilogue, row piece and output block.
type Args<'a> = (&'a [f32], Dst, &'a Epilogue, (usize, usize, usize), usize);
