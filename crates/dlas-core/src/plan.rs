//! Plan expansion: the cartesian product of a study's axes minus its rules.

use crate::axes::{Algorithm, Compression, Dataset, Format, Layout};
use crate::filter::Filter;
use crate::study::Study;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The compiler id of the study's own engine (`dlas-engine`), the one
/// compiler with an algorithm axis and a tuned axis.
pub const NATIVE: &str = "native";

/// The compilers the host runs besides the native engine (`dlas-backends`
/// loads them; its test checks that the two lists agree). Core names them
/// so that a build without the runtimes (`dlas-cli` without its `host`
/// feature) still plans and reports studies that list them.
pub const HOST_COMPILERS: &[&str] = &[
    "tract-plain",
    "tract-opt",
    "ort-noopt",
    "ort-opt",
    "openvino-f32",
    "openvino-native",
    TVM,
];

/// Apache TVM's compiler id: the one host compiler with an algorithm axis
/// and a tuned axis of its own.
pub const TVM: &str = "tvm";

/// One planned measurement: a value on every axis of the stack.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Combination {
    pub dataset: Dataset,
    pub model: String,
    pub compression: Compression,
    /// Fraction pruned (0 for techniques that do not prune).
    pub level: f64,
    pub algorithm: Algorithm,
    pub format: Format,
    pub layout: Layout,
    pub compiler: String,
    pub tuned: bool,
    pub device: String,
    pub batch: usize,
}

impl Combination {
    /// The dense network `model` of `dataset` on the host machine under
    /// `compiler`: batch 1, NCHW, untuned, the compiler's own algorithm. The
    /// starting point of the checks and benchmarks that run one network
    /// outside a plan; change the other axes with struct update syntax.
    pub fn host(dataset: Dataset, model: &str, compiler: &str) -> Combination {
        Combination {
            dataset,
            model: model.into(),
            compression: Compression::Dense,
            level: 0.0,
            algorithm: Algorithm::Auto,
            format: Format::Dense,
            layout: Layout::Nchw,
            compiler: compiler.into(),
            tuned: false,
            device: "host".into(),
            batch: 1,
        }
    }

    /// Whether the native engine runs this combination.
    pub fn is_native(&self) -> bool {
        self.compiler == NATIVE
    }

    /// The value on `axis`, as written in study files and filters.
    pub fn get(&self, axis: &str) -> Option<String> {
        Some(match axis {
            "dataset" => self.dataset.to_string(),
            "model" => self.model.clone(),
            "compression" => self.compression.to_string(),
            "level" => format_level(self.level),
            "algorithm" => self.algorithm.to_string(),
            "format" => self.format.to_string(),
            "layout" => self.layout.to_string(),
            "compiler" => self.compiler.clone(),
            "tuned" => self.tuned.to_string(),
            "device" => self.device.clone(),
            "batch" => self.batch.to_string(),
            _ => return None,
        })
    }

    /// The canonical text form; the id is its hash, so it must never change
    /// for an existing combination.
    pub fn canonical(&self) -> String {
        crate::study::AXES
            .iter()
            .map(|axis| format!("{axis}={}", self.get(axis).unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(";")
    }

    /// A stable id: the first 16 hex digits of the canonical form's sha256.
    pub fn id(&self) -> String {
        let digest = Sha256::digest(self.canonical().as_bytes());
        hex::encode(&digest[..8])
    }
}

/// Levels are printed with at most four decimals and no trailing zeros, so
/// 0.8 is `0.8` in every id, whatever arithmetic produced it.
pub fn format_level(level: f64) -> String {
    let text = format!("{level:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text.is_empty() {
        "0".into()
    } else {
        text.into()
    }
}

/// `--shard i/n`: the i-th of n disjoint parts of a plan (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(text: &str) -> Result<Shard, String> {
        let parsed = text
            .split_once('/')
            .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
        match parsed {
            Some((index, count)) if count > 0 && index < count => Ok(Shard { index, count }),
            _ => Err(format!(
                "`{text}` is not a shard; write i/n with 0 <= i < n, e.g. 0/4"
            )),
        }
    }
}

/// Why a user's ONNX model is planned dense only: dlas compresses the zoo's
/// networks (their graph and weights are its own), while a user's file is
/// timed as given, so a compressed row for it would be a dense measurement
/// under another label.
pub const ONNX_AS_GIVEN: &str =
    "a user's ONNX model is measured as given (dense); dlas compresses zoo networks only";

/// The expanded plan and the bookkeeping of what the rules removed.
#[derive(Debug, Clone)]
pub struct Plan {
    pub combinations: Vec<Combination>,
    /// Rule name → combinations it excluded (first matching rule counts).
    pub excluded: Vec<(String, String, usize)>,
    /// Combinations before any rule.
    pub total_before_rules: usize,
}

impl Plan {
    /// Expands a study in its canonical order: dataset, model, compression,
    /// compiler, tuned, algorithm, format, layout, device, batch.
    pub fn expand(study: &Study) -> Plan {
        let mut excluded: Vec<(String, String, usize)> = study
            .rules
            .iter()
            .map(|r| (r.name.clone(), r.reason.clone(), 0))
            .collect();
        let mut combinations = Vec::new();
        let mut total = 0;
        let mut above_max_batch = 0;
        let mut onnx_compressed = 0;
        for (dataset, model) in study.models() {
            let user_model = study
                .onnx_models
                .iter()
                .any(|m| m.dataset == dataset && m.id.get_ref() == &model);
            for compression in &study.compressions {
                for compiler in &study.compilers {
                    let kernels: Vec<(Algorithm, Format, Layout)> = if compiler.algorithms {
                        let mut v = Vec::new();
                        for &a in &study.algorithms {
                            for &f in &study.formats {
                                for &l in &study.layouts {
                                    v.push((a, f, l));
                                }
                            }
                        }
                        v
                    } else {
                        vec![(Algorithm::Auto, Format::Dense, Layout::Nchw)]
                    };
                    for &tuned in &compiler.tuned {
                        for &(algorithm, format, layout) in &kernels {
                            for device in &study.devices {
                                for &batch in &study.protocol.batch {
                                    let combination = Combination {
                                        dataset,
                                        model: model.clone(),
                                        compression: compression.id,
                                        level: study.level(compression, &model),
                                        algorithm,
                                        format,
                                        layout,
                                        compiler: compiler.id.get_ref().clone(),
                                        tuned,
                                        device: device.get_ref().clone(),
                                        batch,
                                    };
                                    total += 1;
                                    if user_model && compression.id != Compression::Dense {
                                        onnx_compressed += 1;
                                        continue;
                                    }
                                    if !study.protocol.batch_fits(device.get_ref(), batch) {
                                        above_max_batch += 1;
                                        continue;
                                    }
                                    match study.rules.iter().position(|r| {
                                        r.exclude.get_ref().iter().all(|(axis, values)| {
                                            combination
                                                .get(axis)
                                                .is_some_and(|v| values.contains(&v))
                                        })
                                    }) {
                                        Some(i) => excluded[i].2 += 1,
                                        None => combinations.push(combination),
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        if !study.protocol.max_batch.is_empty() {
            excluded.push((
                "max-batch".into(),
                "batch sizes above the device's protocol.max_batch".into(),
                above_max_batch,
            ));
        }
        if onnx_compressed > 0 {
            excluded.push((
                "onnx-model-as-given".into(),
                ONNX_AS_GIVEN.into(),
                onnx_compressed,
            ));
        }
        Plan {
            combinations,
            excluded,
            total_before_rules: total,
        }
    }

    /// Keeps the combinations a filter selects.
    pub fn filtered(mut self, filter: &Filter) -> Plan {
        self.combinations.retain(|c| filter.matches(c));
        self
    }

    /// Keeps shard `index` of `count`: every `count`-th combination in plan
    /// order, so shards are disjoint, cover the plan, and stay stable under
    /// resumption.
    pub fn shard(mut self, shard: Shard) -> Plan {
        let mut i = 0;
        self.combinations.retain(|_| {
            let keep = i % shard.count == shard.index;
            i += 1;
            keep
        });
        self
    }

    /// Distinct values per axis and how many combinations have each.
    pub fn counts(&self) -> BTreeMap<&'static str, BTreeMap<String, usize>> {
        let mut counts: BTreeMap<&'static str, BTreeMap<String, usize>> = BTreeMap::new();
        for c in &self.combinations {
            for axis in crate::study::AXES {
                *counts
                    .entry(axis)
                    .or_default()
                    .entry(c.get(axis).unwrap_or_default())
                    .or_default() += 1;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn dlas_study() -> Study {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/studies/dlas.toml");
        Study::load(path.to_str().unwrap(), Path::new(".")).unwrap()
    }

    #[test]
    fn ids_are_stable_and_unique() {
        let plan = Plan::expand(&dlas_study());
        let mut ids: Vec<String> = plan.combinations.iter().map(|c| c.id()).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n, "combination ids collide");
        let first = &plan.combinations[0];
        assert_eq!(
            first.canonical(),
            "dataset=cifar10;model=resnet18;compression=dense;level=0;algorithm=direct;\
             format=dense;layout=nchw;compiler=native;tuned=false;device=i7;batch=1"
        );
        assert_eq!(
            first.id(),
            hex::encode(&Sha256::digest(first.canonical())[..8])
        );
    }

    #[test]
    fn dlas_matrix_is_close_to_a_thousand() {
        let plan = Plan::expand(&dlas_study());
        insta::assert_yaml_snapshot!(
            "dlas_plan_totals",
            (
                plan.total_before_rules,
                plan.combinations.len(),
                plan.excluded
                    .iter()
                    .map(|(n, _, c)| (n.clone(), *c))
                    .collect::<Vec<_>>()
            )
        );
    }

    #[test]
    fn compiler_study_limits_batch_sizes_per_device() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/studies/compilers.toml");
        let study = Study::load(path.to_str().unwrap(), Path::new(".")).unwrap();
        let plan = Plan::expand(&study);
        assert!(
            plan.combinations
                .iter()
                .all(|c| study.protocol.batch_fits(&c.device, c.batch))
        );
        assert!(plan.combinations.iter().any(|c| c.batch == 64));
        assert!(
            plan.combinations
                .iter()
                .all(|c| c.device != "host" || c.batch <= 8)
        );
        insta::assert_yaml_snapshot!(
            "compilers_plan_totals",
            (
                plan.total_before_rules,
                plan.combinations.len(),
                plan.excluded
                    .iter()
                    .map(|(n, _, c)| (n.clone(), *c))
                    .collect::<Vec<_>>()
            )
        );
    }

    #[test]
    fn rules_remove_what_they_say() {
        let plan = Plan::expand(&dlas_study());
        assert!(plan.combinations.iter().all(|c| {
            !(c.tuned && c.format.is_sparse() && c.device.ends_with("-gpu"))
                && (c.format.is_sparse() == c.compression.is_pruning())
        }));
    }

    #[test]
    fn shards_partition_the_plan() {
        let plan = Plan::expand(&dlas_study());
        let n = plan.combinations.len();
        let mut seen: Vec<String> = (0..3)
            .flat_map(|i| {
                let shard: Shard = format!("{i}/3").parse().unwrap();
                plan.clone()
                    .shard(shard)
                    .combinations
                    .into_iter()
                    .map(|c| c.id())
            })
            .collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), n);
        assert!("3/3".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().unwrap_err().contains("i/n"));
    }

    #[test]
    fn levels_print_canonically() {
        assert_eq!(format_level(0.8), "0.8");
        assert_eq!(format_level(0.1 + 0.7), "0.8");
        assert_eq!(format_level(0.0), "0");
        assert_eq!(format_level(0.95), "0.95");
    }

    #[test]
    fn a_user_model_is_planned_dense_only() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/studies/dlas.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let text = format!(
            "{text}\n[[onnx_model]]\nid = \"mine\"\ndataset = \"cifar10\"\npath = \"m.onnx\"\nsha256 = \"{}\"\n",
            "0".repeat(64)
        );
        let study = Study::parse(&text, Path::new("s.toml")).unwrap();
        let plan = Plan::expand(&study);
        let mine: Vec<&Combination> = plan
            .combinations
            .iter()
            .filter(|c| c.model == "mine")
            .collect();
        assert!(!mine.is_empty());
        assert!(
            mine.iter().all(|c| c.compression == Compression::Dense),
            "{:?}",
            mine.iter().find(|c| c.compression != Compression::Dense)
        );
        let (_, reason, n) = plan
            .excluded
            .iter()
            .find(|(name, _, _)| name == "onnx-model-as-given")
            .expect("the plan counts what it left out");
        assert_eq!(reason, ONNX_AS_GIVEN);
        assert!(*n > 0);
        let zoo = Plan::expand(&dlas_study());
        assert_eq!(
            plan.total_before_rules,
            zoo.total_before_rules + zoo.total_before_rules / 8,
            "one more network, counted before any rule"
        );
    }
}
