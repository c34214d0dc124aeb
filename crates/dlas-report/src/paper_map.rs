//! The map of the papers: for every numbered figure and table a study
//! produces, the item of the paper it reproduces (or that it is ours) and
//! what differs. It is data in the study's catalogue
//! (`Catalogue::paper_map`), so the report
//! page, ARTIFACT.md (checked equal by a test) and `reproduce --figure N`
//! print the same words and cannot disagree.
//!
//! Our numbering is our own: only where a row names a paper item does our
//! number correspond to one of the paper's.

use crate::inputs::Selection;
use std::fmt::Write;

/// A numbered output of a study.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    Figure(usize),
    Table(usize),
}

impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Item::Figure(n) => write!(f, "Figure {n}"),
            Item::Table(n) => write!(f, "Table {n}"),
        }
    }
}

/// What one output reproduces.
#[derive(Debug, Clone, Copy)]
pub struct Mapped {
    pub item: Item,
    /// The paper item it reproduces, naming the paper; or that it is an
    /// addition ("addition A1 ...", numbered apart from the paper's
    /// items), or that its counterpart is unknown ("counterpart unknown ...").
    pub paper: &'static str,
    /// What differs from the paper's item, or, for ours, what it shows.
    pub differs: &'static str,
}

/// The mapped row of `item` in a study's map.
pub fn find(map: &[Mapped], item: Item) -> Option<&Mapped> {
    map.iter().find(|m| m.item == item)
}

/// The line `reproduce --figure N` and `--table N` print: what the output
/// reproduces and what differs. `None` for everything (`--all`).
pub fn line(map: &[Mapped], selection: Selection) -> Option<String> {
    let item = match selection {
        Selection::All => return None,
        Selection::Figure(n) => Item::Figure(n),
        Selection::Table(n) => Item::Table(n),
    };
    let m = find(map, item)?;
    let reproduces = !["ours", "addition", "counterpart unknown"]
        .iter()
        .any(|p| m.paper.starts_with(p));
    Some(if !reproduces {
        format!("{}: {}. It shows: {}", m.item, m.paper, m.differs)
    } else {
        format!(
            "{}: reproduces {}. What differs: {}",
            m.item, m.paper, m.differs
        )
    })
}

/// The addition's own number ("A1") when the map says `item` is one.
pub fn addition(map: &[Mapped], item: Item) -> Option<&'static str> {
    let rest = find(map, item)?.paper.strip_prefix("addition ")?;
    rest.split_whitespace().next()
}

/// `title` marked with its addition number when `item` is an addition, so
/// a reader of the output alone sees it has no counterpart in the paper
/// although it shares the paper's numbering.
pub fn titled(map: &[Mapped], item: Item, title: &str) -> String {
    match addition(map, item) {
        Some(a) => format!("(addition {a}) {title}"),
        None => title.to_string(),
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The map as a Markdown table, figures first, as ARTIFACT.md holds it.
pub fn markdown(map: &[Mapped]) -> String {
    let mut out = String::from(
        "| ours | reproduces | what differs (for ours: what it shows) |\n| --- | --- | --- |\n",
    );
    for m in map {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            m.item,
            cell(m.paper),
            cell(m.differs)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every figure and table of each study is mapped exactly once, in
    /// the catalogue's order, and nothing else is.
    #[test]
    fn every_output_of_both_studies_is_mapped_once() {
        for catalogue in [&crate::dlas::CATALOGUE, &crate::compilers::CATALOGUE] {
            let expected: Vec<Item> = catalogue
                .figures
                .iter()
                .map(|n| Item::Figure(*n))
                .chain(catalogue.tables.iter().map(|n| Item::Table(*n)))
                .collect();
            let mapped: Vec<Item> = catalogue.paper_map.iter().map(|m| m.item).collect();
            assert_eq!(mapped, expected);
            for m in catalogue.paper_map {
                assert!(!m.paper.is_empty() && !m.differs.is_empty(), "{}", m.item);
            }
        }
    }

    #[test]
    fn reproduce_prints_the_row_of_its_selection() {
        let dlas = crate::dlas::PAPER_MAP;
        let line = line(dlas, Selection::Figure(5)).unwrap();
        assert!(
            line.starts_with("Figure 5: counterpart unknown: ") && line.contains(". It shows: "),
            "{line}"
        );
        let line = line_of_table(dlas, 9);
        assert!(
            line.starts_with("Table 9: addition A4 of this artifact"),
            "{line}"
        );
        let line = line_of_table(dlas, 1);
        assert!(
            line.starts_with("Table 1: reproduces the DLAS paper's Table 1"),
            "{line}"
        );
        assert_eq!(super::line(dlas, Selection::All), None);
        assert_eq!(super::line(dlas, Selection::Figure(99)), None);
    }

    fn line_of_table(map: &[Mapped], n: usize) -> String {
        line(map, Selection::Table(n)).unwrap()
    }
}
