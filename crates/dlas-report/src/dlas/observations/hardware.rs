//! Observation XIII: hardware (layer 6 of the stack).

use crate::claims::cells::{Key, Order, Votes, first_of, num};
use crate::claims::{Assumption, Context, Observation, Outcome, Part, Verdict, Wording};
use dlas_devices::DeviceKind;

/// The study's pairs of platforms of one kind: (expected faster, slower).
/// The claim names these devices, so results without them cannot test it.
const PAIRS: [(&str, &str); 2] = [("i7", "hikey970-cpu"), ("xavier-gpu", "hikey970-gpu")];

pub(super) fn observations() -> Vec<Observation> {
    vec![Observation {
        numeral: "XIII",
        layer: "Hardware",
        statement: "The i7 CPU is generally faster than the HiKey CPU, and the Xavier GPU is generally faster than the HiKey GPU.",
        wording: Wording::Quoted,
        source: "As expected, XIII) the i7 CPU was generally faster than the HiKey CPU, and the Xavier GPU was generally faster than the HiKey GPU.",
        predicate: "For each pair (i7, hikey970-cpu) and (xavier-gpu, hikey970-gpu): over cells (network, compression, tuning) measured on both, the first device's fastest algorithm beats the second's, beyond the tolerance (measured: beyond the 95% intervals and the drift between sittings), in most.",
        check: faster_platforms,
        assumptions: &[Assumption {
            on: &[DeviceKind::Cpu, DeviceKind::Gpu],
            text: "a device's times scale with its specification's peak compute and DRAM bandwidth, so the device with the larger peaks is faster",
        }],
    }]
}

fn faster_platforms(context: &Context) -> Outcome {
    let cells = context.cells();
    let mut parts = Vec::new();
    let mut devices = Vec::new();
    for (fast, slow) in PAIRS {
        let mut wins = Votes::default();
        let mut against = Vec::new();
        for key in cells.keys().filter(|k| k.device == fast) {
            let other = Key {
                device: slow,
                ..key.clone()
            };
            let (Some(a), Some(b), Some(o)) = (
                cells.best(key),
                cells.best(&other),
                cells.order(key, &other),
            ) else {
                continue;
            };
            wins.add(o, Order::Below);
            if o != Order::Below {
                against.push(format!(
                    "{}/{} {} {}: {fast} {} ms, {slow} {} ms",
                    key.dataset,
                    key.model,
                    key.compression,
                    key.tuning(),
                    num(a.1),
                    num(b.1)
                ));
            }
        }
        parts.push(if wins.total() == 0 {
            Part::untestable(format!("no cell measured on both {fast} and {slow}"))
        } else {
            devices.extend([fast, slow]);
            Part::new(
                Verdict::of(wins.tally().majority()),
                format!("{fast} is faster than {slow} beyond the tolerance in {wins} cells"),
            )
            .against(format!(
                "{fast} not faster than {slow}: {}",
                first_of(&against, 4)
            ))
        });
    }
    Outcome::of(parts, cells.ordered(devices))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{cell, verdict};
    use super::*;
    use dlas_core::{Compression, Dataset};

    #[test]
    fn xiii_compares_the_named_pairs() {
        let rows = |xavier: f64| {
            let d = Dataset::Imagenet;
            let mut rows = Vec::new();
            for (device, t) in [
                ("i7", 1.0),
                ("hikey970-cpu", 3.0),
                ("xavier-gpu", xavier),
                ("hikey970-gpu", 2.0),
            ] {
                rows.extend(cell(
                    device,
                    d,
                    "resnet50",
                    Compression::Dense,
                    false,
                    [t; 3],
                ));
            }
            rows
        };
        let holds = verdict("XIII", &rows(1.0));
        assert_eq!(holds.verdict, Verdict::Holds, "{:?}", holds.evidence);
        assert_eq!(
            holds.devices,
            ["i7", "hikey970-cpu", "xavier-gpu", "hikey970-gpu"]
        );
        assert_eq!(verdict("XIII", &rows(4.0)).verdict, Verdict::DoesNotHold);
        let cpus: Vec<_> = rows(1.0)
            .into_iter()
            .filter(|r| r.device.ends_with("cpu") || r.device == "i7")
            .collect();
        assert_eq!(verdict("XIII", &cpus).verdict, Verdict::CannotBeTested);
    }
}
