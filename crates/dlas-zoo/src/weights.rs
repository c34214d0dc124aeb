//! Deterministic weights: every tensor is drawn from its own ChaCha stream,
//! seeded from (root seed, network, node name, tensor role), so weights do
//! not depend on generation order or on the platform.
//!
//! The distributions are the usual initialisations (He-normal convolutions,
//! PyTorch's uniform linear layers, timm's normal(0, 0.02) tokens, position
//! embeddings and relative-position biases) with batch-norm statistics,
//! layer-norm affines and layer scales spread around their identity values,
//! so activations stay finite through deep networks. (ConvNeXt initialises
//! its layer scale at 1e-6, which would make every untrained block a no-op
//! and hide it from any numerical check.)

use crate::ir::{Graph, Op};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Uniform};
use sha2::{Digest, Sha256};

/// The seed of the pinned models (`data/models.lock`): every stage that
/// needs "the" weights of a zoo network uses it.
pub const MODEL_SEED: u64 = 2023;

/// The trainable tensors of one node.
#[derive(Debug, Clone, PartialEq)]
pub enum Params {
    Conv {
        /// Shape (out, in / groups, k, k), row-major.
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
    },
    BatchNorm {
        gamma: Vec<f32>,
        beta: Vec<f32>,
        mean: Vec<f32>,
        var: Vec<f32>,
    },
    Linear {
        /// Shape (out, in), row-major.
        weight: Vec<f32>,
        bias: Vec<f32>,
    },
    LayerNorm {
        gamma: Vec<f32>,
        beta: Vec<f32>,
    },
    /// One learned tensor: a class token (d), a position embedding
    /// (d, h, w), a layer scale (c), or a relative-position bias table
    /// ((2 * window - 1)^2, heads), each row-major in that shape.
    Tensor(Vec<f32>),
}

impl Params {
    /// The number of learned values.
    pub fn len(&self) -> usize {
        match self {
            Params::Conv { weight, bias } => weight.len() + bias.as_ref().map_or(0, Vec::len),
            Params::BatchNorm { gamma, beta, .. } => gamma.len() + beta.len(),
            Params::Linear { weight, bias } => weight.len() + bias.len(),
            Params::LayerNorm { gamma, beta } => gamma.len() + beta.len(),
            Params::Tensor(values) => values.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Weights of a whole graph, indexed by node id.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    pub seed: u64,
    pub by_node: Vec<Option<Params>>,
}

/// An independent random stream for one tensor.
pub fn stream(seed: u64, network: &str, tensor: &str) -> ChaCha8Rng {
    let digest = Sha256::digest(format!("{seed}/{network}/{tensor}").as_bytes());
    let mut key = [0u8; 32];
    key.copy_from_slice(&digest);
    ChaCha8Rng::from_seed(key)
}

fn draw(rng: &mut ChaCha8Rng, n: usize, dist: impl Distribution<f32>) -> Vec<f32> {
    (0..n).map(|_| dist.sample(rng)).collect()
}

fn uniform(low: f32, high: f32) -> Uniform<f32> {
    Uniform::new(low, high).expect("low < high")
}

/// Draws every node's parameters.
pub fn generate(graph: &Graph, seed: u64) -> Weights {
    let by_node = graph
        .nodes
        .iter()
        .map(|node| {
            let rng = |role: &str| stream(seed, &graph.name, &format!("{}.{role}", node.name));
            match &node.op {
                Op::Conv(c) => {
                    let fan_in = (c.in_channels / c.groups * c.kernel * c.kernel) as f32;
                    let he = Normal::new(0.0, (2.0 / fan_in).sqrt()).expect("finite std");
                    let bound = 1.0 / fan_in.sqrt();
                    Some(Params::Conv {
                        weight: draw(&mut rng("weight"), c.weight_count(), he),
                        bias: c.bias.then(|| {
                            draw(&mut rng("bias"), c.out_channels, uniform(-bound, bound))
                        }),
                    })
                }
                Op::BatchNorm => {
                    let n = node.shape[0];
                    Some(Params::BatchNorm {
                        gamma: draw(&mut rng("gamma"), n, uniform(0.5, 1.5)),
                        beta: draw(&mut rng("beta"), n, uniform(-0.1, 0.1)),
                        mean: draw(&mut rng("mean"), n, uniform(-0.1, 0.1)),
                        var: draw(&mut rng("var"), n, uniform(0.5, 1.5)),
                    })
                }
                Op::Linear {
                    in_features,
                    out_features,
                } => {
                    let bound = 1.0 / (*in_features as f32).sqrt();
                    Some(Params::Linear {
                        weight: draw(
                            &mut rng("weight"),
                            in_features * out_features,
                            uniform(-bound, bound),
                        ),
                        bias: draw(&mut rng("bias"), *out_features, uniform(-bound, bound)),
                    })
                }
                Op::LayerNorm { .. } => {
                    let n = node.shape[0];
                    Some(Params::LayerNorm {
                        gamma: draw(&mut rng("gamma"), n, uniform(0.5, 1.5)),
                        beta: draw(&mut rng("beta"), n, uniform(-0.1, 0.1)),
                    })
                }
                Op::LayerScale => Some(Params::Tensor(draw(
                    &mut rng("gamma"),
                    node.shape[0],
                    uniform(0.5, 1.5),
                ))),
                Op::ClassToken | Op::PositionEmbedding | Op::Attention(_) if node.params() > 0 => {
                    let std = Normal::new(0.0, 0.02).expect("finite std");
                    Some(Params::Tensor(draw(&mut rng("value"), node.params(), std)))
                }
                _ => None,
            }
        })
        .collect();
    Weights { seed, by_node }
}

/// A seeded input batch in [0, 1), shaped (batch, c, h, w).
pub fn input(graph: &Graph, seed: u64, batch: usize) -> Vec<f32> {
    let n = batch * graph.input_shape().iter().product::<usize>();
    let mut rng = stream(seed, &graph.name, "input");
    (0..n).map(|_| rng.random::<f32>()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_deterministic_and_seed_dependent() {
        let g = crate::find(dlas_core::Dataset::Cifar10, "mobilenetv1").unwrap();
        let g = (g.build)();
        let a = generate(&g, 7);
        assert_eq!(a, generate(&g, 7));
        assert_ne!(a, generate(&g, 8));
        let count: usize = a.by_node.iter().flatten().map(Params::len).sum();
        assert_eq!(count, g.params());
    }
}
