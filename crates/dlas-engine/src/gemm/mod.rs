//! im2col + GEMM convolution, dense and block-sparse.
//!
//! Dense: C = A * B, BLIS style. The weight operand is packed once at load
//! (A panels for NCHW, B panels for NHWC). The activation operand is never
//! materialised as an im2col matrix: each task packs the `kc` x `nc` block
//! of B it is about to use, straight from the input, so the block is in L2
//! when the microkernels stream it (when the parallel loop runs over rows of
//! C, every task needs all of B and it is packed once, in parallel). The
//! input of a 1x1 stride-1 convolution already is B, row-major, and the
//! microkernels read it in place. The microkernel's store adds the bias
//! and residual and applies ReLU/ReLU6 on the last reduction block (see
//! `micro`); other activations and the NHWC layout finish each block of C
//! with the [`Epilogue`] once its reduction is complete.
//!
//! Sparse (NCHW only): see `sparse`.

mod conv;
mod driver;
mod micro;
mod pack;
mod sparse;

pub(crate) use conv::GemmConv;
pub(crate) use driver::{
    BSource, Finishing, Panels, PanelsRef, gemm, gemm_streaming, with_kept_buffer,
};
pub(crate) use micro::PREFETCH_A_FROM;
pub(crate) use pack::{pack_columns, pack_im2col_with, pack_panels};
pub(crate) use sparse::{sparse_gemm, strip};
