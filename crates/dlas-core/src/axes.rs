//! The closed axes of the study: values every crate agrees on.
//!
//! Open axes (models, devices, compilers) are plain strings validated
//! against the study file, because users extend them without touching code.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An error for a value that is not one of an axis' members.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {axis} `{value}`; valid values: {}", valid.join(", "))]
pub struct UnknownValue {
    pub axis: &'static str,
    pub value: String,
    pub valid: Vec<&'static str>,
}

macro_rules! closed_axis {
    ($(#[$meta:meta])* $name:ident, $axis:literal, { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every member, in the study's canonical order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The axis' name as used in study files and filters.
            pub const AXIS: &'static str = $axis;

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownValue {
                        axis: $axis,
                        value: s.to_string(),
                        valid: vec![$($text),+],
                    }),
                }
            }
        }
    };
}

closed_axis!(
    /// The problem a network solves; fixes the input resolution.
    Dataset, "dataset", {
        Cifar10 => "cifar10",
        Imagenet => "imagenet",
    }
);

impl Dataset {
    /// Input tensor shape (channels, height, width) of one sample.
    pub fn input_chw(self) -> [usize; 3] {
        match self {
            Dataset::Cifar10 => [3, 32, 32],
            Dataset::Imagenet => [3, 224, 224],
        }
    }

    pub fn classes(self) -> usize {
        match self {
            Dataset::Cifar10 => 10,
            Dataset::Imagenet => 1000,
        }
    }
}

closed_axis!(
    /// The model-optimization layer of the stack.
    Compression, "compression", {
        Dense => "dense",
        WeightPruning => "weight-pruning",
        ChannelPruning => "channel-pruning",
        Fp16 => "fp16",
        Int8 => "int8",
    }
);

impl Compression {
    /// Whether the technique leaves zeros in the weights that sparse formats can skip.
    pub fn is_pruning(self) -> bool {
        matches!(
            self,
            Compression::WeightPruning | Compression::ChannelPruning
        )
    }

    /// Bytes per stored weight or activation value.
    pub fn value_bytes(self) -> f64 {
        match self {
            Compression::Fp16 => 2.0,
            Compression::Int8 => 1.0,
            _ => 4.0,
        }
    }
}

closed_axis!(
    /// How a convolution is computed.
    Algorithm, "algorithm", {
        Direct => "direct",
        Gemm => "gemm",
        SpatialPack => "spatial-pack",
        /// Winograd F(4x4, 3x3) for 3x3 stride-1 dense convolutions of 8 or
        /// more input channels on maps of 16 or more output tiles (others
        /// run as gemm): an addition of
        /// this study, not one the DLAS paper tested.
        Winograd => "winograd",
        /// The runtime picks its own kernels (tract, ONNX Runtime): no algorithm axis.
        Auto => "auto",
    }
);

impl Algorithm {
    /// The algorithms the DLAS paper compared. Its observations and "best
    /// algorithm" comparisons are checked over these, so that winograd,
    /// this reproduction's addition, is reported beside them without
    /// changing what the paper's claims are tested on.
    pub const DLAS: [Algorithm; 3] = [Algorithm::Direct, Algorithm::Gemm, Algorithm::SpatialPack];

    /// Whether the DLAS paper compared this algorithm (see [`Algorithm::DLAS`]).
    pub fn in_dlas_paper(self) -> bool {
        Algorithm::DLAS.contains(&self)
    }
}

closed_axis!(
    /// How weights are stored: dense, or a sparse format that skips zeros.
    Format, "format", {
        Dense => "dense",
        Csr => "csr",
        Bsr => "bsr",
    }
);

impl Format {
    pub fn is_sparse(self) -> bool {
        !matches!(self, Format::Dense)
    }
}

closed_axis!(
    /// Activation layout in memory.
    Layout, "layout", {
        Nchw => "nchw",
        Nhwc => "nhwc",
        /// Channels in blocks of 16, innermost: a sample is its blocks,
        /// each a map of pixels of 16 channels (the last block holds the
        /// remainder), as ONNX Runtime's and oneDNN's NCHWc. An addition
        /// of this reproduction (issue 42), not a layout the DLAS paper
        /// tested: the engine runs dense fp32 CNNs in it.
        Nchw16c => "nchw16c",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_member() {
        for c in Compression::ALL {
            assert_eq!(c.as_str().parse::<Compression>().unwrap(), *c);
        }
        for a in Algorithm::ALL {
            assert_eq!(a.as_str().parse::<Algorithm>().unwrap(), *a);
        }
    }

    #[test]
    fn unknown_value_lists_valid_ones() {
        let err = "fft".parse::<Algorithm>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown algorithm `fft`; valid values: direct, gemm, spatial-pack, winograd, auto"
        );
    }
}
