//! Whole networks against the f64 reference: fusion, batch-norm folding and
//! every operator, for every algorithm.

// Helpers outside #[test] functions print too (clippy.toml lets only tests print).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use dlas_core::{Dataset, Layout};
use dlas_engine::{
    DType, Engine, EngineConfig, FormatChoice, GemmSchedule, KernelAlgorithm, Schedule,
};
use dlas_zoo::reference;
use dlas_zoo::reference::relative_l2 as rel_l2;
use dlas_zoo::weights::{generate, input};
use dlas_zoo::{Attention, Graph, GraphBuilder, Op};

/// Errors of ~1e-7 per layer compound over ~20-50 layers and are amplified
/// by badly conditioned layers; 1e-4 still catches any wrong element.
const NETWORK_TOLERANCE: f64 = 1e-4;

fn configs() -> Vec<EngineConfig> {
    let base = EngineConfig {
        threads: 2,
        ..EngineConfig::default()
    };
    vec![
        EngineConfig {
            algorithm: KernelAlgorithm::Direct,
            ..base.clone()
        },
        EngineConfig {
            algorithm: KernelAlgorithm::Gemm,
            ..base.clone()
        },
        EngineConfig {
            algorithm: KernelAlgorithm::Gemm,
            layout: Layout::Nhwc,
            ..base.clone()
        },
        EngineConfig {
            algorithm: KernelAlgorithm::SpatialPack,
            ..base.clone()
        },
        EngineConfig {
            algorithm: KernelAlgorithm::Winograd,
            ..base.clone()
        },
        EngineConfig {
            algorithm: KernelAlgorithm::Winograd,
            layout: Layout::Nhwc,
            ..base.clone()
        },
        EngineConfig {
            algorithm: KernelAlgorithm::Direct,
            layout: Layout::Nchw16c,
            ..base.clone()
        },
        EngineConfig {
            algorithm: KernelAlgorithm::Gemm,
            layout: Layout::Nchw16c,
            ..base.clone()
        },
    ]
}

/// Checks batch 1 and batch 2 (the batch-2 input starts with the batch-1 one,
/// so one reference evaluation serves both).
fn check(graph: &Graph, configs: &[EngineConfig]) {
    let weights = generate(graph, 3);
    let x = input(graph, 3, 2);
    let want = reference::evaluate(graph, &weights, &x, 2);
    let per_sample = want.len() / 2;
    // The blocked layout runs ungrouped and depthwise layers only; no zoo
    // network has another kind (`kernel_classes` in dlas-runner checks
    // every one), the small test graphs do.
    let grouped = graph
        .nodes
        .iter()
        .any(|n| matches!(&n.op, dlas_zoo::Op::Conv(c) if c.groups > 1 && !c.is_depthwise()));
    for config in configs {
        if grouped && config.layout == Layout::Nchw16c {
            let refused = Engine::compile(graph, &weights, config).err().unwrap();
            assert!(format!("{refused:#}").contains("nchw16c"), "{refused:#}");
            continue;
        }
        let engine = Engine::compile(graph, &weights, config).unwrap();
        let mut outputs = Vec::new();
        for batch in [1, 2] {
            let in_len = x.len() / 2 * batch;
            let got = engine.run(&x[..in_len], batch).unwrap();
            let e = rel_l2(&got, &want[..per_sample * batch]);
            eprintln!(
                "{} {} {} batch {batch}: relative L2 error {e:.2e}",
                graph.name, config.algorithm, config.layout
            );
            assert!(
                e < NETWORK_TOLERANCE,
                "{} {:?} {:?} batch {batch}: error {e}",
                graph.name,
                config.algorithm,
                config.layout
            );
            outputs.push(got);
        }
        // The engine reuses activation buffers across runs, now holding
        // the batch-2 run's values: a kernel that left any output value
        // unwritten would change the result.
        let again = engine.run(&x[..x.len() / 2], 1).unwrap();
        assert_eq!(
            again, outputs[0],
            "{} {:?}: a rerun differs",
            graph.name, config.algorithm
        );
    }
}

fn cifar(name: &str) -> Graph {
    (dlas_zoo::find(Dataset::Cifar10, name).unwrap().build)()
}

#[test]
fn resnet18_cifar() {
    check(&cifar("resnet18"), &configs());
}

#[test]
fn mobilenetv1_cifar() {
    check(&cifar("mobilenetv1"), &configs());
}

#[test]
fn mobilenetv2_cifar() {
    check(&cifar("mobilenetv2"), &configs());
}

#[test]
fn vgg16_cifar() {
    check(&cifar("vgg16"), &configs());
}

/// The operators only ImageNet networks use (pre-activation batch norm,
/// concat, padded max pool, average pool, SE broadcast Mul, SiLU, Sigmoid,
/// ReLU6, strided 7x7 stem), in a graph small enough for the reference.
#[test]
fn every_operator_in_a_small_graph() {
    let mut g = GraphBuilder::new("ops", Dataset::Cifar10);
    let x = g.input();
    let stem = g.conv_bn(x, 16, 7, 2, 1, Some(Op::Relu6));
    let pooled = g.max_pool(stem, 3, 2, 1);
    // DenseNet layer: BN -> ReLU -> 1x1 -> BN -> ReLU -> 3x3, concatenated.
    let bn = g.batch_norm(pooled);
    let r = g.relu(bn);
    let b = g.conv(r, 24, 1, 1, 0, 1, false);
    let b = g.batch_norm(b);
    let b = g.relu(b);
    let b = g.conv(b, 8, 3, 1, 1, 1, false);
    let cat = g.concat(&[pooled, b]);
    let avg = g.avg_pool(cat, 2, 2);
    // MBConv with squeeze-and-excitation and a residual.
    let e = g.conv_bn(avg, 48, 1, 1, 1, Some(Op::Silu));
    let d = g.conv_bn(e, 48, 5, 1, 48, Some(Op::Silu));
    let s = g.global_avg_pool(d);
    let s = g.conv(s, 6, 1, 1, 0, 1, true);
    let s = g.unary(Op::Silu, s);
    let s = g.conv(s, 48, 1, 1, 0, 1, true);
    let s = g.unary(Op::Sigmoid, s);
    let m = g.mul(d, s);
    let p = g.conv_bn(m, 24, 1, 1, 1, None);
    let sum = g.add(p, avg);
    let grouped = g.conv_bn(sum, 24, 3, 1, 4, Some(Op::Relu));
    let gap = g.global_avg_pool(grouped);
    let f = g.flatten(gap);
    g.linear(f, 10);
    check(&g.finish(), &configs());
}

/// The operators only imported models have (LRN, an asymmetric zero pad,
/// max pooling with end padding, channel shuffle, padded average pooling, hard activations,
/// softmax per position and at the classifier), against the reference.
#[test]
fn imported_operators_in_a_small_graph() {
    let mut g = GraphBuilder::new("imported", Dataset::Cifar10);
    let x = g.input();
    let y = g.conv(x, 12, 3, 2, 1, 3, true);
    let y = g.unary(
        Op::Lrn {
            size: 5,
            alpha: 0.1,
            beta: 0.75,
            bias: 1.5,
        },
        y,
    );
    let y = g.pad(y, [0, 1, 2, 1]);
    let y = g.max_pool_with(
        y,
        dlas_zoo::Pool {
            kernel: 3,
            stride: 2,
            padding: 0,
            end: 1,
        },
    );
    let y = g.channel_shuffle(y, 3);
    let y = g.avg_pool_with(
        y,
        dlas_zoo::Pool {
            kernel: 3,
            stride: 1,
            padding: 1,
            end: 1,
        },
    );
    let y = g.unary(Op::HardSwish, y);
    let y = g.conv(y, 8, 1, 1, 0, 1, true);
    let y = g.unary(
        Op::HardSigmoid {
            alpha: 0.3,
            beta: 0.4,
        },
        y,
    );
    let y = g.unary(Op::Softmax, y);
    let y = g.global_avg_pool(y);
    let y = g.flatten(y);
    let y = g.linear(y, 10);
    g.unary(Op::Softmax, y);
    check(&g.finish(), &configs());
}

/// One ImageNet network end to end at batch 1 (gemm only, to stay cheap).
#[test]
fn mobilenetv2_imagenet_gemm() {
    let graph = (dlas_zoo::find(Dataset::Imagenet, "mobilenetv2")
        .unwrap()
        .build)();
    let weights = generate(&graph, 5);
    let x = input(&graph, 5, 1);
    let want = reference::evaluate(&graph, &weights, &x, 1);
    let engine = Engine::compile(
        &graph,
        &weights,
        &EngineConfig {
            threads: 2,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let e = rel_l2(&engine.run(&x, 1).unwrap(), &want);
    assert!(e < NETWORK_TOLERANCE, "error {e}");
}

/// The ImageNet CNNs the blocked layout is for, end to end at batch 1:
/// MobileNetV2 (expansions, depthwise layers, residual adds) and
/// EfficientNet-B0 (5x5 depthwise layers, SiLU, squeeze-and-excitation).
#[test]
fn imagenet_cnns_in_the_blocked_layout() {
    for name in ["mobilenetv2", "efficientnet_b0"] {
        let graph = imagenet(name);
        let weights = generate(&graph, 5);
        let x = input(&graph, 5, 1);
        let want = reference::evaluate(&graph, &weights, &x, 1);
        for algorithm in [KernelAlgorithm::Direct, KernelAlgorithm::Gemm] {
            let config = EngineConfig {
                threads: 2,
                algorithm,
                layout: Layout::Nchw16c,
                ..EngineConfig::default()
            };
            let engine = Engine::compile(&graph, &weights, &config).unwrap();
            let e = rel_l2(&engine.run(&x, 1).unwrap(), &want);
            assert!(e < NETWORK_TOLERANCE, "{name} {algorithm}: error {e}");
        }
    }
}

/// fp16 storage: each layer adds an error of order u = 2^-11 relative to
/// its activations (see conv_props.rs); over ResNet-18's ~20 layers these
/// add up like a random walk, sqrt(20) * 1e-3 ~ 5e-3 at worst per-layer
/// error (measured: ~1e-3), hence 5e-3 against the reference, for every
/// algorithm (and the gemm in NHWC).
///
/// Against the fp16 GEMM, the other algorithms round the same f16 weights,
/// so they differ only where a different f32 summation order moves an
/// activation across an f16 rounding boundary (one ulp, 2^-11 relative)
/// and in what those flips propagate: rounding noise independent of the
/// GEMM's own, so of the same size as the distance to the reference
/// (measured: 7e-4 to 9e-4, NHWC gemm included), hence the same 5e-3.
#[test]
fn resnet18_cifar_f16() {
    let graph = cifar("resnet18");
    let weights = generate(&graph, 3);
    let x = input(&graph, 3, 2);
    let want = reference::evaluate(&graph, &weights, &x, 2);
    let run = |algorithm, layout| {
        let config = EngineConfig {
            threads: 2,
            dtype: DType::F16,
            algorithm,
            layout,
            ..EngineConfig::default()
        };
        let engine = Engine::compile(&graph, &weights, &config).unwrap();
        engine.run(&x, 2).unwrap()
    };
    let gemm = run(KernelAlgorithm::Gemm, Layout::Nchw);
    let gemm64: Vec<f64> = gemm.iter().map(|&v| v as f64).collect();
    for (algorithm, layout) in [
        (KernelAlgorithm::Gemm, Layout::Nchw),
        (KernelAlgorithm::Gemm, Layout::Nhwc),
        (KernelAlgorithm::Direct, Layout::Nchw),
        (KernelAlgorithm::SpatialPack, Layout::Nchw),
    ] {
        let got = run(algorithm, layout);
        let e = rel_l2(&got, &want);
        let d = rel_l2(&got, &gemm64);
        eprintln!(
            "resnet18 f16 {algorithm} {layout:?}: relative L2 error {e:.2e}, from the gemm {d:.2e}"
        );
        assert!(e < 5e-3, "{algorithm} {layout:?} error {e}");
        assert!(d < 5e-3, "{algorithm} {layout:?}: {d} from the gemm");
    }
}

/// fp16 on a network with depthwise layers, which direct and spatial pack
/// run as the fp32 engine does, with the depthwise stencil (fp16 weights),
/// and the fp16 gemm as its own GEMM; same bound as ResNet-18. (Not
/// MobileNetV2: with these generated weights its fp16 output is NaN under
/// every algorithm, the GEMM that predates this test included.)
#[test]
fn mobilenetv1_cifar_f16() {
    let graph = cifar("mobilenetv1");
    let weights = generate(&graph, 3);
    let x = input(&graph, 3, 1);
    let want = reference::evaluate(&graph, &weights, &x, 1);
    for algorithm in KernelAlgorithm::ALL {
        let config = EngineConfig {
            threads: 2,
            dtype: DType::F16,
            algorithm,
            ..EngineConfig::default()
        };
        let engine = Engine::compile(&graph, &weights, &config).unwrap();
        let e = rel_l2(&engine.run(&x, 1).unwrap(), &want);
        eprintln!("mobilenetv1 f16 {algorithm}: relative L2 error {e:.2e}");
        assert!(e < 5e-3, "{algorithm} error {e}");
    }
}

/// int8 with min-max calibration on the evaluated batch itself: each
/// quantised tensor carries uniform noise of step/sqrt(12) with a step of
/// range/255, i.e. about 0.1-0.5% of a tensor's RMS given activation
/// ranges a few times their RMS; over ResNet-18's ~20 requantisations this
/// compounds to a few percent of the logits, hence 1e-1 (measured below).
///
/// Every int8 kernel accumulates exactly and requantises alike, and the
/// other steps see the same dequantised values, so direct and spatial pack
/// give the gemm's output bit for bit, batch 1 and 2.
#[test]
fn resnet18_cifar_int8() {
    let graph = cifar("resnet18");
    let weights = generate(&graph, 3);
    let x = input(&graph, 3, 2);
    let want = reference::evaluate(&graph, &weights, &x, 2);
    let quant = dlas_zoo::quant::calibrate(&graph, &weights, &x, 2);
    let run = |algorithm, batch: usize| {
        let config = EngineConfig {
            threads: 2,
            dtype: DType::I8,
            algorithm,
            quant: Some(quant.clone()),
            ..EngineConfig::default()
        };
        let engine = Engine::compile(&graph, &weights, &config).unwrap();
        engine.run(&x[..x.len() / 2 * batch], batch).unwrap()
    };
    for batch in [1, 2] {
        let gemm = run(KernelAlgorithm::Gemm, batch);
        let e = rel_l2(&gemm, &want[..want.len() / 2 * batch]);
        eprintln!("resnet18 int8 batch {batch}: relative L2 error {e:.2e}");
        assert!(e < 1e-1, "error {e}");
        for algorithm in [KernelAlgorithm::Direct, KernelAlgorithm::SpatialPack] {
            assert_eq!(run(algorithm, batch), gemm, "{algorithm} batch {batch}");
        }
    }
}

/// int8 MobileNetV2: its depthwise layers run the int8 depthwise kernel
/// under every algorithm, the rest each algorithm's own; the same bytes.
#[test]
fn mobilenetv2_cifar_int8_same_under_every_algorithm() {
    let graph = cifar("mobilenetv2");
    let weights = generate(&graph, 3);
    let x = input(&graph, 3, 1);
    let quant = dlas_zoo::quant::calibrate(&graph, &weights, &x, 1);
    let outputs: Vec<Vec<f32>> = KernelAlgorithm::ALL
        .into_iter()
        .map(|algorithm| {
            let config = EngineConfig {
                threads: 2,
                dtype: DType::I8,
                algorithm,
                quant: Some(quant.clone()),
                ..EngineConfig::default()
            };
            let engine = Engine::compile(&graph, &weights, &config).unwrap();
            engine.run(&x, 1).unwrap()
        })
        .collect();
    assert_eq!(outputs[0], outputs[1], "direct against gemm");
    assert_eq!(outputs[2], outputs[1], "spatial pack against gemm");
    assert_eq!(
        outputs[3], outputs[1],
        "winograd (int8: the gemm) against gemm"
    );
}

#[test]
fn fusion_leaves_one_step_per_conv_block() {
    let graph = cifar("resnet18");
    let engine = Engine::compile(
        &graph,
        &generate(&graph, 1),
        &EngineConfig {
            threads: 1,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    // 20 convolutions (incl. 3 shortcuts) + the classifier; BN, ReLU and Add are fused.
    assert_eq!(engine.layers().count(), 21);
}

#[test]
fn unsupported_configurations_are_explained() {
    let graph = cifar("resnet18");
    let weights = generate(&graph, 1);
    let err = |c: EngineConfig| {
        Engine::compile(&graph, &weights, &c)
            .err()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        err(EngineConfig {
            algorithm: KernelAlgorithm::Direct,
            schedule: Some(Schedule::Gemm(GemmSchedule::default())),
            ..EngineConfig::default()
        }),
        "a gemm schedule cannot drive the direct algorithm"
    );
    let e = format!(
        "{:#}",
        Engine::compile(
            &graph,
            &weights,
            &EngineConfig {
                algorithm: KernelAlgorithm::Direct,
                layout: Layout::Nhwc,
                ..EngineConfig::default()
            }
        )
        .err()
        .unwrap()
    );
    assert!(e.contains("nhwc"), "{e}");
    let e = format!(
        "{:#}",
        Engine::compile(
            &graph,
            &weights,
            &EngineConfig {
                format: FormatChoice::Bsr { rows: 3, cols: 4 },
                ..EngineConfig::default()
            }
        )
        .err()
        .unwrap()
    );
    assert!(e.contains("BSR"), "{e}");
    assert!(
        err(EngineConfig {
            threads: 0,
            ..EngineConfig::default()
        })
        .contains("threads")
    );
    // fp16 and int8 run every algorithm, with dense weights only.
    for (dtype, name) in [(DType::F16, "fp16"), (DType::I8, "int8")] {
        let sparse = EngineConfig {
            algorithm: KernelAlgorithm::Direct,
            format: FormatChoice::Csr,
            dtype,
            quant: Some(dlas_zoo::quant::calibrate(
                &graph,
                &weights,
                &input(&graph, 1, 1),
                1,
            )),
            ..EngineConfig::default()
        };
        let e = format!(
            "{:#}",
            Engine::compile(&graph, &weights, &sparse).err().unwrap()
        );
        assert!(
            e.contains(&format!("{name} is implemented for dense weights")),
            "{e}"
        );
    }
    let i8_without_quant = EngineConfig {
        dtype: DType::I8,
        ..EngineConfig::default()
    };
    assert!(err(i8_without_quant).contains("quantisation"));
}

fn imagenet(name: &str) -> Graph {
    (dlas_zoo::find(Dataset::Imagenet, name).unwrap().build)()
}

/// The block models (ConvNeXt blocks; a ViT encoder block, global
/// attention over 196 tokens) under every algorithm and both layouts,
/// batch 1 and 2: every transformer operator but the class token, first
/// token, windows and patch merging, which the full networks below add.
#[test]
fn transformer_blocks() {
    check(&imagenet("blocks-transformer-1"), &configs());
}

#[test]
fn convnext_blocks() {
    check(&imagenet("blocks-convnext-1"), &configs());
}

/// A pre-norm encoder block as the zoo builds them, on any token grid or
/// sequence.
fn encoder_block(g: &mut GraphBuilder, x: usize, attention: Attention) -> usize {
    let dim = g.channels(x);
    let y = g.layer_norm(x, 1e-6);
    let qkv = g.pointwise(y, 3 * dim, true);
    let context = g.attention(qkv, attention);
    let y = g.pointwise(context, dim, true);
    let x = g.add(x, y);
    let y = g.layer_norm(x, 1e-6);
    let y = g.pointwise(y, 2 * dim, true);
    let y = g.gelu(y);
    let y = g.pointwise(y, dim, true);
    g.add(x, y)
}

/// A small ViT: patch embedding, class token, position embedding, two
/// encoder blocks, first-token readout (what `deit_tiny` and `vit_s16`
/// are made of, at a size the reference evaluates in milliseconds).
#[test]
fn small_vit() {
    let mut g = GraphBuilder::with_input("small-vit", Dataset::Imagenet, [3, 32, 32]);
    let x = g.input();
    let x = g.conv(x, 24, 8, 8, 0, 1, true);
    let x = g.class_token(x);
    let mut x = g.position_embedding(x);
    for _ in 0..2 {
        x = encoder_block(&mut g, x, Attention::global(3));
    }
    let x = g.layer_norm(x, 1e-6);
    let x = g.first_token(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    check(&g.finish(), &configs());
}

/// A small Swin: windows with relative-position biases, shifted windows
/// (8x8 grid, 4x4 windows, shift 2: every window but one has a mask),
/// patch merging, a grid that is one window, and a layer scale that no
/// convolution absorbs.
#[test]
fn small_swin() {
    let mut g = GraphBuilder::with_input("small-swin", Dataset::Imagenet, [3, 32, 32]);
    let x = g.input();
    let x = g.conv(x, 16, 4, 4, 0, 1, true);
    let x = g.layer_norm(x, 1e-5);
    let x = encoder_block(&mut g, x, Attention::swin(2, 4, 0));
    let x = encoder_block(&mut g, x, Attention::swin(2, 4, 2));
    let x = g.space_to_depth(x);
    let x = g.layer_norm(x, 1e-5);
    let x = g.pointwise(x, 32, false);
    let x = encoder_block(&mut g, x, Attention::swin(4, 4, 0));
    let x = g.layer_norm(x, 1e-5);
    let x = g.layer_scale(x);
    let x = g.global_avg_pool(x);
    let x = g.flatten(x);
    g.linear(x, 10);
    check(&g.finish(), &configs());
}

/// The modern networks themselves, each at batch 1 against the reference
/// for every algorithm and layout. Not in the default run: the f64
/// reference alone takes 5 to 20 s per network (the engine well under one);
/// `small_vit`, `small_swin` and the block models cover every operator.
#[test]
#[ignore = "slow (the f64 reference): cargo nextest run --release -p dlas-engine --run-ignored all modern"]
fn modern_networks_imagenet() {
    for name in ["convnext_t", "deit_tiny", "vit_s16", "swin_t"] {
        let graph = imagenet(name);
        let weights = generate(&graph, 5);
        let x = input(&graph, 5, 1);
        let want = reference::evaluate(&graph, &weights, &x, 1);
        for config in configs() {
            let engine = Engine::compile(&graph, &weights, &config).unwrap();
            let e = rel_l2(&engine.run(&x, 1).unwrap(), &want);
            eprintln!(
                "{name} {:?} {:?}: relative L2 error {e:.2e}",
                config.algorithm, config.layout
            );
            assert!(
                e < NETWORK_TOLERANCE,
                "{name} {:?} {:?}: error {e}",
                config.algorithm,
                config.layout
            );
        }
    }
}

/// fp16 and int8 change only the convolution and linear layers: the
/// transformer steps stay f32 and run in either (their outputs stored in
/// the engine's dtype like every activation). The bounds are ResNet-18's,
/// argued below (measured: 5.5e-4 for fp16, 1.6e-2 for int8).
#[test]
fn transformer_blocks_f16_and_int8() {
    let graph = imagenet("blocks-transformer-1");
    let weights = generate(&graph, 3);
    let x = input(&graph, 3, 1);
    let want = reference::evaluate(&graph, &weights, &x, 1);
    let quant = dlas_zoo::quant::calibrate(&graph, &weights, &x, 1);
    for (dtype, bound) in [(DType::F16, 5e-3), (DType::I8, 1e-1)] {
        let config = EngineConfig {
            threads: 2,
            dtype,
            quant: Some(quant.clone()),
            ..EngineConfig::default()
        };
        let engine = Engine::compile(&graph, &weights, &config).unwrap();
        let e = rel_l2(&engine.run(&x, 1).unwrap(), &want);
        eprintln!("blocks-transformer-1 {dtype:?}: relative L2 error {e:.2e}");
        assert!(e < bound, "{dtype:?} error {e}");
    }
}
