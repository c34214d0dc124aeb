//! Summary statistics of a combination's timed runs.
//!
//! Quantiles come from statrs. The 95% confidence interval of the median is
//! distribution-free: the order statistics x(l) and x(n+1-l), with l the
//! largest rank such that P(B < l) <= 0.025 for B ~ Binomial(n, 1/2), so the
//! interval covers the true median with probability at least 95%.

use serde::{Deserialize, Serialize};
use statrs::distribution::{Binomial, DiscreteCDF};
use statrs::statistics::{Data, Distribution, OrderStatistics};

/// Statistics of one combination's samples, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub runs: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
    pub stddev: f64,
    /// Coefficient of variation: stddev / mean.
    pub cv: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

/// A measurement is stable when the 95% interval of its median lies within
/// ±2% of the median: how well the median is known, which is what every
/// comparison uses. The CV describes the spread of single runs and, with
/// enough runs, can be large while the median is precise.
pub const STABLE_HALF_WIDTH: f64 = 0.02;

impl Summary {
    /// Summarises samples; `None` for an empty slice or a non-finite sample.
    pub fn from_samples(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        let n = samples.len();
        let mut data = Data::new(samples.to_vec());
        let mean = data.mean()?;
        let stddev = if n > 1 { data.std_dev()? } else { 0.0 };
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let l = median_ci_rank(n);
        Some(Summary {
            runs: n,
            median: data.median(),
            p10: data.quantile(0.10),
            p90: data.quantile(0.90),
            p99: data.quantile(0.99),
            mean,
            stddev,
            cv: if mean > 0.0 { stddev / mean } else { 0.0 },
            ci_low: sorted[l - 1],
            ci_high: sorted[n - l],
        })
    }

    /// The larger side of the median's 95% interval, relative to the
    /// median: the interval lies within ±this of the median.
    pub fn half_width(&self) -> f64 {
        if self.median > 0.0 {
            (self.median - self.ci_low).max(self.ci_high - self.median) / self.median
        } else {
            f64::INFINITY
        }
    }

    pub fn is_unstable(&self) -> bool {
        self.half_width() > STABLE_HALF_WIDTH
    }
}

/// The 1-based rank l of the lower bound of the median's 95% interval.
fn median_ci_rank(n: usize) -> usize {
    let Ok(binomial) = Binomial::new(0.5, n as u64) else {
        return 1;
    };
    let mut l = 1;
    // P(B <= k - 1) <= 0.025 keeps coverage of [x(k), x(n+1-k)] at 95% or more.
    while l < n.div_ceil(2) && binomial.cdf(l as u64) <= 0.025 {
        l += 1;
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_summary() {
        let samples: Vec<f64> = (1..=11).map(f64::from).collect();
        let s = Summary::from_samples(&samples).unwrap();
        assert_eq!(s.median, 6.0);
        assert_eq!(s.mean, 6.0);
        // sample standard deviation of 1..=11 is sqrt(11)
        assert!((s.stddev - 11f64.sqrt()).abs() < 1e-12);
        // n = 11: P(B <= 1) = 12/2048 <= 0.025 < P(B <= 2) = 67/2048, so l = 2
        assert_eq!((s.ci_low, s.ci_high), (2.0, 10.0));
        assert!((s.half_width() - 4.0 / 6.0).abs() < 1e-12);
        assert!(s.is_unstable());
    }

    #[test]
    fn stability_is_decided_by_the_interval_not_the_cv() {
        // Wide spread (CV about 15%) but 2001 runs: the median is known to
        // well within 2%.
        let samples: Vec<f64> = (0..2001).map(|i| 10.0 + f64::from(i % 7)).collect();
        let s = Summary::from_samples(&samples).unwrap();
        assert!(s.cv > 0.1, "{}", s.cv);
        assert!(s.half_width() <= STABLE_HALF_WIDTH, "{}", s.half_width());
        assert!(!s.is_unstable());
    }

    #[test]
    fn ci_rank_matches_tables() {
        // Published distribution-free ranks for the median's 95% interval.
        assert_eq!(median_ci_rank(10), 2);
        assert_eq!(median_ci_rank(20), 6);
        assert_eq!(median_ci_rank(100), 40);
        assert_eq!(median_ci_rank(3), 1);
    }

    #[test]
    fn rejects_empty_and_nan() {
        assert!(Summary::from_samples(&[]).is_none());
        assert!(Summary::from_samples(&[1.0, f64::NAN]).is_none());
        let one = Summary::from_samples(&[2.5]).unwrap();
        assert_eq!(
            (one.median, one.stddev, one.ci_low, one.ci_high),
            (2.5, 0.0, 2.5, 2.5)
        );
    }
}
