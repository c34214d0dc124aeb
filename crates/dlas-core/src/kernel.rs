//! Which kernel of the native engine computes a convolution, decided once.
//!
//! The engine's lowering, the device model and the calibration grid all
//! need to know which kernel runs a layer under a configuration: the
//! engine to build it, the model to price it with the curve of the class
//! that was timed, the calibration to time each class with the
//! configuration that makes the engine run it. Each used to decide for
//! itself (the int8 path re-picked depthwise, VNNI or GEMM; the model
//! mapped algorithms to curves with rules of its own), and they drifted.
//! [`kernel_class`] is now the one decision, a pure function of the layer's
//! [`ConvShape`], the configuration ([`Lowering`]) and what the CPU offers
//! ([`Cpu`]); each of them reads it, and a test compiles every zoo layer
//! under every configuration and checks that the engine builds the class
//! the model prices and the calibration times.

use crate::axes::{Algorithm, Format, Layout};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The shape of one grouped 2-D convolution on one sample, with square
/// kernel and stride and symmetric padding: the one conv-shape type of the
/// project (the engine's `Workload`, the model's convolution kernels, the
/// calibration's grid and records). The zoo's `Conv` is the graph
/// operator's parameters, without a map; `Conv::shape_on` gives its shape.
/// Its serialised form keys the engine's tuning records, so its fields and
/// their names do not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvShape {
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
    pub groups: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
}

impl ConvShape {
    /// The shape of a convolution on an `in_h` x `in_w` map; the output
    /// size follows from kernel, stride and padding.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        groups: usize,
        in_h: usize,
        in_w: usize,
    ) -> ConvShape {
        let out = |s: usize| (s + 2 * padding - kernel) / stride + 1;
        ConvShape {
            in_channels,
            out_channels,
            kernel,
            stride,
            padding,
            groups,
            in_h,
            in_w,
            out_h: out(in_h),
            out_w: out(in_w),
        }
    }

    /// One input and one output channel per group: a stack of 2-D stencils.
    pub fn is_depthwise(&self) -> bool {
        self.in_channels_per_group() == 1 && self.out_channels_per_group() == 1 && self.groups > 1
    }

    /// Whether a Winograd kernel can compute this layer at all: 3x3,
    /// stride 1, one group ([`winograd_tile`] adds when it pays).
    pub fn winograd_computes(&self) -> bool {
        self.kernel == 3 && self.stride == 1 && self.groups == 1
    }

    pub fn in_channels_per_group(&self) -> usize {
        self.in_channels / self.groups
    }

    pub fn out_channels_per_group(&self) -> usize {
        self.out_channels / self.groups
    }

    /// Length of one row of the weight matrix: (in / groups) * k * k.
    pub fn reduction(&self) -> usize {
        self.in_channels_per_group() * self.kernel * self.kernel
    }

    pub fn out_pixels(&self) -> usize {
        self.out_h * self.out_w
    }

    pub fn in_len(&self) -> usize {
        self.in_channels * self.in_h * self.in_w
    }

    pub fn out_len(&self) -> usize {
        self.out_channels * self.out_pixels()
    }

    /// Multiply-accumulates of one sample.
    pub fn macs(&self) -> u64 {
        (self.out_len() * self.reduction()) as u64
    }

    /// Floating-point operations of one sample (2 per multiply-accumulate).
    pub fn flops(&self) -> u64 {
        2 * self.macs()
    }
}

impl fmt::Display for ConvShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conv {}->{} k{} s{} p{} g{} on {}x{}",
            self.in_channels,
            self.out_channels,
            self.kernel,
            self.stride,
            self.padding,
            self.groups,
            self.in_h,
            self.in_w
        )
    }
}

/// What kind of kernel runs a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelFamily {
    /// The sliding-window kernel (dense, or CSR on any layer).
    Direct,
    Gemm,
    SpatialPack,
    /// A depthwise stencil: the fp32 and fp16 ones (NCHW and NHWC), and
    /// int8's depthwise kernel.
    Depthwise,
    /// Winograd F(4x4, 3x3) or F(2x2, 3x3) (the class's `tile`): 3x3
    /// stride-1 ungrouped dense fp32 layers of 8 or more input channels and
    /// 16 or more output tiles only (see [`winograd_tile`]).
    Winograd,
    /// The GEMM running a depthwise layer as one one-row product per
    /// channel: the fp16 GEMM's depthwise layers (calibrations before
    /// issue 42 recorded it as `depthwise` fp16).
    DepthwiseGemm,
}

/// The stored data type of weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    F16,
    I8,
}

/// What the CPU offers that changes which kernel runs: an int8
/// dot-product instruction (AVX-512 VNNI's `vpdpbusd`), which the int8
/// GEMM uses where it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cpu {
    pub vnni: bool,
}

/// What a configuration asks of every layer: the study's algorithm (not
/// `auto`), the weight format the layer's weights are stored in, the
/// activation layout and the data type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lowering {
    pub algorithm: Algorithm,
    pub format: Format,
    pub layout: Layout,
    pub precision: Precision,
}

/// The kernel a layer runs: what the engine builds, the device model
/// prices (with whether its schedule was tuned) and the calibration times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelClass {
    pub family: KernelFamily,
    /// Weights stored sparse (CSR or BSR): the kernel skips zero weights.
    pub sparse: bool,
    pub precision: Precision,
    /// The activation layout the kernel reads and writes.
    pub layout: Layout,
    /// The int8 GEMM with the CPU's dot-product instruction.
    pub vnni: bool,
    /// A Winograd kernel's output tile.
    pub tile: Option<WinogradTile>,
}

impl KernelClass {
    /// The kernel's name without its format, precision and layout
    /// (`winograd-f2`, `gemm-vnni`), as a profile of one network names it.
    pub fn kernel_name(&self) -> &'static str {
        match (self.family, self.tile) {
            (KernelFamily::Direct, _) => "direct",
            (KernelFamily::Gemm, _) if self.vnni => "gemm-vnni",
            (KernelFamily::Gemm, _) => "gemm",
            (KernelFamily::SpatialPack, _) => "spatial-pack",
            (KernelFamily::Depthwise, _) => "depthwise",
            (KernelFamily::Winograd, Some(WinogradTile::F2x2)) => "winograd-f2",
            (KernelFamily::Winograd, _) => "winograd",
            (KernelFamily::DepthwiseGemm, _) => "depthwise-gemm",
        }
    }
}

impl fmt::Display for KernelClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let family = self.kernel_name();
        let precision = match self.precision {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::I8 => "i8",
        };
        let format = if self.sparse { "csr" } else { "dense" };
        write!(f, "{family} {format} {precision}")?;
        if self.layout != Layout::Nchw {
            write!(f, " {}", self.layout)?;
        }
        Ok(())
    }
}

/// Why a configuration cannot run a layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the native engine has no `auto` algorithm")]
    Auto,
    #[error("int8 runs dense weights in the NCHW layout only")]
    I8,
    #[error("fp16 runs dense weights only")]
    F16,
    #[error(
        "the {0} layout runs under gemm and winograd (and the depthwise stencil) with dense weights only"
    )]
    Layout(Layout),
}

/// Depthwise kernels of more taps than this run the sliding-window
/// kernel (NCHW) or the GEMM (NHWC) rather than a stencil, whose tap
/// offsets live in a fixed array: 7x7 is the largest in the zoo
/// (ConvNeXt).
pub const DEPTHWISE_MAX_TAPS: usize = 49;

/// The kernel the native engine runs `shape` with under `lowering` on a
/// CPU offering `cpu`, or why it cannot.
///
/// - int8 needs dense weights in NCHW; depthwise layers run int8's
///   depthwise kernel under every algorithm, the others the algorithm's
///   int8 kernel (a Winograd configuration's the GEMM's, with VNNI where
///   the CPU has it).
/// - fp32 and fp16 depthwise layers of at most [`DEPTHWISE_MAX_TAPS`] taps
///   with dense weights run the depthwise stencil under every algorithm
///   (im2col would build a one-row GEMM per channel and spatial pack fill
///   one lane of each vector: TVM and XNNPACK do the same), except the
///   fp16 GEMM, which keeps running them as its own products (it did when
///   it was the only fp16 kernel); sparse or larger ones run the direct
///   kernel in NCHW (the GEMM in NHWC).
/// - fp16 needs dense weights, and runs a Winograd configuration as the
///   GEMM (f16 transformed weights lose too much).
/// - Winograd computes the layers [`winograd_tile`] gives a tile, with
///   dense fp32 weights; its other layers run what the GEMM would (a
///   Winograd library hands such layers to its GEMM).
/// - NHWC runs under gemm and winograd with dense weights (and the
///   fp32 depthwise stencil, which runs under every algorithm).
/// - NCHW16c (blocks of 16 channels) runs dense fp32 layers: depthwise
///   ones the blocked stencil, ungrouped ones the blocked direct kernel,
///   under every algorithm.
pub fn kernel_class(
    shape: &ConvShape,
    lowering: Lowering,
    cpu: Cpu,
) -> Result<KernelClass, Refusal> {
    let Lowering {
        algorithm,
        format,
        layout,
        precision,
    } = lowering;
    let sparse = format.is_sparse();
    let class = |family: KernelFamily| KernelClass {
        family,
        sparse,
        precision,
        layout,
        vnni: false,
        tile: None,
    };
    if algorithm == Algorithm::Auto {
        return Err(Refusal::Auto);
    }
    let depthwise = shape.is_depthwise();
    let taps_fit = shape.kernel * shape.kernel <= DEPTHWISE_MAX_TAPS;
    if layout == Layout::Nchw16c {
        // Dense fp32 only; depthwise layers run the blocked stencil, other
        // ungrouped layers the blocked direct kernel under every algorithm
        // (with vectors along 16 output channels, a 1x1 layer's direct
        // kernel is the GEMM's product, and spatial pack's packing is the
        // layout itself).
        return match (precision, sparse) {
            (Precision::F32, false) if depthwise && taps_fit => Ok(class(KernelFamily::Depthwise)),
            (Precision::F32, false) if shape.groups == 1 => Ok(class(KernelFamily::Direct)),
            _ => Err(Refusal::Layout(layout)),
        };
    }
    let gemm_like = matches!(algorithm, Algorithm::Gemm | Algorithm::Winograd);
    if precision == Precision::I8 {
        if sparse || layout != Layout::Nchw {
            return Err(Refusal::I8);
        }
        return Ok(match algorithm {
            _ if depthwise => class(KernelFamily::Depthwise),
            Algorithm::Direct => class(KernelFamily::Direct),
            Algorithm::SpatialPack => class(KernelFamily::SpatialPack),
            _ => KernelClass {
                vnni: cpu.vnni,
                ..class(KernelFamily::Gemm)
            },
        });
    }
    // The NHWC stencil computes in fp32 only.
    let stencil = depthwise
        && !sparse
        && taps_fit
        && !(precision == Precision::F16 && gemm_like)
        && (layout == Layout::Nchw || precision == Precision::F32);
    if layout != Layout::Nchw && !stencil && (!gemm_like || sparse) {
        return Err(Refusal::Layout(layout));
    }
    if precision == Precision::F16 && sparse {
        return Err(Refusal::F16);
    }
    if stencil {
        return Ok(class(KernelFamily::Depthwise));
    }
    let family = match algorithm {
        // Sparse and large depthwise layers run direct in NCHW.
        _ if depthwise && layout == Layout::Nchw && precision == Precision::F32 => {
            KernelFamily::Direct
        }
        _ if depthwise && gemm_like => KernelFamily::DepthwiseGemm,
        _ if depthwise => KernelFamily::Direct,
        Algorithm::Winograd => {
            let tile = winograd_tile(
                shape.kernel,
                shape.stride,
                shape.groups,
                shape.in_channels,
                [shape.out_h, shape.out_w],
            );
            match tile {
                Some(tile) if !sparse && precision == Precision::F32 => {
                    return Ok(KernelClass {
                        tile: Some(tile),
                        ..class(KernelFamily::Winograd)
                    });
                }
                _ => KernelFamily::Gemm,
            }
        }
        Algorithm::Gemm => KernelFamily::Gemm,
        Algorithm::Direct => KernelFamily::Direct,
        Algorithm::SpatialPack => KernelFamily::SpatialPack,
        Algorithm::Auto => unreachable!("refused above"),
    };
    Ok(class(family))
}

/// The output tile a Winograd layer computes: F(4x4, 3x3) transforms 6x6
/// input tiles (36 products per tile and channel pair, against the direct
/// sum's 144), F(2x2, 3x3) 4x4 ones (16 against 36). The larger tile does
/// fewer multiplications per pixel, the smaller has 4x as many tiles on a
/// map, so the products' GEMMs have enough columns on small maps, and
/// transformed weights half the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WinogradTile {
    F4x4,
    F2x2,
}

impl WinogradTile {
    /// Output pixels along a tile's side.
    pub fn side(self) -> usize {
        match self {
            WinogradTile::F4x4 => 4,
            WinogradTile::F2x2 => 2,
        }
    }

    /// Point-wise products per tile and channel pair, (side + 2)².
    pub fn points(self) -> usize {
        (self.side() + 2).pow(2)
    }

    /// Output tiles on an `out_hw` map, partial tiles at the edges counting
    /// whole.
    pub fn tiles(self, out_hw: [usize; 2]) -> usize {
        out_hw[0].div_ceil(self.side()) * out_hw[1].div_ceil(self.side())
    }

    /// The multiplications the layer does: its products, one per point,
    /// output tile and pair of input and output channels (a 2x2 map is one
    /// F(4x4) tile, 36 against the direct sum's 36).
    pub fn macs(self, in_channels: usize, out_channels: usize, out_hw: [usize; 2]) -> f64 {
        (self.tiles(out_hw) * self.points() * in_channels * out_channels) as f64
    }

    /// The tile a Winograd configuration computes an `out_hw` map with:
    /// F(4x4, 3x3) with [`WINOGRAD_MIN_TILES`] tiles or more, else F(2x2,
    /// 3x3) with as many of its tiles, else none (the GEMM).
    pub fn for_map(out_hw: [usize; 2]) -> Option<WinogradTile> {
        [WinogradTile::F4x4, WinogradTile::F2x2]
            .into_iter()
            .find(|t| t.tiles(out_hw) >= WINOGRAD_MIN_TILES)
    }
}

/// Output tiles below which a Winograd configuration of the engine does
/// not compute a 3x3 stride-1 layer with a tile size. The products read the
/// transformed weights (points x out x in values: 4x the layer's for
/// F(4x4), 16/9 for F(2x2)) once per pass, and a pass's GEMMs have one
/// column per tile: with the 4 F(4x4) tiles of an 8x8 or 7x7 map, or the
/// one of a 4x4 map, they do about one FMA per value loaded and the layer
/// is bound by memory. Measured on the project's Xeon (AVX-512, 2
/// threads, `bench_engine -- 11 layers` and single layers): F(4x4) took
/// 1.1-1.9x less time than the untuned GEMM on 32x32, 28x28, 16x16 and
/// 14x14 maps (64-256 channels), as long on 512 channels at 7x7, and
/// 1.1-1.5x longer at 8x8 (256 channels) and 1.8-2x longer at 4x4 (512). A
/// 16x16 or 14x14 map has 16 F(4x4) tiles, an 8x8 or 7x7 map 16 F(2x2)
/// ones.
pub const WINOGRAD_MIN_TILES: usize = 16;

/// Input channels below which a Winograd configuration runs a 3x3
/// stride-1 layer as the GEMM: the products reduce over one value per
/// input channel, while the transforms cost the same per channel whatever
/// the products save. A CIFAR-10 stem (3 -> 64 on 32x32) took 90-103 µs
/// as Winograd and 39 µs as the GEMM inside ResNet-18 (per-step times of
/// 200 runs, same machine, 5 December 2026), and the network ran 2.6%
/// faster without it (faster in 4 of 6 alternations). 8 is the fewest the
/// calibration's Winograd grid draws.
pub const WINOGRAD_MIN_CHANNELS: usize = 8;

/// The tile a Winograd configuration computes a convolution with, given
/// its kernel, stride, groups, input channels and output size: a 3x3,
/// stride-1, one-group layer of at least [`WINOGRAD_MIN_CHANNELS`] input
/// channels whose map has tiles enough ([`WinogradTile::for_map`]). Every
/// other layer of such a configuration (`None`) runs the kernel the gemm
/// would. [`kernel_class`] decides with it.
pub fn winograd_tile(
    kernel: usize,
    stride: usize,
    groups: usize,
    in_channels: usize,
    out_hw: [usize; 2],
) -> Option<WinogradTile> {
    let computes = kernel == 3 && stride == 1 && groups == 1;
    if !computes || in_channels < WINOGRAD_MIN_CHANNELS {
        return None;
    }
    WinogradTile::for_map(out_hw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowering(algorithm: Algorithm, format: Format, precision: Precision) -> Lowering {
        Lowering {
            algorithm,
            format,
            layout: Layout::Nchw,
            precision,
        }
    }

    #[test]
    fn each_layer_kind_gets_its_kernel() {
        use KernelFamily::*;
        let regular = ConvShape::new(64, 64, 3, 1, 1, 1, 28, 28);
        let small = ConvShape::new(64, 64, 3, 1, 1, 1, 4, 4);
        let dw = ConvShape::new(32, 32, 3, 1, 1, 32, 28, 28);
        let cpu = Cpu { vnni: true };
        let family = |s: &ConvShape, l: Lowering| kernel_class(s, l, cpu).map(|c| c.family);
        let f32_ = |a| lowering(a, Format::Dense, Precision::F32);
        let w = kernel_class(&regular, f32_(Algorithm::Winograd), cpu).unwrap();
        assert_eq!((w.family, w.tile), (Winograd, Some(WinogradTile::F4x4)));
        assert_eq!(family(&small, f32_(Algorithm::Winograd)), Ok(Gemm));
        for a in [Algorithm::Direct, Algorithm::Gemm, Algorithm::SpatialPack] {
            assert_eq!(family(&dw, f32_(a)), Ok(Depthwise));
            assert_eq!(
                family(&dw, lowering(a, Format::Dense, Precision::I8)),
                Ok(Depthwise)
            );
            assert_eq!(
                family(&dw, lowering(a, Format::Csr, Precision::F32)),
                Ok(Direct)
            );
        }
        let f16 = |a| lowering(a, Format::Dense, Precision::F16);
        assert_eq!(family(&dw, f16(Algorithm::Gemm)), Ok(DepthwiseGemm));
        assert_eq!(family(&dw, f16(Algorithm::Direct)), Ok(Depthwise));
        assert_eq!(family(&regular, f16(Algorithm::Winograd)), Ok(Gemm));
        let int8 = kernel_class(
            &regular,
            lowering(Algorithm::Winograd, Format::Dense, Precision::I8),
            cpu,
        )
        .unwrap();
        assert_eq!((int8.family, int8.vnni), (Gemm, true));
        assert_eq!(
            family(
                &regular,
                lowering(Algorithm::Gemm, Format::Csr, Precision::I8)
            ),
            Err(Refusal::I8)
        );
        let nhwc = |a, f| Lowering {
            layout: Layout::Nhwc,
            ..lowering(a, f, Precision::F32)
        };
        assert_eq!(
            family(&regular, nhwc(Algorithm::Direct, Format::Dense)),
            Err(Refusal::Layout(Layout::Nhwc))
        );
        assert_eq!(
            family(&dw, nhwc(Algorithm::Direct, Format::Dense)),
            Ok(Depthwise)
        );
        assert_eq!(
            family(&regular, nhwc(Algorithm::Gemm, Format::Csr)),
            Err(Refusal::Layout(Layout::Nhwc))
        );
        let blocked = |a, f, p| Lowering {
            layout: Layout::Nchw16c,
            ..lowering(a, f, p)
        };
        for a in [Algorithm::Direct, Algorithm::Gemm, Algorithm::Winograd] {
            let f32_ = blocked(a, Format::Dense, Precision::F32);
            assert_eq!(family(&regular, f32_), Ok(Direct));
            assert_eq!(family(&dw, f32_), Ok(Depthwise));
            for (f, p) in [
                (Format::Csr, Precision::F32),
                (Format::Dense, Precision::F16),
            ] {
                let refused = Err(Refusal::Layout(Layout::Nchw16c));
                assert_eq!(family(&regular, blocked(a, f, p)), refused);
            }
        }
        let big_dw = ConvShape::new(32, 32, 9, 1, 4, 32, 28, 28);
        assert_eq!(family(&big_dw, f32_(Algorithm::Gemm)), Ok(Direct));
        assert_eq!(
            family(&big_dw, nhwc(Algorithm::Gemm, Format::Dense)),
            Ok(DepthwiseGemm)
        );
    }
}
