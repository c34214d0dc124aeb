//! Observations IV to VI: model optimizations (layer 3 of the stack).

use crate::claims::cells::{
    Cells, Key, Order, Tally, Time, Votes, first_of, median, num, order, order_times,
};
use crate::claims::{Assumption, Context, Observation, Outcome, Part, TOLERANCE, Verdict, Wording};
use dlas_core::{Compression, Dataset};
use dlas_devices::DeviceKind;
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn observations() -> Vec<Observation> {
    vec![
        Observation {
            numeral: "IV",
            layer: "Model optimizations",
            statement: "Weight pruning gives better compression ratios and speedups than channel pruning, but achieves less of its expected speedup.",
            wording: Wording::Quoted,
            source: "IV) Weight pruning tended to give better compression ratios and speedups than channel pruning, however achieved less of its expected speedups.",
            predicate: "Each technique is compared at its own chosen level, as the paper compares them, not at matched levels: the paper picks each technique's level at the elbow of its accuracy curve, and one number means different things for the two (pruning 80% of the channels removes far more parameters than pruning 80% of the weights); the results measure each technique only at its chosen level, so that is the comparison they allow, and the evidence names the levels. (a) Weight pruning's compression ratio (dense over non-zero parameters) exceeds channel pruning's by more than the tolerance for most networks in the results. (b) In most cells (device, network, tuning) with both, weight pruning is faster than channel pruning beyond the tolerance (measured: beyond the 95% intervals and the drift between sittings). (c) In most of those cells, weight pruning's achieved speedup is a smaller fraction of its expected speedup (dense MACs over remaining MACs) than channel pruning's, by more than the tolerance. On (b), argued: at the chosen levels channel pruning leaves fewer MACs in most networks (its expected speedup is the larger), so (b) asks weight pruning's sparse kernels to beat a dense network with less work; that is the paper's comparison too (its levels were chosen the same way), and a 'does not hold' on (b) says weight pruning did not turn its savings into more speed than channel pruning at these levels, not that it cannot at matched ones.",
            check: weight_against_channel_pruning,
            assumptions: &[],
        },
        Observation {
            numeral: "V",
            layer: "Model optimizations",
            statement: "Quantization's speedup varies by hardware platform and data type.",
            wording: Wording::Quoted,
            source: "We also observed that V) quantization's speedup varied by hardware platform and data-type.",
            predicate: "(a) For some data type (fp16, int8), the median speedup over dense differs by more than 10% between two devices. (b) On some device, the median speedups of fp16 and int8 differ by more than 10%.",
            check: quantization_varies,
            assumptions: &[Assumption {
                on: &[DeviceKind::Cpu, DeviceKind::Gpu],
                text: "each data type runs at the rate the device's specification gives it (fp16 and int8 lanes per FMA), so the speedups vary as the specifications do",
            }],
        },
        Observation {
            numeral: "VI",
            layer: "Model optimizations",
            statement: "The best model optimization technique varies with the network and the platform.",
            wording: Wording::FromDiscussion,
            source: "Overall, the best model optimization technique varied.",
            predicate: "Over cells (device, network, tuning) with at least two compression techniques measured, no technique is alone the fastest in most cells. A technique is alone the fastest when every other is slower beyond the tolerance (measured: beyond the 95% intervals and the drift between sittings); a tied cell has no single best technique and counts for none, so a tie can neither make one technique the rule nor hide that it is.",
            check: best_technique_varies,
            assumptions: &[],
        },
    ]
}

/// Weight-pruned cells whose dense cell is measured.
fn weight_pruned_cells<'a>(cells: &'a Cells<'a>) -> impl Iterator<Item = &'a Key<'a>> {
    cells
        .keys()
        .filter(|k| k.compression == Compression::WeightPruning)
        .filter(|k| cells.speedup_over_dense(k).is_some())
}

/// The chosen level of a technique for a network, in percent.
fn level_of(context: &Context, dataset: Dataset, model: &str, technique: Compression) -> String {
    context
        .sweeps
        .chosen(dataset, model, technique)
        .map_or("?".into(), |p| format!("{}%", num(100.0 * p.level)))
}

fn weight_against_channel_pruning(context: &Context) -> Outcome {
    let cells = context.cells();
    let networks: BTreeSet<(Dataset, &str)> = cells.keys().map(|k| (k.dataset, k.model)).collect();
    // (a) compression ratios, from the sweeps.
    let mut ratio = Votes::default();
    let mut ratios = Vec::new();
    let mut fewer = Vec::new();
    for (dataset, model) in &networks {
        let at = |t| {
            let p = context.sweeps.chosen(*dataset, model, t)?;
            context.sweeps.compression_ratio(p)
        };
        if let (Some(w), Some(c)) = (
            at(Compression::WeightPruning),
            at(Compression::ChannelPruning),
        ) {
            let o = order(w, c);
            ratio.add(o, Order::Above);
            let line = format!(
                "{model} {}x at {}/{}x at {}",
                num(w),
                level_of(context, *dataset, model, Compression::WeightPruning),
                num(c),
                level_of(context, *dataset, model, Compression::ChannelPruning)
            );
            if o != Order::Above {
                fewer.push(line.clone());
            }
            ratios.push(line);
        }
    }
    let a = if ratio.total() == 0 {
        Part::untestable("(a) no network of the results has both pruning techniques in the sweeps")
    } else {
        Part::new(
            Verdict::of(ratio.tally().majority()),
            format!(
                "(a) at each technique's chosen level, weight pruning compresses more in {ratio} networks (weight/channel: {})",
                ratios.join(", ")
            ),
        )
        .against(format!(
            "(a) channel pruning compresses as much or more: {}",
            first_of(&fewer, 4)
        ))
    };
    // (b) and (c) over cells with both techniques and dense.
    let (mut faster, mut less_of_expected) = (Votes::default(), Votes::default());
    let (mut slower, mut more_of_expected) = (Vec::new(), Vec::new());
    let mut devices = Vec::new();
    for key in weight_pruned_cells(&cells) {
        let channel = key.with_compression(Compression::ChannelPruning);
        let (Some(w), Some(c), Some(o)) = (
            cells.speedup_over_dense(key),
            cells.speedup_over_dense(&channel),
            cells.order(key, &channel),
        ) else {
            continue;
        };
        devices.push(key.device);
        faster.add(o, Order::Below);
        if o != Order::Below {
            slower.push(format!(
                "{} {}: weight {}x, channel {}x over dense",
                key.network(),
                key.tuning(),
                num(w),
                num(c)
            ));
        }
        let expected = |t| context.sweeps.expected_speedup(key.dataset, key.model, t);
        if let (Some(ew), Some(ec)) = (
            expected(Compression::WeightPruning),
            expected(Compression::ChannelPruning),
        ) {
            let o = order(w / ew, c / ec);
            less_of_expected.add(o, Order::Below);
            if o != Order::Below {
                more_of_expected.push(format!(
                    "{} {}: weight {}% of its expected {}x, channel {}% of {}x",
                    key.network(),
                    key.tuning(),
                    num(100.0 * w / ew),
                    num(ew),
                    num(100.0 * c / ec),
                    num(ec)
                ));
            }
        }
    }
    let b = if faster.total() == 0 {
        Part::untestable("(b) no cell with both pruning techniques and dense measured")
    } else {
        Part::new(
            Verdict::of(faster.tally().majority()),
            format!("(b) weight pruning is faster than channel pruning in {faster} cells"),
        )
        .against(format!(
            "(b) weight pruning not faster beyond the tolerance: {}",
            first_of(&slower, 4)
        ))
    };
    let c = if less_of_expected.total() == 0 {
        Part::untestable("(c) no expected speedups for the measured pruned networks")
    } else {
        Part::new(
            Verdict::of(less_of_expected.tally().majority()),
            format!(
                "(c) weight pruning achieves a smaller share of its expected speedup in {less_of_expected} cells"
            ),
        )
        .against(format!(
            "(c) weight pruning achieves as large a share or larger: {}",
            first_of(&more_of_expected, 4)
        ))
    };
    Outcome::of(vec![a, b, c], cells.ordered(devices))
}

fn quantization_varies(context: &Context) -> Outcome {
    let cells = context.cells();
    // Speedups over dense per (data type, device).
    let mut speedups: BTreeMap<(Compression, &str), Vec<f64>> = BTreeMap::new();
    for key in cells.keys() {
        if !matches!(key.compression, Compression::Fp16 | Compression::Int8) {
            continue;
        }
        if let Some(s) = cells.speedup_over_dense(key) {
            speedups
                .entry((key.compression, key.device))
                .or_default()
                .push(s);
        }
    }
    let medians: BTreeMap<(Compression, &str), f64> = speedups
        .iter()
        .filter_map(|(k, v)| Some((*k, median(v)?)))
        .collect();
    let devices = cells.ordered(medians.keys().map(|k| k.1));
    let spread = |values: Vec<f64>| {
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        max / min
    };
    let mut by_hardware = Vec::new();
    let mut hardware_varies = false;
    for dtype in [Compression::Fp16, Compression::Int8] {
        let per_device: Vec<(&str, f64)> = devices
            .iter()
            .filter_map(|d| Some((d.as_str(), *medians.get(&(dtype, d.as_str()))?)))
            .collect();
        if per_device.len() < 2 {
            continue;
        }
        let s = spread(per_device.iter().map(|p| p.1).collect());
        hardware_varies |= s > TOLERANCE;
        let listed: Vec<String> = per_device
            .iter()
            .map(|(d, m)| format!("{d} {}x", num(*m)))
            .collect();
        by_hardware.push(format!(
            "{dtype} median speedup {} (spread {}x)",
            listed.join(", "),
            num(s)
        ));
    }
    let a = if by_hardware.is_empty() {
        Part::untestable("(a) no quantized data type measured on two devices")
    } else {
        Part::new(
            Verdict::of(hardware_varies),
            format!("(a) {}", by_hardware.join("; ")),
        )
        .against("(a) every data type's median speedups lie within the tolerance of each other across devices")
    };
    let mut by_type = Vec::new();
    let mut type_varies = false;
    for d in &devices {
        if let (Some(f), Some(i)) = (
            medians.get(&(Compression::Fp16, d.as_str())),
            medians.get(&(Compression::Int8, d.as_str())),
        ) {
            type_varies |= spread(vec![*f, *i]) > TOLERANCE;
            by_type.push(format!("{d} fp16 {}x, int8 {}x", num(*f), num(*i)));
        }
    }
    let b = if by_type.is_empty() {
        Part::untestable("(b) no device with both fp16 and int8 measured")
    } else {
        Part::new(
            Verdict::of(type_varies),
            format!("(b) median speedup per device: {}", by_type.join("; ")),
        )
        .against("(b) on every device, fp16's and int8's median speedups lie within the tolerance of each other")
    };
    Outcome::of(vec![a, b], devices)
}

fn best_technique_varies(context: &Context) -> Outcome {
    let cells = context.cells();
    // Per technique, the cells where it alone is the fastest; cells whose
    // fastest ties with another technique count for none.
    let mut wins: BTreeMap<Compression, usize> = BTreeMap::new();
    let mut tied = 0;
    let mut total = 0;
    let mut devices = Vec::new();
    let bases: BTreeSet<Key> = cells
        .keys()
        .map(|k| k.with_compression(Compression::Dense))
        .collect();
    for base in &bases {
        let measured: Vec<(Compression, Time)> = [
            Compression::WeightPruning,
            Compression::ChannelPruning,
            Compression::Fp16,
            Compression::Int8,
        ]
        .into_iter()
        .filter_map(|c| Some((c, cells.best_time(&base.with_compression(c))?.1)))
        .collect();
        if measured.len() < 2 {
            continue;
        }
        let (winner, fastest) = *measured
            .iter()
            .min_by(|x, y| x.1.ms.total_cmp(&y.1.ms))
            .expect("two measured");
        let alone = measured
            .iter()
            .all(|(c, t)| *c == winner || order_times(*t, fastest) == Order::Above);
        if alone {
            *wins.entry(winner).or_default() += 1;
        } else {
            tied += 1;
        }
        total += 1;
        devices.push(base.device);
    }
    let part = if total == 0 {
        Part::untestable("no cell with two compression techniques measured")
    } else {
        let mut listed: Vec<(&Compression, &usize)> = wins.iter().collect();
        listed.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
        let (top, n) = listed
            .first()
            .map_or(("none".to_string(), 0), |(c, n)| (c.to_string(), **n));
        let listed: Vec<String> = listed.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let top_share = Tally { hits: n, total };
        Part::new(
            Verdict::of(!top_share.majority()),
            format!(
                "alone the fastest technique per cell: {} over {total} cells ({tied} tied, no single best); {top} in {top_share}",
                if listed.is_empty() { "none".to_string() } else { listed.join(", ") }
            ),
        )
        .against(format!("{top} is alone the fastest in {top_share} cells"))
    };
    Outcome::of(vec![part], cells.ordered(devices))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{cell, sweeps, verdict, verdict_with};
    use super::*;

    fn iv_rows(weight: f64, channel: f64) -> Vec<dlas_core::ResultRow> {
        let mut rows = Vec::new();
        for model in ["resnet18", "vgg16"] {
            let d = Dataset::Cifar10;
            rows.extend(cell("i7", d, model, Compression::Dense, false, [10.0; 3]));
            rows.extend(cell(
                "i7",
                d,
                model,
                Compression::WeightPruning,
                false,
                [weight; 3],
            ));
            rows.extend(cell(
                "i7",
                d,
                model,
                Compression::ChannelPruning,
                false,
                [channel; 3],
            ));
        }
        rows
    }

    #[test]
    fn iv_compares_the_two_prunings_three_ways() {
        let nets = [(Dataset::Cifar10, "resnet18"), (Dataset::Cifar10, "vgg16")];
        // Weight pruning leaves 20% (expects 5x), channel pruning 50% (2x).
        let facts = sweeps(&nets, 0.2, 0.5);
        // Weight 2.5x of 5x expected (50%), channel 1.67x of 2x (83%).
        let holds = verdict_with("IV", &iv_rows(4.0, 6.0), &[], &facts, &[]);
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        // Channel pruning faster: (b) fails.
        let fails = verdict_with("IV", &iv_rows(6.0, 4.0), &[], &facts, &[]);
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // Weight pruning reaches all its expected speedup: (c) fails.
        let fails = verdict_with("IV", &iv_rows(2.0, 6.0), &[], &facts, &[]);
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // Channel pruning compresses more: (a) fails.
        let fails = verdict_with("IV", &iv_rows(4.0, 6.0), &[], &sweeps(&nets, 0.5, 0.2), &[]);
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
    }

    fn v_rows(i7: [f64; 2], hikey: [f64; 2]) -> Vec<dlas_core::ResultRow> {
        let mut rows = Vec::new();
        for (device, [fp16, int8]) in [("i7", i7), ("hikey970-cpu", hikey)] {
            let d = Dataset::Cifar10;
            rows.extend(cell(
                device,
                d,
                "resnet18",
                Compression::Dense,
                false,
                [10.0; 3],
            ));
            rows.extend(cell(
                device,
                d,
                "resnet18",
                Compression::Fp16,
                false,
                [fp16; 3],
            ));
            rows.extend(cell(
                device,
                d,
                "resnet18",
                Compression::Int8,
                false,
                [int8; 3],
            ));
        }
        rows
    }

    #[test]
    fn v_needs_variation_by_device_and_by_type() {
        let holds = verdict("V", &v_rows([10.0, 5.0], [8.0, 8.0]));
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        assert_eq!(holds.devices, ["i7", "hikey970-cpu"]);
        // The same speedup everywhere for both types.
        let fails = verdict("V", &v_rows([5.0, 5.0], [5.0, 5.0]));
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // One device: (a) cannot be tested.
        let one: Vec<_> = v_rows([10.0, 5.0], [8.0, 8.0])
            .into_iter()
            .filter(|r| r.device == "i7")
            .collect();
        assert_eq!(verdict("V", &one).verdict, Verdict::CannotBeTested);
    }

    #[test]
    fn vi_fails_when_one_technique_wins_most_cells() {
        let rows = |second_int8: f64| {
            let mut rows = Vec::new();
            for (device, int8) in [("i7", 2.0), ("hikey970-cpu", second_int8)] {
                let d = Dataset::Cifar10;
                rows.extend(cell(
                    device,
                    d,
                    "resnet18",
                    Compression::Fp16,
                    false,
                    [5.0; 3],
                ));
                rows.extend(cell(
                    device,
                    d,
                    "resnet18",
                    Compression::Int8,
                    false,
                    [int8; 3],
                ));
            }
            rows
        };
        let holds = verdict("VI", &rows(8.0));
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        let fails = verdict("VI", &rows(3.0));
        assert_eq!(fails.verdict, Verdict::DoesNotHold, "{:?}", fails.evidence);
        // A tie is no win: int8 within the tolerance of fp16 on the second
        // device leaves int8 alone the fastest in one of two cells.
        let tied = verdict("VI", &rows(4.8));
        assert_eq!(tied.verdict, Verdict::Holds, "{:?}", tied.evidence);
        assert!(
            tied.evidence[0].contains("(1 tied, no single best)"),
            "{:?}",
            tied.evidence
        );
    }
}
