//! The study's networks, each a function from nothing to a [`Graph`].
//!
//! CIFAR-10 definitions follow the PyTorch CIFAR code the study trained
//! (3x3 stems, no stem max-pool); ImageNet definitions follow torchvision.
//! Each network's parameter count is tested against the published one.

mod cifar;
mod imagenet;

use crate::ir::Graph;
use dlas_core::Dataset;

/// A network of the zoo and where its definition comes from.
pub struct Network {
    pub name: &'static str,
    pub dataset: Dataset,
    pub build: fn() -> Graph,
    /// The published parameter count of the reference definition.
    pub published_params: usize,
    /// Where the definition and the count come from.
    pub reference: &'static str,
}

/// Every network of the zoo, in the study's order.
pub fn catalogue() -> &'static [Network] {
    &[
        Network {
            name: "resnet18",
            dataset: Dataset::Cifar10,
            build: cifar::resnet18,
            published_params: 11_173_962,
            reference: "kuangliu/pytorch-cifar models/resnet.py ResNet18()",
        },
        Network {
            name: "mobilenetv1",
            dataset: Dataset::Cifar10,
            build: cifar::mobilenet_v1,
            published_params: 3_217_226,
            reference: "kuangliu/pytorch-cifar models/mobilenet.py MobileNet()",
        },
        Network {
            name: "mobilenetv2",
            dataset: Dataset::Cifar10,
            build: cifar::mobilenet_v2,
            published_params: 2_296_922,
            reference: "kuangliu/pytorch-cifar models/mobilenetv2.py MobileNetV2()",
        },
        Network {
            name: "vgg16",
            dataset: Dataset::Cifar10,
            build: cifar::vgg16,
            published_params: 14_728_266,
            reference: "kuangliu/pytorch-cifar models/vgg.py VGG('VGG16')",
        },
        Network {
            name: "resnet50",
            dataset: Dataset::Imagenet,
            build: imagenet::resnet50,
            published_params: 25_557_032,
            reference: "torchvision.models.resnet50 (ResNet50_Weights.IMAGENET1K_V1: num_params 25557032)",
        },
        Network {
            name: "mobilenetv2",
            dataset: Dataset::Imagenet,
            build: imagenet::mobilenet_v2,
            published_params: 3_504_872,
            reference: "torchvision.models.mobilenet_v2 (MobileNet_V2_Weights.IMAGENET1K_V1: num_params 3504872)",
        },
        Network {
            name: "densenet161",
            dataset: Dataset::Imagenet,
            build: imagenet::densenet161,
            published_params: 28_681_000,
            reference: "torchvision.models.densenet161 (DenseNet161_Weights.IMAGENET1K_V1: num_params 28681000)",
        },
        Network {
            name: "efficientnet_b0",
            dataset: Dataset::Imagenet,
            build: imagenet::efficientnet_b0,
            published_params: 5_288_548,
            reference: "torchvision.models.efficientnet_b0 (EfficientNet_B0_Weights.IMAGENET1K_V1: num_params 5288548)",
        },
    ]
}

/// Looks a network up by dataset and name; the error lists what exists.
pub fn find(dataset: Dataset, name: &str) -> anyhow::Result<&'static Network> {
    catalogue()
        .iter()
        .find(|n| n.dataset == dataset && n.name == name)
        .ok_or_else(|| {
            let valid: Vec<&str> = catalogue()
                .iter()
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
        for net in catalogue() {
            let g = (net.build)();
            assert_eq!(
                g.params(),
                net.published_params,
                "{} {}",
                net.dataset,
                net.name
            );
            assert_eq!(g.output().shape, [net.dataset.classes(), 1, 1]);
        }
    }

    #[test]
    fn zoo_summary() {
        let rows: Vec<String> = catalogue()
            .iter()
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
