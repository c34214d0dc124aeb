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
//! - One machine state ([`NearState`]). A virtual machine whose vCPUs the
//!   host moves between cores that share a cache and cores that do not
//!   runs in two states, seconds each, the engine up to 1.75x slower in
//!   the far one. Adaptive stopping would let one configuration finish in
//!   one state and the next in the other. So only bursts in the near state
//!   (the core-to-core round trip before and after them within
//!   [`STATES_APART`] of the lowest seen) count towards a median and its
//!   stopping; the others are kept apart, and a configuration that never
//!   ran in the near state is measured in the far one and says so.

use crate::conditions::{Accumulator, Conditions, Reading};
use crate::watchdog::Watchdog;
use anyhow::Result;
use dlas_backends::Session;
use dlas_core::Summary;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;
use std::ops::Range;
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
    /// once it has `budget_runs`.
    pub budget: Duration,
    /// Timed runs (in either machine state) before the budget may stop a
    /// configuration (at least `min_runs`): a slow configuration's budget
    /// grows with its time, up to the timeout.
    pub budget_runs: usize,
    /// Time (loading, warm-up, timed and re-warming runs) after which a
    /// configuration stops: with the runs it has once it has `min_runs`,
    /// as failed before. The watchdog enforces it even on a run that
    /// never returns ([`crate::watchdog`]).
    pub timeout: Duration,
}

impl Adaptive {
    /// How long a run reads round trips before its first configuration
    /// ([`NearState::probe`]): 10 s for an adaptive protocol, none for a
    /// fixed count (quick and scripted runs), which learns the near state
    /// from its own bursts.
    pub fn near_probe(&self) -> Duration {
        if self.half_width > 0.0 {
            NEAR_PROBE
        } else {
            Duration::ZERO
        }
    }

    /// Timed runs before the budget may stop a configuration: `budget_runs`,
    /// never fewer than `min_runs`.
    fn least_at_budget(&self) -> usize {
        self.budget_runs.max(self.min_runs)
    }

    /// Exactly `runs` timed runs: the protocol of a quick or scripted run.
    pub fn fixed(warmup: usize, runs: usize, timeout: Duration) -> Adaptive {
        Adaptive {
            warmup,
            min_runs: runs,
            max_runs: runs,
            half_width: 0.0,
            budget: timeout,
            budget_runs: runs,
            timeout,
        }
    }
}

/// How long a measurement reads round trips before its first timing
/// ([`NearState::probe`]): long enough, where the two states were seen
/// (each lasting 2-10 s), to meet the near one.
pub const NEAR_PROBE: Duration = Duration::from_secs(10);

/// Round trips further apart than this factor belong to different machine
/// states: tens against hundreds of ns, cores that share a cache or not
/// (docs/protocol.md, "Two states").
pub const STATES_APART: f64 = 2.0;

/// The lowest floor [`NearState`] reckons with, in ns. On the AMD EPYC
/// guest, an idle guest's round trips fell to 20-30 ns now and then (both
/// vCPUs, it seems, on the two hardware threads of one core), against
/// 50-110 ns for cores of one L3 and 300-350 for cores of two: a floor of
/// 28 ns would have put the L3 state among the far ones. Every round trip
/// under 2 x this counts as near.
const FLOOR_AT_LEAST_NS: f64 = 75.0;

/// The machine's near state, as the lowest core-to-core round trip read
/// so far (at least [`FLOOR_AT_LEAST_NS`]): a burst counts when both
/// readings around it are within [`STATES_APART`] of it. Kept across the
/// chunks of a run, so that every row of a run describes the same state;
/// on a machine of one state (or one CPU, where no round trip is read)
/// every burst counts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NearState {
    floor_ns: Option<f64>,
}

impl NearState {
    /// Reads the round trip every 20 ms for `span`: long enough, on the
    /// machine where the two states were seen (each lasting 2-10 s), to
    /// meet the near one before the first configuration is timed.
    /// Where no round trip can be read (one CPU), it returns at once.
    pub fn probe(span: Duration) -> NearState {
        let mut near = NearState::default();
        let started = Instant::now();
        while started.elapsed() < span {
            let reading = Reading::now();
            if reading.round_trip_ns.is_none() {
                break;
            }
            near.see(&reading);
            std::thread::sleep(Duration::from_millis(20));
        }
        near
    }

    /// The lowest round trip seen, in ns.
    pub fn floor_ns(&self) -> Option<f64> {
        self.floor_ns
    }

    /// Whether `reading` finds the machine in the near state; the reading
    /// also counts towards the floor.
    pub fn holds_after(&mut self, reading: &Reading) -> bool {
        self.see(reading);
        self.holds(reading)
    }

    fn see(&mut self, r: &Reading) {
        if let Some(ns) = r.round_trip_ns {
            self.floor_ns = Some(self.floor_ns.map_or(ns, |f| f.min(ns)));
        }
    }

    fn holds(&self, r: &Reading) -> bool {
        match (self.floor_ns, r.round_trip_ns) {
            (Some(floor), Some(ns)) => ns <= STATES_APART * floor.max(FLOOR_AT_LEAST_NS),
            _ => true,
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
    /// Its timeout came first: before its budget, or before it had
    /// `budget_runs` (it stops when a next turn would end past it).
    Timeout,
}

impl Stop {
    pub fn name(self) -> &'static str {
        match self {
            Stop::Precise => "precise",
            Stop::Budget => "budget",
            Stop::MaxRuns => "max-runs",
            Stop::Timeout => "timeout",
        }
    }
}

/// How one configuration ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Measured {
        /// The timed runs of the bursts that count: those in the near
        /// state, or (`far_only`) all of them.
        samples: Vec<f64>,
        /// Timed runs of bursts in the far state, left out of `samples`.
        far: Vec<f64>,
        /// No burst ran in the near state: `samples` are the far ones.
        far_only: bool,
        /// The near state's round trip when it stopped (ns; none where
        /// none was read).
        floor_ns: Option<f64>,
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
    /// The caller's key for it, which the watchdog reports.
    pub key: usize,
}

struct State {
    slot: Slot,
    index: usize,
    samples: Vec<f64>,
    bursts: Vec<Burst>,
    spent: Duration,
    rounds: usize,
}

/// One turn's timed runs and the readings around them.
struct Burst {
    runs: Range<usize>,
    before: Reading,
    after: Reading,
}

/// A configuration's runs split by the state its bursts ran in.
struct Split {
    near: Vec<f64>,
    far: Vec<f64>,
    conditions: Accumulator,
}

impl State {
    fn split(&self, state: &NearState) -> Split {
        let mut split = Split {
            near: Vec::new(),
            far: Vec::new(),
            conditions: Accumulator::default(),
        };
        for b in &self.bursts {
            let runs = &self.samples[b.runs.clone()];
            if state.holds(&b.before) && state.holds(&b.after) {
                split.near.extend_from_slice(runs);
                split.conditions.add(&b.before, &b.after);
            } else {
                split.far.extend_from_slice(runs);
            }
        }
        split
    }

    /// How many timed runs [`State::split`] would count as near, without
    /// copying them.
    fn near_runs(&self, state: &NearState) -> usize {
        self.bursts
            .iter()
            .filter(|b| state.holds(&b.before) && state.holds(&b.after))
            .map(|b| b.runs.len())
            .sum()
    }

    /// The outcome of a configuration that stopped for `stop`.
    fn outcome(self, stop: Stop, near: &NearState) -> Outcome {
        let split = self.split(near);
        if split.near.is_empty() {
            let mut conditions = Accumulator::default();
            for b in &self.bursts {
                conditions.add(&b.before, &b.after);
            }
            return Outcome::Measured {
                samples: self.samples,
                far: Vec::new(),
                far_only: true,
                floor_ns: near.floor_ns,
                stop,
                rounds: self.rounds,
                conditions: conditions.finish(),
            };
        }
        Outcome::Measured {
            samples: split.near,
            far: split.far,
            far_only: false,
            floor_ns: near.floor_ns,
            stop,
            rounds: self.rounds,
            conditions: split.conditions.finish(),
        }
    }
}

/// Measures `slots` interleaved under `protocol`, calling `done(i, outcome)`
/// for slot `i` as soon as it stops, so that each result is recorded before
/// the others finish. `progress(active)` is called after each round.
/// `near` is the run's near state, which the readings around each burst
/// update.
/// `watchdog`, when given, is armed around every warm-up and burst with
/// the configuration's deadline.
pub fn measure(
    slots: Vec<Slot>,
    (protocol, seed): (&Adaptive, u64),
    (near, watchdog): (&mut NearState, Option<&Watchdog>),
    done: impl FnMut(usize, Outcome) -> Result<()>,
    progress: impl FnMut(usize),
) -> Result<()> {
    measure_reading(
        slots,
        (protocol, seed),
        (near, Reading::now, watchdog),
        done,
        progress,
    )
}

/// [`measure`], reading the machine with `read`.
fn measure_reading(
    slots: Vec<Slot>,
    (protocol, seed): (&Adaptive, u64),
    (near, mut read, watchdog): (&mut NearState, impl FnMut() -> Reading, Option<&Watchdog>),
    mut done: impl FnMut(usize, Outcome) -> Result<()>,
    mut progress: impl FnMut(usize),
) -> Result<()> {
    let mut active = Vec::with_capacity(slots.len());
    for (index, mut slot) in slots.into_iter().enumerate() {
        let warmed = guarded(watchdog, slot.key, "warm-up", protocol.timeout, || {
            warm_up(&mut slot, protocol)
        });
        match warmed {
            Ok(spent) => active.push(State {
                slot,
                index,
                samples: Vec::new(),
                bursts: Vec::new(),
                spent,
                rounds: 0,
            }),
            Err(e) => done(index, Outcome::Failed(e))?,
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    while !active.is_empty() {
        active.shuffle(&mut rng);
        let mut still = Vec::with_capacity(active.len());
        for mut state in active {
            let left = protocol.timeout.saturating_sub(state.spent);
            let key = state.slot.key;
            let turned = guarded(watchdog, key, "a burst of runs", left, || {
                turn(&mut state, protocol, near, &mut read)
            });
            match turned {
                Ok(None) => still.push(state),
                Ok(Some(stop)) => done(state.index, state.outcome(stop, near))?,
                Err(e) => done(state.index, Outcome::Failed(e))?,
            }
        }
        active = still;
        progress(active.len());
    }
    Ok(())
}

/// `work`, with the watchdog (if any) armed for `left` from now.
fn guarded<T>(
    watchdog: Option<&Watchdog>,
    key: usize,
    doing: &'static str,
    left: Duration,
    work: impl FnOnce() -> T,
) -> T {
    if let Some(dog) = watchdog {
        dog.arm(key, doing, Instant::now() + left);
    }
    let result = work();
    if let Some(dog) = watchdog {
        dog.disarm();
    }
    result
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

/// One run's time per batch: the runner's clock around the call, or the
/// time the backend took next to the model where it crosses a process
/// boundary (`Session::inner_time`), over the batches one run computes.
fn run_once(slot: &mut Slot) -> Result<Duration, String> {
    let t = Instant::now();
    let output = slot
        .session
        .run(black_box(&slot.input))
        .map_err(|e| format!("{e:#}").replace('\n', " "))?;
    let elapsed = t.elapsed();
    black_box(output);
    let time = slot.session.inner_time().unwrap_or(elapsed);
    Ok(time / slot.session.batches_per_run().max(1) as u32)
}

/// One turn: a discarded run, then timed runs for about [`BURST`]. Returns
/// why the configuration stops, if it does: the counts of the stopping
/// rules are of runs in bursts of the near state; the budget and the
/// timeout are of time, whatever the state.
fn turn(
    state: &mut State,
    protocol: &Adaptive,
    near: &mut NearState,
    read: &mut impl FnMut() -> Reading,
) -> Result<Option<Stop>, String> {
    let before = read();
    let started = Instant::now();
    run_once(&mut state.slot)?;
    let (first, counted) = (state.samples.len(), state.near_runs(near));
    let timed_from = Instant::now();
    loop {
        let elapsed = run_once(&mut state.slot)?;
        state.samples.push(elapsed.as_secs_f64() * 1e3);
        let timed = state.samples.len() - first;
        if timed_from.elapsed() >= BURST || counted + timed >= protocol.max_runs {
            break;
        }
    }
    let took = started.elapsed();
    state.spent += took;
    state.rounds += 1;
    // The next turn would end past the timeout (it lasts about as long as
    // this one; a quarter more for its spread): stop now, with the runs
    // there are, rather than let the watchdog fail the row mid-turn.
    let no_next_turn = state.spent + took + took / 4 >= protocol.timeout;
    let after = read();
    near.see(&before);
    near.see(&after);
    state.bursts.push(Burst {
        runs: first..state.samples.len(),
        before,
        after,
    });
    let (n, counted) = (state.samples.len(), state.split(near).near);
    if counted.len() >= protocol.max_runs {
        return Ok(Some(Stop::MaxRuns));
    }
    if counted.len() < protocol.min_runs {
        // Enough runs, too few of them in the near state: the budget
        // ends it, with the near-state runs it has, or all of them if
        // none was near (`State::outcome`).
        if n >= protocol.least_at_budget() && state.spent >= protocol.budget {
            return Ok(Some(Stop::Budget));
        }
        if n >= protocol.min_runs && no_next_turn {
            return Ok(Some(Stop::Timeout));
        }
        if n < protocol.min_runs && state.spent > protocol.timeout {
            return Err(format!(
                "timeout after {:.0} s: {n} of {} timed runs done",
                protocol.timeout.as_secs_f64(),
                protocol.min_runs
            ));
        }
        return Ok(None);
    }
    let summary = Summary::from_samples(&counted)
        .ok_or_else(|| "the timer produced no finite samples".to_string())?;
    if summary.half_width() <= protocol.half_width {
        return Ok(Some(Stop::Precise));
    }
    // The runs towards `budget_runs` are all timed runs, near or far, as
    // in the branch above: the rule is one of time spent, not of state.
    if state.spent >= protocol.budget && n >= protocol.least_at_budget() {
        return Ok(Some(Stop::Budget));
    }
    if no_next_turn {
        return Ok(Some(Stop::Timeout));
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
            key: usize::from(name),
        }
    }

    /// A reading of a machine with no round trip to read (one state).
    fn quiet() -> Reading {
        Reading {
            load1: None,
            jiffies: None,
            mhz: None,
            round_trip_ns: None,
        }
    }

    fn run(slots: Vec<Slot>, protocol: Adaptive) -> Vec<(usize, Outcome)> {
        let mut out = Vec::new();
        measure_reading(
            slots,
            (&protocol, 7),
            (&mut NearState::default(), quiet, None),
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
            budget_runs: 20,
            timeout: Duration::from_secs(30),
        }
    }

    /// A configuration slower than a burst gets one timed run a turn, so
    /// a budget of time alone leaves it few runs; `budget_runs` holds the
    /// budget open until it has that many (the slow-row protocol of
    /// docs/protocol.md).
    #[test]
    fn a_slow_configuration_runs_on_past_its_budget_to_its_budget_runs() {
        let timed = |budget_runs: usize| {
            let log = Default::default();
            // 110, 150 and 130 ms in turn (three, so that the timed runs,
            // every second run, see all three): a median whose interval
            // never narrows to ±1%, so only the budget stops it.
            let slots = vec![slot(0, vec![110_000, 150_000, 130_000], &log)];
            let protocol = Adaptive {
                warmup: 0,
                min_runs: 3,
                budget: Duration::from_millis(300),
                budget_runs,
                ..protocol()
            };
            match run(slots, protocol).remove(0).1 {
                Outcome::Measured { samples, stop, .. } => {
                    assert_eq!(stop, Stop::Budget);
                    samples.len()
                }
                other => panic!("{other:?}"),
            }
        };
        // Time alone: the budget is spent within the first turns.
        assert!(timed(3) < 6, "{}", timed(3));
        assert_eq!(timed(8), 8);
    }

    /// A slow configuration that cannot reach `budget_runs` before its
    /// timeout stops at the timeout with the runs it has (the watchdog
    /// would fail a turn that overran it).
    #[test]
    fn a_slow_configuration_short_of_its_budget_runs_stops_at_its_timeout() {
        let log = Default::default();
        let slots = vec![slot(0, vec![110_000, 150_000, 130_000], &log)];
        let protocol = Adaptive {
            warmup: 0,
            min_runs: 3,
            budget: Duration::from_millis(300),
            budget_runs: 1000,
            timeout: Duration::from_millis(2000),
            ..protocol()
        };
        match run(slots, protocol).remove(0).1 {
            Outcome::Measured { samples, stop, .. } => {
                assert_eq!(stop, Stop::Timeout);
                // Turns of about 0.26 s: stopped once a next turn could
                // end past 2 s, after 7 turns at most (one timed run
                // each), not after the turn that crossed it.
                assert!((3..=7).contains(&samples.len()), "{}", samples.len());
            }
            other => panic!("{other:?}"),
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
            measure_reading(
                slots,
                (&Adaptive::fixed(0, 3, Duration::from_secs(5)), seed),
                (&mut NearState::default(), quiet, None),
                |_, _| Ok(()),
                |_| {},
            )
            .unwrap();
            log.lock().unwrap().clone()
        };
        assert_eq!(order(1), order(1));
        assert_ne!(order(1), order(2));
    }

    /// A session that runs 1 ms in the near state and 10 ms in the far one,
    /// as the readings around its bursts say: every other burst far. (With
    /// 3 ms, a near run that woke 1.7 ms late once passed for a far one.)
    struct TwoStates {
        far: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl Session for TwoStates {
        fn run(&mut self, _: &[f32]) -> Result<Vec<f32>> {
            let far = self.far.load(std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(if far { 10_000 } else { 1000 }));
            Ok(vec![])
        }
        fn provider(&self) -> String {
            "two states".into()
        }
    }

    /// Measures one `TwoStates` session; `far(burst)` says which bursts
    /// run in the far state (round trips of 300 ns against 60).
    fn two_states(protocol: Adaptive, near: &mut NearState, far: fn(usize) -> bool) -> Outcome {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let slot = Slot {
            session: Box::new(TwoStates { far: flag.clone() }),
            input: vec![],
            key: 0,
        };
        let mut calls = 0;
        let read = || {
            // Two readings a burst: the one before it sets its state.
            let burst = calls / 2;
            if calls % 2 == 0 {
                flag.store(far(burst), std::sync::atomic::Ordering::SeqCst);
            }
            calls += 1;
            Reading {
                round_trip_ns: Some(if far(burst) { 300.0 } else { 60.0 }),
                ..quiet()
            }
        };
        let mut out = None;
        measure_reading(
            vec![slot],
            (&protocol, 7),
            (near, read, None),
            |_, o| {
                out = Some(o);
                Ok(())
            },
            |_| {},
        )
        .unwrap();
        out.unwrap()
    }

    #[test]
    fn runs_in_the_far_state_are_left_out_of_the_median() {
        let mut near = NearState::default();
        let protocol = Adaptive::fixed(0, 200, Duration::from_secs(30));
        match two_states(protocol, &mut near, |burst| burst % 2 == 1) {
            Outcome::Measured {
                samples,
                far,
                far_only,
                floor_ns,
                stop,
                ..
            } => {
                assert_eq!(
                    (stop, far_only, floor_ns),
                    (Stop::MaxRuns, false, Some(60.0))
                );
                assert_eq!(samples.len(), 200);
                assert!(samples.iter().all(|&ms| ms < 10.0), "{samples:?}");
                assert!(
                    !far.is_empty() && far.iter().all(|&ms| ms >= 10.0),
                    "{far:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(near.floor_ns(), Some(60.0));
    }

    /// An idle guest's 28 ns (two hardware threads of one core) does not
    /// push the L3 state's 60 ns out; the other die's 300 ns stays out.
    #[test]
    fn the_near_state_spans_the_cores_of_one_cache() {
        let near = NearState {
            floor_ns: Some(28.0),
        };
        let at = |ns| Reading {
            round_trip_ns: Some(ns),
            ..quiet()
        };
        assert!(near.holds(&at(28.0)) && near.holds(&at(60.0)) && near.holds(&at(110.0)));
        assert!(!near.holds(&at(300.0)));
        let slow_floor = NearState {
            floor_ns: Some(180.0),
        };
        assert!(slow_floor.holds(&at(300.0)) && !slow_floor.holds(&at(400.0)));
    }

    /// Too few near-state runs at the budget: the row keeps the ones it
    /// has (one 100 ms burst of 1 ms runs, under `min_runs`) and leaves
    /// the far ones out, as `docs/protocol.md` says.
    #[test]
    fn a_budget_spent_with_few_near_runs_keeps_only_those() {
        let mut near = NearState {
            floor_ns: Some(60.0),
        };
        let protocol = Adaptive {
            min_runs: 150,
            budget: Duration::from_secs(1),
            ..protocol()
        };
        match two_states(protocol, &mut near, |burst| burst > 0) {
            Outcome::Measured {
                samples,
                far,
                far_only,
                stop,
                ..
            } => {
                assert_eq!((stop, far_only), (Stop::Budget, false));
                assert!(
                    !samples.is_empty() && samples.len() < 150,
                    "{}",
                    samples.len()
                );
                assert!(samples.iter().all(|&ms| ms < 10.0), "{samples:?}");
                assert!(samples.len() + far.len() >= 150);
                assert!(far.iter().all(|&ms| ms >= 10.0), "{far:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_configuration_never_in_the_near_state_is_measured_in_the_far_one() {
        // The run met the near state before this configuration began.
        let mut near = NearState {
            floor_ns: Some(60.0),
        };
        let protocol = Adaptive {
            budget: Duration::from_millis(300),
            ..protocol()
        };
        match two_states(protocol, &mut near, |_| true) {
            Outcome::Measured {
                samples,
                far,
                far_only,
                stop,
                conditions,
                ..
            } => {
                assert_eq!((stop, far_only), (Stop::Budget, true));
                assert!(far.is_empty() && samples.len() >= 20);
                assert!(samples.iter().all(|&ms| ms >= 10.0));
                assert_eq!(conditions.round_trip_ns_median, Some(300.0));
            }
            other => panic!("{other:?}"),
        }
    }
}
