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
    pub fn markdown(&self) -> String {
        let mut out = format!("# Table {}: {}\n\n", self.number, self.title);
        out += &format!("| {} |\n", self.columns.join(" | "));
        out += &format!("|{}\n", "---|".repeat(self.columns.len()));
        for row in &self.rows {
            out += &format!("| {} |\n", row.join(" | "));
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
        let escape = |s: &str| {
            s.replace('\\', "\\textbackslash{}")
                .replace('&', "\\&")
                .replace('%', "\\%")
                .replace('_', "\\_")
                .replace('#', "\\#")
        };
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
}
