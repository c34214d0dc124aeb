//! Calibration timings taken in the machine's near state.
//!
//! A virtual machine whose vCPUs the host moves between cores that share a
//! cache and cores that do not runs in two states, seconds each
//! (docs/protocol.md, "Two states"). The campaign counts only the near
//! state's bursts; a calibration timed in whatever state came would fit
//! the classes timed in the far one slow. On the AMD EPYC guest, on 5
//! December 2026, the first calibration without this rule fitted the
//! first third of its classes (untuned fp32, timed first) 1.3-2.6x slower
//! than the Intel Xeon's, while their tuned twins, each the fastest of
//! nine windows, came out 1.05-1.4x: the device model then predicted the
//! CSR rows 1.7x too slow. So each timing here is one window that starts
//! and ends in the near state.

use crate::conditions::Reading;
use crate::rounds::NearState;
use anyhow::Result;
use std::time::{Duration, Instant};

/// How long one timing waits for the near state before it keeps a window
/// timed outside it: the states seen last 2-10 s.
const NEAR_WAIT: Duration = Duration::from_secs(10);

/// Between round-trip readings while waiting.
const POLL: Duration = Duration::from_millis(20);

/// A window: at least this many runs ...
const WINDOW_RUNS: usize = 15;
/// ... and this long, up to [`WINDOW_MAX_RUNS`].
const WINDOW: Duration = Duration::from_millis(60);
const WINDOW_MAX_RUNS: usize = 2000;

/// Median microseconds of one run and the runs it was taken over.
pub type Timed = (f64, usize);

/// Times windows of runs in the machine's near state and counts those it
/// had to keep outside it.
pub struct Timer {
    near: NearState,
    read: Box<dyn FnMut() -> Reading>,
    wait: Duration,
    /// Timings taken.
    pub windows: usize,
    /// Timings whose window never started and ended in the near state
    /// within the wait: kept, and counted here.
    pub outside: usize,
}

impl Timer {
    /// A timer that first reads the round trip for `span` (zero: it learns
    /// the near state from its own readings).
    pub fn probe(span: Duration) -> Timer {
        Timer::reading(NearState::probe(span), Reading::now, NEAR_WAIT)
    }

    /// A timer that keeps the first window whatever the state: for tests
    /// of what a calibration times, which must not wait on the machine.
    #[cfg(test)]
    pub(crate) fn ungated() -> Timer {
        Timer::reading(NearState::default(), Reading::now, Duration::ZERO)
    }

    fn reading(near: NearState, read: impl FnMut() -> Reading + 'static, wait: Duration) -> Timer {
        Timer {
            near,
            read: Box::new(read),
            wait,
            windows: 0,
            outside: 0,
        }
    }

    fn holds_now(&mut self) -> bool {
        let reading = (self.read)();
        self.near.holds_after(&reading)
    }

    /// Median microseconds of one run: two warm-up runs, then windows of
    /// at least 15 runs and 60 ms, each after one discarded run, until one
    /// starts and ends in the near state (or the wait has passed: the
    /// last window is kept and counted in `outside`).
    pub fn median_us(&mut self, mut run: impl FnMut() -> Result<()>) -> Result<Timed> {
        run()?;
        run()?;
        self.windows += 1;
        let started = Instant::now();
        loop {
            let waited_out = started.elapsed() >= self.wait;
            if !waited_out && !self.holds_now() {
                std::thread::sleep(POLL);
                continue;
            }
            run()?;
            let timed = window(&mut run)?;
            if self.holds_now() {
                return Ok(timed);
            }
            if waited_out || started.elapsed() >= self.wait {
                self.outside += 1;
                return Ok(timed);
            }
        }
    }
}

fn window(run: &mut impl FnMut() -> Result<()>) -> Result<Timed> {
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < WINDOW_RUNS
        || (start.elapsed() < WINDOW && samples.len() < WINDOW_MAX_RUNS)
    {
        let t = Instant::now();
        run()?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    Ok((samples[samples.len() / 2], samples.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    fn at(ns: f64) -> Reading {
        Reading {
            load1: None,
            jiffies: None,
            mhz: None,
            round_trip_ns: Some(ns),
        }
    }

    /// A timer whose round trips are `trips` in turn (the last repeated),
    /// the near state's floor known to be 60 ns.
    fn timer(trips: &'static [f64], wait: Duration) -> Timer {
        let mut near = NearState::default();
        assert!(near.holds_after(&at(60.0)));
        let next = Rc::new(Cell::new(0));
        Timer::reading(
            near,
            move || {
                let i = next.get();
                next.set(i + 1);
                at(trips[i.min(trips.len() - 1)])
            },
            wait,
        )
    }

    /// A run of 1 ms that counts itself.
    fn run(runs: Rc<Cell<usize>>) -> impl FnMut() -> Result<()> {
        move || {
            runs.set(runs.get() + 1);
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        }
    }

    #[test]
    fn a_window_times_at_least_fifteen_runs_for_sixty_ms() {
        let mut timer = timer(&[60.0], NEAR_WAIT);
        let runs = Rc::new(Cell::new(0));
        let (us, timed) = timer.median_us(run(runs.clone())).unwrap();
        assert!(timed >= WINDOW_RUNS, "{timed} runs");
        assert!((900.0..20_000.0).contains(&us), "{us} us");
        // Two warm-up runs and one discarded run before the window.
        assert_eq!(runs.get(), timed + 3);
        assert_eq!((timer.windows, timer.outside), (1, 0));
    }

    #[test]
    fn a_window_that_ends_in_the_far_state_is_timed_again() {
        // Near before the first window, far after it (the window is
        // dropped), near around the second.
        let mut timer = timer(&[60.0, 320.0, 62.0, 61.0], NEAR_WAIT);
        let runs = Rc::new(Cell::new(0));
        let (_, timed) = timer.median_us(run(runs.clone())).unwrap();
        // The dropped window and its discarded run came first.
        assert!(
            runs.get() >= timed + 3 + 1 + WINDOW_RUNS,
            "{} runs for {timed} timed",
            runs.get()
        );
        assert_eq!((timer.windows, timer.outside), (1, 0));
    }

    #[test]
    fn the_far_state_is_waited_out_and_then_counted() {
        let mut timer = timer(&[320.0], Duration::from_millis(100));
        let started = Instant::now();
        timer.median_us(run(Rc::new(Cell::new(0)))).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!((timer.windows, timer.outside), (1, 1));
    }
}
