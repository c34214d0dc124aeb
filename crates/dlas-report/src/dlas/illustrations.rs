//! Figures 1 to 3: the acceleration stack as the study file declares it,
//! compression on one real layer, and the pruning sweeps of every network.

use crate::compression::{LayerSlice, SweepPoint};
use crate::figure::{Body, FigureData, LinePanel, LineSeries, MatrixPanel, StackLayer};
use crate::inputs::{Inputs, study_path};
use dlas_core::Compression;

/// Figure 1: the six layers of the stack with the values the study perturbs.
/// What the compression facts rest on, for the footers of every output
/// drawn from them: the weights are seeded and untrained, so the sweeps
/// count what L1 pruning of those weights removes (which layers lose
/// weights follows their initial scale, not training), not what pruning a
/// trained network removes or what accuracy it keeps.
pub fn untrained_note() -> String {
    format!(
        "The zoo's weights are seeded (seed {}) and untrained: the pruning counts show what L1 pruning of those weights removes, where the initial scale of each layer decides which layers lose most, not what pruning a trained network would remove, and say nothing of accuracy.",
        dlas_zoo::weights::MODEL_SEED
    )
}

/// How the chosen pruning levels were chosen, from the recorded
/// accuracies and the sweeps: the study file's fixed levels unless a
/// pruned network's accuracy is recorded.
pub fn levels_note(inputs: &Inputs) -> String {
    let recorded = inputs
        .accuracy
        .iter()
        .filter(|a| a.technique.is_pruning())
        .count();
    let mut levels: Vec<String> = Vec::new();
    for technique in [Compression::WeightPruning, Compression::ChannelPruning] {
        let mut at: Vec<f64> = inputs
            .sweeps
            .points
            .iter()
            .filter(|p| p.chosen && p.technique == technique)
            .map(|p| p.level)
            .collect();
        at.sort_by(f64::total_cmp);
        at.dedup();
        if !at.is_empty() {
            let at: Vec<String> = at.iter().map(|l| format!("{:.0}%", 100.0 * l)).collect();
            levels.push(format!("{technique} {}", at.join(", ")));
        }
    }
    let levels = levels.join(", ");
    if recorded == 0 {
        format!(
            "No pruned network's accuracy is recorded, so every chosen level is the study file's fixed level ({levels}), not the elbow of fine-tuned accuracy the paper chose."
        )
    } else {
        format!(
            "Chosen levels ({levels}): the elbow of the {recorded} recorded pruned accuracies where a network has them, else the study file's fixed level."
        )
    }
}

/// Where the recorded accuracies come from.
pub const PUBLISHED_NOTE: &str = "Accuracies are published third-party numbers for the dense networks (data/accuracy/published.csv names each source); nothing here trains a network or measures its accuracy.";

pub fn stack(inputs: &Inputs) -> FigureData {
    let s = inputs.study;
    let join = |v: Vec<String>| v.join(", ");
    let datasets = s
        .datasets
        .iter()
        .map(|d| {
            let [c, h, w] = d.id.input_chw();
            format!("{} ({c}x{h}x{w} images, {} classes)", d.id, d.id.classes())
        })
        .collect();
    let mut models: Vec<String> = s
        .datasets
        .iter()
        .map(|d| {
            format!(
                "{}: {}",
                d.id,
                join(d.models.iter().map(|m| m.get_ref().clone()).collect())
            )
        })
        .collect();
    if !s.onnx_models.is_empty() {
        models.push(format!(
            "ONNX files: {}",
            join(
                s.onnx_models
                    .iter()
                    .map(|m| format!("{} ({})", m.id.get_ref(), m.dataset))
                    .collect()
            )
        ));
    }
    let optimizations = vec![join(
        s.compressions
            .iter()
            .map(|c| {
                let mut text = c.id.to_string();
                if let Some(level) = c.level {
                    text += &format!(" (level {})", dlas_core::plan::format_level(level));
                }
                for (model, level) in &c.levels {
                    text += &format!(" ({model}: {})", dlas_core::plan::format_level(*level));
                }
                text
            })
            .collect(),
    )];
    let algorithms = vec![
        format!(
            "algorithms: {}",
            join(s.algorithms.iter().map(|a| a.to_string()).collect())
        ),
        format!(
            "formats: {}",
            join(s.formats.iter().map(|f| f.to_string()).collect())
        ),
        format!(
            "layouts: {}",
            join(s.layouts.iter().map(|l| l.to_string()).collect())
        ),
    ];
    let software = vec![join(
        s.compilers
            .iter()
            .map(|c| {
                let tuning: Vec<&str> = c
                    .tuned
                    .iter()
                    .map(|t| if *t { "tuned" } else { "untuned" })
                    .collect();
                let kernels = if c.algorithms {
                    "; the algorithm axis"
                } else {
                    "; its own kernels"
                };
                format!("{} ({}{kernels})", c.id.get_ref(), tuning.join(", "))
            })
            .collect(),
    )];
    let hardware = vec![join(
        s.devices
            .iter()
            .map(|d| {
                let id = d.get_ref();
                match inputs.specs.iter().find(|spec| &spec.id == id) {
                    Some(spec) => format!("{id} ({}, modelled)", spec.name),
                    None => format!("{id} (this machine, measured)"),
                }
            })
            .collect(),
    )];
    let layers = [
        ("Datasets & problem spaces", datasets),
        ("Models & neural architectures", models),
        ("Model optimizations", optimizations),
        ("Algorithms & data formats", algorithms),
        ("Systems software", software),
        ("Hardware", hardware),
    ]
    .map(|(name, values)| StackLayer {
        name: name.into(),
        values,
    })
    .to_vec();
    let plan = inputs.plan;
    FigureData {
        number: 1,
        title: format!(
            "The acceleration stack as the study `{}` perturbs it",
            s.name
        ),
        y_label: String::new(),
        log_y: false,
        body: Body::Stack(layers),
        footer: format!(
            "Source: the study file {} ({}): {} planned combinations of {} after {} exclusion rules. No results enter this figure.",
            study_path(inputs),
            s.title,
            plan.combinations.len(),
            plan.total_before_rules,
            s.rules.len()
        ),
    }
}

/// Figure 2: one real layer dense, weight-pruned, channel-pruned and in int8.
pub fn layer(inputs: &Inputs) -> anyhow::Result<FigureData> {
    let l: &LayerSlice = inputs
        .layer
        .ok_or_else(|| anyhow::anyhow!("figure 2 needs the layer of data/compression/"))?;
    let to_f64 = |v: &[f32]| v.iter().map(|x| *x as f64).collect::<Vec<f64>>();
    let scale = l.dense.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
    let zeros = |v: &[f32]| v.iter().filter(|x| **x == 0.0).count();
    let cells = l.rows * l.columns;
    let share = |n: usize| format!("{:.0}%", 100.0 * n as f64 / cells as f64);
    let mut distinct: Vec<i8> = l.int8.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let panel = |title: String, note: String, values: Vec<f64>, scale: f64| MatrixPanel {
        title,
        note,
        rows: l.rows,
        columns: l.columns,
        values,
        scale,
    };
    let panels = vec![
        panel(
            "(a) dense float32 weights".into(),
            format!("max |w| = {:.3}", scale),
            to_f64(&l.dense),
            scale,
        ),
        panel(
            format!(
                "(b) weight pruning at {} (global L1)",
                dlas_core::plan::format_level(l.weight_pruning_level)
            ),
            format!(
                "{} of the shown weights are zero",
                share(zeros(&l.weight_pruned))
            ),
            to_f64(&l.weight_pruned),
            scale,
        ),
        panel(
            format!(
                "(c) channel pruning at {} (L1, zeroed)",
                dlas_core::plan::format_level(l.channel_pruning_level)
            ),
            format!(
                "{} zero: whole filters (rows) and inputs from pruned channels (column blocks)",
                share(zeros(&l.channel_pruned))
            ),
            to_f64(&l.channel_pruned),
            scale,
        ),
        panel(
            "(d) int8 codes (per-channel symmetric scale)".into(),
            format!(
                "{} distinct codes of 255 in the shown weights; full colour at +-127",
                distinct.len()
            ),
            l.int8.iter().map(|q| *q as f64).collect(),
            127.0,
        ),
    ];
    let [o, i, kh, kw] = l.shape;
    Ok(FigureData {
        number: 2,
        title: format!(
            "Compression of one real layer: {}/{} {}",
            l.dataset, l.model, l.layer
        ),
        y_label: String::new(),
        log_y: false,
        body: Body::Matrices { columns: 2, panels },
        footer: format!(
            "Source: {} (dlas-compress on the zoo's weights of {}/{}, seed {}). Shown: the first {} of {o} output channels (rows) by the first {} of {} weights per channel (columns: {} input channels x {kh}x{kw} kernel) of the {o}x{i}x{kh}x{kw} weight. A real layer of the network, with seeded, untrained weights: it shows where each technique acts, not the weights of a trained layer. {} No results enter this figure.",
            crate::compression::layer_path(&inputs.study.name),
            l.dataset,
            l.model,
            dlas_zoo::weights::MODEL_SEED,
            l.rows,
            l.columns,
            i * kh * kw,
            l.columns / (kh * kw).max(1),
            levels_note(inputs),
        ),
    })
}

/// Lines within this factor of each other at every level up to some
/// level are said to coincide there.
const COINCIDE: f64 = 1.1;

/// A sentence for a panel whose lines coincide from level 0 to a level
/// of 0.5 or more (weight pruning's compression ratio: global pruning
/// zeroes the same share of every network's weights): where, and that
/// only the markers tell the networks apart there. None otherwise.
fn coinciding_lines(panel: &LinePanel) -> Option<String> {
    let drawn: Vec<&LineSeries> = panel
        .series
        .iter()
        .filter(|s| !s.points.is_empty())
        .collect();
    if drawn.len() < 2 {
        return None;
    }
    let mut levels: Vec<f64> = drawn
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p[0]))
        .collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    let (mut upto, mut spread) = (None, 1f64);
    for level in levels {
        let ys: Vec<f64> = drawn
            .iter()
            .filter_map(|s| s.points.iter().find(|p| p[0] == level).map(|p| p[1]))
            .collect();
        let (low, high) = ys
            .iter()
            .fold((f64::INFINITY, 0f64), |(l, h), y| (l.min(*y), h.max(*y)));
        if ys.len() < drawn.len() || low <= 0.0 || high / low > COINCIDE {
            break;
        }
        spread = spread.max(high / low);
        upto = Some(level);
    }
    let upto = upto.filter(|l| *l >= 0.5)?;
    Some(format!(
        "In \"{}\" the {} lines lie within {:.0}% of each other up to level {upto}, so there only their markers tell them apart. ",
        panel.title,
        drawn.len(),
        (spread - 1.0) * 100.0
    ))
}

/// Figure 3: compression ratio, remaining MACs and recorded accuracy
/// against the pruning level, per network and technique.
pub fn sweeps(inputs: &Inputs) -> FigureData {
    let sweeps = inputs.sweeps;
    let models = inputs.study.models();
    let techniques = [Compression::WeightPruning, Compression::ChannelPruning];
    type Metric<'a> = &'a dyn Fn(&SweepPoint) -> Option<f64>;
    let ratio = |p: &SweepPoint| sweeps.compression_ratio(p);
    let macs = |p: &SweepPoint| sweeps.macs_left(p).map(|m| 100.0 * m);
    let metrics: [(&str, &str, bool, Metric); 2] = [
        (
            "compression ratio",
            "dense / non-zero parameters (x)",
            true,
            &ratio,
        ),
        ("remaining MACs", "MACs left (% of dense)", false, &macs),
    ];
    let mut panels = Vec::new();
    for (name, y_label, log_y, metric) in metrics {
        for technique in techniques {
            // Every network is a series, even without points, so that a
            // network has the same colour in every panel.
            let series = models
                .iter()
                .map(|(dataset, model)| {
                    let dense = sweeps.dense(*dataset, model).into_iter();
                    let points: Vec<[f64; 2]> = dense
                        .chain(sweeps.levels(*dataset, model, technique))
                        .filter_map(|p| Some([p.level, metric(p)?]))
                        .collect();
                    let marked = sweeps
                        .chosen(*dataset, model, technique)
                        .and_then(|p| Some([p.level, metric(p)?]));
                    LineSeries {
                        name: format!("{dataset}/{model}"),
                        points,
                        marked,
                    }
                })
                .collect();
            panels.push(LinePanel {
                title: format!("{technique}: {name}"),
                x_label: "pruning level (fraction pruned; 0: dense)".into(),
                x_range: None,
                x_powers_of_two: false,
                y_label: y_label.into(),
                log_y,
                y_range: None,
                tie: None,
                series,
                note: String::new(),
            });
        }
    }
    for technique in techniques {
        let mut series = Vec::new();
        for (dataset, model) in &models {
            let mut points: Vec<[f64; 2]> = inputs
                .accuracy
                .iter()
                .filter(|a| a.dataset == *dataset && &a.model == model)
                .filter_map(|a| match a.technique {
                    Compression::Dense => Some([0.0, a.top1]),
                    t if t == technique => Some([a.level?, a.top1]),
                    _ => None,
                })
                .collect();
            points.sort_by(|a, b| a[0].total_cmp(&b[0]));
            let chosen = sweeps.chosen(*dataset, model, technique).map(|p| p.level);
            let marked = points
                .iter()
                .copied()
                .find(|p| chosen.is_some_and(|c| (c - p[0]).abs() < 1e-9));
            series.push(LineSeries {
                name: format!("{dataset}/{model}"),
                points,
                marked,
            });
        }
        let pruned_recorded = series.iter().any(|s| s.points.len() > 1);
        panels.push(LinePanel {
            title: format!("{technique}: recorded top-1 accuracy"),
            x_label: "pruning level (fraction pruned; 0: dense)".into(),
            x_range: None,
            x_powers_of_two: false,
            y_label: "top-1 (%)".into(),
            log_y: false,
            y_range: None,
            tie: None,
            series,
            note: if pruned_recorded {
                String::new()
            } else {
                format!(
                    "Only dense accuracy is recorded (at level 0); {technique} accuracies appear here once added to data/accuracy/published.csv."
                )
            },
        });
    }
    let coinciding: Vec<String> = panels.iter().filter_map(coinciding_lines).collect();
    FigureData {
        number: 3,
        title: "Pruning sweeps: compression ratio, remaining MACs and recorded accuracy per network (chosen level ringed)".into(),
        y_label: String::new(),
        log_y: false,
        body: Body::Lines {
            columns: 2,
            panels,
        },
        footer: format!(
            "Each network has its own colour, marker shape and dash pattern (legend above). {}Source: {} (dlas-compress on the zoo's weights, seed {}: global L1 weight pruning, L1 channel pruning with zeroed channels; the study's schedules) and data/accuracy/published.csv (recorded accuracies only, never estimated). {} {} {} No results enter this figure.",
            coinciding.concat(),
            crate::compression::sweep_path(&inputs.study.name),
            dlas_zoo::weights::MODEL_SEED,
            untrained_note(),
            levels_note(inputs),
            PUBLISHED_NOTE,
        ),
    }
}
