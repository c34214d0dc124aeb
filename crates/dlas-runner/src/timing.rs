//! The timed loop: what a user's inference loop does (input in, output
//! out), timed per call with the monotonic clock. Warm-up runs are executed
//! and discarded; every timed sample is returned so statistics can be
//! recomputed later.

use anyhow::{Result, bail};
use dlas_backends::Session;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Runs and warm-up of one measurement, and its time limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Protocol {
    pub warmup: usize,
    pub runs: usize,
    pub timeout: Duration,
}

/// Times `session` on `input`; samples in milliseconds. Fails when the
/// time limit is reached, saying how far it got.
pub fn measure(session: &mut dyn Session, input: &[f32], protocol: Protocol) -> Result<Vec<f64>> {
    let started = Instant::now();
    for i in 0..protocol.warmup {
        black_box(session.run(black_box(input))?);
        if started.elapsed() > protocol.timeout {
            bail!(
                "timeout after {:.0} s during warm-up run {} of {}",
                protocol.timeout.as_secs_f64(),
                i + 1,
                protocol.warmup
            );
        }
    }
    let mut samples = Vec::with_capacity(protocol.runs);
    for _ in 0..protocol.runs {
        let t = Instant::now();
        let output = session.run(black_box(input))?;
        let elapsed = t.elapsed();
        black_box(output);
        // As `rounds` counts a run: the backend's own time where it has one,
        // per batch.
        let time = session.inner_time().unwrap_or(elapsed);
        samples.push(time.as_secs_f64() * 1e3 / session.batches_per_run().max(1) as f64);
        if started.elapsed() > protocol.timeout && samples.len() < protocol.runs {
            bail!(
                "timeout after {:.0} s: {} of {} timed runs done",
                protocol.timeout.as_secs_f64(),
                samples.len(),
                protocol.runs
            );
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Returns its input: what is left to time is the harness itself.
    struct Identity;

    impl Session for Identity {
        fn run(&mut self, input: &[f32]) -> Result<Vec<f32>> {
            Ok(input.to_vec())
        }
        fn provider(&self) -> String {
            "identity".into()
        }
    }

    struct Slow(u32);

    impl Session for Slow {
        fn run(&mut self, _: &[f32]) -> Result<Vec<f32>> {
            std::thread::sleep(Duration::from_millis(20));
            self.0 += 1;
            Ok(vec![])
        }
        fn provider(&self) -> String {
            "slow".into()
        }
    }

    #[test]
    fn keeps_every_sample_and_discards_warmup() {
        let protocol = Protocol {
            warmup: 3,
            runs: 50,
            timeout: Duration::from_secs(10),
        };
        let samples = measure(&mut Identity, &[1.0; 16], protocol).unwrap();
        assert_eq!(samples.len(), 50);
        assert!(samples.iter().all(|s| *s >= 0.0 && *s < 10.0));
    }

    #[test]
    fn timeout_is_reported_with_progress() {
        let protocol = Protocol {
            warmup: 0,
            runs: 1000,
            timeout: Duration::from_millis(100),
        };
        let err = measure(&mut Slow(0), &[], protocol)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("timeout after 0 s:"), "{err}");
        assert!(err.contains("of 1000 timed runs done"), "{err}");
    }
}
