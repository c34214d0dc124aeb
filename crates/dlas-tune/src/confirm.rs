//! Which schedule a search keeps: its finalists re-measured in interleaved
//! rounds, so the winner is not merely the luckiest single measurement.
//!
//! A search ranks tens or hundreds of candidates by one five-sample
//! measurement each. On a noisy machine the minimum of many noisy costs is
//! biased low (the winner's curse): the search's best is often a candidate
//! that happened to be measured in a quiet moment, and the "speedup" it
//! reports over the default is partly noise. Ansor and AutoTVM re-measure
//! their top candidates for the same reason. Here the best `FINALISTS`
//! schedules of the search, plus the default, are measured again in
//! `ROUNDS` round-robin rounds (so drifting load falls on all of them
//! alike), and the schedule with the lowest median over the pooled samples
//! of those rounds wins. Because the default is always a finalist, a tuned
//! layer is slower than the untuned one only if the confirmation itself
//! says so by chance, not because of one lucky draw in the search.
//!
//! The decision is a function of the records alone (not of the machine that
//! reads them), so the best-of file derived from a log and the outcome of
//! the search that wrote it agree. The "default" it compares against is the
//! schedule the task's search started from: every search measures the
//! engine's untuned schedule first.

use crate::records::cost;
use crate::records::{Phase, Record};
use dlas_engine::Schedule;
use std::collections::HashMap;

/// One measurement of a task, as the decision sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub schedule: Schedule,
    pub phase: Phase,
    /// Per-run milliseconds of each repeat, `None` if the kernel failed.
    pub samples: Option<Vec<f64>>,
}

impl Measured {
    fn cost(&self) -> Option<f64> {
        self.samples.as_deref().and_then(cost)
    }
}

impl From<&Record> for Measured {
    fn from(r: &Record) -> Measured {
        Measured {
            schedule: r.schedule,
            phase: r.phase,
            samples: r.error.is_none().then(|| r.costs_ms.clone()),
        }
    }
}

/// Schedules of the search re-measured besides the default.
pub const FINALISTS: usize = 4;
/// Round-robin rounds of re-measurement of each finalist.
pub const ROUNDS: usize = 3;

/// The schedule a task's search started from: its untuned default at the
/// time (the engine's defaults may change between versions).
pub fn start(history: &[Measured]) -> Option<Schedule> {
    history
        .iter()
        .find(|m| m.phase == Phase::Search)
        .map(|m| m.schedule)
}

/// The finalists of a task's search measurements (in log order): the
/// `FINALISTS` cheapest distinct schedules, best first (ties keep the
/// earlier record), then the schedule the search started from if it was
/// measured and is not among them. Confirmation records and failed
/// candidates are ignored.
pub fn finalists(history: &[Measured]) -> Vec<Schedule> {
    let mut measured: Vec<(f64, Schedule)> = history
        .iter()
        .filter(|r| r.phase == Phase::Search)
        .filter_map(|r| r.cost().map(|c| (c, r.schedule)))
        .collect();
    measured.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<Schedule> = Vec::new();
    for &(_, s) in &measured {
        if out.len() == FINALISTS {
            break;
        }
        if !out.contains(&s) {
            out.push(s);
        }
    }
    if let Some(d) = start(history)
        && !out.contains(&d)
        && measured.iter().any(|&(_, s)| s == d)
    {
        out.push(d);
    }
    out
}

/// Confirmation rounds recorded for each schedule (failed ones included:
/// a round that failed is not retried).
pub fn rounds_done(history: &[Measured]) -> HashMap<Schedule, usize> {
    let mut done = HashMap::new();
    for r in history.iter().filter(|r| r.phase == Phase::Confirm) {
        *done.entry(r.schedule).or_default() += 1;
    }
    done
}

/// What the records of one task decide.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub best: Schedule,
    pub best_ms: f64,
    /// The cost of the schedule the search started from (the untuned
    /// default), measured the same way as `best_ms`.
    pub default_ms: Option<f64>,
    /// Whether the costs come from confirmation rounds (otherwise from the
    /// search's single measurements).
    pub confirmed: bool,
}

/// The best schedule of one task's measurements (in log order). When every finalist has
/// confirmation records (and there are two or more finalists), the costs
/// are the medians of the pooled confirmation samples; otherwise the
/// search's own costs are used, as for records written before confirmation
/// existed or by a search that was interrupted before it.
pub fn decide(history: &[Measured]) -> Option<Decision> {
    let default = start(history);
    let finalists = finalists(history);
    let done = rounds_done(history);
    let complete = finalists.len() >= 2 && finalists.iter().all(|s| done.contains_key(s));
    let mut pooled: HashMap<Schedule, Vec<f64>> = HashMap::new();
    for r in history
        .iter()
        .filter(|r| complete && r.phase == Phase::Confirm)
    {
        if let Some(samples) = &r.samples {
            pooled.entry(r.schedule).or_default().extend(samples);
        }
    }
    let confirmed: Vec<(Schedule, f64)> = finalists
        .iter()
        .filter_map(|s| pooled.get(s).and_then(|v| cost(v)).map(|c| (*s, c)))
        .collect();
    let is_confirmed = !confirmed.is_empty();
    let costs = if !is_confirmed {
        let mut search: HashMap<Schedule, f64> = HashMap::new();
        for r in history.iter().filter(|r| r.phase == Phase::Search) {
            if let Some(c) = r.cost() {
                search
                    .entry(r.schedule)
                    .and_modify(|m| *m = m.min(c))
                    .or_insert(c);
            }
        }
        finalists.iter().map(|s| (*s, search[s])).collect()
    } else {
        confirmed
    };
    // The first of the cheapest: finalists are in search order, best first.
    let &(best, best_ms) = costs.iter().reduce(|a, b| if b.1 < a.1 { b } else { a })?;
    Some(Decision {
        best,
        best_ms,
        default_ms: costs
            .iter()
            .find(|(s, _)| Some(*s) == default)
            .map(|&(_, c)| c),
        confirmed: is_confirmed,
    })
}
