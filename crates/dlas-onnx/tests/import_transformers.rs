//! The importer on this crate's transformer exports: `import(export(g))`
//! is `g` (every node's operator, inputs and shape, and every weight; the
//! names aside), and the native engine runs the imported graph to the zoo
//! graph's f64 reference at relative L2 < 1e-4 (the cross-check's
//! tolerance). Small graphs and the block models here; the ImageNet
//! networks in an ignored test. The standard forms (PyTorch's GELU with a
//! Div, opset 20's Gelu, opset 17's LayerNormalization) import as the same
//! operators, and a file whose attention or GELU differs in one constant is
//! refused with a one-line error naming the node.

// Helpers outside #[test] functions print too (clippy.toml lets only tests print).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use dlas_core::Dataset;
use dlas_engine::config::EngineConfig;
use dlas_engine::engine::Engine;
use dlas_onnx::{export, import, model};
use dlas_zoo::reference::relative_l2 as rel_l2;
use dlas_zoo::weights::{Weights, generate, input};
use dlas_zoo::{Attention, Graph, GraphBuilder, NodeId, reference};
use prost::Message;
use tract_onnx::pb;

const TOLERANCE: f64 = 1e-4;

/// Checks that `back` is `graph` but for the node names.
fn assert_same(back: &Graph, back_weights: &Weights, graph: &Graph, weights: &Weights) {
    let name = &graph.name;
    assert_eq!(back.nodes.len(), graph.nodes.len(), "{name}: node count");
    for (b, g) in back.nodes.iter().zip(&graph.nodes) {
        assert_eq!(
            (&b.op, &b.inputs, b.shape),
            (&g.op, &g.inputs, g.shape),
            "{name}: node {}",
            g.name
        );
    }
    assert!(back_weights.by_node == weights.by_node, "{name}: weights");
}

/// Exports `graph`, imports it back and checks it is the same graph.
fn round_trip(graph: &Graph) -> (Graph, Weights) {
    let weights = generate(graph, 3);
    let bytes = export(graph, &weights);
    let (back, back_weights) = import(&bytes, &graph.name, graph.dataset)
        .unwrap_or_else(|e| panic!("{}: {e:#}", graph.name));
    assert_same(&back, &back_weights, graph, &weights);
    (back, back_weights)
}

/// The round trip, then the engine on the imported graph against the
/// reference of the zoo's graph at `batch`.
fn runs_to_the_reference(graph: &Graph, batch: usize) {
    let (back, back_weights) = round_trip(graph);
    let x = input(graph, 4, batch);
    let want = reference::evaluate(graph, &generate(graph, 3), &x, batch);
    let config = EngineConfig {
        threads: 2,
        ..EngineConfig::default()
    };
    let engine = Engine::compile(&back, &back_weights, &config).unwrap();
    let e = rel_l2(&engine.run(&x, batch).unwrap(), &want);
    eprintln!(
        "{}: imported graph on the engine, relative L2 {e:.2e}",
        graph.name
    );
    assert!(e < TOLERANCE, "{}: relative L2 {e}", graph.name);
}

/// A pre-norm encoder block as the zoo builds them.
fn encoder_block(g: &mut GraphBuilder, x: NodeId, attention: Attention, eps: f64) -> NodeId {
    let dim = g.channels(x);
    let y = g.layer_norm(x, eps);
    let qkv = g.pointwise(y, 3 * dim, true);
    let context = g.attention(qkv, attention);
    let y = g.pointwise(context, dim, true);
    let x = g.add(x, y);
    let y = g.layer_norm(x, eps);
    let y = g.pointwise(y, 2 * dim, true);
    let y = g.gelu(y);
    let y = g.pointwise(y, dim, true);
    g.add(x, y)
}

/// A small ViT: patch embedding, class token, position embedding, global
/// attention over 17 tokens, first-token readout.
fn small_vit() -> Graph {
    let mut g = GraphBuilder::with_input("small-vit", Dataset::Imagenet, [3, 32, 32]);
    let x = g.input();
    let x = g.conv(x, 24, 8, 8, 0, 1, true);
    let x = g.class_token(x);
    let mut x = g.position_embedding(x);
    for _ in 0..2 {
        let global = Attention::global(3);
        x = encoder_block(&mut g, x, global, 1e-6);
    }
    let x = g.layer_norm(x, 1e-6);
    let x = g.first_token(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    g.finish()
}

/// A small Swin: windows with relative-position biases, windows shifted
/// on a non-square grid (8x12, windows of 4, shift 2), patch merging, and
/// a layer scale that no convolution absorbs.
fn small_swin() -> Graph {
    let mut g = GraphBuilder::with_input("small-swin", Dataset::Imagenet, [3, 32, 48]);
    let x = g.input();
    let x = g.conv(x, 16, 4, 4, 0, 1, true);
    let x = g.layer_norm(x, 1e-5);
    let x = encoder_block(&mut g, x, Attention::swin(2, 4, 0), 1e-5);
    let x = encoder_block(&mut g, x, Attention::swin(2, 4, 2), 1e-5);
    let x = g.space_to_depth(x);
    let x = g.layer_norm(x, 1e-5);
    let x = g.pointwise(x, 32, false);
    let x = encoder_block(&mut g, x, Attention::swin(4, 2, 1), 1e-5);
    let x = g.layer_norm(x, 1e-5);
    let x = g.layer_scale(x);
    let x = g.global_avg_pool(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    g.finish()
}

/// Swin's last stage: a grid that is one window, with its bias table.
fn one_window() -> Graph {
    let mut g = GraphBuilder::with_input("one-window", Dataset::Imagenet, [3, 16, 16]);
    let x = g.input();
    let x = g.conv(x, 16, 4, 4, 0, 1, true);
    let x = encoder_block(&mut g, x, Attention::swin(2, 4, 0), 1e-5);
    let x = g.global_avg_pool(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    g.finish()
}

fn zoo(name: &str) -> Graph {
    (dlas_zoo::find(Dataset::Imagenet, name).unwrap().build)()
}

#[test]
fn small_transformers_round_trip_and_run() {
    runs_to_the_reference(&small_vit(), 2);
    runs_to_the_reference(&small_swin(), 2);
    runs_to_the_reference(&one_window(), 1);
}

#[test]
fn block_models_round_trip_and_run() {
    runs_to_the_reference(&zoo("blocks-transformer-1"), 1);
    runs_to_the_reference(&zoo("blocks-convnext-1"), 1);
    for kind in ["transformer", "convnext"] {
        round_trip(&zoo(&format!("blocks-{kind}-2")));
    }
}

/// The compiler study's transformer networks at ImageNet size.
#[test]
#[ignore = "slow (the f64 reference of four ImageNet networks): cargo nextest run --release -p dlas-onnx --run-ignored all imagenet"]
fn imagenet_transformers_round_trip_and_run() {
    for name in ["convnext_t", "deit_tiny", "vit_s16", "swin_t"] {
        runs_to_the_reference(&zoo(name), 1);
    }
    for kind in ["transformer", "convnext"] {
        for depth in [4, 8, 16] {
            round_trip(&zoo(&format!("blocks-{kind}-{depth}")));
        }
    }
}

/// `graph`'s export as a message, to edit.
fn message(graph: &Graph) -> pb::ModelProto {
    model(graph, &generate(graph, 3))
}

/// Imports an edited message.
fn import_message(m: &pb::ModelProto) -> anyhow::Result<(Graph, Weights)> {
    import(&m.encode_to_vec(), "edited", Dataset::Imagenet)
}

/// The float32 initializer whose name ends with `suffix` (the first).
fn initializer<'a>(m: &'a mut pb::ModelProto, suffix: &str) -> &'a mut pb::TensorProto {
    let g = m.graph.as_mut().unwrap();
    g.initializer
        .iter_mut()
        .find(|t| t.name.ends_with(suffix))
        .unwrap_or_else(|| panic!("no initializer `*{suffix}`"))
}

fn set_f32(t: &mut pb::TensorProto, at: usize, value: f32) {
    t.raw_data[4 * at..4 * at + 4].copy_from_slice(&value.to_le_bytes());
}

fn get_f32(t: &pb::TensorProto, at: usize) -> f32 {
    f32::from_le_bytes(t.raw_data[4 * at..4 * at + 4].try_into().unwrap())
}

/// The name of the first node reading tensor `tensor`.
fn reader(m: &pb::ModelProto, tensor: &str) -> String {
    let g = m.graph.as_ref().unwrap();
    let node = g.node.iter().find(|n| n.input.iter().any(|i| i == tensor));
    node.unwrap_or_else(|| panic!("no reader of `{tensor}`"))
        .name
        .clone()
}

/// The error importing `m`, which must be one line naming node `name`
/// (an `op`).
fn refused(m: &pb::ModelProto, name: &str, op: &str) -> String {
    let err = format!("{:#}", import_message(m).unwrap_err());
    assert!(!err.contains('\n'), "{err}");
    assert!(err.starts_with(&format!("node `{name}` ({op}): ")), "{err}");
    err
}

/// `graph`'s export with the first initializer named `*suffix` changed by
/// `edit`, and the name of the node reading it.
fn perturbed(
    graph: &Graph,
    suffix: &str,
    edit: impl Fn(&mut pb::TensorProto),
) -> (pb::ModelProto, String) {
    let mut m = message(graph);
    let t = initializer(&mut m, suffix);
    edit(t);
    let name = t.name.clone();
    let node = reader(&m, &name);
    (m, node)
}

#[test]
fn a_perturbed_constant_is_refused_naming_its_node() {
    let graph = small_swin();
    // The shift mask: one pair of tokens that may attend to each other no more.
    let (m, node) = perturbed(&graph, ".mask", |t| {
        let at = (0..t.raw_data.len() / 4)
            .find(|&i| get_f32(t, i) == 0.0)
            .unwrap();
        set_f32(t, at, -100.0);
    });
    let err = refused(&m, &node, "Add");
    assert!(
        err.contains("not the mask of 4x4 windows shifted by 2 on a 8x12 grid"),
        "{err}"
    );
    // The attention scale, one float32 step off.
    let (m, node) = perturbed(&graph, ".scale", |t| {
        set_f32(t, 0, f32::from_bits(get_f32(t, 0).to_bits() + 1));
    });
    refused(&m, &node, "Mul");
    // The relative-position index, its first two entries swapped.
    let (m, node) = perturbed(&graph, ".relative_index", |t| {
        let (a, b) = t.raw_data.split_at_mut(8);
        a.swap_with_slice(&mut b[..8]);
    });
    refused(&m, &node, "Gather");
    // GELU's one half.
    let (m, node) = perturbed(&graph, ".half", |t| set_f32(t, 0, 0.25));
    refused(&m, &node, "Mul");
    // The rows rolled by 3, the columns by 2: no one shift.
    let mut m = message(&graph);
    let g = m.graph.as_mut().unwrap();
    let concats: Vec<&pb::NodeProto> = g.node.iter().filter(|n| n.op_type == "Concat").collect();
    let second = concats[1].name.clone();
    let [tail, head] = [0, 1].map(|k| {
        let slice = g
            .node
            .iter()
            .find(|n| n.output[0] == concats[0].input[k])
            .unwrap();
        (slice.input[1].clone(), slice.input[2].clone())
    });
    for bound in [tail.0, head.1] {
        let t = g.initializer.iter_mut().find(|t| t.name == bound).unwrap();
        t.raw_data = 3i64.to_le_bytes().to_vec();
    }
    let err = refused(&m, &second, "Concat");
    assert!(err.contains("rolls by 3 and 2"), "{err}");
}

#[test]
fn pytorch_gelu_opset20_gelu_and_opset17_layer_normalization_import() {
    // PyTorch divides by sqrt 2 where this crate multiplies by its inverse.
    let graph = small_vit();
    let mut m = message(&graph);
    let g = m.graph.as_mut().unwrap();
    for node in g.node.iter_mut().filter(|n| n.name.ends_with(".scaled")) {
        if node.input[1].ends_with(".inv_sqrt2") {
            node.op_type = "Div".into();
        }
    }
    for t in g
        .initializer
        .iter_mut()
        .filter(|t| t.name.ends_with(".inv_sqrt2"))
    {
        set_f32(t, 0, std::f32::consts::SQRT_2);
    }
    let (back, back_weights) = import_message(&m).unwrap();
    assert_same(&back, &back_weights, &graph, &generate(&graph, 3));

    // Opset 20's Gelu node in place of each GELU subgraph.
    let mut m = message(&graph);
    m.opset_import[0].version = 20;
    let g = m.graph.as_mut().unwrap();
    let gelus: Vec<String> = g
        .node
        .iter()
        .filter(|n| n.name.ends_with(".erf"))
        .map(|n| n.name.trim_end_matches(".erf").to_string())
        .collect();
    for gelu in &gelus {
        let first = g
            .node
            .iter()
            .position(|n| n.name == format!("{gelu}.scaled"))
            .unwrap();
        let x = g.node[first].input[0].clone();
        g.node
            .retain(|n| !n.name.starts_with(&format!("{gelu}.")) && n.name != *gelu);
        let node = pb::NodeProto {
            input: vec![x],
            output: vec![gelu.clone()],
            name: gelu.clone(),
            op_type: "Gelu".into(),
            ..Default::default()
        };
        g.node.insert(first, node);
    }
    assert_eq!(gelus.len(), 2);
    let (back, back_weights) = import_message(&m).unwrap();
    assert_same(&back, &back_weights, &graph, &generate(&graph, 3));

    // A classifier's layer norm on the pooled channels as one node.
    let mut g = GraphBuilder::with_input("pooled-norm", Dataset::Imagenet, [3, 16, 16]);
    let x = g.input();
    let x = g.conv(x, 8, 3, 2, 1, 1, true);
    let x = g.global_avg_pool(x);
    let x = g.layer_norm(x, 1e-6);
    let x = g.flatten(x);
    g.linear(x, 10);
    let graph = g.finish();
    let norm = graph.nodes[3].name.clone();
    let mut m = message(&graph);
    m.opset_import[0].version = 17;
    let g = m.graph.as_mut().unwrap();
    let first = g
        .node
        .iter()
        .position(|n| n.name.starts_with(&format!("{norm}.")))
        .unwrap();
    let x = g.node[first].input[0].clone();
    g.node
        .retain(|n| !n.name.starts_with(&format!("{norm}.")) && n.name != norm);
    let layer_norm = pb::NodeProto {
        input: vec![x, format!("{norm}.gamma"), format!("{norm}.beta")],
        output: vec![norm.clone()],
        name: norm.clone(),
        op_type: "LayerNormalization".into(),
        attribute: vec![
            pb::AttributeProto {
                name: "axis".into(),
                r#type: pb::attribute_proto::AttributeType::Int as i32,
                i: 1,
                ..Default::default()
            },
            pb::AttributeProto {
                name: "epsilon".into(),
                r#type: pb::attribute_proto::AttributeType::Float as i32,
                f: 1e-6,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    g.node.insert(first, layer_norm);
    let (back, back_weights) = import_message(&m).unwrap();
    assert_same(&back, &back_weights, &graph, &generate(&graph, 3));
}

/// PyTorch writes `x.mean((2, 3), keepdim=True)` as a ReduceMean over the
/// plane: the global average pool it computes.
#[test]
fn a_mean_over_the_plane_is_a_global_average_pool() {
    let mut g = GraphBuilder::with_input("plane-mean", Dataset::Imagenet, [3, 16, 16]);
    let x = g.input();
    let x = g.conv(x, 8, 3, 2, 1, 1, true);
    let x = g.global_avg_pool(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    let graph = g.finish();
    let mut m = message(&graph);
    let node = m
        .graph
        .as_mut()
        .unwrap()
        .node
        .iter_mut()
        .find(|n| n.op_type == "GlobalAveragePool")
        .unwrap();
    node.op_type = "ReduceMean".into();
    node.attribute = vec![pb::AttributeProto {
        name: "axes".into(),
        r#type: pb::attribute_proto::AttributeType::Ints as i32,
        ints: vec![-1, 2],
        ..Default::default()
    }];
    let (back, back_weights) = import_message(&m).unwrap();
    assert_same(&back, &back_weights, &graph, &generate(&graph, 3));
    // Over the channels and the rows it is neither a layer norm nor a pool.
    let node = &mut m.graph.as_mut().unwrap().node[1];
    node.attribute[0].ints = vec![1, 2];
    let name = node.name.clone();
    refused(&m, &name, "ReduceMean");
}
