//! Quoting for POSIX shells: job scripts, commands run on boards, and the
//! resubmission commands printed for a person to paste.

/// Quotes `text` for a POSIX shell (job scripts, remote commands).
pub(crate) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Each item quoted, separated by spaces.
pub(crate) fn words(items: &[String]) -> String {
    items.iter().map(|s| quote(s)).collect::<Vec<_>>().join(" ")
}

/// A word for a shell command line: quoted only when it needs to be.
pub(crate) fn shell_word(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/+=:@,".contains(c))
    {
        text.to_string()
    } else {
        quote(text)
    }
}
