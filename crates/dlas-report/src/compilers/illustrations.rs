//! The compiler study's drawn figures: how the networks are organised (2,
//! from the zoo's IR), the benchmark flow (3, from the study file and its
//! plan) and the iterative refinement loop (4).

use super::{block_of, config};
use crate::figure::{Body, FigureData, StackLayer};
use crate::inputs::{Architecture, Inputs, study_path};
use anyhow::Result;
use dlas_core::ResultRow;
use dlas_zoo::{Graph, Op};
use std::collections::BTreeSet;

/// Stages, blocks and layers of a graph, read from its node names: the
/// zoo scopes every node as `stage.block.operator`, so the first name
/// component is the stage and the second the block within it.
fn organization(graph: &Graph) -> Vec<String> {
    struct Stage<'a> {
        name: &'a str,
        blocks: BTreeSet<&'a str>,
        layers: usize,
    }
    let mut stages: Vec<Stage> = Vec::new();
    for node in graph.nodes.iter().skip(1) {
        let parts: Vec<&str> = node.name.split('.').collect();
        let name = if parts.len() >= 2 {
            parts[0]
        } else {
            "top level"
        };
        if stages.last().is_none_or(|s| s.name != name) {
            stages.push(Stage {
                name,
                blocks: BTreeSet::new(),
                layers: 0,
            });
        }
        let stage = stages.last_mut().expect("pushed above");
        if parts.len() >= 3 {
            stage.blocks.insert(parts[1]);
        }
        if matches!(node.op, Op::Conv(_) | Op::Linear { .. }) || node.op.kind() == "Attention" {
            stage.layers += 1;
        }
    }
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    // Scopes without layers or blocks (a pooling or flatten between
    // stages) organise nothing.
    let stages: Vec<String> = stages
        .iter()
        .filter(|s| s.layers > 0 || !s.blocks.is_empty())
        .map(|s| match s.blocks.len() {
            0 => format!("{}: {}", s.name, count(s.layers, "layer")),
            n => format!(
                "{}: {}, {}",
                s.name,
                count(n, "block"),
                count(s.layers, "layer")
            ),
        })
        .collect();
    let operators: Vec<String> = graph
        .op_histogram()
        .into_iter()
        .filter(|(k, _)| *k != "Input")
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    vec![
        format!("stages: {}", stages.join("; ")),
        format!("operators: {}", operators.join(", ")),
    ]
}

/// Figure 2: every whole network, and each block type at its smallest
/// depth, as its stages, blocks and layers.
pub fn organization_figure(inputs: &Inputs) -> Result<FigureData> {
    let mut layers = Vec::new();
    let mut block_kinds = BTreeSet::new();
    for (dataset, model) in inputs.study.models() {
        if let Some((kind, _)) = block_of(&model)
            && !block_kinds.insert(kind.to_string())
        {
            continue;
        }
        let graph = (dlas_zoo::find(dataset, &model)?.build)();
        layers.push(StackLayer {
            name: format!("{model} ({})", Architecture::of(&graph).label()),
            values: organization(&graph),
        });
    }
    Ok(FigureData {
        number: 2,
        title: "How the networks are organised: stages, blocks and layers".into(),
        y_label: String::new(),
        log_y: false,
        body: Body::Stack(layers),
        footer: "Source: the zoo's graph IR (crates/dlas-zoo); stages and blocks are the scopes of its node names, \
                 layers its convolutions, linear layers and attention operators. Block-repeat models appear once, at their smallest depth. \
                 No results enter this figure."
            .into(),
    })
}

/// Figure 3: the benchmark flow, from the study file and its plan.
pub fn flow(inputs: &Inputs) -> FigureData {
    let study = inputs.study;
    let plan = inputs.plan;
    let devices: Vec<String> = study.devices.iter().map(|d| d.get_ref().clone()).collect();
    let coordinator = vec![
        format!(
            "`dlas plan --study {}`: {} combinations ({} networks x compilers x devices x batch sizes {:?}, less {} excluded by rules and per-device batch limits)",
            study.name,
            plan.combinations.len(),
            study.models().len(),
            study.protocol.batch,
            plan.total_before_rules - plan.combinations.len()
        ),
        "`dlas run --device D` per device, or `dlas cluster submit`: each device's combinations in shards, resumable".into(),
    ];
    let kinds: Vec<String> = devices
        .iter()
        .map(|id| match inputs.specs.iter().find(|s| &s.id == id) {
            Some(spec) => format!("{id} ({}, modelled)", spec.name),
            None => format!("{id} (this machine, measured)"),
        })
        .collect();
    let compilers: Vec<String> = devices
        .iter()
        .map(|id| {
            let configs: BTreeSet<String> = plan
                .combinations
                .iter()
                .filter(|c| &c.device == id)
                .map(|c| super::config_of(&c.compiler, c.tuned))
                .collect();
            format!(
                "{id}: {}",
                configs.into_iter().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    let results: Vec<String> = inputs
        .result_files
        .iter()
        .map(|f| {
            let rows: &[ResultRow] = &inputs.results[f.rows.clone()];
            let measured: BTreeSet<String> = rows.iter().map(config).collect();
            format!(
                "{}: {} rows ({})",
                f.path,
                rows.len(),
                measured.into_iter().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    let report = vec![format!(
        "`cargo xtask reproduce --study {}`: Figures {} in {}, Tables {} and the checked findings in {}",
        study.name,
        numbers(super::FIGURES),
        super::FIGURE_DIR,
        numbers(super::TABLES),
        super::TABLE_DIR
    )];
    let layers = [
        ("Coordinator", coordinator),
        ("Devices", kinds),
        ("Compilers on each device", compilers),
        ("Results", results),
        ("Report", report),
    ]
    .map(|(name, values)| StackLayer {
        name: name.into(),
        values,
    })
    .to_vec();
    FigureData {
        number: 3,
        title: format!("The benchmark flow of the study `{}`", study.name),
        y_label: String::new(),
        log_y: false,
        body: Body::Stack(layers),
        footer: format!(
            "Source: the study file {}, its plan, the device specifications in data/devices/ and the results files named in the Results band.",
            study_path(inputs)
        ),
    }
}

/// Figure 4: design, development and deployment, refined by what the
/// measurements show, with what this artifact gives at each step.
pub fn refinement(inputs: &Inputs) -> FigureData {
    let study = inputs.study;
    let mut architectures: Vec<String> = Vec::new();
    let mut blocks: BTreeSet<String> = BTreeSet::new();
    for (dataset, model) in study.models() {
        if let Some((kind, _)) = block_of(&model) {
            blocks.insert(kind.to_string());
            continue;
        }
        if let Ok(net) = dlas_zoo::find(dataset, &model) {
            let graph = (net.build)();
            architectures.push(format!("{model} ({})", Architecture::of(&graph).label()));
        }
    }
    let blocks = if blocks.is_empty() {
        "no block-repeat models in this study".to_string()
    } else {
        format!(
            "block-repeat models: {}",
            blocks.into_iter().collect::<Vec<_>>().join(", ")
        )
    };
    let layers = [
        (
            "Design",
            vec![
                format!("architectures: {}", architectures.join(", ")),
                blocks,
            ],
        ),
        (
            "Development",
            vec![format!(
                "compile each network with every compiler of each device and sweep batch sizes {:?} (Figures 1, 5, 6)",
                study.protocol.batch
            )],
        ),
        (
            "Deployment",
            vec!["per device: the compiler and batch size from RTR, ASE, BSR and the saturation batch (Table 2, Figure 7)".into()],
        ),
        (
            "Empirical analysis, back to design",
            vec![format!(
                "the findings checked on every results file (`dlas claims --study {} FILE`) decide the next design",
                study.name
            )],
        ),
    ]
    .map(|(name, values)| StackLayer {
        name: name.into(),
        values,
    })
    .to_vec();
    FigureData {
        number: 4,
        title: "Iterative refinement guided by empirical analysis".into(),
        y_label: String::new(),
        log_y: false,
        body: Body::Stack(layers),
        footer: format!(
            "The loop runs from the last band back to the first. Source: the study file {} and the zoo's graph IR; no results enter this figure.",
            study_path(inputs)
        ),
    }
}

/// A catalogue's numbers as a range, "1-8", so the flow names what the
/// catalogue holds rather than a count written by hand.
fn numbers(items: &[usize]) -> String {
    match (items.first(), items.last()) {
        (Some(first), Some(last)) if first != last => format!("{first}-{last}"),
        (Some(only), _) => only.to_string(),
        _ => "none".into(),
    }
}
