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
mod tables;

use crate::catalogue::Catalogue;
use crate::figure::FigureData;
use crate::inputs::Inputs;
use crate::table::Table;
use anyhow::{Result, bail};
use dlas_core::Dataset;
use dlas_devices::DeviceKind;

/// The study's tables, by number.
pub const TABLES: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8, 9];
/// The study's figures, by number.
pub const FIGURES: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8, 9];
/// The claims, with how each is checked (beside Table 8).
pub const CLAIMS: &str = "paper-tables/claims.md";
/// The page a reviewer opens.
pub const PAGE: &str = "figures/index.html";

/// The DLAS study's catalogue.
pub static CATALOGUE: Catalogue = Catalogue {
    tables: TABLES,
    figures: FIGURES,
    table_dir: "paper-tables",
    figure_dir: "figures",
    claims_file: CLAIMS,
    page: PAGE,
    command: "cargo xtask reproduce --all",
    claims_command: "dlas claims FILE...",
    verdict_table: Some((8, observations::table)),
    compression_tables: &[2, 5, 8],
    compression_figures: &[2, 3, 7],
    table,
    figure,
    observations: observations::observations,
    claims_markdown: observations::markdown,
};

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
        9 => Ok(crate::validation::table_of(inputs, 9)),
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
        5 => Ok(analysis::compression_speedup(inputs, native_footer())),
        6 => Ok(analysis::best_algorithm(inputs, native_footer())),
        7 => Ok(analysis::expected_vs_achieved(
            inputs,
            &|d, m, c| inputs.sweeps.expected_speedup(d, m, c),
            format!(
                "{} Expected speedups: {}.",
                native_footer(),
                crate::compression::sweep_path(&inputs.study.name)
            ),
        )),
        8 => Ok(analysis::tuning_speedup(inputs, native_footer())),
        9 => Ok(crate::validation::figure_of(inputs, 9)),
        _ => bail!("there is no figure {n}; figures: {FIGURES:?}"),
    }
}
