//! Block-repeat models for the compiler study's block-level experiment: a
//! stem, `N` repeats of one block at constant width and resolution, and a
//! head (global average pool and a 1000-way linear layer).
//!
//! Each is named `blocks-<kind>-<depth>` (e.g. `blocks-resnet-8`), ImageNet
//! input. The stem brings the input to the resolution and width at which
//! the block first runs in its parent network, so one block costs what it
//! costs there:
//!
//! | kind          | stem                                             | block (repeated, stride 1)                          |
//! |---------------|--------------------------------------------------|-----------------------------------------------------|
//! | `resnet`      | ResNet's 7x7/2 conv, BN, ReLU, 3x3/2 max pool    | torchvision `BasicBlock`, 64 channels at 56x56      |
//! | `mbv2`        | MobileNetV2's `features.0` to `features.2`       | inverted residual, expansion 6, 24 channels at 56x56 |
//! | `convnext`    | ConvNeXt's 4x4/4 patchify conv and layer norm    | ConvNeXt block, 96 channels at 56x56                |
//! | `transformer` | DeiT-Tiny's 16x16/16 patch embedding, position embedding | pre-norm encoder block, 192 dims, 3 heads, 196 tokens |
//!
//! The transformer model keeps the 14x14 token grid and pools its mean
//! (no class token), so its head is the CNNs' head after a layer norm; the
//! ConvNeXt head also norms after pooling, as ConvNeXt's own does.
//! Parameters and MACs grow exactly linearly with depth (tested).

use super::cifar::basic_block;
use super::imagenet::{classifier, inverted_residual};
use super::modern::{VIT_EPS, convnext_block, convnext_stem, encoder_block};
use crate::ir::{Graph, GraphBuilder, Op};
use dlas_core::Dataset;

/// `N` ResNet basic blocks.
pub fn resnet<const N: usize>() -> Graph {
    let mut g = GraphBuilder::new(&format!("blocks-resnet-{N}"), Dataset::Imagenet);
    let x = g.input();
    let mut x = g.scoped("stem", |g| {
        let y = g.conv_bn(x, 64, 7, 2, 1, Some(Op::Relu));
        g.max_pool(y, 3, 2, 1)
    });
    for block in 0..N {
        x = g.scoped(&format!("blocks.{block}"), |g| basic_block(g, x, 64, 1));
    }
    classifier(g, x)
}

/// `N` MobileNetV2 inverted residuals.
pub fn mbv2<const N: usize>() -> Graph {
    let mut g = GraphBuilder::new(&format!("blocks-mbv2-{N}"), Dataset::Imagenet);
    let x = g.input();
    let mut x = g.scoped("stem", |g| {
        let y = g.conv_bn(x, 32, 3, 2, 1, Some(Op::Relu6));
        let y = inverted_residual(g, y, 1, 16, 1);
        inverted_residual(g, y, 6, 24, 2)
    });
    for block in 0..N {
        x = g.scoped(&format!("blocks.{block}"), |g| {
            inverted_residual(g, x, 6, 24, 1)
        });
    }
    classifier(g, x)
}

/// `N` ConvNeXt blocks.
pub fn convnext<const N: usize>() -> Graph {
    let mut g = GraphBuilder::new(&format!("blocks-convnext-{N}"), Dataset::Imagenet);
    let x = g.input();
    let mut x = g.scoped("stem", |g| convnext_stem(g, x, 96));
    for block in 0..N {
        x = g.scoped(&format!("blocks.{block}"), |g| convnext_block(g, x));
    }
    let x = g.global_avg_pool(x);
    g.scoped("head", |g| {
        let y = g.layer_norm(x, VIT_EPS);
        let y = g.flatten(y);
        g.linear(y, 1000)
    });
    g.finish()
}

/// `N` transformer encoder blocks.
pub fn transformer<const N: usize>() -> Graph {
    let mut g = GraphBuilder::new(&format!("blocks-transformer-{N}"), Dataset::Imagenet);
    let x = g.input();
    let mut x = g.scoped("stem", |g| {
        let y = g.conv(x, 192, 16, 16, 0, 1, true);
        g.position_embedding(y)
    });
    for block in 0..N {
        x = g.scoped(&format!("blocks.{block}"), |g| {
            encoder_block(g, x, 3, None, VIT_EPS)
        });
    }
    let x = g.scoped("head", |g| g.layer_norm(x, VIT_EPS));
    classifier(g, x)
}
