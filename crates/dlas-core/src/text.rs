//! Checks on user text that becomes part of a file name, a results row or
//! a table cell. A name that is a path (`../../x`) would send files out of
//! the project; a newline or a right-to-left override would split a row or
//! make a printed id read as another one. Both are refused where the text
//! enters, with the field that held it.

/// Whether `text` is an identifier: one or more ASCII letters, digits, `-`
/// and `_`, starting with a letter or digit. Study names and the ids of
/// users' models are identifiers because they become file and folder names.
pub fn is_identifier(text: &str) -> bool {
    text.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What an identifier may hold, for error messages.
pub const IDENTIFIER_RULE: &str =
    "an identifier: ASCII letters, digits, `-` and `_`, starting with a letter or digit";

/// Characters that change how the text around them is displayed without
/// being visible themselves: the bidirectional embeddings, overrides and
/// isolates (U+202A-U+202E, U+2066-U+2069) and the implicit marks.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// The first character of `text` that is not printable on one line: a
/// control character (newline and tab included) or a bidirectional
/// control; `None` when every character prints.
pub fn unprintable(text: &str) -> Option<char> {
    text.chars().find(|&c| c.is_control() || is_bidi_control(c))
}

/// `Err("field <name>: …")` when `text` holds a character that does not
/// print on one line (see [`unprintable`]).
pub fn check_printable(field: &str, text: &str) -> Result<(), String> {
    match unprintable(text) {
        None => Ok(()),
        Some(c) => Err(format!(
            "field {field}: holds the unprintable character U+{:04X}; text fields are one line of printable characters",
            u32::from(c)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_names_not_paths() {
        for ok in ["dlas", "compilers", "my-study_2", "0x"] {
            assert!(is_identifier(ok), "{ok}");
        }
        for bad in [
            "", "../../x", "/abs", "a/b", ".hidden", "-flag", "a b", "é", "a\n",
        ] {
            assert!(!is_identifier(bad), "{bad:?}");
        }
    }

    #[test]
    fn controls_and_direction_overrides_do_not_print() {
        assert_eq!(unprintable("resnet18 (Intel® Xeon®)"), None);
        assert_eq!(unprintable("a\nb"), Some('\n'));
        assert_eq!(unprintable("a\tb"), Some('\t'));
        assert_eq!(unprintable("abc\u{202E}fed"), Some('\u{202E}'));
        assert_eq!(unprintable("x\u{2067}"), Some('\u{2067}'));
        let err = check_printable("model", "a\u{202E}b").unwrap_err();
        assert!(
            err.starts_with("field model: holds the unprintable character U+202E"),
            "{err}"
        );
    }
}
