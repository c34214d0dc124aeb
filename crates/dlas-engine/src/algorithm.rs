//! The engine's convolution algorithms: the study's algorithm axis without
//! `auto`, which names no kernel (it means "the runtime picks"), so once a
//! configuration holds a [`KernelAlgorithm`] no later stage can meet `auto`.

use dlas_core::Algorithm;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A convolution algorithm the engine has kernels for. Its serialised and
/// displayed names are the study's (`direct`, `gemm`, `spatial-pack`,
/// `winograd`), so
/// tuning records written with `dlas_core::Algorithm` read back unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelAlgorithm {
    Direct,
    Gemm,
    SpatialPack,
    /// Winograd F(4x4, 3x3), or F(2x2, 3x3) on 7x7 and 8x8 maps; layers it
    /// cannot run fall back (see `LayerKey::of`).
    Winograd,
}

impl KernelAlgorithm {
    pub const ALL: [KernelAlgorithm; 4] = [
        KernelAlgorithm::Direct,
        KernelAlgorithm::Gemm,
        KernelAlgorithm::SpatialPack,
        KernelAlgorithm::Winograd,
    ];

    /// Whether the algorithm has NHWC kernels (for dense weights).
    pub fn has_nhwc(self) -> bool {
        matches!(self, KernelAlgorithm::Gemm | KernelAlgorithm::Winograd)
    }

    /// The study's member of the same name.
    pub fn study(self) -> Algorithm {
        match self {
            KernelAlgorithm::Direct => Algorithm::Direct,
            KernelAlgorithm::Gemm => Algorithm::Gemm,
            KernelAlgorithm::SpatialPack => Algorithm::SpatialPack,
            KernelAlgorithm::Winograd => Algorithm::Winograd,
        }
    }
}

impl fmt::Display for KernelAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.study().fmt(f)
    }
}

/// The study's `auto` algorithm given to the native engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "algorithm `auto` means the runtime picks its kernels; the native engine needs one of {}",
    KernelAlgorithm::ALL.map(|a| a.to_string()).join(", ")
)]
pub struct AutoAlgorithm;

impl TryFrom<Algorithm> for KernelAlgorithm {
    type Error = AutoAlgorithm;

    fn try_from(a: Algorithm) -> Result<KernelAlgorithm, AutoAlgorithm> {
        match a {
            Algorithm::Direct => Ok(KernelAlgorithm::Direct),
            Algorithm::Gemm => Ok(KernelAlgorithm::Gemm),
            Algorithm::SpatialPack => Ok(KernelAlgorithm::SpatialPack),
            Algorithm::Winograd => Ok(KernelAlgorithm::Winograd),
            Algorithm::Auto => Err(AutoAlgorithm),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_every_study_algorithm_but_auto() {
        for &a in Algorithm::ALL {
            match KernelAlgorithm::try_from(a) {
                Ok(k) => {
                    assert_eq!(k.study(), a);
                    // Same names in records and messages as the study's.
                    assert_eq!(k.to_string(), a.to_string());
                    assert_eq!(
                        serde_json::to_string(&k).unwrap(),
                        serde_json::to_string(&a).unwrap()
                    );
                }
                Err(e) => {
                    assert_eq!(a, Algorithm::Auto);
                    assert_eq!(
                        e.to_string(),
                        "algorithm `auto` means the runtime picks its kernels; \
                         the native engine needs one of direct, gemm, spatial-pack, winograd"
                    );
                }
            }
        }
    }
}
