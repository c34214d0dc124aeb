//! Keeping a pool's workers awake through a network run.
//!
//! A rayon worker that finds no work yields about 32 times and then sleeps
//! on a futex, and so does a worker waiting for another's half of a
//! parallel loop; the next loop, or the half's end, has to wake it, which
//! on a virtual machine costs a system call and a cross-CPU interrupt
//! (tens of µs: an `install` round trip onto an idle 2-thread pool takes
//! about 80 µs on the project's Xeon VM). A network at batch 1 is a chain
//! of short parallel loops (MobileNetV2: about 60 of 20-300 µs) with serial
//! steps between them, so its workers slept and were woken at nearly every
//! layer. ONNX Runtime's pool spins between loops instead, and so does a
//! run here:
//!
//! - the other workers poll for the run's work until it ends, running the
//!   loops of [`for_each`] and any rayon job the run shares out;
//! - the thread that runs the network hands a [`for_each`] loop to them
//!   through a slot rather than a rayon join, takes tasks from the same
//!   counter, and spins (never sleeps) until the last task is done.
//!
//! Outside a run (one layer timed alone, a test), or nested inside another
//! loop, [`for_each`] is rayon's parallel `for_each`.

use rayon::prelude::*;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::SeqCst};

/// A counter on a cache line of its own, so that the threads taking
/// tasks and the one counting them done do not bounce one line between
/// their cores.
#[repr(align(64))]
struct Counter(AtomicUsize);

/// One loop handed to the pollers: tasks `0..n` of `f`, taken `chunk` at
/// a time.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n: usize,
    chunk: usize,
    next: Counter,
    finished: Counter,
    panicked: AtomicBool,
}

impl Job<'_> {
    /// Takes chunks of tasks until none is left; a panicking task is
    /// counted done and reported through `panicked`, so the loop still
    /// ends.
    fn work(&self) {
        loop {
            let start = self.next.0.fetch_add(self.chunk, SeqCst);
            if start >= self.n {
                return;
            }
            let tasks = start..self.n.min(start + self.chunk);
            let count = tasks.len();
            if catch_unwind(AssertUnwindSafe(|| tasks.for_each(self.f))).is_err() {
                self.panicked.store(true, SeqCst);
            }
            self.finished.0.fetch_add(count, SeqCst);
        }
    }
}

/// Chunks per thread a loop is cut into: enough for a thread that started
/// late, or was preempted, to be caught up by the others.
const CHUNKS_PER_THREAD: usize = 8;

/// What the runner shares with the pollers for one run.
struct Run {
    done: AtomicBool,
    /// The loop being handed out, or null. Points into the runner's stack
    /// frame, which [`for_each`] leaves only once `helpers` is zero.
    job: AtomicPtr<Job<'static>>,
    /// Pollers that may hold the current job.
    helpers: AtomicUsize,
}

thread_local! {
    /// On the runner, during a run: the run, unless a loop is in progress.
    static RUNNER: Cell<*const Run> = const { Cell::new(ptr::null()) };
    /// Whether this thread is already polling for a run.
    static POLLING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` on `pool` while its other workers poll for the work `f`'s
/// parallel loops share out, returning when `f` has.
pub(crate) fn run_awake<R: Send>(pool: &rayon::ThreadPool, f: impl FnOnce() -> R + Send) -> R {
    pool.install(|| {
        let threads = rayon::current_num_threads();
        if threads < 2 {
            return f();
        }
        let run = Run {
            done: AtomicBool::new(false),
            job: AtomicPtr::new(ptr::null_mut()),
            helpers: AtomicUsize::new(0),
        };
        let runner = rayon::current_thread_index();
        rayon::scope(|s| {
            for _ in 1..threads {
                s.spawn(|_| poll(&run, runner));
            }
            let outer = RUNNER.replace(&run);
            let result = catch_unwind(AssertUnwindSafe(f));
            RUNNER.set(outer);
            run.done.store(true, SeqCst);
            result.unwrap_or_else(|p| resume_unwind(p))
        })
    })
}

/// Runs the run's loops and the pool's pending jobs until the run is done.
/// The runner itself returns at once (it would wait here for its own end,
/// should it pick up a poller it spawned before another worker took it),
/// as does a worker that is already polling.
fn poll(run: &Run, runner: Option<usize>) {
    if rayon::current_thread_index() == runner || POLLING.get() {
        return;
    }
    POLLING.set(true);
    while !run.done.load(SeqCst) {
        if run.job.load(SeqCst).is_null() {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::hint::spin_loop();
            }
            continue;
        }
        run.helpers.fetch_add(1, SeqCst);
        let job = run.job.load(SeqCst);
        if !job.is_null() {
            // SAFETY: the job is published and `helpers` counted this
            // thread before loading it, so its owner waits for the count
            // to drop before its frame (and the job) goes.
            unsafe { (*job).work() };
        }
        run.helpers.fetch_sub(1, SeqCst);
    }
    POLLING.set(false);
}

/// Runs `f(0)` to `f(n - 1)` in parallel, each once: through the run's
/// pollers when called by a run's runner outside another loop, else as a
/// rayon parallel loop.
pub(crate) fn for_each(n: usize, f: impl Fn(usize) + Sync + Send) {
    let run = RUNNER.get();
    if n < 2 {
        return (0..n).for_each(f);
    }
    if run.is_null() {
        return (0..n).into_par_iter().for_each(f);
    }
    // SAFETY: RUNNER points at the `Run` of the `run_awake` call that this
    // thread is inside, which outlives the call.
    let run = unsafe { &*run };
    let f: &(dyn Fn(usize) + Sync) = &f;
    let job = Job {
        f,
        n,
        chunk: n.div_ceil(rayon::current_num_threads() * CHUNKS_PER_THREAD),
        next: Counter(AtomicUsize::new(0)),
        finished: Counter(AtomicUsize::new(0)),
        panicked: AtomicBool::new(false),
    };
    // A loop inside a task runs on rayon (the slot holds one loop).
    RUNNER.set(ptr::null());
    // SAFETY: only the lifetime is erased; the job is unpublished, and no
    // poller holds it, before this frame ends (below).
    let published: *mut Job<'static> = (&raw const job).cast_mut().cast();
    run.job.store(published, SeqCst);
    job.work();
    while job.finished.0.load(SeqCst) < n {
        std::hint::spin_loop();
    }
    run.job.store(ptr::null_mut(), SeqCst);
    while run.helpers.load(SeqCst) > 0 {
        std::hint::spin_loop();
    }
    RUNNER.set(run);
    if job.panicked.load(SeqCst) {
        panic!("a task of a parallel loop panicked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn loops_run_every_task_once_and_pollers_stop() {
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let seen = Mutex::new(vec![0u32; 1000]);
            let sum = run_awake(&pool, || {
                let mut sum = 0u64;
                for round in 0..50u64 {
                    for_each(1000, |i| seen.lock().unwrap()[i] += 1);
                    // A nested loop and a rayon loop inside the run.
                    for_each(4, |_| for_each(3, |_| ()));
                    sum += (0..1000u64).into_par_iter().map(|x| x * round).sum::<u64>();
                }
                sum
            });
            assert_eq!(sum, 499_500 * (0..50).sum::<u64>());
            assert!(seen.into_inner().unwrap().iter().all(|&c| c == 50));
            // The pollers have returned: the pool runs the next job.
            assert_eq!(pool.install(|| 7), 7);
        }
    }

    #[test]
    fn a_panicking_task_panics_the_run_and_the_pool_survives() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            run_awake(&pool, || for_each(64, |i| assert_ne!(i, 40)))
        }));
        assert!(r.is_err());
        assert_eq!(pool.install(|| 7), 7);
    }
}
