//! Observations XI and XII: systems software, i.e. what tuning brings
//! (layer 5 of the stack).

use crate::claims::cells::{Cells, Key, Tally, median, num};
use crate::claims::{Context, DRAMATIC, Observation, Outcome, Part, Verdict, Wording};
use dlas_core::Compression;
use std::collections::BTreeSet;

pub(super) fn observations() -> Vec<Observation> {
    vec![
        Observation {
            numeral: "XI",
            layer: "Systems software",
            statement: "Auto-tuned code dramatically accelerates inference, and can change the best algorithm or compression technique.",
            wording: Wording::Quoted,
            source: "XI) auto-tuned code dramatically accelerates inference time, and can change the best algorithm or compression technique.",
            predicate: "(a) Over cells (device, network, compression) measured untuned and tuned, the median speedup of the fastest tuned algorithm over the fastest untuned one is at least 2x. (b) Tuning changes the fastest algorithm of some cell or the fastest compression technique of some (device, network).",
            check: tuning_accelerates,
        },
        Observation {
            numeral: "XII",
            layer: "Systems software",
            statement: "Pruned models see a lower relative speedup from tuning than dense models.",
            wording: Wording::Quoted,
            source: "XII) Pruned models saw a lower relative speedup when tuned.",
            predicate: "Over (device, network, pruning technique) with dense and pruned measured untuned and tuned, the pruned network's tuning speedup is below the dense network's in most.",
            check: pruned_tune_less,
        },
    ]
}

/// The fastest compression technique (dense included) of a (device,
/// network) under one tuning, where every technique measured both ways counts.
fn fastest_technique(cells: &Cells, base: &Key, techniques: &[Compression]) -> Option<Compression> {
    techniques
        .iter()
        .filter_map(|c| Some((*c, cells.best(&base.with_compression(*c))?.1)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .map(|x| x.0)
}

fn tuning_accelerates(context: &Context) -> Outcome {
    let cells = Cells::new(context.rows);
    let untuned: Vec<&Key> = cells
        .keys()
        .filter(|k| !k.tuned)
        .filter(|k| cells.best(&k.with_tuning(true)).is_some())
        .collect();
    let speedups: Vec<f64> = untuned
        .iter()
        .filter_map(|k| cells.tuning_speedup(k))
        .collect();
    let devices = cells.ordered(untuned.iter().map(|k| k.device));
    let a = match median(&speedups) {
        None => Part::untestable("(a) no cell measured both untuned and tuned"),
        Some(m) => Part::new(
            Verdict::of(m >= DRAMATIC),
            format!(
                "(a) median tuning speedup {}x over {} cells",
                num(m),
                speedups.len()
            ),
        ),
    };
    let mut algorithm_changes = Tally::default();
    for k in &untuned {
        let before = cells.best(k).map(|b| b.0);
        let after = cells.best(&k.with_tuning(true)).map(|b| b.0);
        algorithm_changes.add(before != after);
    }
    // Networks per device, with the techniques measured both ways.
    let bases: BTreeSet<Key> = untuned
        .iter()
        .map(|k| k.with_compression(Compression::Dense))
        .collect();
    let mut technique_changes = Tally::default();
    for base in &bases {
        let both: Vec<Compression> = Compression::ALL
            .iter()
            .copied()
            .filter(|c| untuned.contains(&&base.with_compression(*c)))
            .collect();
        if both.len() < 2 {
            continue;
        }
        technique_changes.add(
            fastest_technique(&cells, base, &both)
                != fastest_technique(&cells, &base.with_tuning(true), &both),
        );
    }
    let b = if algorithm_changes.total == 0 {
        Part::untestable("(b) no cell measured both untuned and tuned")
    } else {
        Part::new(
            Verdict::of(algorithm_changes.hits + technique_changes.hits > 0),
            format!(
                "(b) tuning changes the fastest algorithm in {algorithm_changes} cells and the fastest compression technique in {technique_changes} (device, network) pairs"
            ),
        )
    };
    Outcome::of(vec![a, b], devices)
}

fn pruned_tune_less(context: &Context) -> Outcome {
    let cells = Cells::new(context.rows);
    let mut lower = Tally::default();
    let mut ratios = Vec::new();
    let mut devices = Vec::new();
    for key in cells.keys() {
        if key.tuned || !key.compression.is_pruning() {
            continue;
        }
        let dense = key.with_compression(Compression::Dense);
        let (Some(pruned), Some(dense)) = (cells.tuning_speedup(key), cells.tuning_speedup(&dense))
        else {
            continue;
        };
        lower.add(pruned < dense);
        ratios.push(pruned / dense);
        devices.push(key.device);
    }
    let part = match median(&ratios) {
        None => {
            Part::untestable("no pruned network measured untuned and tuned beside its dense one")
        }
        Some(m) => Part::new(
            Verdict::of(lower.majority()),
            format!(
                "pruned networks gain less from tuning than dense in {lower} cases (median ratio of tuning speedups {})",
                num(m)
            ),
        ),
    };
    Outcome::of(vec![part], cells.ordered(devices))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{cell, verdict};
    use super::*;
    use dlas_core::Dataset;

    #[test]
    fn xi_needs_a_dramatic_median_and_a_change() {
        let d = Dataset::Cifar10;
        let rows = |tuned: [f64; 3]| {
            let mut rows = cell(
                "i7",
                d,
                "resnet18",
                Compression::Dense,
                false,
                [10.0, 12.0, 14.0],
            );
            rows.extend(cell("i7", d, "resnet18", Compression::Dense, true, tuned));
            rows
        };
        // 10 ms untuned (direct) to 4 ms tuned (spatial pack): 2.5x and a new winner.
        let holds = verdict("XI", &rows([6.0, 5.0, 4.0]));
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        // 10 ms to 8 ms: 1.25x.
        let fails = verdict("XI", &rows([8.0, 9.0, 9.5]));
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // 2.5x, but direct stays the fastest and there is one technique.
        let fails = verdict("XI", &rows([4.0, 5.0, 6.0]));
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
    }

    #[test]
    fn xii_compares_tuning_speedups_of_pruned_and_dense() {
        let d = Dataset::Cifar10;
        let rows = |pruned_tuned: f64| {
            let mut rows = cell("i7", d, "vgg16", Compression::Dense, false, [10.0; 3]);
            rows.extend(cell("i7", d, "vgg16", Compression::Dense, true, [4.0; 3]));
            rows.extend(cell(
                "i7",
                d,
                "vgg16",
                Compression::WeightPruning,
                false,
                [6.0; 3],
            ));
            rows.extend(cell(
                "i7",
                d,
                "vgg16",
                Compression::WeightPruning,
                true,
                [pruned_tuned; 3],
            ));
            rows
        };
        assert_eq!(verdict("XII", &rows(4.0)).verdict, Verdict::Holds);
        assert_eq!(verdict("XII", &rows(2.0)).verdict, Verdict::DoesNotHold);
    }
}
