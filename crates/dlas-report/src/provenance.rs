//! Which numbers are measured and which modelled, said wherever a reader
//! looks: panel titles, table columns, footers and the top of the report
//! page, each modelled number with the measured error of its own kind of
//! prediction:
//!
//! - a mocked CPU is the calibrated machine's curves carried to another
//!   CPU's specification: its error is the cross-machine test's (the
//!   catalogue's transfer table), per model family where the rows span
//!   several, not the calibrated machine's own (its validation table);
//! - a mocked GPU's model has never met a measurement: its error is
//!   unknown, and footers say so instead of quoting a CPU's;
//! - the compiler study's `eager` and `vendor` rows come from the
//!   graph-compiler model, never checked against a measurement either.

use crate::inputs::Inputs;
use crate::transfer::{FAMILIES, MOCKED_CPUS, Quoted};
use dlas_devices::DeviceKind;

/// Whether `device`'s numbers come from the performance model (a mocked
/// device) rather than a measurement.
pub fn is_modelled(inputs: &Inputs, device: &str) -> bool {
    inputs.specs.iter().any(|s| s.id == device)
}

/// The kind of a modelled device (`None` for a measured one).
fn modelled_kind(inputs: &Inputs, device: &str) -> Option<DeviceKind> {
    inputs.specs.iter().find(|s| s.id == device).map(|s| s.kind)
}

/// A panel's title: the device and whether its numbers are modelled or measured.
pub fn panel_title(inputs: &Inputs, device: &str) -> String {
    if is_modelled(inputs, device) {
        format!("{device} (modelled)")
    } else {
        format!("{device} (measured)")
    }
}

/// A label for a modelled device's column or group: the device, marked
/// "(modelled)" when it is.
pub fn mark(inputs: &Inputs, device: &str, label: String) -> String {
    if is_modelled(inputs, device) {
        format!("{label} (modelled)")
    } else {
        label
    }
}

/// The factors of a set of quoted errors, each with its bias:
/// "1.34 (predicted/measured 1.16) and 1.49 (0.97)".
fn factors(quoted: &[(String, Quoted)]) -> String {
    let f: Vec<String> = quoted
        .iter()
        .enumerate()
        .map(|(i, (_, q))| {
            let ratio = if i == 0 { "predicted/measured " } else { "" };
            format!("{:.2} ({ratio}{:.2})", q.factor, q.ratio)
        })
        .collect();
    match f.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The share of pairs ordered right over a set of quoted errors: "84-87%".
fn pairs(quoted: &[(String, Quoted)]) -> String {
    let shares: Vec<f64> = quoted
        .iter()
        .filter_map(|(_, q)| q.agreement)
        .map(|a| (a * 100.0).round())
        .collect();
    let (Some(lo), Some(hi)) = (
        shares.iter().copied().reduce(f64::min),
        shares.iter().copied().reduce(f64::max),
    ) else {
        return String::new();
    };
    if lo == hi {
        format!(", {lo:.0}% of ordered pairs")
    } else {
        format!(", {lo:.0}-{hi:.0}% of ordered pairs")
    }
}

/// The families of the networks `devices` have rows of, in [`FAMILIES`]
/// order.
fn families(inputs: &Inputs, devices: &[&String]) -> Vec<&'static str> {
    let mut present = std::collections::BTreeSet::new();
    for r in inputs
        .results
        .iter()
        .filter(|r| devices.contains(&&r.device))
    {
        present.insert(crate::validation::family_of(r.dataset, &r.model));
    }
    FAMILIES
        .into_iter()
        .filter(|f| present.contains(*f))
        .collect()
}

/// The error a mocked CPU's numbers carry, per family the figure shows:
/// the cross-machine test of the scaling the mocked CPUs use.
fn cpu_error(inputs: &Inputs, devices: &[&String]) -> String {
    let Some(transfer) = inputs.transfer else {
        return "their error on another CPU has not been measured (no cross-machine test)".into();
    };
    let families = families(inputs, devices);
    let several = families.len() > 1;
    let mut parts = Vec::new();
    for family in &families {
        let across = transfer.another_cpu(MOCKED_CPUS, Some(family));
        let name = if several {
            format!("{family} ")
        } else {
            String::new()
        };
        if across.is_empty() {
            parts.push(format!("{name}not measured on another CPU, error unknown"));
        } else {
            parts.push(format!(
                "{name}a factor {}{}",
                factors(&across),
                pairs(&across)
            ));
        }
    }
    format!(
        "their error as measured on another CPU (Table {}: one x86 machine's calibration predicting the other's rows from its specification, {}): {}",
        inputs.transfer_table,
        if transfer.another_cpu(MOCKED_CPUS, None).len() > 1 {
            "each direction"
        } else {
            "one direction"
        },
        parts.join("; ")
    )
}

/// A footer sentence naming which of `devices` are modelled and which
/// measured, each modelled kind with the measured error of its kind of
/// prediction (or that it has none).
pub fn model_note(inputs: &Inputs, devices: &[String]) -> String {
    let of_kind = |kind: DeviceKind| -> Vec<&String> {
        devices
            .iter()
            .filter(|d| modelled_kind(inputs, d) == Some(kind))
            .collect()
    };
    let (cpus, gpus) = (of_kind(DeviceKind::Cpu), of_kind(DeviceKind::Gpu));
    let measured: Vec<&String> = devices.iter().filter(|d| !is_modelled(inputs, d)).collect();
    let join = |v: &[&String]| v.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    if !cpus.is_empty() || !gpus.is_empty() {
        out.push("Modelled (predictions of the performance model, docs/devices.md, marked modelled), not measured.".to_string());
    }
    if !cpus.is_empty() {
        out.push(format!(
            "Modelled CPUs ({}): the calibrated machine's curves carried to each CPU's specification; {}.",
            join(&cpus),
            cpu_error(inputs, &cpus)
        ));
    }
    if !gpus.is_empty() {
        out.push(format!(
            "Modelled GPUs ({}): not validated, no GPU was measured: error unknown.",
            join(&gpus)
        ));
    }
    let graph_compiled = inputs.results.iter().any(|r| {
        devices.contains(&r.device)
            && is_modelled(inputs, &r.device)
            && dlas_devices::GraphCompiler::from_id(&r.compiler).is_some()
    });
    if graph_compiled {
        out.push("Their eager and vendor rows come from the graph-compiler model, never checked against a measurement: error unknown.".into());
    }
    if !measured.is_empty() {
        out.push(format!("Measured: {}.", join(&measured)));
    }
    out.join(" ")
}

/// The model's error on the calibrated machine itself (the catalogue's
/// validation table), in words: what a prediction of this machine's own
/// rows carries.
pub fn model_error(inputs: &Inputs) -> String {
    let errors = inputs.validation.and_then(|v| {
        crate::validation::Errors::of(&v.rows.iter().collect::<Vec<_>>()).map(|e| (e, v.table))
    });
    match errors {
        Some((e, table)) => format!(
            "its error on the calibrated machine itself (Table {}, {} native rows): typical factor {:.2} (median |ln ratio| {:.2}), {:.0}% of ordered pairs right",
            table,
            e.n,
            e.median_abs_log.exp(),
            e.median_abs_log,
            e.agreement().unwrap_or(0.0) * 100.0
        ),
        None => {
            "its error has not been measured (no native row measured on the calibrated machine)"
                .into()
        }
    }
}

/// Which of the study's devices are measured and which modelled, and the
/// error of each kind of prediction, for the top of the report page.
pub fn provenance(inputs: &Inputs) -> String {
    let devices: Vec<String> = inputs
        .study
        .devices
        .iter()
        .map(|d| d.get_ref().clone())
        .collect();
    let measured: Vec<&str> = devices
        .iter()
        .filter(|d| !is_modelled(inputs, d))
        .map(|d| d.as_str())
        .collect();
    format!(
        "Measured on a real machine: {}. Everything else is modelled: predictions of the performance model of docs/devices.md, not measurements (panels, groups and columns marked modelled or predicted). The model is calibrated on the measured machine's layer micro-benchmarks; {}. {}",
        if measured.is_empty() {
            "none".to_string()
        } else {
            measured.join(", ")
        },
        model_error(inputs),
        model_note(
            inputs,
            &devices
                .into_iter()
                .filter(|d| is_modelled(inputs, d))
                .collect::<Vec<_>>()
        )
        .trim_start_matches(
            "Modelled (predictions of the performance model, docs/devices.md, marked modelled), not measured. "
        )
    )
}
