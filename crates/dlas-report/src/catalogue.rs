//! A study's catalogue as a value: its numbered figures and tables, its
//! observations, where each file goes and the commands the page names; and
//! the one loop that builds a selection of it and the one loop that checks
//! its observations on each results file, for `reproduce` and `dlas claims`
//! alike.
//!
//! Each study module states its catalogue (`dlas::CATALOGUE`,
//! `compilers::CATALOGUE`); [`crate::catalogue_of`] picks one by the
//! study's name. Numbering is fixed: reviewers and `--figure N` depend on it.

use crate::claims::{Checked, Context, Observation};
use crate::figure::FigureData;
use crate::inputs::{Artifact, Inputs, Selection, device_kinds, networks_of};
use crate::page::Page;
use crate::paper_map::{Item, Mapped};
use crate::table::Table;
use anyhow::{Result, anyhow};

/// Builds a verdict table from the checked observations.
pub type VerdictTable = fn(&[Checked]) -> Table;

/// What one study reports and where it goes.
pub struct Catalogue {
    /// The study whose committed folders the paths below are; any other
    /// study reported with this catalogue writes to its own ([`Catalogue::outputs`]).
    pub study: &'static str,
    /// The tables, by number.
    pub tables: &'static [usize],
    /// The figures, by number.
    pub figures: &'static [usize],
    /// Where the tables go (`{table_dir}/table{n}.md`, `.csv`, `.tex`).
    pub table_dir: &'static str,
    /// Where the figures go (`{figure_dir}/figure{n}.svg`, `.png`).
    pub figure_dir: &'static str,
    /// The observations, how each is checked and what each results file
    /// says (`claims.md`).
    pub claims_file: &'static str,
    /// The page a reviewer opens.
    pub page: &'static str,
    /// The command that regenerates everything, as the page names it.
    pub command: &'static str,
    /// The command that checks the observations on a reader's results.
    pub claims_command: &'static str,
    /// The table that shows the verdicts, built from the checked
    /// observations rather than by [`Catalogue::table`] (the DLAS study's
    /// Table 8); selecting it checks the observations and writes the
    /// claims file.
    /// The table with the device model's error measured on this machine,
    /// which footers of modelled figures cite.
    pub validation_table: usize,
    /// The table with the device model's error on another CPU (the
    /// cross-machine test), which footers of modelled CPUs cite.
    pub transfer_table: usize,
    pub verdict_table: Option<(usize, VerdictTable)>,
    /// The tables drawn from the compression facts, which take seconds to
    /// compute; the CLI computes them only for these.
    pub compression_tables: &'static [usize],
    /// The figures drawn from the compression facts.
    pub compression_figures: &'static [usize],
    /// Table `n` as data; refuses a number outside [`Catalogue::tables`].
    pub table: fn(usize, &Inputs) -> Result<Table>,
    /// Figure `n` as data; refuses a number outside [`Catalogue::figures`].
    pub figure: fn(usize, &Inputs) -> Result<FigureData>,
    /// The observations (or findings), in their order.
    pub observations: fn() -> Vec<Observation>,
    /// The claims file's Markdown.
    pub claims_markdown: fn(&[Checked], Option<crate::drift::Drift>) -> String,
    /// What each figure and table reproduces of the paper, in the order
    /// figures then tables: the page, ARTIFACT.md and `reproduce` print it.
    pub paper_map: &'static [Mapped],
    /// What the numbers rest on that a reader could mistake (untrained
    /// weights, fixed levels, published accuracies): the page lists them.
    pub disclosures: &'static [&'static str],
}

/// Where the files of one study's report go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outputs {
    pub table_dir: String,
    pub figure_dir: String,
    pub claims_file: String,
    pub page: String,
}

impl Catalogue {
    /// Where `study`'s report goes: this catalogue's own folders for its
    /// own study, `figures/<study>/` and `paper-tables/<study>/` for any
    /// other (a user's study reported with this catalogue), so that
    /// reporting one study never rewrites another's committed files. A
    /// study name is an identifier (`dlas_core::text`), never a path.
    pub fn outputs(&self, study: &str) -> Outputs {
        if study == self.study {
            return Outputs {
                table_dir: self.table_dir.into(),
                figure_dir: self.figure_dir.into(),
                claims_file: self.claims_file.into(),
                page: self.page.into(),
            };
        }
        Outputs {
            table_dir: format!("paper-tables/{study}"),
            figure_dir: format!("figures/{study}"),
            claims_file: format!("paper-tables/{study}/claims.md"),
            page: format!("figures/{study}/index.html"),
        }
    }

    /// Whether `selection` draws the compression facts (the sweeps, a
    /// layer's weights); everything does when any table or figure does.
    pub fn needs_compression(&self, selection: Selection) -> bool {
        match selection {
            Selection::All => {
                !self.compression_tables.is_empty() || !self.compression_figures.is_empty()
            }
            Selection::Table(n) => self.compression_tables.contains(&n),
            Selection::Figure(n) => self.compression_figures.contains(&n),
        }
    }

    /// The observations checked on each results file on its own and, when
    /// the inputs carry a validation, on the rows measured on the
    /// calibrated machine and on the model's predictions of the same rows
    /// (labelled [`crate::validation::MEASURED`] and
    /// [`crate::validation::MODELLED`]): whether the model reaches the
    /// verdicts the measurements reach.
    pub fn check(&self, inputs: &Inputs) -> Vec<Checked> {
        let observations = (self.observations)();
        let networks = networks_of(inputs.study);
        let kinds = device_kinds(inputs.specs);
        let check = |file: &str, rows: &[dlas_core::ResultRow]| {
            // The papers' statements are about their layout, NCHW; the
            // blocked layout's rows, an addition, are left out of them.
            let rows: Vec<dlas_core::ResultRow> = rows
                .iter()
                .filter(|r| r.layout == dlas_core::Layout::Nchw)
                .cloned()
                .collect();
            let context = Context {
                rows: &rows,
                kinds: &kinds,
                networks: &networks,
                sweeps: inputs.sweeps,
                accuracy: inputs.accuracy,
                drift: inputs.drift,
            };
            Checked {
                file: file.to_string(),
                outcomes: observations.iter().map(|o| o.check(&context)).collect(),
            }
        };
        let mut checked: Vec<Checked> = inputs
            .result_files
            .iter()
            .map(|f| check(&f.path, &inputs.results[f.rows.clone()]))
            .collect();
        if let Some(v) = inputs.validation {
            let (measured, modelled) = crate::validation::as_results(&v.rows);
            checked.push(check(crate::validation::MEASURED, &measured));
            checked.push(check(crate::validation::MODELLED, &modelled));
        }
        checked
    }

    /// Builds the selected artifacts: each table in three renderings, each
    /// figure as SVG and PNG, the claims file with everything or the
    /// verdict table, and the page with everything. A number outside the
    /// catalogue is refused by the study's own `table` or `figure`.
    pub fn build(&self, inputs: &Inputs, selection: Selection) -> Result<Vec<Artifact>> {
        let (tables, figures): (Vec<usize>, Vec<usize>) = match selection {
            Selection::All => (self.tables.to_vec(), self.figures.to_vec()),
            Selection::Table(n) => (vec![n], vec![]),
            Selection::Figure(n) => (vec![], vec![n]),
        };
        let to = self.outputs(&inputs.study.name);
        let verdicts = self.verdict_table.filter(|(n, _)| tables.contains(n));
        let checked =
            (selection == Selection::All || verdicts.is_some()).then(|| self.check(inputs));
        let mut out = Vec::new();
        let mut built_tables = Vec::new();
        for n in tables {
            let mut t = match (verdicts, &checked) {
                (Some((v, verdict_table)), Some(checked)) if v == n => verdict_table(checked),
                _ => (self.table)(n, inputs)?,
            };
            t.title = crate::paper_map::titled(self.paper_map, Item::Table(n), &t.title);
            let stem = format!("{}/table{n}", to.table_dir);
            out.push(Artifact {
                path: format!("{stem}.md").into(),
                bytes: t.markdown().into_bytes(),
            });
            out.push(Artifact {
                path: format!("{stem}.csv").into(),
                bytes: t.csv(),
            });
            out.push(Artifact {
                path: format!("{stem}.tex").into(),
                bytes: t.latex().into_bytes(),
            });
            built_tables.push(t);
        }
        if let Some(checked) = &checked {
            out.push(Artifact {
                path: to.claims_file.as_str().into(),
                bytes: (self.claims_markdown)(checked, inputs.drift).into_bytes(),
            });
        }
        let mut built_figures = Vec::new();
        for n in figures {
            let mut f = (self.figure)(n, inputs)?;
            f.title = crate::paper_map::titled(self.paper_map, Item::Figure(n), &f.title);
            let draw_error = |e| anyhow!("cannot draw figure {n}: {e}");
            let svg = f.svg().map_err(draw_error)?;
            let png = f.png().map_err(draw_error)?;
            out.push(Artifact {
                path: format!("{}/figure{n}.svg", to.figure_dir).into(),
                bytes: svg.clone().into_bytes(),
            });
            out.push(Artifact {
                path: format!("{}/figure{n}.png", to.figure_dir).into(),
                bytes: png,
            });
            built_figures.push((f, svg));
        }
        if let (Selection::All, Some(checked)) = (selection, &checked) {
            let provenance = crate::provenance::provenance(inputs);
            let page = Page {
                provenance: &provenance,
                study: inputs.study,
                hosts: &inputs.hosts,
                files: &inputs.file_list(),
                tables: &built_tables,
                verdict_table: self.verdict_table.map(|(n, _)| n),
                figures: &built_figures,
                claims: checked,
                observations: &(self.observations)(),
                claims_file: &to.claims_file,
                command: self.command,
                claims_command: self.claims_command,
                paper_map: self.paper_map,
                disclosures: self.disclosures,
            };
            out.push(Artifact {
                path: to.page.as_str().into(),
                bytes: page.html().into_bytes(),
            });
        }
        Ok(out)
    }
}
