//! How far one machine's times move between sittings: the figure within
//! which the claims tie two measured times (`claims::cells`). A leaf of
//! the crate, so the inputs can carry it without reaching the claims.

use dlas_core::ResultRow;
use dlas_core::results::is_mocked;
use std::collections::BTreeMap;

/// How far the same configuration moves between two sittings on one
/// machine: the 95th percentile of the factor between two medians of one
/// configuration (one row id) measured under two environment records.
/// Measured from the rows that exist, never typed in; without two sittings
/// to measure it, the claims' tolerance stands in for it (`claims::cells::tie_factor`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drift {
    /// The factor (at least 1) within which two measured medians tie.
    pub factor: f64,
    /// Configurations measured in two sittings that it rests on.
    pub pairs: usize,
    /// Their median factor, for the text that states the rule.
    pub median: f64,
}

impl Drift {
    /// The drift over measured `rows` of one machine: every configuration
    /// timed under two or more environment records gives the factor
    /// between its first sitting's median and each later one's. `None`
    /// without such a configuration.
    pub fn of(rows: &[ResultRow]) -> Option<Drift> {
        let mut first: BTreeMap<&str, (&str, f64)> = BTreeMap::new();
        let mut factors = Vec::new();
        for r in rows {
            let Some(ms) = r.median_ms.filter(|m| *m > 0.0) else {
                continue;
            };
            if is_mocked(r) || !r.status.has_timing() {
                continue;
            }
            match first.get(r.id.as_str()) {
                Some((source, earlier)) if *source != r.source => {
                    factors.push((ms / earlier).ln().abs());
                }
                Some(_) => {}
                None => {
                    first.insert(&r.id, (&r.source, ms));
                }
            }
        }
        if factors.is_empty() {
            return None;
        }
        factors.sort_by(f64::total_cmp);
        let at = |q: f64| {
            factors[((q * factors.len() as f64).ceil() as usize).clamp(1, factors.len()) - 1]
        };
        Some(Drift {
            factor: at(0.95).exp(),
            pairs: factors.len(),
            median: at(0.5).exp(),
        })
    }
}
