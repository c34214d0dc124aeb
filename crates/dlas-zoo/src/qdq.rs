//! Int8 quantisation in QDQ form (uint8 activations, symmetric int8
//! weights per output channel), as an ONNX file expresses it and as
//! compression produces it.
//!
//! Plain data in the zoo, beside the engine's own [`crate::quant`] types, so
//! compression can compute these numbers without the ONNX exporter (and its
//! tract dependency) and the exporter can write them.

/// Static int8 quantisation in QDQ form, indexed by node id like [`Weights`](crate::weights::Weights).
///
/// The weights are already quantised (the numerics are the caller's, so the
/// ONNX file and a native engine use the same integers).
#[derive(Debug, Clone, PartialEq)]
pub struct Qdq {
    /// The uint8 quantisation of a node's output, for every node a conv or
    /// linear layer reads (node 0 is the network input).
    pub activations: Vec<Option<ActivationQuant>>,
    /// Per-output-channel symmetric int8 weights of conv and linear nodes.
    pub weights: Vec<Option<WeightQuant>>,
}

/// Asymmetric per-tensor quantisation: `x ~ scale * (q - zero_point)`, `q` in 0..=255.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActivationQuant {
    pub scale: f32,
    pub zero_point: u8,
}

/// Symmetric per-output-channel quantisation: `w ~ scales[o] * values`, zero point 0.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightQuant {
    /// Same layout as the float weight (row-major, output channel first).
    pub values: Vec<i8>,
    pub scales: Vec<f32>,
}
