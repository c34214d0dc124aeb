//! The measurement protocol for a noisy machine: the configurations of one
//! network timed interleaved, round by round, each until its median is
//! known precisely enough.
//!
//! Why this shape (docs/protocol.md has the measurements behind it):
//! - Interleaving (Georges, Buytaert and Eeckhout 2007; Kalibera and Jones
//!   2013). On a shared 2-vCPU machine, neighbours and slow drift change
//!   the speed of the whole machine for seconds to minutes. Timing A's runs,
//!   then B's, charges that drift to whichever configuration happened to
//!   run at the time; timing them round by round, in a seeded random order
//!   per round, spreads it over all of them alike, so their comparison is
//!   fair even when each time alone moves.
//! - Bursts. Each turn of a configuration is one discarded run (its weights
//!   and code back in the caches the previous configuration evicted) and
//!   then timed runs for about [`BURST`]: the protocol still measures warm,
//!   back-to-back inference, as the papers' 150 consecutive runs did.
//! - Adaptive stopping (Georges et al.: choose the number of runs from the
//!   width of the interval you need; Chen and Revels 2016 tune the count per
//!   benchmark). After `min_runs`, a configuration stops as soon as the
//!   distribution-free 95% interval of its median lies within ±`half_width`
//!   of the median, or when its time budget or the maximum count is spent.
//!   A fixed count wastes time on quiet configurations and is too short for
//!   noisy ones (CVs of 6-24% were seen here at 150 runs).
//! - The verdict. A row is stable when that interval lies within ±2%
//!   ([`dlas_core::stats::STABLE_HALF_WIDTH`]); the CV says how spread the
//!   runs are, not how well the median is known, so it decides nothing.

use crate::conditions::{Accumulator, Conditions, Reading};
use anyhow::Result;
use dlas_backends::Session;
use dlas_core::Summary;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Roughly how long one turn of a configuration times back to back.
pub const BURST: Duration = Duration::from_millis(100);

/// When each configuration stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptive {
    /// Runs executed and discarded once, before the first round.
    pub warmup: usize,
    /// Timed runs before any stopping rule applies.
    pub min_runs: usize,
    /// Timed runs after which a configuration stops whatever its interval.
    pub max_runs: usize,
    /// Target: the median's 95% interval within ±`half_width` (relative).
    pub half_width: f64,
    /// Time (timed and re-warming runs) after which a configuration stops
    /// once it has `min_runs`.
    pub budget: Duration,
    /// Time after which a configuration without `min_runs` has failed.
    pub timeout: Duration,
}

impl Adaptive {
    /// Exactly `runs` timed runs: the protocol of a quick or scripted run.
    pub fn fixed(warmup: usize, runs: usize, timeout: Duration) -> Adaptive {
        Adaptive {
            warmup,
            min_runs: runs,
            max_runs: runs,
            half_width: 0.0,
            budget: timeout,
            timeout,
        }
    }
}

/// Why a configuration stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Its interval reached the target.
    Precise,
    /// Its budget was spent first.
    Budget,
    /// It reached the maximum count first.
    MaxRuns,
}

impl Stop {
    pub fn name(self) -> &'static str {
        match self {
            Stop::Precise => "precise",
            Stop::Budget => "budget",
            Stop::MaxRuns => "max-runs",
        }
    }
}

/// How one configuration ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Measured {
        samples: Vec<f64>,
        stop: Stop,
        /// Rounds it took part in.
        rounds: usize,
        conditions: Conditions,
    },
    Failed(String),
}

/// A configuration being measured.
pub struct Slot {
    pub session: Box<dyn Session>,
    pub input: Vec<f32>,
}

struct State {
    slot: Slot,
    index: usize,
    samples: Vec<f64>,
    spent: Duration,
    rounds: usize,
    conditions: Accumulator,
}

/// Measures `slots` interleaved under `protocol`, calling `done(i, outcome)`
/// for slot `i` as soon as it stops, so that each result is recorded before
/// the others finish. `progress(active)` is called after each round.
pub fn measure(
    slots: Vec<Slot>,
    protocol: &Adaptive,
    seed: u64,
    mut done: impl FnMut(usize, Outcome) -> Result<()>,
    mut progress: impl FnMut(usize),
) -> Result<()> {
    let mut active = Vec::with_capacity(slots.len());
    for (index, mut slot) in slots.into_iter().enumerate() {
        match warm_up(&mut slot, protocol) {
            Ok(spent) => active.push(State {
                slot,
                index,
                samples: Vec::new(),
                spent,
                rounds: 0,
                conditions: Accumulator::default(),
            }),
            Err(e) => done(index, Outcome::Failed(e))?,
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    while !active.is_empty() {
        active.shuffle(&mut rng);
        let mut still = Vec::with_capacity(active.len());
        for mut state in active {
            match turn(&mut state, protocol) {
                Ok(None) => still.push(state),
                Ok(Some(stop)) => done(
                    state.index,
                    Outcome::Measured {
                        samples: state.samples,
                        stop,
                        rounds: state.rounds,
                        conditions: state.conditions.finish(),
                    },
                )?,
                Err(e) => done(state.index, Outcome::Failed(e))?,
            }
        }
        active = still;
        progress(active.len());
    }
    Ok(())
}

fn warm_up(slot: &mut Slot, protocol: &Adaptive) -> Result<Duration, String> {
    let started = Instant::now();
    for i in 0..protocol.warmup {
        run_once(slot)?;
        if started.elapsed() > protocol.timeout {
            return Err(format!(
                "timeout after {:.0} s during warm-up run {} of {}",
                protocol.timeout.as_secs_f64(),
                i + 1,
                protocol.warmup
            ));
        }
    }
    Ok(started.elapsed())
}

fn run_once(slot: &mut Slot) -> Result<Duration, String> {
    let t = Instant::now();
    let output = slot
        .session
        .run(black_box(&slot.input))
        .map_err(|e| format!("{e:#}").replace('\n', " "))?;
    let elapsed = t.elapsed();
    black_box(output);
    Ok(elapsed)
}

/// One turn: a discarded run, then timed runs for about [`BURST`]. Returns
/// why the configuration stops, if it does.
fn turn(state: &mut State, protocol: &Adaptive) -> Result<Option<Stop>, String> {
    let before = Reading::now();
    let started = Instant::now();
    run_once(&mut state.slot)?;
    let timed_from = Instant::now();
    loop {
        let elapsed = run_once(&mut state.slot)?;
        state.samples.push(elapsed.as_secs_f64() * 1e3);
        if timed_from.elapsed() >= BURST || state.samples.len() >= protocol.max_runs {
            break;
        }
    }
    state.spent += started.elapsed();
    state.rounds += 1;
    state.conditions.add(&before, &Reading::now());
    let n = state.samples.len();
    if n < protocol.min_runs {
        if state.spent > protocol.timeout {
            return Err(format!(
                "timeout after {:.0} s: {n} of {} timed runs done",
                protocol.timeout.as_secs_f64(),
                protocol.min_runs
            ));
        }
        return Ok(None);
    }
    if n >= protocol.max_runs {
        return Ok(Some(Stop::MaxRuns));
    }
    let summary = Summary::from_samples(&state.samples)
        .ok_or_else(|| "the timer produced no finite samples".to_string())?;
    if summary.half_width() <= protocol.half_width {
        return Ok(Some(Stop::Precise));
    }
    if state.spent >= protocol.budget {
        return Ok(Some(Stop::Budget));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sleeps for its own pattern of durations, in order, and records who ran.
    struct Sleeper {
        name: u8,
        pattern: Vec<u64>,
        at: usize,
        log: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl Session for Sleeper {
        fn run(&mut self, _: &[f32]) -> Result<Vec<f32>> {
            let us = self.pattern[self.at % self.pattern.len()];
            self.at += 1;
            self.log.lock().unwrap().push(self.name);
            std::thread::sleep(Duration::from_micros(us));
            if us == 0 {
                anyhow::bail!("broken\nsession");
            }
            Ok(vec![])
        }
        fn provider(&self) -> String {
            "sleeper".into()
        }
    }

    fn slot(name: u8, pattern: Vec<u64>, log: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>) -> Slot {
        Slot {
            session: Box::new(Sleeper {
                name,
                pattern,
                at: 0,
                log: log.clone(),
            }),
            input: vec![],
        }
    }

    fn run(slots: Vec<Slot>, protocol: Adaptive) -> Vec<(usize, Outcome)> {
        let mut out = Vec::new();
        measure(
            slots,
            &protocol,
            7,
            |i, o| {
                out.push((i, o));
                Ok(())
            },
            |_| {},
        )
        .unwrap();
        out
    }

    fn protocol() -> Adaptive {
        Adaptive {
            warmup: 1,
            min_runs: 20,
            max_runs: 100_000,
            half_width: 0.01,
            budget: Duration::from_secs(3),
            timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn each_configuration_stops_for_its_own_reason() {
        let log = Default::default();
        // 0: steady 5 ms, stops precise (within ±5%, well above the
        // sleep's jitter); 1: alternates 1 and 3 ms, a median whose interval
        // never narrows, so it stops at its budget; 2: fails.
        let slots = vec![
            slot(0, vec![5000], &log),
            slot(1, vec![1000, 3000], &log),
            slot(2, vec![500, 500, 500, 0], &log),
        ];
        let outcomes = run(
            slots,
            Adaptive {
                half_width: 0.05,
                ..protocol()
            },
        );
        let stop_of = |i: usize| {
            outcomes
                .iter()
                .find(|(j, _)| *j == i)
                .map(|(_, o)| o.clone())
                .unwrap()
        };
        match stop_of(0) {
            Outcome::Measured { samples, stop, .. } => {
                assert_eq!(stop, Stop::Precise);
                assert!(samples.len() >= 20);
            }
            other => panic!("{other:?}"),
        }
        match stop_of(1) {
            Outcome::Measured { stop, .. } => assert_eq!(stop, Stop::Budget),
            other => panic!("{other:?}"),
        }
        assert_eq!(stop_of(2), Outcome::Failed("broken session".into()));
    }

    #[test]
    fn configurations_take_turns() {
        let log: std::sync::Arc<std::sync::Mutex<Vec<u8>>> = Default::default();
        // 60 ms runs: a turn is one discarded and two timed runs, so four
        // timed runs take two turns of each configuration.
        let slots = vec![slot(0, vec![60_000], &log), slot(1, vec![60_000], &log)];
        run(slots, Adaptive::fixed(0, 4, Duration::from_secs(10)));
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 12);
        let switches = log.windows(2).filter(|w| w[0] != w[1]).count();
        // Run to completion one after the other, they would switch once.
        assert!(switches >= 2, "turns of 3 runs, interleaved: {log:?}");
        assert!(
            log.chunks(3).all(|t| t.iter().all(|&n| n == t[0])),
            "{log:?}"
        );
    }

    #[test]
    fn a_fixed_protocol_times_exactly_its_count() {
        let log = Default::default();
        let outcomes = run(
            vec![slot(0, vec![100], &log)],
            Adaptive::fixed(2, 7, Duration::from_secs(10)),
        );
        match &outcomes[0].1 {
            Outcome::Measured { samples, stop, .. } => {
                assert_eq!(samples.len(), 7);
                assert_eq!(*stop, Stop::MaxRuns);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn timeout_before_the_minimum_fails_with_progress() {
        let log = Default::default();
        let mut p = protocol();
        p.timeout = Duration::from_millis(150);
        p.min_runs = 1000;
        let outcomes = run(vec![slot(0, vec![20_000], &log)], p);
        match &outcomes[0].1 {
            Outcome::Failed(why) => {
                assert!(why.starts_with("timeout after 0 s:"), "{why}");
                assert!(why.ends_with("of 1000 timed runs done"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_round_order_is_seeded() {
        let order = |seed| {
            let log: std::sync::Arc<std::sync::Mutex<Vec<u8>>> = Default::default();
            let slots = (0..4).map(|n| slot(n, vec![50], &log)).collect();
            measure(
                slots,
                &Adaptive::fixed(0, 3, Duration::from_secs(5)),
                seed,
                |_, _| Ok(()),
                |_| {},
            )
            .unwrap();
            log.lock().unwrap().clone()
        };
        assert_eq!(order(1), order(1));
        assert_ne!(order(1), order(2));
    }
}
