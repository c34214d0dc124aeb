//! The blocked GEMM driver: C = A * B over cache blocks of the schedule,
//! each task packing the block of B it is about to use and running the
//! register-tile microkernels over it, with the epilogue fused into the
//! tiles' stores or run per finished block.

use super::micro::{Finish, PREFETCH_A_FROM, Store, microkernel};
use super::pack::{pack_im2col, pack_im2col_block};
use crate::aligned::AlignedVec;
use crate::epilogue::Activation;
use crate::epilogue::SyncPtr;
use crate::isa::Isa;
use crate::schedule::GemmSchedule;
use crate::workload::Workload;
use half::f16;
use half::slice::HalfFloatSliceExt;
use std::cell::RefCell;
use std::ops::Range;

/// Packed panels of a GEMM operand, in f32 or stored as f16 (fp16 weights).
#[derive(Debug, Clone)]
pub(crate) enum Panels {
    F32(AlignedVec),
    F16(Vec<f16>),
}

impl Panels {
    pub(crate) fn new(values: Vec<f32>, half: bool) -> Panels {
        if half {
            let mut h = vec![f16::ZERO; values.len()];
            h.convert_from_f32_slice(&values);
            Panels::F16(h)
        } else {
            Panels::F32(AlignedVec::from(&values[..]))
        }
    }

    pub(crate) fn view(&self) -> PanelsRef<'_> {
        match self {
            Panels::F32(v) => PanelsRef::F32(v),
            Panels::F16(v) => PanelsRef::F16(v),
        }
    }
}

/// Packed panels as [`gemm`] reads them: held at load, or packed by a run.
#[derive(Clone, Copy)]
pub(crate) enum PanelsRef<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl<'a> PanelsRef<'a> {
    /// The panels from panel `first` on, of panels holding `k` rows of
    /// `width` values.
    pub(crate) fn skip_panels(self, first: usize, (k, width): (usize, usize)) -> PanelsRef<'a> {
        match self {
            PanelsRef::F32(v) => PanelsRef::F32(&v[first * k * width..]),
            PanelsRef::F16(v) => PanelsRef::F16(&v[first * k * width..]),
        }
    }

    /// Panels `panels` restricted to reduction rows pc..pc+kb, as f32: the
    /// f32 panels themselves, or f16 ones converted (F16C where the CPU has
    /// it) into `buf` once per cache block. Returns the base pointer, the
    /// distance between panels, and the first panel the base stands for.
    fn block(
        self,
        buf: &mut AlignedVec,
        panels: Range<usize>,
        (k, width): (usize, usize),
        (pc, kb): (usize, usize),
    ) -> (*const f32, usize, usize) {
        match self {
            PanelsRef::F32(v) => (v[pc * width..].as_ptr(), k * width, 0),
            PanelsRef::F16(v) => {
                buf.resize(panels.len() * kb * width);
                for (i, p) in panels.clone().enumerate() {
                    v[(p * k + pc) * width..][..kb * width]
                        .convert_to_f32_slice(&mut buf[i * kb * width..(i + 1) * kb * width]);
                }
                (buf.as_ptr(), kb * width, panels.start)
            }
        }
    }
}

/// The B operand (k x n) of [`gemm`].
#[derive(Clone, Copy)]
pub(crate) enum BSource<'a> {
    /// Packed in `nr`-column panels holding all of K.
    Panels(PanelsRef<'a>),
    /// Row-major, rows `ld` values apart (`ld` >= n): the input of a 1x1
    /// stride-1 convolution (ld = n), or a band of its pixel columns (ld =
    /// the map's pixels, see [`crate::inverted`]).
    Rows { x: &'a [f32], ld: usize },
    /// The im2col matrix of group `g` of an NCHW input.
    Im2col {
        input: &'a [f32],
        w: &'a Workload,
        g: usize,
    },
}

/// How [`gemm`] finishes C.
pub(crate) enum Finishing<'a> {
    /// In the microkernel's store: `bias` per row of C, `residual` at C's
    /// offsets (row stride ldc), then the activation.
    Fused {
        bias: &'a [f32],
        residual: Option<&'a [f32]>,
        act: Activation,
    },
    /// Called with each finished block of C (rows, columns).
    Blocks(&'a (dyn Fn(Range<usize>, Range<usize>) + Sync)),
}

/// Buffers a task packs into, kept by each pool thread across runs so a
/// run allocates none.
#[derive(Default)]
struct Scratch {
    a: AlignedVec,
    b: AlignedVec,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
    static KEPT: RefCell<Vec<AlignedVec>> = RefCell::default();
}

/// Runs `f` with a buffer this thread keeps across runs, for what all of
/// a layer's tasks share (B packed once, a transposed C). The thread keeps
/// a few: a layer may need two, and a thread waiting for its tasks may run
/// another layer's (grouped convolutions run groups in parallel).
pub(crate) fn with_kept_buffer<R>(f: impl FnOnce(&mut AlignedVec) -> R) -> R {
    let mut buf = KEPT.with_borrow_mut(Vec::pop).unwrap_or_default();
    let result = f(&mut buf);
    KEPT.with_borrow_mut(|kept| kept.push(buf));
    result
}

/// One task's `kb` x `nc` block of B: where panel `jr` starts and its row
/// stride.
struct BBlock {
    base: *const f32,
    /// Distance between consecutive panels, and the panel `base` is.
    stride: usize,
    first: usize,
    ldb: usize,
    /// A partial last panel of `BSource::Rows`, copied (zero-padded) so no
    /// microkernel reads past the input: (panel, its copy).
    edge: Option<(usize, *const f32)>,
}

impl BBlock {
    /// Packs (if need be) panels `panels` over reduction rows pc..pc+kb
    /// into `buf`.
    fn new(
        b: BSource<'_>,
        buf: &mut AlignedVec,
        panels: Range<usize>,
        (n, k, nr): (usize, usize, usize),
        (pc, kb): (usize, usize),
        isa: Isa,
    ) -> BBlock {
        match b {
            BSource::Panels(p) => {
                let (base, stride, first) = p.block(buf, panels, (k, nr), (pc, kb));
                BBlock {
                    base,
                    stride,
                    first,
                    ldb: nr,
                    edge: None,
                }
            }
            BSource::Rows { x, ld } => {
                let last = panels.end - 1;
                let edge = (n < (last + 1) * nr).then(|| {
                    let valid = n - last * nr;
                    buf.resize(kb * nr);
                    buf.fill(0.0);
                    for (dst, src) in buf.chunks_exact_mut(nr).zip(x[pc * ld..].chunks(ld)) {
                        dst[..valid].copy_from_slice(&src[last * nr..][..valid]);
                    }
                    (last, buf.as_ptr())
                });
                BBlock {
                    base: x[pc * ld..].as_ptr(),
                    stride: nr,
                    first: 0,
                    ldb: ld,
                    edge,
                }
            }
            BSource::Im2col { input, w, g } => {
                buf.resize(panels.len() * kb * nr);
                pack_im2col_block(input, w, g, nr, (panels.clone(), pc..pc + kb), buf, isa);
                BBlock {
                    base: buf.as_ptr(),
                    stride: kb * nr,
                    first: panels.start,
                    ldb: nr,
                    edge: None,
                }
            }
        }
    }

    /// Panel `jr` and its row stride.
    fn panel(&self, jr: usize) -> (*const f32, usize) {
        match self.edge {
            // The copy is packed: its rows are one panel (nr = stride) apart.
            Some((e, p)) if e == jr => (p, self.stride),
            _ => (
                self.base.wrapping_add((jr - self.first) * self.stride),
                self.ldb,
            ),
        }
    }
}

/// C (m x n, row stride ldc) = A * B, A packed in `mr` panels, on the
/// current thread pool with schedule `s` and the microkernels of `isa`.
/// `par_m` runs the parallel loop over blocks of rows of C, else columns.
/// The microkernels prefetch A when it is [`PREFETCH_A_FROM`] values or
/// more.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm(
    s: &GemmSchedule,
    isa: Isa,
    par_m: bool,
    (m, n, k): (usize, usize, usize),
    a: PanelsRef<'_>,
    b: BSource<'_>,
    c: SyncPtr,
    ldc: usize,
    finishing: Finishing<'_>,
) {
    let prefetch_a = m * k >= PREFETCH_A_FROM;
    gemm_streaming(
        prefetch_a,
        s,
        isa,
        par_m,
        (m, n, k),
        a,
        b,
        c,
        ldc,
        finishing,
    )
}

/// [`gemm`], the microkernels prefetching A if `prefetch_a`: for one of
/// several GEMMs whose A operands a run streams together (Winograd's
/// products), the caller knows better than A's own size whether A comes
/// from beyond L2.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_streaming(
    prefetch_a: bool,
    s: &GemmSchedule,
    isa: Isa,
    par_m: bool,
    (m, n, k): (usize, usize, usize),
    a: PanelsRef<'_>,
    b: BSource<'_>,
    c: SyncPtr,
    ldc: usize,
    finishing: Finishing<'_>,
) {
    if let (true, BSource::Im2col { input, w, g }) = (par_m, b) {
        // Every row block needs all of B: pack it once, in parallel.
        return with_kept_buffer(|packed| {
            pack_im2col(input, w, g, (s.nr, k), packed, isa);
            let b = BSource::Panels(PanelsRef::F32(packed));
            let shape = (m, n, k);
            gemm_streaming(prefetch_a, s, isa, par_m, shape, a, b, c, ldc, finishing)
        });
    }
    let micro = microkernel(s.mr, s.nr, isa);
    let (mr, nr) = (s.mr, s.nr);
    let (mchunks, nchunks) = (m.div_ceil(s.mc), n.div_ceil(s.nc));
    let rows_of = |i: usize| i * s.mc..m.min((i + 1) * s.mc);
    let task = |is: Range<usize>, js: Range<usize>| {
        SCRATCH.with_borrow_mut(|scratch| {
            for j in js {
                let cols = j * s.nc..n.min((j + 1) * s.nc);
                let b_panels = cols.start / nr..cols.end.div_ceil(nr);
                for pc in (0..k).step_by(s.kc) {
                    let kb = s.kc.min(k - pc);
                    let last = pc + kb == k;
                    let bb = BBlock::new(
                        b,
                        &mut scratch.b,
                        b_panels.clone(),
                        (n, k, nr),
                        (pc, kb),
                        isa,
                    );
                    for i in is.clone() {
                        let rows = rows_of(i);
                        let a_panels = rows.start / mr..rows.end.div_ceil(mr);
                        let (a0, astride, afirst) =
                            a.block(&mut scratch.a, a_panels.clone(), (k, mr), (pc, kb));
                        for jr in b_panels.clone() {
                            let (bp, ldb) = bb.panel(jr);
                            for ir in a_panels.clone() {
                                let (r0, c0) = (ir * mr, jr * nr);
                                let off = r0 * ldc + c0;
                                let finish = match (&finishing, last) {
                                    (
                                        Finishing::Fused {
                                            bias,
                                            residual,
                                            act,
                                        },
                                        true,
                                    ) => Some(Finish {
                                        bias: bias[r0..].as_ptr(),
                                        residual: residual
                                            .map_or(std::ptr::null(), |r| r[off..].as_ptr()),
                                        act: *act,
                                    }),
                                    _ => None,
                                };
                                let st = Store {
                                    c: c.get().wrapping_add(off),
                                    ldc,
                                    rows: mr.min(m - r0),
                                    cols: nr.min(n - c0),
                                    accumulate: pc > 0,
                                    finish,
                                    prefetch_a,
                                };
                                let ap = a0.wrapping_add((ir - afirst) * astride);
                                // SAFETY: `block` and `BBlock` return panels of kb
                                // reduction rows covering a_panels and b_panels;
                                // the tile's valid rows and columns lie in this
                                // task's block of C, which no other task writes.
                                unsafe { micro(kb, ap, bp, ldb, &st) };
                            }
                        }
                    }
                }
                if let Finishing::Blocks(f) = finishing {
                    for i in is.clone() {
                        f(rows_of(i), cols.clone());
                    }
                }
            }
        })
    };
    if par_m {
        crate::awake::for_each(mchunks, |i| task(i..i + 1, 0..nchunks));
    } else {
        crate::awake::for_each(nchunks, |j| task(0..mchunks, j..j + 1));
    }
}
