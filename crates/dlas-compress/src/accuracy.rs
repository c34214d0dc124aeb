//! Accuracy of an ONNX model on a real dataset, and the accuracies the
//! study can cite.
//!
//! The zoo's weights are seeded, not trained, so their accuracy is chance;
//! this module exists to measure trained models (e.g. torchvision's, exported
//! to ONNX) with the preprocessing their published numbers used:
//! torchvision's ImageNet evaluation transform, and kuangliu/pytorch-cifar's
//! CIFAR-10 normalisation.

use anyhow::{Context, Result, bail};
use dlas_core::{Compression, Dataset};
#[cfg(feature = "onnx")]
use dlas_onnx::Runner;
use image::imageops::FilterType;
use image::{RgbImage, imageops};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// kuangliu/pytorch-cifar's `transforms.Normalize` for CIFAR-10.
pub const CIFAR_MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
pub const CIFAR_STD: [f32; 3] = [0.2023, 0.1994, 0.2010];
/// torchvision's ImageNet normalisation.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// Bytes of one CIFAR-10 binary record: a label, then 32x32 red, green, blue planes.
const CIFAR_RECORD: usize = 1 + 3 * 32 * 32;

/// A dataset on disk: `cifar10:DIR` or `imagenet:DIR`.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetDir {
    pub dataset: Dataset,
    pub dir: PathBuf,
}

impl std::str::FromStr for DatasetDir {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<DatasetDir> {
        let Some((name, dir)) = s.split_once(':') else {
            bail!(
                "dataset `{s}` is not DATASET:DIR (e.g. cifar10:data/cifar-10-batches-bin or imagenet:data/imagenet/val)"
            );
        };
        Ok(DatasetDir {
            dataset: name.parse()?,
            dir: PathBuf::from(dir),
        })
    }
}

/// One labelled sample, decoded on demand (an ImageNet validation set does not fit in memory).
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A CIFAR-10 record's 3072 pixel bytes, CHW.
    Cifar { label: usize, pixels: Vec<u8> },
    /// An image file of class `label`.
    Image { label: usize, path: PathBuf },
}

impl Item {
    pub fn label(&self) -> usize {
        match self {
            Item::Cifar { label, .. } | Item::Image { label, .. } => *label,
        }
    }

    /// The preprocessed input, CHW float32.
    pub fn input(&self) -> Result<Vec<f32>> {
        match self {
            Item::Cifar { pixels, .. } => Ok(pixels
                .chunks(32 * 32)
                .enumerate()
                .flat_map(|(c, plane)| {
                    plane
                        .iter()
                        .map(move |p| (*p as f32 / 255.0 - CIFAR_MEAN[c]) / CIFAR_STD[c])
                })
                .collect()),
            Item::Image { path, .. } => {
                let img = image::open(path)
                    .with_context(|| format!("cannot decode image {}", path.display()))?;
                Ok(imagenet_transform(&img.to_rgb8()))
            }
        }
    }
}

impl DatasetDir {
    /// The dataset's samples in order, at most `limit`.
    pub fn items(&self, limit: Option<usize>) -> Result<Vec<Item>> {
        let mut items = match self.dataset {
            Dataset::Cifar10 => cifar10(&self.dir)?,
            Dataset::Imagenet => image_folder(&self.dir)?,
        };
        if let Some(limit) = limit {
            items.truncate(limit);
        }
        Ok(items)
    }
}

/// The CIFAR-10 test set of the binary distribution (`test_batch.bin`).
fn cifar10(dir: &Path) -> Result<Vec<Item>> {
    let file = dir.join("test_batch.bin");
    if !file.is_file() {
        bail!(
            "{} is not a CIFAR-10 binary folder: expected test_batch.bin (and data_batch_1.bin … data_batch_5.bin), records of 1 label byte and 3072 pixel bytes",
            dir.display()
        );
    }
    let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
    if bytes.is_empty() || !bytes.len().is_multiple_of(CIFAR_RECORD) {
        bail!(
            "{} has {} bytes, not a whole number of {CIFAR_RECORD}-byte CIFAR-10 records",
            file.display(),
            bytes.len()
        );
    }
    bytes
        .chunks(CIFAR_RECORD)
        .map(|r| {
            let label = r[0] as usize;
            if label >= 10 {
                bail!(
                    "{} has label {label}; CIFAR-10 labels are 0..9",
                    file.display()
                );
            }
            Ok(Item::Cifar {
                label,
                pixels: r[1..].to_vec(),
            })
        })
        .collect()
}

/// An ImageNet-style folder: one sub-folder per class, sorted names give
/// the class index (as torchvision's `ImageFolder`), JPEG or PNG files.
fn image_folder(dir: &Path) -> Result<Vec<Item>> {
    let layout = "expected one sub-folder per class (sorted names give the class index) holding .jpg, .jpeg or .png files";
    let entries = |d: &Path| -> Result<Vec<PathBuf>> {
        let mut paths = std::fs::read_dir(d)
            .with_context(|| format!("cannot read dataset folder {}", d.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<Vec<_>>>()?;
        paths.sort();
        Ok(paths)
    };
    let classes: Vec<PathBuf> = entries(dir)?.into_iter().filter(|p| p.is_dir()).collect();
    if classes.is_empty() {
        bail!("{} has no class sub-folders; {layout}", dir.display());
    }
    let mut items = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        let before = items.len();
        for path in entries(class)? {
            let ext = path
                .extension()
                .and_then(|e| e.to_str())
                .map(str::to_ascii_lowercase);
            if matches!(ext.as_deref(), Some("jpg" | "jpeg" | "png")) {
                items.push(Item::Image { label, path });
            }
        }
        if items.len() == before {
            bail!("class folder {} holds no image; {layout}", class.display());
        }
    }
    Ok(items)
}

/// torchvision's evaluation transform: resize the shorter side to 256
/// (bilinear), centre-crop 224, scale to [0, 1], normalise; CHW.
pub fn imagenet_transform(img: &RgbImage) -> Vec<f32> {
    let (w, h) = img.dimensions();
    // torchvision computes the long side as int(256 * long / short).
    let (nw, nh) = if w <= h {
        (256, (256 * h as u64 / w as u64) as u32)
    } else {
        ((256 * w as u64 / h as u64) as u32, 256)
    };
    let resized = imageops::resize(img, nw, nh, FilterType::Triangle);
    // torchvision's CenterCrop rounds the offset: int(round((size - 224) / 2)).
    let left = ((nw - 224) as f64 / 2.0).round() as u32;
    let top = ((nh - 224) as f64 / 2.0).round() as u32;
    let mut out = vec![0.0; 3 * 224 * 224];
    for y in 0..224 {
        for x in 0..224 {
            let p = resized.get_pixel(left + x, top + y);
            for c in 0..3 {
                out[(c * 224 + y as usize) * 224 + x as usize] =
                    (p[c] as f32 / 255.0 - IMAGENET_MEAN[c]) / IMAGENET_STD[c];
            }
        }
    }
    out
}

/// Top-1 and top-5 accuracy in percent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    pub samples: usize,
    pub top1: f64,
    pub top5: f64,
}

#[cfg(feature = "onnx")]
/// Runs ONNX `model` (float32 or float16 input) through tract on `items` of `dataset`.
pub fn accuracy(model: &[u8], dataset: Dataset, items: &[Item]) -> Result<Accuracy> {
    anyhow::ensure!(!items.is_empty(), "the dataset has no samples");
    let [c, h, w] = dataset.input_chw();
    let runner = Runner::new(model, Runner::input_dtype(model)?, &[1, c, h, w])
        .context("cannot load the model for this dataset's input shape")?;
    let (mut top1, mut top5) = (0, 0);
    for item in items {
        let logits = runner.run(&item.input()?)?.swap_remove(0);
        let label = item.label();
        anyhow::ensure!(
            label < logits.len(),
            "label {label} is outside the model's {} classes",
            logits.len()
        );
        let better = logits.iter().filter(|v| **v > logits[label]).count();
        top1 += usize::from(better == 0);
        top5 += usize::from(better < 5);
    }
    let pct = |n: usize| 100.0 * n as f64 / items.len() as f64;
    Ok(Accuracy {
        samples: items.len(),
        top1: pct(top1),
        top5: pct(top5),
    })
}

/// One row of `data/accuracy/published.csv`: an accuracy someone published.
/// An empty `top1`/`top5` means not recorded; numbers are never estimated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Published {
    pub model: String,
    pub dataset: Dataset,
    pub technique: Compression,
    pub level: Option<f64>,
    pub top1: Option<f64>,
    pub top5: Option<f64>,
    pub source: String,
}

/// Reads the published accuracies.
pub fn read_published(path: &Path) -> Result<Vec<Published>> {
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    reader
        .deserialize()
        .enumerate()
        .map(|(i, row)| row.with_context(|| format!("{}: row {}", path.display(), i + 2)))
        .collect()
}

/// The level the study runs for `model` and `technique`: the elbow of the
/// recorded accuracies ([`crate::choose_level`], at most `max_drop` points
/// of top-1 below dense) if any are recorded, else `study_level`.
pub fn chosen_level(
    published: &[Published],
    model: &str,
    dataset: Dataset,
    technique: Compression,
    max_drop: f64,
    study_level: f64,
) -> f64 {
    let rows = || {
        published
            .iter()
            .filter(|p| p.model == model && p.dataset == dataset)
    };
    let dense = rows()
        .find(|p| p.technique == Compression::Dense)
        .and_then(|p| p.top1);
    let recorded: Vec<(f64, f64)> = rows()
        .filter(|p| p.technique == technique)
        .filter_map(|p| Some((p.level?, p.top1?)))
        .collect();
    crate::choose_level(dense, &recorded, max_drop, study_level)
}
