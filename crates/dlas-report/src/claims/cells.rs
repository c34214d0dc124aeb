//! The cells the observations count over: one cell per device, network,
//! compression and tuning, holding the native engine's batch-1 median per
//! algorithm, and the comparisons the study makes between cells.
//!
//! Every better-or-worse decision goes through [`order`] or [`order_times`]:
//! two numbers within the bundle's [`TOLERANCE`] of each other are a tie,
//! and two measured times are a tie when their 95% confidence intervals
//! overlap or when they differ by less than the machine's [`Drift`]
//! between sittings, so a verdict never rests on a difference the protocol
//! cannot resolve. The intervals describe one sitting (about ±1%); two
//! rows of one results file may be measured an hour apart, and the same
//! configuration measured in two sittings moves by more than that.

use super::TOLERANCE;
use crate::drift::Drift;
use dlas_core::results::is_mocked;
use dlas_core::{Algorithm, Compression, Dataset, ResultRow};
use std::collections::BTreeMap;

/// How one number compares with another once differences the protocol
/// cannot resolve are ties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Below the other by more than the tolerance (or its interval lies wholly below).
    Below,
    Tie,
    Above,
}

/// Compares two positive numbers (times, speedups, ratios): a tie when
/// neither exceeds the other by more than [`TOLERANCE`].
pub fn order(a: f64, b: f64) -> Order {
    if a * TOLERANCE < b {
        Order::Below
    } else if b * TOLERANCE < a {
        Order::Above
    } else {
        Order::Tie
    }
}

/// The factor within which two measured times tie: the measured drift,
/// or the tolerance where none was measured.
pub fn tie_factor(drift: Option<Drift>) -> f64 {
    drift.map_or(TOLERANCE, |d| d.factor)
}

/// The tie rule for measured times in words, with the figure it uses.
pub fn tie_rule(drift: Option<Drift>) -> String {
    match drift {
        Some(d) => format!(
            "two measured times whose 95% confidence intervals overlap, or which differ by less than the machine's drift between sittings ({}x: the 95th percentile over {} configurations measured in two sittings on the calibrated machine, median {}x), are a tie",
            num(d.factor),
            d.pairs,
            num(d.median)
        ),
        None => format!(
            "two measured times whose 95% confidence intervals overlap, or which differ by less than {}% (no configuration was measured in two sittings, so the tolerance stands in for the drift between sittings), are a tie",
            (100.0 * (TOLERANCE - 1.0)).round()
        ),
    }
}

/// A cell's median time, with its 95% confidence interval when the row was
/// measured (a mocked row's interval describes the model's synthetic
/// samples, not uncertainty about the device, so it is not used) and the
/// drift between sittings that a measured comparison must exceed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Time {
    pub ms: f64,
    pub interval: Option<(f64, f64)>,
    /// The factor within which a measured time ties with another (1 for
    /// modelled times, which [`order`] compares).
    pub drift: f64,
}

impl Time {
    /// `drift` is the factor of [`Drift`] (or the tolerance).
    pub fn of(row: &ResultRow, ms: f64, drift: f64) -> Time {
        let interval = match (row.ci95_low_ms, row.ci95_high_ms) {
            (Some(low), Some(high)) if !is_mocked(row) && low <= high => Some((low, high)),
            _ => None,
        };
        Time {
            ms,
            interval,
            drift: if interval.is_some() { drift } else { 1.0 },
        }
    }
}

/// Compares two times: measured times with intervals tie when the
/// intervals overlap or the times lie within the drift between sittings;
/// otherwise [`order`] applies the tolerance.
pub fn order_times(a: Time, b: Time) -> Order {
    match (a.interval, b.interval) {
        (Some((a_low, a_high)), Some((b_low, b_high))) => {
            let drift = a.drift.max(b.drift);
            if a_high < b_low && a.ms * drift < b.ms {
                Order::Below
            } else if b_high < a_low && b.ms * drift < a.ms {
                Order::Above
            } else {
                Order::Tie
            }
        }
        _ => order(a.ms, b.ms),
    }
}

/// The cells for, against and tied with a claim, printed as
/// "k of n (p%; t tied, w against)".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Votes {
    pub hits: usize,
    pub ties: usize,
    pub misses: usize,
}

impl Votes {
    /// Counts a comparison: `Below` is a hit when `hit_when` is `Below`, and so on.
    pub fn add(&mut self, order: Order, hit_when: Order) {
        if order == Order::Tie {
            self.ties += 1;
        } else if order == hit_when {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }

    pub fn total(self) -> usize {
        self.hits + self.ties + self.misses
    }

    /// Hits over all cells, ties included in the total.
    pub fn tally(self) -> Tally {
        Tally {
            hits: self.hits,
            total: self.total(),
        }
    }
}

impl std::fmt::Display for Votes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Tally { hits, total } = self.tally();
        write!(
            f,
            "{hits} of {total} ({:.0}%; {} tied, {} against)",
            100.0 * self.tally().share(),
            self.ties,
            self.misses
        )
    }
}

/// At most `shown` of `items`, then how many more there are.
pub fn first_of(items: &[String], shown: usize) -> String {
    let mut out = items
        .iter()
        .take(shown)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > shown {
        out += &format!("; and {} more", items.len() - shown);
    }
    out
}

/// Where a measurement sits in the study, less the algorithm.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key<'a> {
    pub device: &'a str,
    pub dataset: Dataset,
    pub model: &'a str,
    pub compression: Compression,
    pub tuned: bool,
}

impl<'a> Key<'a> {
    /// The same cell under another compression.
    pub fn with_compression(&self, compression: Compression) -> Key<'a> {
        Key {
            compression,
            ..self.clone()
        }
    }

    /// The same cell, tuned or not.
    pub fn with_tuning(&self, tuned: bool) -> Key<'a> {
        Key {
            tuned,
            ..self.clone()
        }
    }
}

impl Key<'_> {
    /// The device and network, for evidence that compares the
    /// compressions or tunings of one network.
    pub fn network(&self) -> String {
        format!("{} {}/{}", self.device, self.dataset, self.model)
    }

    pub fn tuning(&self) -> &'static str {
        if self.tuned { "tuned" } else { "untuned" }
    }
}

impl std::fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.network(),
            self.compression,
            self.tuning()
        )
    }
}

/// Medians of the native engine's rows (the algorithm axis) at batch 1.
pub struct Cells<'a> {
    times: BTreeMap<Key<'a>, BTreeMap<Algorithm, Time>>,
    /// Devices in the order their first row appears, for stable evidence.
    order: Vec<&'a str>,
}

impl<'a> Cells<'a> {
    /// Rows without timing, at other batch sizes, of any compiler but the
    /// native engine (runtimes that choose their own kernels, and Apache
    /// TVM, whose algorithms and tuning are its own: its rows never enter
    /// the native engine's cells), or of an algorithm the paper did not compare
    /// (winograd: its claims are about direct, gemm and spatial pack, and a
    /// fourth algorithm would change every "fastest" and "over dense" they
    /// count) do not enter. Where an algorithm was measured in several
    /// formats or files, its fastest time counts.
    /// `drift` is the factor within which measured times tie ([`Time`]).
    pub fn new(rows: &'a [ResultRow], drift: f64) -> Cells<'a> {
        Cells::of_compiler(rows, dlas_core::NATIVE, drift)
    }

    /// The cells of another compiler with an algorithm axis (Apache TVM,
    /// whose convolutions are legalized to the same three algorithms), for
    /// the observations decided on its rows apart from the native engine's.
    pub fn of_compiler(rows: &'a [ResultRow], compiler: &str, drift: f64) -> Cells<'a> {
        let mut times: BTreeMap<Key, BTreeMap<Algorithm, Time>> = BTreeMap::new();
        let mut order = Vec::new();
        for r in rows {
            let Some(ms) = r.median_ms else { continue };
            if r.batch != 1
                || !r.status.has_timing()
                || r.compiler != compiler
                || !r.algorithm.in_dlas_paper()
            {
                continue;
            }
            if !order.contains(&r.device.as_str()) {
                order.push(r.device.as_str());
            }
            let key = Key {
                device: &r.device,
                dataset: r.dataset,
                model: &r.model,
                compression: r.compression,
                tuned: r.tuned,
            };
            let time = Time::of(r, ms, drift);
            let slot = times
                .entry(key)
                .or_default()
                .entry(r.algorithm)
                .or_insert(time);
            if ms < slot.ms {
                *slot = time;
            }
        }
        Cells { times, order }
    }

    /// Every cell, in key order.
    pub fn keys(&self) -> impl Iterator<Item = &Key<'a>> {
        self.times.keys()
    }

    /// The fastest algorithm of a cell and its time.
    pub fn best(&self, key: &Key) -> Option<(Algorithm, f64)> {
        self.best_time(key).map(|(a, t)| (a, t.ms))
    }

    /// The fastest algorithm of a cell and its time with its interval.
    pub fn best_time(&self, key: &Key) -> Option<(Algorithm, Time)> {
        self.times
            .get(key)?
            .iter()
            .map(|(a, t)| (*a, *t))
            .min_by(|x, y| x.1.ms.total_cmp(&y.1.ms))
    }

    /// Every algorithm measured in a cell, with its time.
    pub fn algorithms(&self, key: &Key) -> Vec<(Algorithm, Time)> {
        self.times
            .get(key)
            .map(|t| t.iter().map(|(a, t)| (*a, *t)).collect())
            .unwrap_or_default()
    }

    /// How cell `a` compares with cell `b`, each with its fastest algorithm:
    /// `Below` when `a` is faster.
    pub fn order(&self, a: &Key, b: &Key) -> Option<Order> {
        Some(order_times(self.best_time(a)?.1, self.best_time(b)?.1))
    }

    /// How much faster the cell is than the dense network under the same
    /// device and tuning, each with its fastest algorithm.
    pub fn speedup_over_dense(&self, key: &Key) -> Option<f64> {
        let dense = self.best(&key.with_compression(Compression::Dense))?.1;
        Some(dense / self.best(key)?.1)
    }

    /// How much faster tuning makes the cell (fastest untuned over fastest tuned).
    pub fn tuning_speedup(&self, key: &Key) -> Option<f64> {
        let untuned = self.best(&key.with_tuning(false))?.1;
        Some(untuned / self.best(&key.with_tuning(true))?.1)
    }

    /// Sorts devices by the order of their first row.
    pub fn ordered(&self, devices: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut devices: Vec<&str> = devices.into_iter().collect();
        devices.sort_by_key(|d| self.order.iter().position(|o| o == d));
        devices.dedup();
        devices.into_iter().map(String::from).collect()
    }
}

/// Hits out of a total, printed as "k of n (p%)".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub hits: usize,
    pub total: usize,
}

impl Tally {
    pub fn add(&mut self, hit: bool) {
        self.hits += usize::from(hit);
        self.total += 1;
    }

    pub fn share(self) -> f64 {
        self.hits as f64 / self.total.max(1) as f64
    }

    /// A strict majority of the cells: the study's "generally" and "most".
    pub fn majority(self) -> bool {
        self.total > 0 && self.share() > super::GENERALLY
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} ({:.0}%)",
            self.hits,
            self.total,
            100.0 * self.share()
        )
    }
}

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// Spearman's rank correlation (ties get their mean rank); `None` under
/// three points or when either variable is constant.
pub fn spearman(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() != ys.len() || xs.len() < 3 {
        return None;
    }
    let ranks = |v: &[f64]| -> Vec<f64> {
        v.iter()
            .map(|x| {
                let below = v.iter().filter(|y| *y < x).count() as f64;
                let equal = v.iter().filter(|y| *y == x).count() as f64;
                below + (equal + 1.0) / 2.0
            })
            .collect()
    };
    let (rx, ry) = (ranks(xs), ranks(ys));
    let n = rx.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    (vx > 0.0 && vy > 0.0).then(|| cov / (vx * vy).sqrt())
}

/// A number for evidence: three significant digits.
pub fn num(v: f64) -> String {
    dlas_core::results::round_significant(v, 3).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_ranks_and_tallies() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        assert_eq!(spearman(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        // Ranks of (3.5, 5.3, 25.6, 28.7) against (71.9, 77.7, 76.1, 77.1): 0.4.
        let rho = spearman(&[3.5, 5.3, 25.6, 28.7], &[71.9, 77.7, 76.1, 77.1]).unwrap();
        assert!((rho - 0.4).abs() < 1e-12, "{rho}");
        let mut t = Tally::default();
        t.add(true);
        t.add(false);
        assert!(!t.majority(), "one of two is not a majority");
        t.add(true);
        assert!(t.majority());
        assert_eq!(t.to_string(), "2 of 3 (67%)");
        assert!(!Tally::default().majority());
    }

    #[test]
    fn differences_within_the_tolerance_or_the_intervals_are_ties() {
        assert_eq!(order(1.0, 1.09), Order::Tie);
        assert_eq!(order(1.0, 1.11), Order::Below);
        assert_eq!(order(1.11, 1.0), Order::Above);
        let t = |ms, interval: Option<(f64, f64)>| Time {
            ms,
            interval,
            drift: if interval.is_some() { 1.03 } else { 1.0 },
        };
        // Overlapping intervals tie, however far the medians are.
        assert_eq!(
            order_times(t(1.0, Some((0.9, 1.5))), t(2.0, Some((1.4, 2.1)))),
            Order::Tie
        );
        // Apart intervals decide beyond the drift between sittings ...
        assert_eq!(
            order_times(t(1.0, Some((0.99, 1.01))), t(1.05, Some((1.04, 1.06)))),
            Order::Below
        );
        // ... and within it the two are a tie.
        assert_eq!(
            order_times(t(1.0, Some((0.995, 1.005))), t(1.02, Some((1.015, 1.025)))),
            Order::Tie
        );
        assert_eq!(
            order_times(t(1.0, None), t(1.05, Some((1.04, 1.06)))),
            Order::Tie
        );
        let mut v = Votes::default();
        v.add(Order::Below, Order::Below);
        v.add(Order::Tie, Order::Below);
        v.add(Order::Above, Order::Below);
        assert_eq!(v.to_string(), "1 of 3 (33%; 1 tied, 1 against)");
        let items: Vec<String> = ["a", "b", "c"].map(String::from).into();
        assert_eq!(first_of(&items, 2), "a; b; and 1 more");
        assert_eq!(first_of(&items, 3), "a; b; c");
    }

    #[test]
    fn drift_is_measured_on_configurations_timed_in_two_sittings() {
        let row = |id: &str, source: &str, ms: f64| {
            let mut r = crate::claims::fixtures::row(
                "host",
                Dataset::Cifar10,
                "resnet18",
                Compression::Dense,
                Algorithm::Gemm,
                false,
                ms,
            );
            r.id = id.into();
            r.source = source.into();
            r
        };
        // One sitting only: nothing to measure, and the tolerance stands in.
        let one = [row("a", "env-1", 1.0), row("b", "env-1", 2.0)];
        assert_eq!(Drift::of(&one), None);
        assert_eq!(tie_factor(None), TOLERANCE);
        // Two sittings: "a" moved by 1.2x, "b" by 1.05x; the 95th percentile of two is the larger.
        let two = [
            row("a", "env-1", 1.0),
            row("b", "env-1", 2.0),
            row("a", "env-2", 1.2),
            row("b", "env-2", 1.9),
            row("c", "mock-v5", 3.0),
        ];
        let d = Drift::of(&two).expect("two configurations in two sittings");
        assert_eq!(d.pairs, 2);
        assert!((d.factor - 1.2).abs() < 1e-12, "{d:?}");
        assert!((d.median - 2.0 / 1.9).abs() < 1e-12, "{d:?}");
    }

    #[test]
    fn only_the_native_engine_enters_the_cells() {
        let row = |compiler: &str, ms| {
            let mut r = crate::claims::fixtures::row(
                "host",
                Dataset::Cifar10,
                "resnet18",
                Compression::Dense,
                Algorithm::Gemm,
                true,
                ms,
            );
            r.compiler = compiler.into();
            r
        };
        // TVM's GEMM is faster, but it is TVM's, not the native engine's.
        let rows = [row(dlas_core::NATIVE, 10.0), row("tvm", 5.0)];
        let cells = Cells::new(&rows, 1.1);
        let key = cells.keys().next().cloned().expect("one cell");
        assert_eq!(cells.keys().count(), 1);
        assert_eq!(cells.best(&key), Some((Algorithm::Gemm, 10.0)));
    }
}
