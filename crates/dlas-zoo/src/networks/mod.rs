//! The study's networks, each a function from nothing to a [`Graph`].
//!
//! CIFAR-10 definitions follow the PyTorch CIFAR code the study trained
//! (3x3 stems, no stem max-pool); ImageNet definitions follow torchvision,
//! and the compiler study's modern architectures (ConvNeXt-T, DeiT-Tiny,
//! ViT-S/16, Swin-T) follow timm. Each network's parameter count is tested against
//! the published one, and the modern ones' MACs against their published
//! figures. The block-repeat models ([`blocks`]) have no published
//! counts; theirs are tested to grow linearly with depth.

pub mod blocks;
mod cifar;
mod imagenet;
mod modern;

use crate::ir::Graph;
use dlas_core::Dataset;

/// A network of the zoo and where its definition comes from.
pub struct Network {
    pub name: &'static str,
    pub dataset: Dataset,
    pub build: fn() -> Graph,
    /// The published parameter count of the reference definition; `None`
    /// for the zoo's own block-repeat models.
    pub published_params: Option<usize>,
    /// Where the definition and the count come from.
    pub reference: &'static str,
}

/// The DLAS study's eight networks, in the study's order.
pub fn catalogue() -> &'static [Network] {
    &[
        Network {
            name: "resnet18",
            dataset: Dataset::Cifar10,
            build: cifar::resnet18,
            published_params: Some(11_173_962),
            reference: "kuangliu/pytorch-cifar models/resnet.py ResNet18()",
        },
        Network {
            name: "mobilenetv1",
            dataset: Dataset::Cifar10,
            build: cifar::mobilenet_v1,
            published_params: Some(3_217_226),
            reference: "kuangliu/pytorch-cifar models/mobilenet.py MobileNet()",
        },
        Network {
            name: "mobilenetv2",
            dataset: Dataset::Cifar10,
            build: cifar::mobilenet_v2,
            published_params: Some(2_296_922),
            reference: "kuangliu/pytorch-cifar models/mobilenetv2.py MobileNetV2()",
        },
        Network {
            name: "vgg16",
            dataset: Dataset::Cifar10,
            build: cifar::vgg16,
            published_params: Some(14_728_266),
            reference: "kuangliu/pytorch-cifar models/vgg.py VGG('VGG16')",
        },
        Network {
            name: "resnet50",
            dataset: Dataset::Imagenet,
            build: imagenet::resnet50,
            published_params: Some(25_557_032),
            reference: "torchvision.models.resnet50 (ResNet50_Weights.IMAGENET1K_V1: num_params 25557032)",
        },
        Network {
            name: "mobilenetv2",
            dataset: Dataset::Imagenet,
            build: imagenet::mobilenet_v2,
            published_params: Some(3_504_872),
            reference: "torchvision.models.mobilenet_v2 (MobileNet_V2_Weights.IMAGENET1K_V1: num_params 3504872)",
        },
        Network {
            name: "densenet161",
            dataset: Dataset::Imagenet,
            build: imagenet::densenet161,
            published_params: Some(28_681_000),
            reference: "torchvision.models.densenet161 (DenseNet161_Weights.IMAGENET1K_V1: num_params 28681000)",
        },
        Network {
            name: "efficientnet_b0",
            dataset: Dataset::Imagenet,
            build: imagenet::efficientnet_b0,
            published_params: Some(5_288_548),
            reference: "torchvision.models.efficientnet_b0 (EfficientNet_B0_Weights.IMAGENET1K_V1: num_params 5288548)",
        },
    ]
}

/// The compiler study's modern architectures: a modern CNN and three
/// transformers (ImageNet).
pub fn modern() -> &'static [Network] {
    &[
        Network {
            name: "convnext_t",
            dataset: Dataset::Imagenet,
            build: modern::convnext_t,
            published_params: Some(28_589_128),
            reference: "timm convnext_tiny (torchvision ConvNeXt_Tiny_Weights.IMAGENET1K_V1: num_params 28589128, 4.46 GFLOPS)",
        },
        Network {
            name: "deit_tiny",
            dataset: Dataset::Imagenet,
            build: modern::deit_tiny,
            published_params: Some(5_717_416),
            reference: "timm deit_tiny_patch16_224 (5.7M params, 1.26 GMACs; Touvron et al. 2021)",
        },
        Network {
            name: "vit_s16",
            dataset: Dataset::Imagenet,
            build: modern::vit_s16,
            published_params: Some(22_050_664),
            reference: "timm vit_small_patch16_224 (22.05M params, 4.61 GMACs)",
        },
        Network {
            name: "swin_t",
            dataset: Dataset::Imagenet,
            build: modern::swin_t,
            published_params: Some(28_288_354),
            reference: "timm swin_tiny_patch4_window7_224 (torchvision Swin_T_Weights.IMAGENET1K_V1: num_params 28288354, 4.49 GFLOPS)",
        },
    ]
}

/// `Network` entries for `blocks::$kind::<depth>` at each depth.
macro_rules! block_models {
    ($($kind:ident ($reference:literal): $($depth:literal),+;)+) => {
        &[$($(Network {
            name: concat!("blocks-", stringify!($kind), "-", $depth),
            dataset: Dataset::Imagenet,
            build: blocks::$kind::<$depth>,
            published_params: None,
            reference: $reference,
        }),+),+]
    };
}

/// The block-repeat models at the study's depths (another depth is one
/// more literal here; see [`blocks`] for the definitions and naming).
pub fn block_models() -> &'static [Network] {
    block_models! {
        resnet ("dlas-zoo blocks: ResNet stem + N torchvision BasicBlocks (64 ch, 56x56)"): 1, 2, 4, 8, 16;
        mbv2 ("dlas-zoo blocks: MobileNetV2 stem + N inverted residuals (t 6, 24 ch, 56x56)"): 1, 2, 4, 8, 16;
        convnext ("dlas-zoo blocks: ConvNeXt stem + N ConvNeXt blocks (96 ch, 56x56)"): 1, 2, 4, 8, 16;
        transformer ("dlas-zoo blocks: DeiT-Tiny patch embedding + N encoder blocks (192 dims, 3 heads, 196 tokens)"): 1, 2, 4, 8, 16;
    }
}

/// Every network of the zoo: the DLAS study's, the modern architectures
/// and the block-repeat models.
pub fn all() -> impl Iterator<Item = &'static Network> {
    catalogue().iter().chain(modern()).chain(block_models())
}

/// Looks a network up by dataset and name; the error lists what exists.
pub fn find(dataset: Dataset, name: &str) -> anyhow::Result<&'static Network> {
    all()
        .find(|n| n.dataset == dataset && n.name == name)
        .ok_or_else(|| {
            let valid: Vec<&str> = all()
                .filter(|n| n.dataset == dataset)
                .map(|n| n.name)
                .collect();
            anyhow::anyhow!(
                "unknown {dataset} model `{name}`; valid values: {}",
                valid.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_equal_the_published_ones() {
        for net in catalogue().iter().chain(modern()) {
            let g = (net.build)();
            assert_eq!(
                Some(g.params()),
                net.published_params,
                "{} {}",
                net.dataset,
                net.name
            );
            assert_eq!(g.output().shape, [net.dataset.classes(), 1, 1]);
        }
    }

    /// fvcore's counts (what timm and torchvision publish as FLOPs) add
    /// layer norms, GELUs and softmaxes, which the zoo counts as zero; the
    /// difference stays under 1 %.
    #[test]
    fn modern_macs_match_the_published_figures() {
        for (name, published) in [
            ("convnext_t", 4.47e9),
            ("deit_tiny", 1.26e9),
            ("vit_s16", 4.61e9),
            ("swin_t", 4.49e9),
        ] {
            let g = (find(Dataset::Imagenet, name).unwrap().build)();
            let ratio = g.macs() as f64 / published;
            assert!((0.99..1.01).contains(&ratio), "{name}: {} MACs", g.macs());
        }
    }

    /// One block's parameters and MACs, counted by hand from the block's
    /// definition; every depth adds exactly that much.
    #[test]
    fn block_models_grow_by_one_block_per_depth() {
        // (kind, params of one block, MACs of one block)
        let cases = [
            // Two 3x3 convs of 64 channels with their BNs, at 56x56.
            (
                "resnet",
                2 * 64 * 64 * 9 + 2 * 2 * 64,
                2 * 56 * 56 * 64 * 64 * 9,
            ),
            // 24 -> 144 (1x1), depthwise 3x3, 144 -> 24 (1x1), three BNs.
            (
                "mbv2",
                24 * 144 + 144 * 9 + 144 * 24 + 2 * (144 + 144 + 24),
                56 * 56 * (24 * 144 + 144 * 9 + 144 * 24),
            ),
            // Depthwise 7x7 with bias, norm, 96 -> 384 -> 96 with biases, layer scale.
            (
                "convnext",
                96 * 49 + 96 + 2 * 96 + 96 * 384 + 384 + 384 * 96 + 96 + 96,
                56 * 56 * (96 * 49 + 2 * 96 * 384),
            ),
            // Two norms, qkv, projection and a 4x MLP with biases; attention over 196 tokens.
            (
                "transformer",
                4 * 192 + 192 * 576 + 576 + 192 * 192 + 192 + 192 * 768 + 768 + 768 * 192 + 192,
                196 * (192 * 576 + 192 * 192 + 2 * 192 * 768) + 2 * 196 * 196 * 192,
            ),
        ];
        for (kind, block_params, block_macs) in cases {
            let build = |depth: usize| {
                (find(Dataset::Imagenet, &format!("blocks-{kind}-{depth}"))
                    .unwrap()
                    .build)()
            };
            let one = build(1);
            for depth in [2, 4, 8, 16] {
                let g = build(depth);
                assert_eq!(
                    g.params(),
                    one.params() + (depth - 1) * block_params,
                    "{kind}-{depth}"
                );
                assert_eq!(
                    g.macs(),
                    one.macs() + ((depth - 1) * block_macs) as u64,
                    "{kind}-{depth}"
                );
                assert_eq!(g.output().shape, [1000, 1, 1]);
                assert_eq!(g.name, format!("blocks-{kind}-{depth}"));
            }
        }
    }

    #[test]
    fn zoo_summary() {
        let rows: Vec<String> = catalogue()
            .iter()
            .chain(modern())
            .map(|n| {
                let g = (n.build)();
                format!(
                    "{} {}: params {} macs {} layers {} nodes {}",
                    n.dataset,
                    n.name,
                    g.params(),
                    g.macs(),
                    g.weighted_layers().count(),
                    g.nodes.len()
                )
            })
            .collect();
        insta::assert_yaml_snapshot!("zoo_summary", rows);
    }

    #[test]
    fn unknown_model_lists_valid_ones() {
        let err = find(Dataset::Cifar10, "resnet50")
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            "unknown cifar10 model `resnet50`; valid values: resnet18, mobilenetv1, mobilenetv2, vgg16"
        );
    }
}
