//! Observations VII to X: algorithms and data formats (layer 4 of the stack).

use crate::claims::cells::{Cells, Key, Tally, median, num};
use crate::claims::{Context, Observation, Outcome, Part, RARELY, TOLERANCE, Verdict, Wording};
use dlas_core::{Algorithm, Compression};
use dlas_devices::DeviceKind;
use std::collections::BTreeMap;

pub(super) fn observations() -> Vec<Observation> {
    vec![
        Observation {
            numeral: "VII",
            layer: "Algorithms & data formats",
            statement: "Spatial-pack convolution is generally the best algorithm for dense models on the CPU when tuned.",
            wording: Wording::Quoted,
            source: "In the dense case, when tuned, VII) spatial-pack convolution is generally the best algorithm on the CPU (when tuned).",
            predicate: "Over tuned dense cells (CPU device, network), spatial pack is the fastest algorithm in most.",
            check: |c| fastest_in_most(c, DeviceKind::Cpu, Algorithm::SpatialPack),
        },
        Observation {
            numeral: "VIII",
            layer: "Algorithms & data formats",
            statement: "Direct convolution is generally the best algorithm for dense models on the GPU when tuned.",
            wording: Wording::Quoted,
            source: "VIII) direct convolution is generally the best algorithm on the GPU (when tuned).",
            predicate: "Over tuned dense cells (GPU device, network), direct is the fastest algorithm in most.",
            check: |c| fastest_in_most(c, DeviceKind::Gpu, Algorithm::Direct),
        },
        Observation {
            numeral: "IX",
            layer: "Algorithms & data formats",
            statement: "For sparse (pruned) models, GEMM is generally the best algorithm on CPUs and direct on GPUs.",
            wording: Wording::Quoted,
            source: "In the sparse case, IX) GEMM is generally the best algorithm on CPUs, and direct is generally the best on GPU.",
            predicate: "Over pruned cells (device, network, technique, tuning): GEMM is the fastest in most CPU cells, and direct in most GPU cells.",
            check: sparse_algorithms,
        },
        Observation {
            numeral: "X",
            layer: "Algorithms & data formats",
            statement: "Pruning rarely achieves the speedup its remaining MACs promise over the dense model.",
            wording: Wording::Quoted,
            source: "X) for the pruning techniques we rarely observed the expected performance improvements when compared to the dense implementations.",
            predicate: "Over pruned cells (device, network, technique, tuning), the achieved speedup over dense comes within 10% of the expected one (dense MACs over remaining MACs, at the chosen level) in under a quarter.",
            check: expected_speedups,
        },
    ]
}

/// Winners of the cells selected by `select`, on devices of `kind`.
fn winners<'a>(
    context: &Context,
    cells: &'a Cells<'a>,
    kind: DeviceKind,
    select: impl Fn(&Key) -> bool,
) -> (BTreeMap<Algorithm, usize>, Vec<&'a str>) {
    let mut wins: BTreeMap<Algorithm, usize> = BTreeMap::new();
    let mut devices = Vec::new();
    for key in cells.keys() {
        if context.kind(key.device) != Some(kind) || !select(key) {
            continue;
        }
        if let Some((a, _)) = cells.best(key) {
            *wins.entry(a).or_default() += 1;
            devices.push(key.device);
        }
    }
    (wins, devices)
}

/// Whether `algorithm` wins most cells, with the tally of every algorithm.
fn winner_part(wins: &BTreeMap<Algorithm, usize>, algorithm: Algorithm, what: &str) -> Part {
    let total: usize = wins.values().sum();
    if total == 0 {
        return Part::untestable(format!("no {what} measured"));
    }
    let tally = Tally {
        hits: wins.get(&algorithm).copied().unwrap_or(0),
        total,
    };
    let others: Vec<String> = wins
        .iter()
        .filter(|(a, _)| **a != algorithm)
        .map(|(a, n)| format!("{a} {n}"))
        .collect();
    Part::new(
        Verdict::of(tally.majority()),
        format!(
            "{algorithm} is the fastest in {tally} {what}{}",
            if others.is_empty() {
                String::new()
            } else {
                format!(" ({})", others.join(", "))
            }
        ),
    )
}

fn kind_name(kind: DeviceKind) -> &'static str {
    match kind {
        DeviceKind::Cpu => "CPU",
        DeviceKind::Gpu => "GPU",
    }
}

fn fastest_in_most(context: &Context, kind: DeviceKind, algorithm: Algorithm) -> Outcome {
    let cells = Cells::new(context.rows);
    let (wins, devices) = winners(context, &cells, kind, |k| {
        k.tuned && k.compression == Compression::Dense
    });
    let what = format!("tuned dense {} cells", kind_name(kind));
    Outcome::of(
        vec![winner_part(&wins, algorithm, &what)],
        cells.ordered(devices),
    )
}

fn sparse_algorithms(context: &Context) -> Outcome {
    let cells = Cells::new(context.rows);
    let mut parts = Vec::new();
    let mut all_devices = Vec::new();
    for (kind, algorithm) in [
        (DeviceKind::Cpu, Algorithm::Gemm),
        (DeviceKind::Gpu, Algorithm::Direct),
    ] {
        let (wins, devices) = winners(context, &cells, kind, |k| k.compression.is_pruning());
        let what = format!("pruned {} cells", kind_name(kind));
        parts.push(winner_part(&wins, algorithm, &what));
        all_devices.extend(devices);
    }
    Outcome::of(parts, cells.ordered(all_devices))
}

fn expected_speedups(context: &Context) -> Outcome {
    let cells = Cells::new(context.rows);
    let mut reached = Tally::default();
    let mut shares = Vec::new();
    let mut devices = Vec::new();
    for key in cells.keys() {
        if !key.compression.is_pruning() {
            continue;
        }
        let (Some(achieved), Some(expected)) = (
            cells.speedup_over_dense(key),
            context
                .sweeps
                .expected_speedup(key.dataset, key.model, key.compression),
        ) else {
            continue;
        };
        reached.add(achieved * TOLERANCE >= expected);
        shares.push(achieved / expected);
        devices.push(key.device);
    }
    let part = match median(&shares) {
        None => Part::untestable(
            "no pruned cell with a dense baseline and an expected speedup in the sweeps",
        ),
        Some(m) => Part::new(
            Verdict::of(reached.share() < RARELY),
            format!(
                "pruned networks come within 10% of their expected speedup in {reached} cells; median achieved/expected {}",
                num(m)
            ),
        ),
    };
    Outcome::of(vec![part], cells.ordered(devices))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{cell, sweeps, verdict, verdict_with};
    use super::*;
    use dlas_core::Dataset;

    #[test]
    fn vii_and_viii_count_tuned_dense_winners_per_kind() {
        let rows = |times: [f64; 3]| {
            let mut rows = Vec::new();
            for device in ["i7", "xavier-gpu"] {
                for model in ["resnet18", "vgg16"] {
                    rows.extend(cell(
                        device,
                        Dataset::Cifar10,
                        model,
                        Compression::Dense,
                        true,
                        times,
                    ));
                    // Untuned cells never count.
                    rows.extend(cell(
                        device,
                        Dataset::Cifar10,
                        model,
                        Compression::Dense,
                        false,
                        [9.0, 1.0, 9.0],
                    ));
                }
            }
            rows
        };
        // direct, gemm, spatial-pack
        let sp = rows([3.0, 2.0, 1.0]);
        assert_eq!(verdict("VII", &sp).verdict, Verdict::Holds);
        assert_eq!(verdict("VII", &sp).devices, ["i7"]);
        assert_eq!(verdict("VIII", &sp).verdict, Verdict::DoesNotHold);
        let direct = rows([1.0, 2.0, 3.0]);
        assert_eq!(verdict("VII", &direct).verdict, Verdict::DoesNotHold);
        let viii = verdict("VIII", &direct);
        assert_eq!(viii.verdict, Verdict::Holds, "{:?}", viii.evidence);
        assert_eq!(
            viii.evidence,
            ["direct is the fastest in 2 of 2 (100%) tuned dense GPU cells"]
        );
    }

    #[test]
    fn ix_needs_gemm_on_cpus_and_direct_on_gpus() {
        let rows = |gpu: [f64; 3]| {
            let mut rows = cell(
                "hikey970-cpu",
                Dataset::Cifar10,
                "resnet18",
                Compression::WeightPruning,
                false,
                [3.0, 1.0, 2.0],
            );
            rows.extend(cell(
                "hikey970-gpu",
                Dataset::Cifar10,
                "resnet18",
                Compression::ChannelPruning,
                false,
                gpu,
            ));
            rows
        };
        assert_eq!(
            verdict("IX", &rows([1.0, 2.0, 3.0])).verdict,
            Verdict::Holds
        );
        assert_eq!(
            verdict("IX", &rows([2.0, 1.0, 3.0])).verdict,
            Verdict::DoesNotHold
        );
        // CPUs alone: the GPU half cannot be tested.
        let cpu: Vec<_> = rows([1.0, 2.0, 3.0])
            .into_iter()
            .filter(|r| r.device == "hikey970-cpu")
            .collect();
        let o = verdict("IX", &cpu);
        assert_eq!(o.verdict, Verdict::CannotBeTested);
        assert!(
            o.evidence[0].starts_with("gemm is the fastest in 1 of 1"),
            "{:?}",
            o.evidence
        );
    }

    #[test]
    fn x_counts_cells_that_reach_their_expected_speedup() {
        let nets = [(Dataset::Cifar10, "resnet18")];
        let facts = sweeps(&nets, 0.25, 0.5); // expects 4x and 2x
        let rows = |weight: f64, channel: f64| {
            let mut rows = cell(
                "i7",
                Dataset::Cifar10,
                "resnet18",
                Compression::Dense,
                false,
                [8.0; 3],
            );
            rows.extend(cell(
                "i7",
                Dataset::Cifar10,
                "resnet18",
                Compression::WeightPruning,
                false,
                [weight; 3],
            ));
            rows.extend(cell(
                "i7",
                Dataset::Cifar10,
                "resnet18",
                Compression::ChannelPruning,
                false,
                [channel; 3],
            ));
            rows
        };
        // 1.6x of 4x and 1.33x of 2x: neither reaches.
        let holds = verdict_with("X", &rows(5.0, 6.0), &[], &facts, &[]);
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        // 4x of 4x: one of two cells reaches.
        let fails = verdict_with("X", &rows(2.0, 6.0), &[], &facts, &[]);
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        assert_eq!(
            verdict("X", &rows(5.0, 6.0)).verdict,
            Verdict::CannotBeTested
        );
    }
}
