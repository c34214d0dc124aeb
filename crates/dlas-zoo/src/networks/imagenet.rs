//! ImageNet networks as defined by torchvision.

use crate::ir::{Graph, GraphBuilder, NodeId, Op};
use dlas_core::Dataset;

/// ResNet-50 (v1.5: the stride sits on the 3x3 convolution of each bottleneck).
pub fn resnet50() -> Graph {
    let mut g = GraphBuilder::new("resnet50", Dataset::Imagenet);
    let mut x = g.input();
    x = g.scoped("stem", |g| {
        let y = g.conv_bn(x, 64, 7, 2, 1, Some(Op::Relu));
        g.max_pool(y, 3, 2, 1)
    });
    for (stage, (planes, blocks, stride)) in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]
        .into_iter()
        .enumerate()
    {
        for block in 0..blocks {
            let s = if block == 0 { stride } else { 1 };
            x = g.scoped(&format!("layer{}.{block}", stage + 1), |g| {
                let out = planes * 4;
                let y = g.conv_bn(x, planes, 1, 1, 1, Some(Op::Relu));
                let y = g.conv_bn(y, planes, 3, s, 1, Some(Op::Relu));
                let y = g.conv_bn(y, out, 1, 1, 1, None);
                let shortcut = if s != 1 || g.channels(x) != out {
                    g.scoped("downsample", |g| g.conv_bn(x, out, 1, s, 1, None))
                } else {
                    x
                };
                let sum = g.add(y, shortcut);
                g.relu(sum)
            });
        }
    }
    classifier(g, x)
}

/// MobileNetV2 with ReLU6, width multiplier 1.0.
pub fn mobilenet_v2() -> Graph {
    let mut g = GraphBuilder::new("mobilenetv2", Dataset::Imagenet);
    let mut x = g.input();
    x = g.scoped("features.0", |g| g.conv_bn(x, 32, 3, 2, 1, Some(Op::Relu6)));
    let settings = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    let mut index = 1;
    for (t, c, n, s) in settings {
        for i in 0..n {
            let stride = if i == 0 { s } else { 1 };
            x = g.scoped(&format!("features.{index}"), |g| {
                inverted_residual(g, x, t, c, stride)
            });
            index += 1;
        }
    }
    x = g.scoped(&format!("features.{index}"), |g| {
        g.conv_bn(x, 1280, 1, 1, 1, Some(Op::Relu6))
    });
    classifier(g, x)
}

/// MobileNetV2's inverted residual: a 1x1 expansion by `expand` (none
/// when 1), a depthwise 3x3 with `stride`, a linear 1x1 projection to
/// `out` channels, and a residual when the shapes allow it.
pub(super) fn inverted_residual(
    g: &mut GraphBuilder,
    x: NodeId,
    expand: usize,
    out: usize,
    stride: usize,
) -> NodeId {
    let inp = g.channels(x);
    let hidden = inp * expand;
    let mut y = x;
    if expand != 1 {
        y = g.conv_bn(y, hidden, 1, 1, 1, Some(Op::Relu6));
    }
    y = g.conv_bn(y, hidden, 3, stride, hidden, Some(Op::Relu6));
    y = g.conv_bn(y, out, 1, 1, 1, None);
    if stride == 1 && inp == out {
        g.add(y, x)
    } else {
        y
    }
}

/// DenseNet-161: growth rate 48, blocks (6, 12, 36, 24), 96 initial features.
pub fn densenet161() -> Graph {
    const GROWTH: usize = 48;
    const BN_SIZE: usize = 4;
    let mut g = GraphBuilder::new("densenet161", Dataset::Imagenet);
    let mut x = g.input();
    x = g.scoped("features.stem", |g| {
        let y = g.conv_bn(x, 96, 7, 2, 1, Some(Op::Relu));
        g.max_pool(y, 3, 2, 1)
    });
    let blocks = [6, 12, 36, 24];
    for (b, &layers) in blocks.iter().enumerate() {
        x = g.scoped(&format!("features.denseblock{}", b + 1), |g| {
            let mut features = vec![x];
            for l in 0..layers {
                let new = g.scoped(&format!("denselayer{}", l + 1), |g| {
                    let cat = if features.len() == 1 {
                        features[0]
                    } else {
                        g.concat(&features)
                    };
                    // Pre-activation: norm, relu, 1x1 bottleneck, norm, relu, 3x3.
                    let y = g.batch_norm(cat);
                    let y = g.relu(y);
                    let y = g.conv(y, BN_SIZE * GROWTH, 1, 1, 0, 1, false);
                    let y = g.batch_norm(y);
                    let y = g.relu(y);
                    g.conv(y, GROWTH, 3, 1, 1, 1, false)
                });
                features.push(new);
            }
            g.concat(&features)
        });
        if b + 1 < blocks.len() {
            x = g.scoped(&format!("features.transition{}", b + 1), |g| {
                let c = g.channels(x);
                let y = g.batch_norm(x);
                let y = g.relu(y);
                let y = g.conv(y, c / 2, 1, 1, 0, 1, false);
                g.avg_pool(y, 2, 2)
            });
        }
    }
    x = g.scoped("features.norm5", |g| {
        let y = g.batch_norm(x);
        g.relu(y)
    });
    classifier(g, x)
}

/// EfficientNet-B0: MBConv blocks with squeeze-and-excitation and SiLU.
pub fn efficientnet_b0() -> Graph {
    let mut g = GraphBuilder::new("efficientnet_b0", Dataset::Imagenet);
    let mut x = g.input();
    x = g.scoped("features.0", |g| g.conv_bn(x, 32, 3, 2, 1, Some(Op::Silu)));
    // (expand ratio, kernel, first stride, out channels, layers)
    let stages = [
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    ];
    for (s, (expand, kernel, first_stride, out, layers)) in stages.into_iter().enumerate() {
        for l in 0..layers {
            let stride = if l == 0 { first_stride } else { 1 };
            x = g.scoped(&format!("features.{}.{l}", s + 1), |g| {
                mbconv(g, x, expand, kernel, stride, out)
            });
        }
    }
    x = g.scoped("features.8", |g| {
        g.conv_bn(x, 1280, 1, 1, 1, Some(Op::Silu))
    });
    classifier(g, x)
}

fn mbconv(
    g: &mut GraphBuilder,
    x: NodeId,
    expand: usize,
    kernel: usize,
    stride: usize,
    out: usize,
) -> NodeId {
    let inp = g.channels(x);
    let expanded = inp * expand;
    let mut y = x;
    if expanded != inp {
        y = g.conv_bn(y, expanded, 1, 1, 1, Some(Op::Silu));
    }
    y = g.conv_bn(y, expanded, kernel, stride, expanded, Some(Op::Silu));
    y = g.scoped("se", |g| {
        let squeeze = (inp / 4).max(1);
        let s = g.global_avg_pool(y);
        let s = g.conv(s, squeeze, 1, 1, 0, 1, true);
        let s = g.unary(Op::Silu, s);
        let s = g.conv(s, expanded, 1, 1, 0, 1, true);
        let s = g.unary(Op::Sigmoid, s);
        g.mul(y, s)
    });
    y = g.conv_bn(y, out, 1, 1, 1, None);
    if stride == 1 && inp == out {
        g.add(y, x)
    } else {
        y
    }
}

/// Global average pooling, flatten, and the 1000-way linear classifier.
pub(super) fn classifier(mut g: GraphBuilder, x: NodeId) -> Graph {
    let x = g.global_avg_pool(x);
    let x = g.flatten(x);
    g.scoped("classifier", |g| g.linear(x, 1000));
    g.finish()
}
