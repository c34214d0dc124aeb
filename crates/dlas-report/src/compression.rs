//! The compression facts the report draws: the pruning sweeps of every
//! network (Figure 3, the compression columns of Tables 2 and 5, the
//! expected speedups of Figure 7 and of the observations), one real layer
//! at every stage of compression (Figure 2), and recorded accuracies.
//!
//! The report never compresses a network: the CLI computes these rows with
//! `dlas-compress` and the zoo's pinned weights, and `reproduce` writes
//! them to `data/compression/` like the mocked results, so that they are
//! checked byte for byte and the snapshot tests read the committed files.

use anyhow::{Context, Result};
use dlas_core::{Compression, Dataset};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One network pruned at one level, as `dlas-compress` counts it.
/// Level 0 of technique `dense` is the dense network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub dataset: Dataset,
    pub model: String,
    pub technique: Compression,
    pub level: f64,
    /// Whether the study runs this level (the elbow of recorded accuracy,
    /// else the study file's level).
    pub chosen: bool,
    /// Stored parameters that are not zero.
    pub params: usize,
    /// Bytes as stored (CSR for pruned weights).
    pub bytes: u64,
    /// Multiply-accumulates of non-zero weights at batch 1.
    pub macs: u64,
}

/// The pruning sweeps of a study, with the dense network of each model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sweeps {
    pub points: Vec<SweepPoint>,
}

impl Sweeps {
    /// The dense network of `model`.
    pub fn dense(&self, dataset: Dataset, model: &str) -> Option<&SweepPoint> {
        self.points
            .iter()
            .find(|p| p.dataset == dataset && p.model == model && p.technique == Compression::Dense)
    }

    /// The level of `technique` the study runs for `model`.
    pub fn chosen(
        &self,
        dataset: Dataset,
        model: &str,
        technique: Compression,
    ) -> Option<&SweepPoint> {
        self.points.iter().find(|p| {
            p.chosen && p.dataset == dataset && p.model == model && p.technique == technique
        })
    }

    /// Every level of `technique` for `model`, in sweep order.
    pub fn levels<'a>(
        &'a self,
        dataset: Dataset,
        model: &'a str,
        technique: Compression,
    ) -> impl Iterator<Item = &'a SweepPoint> {
        self.points
            .iter()
            .filter(move |p| p.dataset == dataset && p.model == model && p.technique == technique)
    }

    /// Dense parameters over the parameters left: the compression ratio.
    pub fn compression_ratio(&self, point: &SweepPoint) -> Option<f64> {
        let dense = self.dense(point.dataset, &point.model)?;
        (point.params > 0).then(|| dense.params as f64 / point.params as f64)
    }

    /// The fraction of the dense network's MACs left.
    pub fn macs_left(&self, point: &SweepPoint) -> Option<f64> {
        let dense = self.dense(point.dataset, &point.model)?;
        (dense.macs > 0).then(|| point.macs as f64 / dense.macs as f64)
    }

    /// Dense MACs over the MACs left at the chosen level: the speedup a
    /// reader would expect from pruning.
    pub fn expected_speedup(
        &self,
        dataset: Dataset,
        model: &str,
        technique: Compression,
    ) -> Option<f64> {
        let point = self.chosen(dataset, model, technique)?;
        let left = self.macs_left(point)?;
        (left > 0.0).then(|| 1.0 / left)
    }

    /// The CSV the CLI writes and the report reads.
    pub fn to_csv(&self) -> Result<Vec<u8>> {
        let mut writer = csv::Writer::from_writer(Vec::new());
        for p in &self.points {
            writer.serialize(CsvPoint::from(p))?;
        }
        Ok(writer.into_inner()?)
    }

    /// Reads a sweep CSV; a malformed row names the file and line.
    pub fn read(path: &Path) -> Result<Sweeps> {
        let mut reader = csv::Reader::from_path(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let points = reader
            .deserialize::<CsvPoint>()
            .enumerate()
            .map(|(i, row)| {
                let row = row.with_context(|| format!("{}: line {}", path.display(), i + 2))?;
                Ok(SweepPoint {
                    dataset: row.dataset,
                    model: row.model,
                    technique: row.technique,
                    level: row.level.parse().with_context(|| {
                        format!(
                            "{}: line {}: level `{}` is not a number",
                            path.display(),
                            i + 2,
                            row.level
                        )
                    })?,
                    chosen: row.chosen,
                    params: row.params,
                    bytes: row.bytes,
                    macs: row.macs,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Sweeps { points })
    }
}

/// A sweep row as written: the level in the plan's canonical text (0.3, not
/// 0.30000000000000004), so files agree byte for byte.
#[derive(Serialize, Deserialize)]
struct CsvPoint {
    dataset: Dataset,
    model: String,
    technique: Compression,
    level: String,
    chosen: bool,
    params: usize,
    bytes: u64,
    macs: u64,
}

impl From<&SweepPoint> for CsvPoint {
    fn from(p: &SweepPoint) -> CsvPoint {
        CsvPoint {
            dataset: p.dataset,
            model: p.model.clone(),
            technique: p.technique,
            level: dlas_core::plan::format_level(p.level),
            chosen: p.chosen,
            params: p.params,
            bytes: p.bytes,
            macs: p.macs,
        }
    }
}

/// A slice of one real weight tensor at every stage of Figure 2: the first
/// `rows` output channels by the first `columns` weights of each (input
/// channel by kernel position), as a matrix in row-major order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerSlice {
    pub dataset: Dataset,
    pub model: String,
    /// The zoo's node name of the layer.
    pub layer: String,
    /// The layer's whole weight shape (out, in, kh, kw).
    pub shape: [usize; 4],
    pub rows: usize,
    pub columns: usize,
    pub weight_pruning_level: f64,
    pub channel_pruning_level: f64,
    pub dense: Vec<f32>,
    pub weight_pruned: Vec<f32>,
    pub channel_pruned: Vec<f32>,
    /// Int8 codes (-127..=127) under per-output-channel symmetric scales.
    pub int8: Vec<i8>,
}

/// One line of the layer CSV.
#[derive(Serialize, Deserialize)]
struct SliceCell {
    dataset: Dataset,
    model: String,
    layer: String,
    shape: String,
    weight_pruning_level: String,
    channel_pruning_level: String,
    row: usize,
    column: usize,
    dense: f32,
    weight_pruned: f32,
    channel_pruned: f32,
    int8: i8,
}

impl LayerSlice {
    /// The CSV the CLI writes: one line per cell, in row-major order.
    pub fn to_csv(&self) -> Result<Vec<u8>> {
        let mut writer = csv::Writer::from_writer(Vec::new());
        let shape = self.shape.map(|d| d.to_string()).join("x");
        for i in 0..self.rows * self.columns {
            writer.serialize(SliceCell {
                dataset: self.dataset,
                model: self.model.clone(),
                layer: self.layer.clone(),
                shape: shape.clone(),
                weight_pruning_level: dlas_core::plan::format_level(self.weight_pruning_level),
                channel_pruning_level: dlas_core::plan::format_level(self.channel_pruning_level),
                row: i / self.columns,
                column: i % self.columns,
                dense: self.dense[i],
                weight_pruned: self.weight_pruned[i],
                channel_pruned: self.channel_pruned[i],
                int8: self.int8[i],
            })?;
        }
        Ok(writer.into_inner()?)
    }

    /// Reads the layer CSV; cells must come in row-major order.
    pub fn read(path: &Path) -> Result<LayerSlice> {
        let mut reader = csv::Reader::from_path(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let cells: Vec<SliceCell> = reader
            .deserialize()
            .enumerate()
            .map(|(i, row)| row.with_context(|| format!("{}: line {}", path.display(), i + 2)))
            .collect::<Result<_>>()?;
        let first = cells
            .first()
            .with_context(|| format!("{}: no cells", path.display()))?;
        let columns = cells.iter().map(|c| c.column + 1).max().unwrap_or(0);
        let rows = cells.len() / columns.max(1);
        for (i, cell) in cells.iter().enumerate() {
            anyhow::ensure!(
                (cell.row, cell.column) == (i / columns, i % columns),
                "{}: line {}: cell ({}, {}) is out of row-major order",
                path.display(),
                i + 2,
                cell.row,
                cell.column
            );
        }
        let dims: Vec<usize> = first
            .shape
            .split('x')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| {
                format!("{}: shape `{}` is not AxBxCxD", path.display(), first.shape)
            })?;
        let shape: [usize; 4] = dims.try_into().map_err(|_| {
            anyhow::anyhow!("{}: shape `{}` is not AxBxCxD", path.display(), first.shape)
        })?;
        let level = |text: &str, field: &str| {
            text.parse::<f64>()
                .with_context(|| format!("{}: {field} `{text}` is not a number", path.display()))
        };
        Ok(LayerSlice {
            dataset: first.dataset,
            model: first.model.clone(),
            layer: first.layer.clone(),
            shape,
            rows,
            columns,
            weight_pruning_level: level(&first.weight_pruning_level, "weight_pruning_level")?,
            channel_pruning_level: level(&first.channel_pruning_level, "channel_pruning_level")?,
            dense: cells.iter().map(|c| c.dense).collect(),
            weight_pruned: cells.iter().map(|c| c.weight_pruned).collect(),
            channel_pruned: cells.iter().map(|c| c.channel_pruned).collect(),
            int8: cells.iter().map(|c| c.int8).collect(),
        })
    }
}

/// A recorded top-1 accuracy (from `data/accuracy/published.csv`; never estimated).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedAccuracy {
    pub dataset: Dataset,
    pub model: String,
    pub technique: Compression,
    /// The pruning level, for the pruning techniques.
    pub level: Option<f64>,
    pub top1: f64,
    pub source: String,
}

/// Where each compression fact file of a study lives, relative to the project root.
pub fn sweep_path(study: &str) -> String {
    format!("data/compression/{study}.csv")
}

/// The layer file of Figure 2.
pub fn layer_path(study: &str) -> String {
    format!("data/compression/{study}-layer.csv")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(
        technique: Compression,
        level: f64,
        chosen: bool,
        params: usize,
        macs: u64,
    ) -> SweepPoint {
        SweepPoint {
            dataset: Dataset::Cifar10,
            model: "resnet18".into(),
            technique,
            level,
            chosen,
            params,
            bytes: 4 * params as u64,
            macs,
        }
    }

    #[test]
    fn ratios_and_expected_speedup_come_from_the_dense_point() {
        let sweeps = Sweeps {
            points: vec![
                point(Compression::Dense, 0.0, true, 1000, 400),
                point(Compression::WeightPruning, 0.5, false, 500, 200),
                point(Compression::WeightPruning, 0.8, true, 250, 100),
            ],
        };
        let chosen = sweeps
            .chosen(Dataset::Cifar10, "resnet18", Compression::WeightPruning)
            .unwrap();
        assert_eq!(sweeps.compression_ratio(chosen), Some(4.0));
        assert_eq!(sweeps.macs_left(chosen), Some(0.25));
        assert_eq!(
            sweeps.expected_speedup(Dataset::Cifar10, "resnet18", Compression::WeightPruning),
            Some(4.0)
        );
        assert_eq!(
            sweeps.expected_speedup(Dataset::Cifar10, "resnet18", Compression::ChannelPruning),
            None
        );
    }

    #[test]
    fn sweep_and_layer_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let sweeps = Sweeps {
            points: vec![point(Compression::ChannelPruning, 0.3, true, 7, 9)],
        };
        let path = dir.path().join("s.csv");
        std::fs::write(&path, sweeps.to_csv().unwrap()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(",channel-pruning,0.3,true,"), "{text}");
        assert_eq!(Sweeps::read(&path).unwrap(), sweeps);

        let slice = LayerSlice {
            dataset: Dataset::Cifar10,
            model: "resnet18".into(),
            layer: "conv".into(),
            shape: [2, 1, 1, 3],
            rows: 2,
            columns: 3,
            weight_pruning_level: 0.8,
            channel_pruning_level: 0.5,
            dense: vec![0.5, -1.0, 0.25, 2.0, 0.0, -0.125],
            weight_pruned: vec![0.0, -1.0, 0.0, 2.0, 0.0, 0.0],
            channel_pruned: vec![0.0; 6],
            int8: vec![64, -127, 32, 127, 0, -8],
        };
        let path = dir.path().join("l.csv");
        std::fs::write(&path, slice.to_csv().unwrap()).unwrap();
        assert_eq!(LayerSlice::read(&path).unwrap(), slice);
    }

    #[test]
    fn a_bad_row_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.csv");
        std::fs::write(
            &path,
            "dataset,model,technique,level,chosen,params,bytes,macs\n\
             cifar10,resnet18,dense,0,true,10,40,5\n\
             cifar10,resnet18,weight-pruning,half,false,5,40,3\n",
        )
        .unwrap();
        let err = format!("{:#}", Sweeps::read(&path).unwrap_err());
        assert!(err.contains("bad.csv: line 3: level `half`"), "{err}");
    }
}
