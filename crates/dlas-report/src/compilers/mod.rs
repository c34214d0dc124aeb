//! The compiler study's report (`data/studies/compilers.toml`): its own
//! numbering of Figures 1-8 and Tables 1-5 ([`FIGURES`], [`TABLES`]), written under
//! `figures/compilers/` and `paper-tables/compilers/`, with its findings
//! checked in `paper-tables/compilers/claims.md` and its own report page,
//! `figures/compilers/index.html`.
//!
//! A study named `compilers` gets this catalogue ([`crate::catalogue_of`]);
//! every other study gets the DLAS catalogue (`dlas/`), which stays the
//! default.

mod figures;
pub mod findings;
mod illustrations;
mod rows;
mod struggle;

pub use rows::{
    Curves, Net, PAIRS, Reversal, TUNERS, block_of, config, config_of, devices_with_rows,
    reversals, whole_networks,
};

use crate::catalogue::Catalogue;
use crate::figure::FigureData;
use crate::inputs::Inputs;
use crate::paper_map::{Item, Mapped};
use crate::table::Table;
use anyhow::{Result, bail};

/// The name of the study this catalogue reports.
pub const STUDY: &str = "compilers";
/// The compiler study's tables, by number.
pub const TABLES: &[usize] = &[1, 2, 3, 4, 5];
/// The compiler study's figures, by number.
pub const FIGURES: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8];
/// Where its figures and tables go.
pub const FIGURE_DIR: &str = "figures/compilers";
pub const TABLE_DIR: &str = "paper-tables/compilers";
/// Its findings, checked.
pub const CLAIMS: &str = "paper-tables/compilers/claims.md";
/// Its report page.
pub const PAGE: &str = "figures/compilers/index.html";

/// What each figure and table reproduces of NGraphBench
/// (`../shared/papers/ngraphbench-abstract.txt`). The paper has twelve
/// figures; we have the captions of Figures 1-5 only, so an output that
/// matches none of those is marked as ours.
pub const PAPER_MAP: &[Mapped] = &[
    Mapped {
        item: Item::Figure(1),
        paper: "NGraphBench's Figure 1 (EfficientNet against Swin before and after TensorRT on the Orin and OpenVINO on the Xeon)",
        differs: "every network of the study at batch 1, on mocked devices (eager against the modelled vendor compiler, not TensorRT or OpenVINO) and the host; the named reversal is checked as finding C1a",
    },
    Mapped {
        item: Item::Figure(2),
        paper: "NGraphBench's Figure 2 (network architecture layer organization)",
        differs: "drawn from the zoo's graphs of the study's networks",
    },
    Mapped {
        item: Item::Figure(3),
        paper: "NGraphBench's Figure 3 (the benchmark's high-level flow)",
        differs: "our flow: study file, planner, runner or cluster, results, report",
    },
    Mapped {
        item: Item::Figure(4),
        paper: "NGraphBench's Figure 4 (iterative refinement guided by empirical analysis)",
        differs: "redrawn; the same loop",
    },
    Mapped {
        item: Item::Figure(5),
        paper: "NGraphBench's Figure 5 (throughput of a vendor compiler against the uncompiled baseline)",
        differs: "mocked devices (the performance model) and the measured host, batch sizes 1-64 (host up to 8)",
    },
    Mapped {
        item: Item::Figure(6),
        paper: "counterpart unknown: we have only the captions of NGraphBench's Figures 1-5, and none of them shows this",
        differs: "the compiler's gain against depth for block-repeat models, the evidence of finding C3",
    },
    Mapped {
        item: Item::Figure(7),
        paper: "counterpart unknown: we have only the captions of NGraphBench's Figures 1-5, and none of them shows this",
        differs: "RTR, BSR and ASE (the abstract's metrics, defined in docs/metrics.md) per network, compiler and device",
    },
    Mapped {
        item: Item::Figure(8),
        paper: "addition A1 of this artifact, no counterpart in NGraphBench (it had no performance model)",
        differs: "the device model behind every mocked number against the native-engine rows measured on the calibrated machine (the same validation as the DLAS study's Figure 9)",
    },
    Mapped {
        item: Item::Table(1),
        paper: "counterpart unknown: no NGraphBench table caption is in the text we have",
        differs: "the devices and the compilers compared on each",
    },
    Mapped {
        item: Item::Table(2),
        paper: "counterpart unknown: no NGraphBench table caption is in the text we have",
        differs: "RTR, ASE, BSR and saturation batch of every compiled configuration",
    },
    Mapped {
        item: Item::Table(3),
        paper: "addition A2 of this artifact, no counterpart in NGraphBench (it had no performance model)",
        differs: "the device model's error against the native-engine rows measured on the calibrated machine (the same validation as the DLAS study's Table 9)",
    },
    Mapped {
        item: Item::Table(4),
        paper: "addition A3 of this artifact, no counterpart in NGraphBench (it had no performance model)",
        differs: "the device model on another CPU and per model family (CNN, modern CNN, transformer, block-repeat): each calibrated machine's model predicting its own and the other machine's native rows (the same test as the DLAS study's Table 11)",
    },
    Mapped {
        item: Item::Table(5),
        paper: "counterpart unknown: no NGraphBench table caption is in the text we have",
        differs: "every pair of networks whose ranking flips under compilation at batch 1 (the list Figure 1's footer counts; Figure 1 of NGraphBench names one such pair)",
    },
];

/// The compiler study's catalogue.
pub static CATALOGUE: Catalogue = Catalogue {
    study: STUDY,
    tables: TABLES,
    figures: FIGURES,
    table_dir: TABLE_DIR,
    figure_dir: FIGURE_DIR,
    claims_file: CLAIMS,
    page: PAGE,
    command: "cargo xtask reproduce --study compilers --all",
    claims_command: "dlas claims --study compilers FILE...",
    transfer_table: 4,
    validation_table: 3,
    verdict_table: None,
    compression_tables: &[],
    compression_figures: &[],
    table,
    figure,
    observations: findings::findings,
    claims_markdown: findings::markdown,
    paper_map: PAPER_MAP,
    disclosures: DISCLOSURES,
};

/// What the compiler study's numbers rest on that a reader could mistake.
pub const DISCLOSURES: &[&str] = &[
    "Modelled devices and compilers. The Orin, Xeon, i7, HiKey 970 and Xavier rows come from a performance model of each platform's public specifications, and their eager and vendor compilers are modelled (docs/devices.md), not PyTorch, TensorRT or OpenVINO; only the host rows (ONNX Runtime, tract, OpenVINO, Apache TVM, the native engine) are measured. On the host, ONNX Runtime without graph optimizations plays the uncompiled graph and OpenVINO the vendor compiler.",
    "TVM untuned has no schedule at all. Apache TVM 0.27 has no fallback CPU schedules, so an untuned build runs every kernel as a serial, untiled loop nest (30-200x ONNX Runtime's time, docs/compilers.md); tvm untuned against tvm tuned measures MetaSchedule against no schedule, not tuning against a default schedule as TVM 0.8's was.",
    "Untrained weights. Every network carries the zoo's seeded, untrained weights; throughput does not depend on weight values, and no accuracy is reported.",
];

/// Table `n` of the compiler study as data.
pub fn table(n: usize, inputs: &Inputs) -> Result<Table> {
    match n {
        1 => Ok(figures::devices_and_compilers(inputs)),
        2 => Ok(figures::metrics_table(inputs)),
        3 => Ok(crate::validation::table_of(inputs.validation, 3)),
        4 => Ok(crate::transfer::table_of(inputs.transfer, 4)),
        5 => Ok(figures::reversals_table(inputs)),
        _ => bail!("the compiler study has no table {n}; tables: {TABLES:?}"),
    }
}

/// Figure `n` of the compiler study as data.
pub fn figure(n: usize, inputs: &Inputs) -> Result<FigureData> {
    match n {
        1 => Ok(figures::ranking_reversal(inputs)),
        2 => illustrations::organization_figure(inputs),
        3 => Ok(illustrations::flow(inputs)),
        4 => Ok(illustrations::refinement(inputs)),
        5 => Ok(figures::throughput_vs_batch(inputs)),
        6 => Ok(figures::block_gain_vs_depth(inputs)),
        7 => Ok(figures::metrics_bars(inputs)),
        8 => Ok(crate::validation::figure_of(inputs.validation, 8)),
        _ => bail!("the compiler study has no figure {n}; figures: {FIGURES:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_core::{Compression, Dataset};

    #[test]
    fn block_names_parse() {
        assert_eq!(block_of("blocks-resnet-16"), Some(("resnet", 16)));
        assert_eq!(block_of("blocks-mbv2-1"), Some(("mbv2", 1)));
        assert_eq!(block_of("resnet50"), None);
        assert_eq!(block_of("blocks-resnet-x"), None);
    }

    #[test]
    fn curves_keep_dense_rows_per_dataset_and_the_best_algorithm() {
        use crate::claims::fixtures::row;
        use dlas_core::Algorithm;
        let net = |d| (d, "mobilenetv2".to_string());
        let rows = [
            row(
                "i7",
                Dataset::Imagenet,
                "mobilenetv2",
                Compression::Dense,
                Algorithm::Gemm,
                false,
                10.0,
            ),
            row(
                "i7",
                Dataset::Imagenet,
                "mobilenetv2",
                Compression::Dense,
                Algorithm::Direct,
                false,
                5.0,
            ),
            row(
                "i7",
                Dataset::Imagenet,
                "mobilenetv2",
                Compression::Int8,
                Algorithm::Direct,
                false,
                1.0,
            ),
            row(
                "i7",
                Dataset::Cifar10,
                "mobilenetv2",
                Compression::Dense,
                Algorithm::Gemm,
                false,
                2.0,
            ),
        ];
        let curves = Curves::new(&rows);
        // 5 ms per sample at batch 1 is 200 samples/s; int8 does not enter.
        assert_eq!(
            curves.at("i7", &net(Dataset::Imagenet), "native untuned", 1),
            Some(200.0)
        );
        assert_eq!(
            curves.at("i7", &net(Dataset::Cifar10), "native untuned", 1),
            Some(500.0)
        );
        assert_eq!(
            curves.at("i7", &net(Dataset::Imagenet), "native tuned", 1),
            None
        );
    }
}
