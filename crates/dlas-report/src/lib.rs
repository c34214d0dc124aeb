//! Figures, tables, the studies' observations as checks, and the report
//! page: the analysis end of the flow.
//!
//! Every artifact is built in two steps: its *data* (a [`Table`], a
//! [`FigureData`] or a claim's [`claims::Outcome`], plain values that
//! snapshot tests guard) and its *rendering* (Markdown, CSV and LaTeX for
//! tables; SVG and PNG for figures; HTML for the page). The crate reads
//! results rows, the plan, the zoo, device specifications and the
//! compression facts the CLI computes ([`compression`]); it never measures,
//! plans or compresses anything.
//!
//! Each study has its own module with its [`Catalogue`] (`dlas`,
//! `compilers`); [`catalogue_of`] picks one by the study's name.

mod architecture;
pub mod catalogue;
pub mod claims;
pub mod compare;
pub mod compilers;
pub mod compression;
pub mod dlas;
pub mod drift;
pub mod figure;
pub mod inputs;
pub mod metrics;
pub mod page;
pub mod paper_map;
pub mod provenance;
pub mod table;
pub mod transfer;
pub mod validation;

pub use catalogue::Catalogue;
pub use figure::FigureData;
pub use inputs::{Artifact, HostSummary, Inputs, ResultsFile, Selection};
pub use table::Table;

use anyhow::Result;
use dlas_core::Study;

/// The catalogue `study` is reported with, by its name: the compiler
/// study's for the study named `compilers`, the DLAS study's for every
/// other.
pub fn catalogue_of(study: &Study) -> &'static Catalogue {
    if study.name == compilers::STUDY {
        &compilers::CATALOGUE
    } else {
        &dlas::CATALOGUE
    }
}

/// Builds the selected artifacts of `inputs.study` with its catalogue.
pub fn build(inputs: &Inputs, selection: Selection) -> Result<Vec<Artifact>> {
    catalogue_of(inputs.study).build(inputs, selection)
}
