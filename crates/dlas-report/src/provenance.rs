//! Which numbers are measured and which modelled, said wherever a reader
//! looks: panel titles, table columns, footers and the top of the report
//! page, with the model's error measured on this machine (the catalogue's
//! validation table).

use crate::inputs::Inputs;

/// Whether `device`'s numbers come from the performance model (a mocked
/// device) rather than a measurement.
pub fn is_modelled(inputs: &Inputs, device: &str) -> bool {
    inputs.specs.iter().any(|s| s.id == device)
}

/// A panel's title: the device and whether its numbers are modelled or measured.
pub fn panel_title(inputs: &Inputs, device: &str) -> String {
    if is_modelled(inputs, device) {
        format!("{device} (modelled)")
    } else {
        format!("{device} (measured)")
    }
}

/// A footer sentence naming which of `devices` are modelled and which
/// measured, with the model's error measured on this machine.
pub fn model_note(inputs: &Inputs, devices: &[String]) -> String {
    let (modelled, measured): (Vec<&String>, Vec<&String>) =
        devices.iter().partition(|d| is_modelled(inputs, d));
    let join = |v: &[&String]| v.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ");
    let mut out = String::new();
    if !modelled.is_empty() {
        out += &format!(
            "Modelled (predicted by the performance model, docs/devices.md; hollow bars, panels marked modelled): {}; {}.",
            join(&modelled),
            model_error(inputs)
        );
    }
    if !measured.is_empty() {
        if !out.is_empty() {
            out.push(' ');
        }
        out += &format!("Measured: {}.", join(&measured));
    }
    out
}

/// The model's error as measured on this machine (the catalogue's
/// validation table), in words.
pub fn model_error(inputs: &Inputs) -> String {
    let errors = inputs.validation.and_then(|v| {
        crate::validation::Errors::of(&v.rows.iter().collect::<Vec<_>>()).map(|e| (e, v.table))
    });
    match errors {
        Some((e, table)) => format!(
            "its error measured on this machine (Table {}, {} native rows): typical factor {:.2} (median |ln ratio| {:.2}), {:.0}% of ordered pairs right",
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
/// model's error measured on this machine, for the top of the report page.
pub fn provenance(inputs: &Inputs) -> String {
    let devices: Vec<String> = inputs
        .study
        .devices
        .iter()
        .map(|d| d.get_ref().clone())
        .collect();
    let (modelled, measured): (Vec<&String>, Vec<&String>) =
        devices.iter().partition(|d| is_modelled(inputs, d));
    let list = |v: &[&String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")
        }
    };
    format!(
        "Measured on a real machine: {}. Modelled (predictions of the performance model of docs/devices.md, not measurements; hollow bars, panels and columns marked modelled or predicted): {}. The model is calibrated on this machine's micro-benchmarks; {}. The GPU model is not validated.",
        list(&measured),
        list(&modelled),
        model_error(inputs)
    )
}
