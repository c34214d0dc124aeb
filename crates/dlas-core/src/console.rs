//! Printing that never panics. `println!` and `eprintln!` panic when their
//! stream is closed (`dlas run ... 2>&1 | head -1` closes both), and a panic
//! in the middle of a run stops it between two measurements. These macros
//! drop the line instead: a measurement goes on, and is recorded, whether
//! or not anyone still reads what it prints. `cargo clippy` denies the std
//! macros outside tests (`clippy.toml`, `[workspace.lints]`), so every line
//! the program prints goes through these. `crates/dlas-cli/tests/commands.rs`
//! runs a host measurement with both streams closed.

/// `println!` that loses the line, rather than panicking, when standard
/// output is closed.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stdout().lock(), $($arg)*);
    }};
}

/// `eprintln!` that loses the line, rather than panicking, when standard
/// error is closed.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr().lock(), $($arg)*);
    }};
}

/// `print!` that loses the text, rather than panicking, when standard
/// output is closed.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!(::std::io::stdout().lock(), $($arg)*);
    }};
}
