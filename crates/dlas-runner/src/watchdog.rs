//! A hard bound on a combination's time. The protocol's timeout is checked
//! between runs, which bounds nothing when one load or one run never
//! returns (1,024 threads spinning on two cores). The watchdog is armed
//! around every load, warm-up and burst with the combination's deadline;
//! when an operation overruns it by [`GRACE`], the combination is recorded
//! as failed and the process stops, since a stuck run cannot be cancelled
//! from outside and would slow every later measurement. The next run
//! resumes after it (`--retry-failed` measures it again).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long past its deadline an operation may run before the watchdog
/// acts: runs that end soon after it are stopped by the protocol's own
/// check, between runs.
pub const GRACE: Duration = Duration::from_secs(2);

/// What the watchdog is watching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Armed {
    /// The caller's key of the combination.
    pub key: usize,
    /// What it is doing: `loading`, `warm-up`, `a burst of runs`.
    pub doing: &'static str,
    pub deadline: Instant,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    armed: Option<Armed>,
    stopping: bool,
}

/// The watchdog thread; dropping the value ends it.
pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Starts the thread; `expired` is called on it, once, with what was
    /// armed when its deadline plus [`GRACE`] passed. It is expected not
    /// to return (it records the failure and ends the process).
    pub fn start(expired: impl FnOnce(Armed) + Send + 'static) -> Watchdog {
        let shared = Arc::new(Shared::default());
        let watched = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("dlas-watchdog".into())
            .spawn(move || {
                let mut state = watched.state.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if state.stopping {
                        return;
                    }
                    let now = Instant::now();
                    match state.armed {
                        Some(armed) if now >= armed.deadline + GRACE => {
                            drop(state);
                            expired(armed);
                            return;
                        }
                        Some(armed) => {
                            let wait = armed.deadline + GRACE - now;
                            state = watched
                                .wake
                                .wait_timeout(state, wait)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        }
                        None => {
                            state = watched.wake.wait(state).unwrap_or_else(|e| e.into_inner());
                        }
                    }
                }
            })
            .expect("the watchdog thread starts");
        Watchdog {
            shared,
            thread: Some(thread),
        }
    }

    /// Watches combination `key`, `doing` something, until `deadline`.
    pub fn arm(&self, key: usize, doing: &'static str, deadline: Instant) {
        self.set(Some(Armed {
            key,
            doing,
            deadline,
        }));
    }

    /// Stops watching (between operations).
    pub fn disarm(&self) {
        self.set(None);
    }

    fn set(&self, armed: Option<Armed>) {
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        state.armed = armed;
        self.shared.wake.notify_one();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        {
            let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            state.stopping = true;
            self.shared.wake.notify_one();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn an_operation_that_overruns_its_deadline_is_reported_once() {
        let (tx, rx) = mpsc::channel();
        let dog = Watchdog::start(move |armed| tx.send(armed).unwrap());
        let deadline = Instant::now();
        dog.arm(7, "a burst of runs", deadline);
        let armed = rx.recv_timeout(GRACE * 3).expect("the watchdog fired");
        assert_eq!((armed.key, armed.doing), (7, "a burst of runs"));
        assert!(Instant::now() >= deadline + GRACE);
    }

    #[test]
    fn operations_within_their_deadline_are_left_alone() {
        let (tx, rx) = mpsc::channel();
        let dog = Watchdog::start(move |armed| tx.send(armed).unwrap());
        for key in 0..50 {
            dog.arm(key, "loading", Instant::now() + Duration::from_secs(60));
            dog.disarm();
        }
        // Armed past its deadline but disarmed before the grace ends.
        dog.arm(99, "warm-up", Instant::now());
        std::thread::sleep(GRACE / 4);
        dog.disarm();
        assert!(rx.recv_timeout(GRACE * 2).is_err());
        drop(dog);
    }
}
