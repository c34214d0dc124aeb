//! `figures/index.html`: the one page a reviewer opens. It holds every
//! figure (the SVG embedded as a data URI, so the page stands alone and
//! opens from the file system), every table, the observations with their
//! verdicts and the environment of the recorded runs, each with its source.
//! The same inputs give the same bytes: nothing on the page depends on the
//! time or the machine that wrote it.

use crate::claims::{self, Checked, Verdict};
use crate::figure::FigureData;
use crate::inputs::HostSummary;
use crate::paper_map::Mapped;
use crate::table::Table;
use dlas_core::Study;
use std::fmt::Write;

/// Everything the page shows.
pub struct Page<'a> {
    pub study: &'a Study,
    pub hosts: &'a [HostSummary],
    /// The results files behind the page, comma separated.
    pub files: &'a str,
    pub tables: &'a [Table],
    /// The table of `tables` that shows the verdicts: the page puts it with
    /// the observations rather than with the other tables.
    pub verdict_table: Option<usize>,
    /// Each figure's data and its SVG.
    pub figures: &'a [(FigureData, String)],
    pub claims: &'a [Checked],
    /// The observations (or findings) the claims check, in their order.
    pub observations: &'a [claims::Observation],
    /// Where they are explained (`paper-tables/claims.md` or the compiler study's).
    pub claims_file: &'a str,
    /// The command that regenerates the page.
    pub command: &'a str,
    /// The command that checks the claims on a reader's results.
    pub claims_command: &'a str,
    /// What each figure and table reproduces of the paper.
    pub paper_map: &'a [Mapped],
    /// What the numbers rest on that a reader could mistake: shown before
    /// the figures.
    pub disclosures: &'a [&'a str],
    /// Which devices are measured and which modelled, with the model's
    /// error measured on this machine: the page's first paragraph.
    pub provenance: &'a str,
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}\
figure{margin:2em 0;border-top:1px solid #ccc;padding-top:1em}\
figure img{max-width:100%;height:auto;border:1px solid #eee}\
figcaption,p.source{font-size:0.9em;color:#444}\
table{border-collapse:collapse;margin:1em 0;font-size:0.85em}\
caption{text-align:left;font-weight:bold;padding:0.3em 0}\
th,td{border:1px solid #ccc;padding:0.2em 0.4em;vertical-align:top;text-align:left}\
th{background:#f3f3f3}\
td.holds{background:#dff0d8}td.does-not-hold{background:#f8d7da}td.cannot-be-tested{background:#eee}\
p.broken{color:#b00;font-weight:bold}\
#paper-map-table td:first-child{white-space:nowrap}\
nav a{margin-right:1em}";

/// Marks every figure's image as loaded or broken once the page has
/// loaded, and says so on the page: a reader sees a missing figure, and the
/// headless-browser test reads the marks.
const CHECK_IMAGES: &str = "window.addEventListener('load', function () {\n\
  for (const img of document.querySelectorAll('figure img')) {\n\
    const ok = img.complete && img.naturalWidth > 0;\n\
    img.setAttribute('data-state', ok ? 'loaded' : 'broken');\n\
    if (!ok) {\n\
      const note = document.createElement('p');\n\
      note.className = 'broken';\n\
      note.textContent = 'This figure did not load; regenerate it with cargo xtask reproduce --all.';\n\
      img.after(note);\n\
    }\n\
  }\n\
  document.body.setAttribute('data-images-checked', 'true');\n\
});\n";

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Standard base64 with padding (RFC 4648), for data URIs.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Holds => "holds",
        Verdict::DoesNotHold => "does-not-hold",
        Verdict::CannotBeTested => "cannot-be-tested",
    }
}

fn html_table(out: &mut String, t: &Table) {
    let _ = write!(
        out,
        "<table id=\"table-{}\">\n<caption>Table {}: {}</caption>\n<thead><tr>",
        t.number,
        t.number,
        escape(&t.title)
    );
    for c in &t.columns {
        let _ = write!(out, "<th>{}</th>", escape(c));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    let _ = writeln!(
        out,
        "</tbody>\n</table>\n<p class=\"source\">{}</p>",
        escape(&t.footer)
    );
}

impl Page<'_> {
    pub fn html(&self) -> String {
        let mut out =
            String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        let _ = writeln!(
            out,
            "<title>dlas report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>",
            escape(&self.study.title)
        );
        let _ = writeln!(
            out,
            "<header>\n<h1>{}</h1>\n<p>The study <code>{}</code>: every figure and table of the artifact, the study's observations checked on each results file, and the environment of the recorded runs. Generated by <code>{}</code> from the results files {}; never edit by hand. Every caption names the source and the devices of its numbers.</p>",
            escape(&self.study.title),
            escape(&self.study.name),
            escape(self.command),
            escape(self.files)
        );
        let _ = writeln!(
            out,
            "<p><strong>Measured and modelled.</strong> {}</p>",
            escape(self.provenance)
        );
        out.push_str("<nav><a href=\"#claims\">Observations</a><a href=\"#paper-map\">The paper</a><a href=\"#figures\">Figures</a><a href=\"#tables\">Tables</a><a href=\"#environment\">Environment</a></nav>\n</header>\n");
        self.claims_section(&mut out);
        self.paper_section(&mut out);
        out.push_str("<section id=\"figures\">\n<h2>Figures</h2>\n");
        for (f, svg) in self.figures {
            let _ = writeln!(
                out,
                "<figure id=\"figure-{n}\">\n<img src=\"data:image/svg+xml;base64,{}\" alt=\"Figure {n}: {title}\">\n<figcaption><b>Figure {n}.</b> {title}. {}<br><a href=\"figure{n}.svg\">SVG</a> <a href=\"figure{n}.png\">PNG</a></figcaption>\n</figure>",
                base64(svg.as_bytes()),
                escape(&f.footer),
                n = f.number,
                title = escape(&f.title),
            );
        }
        out.push_str("</section>\n<section id=\"tables\">\n<h2>Tables</h2>\n");
        for t in self
            .tables
            .iter()
            .filter(|t| Some(t.number) != self.verdict_table)
        {
            html_table(&mut out, t);
        }
        out.push_str("</section>\n");
        self.environment_section(&mut out);
        let _ = write!(out, "<script>\n{CHECK_IMAGES}</script>\n</body>\n</html>\n");
        out
    }

    fn claims_section(&self, out: &mut String) {
        out.push_str("<section id=\"claims\">\n<h2>The study's observations, checked</h2>\n");
        let _ = writeln!(
            out,
            "<p>Each observation is a predicate over a results set; <code>{}</code> says how each is checked, and <code>{}</code> checks any results file.</p>",
            escape(self.claims_file),
            escape(self.claims_command)
        );
        out.push_str("<table id=\"verdicts\">\n<caption>Verdicts per results file</caption>\n<thead><tr><th></th><th>observation</th>");
        for c in self.claims {
            let _ = write!(out, "<th>{}</th>", escape(&c.file));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for (i, o) in self.observations.iter().enumerate() {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td>",
                o.numeral,
                escape(o.statement)
            );
            for c in self.claims {
                let v = c.outcomes[i].verdict;
                let _ = write!(out, "<td class=\"{}\">{}</td>", verdict_class(v), v.label());
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
        if let Some(t) = self
            .tables
            .iter()
            .find(|t| Some(t.number) == self.verdict_table)
        {
            html_table(out, t);
        } else {
            // No table shows the evidence: list it under the verdicts.
            out.push_str("<dl id=\"evidence\">\n");
            for (i, o) in self.observations.iter().enumerate() {
                for c in self.claims {
                    let outcome = &c.outcomes[i];
                    let _ = writeln!(
                        out,
                        "<dt>{} on {}: {}</dt><dd>{}.{}</dd>",
                        o.numeral,
                        escape(&c.file),
                        outcome.verdict.label(),
                        escape(&outcome.evidence.join("; ")),
                        if outcome.explanation.is_empty() {
                            String::new()
                        } else {
                            format!(" Against it: {}.", escape(&outcome.explanation.join("; ")))
                        }
                    );
                }
            }
            out.push_str("</dl>\n");
        }
        out.push_str("</section>\n");
    }

    /// The map of the paper and what the numbers rest on.
    fn paper_section(&self, out: &mut String) {
        out.push_str(
            "<section id=\"paper-map\">\n<h2>What each figure and table reproduces</h2>\n",
        );
        out.push_str("<p>Our numbering is our own; only a row that names a paper item corresponds to one of the paper's. The same table is in ARTIFACT.md, and <code>cargo xtask reproduce --figure N</code> (or <code>--table N</code>) prints its row.</p>\n");
        out.push_str("<table id=\"paper-map-table\">\n<thead><tr><th>ours</th><th>reproduces</th><th>what differs (for ours: what it shows)</th></tr></thead>\n<tbody>\n");
        for m in self.paper_map {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                m.item,
                escape(m.paper),
                escape(m.differs)
            );
        }
        out.push_str("</tbody>\n</table>\n");
        if !self.disclosures.is_empty() {
            out.push_str("<h3 id=\"disclosures\">What the numbers rest on</h3>\n<ul>\n");
            for d in self.disclosures {
                let _ = writeln!(out, "<li>{}</li>", escape(d));
            }
            out.push_str("</ul>\n");
        }
        out.push_str("</section>\n");
    }

    fn environment_section(&self, out: &mut String) {
        out.push_str("<section id=\"environment\">\n<h2>Environment of the recorded runs</h2>\n");
        let p = &self.study.protocol;
        let _ = writeln!(
            out,
            "<p>Protocol of the study: batch {}, {} warm-up run(s) discarded, {} timed runs, median reported; threads {} (0: one per physical core); seed {}. Recorded runs may override it; each row of a results file names the environment record (<code>env-*.json</code>) of its machine.</p>",
            p.batch
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            p.warmup,
            p.runs,
            p.threads,
            p.seed
        );
        if self.hosts.is_empty() {
            out.push_str("<p>No recorded run of a real machine is among the results.</p>\n");
        } else {
            out.push_str("<table id=\"hosts\">\n<caption>Measured machines</caption>\n<thead><tr><th>environment records</th><th>CPU</th><th>logical CPUs</th><th>operating system</th><th>CPU flags</th></tr></thead>\n<tbody>\n");
            for h in self.hosts {
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    escape(&h.environment),
                    escape(&h.cpu_model),
                    h.logical_cpus,
                    escape(&h.os),
                    escape(&h.cpu_flags.join(" "))
                );
            }
            out.push_str("</tbody>\n</table>\n");
        }
        out.push_str("</section>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected, "{input}");
        }
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(escape("a < b & \"c\""), "a &lt; b &amp; &quot;c&quot;");
    }
}
