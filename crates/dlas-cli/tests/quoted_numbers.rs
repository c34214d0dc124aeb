//! The counts and figures README.md and ARTIFACT.md quote, checked against
//! the outputs they describe, so that a document cannot go stale: each
//! check finds a sentence (a pattern over the document with its line breaks
//! joined) and compares the numbers in it with what the study files, the
//! committed tables and the recorded results say now. A sentence that is
//! rewritten must be rewritten here too (the check names it when it can no
//! longer find it).

mod common;
use common::root;
use dlas_core::{Plan, Status, Study};
use regex::Regex;

/// A document's text with every run of whitespace one space, so a
/// sentence matches whatever its line breaks.
fn text(document: &str) -> String {
    let raw = std::fs::read_to_string(root().join(document)).unwrap();
    raw.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What the documents may quote.
struct Facts {
    /// Per study: combinations before the rules, after them, the rules
    /// that excluded any, and the host's combinations.
    dlas: (usize, usize, usize, usize),
    compilers: (usize, usize, usize, usize),
    /// Table 9's "all rows" line: rows, median |ln|, the share of pairs
    /// ordered right (%).
    validation: (usize, f64, usize),
    /// The DLAS study's recorded host rows and how many are stable.
    host: (usize, usize),
}

fn plan_facts(name: &str) -> (usize, usize, usize, usize) {
    let study = Study::load(name, &root().join("data/studies")).unwrap();
    let plan = Plan::expand(&study);
    let rules = plan.excluded.iter().filter(|(_, _, n)| *n > 0).count();
    let host = plan
        .combinations
        .iter()
        .filter(|c| c.device == "host")
        .count();
    (
        plan.total_before_rules,
        plan.combinations.len(),
        rules,
        host,
    )
}

fn facts() -> Facts {
    let table9 = std::fs::read_to_string(root().join("paper-tables/table9.md")).unwrap();
    let all = table9
        .lines()
        .find(|l| l.starts_with("| all | all rows |"))
        .expect("Table 9 has its all-rows line");
    let cells: Vec<&str> = all.split('|').map(str::trim).collect();
    let pairs: usize = cells[8].split_whitespace().next().unwrap().parse().unwrap();
    let host =
        dlas_core::results::read_results(&root().join("data/results/dlas/host.csv")).unwrap();
    let stable = host.iter().filter(|r| r.status == Status::Ok).count();
    Facts {
        dlas: plan_facts("dlas"),
        compilers: plan_facts("compilers"),
        validation: (cells[3].parse().unwrap(), cells[4].parse().unwrap(), pairs),
        host: (host.len(), stable),
    }
}

/// How a number is written in prose: thousands separated by commas.
fn prose(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn word(n: usize) -> String {
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    words
        .get(n)
        .map_or_else(|| n.to_string(), |w| w.to_string())
}

/// A sentence to find in a document and what its captures must read.
struct Quote {
    document: &'static str,
    pattern: &'static str,
    expected: fn(&Facts) -> Vec<String>,
}

const QUOTES: &[Quote] = &[
    Quote {
        document: "README.md",
        pattern: r"the plan expands them into ([\d,]+) combinations",
        expected: |f| vec![prose(f.dlas.1)],
    },
    Quote {
        document: "ARTIFACT.md",
        pattern: r"The study's matrix: ([\d,]+) combinations, ([\d,]+) after (\w+) documented rules",
        expected: |f| vec![prose(f.dlas.0), prose(f.dlas.1), word(f.dlas.2)],
    },
    Quote {
        document: "ARTIFACT.md",
        pattern: r"the study file parses and expands into ([\d,]+) combinations",
        expected: |f| vec![prose(f.dlas.1)],
    },
    Quote {
        document: "ARTIFACT.md",
        pattern: r"# study dlas: (\d+) combinations",
        expected: |f| vec![f.dlas.1.to_string()],
    },
    Quote {
        document: "ARTIFACT.md",
        pattern: r"dlas run --study dlas --device host --out mine.csv # ([\d,]+) combinations",
        expected: |f| vec![prose(f.dlas.3)],
    },
    Quote {
        document: "ARTIFACT.md",
        pattern: r"dlas run --study compilers --device host --out mine-compilers.csv # ([\d,]+) combinations",
        expected: |f| vec![prose(f.compilers.3)],
    },
    Quote {
        document: "ARTIFACT.md",
        pattern: r"(\d+) of the study's (\d+) host combinations .{0,400}? none failed, (\d+) stable",
        expected: |f| {
            vec![
                f.host.0.to_string(),
                f.dlas.3.to_string(),
                f.host.1.to_string(),
            ]
        },
    },
    Quote {
        document: "README.md",
        pattern: r"against (\d+) native rows .{0,600}? the model's typical error is a factor ([\d.]+) \(median \|ln\(predicted/measured\)\| ([\d.]+);.{0,100}? it orders (\d+)% of the pairs",
        expected: validation_quote,
    },
    Quote {
        document: "ARTIFACT.md",
        pattern: r"(\d+) native rows, all out of sample.{0,1200}? Typical error a factor ([\d.]+) \(median \|ln\(predicted/measured\)\| ([\d.]+),.{0,120}? (\d+)% of the [\d,]+ pairs",
        expected: validation_quote,
    },
];

/// What README and ARTIFACT.md quote of the validation: its rows, typical
/// factor, median |ln| and share of ordered pairs.
fn validation_quote(f: &Facts) -> Vec<String> {
    let (rows, ln, pairs) = f.validation;
    vec![
        rows.to_string(),
        format!("{:.2}", ln.exp()),
        format!("{ln:.3}"),
        pairs.to_string(),
    ]
}

/// Every quote that does not read what it should, as one line each.
fn stale(documents: &dyn Fn(&str) -> String, facts: &Facts) -> Vec<String> {
    let mut problems = Vec::new();
    for q in QUOTES {
        let text = documents(q.document);
        let Some(found) = Regex::new(q.pattern).unwrap().captures(&text) else {
            problems.push(format!(
                "{}: no sentence matches `{}` any more; update it here with the document",
                q.document, q.pattern
            ));
            continue;
        };
        let quoted: Vec<&str> = found
            .iter()
            .skip(1)
            .map(|m| m.map_or("", |m| m.as_str()))
            .collect();
        let expected = (q.expected)(facts);
        if quoted != expected {
            problems.push(format!(
                "{}: `{}` quotes {quoted:?}, the outputs say {expected:?}",
                q.document, &found[0]
            ));
        }
    }
    problems
}

#[test]
fn quoted_counts_and_figures_match_the_outputs() {
    let problems = stale(&text, &facts());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A planted wrong count is caught, naming the sentence.
#[test]
fn a_planted_wrong_count_fails() {
    let facts = facts();
    let planted = |document: &str| {
        let t = text(document);
        if document == "ARTIFACT.md" {
            t.replacen(
                &format!("{} after", prose(facts.dlas.1)),
                &format!("{} after", prose(facts.dlas.1 + 1)),
                1,
            )
        } else {
            t
        }
    };
    let problems = stale(&planted, &facts);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("The study's matrix"), "{problems:?}");
}
