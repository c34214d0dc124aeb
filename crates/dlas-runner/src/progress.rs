//! A spinner for long steps that report no progress of their own (a
//! MetaSchedule tuning runs for minutes in another process): on a terminal
//! it shows the step and the time it has taken; elsewhere the step is one
//! line on standard error.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// Starts showing `message`; `finish_and_clear` the bar when the step ends.
pub fn spinner(message: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        dlas_core::errln!("{message}");
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
    );
    bar.set_message(message.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
