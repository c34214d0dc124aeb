//! Tables and their three renderings.

use serde::Serialize;

/// A table as data: what snapshot tests compare.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    pub number: usize,
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Where the numbers come from, printed under the table.
    pub footer: String,
}

impl Table {
    /// Markdown; each cell escaped ([`markdown_cell`]) so that text from a
    /// results file or an environment record cannot split a row.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| {
            let cells: Vec<String> = cells.iter().map(|c| markdown_cell(c)).collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut out = format!("# Table {}: {}\n\n", self.number, self.title);
        out += &line(&self.columns);
        out += &format!("|{}\n", "---|".repeat(self.columns.len()));
        for row in &self.rows {
            out += &line(row);
        }
        out += &format!("\n{}\n", self.footer);
        out
    }

    pub fn csv(&self) -> Vec<u8> {
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer
            .write_record(&self.columns)
            .and_then(|()| self.rows.iter().try_for_each(|r| writer.write_record(r)))
            .expect("writing CSV to memory cannot fail");
        writer.into_inner().expect("in-memory writer")
    }

    pub fn latex(&self) -> String {
        let escape = latex_text;
        let mut out = String::from("\\begin{table}[t]\n\\centering\n");
        out += &format!("\\caption{{{}}}\n", escape(&self.title));
        out += &format!("\\label{{tab:{}}}\n", self.number);
        out += &format!(
            "\\begin{{tabular}}{{{}}}\n\\toprule\n",
            "l".repeat(self.columns.len())
        );
        let cols: Vec<String> = self.columns.iter().map(|c| escape(c)).collect();
        out += &format!("{} \\\\\n\\midrule\n", cols.join(" & "));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| escape(c)).collect();
            out += &format!("{} \\\\\n", cells.join(" & "));
        }
        out += "\\bottomrule\n\\end{tabular}\n";
        out += &format!(
            "\\par\\footnotesize {}\n\\end{{table}}\n",
            escape(&self.footer)
        );
        out
    }
}

/// A Markdown table cell: `|` escaped, and every character that does not
/// print on one line (a newline, a direction override) shown as a space.
pub fn markdown_cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '|' => out.push_str("\\|"),
            c if dlas_core::text::unprintable(c.encode_utf8(&mut [0; 4])).is_some() => {
                out.push(' ')
            }
            c => out.push(c),
        }
    }
    out
}

/// LaTeX text: its ten special characters escaped, and characters that do
/// not print on one line shown as spaces.
pub fn latex_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\textbackslash{}"),
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            c if dlas_core::text::unprintable(c.encode_utf8(&mut [0; 4])).is_some() => {
                out.push(' ')
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_three_formats() {
        let t = Table {
            number: 9,
            title: "A & B".into(),
            columns: vec!["model".into(), "ms".into()],
            rows: vec![vec!["resnet_18".into(), "1.5".into()]],
            footer: "Source: test.".into(),
        };
        assert_eq!(
            t.markdown(),
            "# Table 9: A & B\n\n| model | ms |\n|---|---|\n| resnet_18 | 1.5 |\n\nSource: test.\n"
        );
        assert_eq!(
            String::from_utf8(t.csv()).unwrap(),
            "model,ms\nresnet_18,1.5\n"
        );
        assert!(t.latex().contains("resnet\\_18 & 1.5 \\\\"));
        assert!(t.latex().contains("\\caption{A \\& B}"));
    }

    /// Text from a results file or an environment record (a CPU model with
    /// `|` or a newline in it) stays in its cell in every rendering.
    #[test]
    fn cell_text_cannot_split_a_row() {
        let t = Table {
            number: 1,
            title: "Hosts".into(),
            columns: vec!["cpu".into(), "os".into()],
            rows: vec![vec![
                "Evil | CPU\n| x | y |".into(),
                "50% $x^2$ {a}~\\".into(),
            ]],
            footer: String::new(),
        };
        let md = t.markdown();
        let row = md.lines().nth(4).unwrap();
        assert_eq!(row, "| Evil \\| CPU \\| x \\| y \\| | 50% $x^2$ {a}~\\ |");
        assert_eq!(md.lines().count(), 7, "{md}");
        let tex = t.latex();
        assert!(
            tex.contains(
                "Evil | CPU | x | y | & 50\\% \\$x\\textasciicircum{}2\\$ \\{a\\}\\textasciitilde{}\\textbackslash{} \\\\"
            ),
            "{tex}"
        );
    }
}
