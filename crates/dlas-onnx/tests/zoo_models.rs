//! Real published models: the ONNX model zoo's classic ImageNet networks as
//! Caffe2 exported them (opset 9, every weight also a graph input), in the
//! "light" form the `onnx` package ships for its backend tests
//! (onnx 1.23.2, `onnx/backend/test/data/light`, Apache-2.0): the original
//! graphs, with each weight made by a ConstantOfShape of one value so the
//! files stay small.
//!
//! One value per weight makes every channel equal, which would hide a
//! wrong channel order (a shuffle, a concatenation), so each test first
//! replaces those nodes by seeded random initializers of the same shapes,
//! then imports the file, runs it on the native engine and compares the
//! logits (before the final softmax) with tract's run of the same file at
//! relative L2 < 1e-4.

// Helpers outside #[test] functions print too (clippy.toml lets only tests print).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use dlas_core::Dataset;
use dlas_engine::config::EngineConfig;
use dlas_engine::engine::Engine;
use dlas_onnx::{Dtype, decode, import, run_bytes};
use prost::Message;
use tract_onnx::pb::{self, tensor_proto::DataType};

const TOLERANCE: f64 = 1e-4;

/// The light model `name` with seeded random weights.
fn model(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/zoo/light_{name}.onnx",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut model = decode(&bytes).unwrap();
    let graph = model.graph.as_mut().unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut uniform = move || {
        // xorshift64*, top 24 bits as a float in [0, 1).
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32
    };
    let shapes: std::collections::HashMap<String, Vec<i64>> = graph
        .initializer
        .iter()
        .map(|t| {
            let raw = t
                .raw_data
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap()));
            (
                t.name.clone(),
                t.int64_data.iter().copied().chain(raw).collect(),
            )
        })
        .collect();
    // Batch-norm scales and variances, which must stay positive.
    let positive: std::collections::HashSet<String> = graph
        .node
        .iter()
        .filter(|n| n.op_type == "BatchNormalization")
        .flat_map(|n| [n.input[1].clone(), n.input[4].clone()])
        .collect();
    let mut weights = Vec::new();
    graph.node.retain(|n| {
        if n.op_type != "ConstantOfShape" {
            return true;
        }
        let dims = shapes[&n.input[0]].clone();
        let count: i64 = dims.iter().product();
        // He-uniform for convolution and linear weights; batch-norm
        // scales and variances, and Caffe2's separate scales (`_w`), in
        // [0.5, 1.5), positive as a variance must be; biases and means
        // small and centred, so activations keep their scale.
        let fan_in: i64 = dims[1..].iter().product();
        let out = &n.output[0];
        let (lo, hi) = if dims.len() > 1 {
            let a = (6.0 / fan_in as f32).sqrt();
            (-a, a)
        } else if positive.contains(out) || out.contains("_w") {
            (0.5, 1.5)
        } else {
            (-0.2, 0.2)
        };
        weights.push(pb::TensorProto {
            name: n.output[0].clone(),
            dims,
            data_type: DataType::Float as i32,
            float_data: (0..count).map(|_| lo + (hi - lo) * uniform()).collect(),
            ..Default::default()
        });
        false
    });
    graph.initializer.extend(weights);
    // Compare the logits: a softmax squashes errors, into a uniform
    // output or a saturated one.
    if graph.node.last().is_some_and(|n| n.op_type == "Softmax") {
        let softmax = graph.node.pop().unwrap();
        graph.output[0].name = softmax.input[0].clone();
    }
    model.encode_to_vec()
}

fn check(name: &str) {
    let bytes = model(name);
    let (graph, weights) =
        import(&bytes, name, Dataset::Imagenet).unwrap_or_else(|e| panic!("{name}: {e:#}"));
    let [c, h, w] = graph.input_shape();
    let x: Vec<f32> = (0..c * h * w)
        .map(|i| ((i * 37) % 101) as f32 / 128.0 - 0.25)
        .collect();
    let want = run_bytes(&bytes, Dtype::F32, &[1, c, h, w], &x)
        .unwrap_or_else(|e| panic!("{name} in tract: {e:#}"))
        .swap_remove(0);
    let config = EngineConfig {
        threads: 2,
        ..EngineConfig::default()
    };
    let got = Engine::compile(&graph, &weights, &config)
        .unwrap_or_else(|e| panic!("{name}: {e:#}"))
        .run(&x, 1)
        .unwrap();
    assert_eq!(got.len(), want.len(), "{name}");
    // Logits that differ between classes (not one value repeated).
    let mean = want.iter().map(|&v| v as f64).sum::<f64>() / want.len() as f64;
    let spread =
        (want.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / want.len() as f64).sqrt();
    assert!(
        spread > 0.1 * mean.abs() && spread.is_finite(),
        "{name}: logits of mean {mean} and spread {spread}"
    );
    let err: f64 = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| (g as f64 - w as f64).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|&w| (w as f64).powi(2)).sum();
    let rel = (err / norm).sqrt();
    eprintln!("{name}: logits mean {mean:.3} spread {spread:.3}, engine vs tract {rel:.2e}");
    assert!(rel < TOLERANCE, "{name}: engine vs tract {rel:.2e}");
}

#[test]
fn bvlc_alexnet() {
    check("bvlc_alexnet");
}

#[test]
fn zfnet512() {
    check("zfnet512");
}

#[test]
fn squeezenet() {
    check("squeezenet");
}

#[test]
fn inception_v1() {
    check("inception_v1");
}

#[test]
fn inception_v2() {
    check("inception_v2");
}

#[test]
fn shufflenet() {
    check("shufflenet");
}

#[test]
fn resnet50() {
    check("resnet50");
}

#[test]
fn densenet121() {
    check("densenet121");
}

#[test]
fn vgg19() {
    check("vgg19");
}
