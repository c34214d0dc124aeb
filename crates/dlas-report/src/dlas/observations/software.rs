//! Observations XI and XII: systems software, i.e. what tuning brings
//! (layer 5 of the stack), each decided on the native engine's rows and,
//! apart, on Apache TVM's (the paper's own compiler).

use crate::claims::cells::{
    Cells, Key, Order, Tally, Votes, first_of, median, num, order, order_times,
};
use crate::claims::{
    Assumption, Context, DRAMATIC, Observation, Outcome, Part, TOLERANCE, Verdict, Wording,
};
use dlas_core::Compression;
use dlas_devices::DeviceKind;
use std::collections::BTreeSet;

pub(super) fn observations() -> Vec<Observation> {
    vec![
        Observation {
            numeral: "XI",
            layer: "Systems software",
            statement: "Auto-tuned code dramatically accelerates inference, and can change the best algorithm or compression technique; however, tuning gives no speedup on the Xavier.",
            wording: Wording::Quoted,
            source: "XI) auto-tuned code dramatically accelerates inference time, and can change the best algorithm or compression technique. However, we observed no speedup tuning the Xavier.",
            predicate: "(a) Over cells (device, network, compression) measured untuned and tuned, the median speedup of the fastest tuned algorithm over the fastest untuned one is at least 2x; int8 cells are left out of the median, because the native engine's int8 kernels have no schedule to tune (docs/tuning.md) and their tuned rows repeat the untuned ones. (b) Tuning changes the fastest algorithm of some cell or the fastest compression technique of some (device, network): the untuned winner is slower than the tuned winner, after tuning, beyond the tolerance (measured: beyond the 95% intervals and the drift between sittings). (c) On the Xavier (xavier-gpu), the median tuning speedup over its cells is within the tolerance (no speedup).",
            check: tuning_accelerates,
            assumptions: &[Assumption {
                on: &[DeviceKind::Gpu],
                text: "untuned GPU code runs each output's reduction as a dependent chain and fetches an input per MAC, while tuned code keeps every lane busy, so tuning speeds up every mocked GPU by construction",
            }],
        },
        Observation {
            numeral: "XII",
            layer: "Systems software",
            statement: "Pruned models see a lower relative speedup from tuning than dense models.",
            wording: Wording::Quoted,
            source: "XII) Pruned models saw a lower relative speedup when tuned.",
            predicate: "Over (device, network, pruning technique) with dense and pruned measured untuned and tuned, the pruned network's tuning speedup is below the dense network's, by more than the tolerance, in most. A cell where tuning moves neither network beyond the tolerance says nothing about whose gain is lower and is left out; when most cells are so, the tuning axis is flat and the observation cannot be tested (a tuner that gains nothing cannot gain less on pruned networks).",
            check: pruned_tune_less,
            assumptions: &[],
        },
        Observation {
            numeral: "XI-TVM",
            layer: "Systems software",
            statement: "XI on Apache TVM's rows: auto-tuned code dramatically accelerates inference and can change the best algorithm (the paper's own compiler; decided apart from the native engine's tuner).",
            wording: Wording::Quoted,
            source: "XI) auto-tuned code dramatically accelerates inference time, and can change the best algorithm or compression technique. However, we observed no speedup tuning the Xavier.",
            predicate: "XI's predicate over the rows of compiler tvm (TVM 0.27, each convolution legalized to direct, GEMM or spatial pack; tuned: MetaSchedule's database applied) instead of the native engine's. Untuned TVM 0.27 has no schedule at all (no fallback CPU schedules remain in it: serial, untiled loop nests), so its untuned rows are not the paper's untuned TVM 0.8, whose operators had default schedules; (a)'s speedup is MetaSchedule against no schedule and is read with that in mind. TVM runs only on the measured host and only dense fp32 (rule tvm-dense-fp32), so (b)'s compression technique and (c)'s Xavier cannot be met on its rows.",
            check: tvm_tuning_accelerates,
            assumptions: &[],
        },
        Observation {
            numeral: "XII-TVM",
            layer: "Systems software",
            statement: "XII on Apache TVM's rows: pruned models see a lower relative speedup from tuning than dense models.",
            wording: Wording::Quoted,
            source: "XII) Pruned models saw a lower relative speedup when tuned.",
            predicate: "XII's predicate over the rows of compiler tvm. TVM 0.27 runs no pruned network here (rule tvm-dense-fp32: it has no sparse convolution to legalize pruned weights to), so this cannot be tested on this artifact's rows; it is kept so that a reviewer's rows with pruned TVM networks are checked.",
            check: tvm_pruned_tune_less,
            assumptions: &[],
        },
    ]
}

fn tvm_tuning_accelerates(context: &Context) -> Outcome {
    xi(context.cells_of(dlas_core::TVM))
}

fn tvm_pruned_tune_less(context: &Context) -> Outcome {
    xii(context.cells_of(dlas_core::TVM))
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

/// The device on which the paper saw tuning bring nothing.
const XAVIER: &str = "xavier-gpu";

fn tuning_accelerates(context: &Context) -> Outcome {
    xi(context.cells())
}

/// XI over the cells of one compiler.
fn xi(cells: Cells) -> Outcome {
    let untuned: Vec<&Key> = cells
        .keys()
        .filter(|k| !k.tuned)
        .filter(|k| cells.best(&k.with_tuning(true)).is_some())
        .collect();
    let speedups: Vec<f64> = untuned
        .iter()
        .filter(|k| k.compression != Compression::Int8)
        .filter_map(|k| cells.tuning_speedup(k))
        .collect();
    let devices = cells.ordered(untuned.iter().map(|k| k.device));
    let a = match median(&speedups) {
        None => Part::untestable("(a) no cell measured both untuned and tuned"),
        Some(m) => Part::new(
            Verdict::of(m >= DRAMATIC),
            format!(
                "(a) median tuning speedup {}x over {} cells (int8 left out)",
                num(m),
                speedups.len()
            ),
        )
        .against(format!(
            "(a) the median tuning speedup {}x is under the {DRAMATIC}x of \"dramatic\"",
            num(m)
        )),
    };
    // The fastest algorithm changes when, after tuning, the untuned
    // winner is slower than the tuned winner beyond the tolerance.
    let mut algorithm_changes = Tally::default();
    for k in &untuned {
        let tuned = k.with_tuning(true);
        let (Some((before, _)), Some((_, after))) = (cells.best_time(k), cells.best_time(&tuned))
        else {
            continue;
        };
        let before_tuned = cells
            .algorithms(&tuned)
            .into_iter()
            .find(|(a, _)| *a == before)
            .map(|x| x.1);
        algorithm_changes.add(before_tuned.is_some_and(|t| order_times(t, after) == Order::Above));
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
        let tuned = base.with_tuning(true);
        let (Some(before), Some(after)) = (
            fastest_technique(&cells, base, &both),
            fastest_technique(&cells, &tuned, &both),
        ) else {
            continue;
        };
        technique_changes.add(
            cells.order(
                &tuned.with_compression(before),
                &tuned.with_compression(after),
            ) == Some(Order::Above),
        );
    }
    let b = if algorithm_changes.total == 0 {
        Part::untestable("(b) no cell measured both untuned and tuned")
    } else {
        Part::new(
            Verdict::of(algorithm_changes.hits + technique_changes.hits > 0),
            format!(
                "(b) tuning changes the fastest algorithm beyond the tolerance in {algorithm_changes} cells and the fastest compression technique in {technique_changes} (device, network) pairs"
            ),
        )
        .against("(b) in every cell the untuned winner stays within the tolerance of the tuned winner")
    };
    let xavier: Vec<(&Key, f64)> = untuned
        .iter()
        .filter(|k| k.device == XAVIER)
        .filter_map(|k| Some((*k, cells.tuning_speedup(k)?)))
        .collect();
    let xavier_speedups: Vec<f64> = xavier.iter().map(|x| x.1).collect();
    let c = match median(&xavier_speedups) {
        None => Part::untestable(format!("(c) no {XAVIER} cell measured untuned and tuned")),
        Some(m) => {
            let mut faster: Vec<&(&Key, f64)> = xavier
                .iter()
                .filter(|(k, _)| cells.order(&k.with_tuning(true), k) == Some(Order::Below))
                .collect();
            faster.sort_by(|x, y| y.1.total_cmp(&x.1));
            let listed: Vec<String> = faster
                .iter()
                .map(|(k, s)| format!("{} {} {}x", k.network(), k.compression, num(*s)))
                .collect();
            Part::new(
                Verdict::of(m <= TOLERANCE),
                format!(
                    "(c) {XAVIER}: median tuning speedup {}x over {} cells; tuning is faster beyond the tolerance in {} of them",
                    num(m),
                    xavier.len(),
                    faster.len()
                ),
            )
            .against(format!(
                "(c) tuning speeds up {XAVIER} (median {}x): {}",
                num(m),
                first_of(&listed, 3)
            ))
        }
    };
    Outcome::of(vec![a, b, c], devices)
}

fn pruned_tune_less(context: &Context) -> Outcome {
    xii(context.cells())
}

/// XII over the cells of one compiler.
fn xii(cells: Cells) -> Outcome {
    let mut lower = Votes::default();
    let mut higher = Vec::new();
    let mut ratios = Vec::new();
    let mut devices = Vec::new();
    // The larger tuning speedup of each cell where tuning moved neither
    // network, and how many cells were seen.
    let mut flat = Vec::new();
    let mut seen = 0;
    for key in cells.keys() {
        if key.tuned || !key.compression.is_pruning() {
            continue;
        }
        let dense = key.with_compression(Compression::Dense);
        let (Some(pruned), Some(dense)) = (cells.tuning_speedup(key), cells.tuning_speedup(&dense))
        else {
            continue;
        };
        seen += 1;
        if order(pruned, 1.0) == Order::Tie && order(dense, 1.0) == Order::Tie {
            flat.push(pruned.max(dense));
            continue;
        }
        let o = order(pruned, dense);
        lower.add(o, Order::Below);
        if o != Order::Below {
            higher.push(format!(
                "{} {}: {}x from tuning, dense {}x",
                key.network(),
                key.compression,
                num(pruned),
                num(dense)
            ));
        }
        ratios.push(pruned / dense);
        devices.push(key.device);
    }
    let flat_share = Tally {
        hits: flat.len(),
        total: seen,
    };
    let part = match median(&ratios) {
        _ if flat_share.majority() => Part::untestable(format!(
            "tuning moves neither the pruned nor the dense network beyond the tolerance in {flat_share} cells (largest speedup among them {}x): the tuning axis is flat",
            num(flat.iter().copied().fold(1.0, f64::max))
        )),
        None => {
            Part::untestable("no pruned network measured untuned and tuned beside its dense one")
        }
        Some(m) => Part::new(
            Verdict::of(lower.tally().majority()),
            format!(
                "pruned networks gain less from tuning than dense, beyond the tolerance, in {lower} cases where tuning moved one of them (median ratio of tuning speedups {}); {} of {seen} cells left out where tuning moved neither",
                num(m),
                flat.len()
            ),
        )
        .against(format!(
            "pruned networks' tuning gain not below dense beyond the tolerance: {}",
            first_of(&higher, 4)
        )),
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
            // The Xavier, where tuning brings nothing (5% is within the tolerance).
            rows.extend(cell(
                XAVIER,
                d,
                "resnet18",
                Compression::Dense,
                false,
                [2.0; 3],
            ));
            rows.extend(cell(
                XAVIER,
                d,
                "resnet18",
                Compression::Dense,
                true,
                [1.9; 3],
            ));
            rows
        };
        // 10 ms untuned (direct) to 4 ms tuned (spatial pack): 2.5x on
        // the i7 and a new winner; the median over the i7 and the Xavier
        // is (2.5 + 1.05) / 2 = 1.78x, so the i7 needs two cells.
        let two = |tuned: [f64; 3]| {
            let mut rows = rows(tuned);
            let i7: Vec<_> = rows.iter().filter(|r| r.device == "i7").cloned().collect();
            for mut r in i7 {
                r.model = "vgg16".into();
                rows.push(r);
            }
            rows
        };
        let holds = verdict("XI", &two([6.0, 5.0, 4.0]));
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        // 10 ms to 8 ms: 1.25x.
        let fails = verdict("XI", &two([8.0, 9.0, 9.5]));
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        assert!(fails.explanation[0].starts_with("(a) the median tuning speedup"));
        // 2.5x, but direct stays the fastest and there is one technique.
        let fails = verdict("XI", &two([4.0, 5.0, 6.0]));
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // Tuning speeds up the Xavier 2x: (c) fails, naming the cell.
        let fast_xavier: Vec<_> = two([6.0, 5.0, 4.0])
            .into_iter()
            .map(|mut r| {
                if r.device == XAVIER && r.tuned {
                    r.median_ms = Some(1.0);
                }
                r
            })
            .collect();
        let fails = verdict("XI", &fast_xavier);
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        assert_eq!(
            fails.explanation,
            ["(c) tuning speeds up xavier-gpu (median 2x): xavier-gpu cifar10/resnet18 dense 2x"]
        );
        // Without the Xavier, (c) cannot be tested.
        let no_xavier: Vec<_> = two([6.0, 5.0, 4.0])
            .into_iter()
            .filter(|r| r.device != XAVIER)
            .collect();
        assert_eq!(verdict("XI", &no_xavier).verdict, Verdict::CannotBeTested);
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
        // Tuning moves neither network: the axis is flat, nothing to compare.
        let mut flat = rows(6.1);
        for r in flat
            .iter_mut()
            .filter(|r| r.compression == Compression::Dense && r.tuned)
        {
            r.median_ms = Some(9.8);
        }
        let untested = verdict("XII", &flat);
        assert_eq!(untested.verdict, Verdict::CannotBeTested);
        assert!(
            untested.evidence[0].contains("the tuning axis is flat"),
            "{:?}",
            untested.evidence
        );
    }

    #[test]
    fn xi_leaves_out_int8_cells_which_have_no_schedule() {
        let d = Dataset::Cifar10;
        let mut rows = cell("i7", d, "vgg16", Compression::Dense, false, [10.0; 3]);
        rows.extend(cell("i7", d, "vgg16", Compression::Dense, true, [4.0; 3]));
        // Two int8 cells that tuning cannot move would pull the median to 1x.
        for model in ["resnet18", "mobilenetv2"] {
            rows.extend(cell("i7", d, model, Compression::Int8, false, [3.0; 3]));
            rows.extend(cell("i7", d, model, Compression::Int8, true, [3.0; 3]));
        }
        let outcome = verdict("XI", &rows);
        assert!(
            outcome.evidence[0].contains("median tuning speedup 2.5x over 1 cells (int8 left out)"),
            "{:?}",
            outcome.evidence
        );
    }
}
