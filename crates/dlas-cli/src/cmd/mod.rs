//! One module per subcommand.
//!
//! Those that measure on this machine, tune, compress to ONNX or drive a
//! cluster need the `host` feature (the default); `cargo xtask reproduce`
//! builds without it, for a first look in minutes.

#[cfg(feature = "host")]
pub mod accuracy;
#[cfg(feature = "host")]
pub mod bench;
pub mod claims;
#[cfg(feature = "host")]
pub mod cluster;
pub mod compare;
#[cfg(feature = "host")]
pub mod compress;
#[cfg(feature = "host")]
pub mod crosscheck;
pub mod devices;
pub mod metrics;
pub mod plan;
pub mod reproduce;
pub mod run;
#[cfg(feature = "host")]
pub mod tune;
pub mod validate;
pub mod zoo;

/// Parsers of the protocol's command-line flags, bounded as the study's
/// fields are (`dlas_core::study::RUNS` and the rest), so a flag cannot ask
/// for what the study file may not.
pub mod bounds {
    use dlas_core::study::{BATCH, RUNS, THREADS, WARMUP, check_bound, check_timeout};
    use std::ops::RangeInclusive;

    fn count(text: &str, field: &str, range: &RangeInclusive<usize>) -> Result<usize, String> {
        let value = text.trim().parse::<usize>().map_err(|_| {
            format!(
                "{field} takes a whole number in {}..={}",
                range.start(),
                range.end()
            )
        })?;
        check_bound(field, value, range)
    }

    pub fn runs(text: &str) -> Result<usize, String> {
        count(text, "--runs", &RUNS)
    }

    pub fn warmup(text: &str) -> Result<usize, String> {
        count(text, "--warmup", &WARMUP)
    }

    /// Threads, 0 meaning one per core where the flag allows it.
    pub fn threads(text: &str) -> Result<usize, String> {
        count(text, "--threads", &THREADS)
    }

    pub fn batch(text: &str) -> Result<usize, String> {
        count(text, "--batch", &BATCH)
    }

    pub fn timeout(text: &str) -> Result<f64, String> {
        let seconds = text
            .trim()
            .parse::<f64>()
            .map_err(|_| "--timeout takes a number of seconds".to_string())?;
        check_timeout("--timeout", seconds)
    }
}
