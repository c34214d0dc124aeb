//! Observations I to III: datasets and models (layers 1 and 2 of the stack).

use crate::claims::cells::{Order, Votes, first_of, median, num, spearman};
use crate::claims::{Context, Observation, Outcome, Part, Verdict, Wording};
use crate::compression::RecordedAccuracy;
use dlas_core::{Compression, Dataset};
use std::collections::BTreeMap;

/// Spearman's rho at or above this is a strong positive correlation.
const STRONG: f64 = 0.7;
/// Under [`MIN_NETWORKS`], (a) is decided by the paper's own evidence: a
/// network with at most this share of another's parameters that is more
/// accurate (EfficientNet-B0 against DenseNet-161 and ResNet-50, "despite
/// having at most 21% of the parameters").
const SMALLER: f64 = 0.5;
/// Fewer networks than this cannot test a rank correlation: with four, even
/// a perfect rho of 1 has a two-sided p of 0.083 under no correlation, so
/// no strength of correlation would be distinguishable from chance at 5%;
/// five is the smallest n at which one can (p = 0.017 for |rho| = 1).
const MIN_NETWORKS: usize = 5;

pub(super) fn observations() -> Vec<Observation> {
    vec![
        Observation {
            numeral: "I",
            layer: "Datasets & problem spaces",
            statement: "Compression costs ImageNet models more accuracy than CIFAR-10 models.",
            wording: Wording::FromDiscussion,
            source: "Between datasets, models showed similar trends in terms of accuracy, with the accuracy losses due to compression being higher for ImageNet models.",
            predicate: "The mean top-1 drop (dense minus compressed, in points) of the recorded compressed ImageNet models, at the chosen pruning level, exceeds that of the CIFAR-10 models.",
            check: accuracy_loss_by_dataset,
            assumptions: &[],
        },
        Observation {
            numeral: "II",
            layer: "Datasets & problem spaces",
            statement: "Tuned sparse CIFAR-10 models are faster than their dense baseline; tuned sparse ImageNet models are not.",
            wording: Wording::Quoted,
            source: "II) tuned sparse CIFAR-10 models were faster than the dense baseline, but this was not the case for ImageNet models.",
            predicate: "Over tuned cells (device, network, pruning technique), each with its fastest algorithm: the pruned network beats the tuned dense one in most CIFAR-10 cells, and does not in most ImageNet cells.",
            check: sparse_speed_by_dataset,
            assumptions: &[],
        },
        Observation {
            numeral: "III",
            layer: "Models & neural architectures",
            statement: "Model size is not strongly correlated with accuracy; however, smaller models are more vulnerable to compression.",
            wording: Wording::Quoted,
            source: "III) model size is not strongly correlated with accuracy, however smaller models are more vulnerable to compression.",
            predicate: "(a) Within each dataset, more parameters do not mean strongly higher dense top-1: with five or more recorded networks, Spearman's rho between parameters and top-1 is below 0.7 (a negative rho, smaller networks more accurate, is what the paper's own examples show, so only a strong positive correlation goes against it); with fewer, where no rank correlation can be told from chance at 5% (with four, even rho = 1 has p = 0.083), by the paper's own kind of evidence: some network with at most half another's parameters has the higher top-1 (the paper: EfficientNet-B0 is more accurate than DenseNet-161 and ResNet-50 with at most 21% of their parameters). (b) Within each dataset and technique with five or more recorded compressed networks, rho between parameters and top-1 drop is negative; under five it is reported with rho and n but not tested (the paper gives no example for it).",

            check: size_and_accuracy,
            assumptions: &[],
        },
    ]
}

/// The recorded dense top-1 of a network.
fn dense_top1(accuracy: &[RecordedAccuracy], dataset: Dataset, model: &str) -> Option<f64> {
    accuracy
        .iter()
        .find(|a| a.dataset == dataset && a.model == model && a.technique == Compression::Dense)
        .map(|a| a.top1)
}

/// Top-1 drops of the recorded compressed networks, at the chosen level
/// for the pruning techniques: (dataset, model, technique, drop).
fn drops(context: &Context) -> Vec<(Dataset, String, Compression, f64)> {
    context
        .accuracy
        .iter()
        .filter(|a| a.technique != Compression::Dense)
        .filter(|a| {
            !a.technique.is_pruning()
                || context
                    .sweeps
                    .chosen(a.dataset, &a.model, a.technique)
                    .zip(a.level)
                    .is_some_and(|(p, level)| (p.level - level).abs() < 1e-9)
        })
        .filter_map(|a| {
            let dense = dense_top1(context.accuracy, a.dataset, &a.model)?;
            Some((a.dataset, a.model.clone(), a.technique, dense - a.top1))
        })
        .collect()
}

fn accuracy_loss_by_dataset(context: &Context) -> Outcome {
    let drops = drops(context);
    let mean = |d: Dataset| {
        let v: Vec<f64> = drops.iter().filter(|x| x.0 == d).map(|x| x.3).collect();
        (!v.is_empty()).then(|| (v.iter().sum::<f64>() / v.len() as f64, v.len()))
    };
    let part = match (mean(Dataset::Imagenet), mean(Dataset::Cifar10)) {
        (Some((imagenet, n)), Some((cifar, m))) => Part::new(
            Verdict::of(imagenet > cifar),
            format!(
                "mean top-1 drop of compressed models: imagenet {} points ({n} recorded), cifar10 {} points ({m} recorded)",
                num(imagenet),
                num(cifar)
            ),
        )
        .against(format!(
            "imagenet's mean drop ({} points) does not exceed cifar10's ({} points)",
            num(imagenet),
            num(cifar)
        )),
        (imagenet, cifar) => Part::untestable(format!(
            "recorded accuracy of compressed models at the chosen level: imagenet {}, cifar10 {}; both datasets need one",
            imagenet.map_or(0, |x| x.1),
            cifar.map_or(0, |x| x.1)
        )),
    };
    Outcome::of(vec![part], vec![])
}

fn sparse_speed_by_dataset(context: &Context) -> Outcome {
    let cells = context.cells();
    let mut devices = Vec::new();
    let mut parts = Vec::new();
    for (dataset, pruned_should_win) in [(Dataset::Cifar10, true), (Dataset::Imagenet, false)] {
        let mut faster = Votes::default();
        let mut speedups = Vec::new();
        let mut against = Vec::new();
        for key in cells.keys() {
            if key.dataset != dataset || !key.tuned || !key.compression.is_pruning() {
                continue;
            }
            let dense = key.with_compression(Compression::Dense);
            let (Some(s), Some(order)) = (cells.speedup_over_dense(key), cells.order(key, &dense))
            else {
                continue;
            };
            faster.add(order, Order::Below);
            // A tie is not faster: it goes against CIFAR-10's half only.
            if (order == Order::Below) != pruned_should_win {
                against.push(format!("{key} {}x over dense", num(s)));
            }
            speedups.push(s);
            devices.push(key.device);
        }
        let part = match median(&speedups) {
            None => Part::untestable(format!(
                "{dataset}: no tuned pruned network with a tuned dense baseline"
            )),
            Some(m) => {
                let majority = faster.tally().majority();
                Part::new(
                    Verdict::of(majority == pruned_should_win),
                    format!(
                        "{dataset}: tuned pruned networks faster than tuned dense in {faster} cells (median speedup {}x)",
                        num(m)
                    ),
                )
                .against(format!(
                    "{dataset} {}: {}",
                    if pruned_should_win {
                        "not faster than dense beyond the tolerance"
                    } else {
                        "faster than dense"
                    },
                    first_of(&against, 4)
                ))
            }
        };
        parts.push(part);
    }
    Outcome::of(parts, cells.ordered(devices))
}

/// A rank correlation per group, tested where the group has
/// [`MIN_NETWORKS`]: its evidence lists every group with rho and n.
struct Correlations {
    /// What is correlated, for the evidence ("(a) ... rho(parameters, dense top-1)").
    label: &'static str,
    tested: Vec<Part>,
    reported: Vec<String>,
}

impl Correlations {
    fn new(label: &'static str) -> Correlations {
        Correlations {
            label,
            tested: Vec::new(),
            reported: Vec::new(),
        }
    }

    /// Adds a group: `holds` judges rho where n suffices.
    fn add(
        &mut self,
        group: String,
        xs: &[f64],
        ys: &[f64],
        listed: String,
        holds: fn(f64) -> bool,
    ) {
        let n = xs.len();
        let Some(rho) = spearman(xs, ys) else {
            self.reported.push(format!(
                "{group}: n = {n}, no rank correlation (under three networks or a constant)"
            ));
            return;
        };
        let line = format!("{group}: rho = {} (n = {n}{listed})", num(rho));
        if n < MIN_NETWORKS {
            self.reported
                .push(format!("{line}, not testable under n = {MIN_NETWORKS}"));
        } else {
            let verdict = Verdict::of(holds(rho));
            self.reported.push(line.clone());
            self.tested
                .push(Part::new(verdict, line.clone()).against(line));
        }
    }

    fn part(self, prefix: &str) -> Part {
        let evidence = format!(
            "{prefix} {}: {}",
            self.label,
            if self.reported.is_empty() {
                "no group with recorded accuracy".to_string()
            } else {
                self.reported.join("; ")
            }
        );
        if self.tested.is_empty() {
            return Part::untestable(evidence);
        }
        let verdict = self
            .tested
            .iter()
            .fold(Verdict::Holds, |v, p| v.and(p.verdict));
        let against: Vec<String> = self
            .tested
            .into_iter()
            .filter(|p| p.verdict == Verdict::DoesNotHold)
            .map(|p| p.against)
            .collect();
        Part::new(verdict, evidence).against(format!("{prefix} {}", against.join("; ")))
    }
}

/// (a) on fewer networks than a rank correlation needs: whether a network
/// with at most [`SMALLER`] of another's parameters is more accurate.
/// `nets` are (model, parameters, top-1), sorted by parameters.
fn counterexample(dataset: Dataset, nets: &[(&str, usize, f64)], listed: &[String]) -> Part {
    let found = nets.iter().enumerate().find_map(|(i, small)| {
        nets[i + 1..]
            .iter()
            .find(|large| small.1 as f64 <= SMALLER * large.1 as f64 && small.2 > large.2)
            .map(|large| (small, large))
    });
    let line = format!(
        "{dataset}: n = {} ({}), too few for a rank correlation",
        nets.len(),
        listed.join(", ")
    );
    match found {
        Some((small, large)) => Part::new(
            Verdict::Holds,
            format!(
                "{line}; {} has {}% of {}'s parameters and the higher top-1",
                small.0,
                num(100.0 * small.1 as f64 / large.1 as f64),
                large.0
            ),
        ),
        None => Part::new(
            Verdict::DoesNotHold,
            format!("{line}; no network with at most half another's parameters is more accurate"),
        )
        .against(format!(
            "{dataset}: every network with at most half another's parameters is less accurate"
        )),
    }
}

fn size_and_accuracy(context: &Context) -> Outcome {
    let params: BTreeMap<(Dataset, &str), usize> = context
        .networks
        .iter()
        .map(|n| ((n.dataset, n.model.as_str()), n.params))
        .collect();
    // (a) dense accuracy against size, per dataset.
    let mut size = Correlations::new("rho(parameters, dense top-1)");
    for dataset in [Dataset::Cifar10, Dataset::Imagenet] {
        let mut nets: Vec<(&str, usize, f64)> = context
            .accuracy
            .iter()
            .filter(|a| a.dataset == dataset && a.technique == Compression::Dense)
            .filter_map(|a| {
                Some((
                    a.model.as_str(),
                    *params.get(&(dataset, a.model.as_str()))?,
                    a.top1,
                ))
            })
            .collect();
        if nets.is_empty() {
            continue;
        }
        nets.sort_by_key(|n| n.1);
        let xs: Vec<f64> = nets.iter().map(|n| n.1 as f64).collect();
        let ys: Vec<f64> = nets.iter().map(|n| n.2).collect();
        let listed: Vec<String> = nets
            .iter()
            .map(|(m, p, t)| format!("{m} {}M {t}%", num(*p as f64 / 1e6)))
            .collect();
        if nets.len() < MIN_NETWORKS && nets.len() >= 2 {
            let part = counterexample(dataset, &nets, &listed);
            size.reported.push(part.evidence.clone());
            size.tested.push(part);
            continue;
        }
        size.add(
            dataset.to_string(),
            &xs,
            &ys,
            format!(": {}", listed.join(", ")),
            |rho| rho < STRONG,
        );
    }
    // (b) accuracy lost under compression against size, per dataset and technique.
    let mut groups: BTreeMap<(Dataset, Compression), Vec<(f64, f64)>> = BTreeMap::new();
    for (dataset, model, technique, drop) in drops(context) {
        if let Some(p) = params.get(&(dataset, model.as_str())) {
            groups
                .entry((dataset, technique))
                .or_default()
                .push((*p as f64, drop));
        }
    }
    let mut vulnerable = Correlations::new("rho(parameters, top-1 drop)");
    for ((dataset, technique), points) in &groups {
        let xs: Vec<f64> = points.iter().map(|p| p.0).collect();
        let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
        vulnerable.add(
            format!("{dataset} {technique}"),
            &xs,
            &ys,
            String::new(),
            |rho| rho < 0.0,
        );
    }
    Outcome::of(vec![size.part("(a)"), vulnerable.part("(b)")], vec![])
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{cell, sweeps, verdict, verdict_with};
    use super::*;
    use crate::compression::Sweeps;
    use crate::inputs::Network;

    fn acc(dataset: Dataset, model: &str, technique: Compression, top1: f64) -> RecordedAccuracy {
        RecordedAccuracy {
            dataset,
            model: model.into(),
            technique,
            level: technique.is_pruning().then_some(0.2),
            top1,
            source: "test".into(),
        }
    }

    #[test]
    fn i_compares_mean_drops_across_datasets() {
        let nets = [
            (Dataset::Cifar10, "resnet18"),
            (Dataset::Imagenet, "resnet50"),
        ];
        let facts = sweeps(&nets, 0.8, 0.9); // chosen levels 0.2 and 0.1
        let records = |imagenet_int8: f64| {
            vec![
                acc(Dataset::Cifar10, "resnet18", Compression::Dense, 93.0),
                acc(
                    Dataset::Cifar10,
                    "resnet18",
                    Compression::WeightPruning,
                    92.0,
                ),
                acc(Dataset::Imagenet, "resnet50", Compression::Dense, 76.0),
                acc(
                    Dataset::Imagenet,
                    "resnet50",
                    Compression::Int8,
                    imagenet_int8,
                ),
            ]
        };
        let holds = verdict_with("I", &[], &[], &facts, &records(70.0));
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        let fails = verdict_with("I", &[], &[], &facts, &records(75.5));
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // Only dense accuracy recorded (the published file today).
        let dense_only: Vec<_> = records(70.0)
            .into_iter()
            .filter(|a| a.technique == Compression::Dense)
            .collect();
        let untested = verdict_with("I", &[], &[], &facts, &dense_only);
        assert_eq!(untested.verdict, Verdict::CannotBeTested);
    }

    #[test]
    fn ii_needs_fast_cifar_and_slow_imagenet_pruning() {
        let rows = |imagenet_pruned: f64| {
            let mut rows = Vec::new();
            for (d, m, pruned) in [
                (Dataset::Cifar10, "resnet18", 5.0),
                (Dataset::Imagenet, "resnet50", imagenet_pruned),
            ] {
                rows.extend(cell(
                    "i7",
                    d,
                    m,
                    Compression::Dense,
                    true,
                    [10.0, 12.0, 11.0],
                ));
                rows.extend(cell(
                    "i7",
                    d,
                    m,
                    Compression::WeightPruning,
                    true,
                    [pruned, pruned, pruned],
                ));
            }
            rows
        };
        let holds = verdict("II", &rows(20.0));
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        assert_eq!(holds.devices, ["i7"]);
        let fails = verdict("II", &rows(5.0));
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // Untuned rows do not count.
        let untuned: Vec<_> = rows(20.0)
            .into_iter()
            .map(|mut r| {
                r.tuned = false;
                r
            })
            .collect();
        assert_eq!(verdict("II", &untuned).verdict, Verdict::CannotBeTested);
    }

    #[test]
    fn iii_ranks_size_against_accuracy_from_five_networks() {
        let models = ["a", "b", "c", "d", "e"];
        let networks: Vec<Network> = models
            .iter()
            .enumerate()
            .map(|(i, m)| Network {
                dataset: Dataset::Cifar10,
                model: m.to_string(),
                params: (i + 1) * 1_000_000,
                architecture: crate::inputs::Architecture::Cnn,
            })
            .collect();
        let nets: Vec<(Dataset, &str)> = models.iter().map(|m| (Dataset::Cifar10, *m)).collect();
        let facts = sweeps(&nets, 0.8, 0.9);
        let records = |dense: [f64; 5], pruned: [f64; 5]| {
            let mut r = Vec::new();
            for (i, m) in models.iter().enumerate() {
                r.push(acc(Dataset::Cifar10, m, Compression::Dense, dense[i]));
                r.push(acc(
                    Dataset::Cifar10,
                    m,
                    Compression::WeightPruning,
                    pruned[i],
                ));
            }
            r
        };
        // Size and accuracy unrelated (rho 0.1); the smallest lose the most.
        let holds = verdict_with(
            "III",
            &[],
            &networks,
            &facts,
            &records(
                [94.0, 92.0, 93.0, 95.0, 91.0],
                [84.0, 88.0, 90.0, 93.0, 90.5],
            ),
        );
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        // Accuracy rises with size: (a) fails, and says by how much.
        let rising = [90.0, 91.0, 92.0, 93.0, 94.0];
        let fails = verdict_with(
            "III",
            &[],
            &networks,
            &facts,
            &records(rising, [80.0, 85.0, 90.0, 92.0, 93.5]),
        );
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        assert!(
            fails.explanation[0].contains("rho = 1 (n = 5"),
            "{:?}",
            fails.explanation
        );
        // Falling with size is what the paper's examples show: (a) holds.
        let falling = [94.0, 93.0, 92.0, 91.0, 90.0];
        let holds = verdict_with(
            "III",
            &[],
            &networks,
            &facts,
            &records(falling, [84.0, 88.0, 90.0, 90.5, 89.9]),
        );
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        // The smallest loses the least: (b) fails.
        let fails = verdict_with(
            "III",
            &[],
            &networks,
            &facts,
            &records(
                [94.0, 92.0, 93.0, 95.0, 91.0],
                [93.9, 91.0, 90.0, 90.0, 85.0],
            ),
        );
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // Four networks: (a) by a counterexample, the paper's own kind of
        // evidence; accuracy rising with size has none.
        let four = |dense: [f64; 5]| -> Vec<_> {
            records(dense, [0.0; 5])
                .into_iter()
                .filter(|a| a.technique == Compression::Dense && a.model != "e")
                .collect()
        };
        let fails = verdict_with("III", &[], &networks, &Sweeps::default(), &four(rising));
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // "a" (1M) beats "c" (3M): a counterexample; (b) has no drops, so untestable.
        let untested = verdict_with(
            "III",
            &[],
            &networks,
            &Sweeps::default(),
            &four([93.0, 94.0, 92.0, 95.0, 0.0]),
        );
        assert_eq!(untested.verdict, Verdict::CannotBeTested);
        assert!(
            untested.evidence[0].contains("cifar10: n = 4")
                && untested.evidence[0].contains("a has 33.3% of c's parameters"),
            "{:?}",
            untested.evidence
        );
    }
}
