//! Figures, tables, the study's observations as checks, and the report
//! page: the analysis end of the flow.
//!
//! Every artifact is built in two steps: its *data* (a [`Table`], a
//! [`FigureData`] or a claim's [`claims::Outcome`], plain values that
//! snapshot tests guard) and its *rendering* (Markdown, CSV and LaTeX for
//! tables; SVG and PNG for figures; HTML for the page). The crate reads
//! results rows, the zoo, device specifications and the compression facts
//! the CLI computes ([`compression`]); it never measures, plans or
//! compresses anything.

pub mod analysis;
pub mod catalogue;
pub mod claims;
pub mod compare;
pub mod compression;
pub mod figure;
pub mod illustrations;
pub mod metrics;
pub mod page;
pub mod table;

pub use catalogue::{Artifact, HostSummary, Inputs, ResultsFile, Selection, build};
pub use figure::FigureData;
pub use table::Table;
