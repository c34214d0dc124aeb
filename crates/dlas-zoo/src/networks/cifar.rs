//! CIFAR-10 networks as defined in the PyTorch CIFAR code the study trained:
//! 3x3 stride-1 stems, no stem max-pool, a single linear classifier.

use crate::ir::{Graph, GraphBuilder, NodeId, Op};
use dlas_core::Dataset;

/// ResNet-18: BasicBlocks [2, 2, 2, 2] over 64-128-256-512 channels.
pub fn resnet18() -> Graph {
    let mut g = GraphBuilder::new("resnet18", Dataset::Cifar10);
    let mut x = g.input();
    x = g.scoped("stem", |g| g.conv_bn(x, 64, 3, 1, 1, Some(Op::Relu)));
    for (stage, (planes, stride)) in [(64, 1), (128, 2), (256, 2), (512, 2)]
        .into_iter()
        .enumerate()
    {
        for block in 0..2 {
            let s = if block == 0 { stride } else { 1 };
            x = g.scoped(&format!("layer{}.{block}", stage + 1), |g| {
                basic_block(g, x, planes, s)
            });
        }
    }
    classifier(g, x)
}

/// The residual block of ResNet-18/34, shared with the ImageNet definitions.
pub(super) fn basic_block(g: &mut GraphBuilder, x: NodeId, planes: usize, stride: usize) -> NodeId {
    let y = g.conv_bn(x, planes, 3, stride, 1, Some(Op::Relu));
    let y = g.conv_bn(y, planes, 3, 1, 1, None);
    let shortcut = if stride != 1 || g.channels(x) != planes {
        g.scoped("shortcut", |g| g.conv_bn(x, planes, 1, stride, 1, None))
    } else {
        x
    };
    let sum = g.add(y, shortcut);
    g.relu(sum)
}

/// MobileNet (V1): depthwise-separable blocks, 32 → 1024 channels.
pub fn mobilenet_v1() -> Graph {
    let mut g = GraphBuilder::new("mobilenetv1", Dataset::Cifar10);
    let mut x = g.input();
    x = g.scoped("stem", |g| g.conv_bn(x, 32, 3, 1, 1, Some(Op::Relu)));
    let cfg: [(usize, usize); 13] = [
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
        (512, 2),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (512, 1),
        (1024, 2),
        (1024, 1),
    ];
    for (i, (out, stride)) in cfg.into_iter().enumerate() {
        x = g.scoped(&format!("layers.{i}"), |g| {
            let c = g.channels(x);
            let y = g.conv_bn(x, c, 3, stride, c, Some(Op::Relu));
            g.conv_bn(y, out, 1, 1, 1, Some(Op::Relu))
        });
    }
    classifier(g, x)
}

/// MobileNetV2 for 32x32 inputs: stride-1 stem and second stage, ReLU activations.
pub fn mobilenet_v2() -> Graph {
    let mut g = GraphBuilder::new("mobilenetv2", Dataset::Cifar10);
    let mut x = g.input();
    x = g.scoped("stem", |g| g.conv_bn(x, 32, 3, 1, 1, Some(Op::Relu)));
    // (expansion, out channels, blocks, first stride); stage 2's stride is 1 for CIFAR-10.
    let cfg = [
        (1, 16, 1, 1),
        (6, 24, 2, 1),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    let mut index = 0;
    for (expansion, out, blocks, first_stride) in cfg {
        for b in 0..blocks {
            let stride = if b == 0 { first_stride } else { 1 };
            x = g.scoped(&format!("layers.{index}"), |g| {
                let inp = g.channels(x);
                let planes = expansion * inp;
                let y = g.conv_bn(x, planes, 1, 1, 1, Some(Op::Relu));
                let y = g.conv_bn(y, planes, 3, stride, planes, Some(Op::Relu));
                let y = g.conv_bn(y, out, 1, 1, 1, None);
                if stride != 1 {
                    return y;
                }
                let shortcut = if inp != out {
                    g.scoped("shortcut", |g| g.conv_bn(x, out, 1, 1, 1, None))
                } else {
                    x
                };
                g.add(y, shortcut)
            });
            index += 1;
        }
    }
    x = g.scoped("head", |g| g.conv_bn(x, 1280, 1, 1, 1, Some(Op::Relu)));
    classifier(g, x)
}

/// VGG-16 with batch norm after every convolution and a single 512 → 10 classifier.
pub fn vgg16() -> Graph {
    let mut g = GraphBuilder::new("vgg16", Dataset::Cifar10);
    let mut x = g.input();
    let cfg: [&[usize]; 5] = [
        &[64, 64],
        &[128, 128],
        &[256, 256, 256],
        &[512, 512, 512],
        &[512, 512, 512],
    ];
    for (stage, widths) in cfg.into_iter().enumerate() {
        x = g.scoped(&format!("features.{stage}"), |g| {
            let mut y = x;
            for &width in widths {
                y = g.conv(y, width, 3, 1, 1, 1, true);
                y = g.batch_norm(y);
                y = g.relu(y);
            }
            g.max_pool(y, 2, 2, 0)
        });
    }
    classifier(g, x)
}

/// Global average pooling, flatten, and the 10-way linear classifier.
fn classifier(mut g: GraphBuilder, x: NodeId) -> Graph {
    let x = g.global_avg_pool(x);
    let x = g.flatten(x);
    g.scoped("classifier", |g| g.linear(x, 10));
    g.finish()
}
