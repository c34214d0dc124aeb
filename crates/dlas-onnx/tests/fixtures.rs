//! ONNX files written by another tool (`tests/fixtures/make_fixtures.py`,
//! the `onnx` package's helper API) in the patterns of other exporters:
//! Caffe2's opset-7/9 AlexNet and GoogLeNet, PyTorch's opset-11/13
//! exports, ShuffleNet's channel shuffle, MobileNetV3's hard activations
//! at opset 14, and an opset-17 file. Each is imported, then run on the
//! native engine (every algorithm in NCHW, GEMM in NHWC) and by the f64 reference,
//! and compared at relative L2 < 1e-4 (the cross-check's tolerance for
//! fp32 runtimes) with tract's run of the same file and with the output
//! the `onnx` package's reference evaluator gave when the script wrote it
//! (`NAME.expected`): two implementations independent of this crate.

use dlas_core::{Dataset, Layout};
use dlas_engine::algorithm::KernelAlgorithm;
use dlas_engine::config::EngineConfig;
use dlas_engine::engine::Engine;
use dlas_onnx::{Dtype, import, run_bytes};
use dlas_zoo::{Graph, reference};

const TOLERANCE: f64 = 1e-4;

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let err: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w as f64).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|&w| (w as f64).powi(2)).sum();
    (err / norm).sqrt()
}

fn read(file: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The script's input: `(37 i mod 101) / 128 - 1 / 4`, exact in float32.
fn fixture_input(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 37) % 101) as f32 / 128.0 - 0.25)
        .collect()
}

/// Imports fixture `name`, checks every evaluator against tract, and
/// returns the imported graph for checks of its operators.
fn check(name: &str) -> Graph {
    let bytes = read(&format!("{name}.onnx"));
    let (graph, weights) =
        import(&bytes, name, Dataset::Imagenet).unwrap_or_else(|e| panic!("{name}: {e:#}"));
    let [c, h, w] = graph.input_shape();
    let x = fixture_input(c * h * w);
    let tract = run_bytes(&bytes, Dtype::F32, &[1, c, h, w], &x)
        .unwrap_or_else(|e| panic!("{name} in tract: {e:#}"))
        .swap_remove(0);
    let expected: Vec<f32> = String::from_utf8(read(&format!("{name}.expected")))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let err = rel_l2(&tract, &expected);
    assert!(
        err < TOLERANCE,
        "{name}: tract vs the onnx reference {err:.2e}"
    );
    let f64s: Vec<f32> = reference::evaluate(&graph, &weights, &x, 1)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let err = rel_l2(&f64s, &tract);
    assert!(err < TOLERANCE, "{name}: reference vs tract {err:.2e}");
    // NHWC is the GEMM algorithm's alone.
    let runs = KernelAlgorithm::ALL
        .map(|a| (a, Layout::Nchw))
        .into_iter()
        .chain([(KernelAlgorithm::Gemm, Layout::Nhwc)]);
    for (algorithm, layout) in runs {
        {
            let config = EngineConfig {
                threads: 2,
                algorithm,
                layout,
                ..EngineConfig::default()
            };
            let engine = Engine::compile(&graph, &weights, &config)
                .unwrap_or_else(|e| panic!("{name} ({algorithm}, {layout:?}): {e:#}"));
            let got = engine.run(&x, 1).unwrap();
            let err = rel_l2(&got, &tract);
            assert!(
                err < TOLERANCE,
                "{name} ({algorithm}, {layout:?}): engine vs tract {err:.2e}"
            );
        }
    }
    graph
}

/// How many nodes of `kind` the imported graph has.
fn count(graph: &Graph, kind: &str) -> usize {
    graph.op_histogram().get(kind).copied().unwrap_or(0)
}

#[test]
fn caffe2_alexnet_opset7() {
    let g = check("caffe2_alexnet_opset7");
    assert_eq!(count(&g, "LRN"), 2);
    assert_eq!(count(&g, "Softmax"), 1);
    // Caffe's ceil-mode pooling, pads [0, 0, 1, 1], is one padding at the end.
    assert!(
        g.nodes
            .iter()
            .any(|n| matches!(n.op, dlas_zoo::Op::MaxPool(p) if p.end == 1))
    );
}

#[test]
fn caffe2_googlenet_opset9() {
    let g = check("caffe2_googlenet_opset9");
    assert_eq!(count(&g, "MaxPool"), 3);
    assert_eq!(count(&g, "Concat"), 1);
}

#[test]
fn pytorch_opset11() {
    let g = check("pytorch_opset11");
    // The Pad joined the depthwise convolution after it.
    assert_eq!(count(&g, "Pad"), 0);
    assert_eq!(count(&g, "Relu6"), 2);
}

#[test]
fn pytorch_opset13() {
    let g = check("pytorch_opset13");
    // An asymmetric Pad before a MaxPool stays a node of its own.
    assert_eq!(count(&g, "Pad"), 1);
}

#[test]
fn shufflenet_opset9() {
    let g = check("shufflenet_opset9");
    assert_eq!(count(&g, "ChannelShuffle"), 2);
}

#[test]
fn mobilenetv3_opset14() {
    let g = check("mobilenetv3_opset14");
    assert_eq!(count(&g, "HardSwish"), 2);
    assert_eq!(count(&g, "HardSigmoid"), 3);
}

#[test]
fn opset17() {
    let g = check("opset17");
    assert_eq!(count(&g, "Pad"), 0);
    assert_eq!(count(&g, "Softmax"), 1);
}

/// An operator the engine lacks is one line naming it and its node.
#[test]
fn unsupported_operator_is_one_line_naming_it() {
    let mut model = dlas_onnx::decode(&read("opset17.onnx")).unwrap();
    let graph = model.graph.as_mut().unwrap();
    let node = graph.node.iter_mut().find(|n| n.op_type == "LRN").unwrap();
    node.op_type = "Einsum".into();
    let name = node.name.clone();
    let err = import(
        &prost::Message::encode_to_vec(&model),
        "x",
        Dataset::Imagenet,
    )
    .unwrap_err()
    .to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(
        err.starts_with(&format!(
            "node `{name}` (Einsum): operator `Einsum` is not supported by the native engine"
        )),
        "{err}"
    );
}
