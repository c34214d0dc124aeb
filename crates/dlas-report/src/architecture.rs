//! What a network is made of, read from the zoo's operators: the
//! compiler study compares architectures, and the device model's error is
//! reported per family. A leaf: it imports nothing of the crate.

use dlas_zoo::Graph;
use serde::Serialize;

/// What a network is made of, read from the zoo's operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Architecture {
    /// Convolutions, batch norm and element-wise operators only.
    Cnn,
    /// Convolutions with layer normalisation and no attention (ConvNeXt).
    ModernCnn,
    /// Self-attention.
    Transformer,
}

impl Architecture {
    pub fn of(graph: &Graph) -> Architecture {
        let kinds = graph.op_histogram();
        if kinds.contains_key("Attention") {
            Architecture::Transformer
        } else if kinds.contains_key("LayerNorm") {
            Architecture::ModernCnn
        } else {
            Architecture::Cnn
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Architecture::Cnn => "CNN",
            Architecture::ModernCnn => "modern CNN",
            Architecture::Transformer => "transformer",
        }
    }
}
