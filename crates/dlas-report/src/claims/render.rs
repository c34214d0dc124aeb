//! Checked observations as text: the verdict table and the sections of a
//! study's claims file, and what `dlas claims` prints.

use super::{Checked, Observation, Verdict, Wording};
use std::fmt::Write;

/// An observation's statement, marked when we worded it from the paper's discussion.
pub fn statement(o: &Observation) -> String {
    match o.wording {
        Wording::Quoted => o.statement.to_string(),
        Wording::FromDiscussion => format!("{} (worded from the discussion)", o.statement),
    }
}

/// The devices a check read, or that none entered.
pub fn devices(list: &[String]) -> String {
    if list.is_empty() {
        "none (no results rows enter)".into()
    } else {
        list.join(", ")
    }
}

/// " Against it: ...", the explanation of a verdict that does not hold, or nothing.
pub fn why_not(explanation: &[String]) -> String {
    if explanation.is_empty() {
        String::new()
    } else {
        format!(" *Against it:* {}.", explanation.join("; "))
    }
}

/// The verdict table and one section per observation: how it is checked
/// and what each results file says.
pub fn sections(out: &mut String, all: &[Observation], checked: &[Checked]) {
    // With validation rows, a last column says whether the model's verdict
    // on them equals the measurements'.
    let validated = checked
        .iter()
        .any(|c| c.file == crate::validation::MODELLED);
    *out += "| | observation |";
    for c in checked {
        let _ = write!(out, " `{}` |", c.file);
    }
    if validated {
        *out += " model agrees with measurement (host) |";
    }
    *out += "\n|---|---|";
    *out += &"---|".repeat(checked.len() + usize::from(validated));
    *out += "\n";
    for (i, o) in all.iter().enumerate() {
        let _ = write!(out, "| {} | {} |", o.numeral, statement(o));
        for c in checked {
            let outcome = &c.outcomes[i];
            let _ = write!(
                out,
                " {} ({}) |",
                outcome.verdict.label(),
                outcome.basis.tag()
            );
        }
        if validated {
            let _ = write!(out, " {} |", agreement(checked, i));
        }
        *out += "\n";
    }
    for (i, o) in all.iter().enumerate() {
        let _ = write!(out, "\n## {}. {}\n\n", o.numeral, o.statement);
        let source = match o.wording {
            Wording::Quoted => "The paper states it",
            Wording::FromDiscussion => {
                "The paper's statement of this numeral is not in the text we have; it is worded from"
            }
        };
        let _ = writeln!(out, "*{}.* {source}: \"{}\"\n", o.layer, o.source);
        let _ = writeln!(out, "**Check.** {}\n", o.predicate);
        for c in checked {
            let outcome = &c.outcomes[i];
            let _ = writeln!(
                out,
                "- `{}`: **{}**. {}.{} Devices: {}. *Basis:* {}.",
                c.file,
                outcome.verdict.label(),
                outcome.evidence.join("; "),
                why_not(&outcome.explanation),
                devices(&outcome.devices),
                outcome.basis.sentence()
            );
        }
    }
}

/// The study's headline: each observation's verdict on measured data
/// alone, from the first results file whose rows for it were all
/// measured; an observation no measured file can test says so.
pub fn headline(all: &[Observation], checked: &[Checked]) -> String {
    let mut by_verdict: [(Verdict, Vec<String>); 3] = [
        (Verdict::Holds, vec![]),
        (Verdict::DoesNotHold, vec![]),
        (Verdict::CannotBeTested, vec![]),
    ];
    let mut files: Vec<&str> = Vec::new();
    for (i, o) in all.iter().enumerate() {
        let measured = checked
            .iter()
            .find(|c| c.outcomes[i].basis.tag() == "measured");
        let verdict = measured.map_or(Verdict::CannotBeTested, |c| c.outcomes[i].verdict);
        if let Some(c) = measured
            && !files.contains(&c.file.as_str())
        {
            files.push(&c.file);
        }
        for (v, list) in &mut by_verdict {
            if *v == verdict {
                list.push(o.numeral.to_string());
            }
        }
    }
    let lists: Vec<String> = by_verdict
        .iter()
        .map(|(v, list)| {
            let names = if list.is_empty() {
                "none".to_string()
            } else {
                list.join(", ")
            };
            format!("{} {names}", v.label())
        })
        .collect();
    let from = if files.is_empty() {
        "no results file holds measured rows".to_string()
    } else {
        files
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "**On measured data alone** ({from}): {}. Every other verdict below rests on the device model, and its basis says how.",
        lists.join("; ")
    )
}

/// What `dlas claims` prints: per file, each observation's verdict, evidence and devices.
pub fn text_of(all: &[Observation], checked: &[Checked]) -> String {
    let mut out = String::new();
    for c in checked {
        let _ = writeln!(out, "{}", c.file);
        for (o, outcome) in all.iter().zip(&c.outcomes) {
            let _ = writeln!(out, "  {:<5} {}", o.numeral, outcome.verdict.label());
            for e in &outcome.evidence {
                let _ = writeln!(out, "        {e}");
            }
            for e in &outcome.explanation {
                let _ = writeln!(out, "        against it: {e}");
            }
            let _ = writeln!(out, "        devices: {}", devices(&outcome.devices));
            let _ = writeln!(out, "        basis: {}", outcome.basis.sentence());
        }
    }
    out
}

/// Whether the model's verdict on observation `i` equals the
/// measurements' (on the validation rows), in words.
pub fn agreement(checked: &[Checked], i: usize) -> &'static str {
    use crate::validation::{MEASURED, MODELLED};
    let verdict = |label: &str| {
        checked
            .iter()
            .find(|c| c.file == label)
            .map(|c| c.outcomes[i].verdict)
    };
    match (verdict(MEASURED), verdict(MODELLED)) {
        (None, _) | (_, None) => "no validation rows",
        (Some(Verdict::CannotBeTested), _) | (_, Some(Verdict::CannotBeTested)) => {
            "not testable on the validation rows"
        }
        (Some(a), Some(b)) if a == b => "yes",
        _ => "no",
    }
}
