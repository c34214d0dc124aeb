//! Figures and tables from results: the analysis end of the flow.
//!
//! Every artifact is built in two steps: its *data* (a [`Table`] or a
//! [`FigureData`], plain values that snapshot tests guard) and its
//! *rendering* (Markdown, CSV and LaTeX for tables; SVG for figures). The
//! crate reads results rows, the zoo and device specifications; it never
//! measures or plans anything.

pub mod analysis;
pub mod catalogue;
pub mod compare;
pub mod figure;
pub mod metrics;
pub mod table;

pub use catalogue::{Artifact, HostSummary, Inputs, Selection, build};
pub use figure::FigureData;
pub use table::Table;
