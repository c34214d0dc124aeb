//! The search: an evolutionary loop over one layer's schedules, measured
//! on the machine itself.
//!
//! It starts from the default schedule (so "tuned" can never be slower than
//! "untuned" by more than measurement noise), then draws each candidate
//! either uniformly at random (exploration), as a mutation of a good
//! schedule picked by tournament among the best measured so far, or as a
//! crossover of two of them followed by a mutation. Candidates the engine
//! rejects are counted and never measured; duplicates are never measured
//! twice. The search stops at the trial budget, after `early_stop` trials
//! without a better schedule (Ansor's rule), or when no unmeasured valid
//! candidate can be found. Then its finalists are re-measured in rounds and
//! the winner is decided on those measurements ([`crate::confirm`]).
//!
//! A search resumes from the history of its records: the measured set, the
//! best and the trials since the last improvement are replayed, and the
//! random stream is re-seeded from the task and the number of trials done;
//! confirmation rounds already recorded are not measured again.

use crate::confirm::{self, Measured};
use crate::measure::{LayerProblem, Timer, default_schedule};
use crate::records::{Phase, Record, cost};
use crate::space;
use anyhow::Result;
use dlas_engine::Schedule;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};

/// How many candidates a search may measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub trials: usize,
    /// Stop after this many trials without a better schedule.
    pub early_stop: usize,
}

impl Budget {
    /// The study's setting: Ansor with 20,000 trials and an early stop
    /// after 1,000 without improvement.
    pub const STUDY: Budget = Budget {
        trials: 20_000,
        early_stop: 1_000,
    };
}

/// Why a search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Budget,
    EarlyStop,
    /// No unmeasured valid candidate turned up in many draws.
    Exhausted,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The schedule kept, and its cost and the default's, from the
    /// confirmation rounds when there were two or more finalists.
    pub best: Schedule,
    pub best_ms: f64,
    pub default_ms: Option<f64>,
    /// Whether `best_ms` and `default_ms` come from confirmation rounds.
    pub confirmed: bool,
    /// The search's own best cost, before confirmation: the gap to
    /// `best_ms` is the winner's curse.
    pub search_best_ms: f64,
    /// Candidates measured by the search, including those replayed from
    /// the history.
    pub trials: usize,
    /// Candidates measured by this call's search.
    pub new_trials: usize,
    /// Confirmation rounds measured by this call.
    pub new_confirmations: usize,
    /// Distinct candidates the engine rejected before measurement.
    pub rejected: usize,
    /// Measured candidates whose kernel failed.
    pub failed: usize,
    pub stop: StopReason,
}

/// Where a search is, for progress reports.
#[derive(Debug, Clone, Copy)]
pub struct State {
    pub trials: usize,
    pub best_ms: f64,
    pub default_ms: Option<f64>,
}

/// Called after each measurement with the candidate, the step that
/// measured it, its per-run costs (or why it failed) and where the search
/// is.
pub type OnTrial<'a> = dyn FnMut(Schedule, Phase, &Result<Vec<f64>>, State) -> Result<()> + 'a;

/// Schedules kept as parents: the best measured so far.
const ELITES: usize = 8;
/// Draws without a new valid candidate before the space counts as exhausted.
const MAX_MISSES: usize = 2_000;

/// What a search alone found (before any confirmation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Searched {
    /// The search's best cost and the default's, as measured in the search.
    pub best_ms: f64,
    pub default_ms: Option<f64>,
    /// Candidates measured, including those replayed from the history.
    pub trials: usize,
    /// Candidates measured by this call.
    pub new_trials: usize,
    /// Distinct candidates the engine rejected before measurement.
    pub rejected: usize,
    /// Measured candidates whose kernel failed.
    pub failed: usize,
    pub stop: StopReason,
}

/// Searches `problem`'s schedules, then confirms its finalists and decides
/// which schedule it keeps. `history` is what earlier searches of the same
/// task on this machine recorded, in log order (records of other tasks are
/// ignored); `on_trial` is called after every measurement, before the next
/// one starts (it appends the record). Errors from `on_trial` end the
/// search.
pub fn tune(
    problem: &LayerProblem,
    budget: Budget,
    timer: &Timer,
    history: &[Record],
    seed: u64,
    on_trial: &mut OnTrial<'_>,
) -> Result<Outcome> {
    let task = problem.task();
    let mut history = measured_of(&task, history);
    let searched = search_into(problem, budget, timer, &mut history, seed, on_trial)?;
    // Confirmation: every finalist once per round, round after round, so
    // that a change in the machine's load falls on all of them alike.
    let finalists = confirm::finalists(&history);
    let mut new_confirmations = 0;
    if finalists.len() >= 2 {
        let done = confirm::rounds_done(&history);
        for round in 0..confirm::ROUNDS {
            for &f in &finalists {
                if done.get(&f).copied().unwrap_or(0) > round {
                    continue;
                }
                let result = problem.measure(f, timer);
                new_confirmations += 1;
                let state = State {
                    trials: searched.trials,
                    best_ms: searched.best_ms,
                    default_ms: searched.default_ms,
                };
                keep(f, Phase::Confirm, result, state, on_trial, &mut history)?;
            }
        }
    }
    let decision = confirm::decide(&history)
        .ok_or_else(|| anyhow::anyhow!("no candidate of {task} could be measured"))?;
    Ok(Outcome {
        best: decision.best,
        best_ms: decision.best_ms,
        default_ms: decision.default_ms,
        confirmed: decision.confirmed,
        search_best_ms: searched.best_ms,
        trials: searched.trials,
        new_trials: searched.new_trials,
        new_confirmations,
        rejected: searched.rejected,
        failed: searched.failed,
        stop: searched.stop,
    })
}

/// The search of [`tune`] alone, without confirmation: the task scheduler
/// ([`crate::allocate`]) hands a task its trials a chunk at a time and
/// confirms each task once, when the whole budget is spent.
pub fn search(
    problem: &LayerProblem,
    budget: Budget,
    timer: &Timer,
    history: &[Record],
    seed: u64,
    on_trial: &mut OnTrial<'_>,
) -> Result<Searched> {
    let mut history = measured_of(&problem.task(), history);
    search_into(problem, budget, timer, &mut history, seed, on_trial)
}

/// The records of `task` among `history`.
fn measured_of(task: &crate::records::TaskKey, history: &[Record]) -> Vec<Measured> {
    history
        .iter()
        .filter(|r| r.task == *task)
        .map(Measured::from)
        .collect()
}

/// The search loop: replays the search records of `history`, then
/// measures candidates (appending them to `history`) until a stopping rule.
fn search_into(
    problem: &LayerProblem,
    budget: Budget,
    timer: &Timer,
    history: &mut Vec<Measured>,
    seed: u64,
    on_trial: &mut OnTrial<'_>,
) -> Result<Searched> {
    let task = problem.task();
    let w = task.layer.workload;
    let default = default_schedule(&task);
    let mut seen = Seen {
        default,
        measured: HashMap::new(),
        ranked: Vec::new(),
        state: State {
            trials: 0,
            best_ms: f64::INFINITY,
            default_ms: None,
        },
        since_best: 0,
    };
    let mut failed = 0;
    for m in history.iter().filter(|m| m.phase == Phase::Search) {
        seen.record(m.schedule, m.samples.as_deref().and_then(cost));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ task_hash(&task) ^ seen.state.trials as u64);
    let mut invalid: HashSet<Schedule> = HashSet::new();
    let mut new_trials = 0;
    let stop = loop {
        if seen.state.trials >= budget.trials {
            break StopReason::Budget;
        }
        if seen.since_best >= budget.early_stop {
            break StopReason::EarlyStop;
        }
        let candidate = if !seen.measured.contains_key(&default) {
            Some(default)
        } else {
            let mut misses = 0;
            loop {
                let parents: Vec<Schedule> = seen.ranked.iter().map(|&(_, s)| s).collect();
                let c = propose(default, &parents, &mut rng);
                if seen.measured.contains_key(&c) || invalid.contains(&c) {
                    misses += 1;
                } else if c.validate(&w).is_err() {
                    invalid.insert(c);
                    misses += 1;
                } else {
                    break Some(c);
                }
                if misses >= MAX_MISSES {
                    break None;
                }
            }
        };
        let Some(candidate) = candidate else {
            break StopReason::Exhausted;
        };
        let result = problem.measure(candidate, timer);
        let c = result.as_ref().ok().and_then(|samples| cost(samples));
        failed += usize::from(c.is_none());
        seen.record(candidate, c);
        new_trials += 1;
        keep(
            candidate,
            Phase::Search,
            result,
            seen.state,
            on_trial,
            history,
        )?;
    };
    Ok(Searched {
        best_ms: seen.state.best_ms,
        default_ms: seen.state.default_ms,
        trials: seen.state.trials,
        new_trials,
        rejected: invalid.len(),
        failed,
        stop,
    })
}

/// Hands a measurement to `on_trial` (which records it) and adds it to the
/// history the decision is made from.
fn keep(
    schedule: Schedule,
    phase: Phase,
    result: Result<Vec<f64>>,
    state: State,
    on_trial: &mut OnTrial<'_>,
    history: &mut Vec<Measured>,
) -> Result<()> {
    on_trial(schedule, phase, &result, state)?;
    history.push(Measured {
        schedule,
        phase,
        samples: result.ok(),
    });
    Ok(())
}

/// What a search has measured so far.
struct Seen {
    default: Schedule,
    measured: HashMap<Schedule, Option<f64>>,
    /// The best `ELITES` measured, cheapest first.
    ranked: Vec<(f64, Schedule)>,
    state: State,
    since_best: usize,
}

impl Seen {
    fn record(&mut self, s: Schedule, c: Option<f64>) {
        self.measured.insert(s, c);
        self.state.trials += 1;
        if s == self.default {
            self.state.default_ms = self.state.default_ms.or(c);
        }
        match c {
            Some(c) if c < self.state.best_ms => {
                self.state.best_ms = c;
                self.since_best = 0;
            }
            _ => self.since_best += 1,
        }
        if let Some(c) = c {
            self.ranked.push((c, s));
            self.ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
            self.ranked.truncate(ELITES);
        }
    }
}

/// One candidate: random a quarter of the time (or while there are fewer
/// than two parents), otherwise a mutation of a tournament winner or a
/// mutated crossover of two winners.
fn propose(like: Schedule, parents: &[Schedule], rng: &mut ChaCha8Rng) -> Schedule {
    let tournament = |rng: &mut ChaCha8Rng| {
        // `parents` is sorted best first: the smaller index wins.
        let a = rng.random_range(0..parents.len());
        let b = rng.random_range(0..parents.len());
        parents[a.min(b)]
    };
    if parents.len() < 2 || rng.random_bool(0.25) {
        return space::random(like, rng);
    }
    if rng.random_bool(0.6) {
        let p = tournament(rng);
        space::mutate(p, rng)
    } else {
        let (a, b) = (tournament(rng), tournament(rng));
        space::mutate(space::crossover(a, b, rng), rng)
    }
}

/// A stable 64-bit hash of a task, to seed its random stream.
fn task_hash(task: &crate::records::TaskKey) -> u64 {
    let json = serde_json::to_vec(task).expect("a task serialises");
    let digest = Sha256::digest(&json);
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}
