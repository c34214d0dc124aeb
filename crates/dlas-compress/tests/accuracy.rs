//! Accuracy on small generated datasets whose answers are known: a probe
//! model classifies an image by its dominant colour (red 0, green 1, blue 2).

use dlas_compress::accuracy::{
    DatasetDir, accuracy, chosen_level, imagenet_transform, read_published,
};
use dlas_core::{Compression, Dataset};
use dlas_zoo::weights::{Params, Weights};
use dlas_zoo::{Graph, GraphBuilder};
use std::path::Path;

/// Global average pool, then a linear layer whose class k < 3 reads channel
/// k and whose other classes are far below.
fn probe(dataset: Dataset) -> Vec<u8> {
    let mut b = GraphBuilder::new("probe", dataset);
    let x = b.global_avg_pool(0);
    let x = b.flatten(x);
    b.linear(x, dataset.classes());
    let g: Graph = b.finish();
    let classes = dataset.classes();
    let mut weight = vec![0.0; 3 * classes];
    let mut bias = vec![-100.0; classes];
    for k in 0..3 {
        weight[k * 3 + k] = 1.0;
        bias[k] = 0.0;
    }
    // Class 3 trails every colour class, so top-5 covers 0..=4.
    bias[3] = -50.0;
    let w = Weights {
        seed: 0,
        by_node: vec![None, None, None, Some(Params::Linear { weight, bias })],
    };
    dlas_onnx::export(&g, &w)
}

const COLOURS: [[u8; 3]; 3] = [[220, 30, 20], [25, 200, 40], [10, 30, 230]];

#[test]
fn cifar10_binary_records_with_known_labels() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = Vec::new();
    // Three correct labels and one wrong: 75% top-1, 100% top-5.
    for (label, colour) in [(0u8, 0), (1, 1), (2, 2), (1, 0)] {
        bytes.push(label);
        for value in COLOURS[colour] {
            bytes.extend(std::iter::repeat_n(value, 1024));
        }
    }
    std::fs::write(dir.path().join("test_batch.bin"), &bytes).unwrap();
    let data: DatasetDir = format!("cifar10:{}", dir.path().display()).parse().unwrap();
    let items = data.items(None).unwrap();
    let acc = accuracy(&probe(Dataset::Cifar10), Dataset::Cifar10, &items).unwrap();
    assert_eq!((acc.samples, acc.top1, acc.top5), (4, 75.0, 100.0));
    let acc = accuracy(
        &probe(Dataset::Cifar10),
        Dataset::Cifar10,
        &data.items(Some(2)).unwrap(),
    )
    .unwrap();
    assert_eq!((acc.samples, acc.top1), (2, 100.0));
}

#[test]
fn imagenet_folder_of_png_and_jpeg_files() {
    let dir = tempfile::tempdir().unwrap();
    for (k, class) in ["n01_red", "n02_green", "n03_blue"].iter().enumerate() {
        let folder = dir.path().join(class);
        std::fs::create_dir(&folder).unwrap();
        let img = image::RgbImage::from_pixel(300, 260, image::Rgb(COLOURS[k]));
        img.save(folder.join("a.png")).unwrap();
        let tall = image::RgbImage::from_pixel(240, 400, image::Rgb(COLOURS[k]));
        tall.save(folder.join("b.JPEG")).unwrap();
    }
    let data: DatasetDir = format!("imagenet:{}", dir.path().display())
        .parse()
        .unwrap();
    let items = data.items(None).unwrap();
    assert_eq!(items.len(), 6);
    let acc = accuracy(&probe(Dataset::Imagenet), Dataset::Imagenet, &items).unwrap();
    assert_eq!((acc.top1, acc.top5), (100.0, 100.0));
}

#[test]
fn the_imagenet_transform_normalises_a_uniform_image() {
    let img = image::RgbImage::from_pixel(100, 50, image::Rgb([255, 128, 0]));
    let x = imagenet_transform(&img);
    assert_eq!(x.len(), 3 * 224 * 224);
    let expect = [
        (1.0 - 0.485) / 0.229,
        (128.0 / 255.0 - 0.456) / 0.224,
        (0.0 - 0.406) / 0.225,
    ];
    for (c, e) in expect.iter().enumerate() {
        assert!(
            x[c * 224 * 224..(c + 1) * 224 * 224]
                .iter()
                .all(|v| (v - e).abs() < 1e-5)
        );
    }
}

#[test]
fn folders_in_the_wrong_layout_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x.png"), b"").unwrap();
    let shown = dir.path().display().to_string();
    let cifar: DatasetDir = format!("cifar10:{shown}").parse().unwrap();
    let e = cifar.items(None).unwrap_err().to_string();
    assert!(e.contains(&shown) && e.contains("test_batch.bin"), "{e}");
    let imagenet: DatasetDir = format!("imagenet:{shown}").parse().unwrap();
    let e = imagenet.items(None).unwrap_err().to_string();
    assert!(
        e.contains(&shown) && e.contains("one sub-folder per class"),
        "{e}"
    );
    std::fs::write(dir.path().join("test_batch.bin"), [0u8; 100]).unwrap();
    let e = cifar.items(None).unwrap_err().to_string();
    assert!(e.contains("3073-byte"), "{e}");
    assert!("cifar100:x".parse::<DatasetDir>().is_err());
    assert!(
        "imagenet"
            .parse::<DatasetDir>()
            .unwrap_err()
            .to_string()
            .contains("DATASET:DIR")
    );
}

#[test]
fn published_accuracies_and_the_chosen_level() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/accuracy/published.csv");
    let rows = read_published(&path).unwrap();
    assert_eq!(rows.len(), 7);
    let r50 = rows.iter().find(|r| r.model == "resnet50").unwrap();
    assert_eq!((r50.top1, r50.top5), (Some(76.130), Some(92.862)));
    let r18 = rows.iter().find(|r| r.model == "resnet18").unwrap();
    assert_eq!((r18.top1, r18.top5), (Some(93.02), None));
    assert!(!rows.iter().any(|r| r.model == "mobilenetv1"));
    // No pruned accuracy is recorded: the study's level stands.
    let level = chosen_level(
        &rows,
        "resnet18",
        Dataset::Cifar10,
        Compression::WeightPruning,
        1.0,
        0.8,
    );
    assert_eq!(level, 0.8);
    // With recorded levels, the elbow.
    let mut more = rows.clone();
    for (level, top1) in [(0.9, 92.5), (0.95, 90.0)] {
        let mut r = r18.clone();
        r.technique = Compression::WeightPruning;
        r.level = Some(level);
        r.top1 = Some(top1);
        more.push(r);
    }
    let level = chosen_level(
        &more,
        "resnet18",
        Dataset::Cifar10,
        Compression::WeightPruning,
        1.0,
        0.8,
    );
    assert_eq!(level, 0.9);
}
