//! The transformer operators' ONNX decomposition, run by tract, against the
//! zoo's f64 reference: a small graph with every operator at batch 2 (the
//! symbolic batch through every reshape), then the modern networks and
//! the smallest block-repeat models at batch 1. Relative L2 under 1e-4,
//! the cross-check's tolerance for fp32 runtimes.

use dlas_core::Dataset;
use dlas_onnx::{ExportOptions, evaluate, export};
use dlas_zoo::reference::relative_l2 as rel_l2;
use dlas_zoo::weights::{generate, input};
use dlas_zoo::{Attention, Graph, GraphBuilder, reference};

const TOLERANCE: f64 = 1e-4;

fn check(graph: &Graph, batch: usize) {
    let weights = generate(graph, 3);
    let x = input(graph, 4, batch);
    let want = reference::evaluate(graph, &weights, &x, batch);
    let got = evaluate(graph, &weights, &ExportOptions::default(), &x, batch, false)
        .unwrap_or_else(|e| panic!("{}: {e:#}", graph.name))
        .output;
    let e = rel_l2(&got, &want);
    assert!(e < TOLERANCE, "{}: relative L2 {e}", graph.name);
}

/// Every new operator on a CIFAR-sized input: Swin's windows with and
/// without shift (two bands per axis on an 8x8 grid with windows of 4),
/// patch merging, a ConvNeXt block, and a ViT's class token, position
/// embedding and global attention on a non-square token count.
fn all_operators() -> Graph {
    let mut g = GraphBuilder::new("all_operators", Dataset::Cifar10);
    let x = g.input();
    let x = g.conv(x, 24, 4, 4, 0, 1, true);
    let x = g.layer_norm(x, 1e-5);
    let mut x = x;
    for shift in [0, 2] {
        let y = g.layer_norm(x, 1e-5);
        let qkv = g.pointwise(y, 72, true);
        let a = g.attention(qkv, Attention::swin(3, 4, shift));
        let a = g.pointwise(a, 24, true);
        x = g.add(x, a);
    }
    let x = g.space_to_depth(x);
    let x = g.layer_norm(x, 1e-5);
    let x = g.pointwise(x, 32, false);
    let y = g.conv(x, 32, 7, 1, 3, 32, true);
    let y = g.layer_norm(y, 1e-6);
    let y = g.pointwise(y, 64, true);
    let y = g.gelu(y);
    let y = g.pointwise(y, 32, true);
    let y = g.layer_scale(y);
    let x = g.add(x, y);
    let x = g.class_token(x);
    let x = g.position_embedding(x);
    let qkv = g.pointwise(x, 96, true);
    let a = g.attention(qkv, Attention::global(2));
    let x = g.add(x, a);
    let x = g.first_token(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    g.finish()
}

#[test]
fn every_operator_agrees_with_the_reference_at_batch_2() {
    check(&all_operators(), 2);
}

#[test]
fn modern_networks_agree_with_the_reference() {
    for name in ["convnext_t", "deit_tiny", "vit_s16", "swin_t"] {
        check(
            &(dlas_zoo::find(Dataset::Imagenet, name).unwrap().build)(),
            1,
        );
    }
}

#[test]
fn block_models_agree_with_the_reference() {
    for kind in ["resnet", "mbv2", "convnext", "transformer"] {
        let net = dlas_zoo::find(Dataset::Imagenet, &format!("blocks-{kind}-2")).unwrap();
        check(&(net.build)(), 1);
    }
}

#[test]
fn export_of_a_transformer_is_deterministic() {
    let g = (dlas_zoo::find(Dataset::Imagenet, "swin_t").unwrap().build)();
    let w = generate(&g, 1);
    assert_eq!(export(&g, &w), export(&g, &w));
}
