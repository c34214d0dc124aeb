//! The compiler study's modern ImageNet architectures, as timm defines
//! them: ConvNeXt-T, DeiT-Tiny and ViT-S/16 (ViTs with a class token) and
//! Swin-T.
//!
//! Linear layers on tokens are 1x1 convolutions (see [`crate::ir`]); drop
//! path and dropout are identities at inference and do not appear.

use crate::ir::{Attention, Graph, GraphBuilder, NodeId};
use dlas_core::Dataset;

/// timm's layer-norm epsilon for ViT, DeiT and ConvNeXt.
pub(super) const VIT_EPS: f64 = 1e-6;
/// PyTorch's default, which Swin keeps.
const SWIN_EPS: f64 = 1e-5;

/// ConvNeXt-T: depths (3, 3, 9, 3), dimensions (96, 192, 384, 768).
pub fn convnext_t() -> Graph {
    let mut g = GraphBuilder::new("convnext_t", Dataset::Imagenet);
    let x = g.input();
    let mut x = g.scoped("stem", |g| convnext_stem(g, x, 96));
    for (stage, (depth, dim)) in [(3, 96), (3, 192), (9, 384), (3, 768)]
        .into_iter()
        .enumerate()
    {
        if stage > 0 {
            x = g.scoped(&format!("stages.{stage}.downsample"), |g| {
                let y = g.layer_norm(x, VIT_EPS);
                g.conv(y, dim, 2, 2, 0, 1, true)
            });
        }
        for block in 0..depth {
            x = g.scoped(&format!("stages.{stage}.blocks.{block}"), |g| {
                convnext_block(g, x)
            });
        }
    }
    // timm's head: pool, norm, classifier.
    let x = g.global_avg_pool(x);
    g.scoped("head", |g| {
        let y = g.layer_norm(x, VIT_EPS);
        let y = g.flatten(y);
        g.linear(y, 1000)
    });
    g.finish()
}

/// ConvNeXt's patchify stem: a 4x4 convolution with stride 4 and a layer norm.
pub(super) fn convnext_stem(g: &mut GraphBuilder, x: NodeId, dim: usize) -> NodeId {
    let y = g.conv(x, dim, 4, 4, 0, 1, true);
    g.layer_norm(y, VIT_EPS)
}

/// The ConvNeXt block: depthwise 7x7, norm, an inverted bottleneck of two
/// per-position linear layers around GELU, layer scale, residual.
pub(super) fn convnext_block(g: &mut GraphBuilder, x: NodeId) -> NodeId {
    let dim = g.channels(x);
    let y = g.conv(x, dim, 7, 1, 3, dim, true);
    let y = g.layer_norm(y, VIT_EPS);
    let y = g.pointwise(y, 4 * dim, true);
    let y = g.gelu(y);
    let y = g.pointwise(y, dim, true);
    let y = g.layer_scale(y);
    g.add(y, x)
}

/// DeiT-Tiny (`deit_tiny_patch16_224`): dimension 192, 3 heads.
pub fn deit_tiny() -> Graph {
    vit("deit_tiny", 192, 3)
}

/// ViT-S/16 (`vit_small_patch16_224`): dimension 384, 6 heads.
pub fn vit_s16() -> Graph {
    vit("vit_s16", 384, 6)
}

/// A ViT at 224x224: patch 16, 12 blocks, MLP ratio 4, class token,
/// learned position embedding, classification of the class token.
fn vit(name: &str, dim: usize, heads: usize) -> Graph {
    let mut g = GraphBuilder::new(name, Dataset::Imagenet);
    let x = g.input();
    let mut x = g.scoped("patch_embed", |g| g.conv(x, dim, 16, 16, 0, 1, true));
    x = g.class_token(x);
    x = g.position_embedding(x);
    for block in 0..12 {
        x = g.scoped(&format!("blocks.{block}"), |g| {
            encoder_block(g, x, heads, None, VIT_EPS)
        });
    }
    let x = g.layer_norm(x, VIT_EPS);
    let x = g.first_token(x);
    let x = g.flatten(x);
    g.scoped("head", |g| g.linear(x, 1000));
    g.finish()
}

/// A pre-norm transformer encoder block: `x + attention(norm(x))`, then
/// `x + mlp(norm(x))` with an MLP ratio of 4 and GELU. `window` and its
/// shift make it Swin's block (with a relative-position bias table).
pub(super) fn encoder_block(
    g: &mut GraphBuilder,
    x: NodeId,
    heads: usize,
    window: Option<(usize, usize)>,
    eps: f64,
) -> NodeId {
    let dim = g.channels(x);
    let attended = g.scoped("attn", |g| {
        let y = g.layer_norm(x, eps);
        let qkv = g.pointwise(y, 3 * dim, true);
        let context = g.attention(
            qkv,
            Attention {
                heads,
                window: window.map(|(size, _)| size),
                shift: window.map_or(0, |(_, shift)| shift),
                relative_bias: window.is_some(),
            },
        );
        g.pointwise(context, dim, true)
    });
    let x = g.add(x, attended);
    let mlp = g.scoped("mlp", |g| {
        let y = g.layer_norm(x, eps);
        let y = g.pointwise(y, 4 * dim, true);
        let y = g.gelu(y);
        g.pointwise(y, dim, true)
    });
    g.add(x, mlp)
}

/// Swin-T (`swin_tiny_patch4_window7_224`): patch 4, dimension 96, depths
/// (2, 2, 6, 2), heads (3, 6, 12, 24), window 7; odd blocks shift their
/// windows by 3, except in the last stage, whose 7x7 grid is one window
/// (timm and torchvision drop the shift there).
pub fn swin_t() -> Graph {
    const WINDOW: usize = 7;
    let mut g = GraphBuilder::new("swin_t", Dataset::Imagenet);
    let x = g.input();
    let mut x = g.scoped("patch_embed", |g| {
        let y = g.conv(x, 96, 4, 4, 0, 1, true);
        g.layer_norm(y, SWIN_EPS)
    });
    for (stage, (depth, heads)) in [(2, 3), (2, 6), (6, 12), (2, 24)].into_iter().enumerate() {
        if stage > 0 {
            // Patch merging: 2x2 neighbours side by side, norm, a linear
            // layer without bias halving the channels.
            x = g.scoped(&format!("layers.{stage}.downsample"), |g| {
                let dim = g.channels(x);
                let y = g.space_to_depth(x);
                let y = g.layer_norm(y, SWIN_EPS);
                g.pointwise(y, 2 * dim, false)
            });
        }
        let grid = g.shape(x)[1];
        for block in 0..depth {
            let shift = if block % 2 == 1 && grid > WINDOW {
                WINDOW / 2
            } else {
                0
            };
            x = g.scoped(&format!("layers.{stage}.blocks.{block}"), |g| {
                encoder_block(g, x, heads, Some((WINDOW.min(grid), shift)), SWIN_EPS)
            });
        }
    }
    let x = g.layer_norm(x, SWIN_EPS);
    let x = g.global_avg_pool(x);
    let x = g.flatten(x);
    g.scoped("head", |g| g.linear(x, 1000));
    g.finish()
}
