//! Multi-head self-attention ([`dlas_zoo::Op::Attention`]: ViT's global
//! attention, Swin's shifted windows) on the engine's GEMM microkernels, so
//! its two products run at the speed of a convolution's GEMM rather than
//! as scalar loops.
//!
//! Every (sample, window, head) is one parallel task with two small GEMMs
//! through the blocked driver of `gemm`: scores S = Q Kᵀ (queries packed as
//! A panels, pre-scaled by 1 / sqrt(head dim); keys transposed into
//! row-major B) and context = P V (the softmax P packed as A panels, values
//! row-major B). A task gathers its tokens from the qkv tensor in either
//! layout, through the roll of shifted windows, and scatters the context
//! back to where each token came from, so no rolled copy of the tensor is
//! ever made. The softmax is computed in f32, each row less its maximum,
//! after adding Swin's relative-position bias and its -100 for tokens the
//! roll made neighbours, exactly as `dlas_zoo::reference::attention_f64`.

use crate::aligned::AlignedVec;
use crate::epilogue::SyncPtr;
use crate::gemm::{BSource, Finishing, PanelsRef, gemm};
use crate::isa::Isa;
use crate::ops::at;
use crate::schedule::GemmSchedule;
use dlas_core::Layout;
use dlas_zoo::{Attention, Shape};
use std::cell::RefCell;

/// What Swin adds to the score of two tokens that were not neighbours
/// before the roll (timm and torchvision use -100, not -infinity).
const MASK: f32 = -100.0;

/// An attention node compiled for its input shape: windows, the dense
/// relative-position bias and the GEMM tile.
#[derive(Debug)]
pub(crate) struct WindowAttention {
    heads: usize,
    /// The qkv input, `[3d, h, w]`.
    shape: Shape,
    /// Window height and width (the whole grid without windows).
    window: (usize, usize),
    shift: usize,
    /// Per head, the bias of query token i towards key token j of a window,
    /// `heads x T x T` (T tokens per window); empty without a bias table.
    bias: Vec<f32>,
    schedule: GemmSchedule,
    isa: Isa,
}

/// A task's buffers, kept by each pool thread across runs.
#[derive(Default)]
struct Scratch {
    /// Queries as A panels (T x head dim), scaled.
    q: AlignedVec,
    /// Keys transposed, row-major (head dim x T).
    kt: Vec<f32>,
    /// Values, row-major (T x head dim).
    v: Vec<f32>,
    /// Scores, row-major (T x T).
    s: Vec<f32>,
    /// Softmax of the scores as A panels.
    p: AlignedVec,
    /// Context, row-major (T x head dim).
    o: Vec<f32>,
    /// The GEMMs' (absent) bias.
    zeros: Vec<f32>,
    /// Per token of the window: (row, column) in the sample, band pair.
    tokens: Vec<(usize, usize, usize)>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

impl WindowAttention {
    /// `attention` over a qkv input of `shape`, with its relative-position
    /// `table` (`(2 * window - 1)^2 x heads`, row-major) when it has one.
    pub fn new(attention: &Attention, shape: Shape, table: Option<&[f32]>) -> WindowAttention {
        let [_, h, w] = shape;
        let heads = attention.heads;
        let (wh, ww) = attention.window_hw(h, w);
        let tokens = wh * ww;
        let bias = table.map_or_else(Vec::new, |table| {
            let mut bias = vec![0.0; heads * tokens * tokens];
            for (i, row) in bias.chunks_mut(tokens).enumerate() {
                let (head, i) = (i / tokens, i % tokens);
                for (j, b) in row.iter_mut().enumerate() {
                    let dy = i / ww + wh - 1 - j / ww;
                    let dx = i % ww + ww - 1 - j % ww;
                    *b = table[(dy * (2 * ww - 1) + dx) * heads + head];
                }
            }
            bias
        });
        WindowAttention {
            heads,
            shape,
            window: (wh, ww),
            shift: attention.shift,
            bias,
            schedule: GemmSchedule::default(),
            isa: Isa::detect(),
        }
    }

    /// Attention of a batch: `qkv` is (batch, 3d, h, w) in `layout`, every
    /// value of `out` (batch, d, h, w) is written.
    pub fn run(&self, qkv: &[f32], out: &mut [f32], layout: Layout) {
        let [c, h, w] = self.shape;
        let (wh, ww) = self.window;
        let per_sample = (h / wh) * (w / ww) * self.heads;
        let batch = qkv.len() / (c * h * w);
        let out_len = c / 3 * h * w;
        debug_assert_eq!(out.len(), batch * out_len);
        let out = SyncPtr::new(out);
        crate::awake::for_each(batch * per_sample, |task| {
            let (n, rest) = (task / per_sample, task % per_sample);
            let x = &qkv[n * c * h * w..][..c * h * w];
            // Taken out of the thread's slot for the task, so a task that
            // waits (in the GEMM's parallel loop) while this thread runs
            // another cannot find it borrowed.
            let mut scratch = SCRATCH.with_borrow_mut(std::mem::take);
            let y = out.offset(n * out_len);
            self.window_head(
                x,
                rest / self.heads,
                rest % self.heads,
                layout,
                &mut scratch,
                y,
            );
            SCRATCH.with_borrow_mut(|s| *s = scratch);
        });
    }

    /// Head `head` of window `window` of one sample `x`, into `out`.
    fn window_head(
        &self,
        x: &[f32],
        window: usize,
        head: usize,
        layout: Layout,
        s: &mut Scratch,
        out: SyncPtr,
    ) {
        let shape @ [c, h, w] = self.shape;
        let d = c / 3;
        let dh = d / self.heads;
        let (wh, ww) = self.window;
        let tokens = wh * ww;
        let shift = self.shift;
        let (wy, wx) = (window / (w / ww), window % (w / ww));
        // Which band of the rolled grid a row or column is in (see
        // `attention_f64`): only tokens of one band pair attend freely.
        let band = |pos: usize, size: usize, window: usize| match pos {
            _ if shift == 0 || pos < size - window => 0,
            _ if pos < size - shift => 1,
            _ => 2,
        };
        s.tokens.clear();
        s.tokens.extend((0..tokens).map(|t| {
            let (ry, rx) = (wy * wh + t / ww, wx * ww + t % ww);
            let pair = band(ry, h, wh) * 3 + band(rx, w, ww);
            ((ry + shift) % h, (rx + shift) % w, pair)
        }));
        let get = |block: usize, k: usize, t: usize| {
            let (y, xx, _) = s.tokens[t];
            x[at(layout, shape, block * d + head * dh + k, y, xx)]
        };
        let mr = self.schedule.mr;
        let scale = 1.0 / (dh as f32).sqrt();
        pack_rows(&mut s.q, tokens, dh, mr, |t, k| get(0, k, t) * scale);
        s.kt.resize(dh * tokens, 0.0);
        for (k, row) in s.kt.chunks_mut(tokens).enumerate() {
            row.iter_mut()
                .enumerate()
                .for_each(|(t, v)| *v = get(1, k, t));
        }
        s.v.resize(tokens * dh, 0.0);
        for (t, row) in s.v.chunks_mut(dh).enumerate() {
            row.iter_mut()
                .enumerate()
                .for_each(|(k, v)| *v = get(2, k, t));
        }
        if s.zeros.len() < tokens {
            s.zeros.resize(tokens, 0.0);
        }
        s.s.resize(tokens * tokens, 0.0);
        self.gemm((tokens, tokens, dh), &s.q, &s.kt, &mut s.s, &s.zeros);
        let bias = (!self.bias.is_empty())
            .then(|| &self.bias[head * tokens * tokens..][..tokens * tokens]);
        for (i, row) in s.s.chunks_mut(tokens).enumerate() {
            if let Some(b) = bias {
                row.iter_mut()
                    .zip(&b[i * tokens..][..tokens])
                    .for_each(|(v, b)| *v += b);
            }
            if shift > 0 {
                let pair = s.tokens[i].2;
                for (v, t) in row.iter_mut().zip(&s.tokens) {
                    if t.2 != pair {
                        *v += MASK;
                    }
                }
            }
            softmax(row);
        }
        let scores = &s.s;
        pack_rows(&mut s.p, tokens, tokens, mr, |i, j| scores[i * tokens + j]);
        s.o.resize(tokens * dh, 0.0);
        self.gemm((tokens, dh, tokens), &s.p, &s.v, &mut s.o, &s.zeros);
        let out_shape = [d, h, w];
        for (t, row) in s.o.chunks(dh).enumerate() {
            let (y, xx, _) = s.tokens[t];
            for (k, &v) in row.iter().enumerate() {
                let i = at(layout, out_shape, head * dh + k, y, xx);
                // SAFETY: the token's position and the head's channels
                // belong to this task alone; `i` is inside the sample.
                unsafe { out.get().add(i).write(v) };
            }
        }
    }

    /// C (m x n, row-major) = A (packed panels, m x k) * B (row-major k x n),
    /// in one block: the tasks are the parallelism, each GEMM runs on its
    /// task's thread.
    fn gemm(
        &self,
        (m, n, k): (usize, usize, usize),
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        zeros: &[f32],
    ) {
        let s = GemmSchedule {
            kc: k,
            mc: m.next_multiple_of(self.schedule.mr),
            nc: n.next_multiple_of(self.schedule.nr),
            ..self.schedule
        };
        let finishing = Finishing::Fused {
            bias: zeros,
            residual: None,
            act: crate::epilogue::Activation::Identity,
        };
        gemm(
            &s,
            self.isa,
            true,
            (m, n, k),
            PanelsRef::F32(a),
            BSource::Rows { x: b, ld: n },
            SyncPtr::new(c),
            n,
            finishing,
        );
    }
}

/// Packs the `rows x k` matrix `get(row, kk)` into panels of `mr` rows
/// (zero past `rows`), as the GEMM reads A.
fn pack_rows(
    buf: &mut AlignedVec,
    rows: usize,
    k: usize,
    mr: usize,
    get: impl Fn(usize, usize) -> f32,
) {
    buf.resize(rows.div_ceil(mr) * k * mr);
    for (p, panel) in buf.chunks_mut(k * mr).enumerate() {
        for (kk, lane) in panel.chunks_mut(mr).enumerate() {
            for (j, v) in lane.iter_mut().enumerate() {
                let r = p * mr + j;
                *v = if r < rows { get(r, kk) } else { 0.0 };
            }
        }
    }
}

/// The softmax of `row` in place, less its maximum first so no exp
/// overflows.
fn softmax(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut total = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        total += *v;
    }
    let inv = 1.0 / total;
    row.iter_mut().for_each(|v| *v *= inv);
}
