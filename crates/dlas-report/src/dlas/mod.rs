//! The DLAS study's report: the numbered Tables 1-8 and Figures 1-8 under
//! `paper-tables/` and `figures/`, its thirteen observations checked in
//! `paper-tables/claims.md` (and in Table 8), and the page
//! `figures/index.html`. Every study other than the compiler study is
//! reported with this catalogue.
//!
//! Numbering is fixed: reviewers and `--figure N` depend on it.

pub mod analysis;
pub mod illustrations;
pub mod observations;
mod systems;
mod tables;

use crate::catalogue::Catalogue;
use crate::figure::FigureData;
use crate::inputs::Inputs;
use crate::paper_map::{Item, Mapped};
use crate::table::Table;
use anyhow::{Result, bail};
use dlas_core::Dataset;
use dlas_devices::DeviceKind;

/// The study's tables, by number.
pub const TABLES: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
/// The study's figures, by number.
pub const FIGURES: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
/// The claims, with how each is checked (beside Table 8).
pub const CLAIMS: &str = "paper-tables/claims.md";
/// The page a reviewer opens.
pub const PAGE: &str = "figures/index.html";

/// What each figure and table reproduces of the DLAS paper
/// (`../shared/papers/dlas.txt`), which describes Figures 1-2 and Tables
/// 1, 2 and 5; every other number is ours.
/// The map's words for an output whose counterpart in the paper, if any,
/// we cannot name: the paper's text we have cites only some of its items.
const UNKNOWN: &str = "counterpart unknown: the DLAS paper's text we have cites only its Figures 1-2 and Tables 1, 2 and 5, so whether another of its figures or tables shows this cannot be told";

pub const PAPER_MAP: &[Mapped] = &[
    Mapped {
        item: Item::Figure(1),
        paper: "the DLAS paper's Figure 1 (the six layers of the stack, with examples)",
        differs: "drawn from the study file: each layer lists the values the study perturbs, not the paper's examples",
    },
    Mapped {
        item: Item::Figure(2),
        paper: "the DLAS paper's Figure 2 (a dense convolution, weight pruning, channel pruning, quantization)",
        differs: "one real layer (cifar10/resnet18) at each stage instead of a schematic; its weights are the zoo's seeded, untrained ones, so the picture shows where pruning and int8 act, not what trained weights look like; int8 instead of the paper's nine-level illustration",
    },
    Mapped {
        item: Item::Figure(3),
        paper: UNKNOWN,
        differs: "pruning sweeps (compression ratio and remaining MACs per level) of the seeded, untrained networks; the paper chose each level at the elbow of fine-tuned accuracy, ours are the study file's fixed levels",
    },
    Mapped {
        item: Item::Figure(4),
        paper: UNKNOWN,
        differs: "inference time per device, network, compression and algorithm, untuned; mocked devices are the performance model, the host is measured",
    },
    Mapped {
        item: Item::Figure(5),
        paper: UNKNOWN,
        differs: "speedup of each compression over dense; the evidence of observations II, IV-VI",
    },
    Mapped {
        item: Item::Figure(6),
        paper: UNKNOWN,
        differs: "the fastest algorithm per network, compression and device; the evidence of observations VII-IX",
    },
    Mapped {
        item: Item::Figure(7),
        paper: UNKNOWN,
        differs: "expected (remaining MACs) against achieved speedup of pruning; the evidence of observations IV and X",
    },
    Mapped {
        item: Item::Figure(8),
        paper: UNKNOWN,
        differs: "the speedup tuning brings; the evidence of observations XI and XII. The paper tuned TVM 0.8 with Ansor (up to 20,000 trials, early stop at 1,000); these numbers are the native engine's own tuner (docs/tuning.md), and TVM 0.27 with MetaSchedule, measured on the host only, is in Table 10",
    },
    Mapped {
        item: Item::Figure(9),
        paper: "addition A1 of this artifact, no counterpart in the paper (the paper measured every device and had no performance model)",
        differs: "the performance model behind every mocked number, predicted against measured on this machine (native engine rows); the paper measured every device and had no model",
    },
    Mapped {
        item: Item::Figure(10),
        paper: "addition A2 of this artifact, no counterpart in the paper (the paper ran TVM only, against no other runtime)",
        differs: "the systems-software layer measured: the native engine's fastest algorithm, untuned and tuned, against tract, ONNX Runtime, OpenVINO and TVM (the paper compared TVM untuned and tuned only)",
    },
    Mapped {
        item: Item::Table(1),
        paper: "the DLAS paper's Table 1 (the hardware platforms)",
        differs: "adds the measured host and the public figures the performance model reads for each mocked platform",
    },
    Mapped {
        item: Item::Table(2),
        paper: "the DLAS paper's Table 2 (the CIFAR-10 networks, their MACs and parameters)",
        differs: "adds compression at the study file's fixed pruning levels (not the paper's accuracy elbows) counted on seeded, untrained weights; the dense accuracies are published third-party numbers (data/accuracy/published.csv), not measured here",
    },
    Mapped {
        item: Item::Table(3),
        paper: UNKNOWN,
        differs: "CIFAR-10 inference time on the CPU platforms per network, compression and algorithm",
    },
    Mapped {
        item: Item::Table(4),
        paper: UNKNOWN,
        differs: "CIFAR-10 inference time on the GPU platforms per network, compression and algorithm",
    },
    Mapped {
        item: Item::Table(5),
        paper: "the DLAS paper's Table 5 (the ImageNet networks, their MACs and parameters)",
        differs: "as Table 2: fixed pruning levels on seeded, untrained weights; published third-party dense accuracies",
    },
    Mapped {
        item: Item::Table(6),
        paper: UNKNOWN,
        differs: "ImageNet inference time on the CPU platforms per network, compression and algorithm",
    },
    Mapped {
        item: Item::Table(7),
        paper: UNKNOWN,
        differs: "ImageNet inference time on the GPU platforms per network, compression and algorithm",
    },
    Mapped {
        item: Item::Table(8),
        paper: "addition A3 of this artifact, no counterpart in the paper (the paper states its observations in its text; this table checks them)",
        differs: "the paper's thirteen observations (stated in its text) checked on each results file, with evidence",
    },
    Mapped {
        item: Item::Table(9),
        paper: "addition A4 of this artifact, no counterpart in the paper (the paper had no performance model to validate)",
        differs: "the performance model's error on this machine per algorithm, format, compression, tuning, network and dataset",
    },
    Mapped {
        item: Item::Table(10),
        paper: "addition A5 of this artifact, no counterpart in the paper (the paper ran TVM only, against no other runtime)",
        differs: "Figure 10's medians with their 95% intervals, and the fastest compiler decided with them (overlapping intervals are ties)",
    },
    Mapped {
        item: Item::Table(11),
        paper: "addition A6 of this artifact, no counterpart in the paper (the paper had no performance model to carry between machines)",
        differs: "the performance model on another CPU: each calibrated machine's model predicting the other machine's measured rows from its specification, both directions, beside each machine's own calibration; the error every mocked CPU's numbers carry",
    },
];

/// The DLAS study's catalogue.
pub static CATALOGUE: Catalogue = Catalogue {
    study: "dlas",
    tables: TABLES,
    figures: FIGURES,
    table_dir: "paper-tables",
    figure_dir: "figures",
    claims_file: CLAIMS,
    page: PAGE,
    command: "cargo xtask reproduce --all",
    claims_command: "dlas claims FILE...",
    transfer_table: 11,
    validation_table: 9,
    verdict_table: Some((8, observations::table)),
    compression_tables: &[2, 5, 8],
    compression_figures: &[2, 3, 7],
    table,
    figure,
    observations: observations::observations,
    claims_markdown: observations::markdown,
    paper_map: PAPER_MAP,
    disclosures: DISCLOSURES,
};

/// What the DLAS study's numbers rest on that a reader could mistake; the
/// footers of the outputs concerned say the same with their numbers.
pub const DISCLOSURES: &[&str] = &[
    "Untrained weights. Every network carries the zoo's seeded, untrained weights. The pruning sweeps (Figure 3, the compression columns of Tables 2 and 5, the expected speedups of Figure 7 and of observations IV and X) and Figure 2's real layer are computed on them: they show what L1 pruning of those weights removes, and where (the initial scale of each layer decides which layers lose most), not what pruning a trained network would remove; they say nothing of accuracy. Inference times do not depend on weight values, except through the sparsity pruning leaves.",
    "Fixed pruning levels. The paper ran each pruning technique at the elbow of its fine-tuned accuracy; no pruned network's accuracy is recorded here, so each technique runs at the study file's fixed level (weight pruning 80% of weights, channel pruning 50% of channels), and comparisons between the techniques (observation IV) are at those levels.",
    "Published accuracies. The accuracies in Tables 2 and 5, Figure 3 and observations I and III are published third-party numbers for the dense networks (data/accuracy/published.csv names each source: kuangliu/pytorch-cifar for CIFAR-10, torchvision for ImageNet); nothing here trains a network or measures its accuracy.",
    "Modelled devices. The i7, HiKey 970 and Xavier rows come from a performance model of each platform's public specifications (docs/devices.md), not from the paper's hardware; only the host rows are measured. A verdict on modelled rows is a finding about the model.",
    "TVM and Ansor replaced. The paper's algorithms were TVM 0.8 computes with schedules from Ansor; here the algorithm axis (Figures 4-8, Tables 3-4 and 6-7, every observation) is the native engine's own kernels and its own tuner, and TVM 0.27 with MetaSchedule (Ansor's successor: no Ansor or Relay in that version) runs as a measured compiler on the host beside ONNX Runtime, OpenVINO and tract (Table 10, Figure 10; docs/compilers.md).",
    "Paper results with no output here. The fine-tuned accuracy of each compressed network (the paper's accuracy against compression, and observations I and III(b)): nothing here trains or fine-tunes, so no compressed accuracy is recorded and those checks say so. EfficientNet-B0's large int8 accuracy drop: the same reason. The paper's measured i7, HiKey 970 and Xavier times: those devices are modelled (above). Ansor's tuned times: replaced (above).",
];

/// Table `n` as data.
pub fn table(n: usize, inputs: &Inputs) -> Result<Table> {
    match n {
        1 => Ok(tables::hardware(inputs)),
        2 => tables::networks(inputs, Dataset::Cifar10, 2),
        3 => Ok(analysis::time_table(
            inputs,
            3,
            Dataset::Cifar10,
            DeviceKind::Cpu,
        )),
        4 => Ok(analysis::time_table(
            inputs,
            4,
            Dataset::Cifar10,
            DeviceKind::Gpu,
        )),
        5 => tables::networks(inputs, Dataset::Imagenet, 5),
        6 => Ok(analysis::time_table(
            inputs,
            6,
            Dataset::Imagenet,
            DeviceKind::Cpu,
        )),
        7 => Ok(analysis::time_table(
            inputs,
            7,
            Dataset::Imagenet,
            DeviceKind::Gpu,
        )),
        8 => Ok(observations::table(&CATALOGUE.check(inputs))),
        9 => Ok(crate::validation::table_of(inputs.validation, 9)),
        10 => Ok(systems::table(inputs, 10)),
        11 => Ok(crate::transfer::table_of(inputs.transfer, 11)),
        _ => bail!("there is no table {n}; tables: {TABLES:?}"),
    }
}

/// Figure `n` as data.
pub fn figure(n: usize, inputs: &Inputs) -> Result<FigureData> {
    let native_footer = || analysis::native_footer(inputs);
    match n {
        1 => Ok(illustrations::stack(inputs)),
        2 => illustrations::layer(inputs),
        3 => Ok(illustrations::sweeps(inputs)),
        4 => Ok(analysis::inference_time(inputs)),
        5 => Ok(analysis::compression_speedup(
            inputs,
            format!("{} {}", native_footer(), analysis::winograd_note(inputs)),
        )),
        6 => Ok(analysis::best_algorithm(
            inputs,
            format!("{} {}", native_footer(), analysis::winograd_note(inputs)),
        )),
        7 => Ok(analysis::expected_vs_achieved(
            inputs,
            &|d, m, c| inputs.sweeps.expected_speedup(d, m, c),
            format!(
                "{} Expected speedups: {} (dense MACs over the MACs left at the chosen level). {} {}",
                native_footer(),
                crate::compression::sweep_path(&inputs.study.name),
                illustrations::untrained_note(),
                illustrations::levels_note(inputs)
            ),
        )),
        8 => Ok(analysis::tuning_speedup(
            inputs,
            format!("{} {}", native_footer(), analysis::winograd_note(inputs)),
        )),
        9 => Ok(crate::validation::figure_of(inputs.validation, 9)),
        10 => Ok(systems::figure(inputs, 10)),
        _ => bail!("there is no figure {n}; figures: {FIGURES:?}"),
    }
}
