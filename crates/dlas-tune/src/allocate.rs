//! The task scheduler: one trial budget for all the layers of a tuning
//! run, handed out a chunk at a time to the layer whose time in the
//! networks is expected to fall most (Ansor's task scheduler, Zheng et al.
//! OSDI 2020, section 6, simplified).
//!
//! Why. A budget per layer spends as much on a 1x1 convolution that takes
//! 1% of a network as on the 3x3 one that takes 30%. Ansor instead spends
//! the network's budget where the gradient of the network's time is
//! steepest: a task's weight (how often it runs across the tuned networks)
//! times the milliseconds its next trials are expected to save.
//!
//! The rule here: every task first gets one chunk (its default and a few
//! candidates: its time becomes known); then each chunk goes to the task
//! with the largest `weight × expected saving`, where the expected saving
//! of a chunk is the larger of what the task's last chunk saved (Ansor's
//! backward-window gradient) and an optimistic share of its current time
//! that shrinks with the chunks it has had ([`OPTIMISM`] / chunks: a task
//! that has not improved lately still gets chunks while its share of the
//! networks' time is large). A task whose search ended (early stop, or no
//! candidate left) gets no more. Ties go to the first task, so the order is
//! reproducible from the same measurements.

/// How a run's budget of `trials` per layer on average is spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// By the task scheduler ([`next`]), `trials / 4` at a time.
    ByShare,
    /// `trials` to every layer, whatever its share (the split before the
    /// scheduler, kept to compare against it: `dlas bench tune`).
    Equal,
}

impl Split {
    /// The trials a task is given at a time.
    pub fn chunk(self, trials: usize) -> usize {
        match self {
            Split::ByShare => (trials / 4).max(1),
            Split::Equal => trials.max(1),
        }
    }

    /// Whether a task gets nothing after its first chunk.
    pub fn one_chunk_each(self) -> bool {
        self == Split::Equal
    }
}

/// Where one task's search stands, as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskState {
    /// How many times the layer runs in one inference of each tuned
    /// network, summed over the networks (its share of their time is
    /// `weight × best_ms`).
    pub weight: f64,
    /// Trials measured so far (this run and earlier ones).
    pub trials: usize,
    /// The best cost found so far, and the best one chunk earlier.
    pub best_ms: f64,
    pub best_before_ms: f64,
    /// The search stopped for a reason other than its chunk's budget.
    pub ended: bool,
}

/// The share of a task's time its next chunk is expected to save, at
/// least, divided by the chunks it has had: 5% after its first chunk,
/// 2.5% after its second, and so on.
pub const OPTIMISM: f64 = 0.05;

/// Which task gets the next chunk of `chunk` trials, or `None` when every
/// task's search has ended.
pub fn next(tasks: &[TaskState], chunk: usize) -> Option<usize> {
    // Warm-up: every task's first chunk, in order.
    if let Some(i) = tasks.iter().position(|t| !t.ended && t.trials < chunk) {
        return Some(i);
    }
    let mut best: Option<(usize, f64)> = None;
    for (i, t) in tasks.iter().enumerate().filter(|(_, t)| !t.ended) {
        let priority = t.weight * expected_saving_ms(t, chunk);
        if best.is_none_or(|(_, p)| priority > p) {
            best = Some((i, priority));
        }
    }
    best.map(|(i, _)| i)
}

/// The milliseconds of one run of the layer the task's next chunk is
/// expected to save.
fn expected_saving_ms(t: &TaskState, chunk: usize) -> f64 {
    if !t.best_ms.is_finite() {
        // Nothing measured could run: no time to save.
        return 0.0;
    }
    let recent = if t.best_before_ms.is_finite() {
        (t.best_before_ms - t.best_ms).max(0.0)
    } else {
        0.0
    };
    let chunks = (t.trials / chunk.max(1)).max(1) as f64;
    recent.max(t.best_ms * OPTIMISM / chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(weight: f64, trials: usize, best_ms: f64, best_before_ms: f64) -> TaskState {
        TaskState {
            weight,
            trials,
            best_ms,
            best_before_ms,
            ended: false,
        }
    }

    /// The equal split gives each task its whole share in one chunk and
    /// nothing after; the scheduler a quarter at a time (at least one).
    #[test]
    fn the_two_splits_differ_in_chunk_and_in_what_follows() {
        assert_eq!(
            (Split::Equal.chunk(24), Split::Equal.one_chunk_each()),
            (24, true)
        );
        assert_eq!(
            (Split::ByShare.chunk(24), Split::ByShare.one_chunk_each()),
            (6, false)
        );
        assert_eq!(Split::ByShare.chunk(3), 1);
    }

    #[test]
    fn every_task_gets_its_first_chunk_before_any_gets_a_second() {
        let tasks = [task(1.0, 8, 1.0, 1.0), task(100.0, 3, 5.0, 5.0)];
        assert_eq!(next(&tasks, 8), Some(1));
    }

    #[test]
    fn chunks_follow_the_share_of_the_networks_time() {
        // Equal search histories: the layer that runs ten times as often
        // (or takes ten times as long) gets the chunk.
        let light = task(1.0, 16, 0.5, 0.5);
        let heavy = task(10.0, 16, 0.5, 0.5);
        assert_eq!(next(&[light, heavy], 8), Some(1));
        let slow = task(1.0, 16, 5.0, 5.0);
        assert_eq!(next(&[light, slow], 8), Some(1));
        // Shares equal: a task that has had many chunks without gain
        // yields to one that has had few.
        let worn = task(1.0, 160, 1.0, 1.0);
        let fresh = task(1.0, 16, 1.0, 1.0);
        assert_eq!(next(&[worn, fresh], 8), Some(1));
        // A task still improving fast keeps its chunks.
        let improving = task(1.0, 160, 1.0, 1.5);
        assert_eq!(next(&[improving, fresh], 8), Some(0));
    }

    #[test]
    fn ended_searches_get_nothing_and_the_budget_ends_with_them() {
        let mut a = task(5.0, 16, 1.0, 1.2);
        let b = task(1.0, 16, 1.0, 1.0);
        a.ended = true;
        assert_eq!(next(&[a, b], 8), Some(1));
        let mut b = b;
        b.ended = true;
        assert_eq!(next(&[a, b], 8), None);
    }

    /// Over a whole budget, a synthetic network of one heavy and three
    /// light layers, each of which saves a fixed share per chunk: the
    /// heavy layer gets most of the chunks, yet every layer gets its first.
    #[test]
    fn a_whole_budget_goes_mostly_to_the_heavy_layer() {
        let mut tasks = vec![
            task(1.0, 0, f64::INFINITY, f64::INFINITY),
            task(12.0, 0, f64::INFINITY, f64::INFINITY),
            task(1.0, 0, f64::INFINITY, f64::INFINITY),
            task(1.0, 0, f64::INFINITY, f64::INFINITY),
        ];
        let chunk = 4;
        let mut given = [0usize; 4];
        for _ in 0..40 {
            let i = next(&tasks, chunk).unwrap();
            given[i] += 1;
            let t = &mut tasks[i];
            t.best_before_ms = t.best_ms;
            t.best_ms = if t.best_ms.is_finite() {
                t.best_ms * 0.97
            } else {
                1.0
            };
            t.trials += chunk;
        }
        assert!(given.iter().all(|&g| g >= 1), "{given:?}");
        assert!(given[1] > given[0] + given[2] + given[3], "{given:?}");
    }
}
