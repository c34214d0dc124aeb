//! What the machine was doing while a combination was timed: the load
//! average, the share of CPU time the hypervisor stole, and the clock the
//! kernel reports. Read from `/proc` between bursts (never inside a timed
//! run) and kept with the samples, so a noisy row can be traced to its
//! cause. Where `/proc` does not say (another OS, a VM that hides the
//! clock), the field is absent rather than guessed.

use serde::{Deserialize, Serialize};

/// One reading of the machine's state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// 1-minute load average.
    pub load1: Option<f64>,
    /// Cumulative (steal, total) jiffies over all CPUs.
    pub jiffies: Option<(u64, u64)>,
    /// Mean `cpu MHz` over the logical CPUs.
    pub mhz: Option<f64>,
}

impl Reading {
    pub fn now() -> Reading {
        Reading {
            load1: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|t| parse_loadavg(&t)),
            jiffies: std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_stat(&t)),
            mhz: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|t| parse_mhz(&t)),
        }
    }
}

fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// (steal, total) jiffies from the aggregate `cpu` line of `/proc/stat`:
/// user nice system idle iowait irq softirq steal …
fn parse_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // guest and guest_nice (fields 9 and 10) are already counted in user and nice.
    let total = fields.iter().take(8).sum();
    Some((*fields.get(7)?, total))
}

fn parse_mhz(text: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("cpu MHz"))
        .filter_map(|l| l.split_once(':')?.1.trim().parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The machine's state over the bursts of one combination.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Accumulator {
    loads: Vec<f64>,
    mhz: Vec<f64>,
    steal: u64,
    total: u64,
}

impl Accumulator {
    /// Adds the interval from `before` to `after` (one burst).
    pub fn add(&mut self, before: &Reading, after: &Reading) {
        self.loads.extend(after.load1);
        self.mhz.extend(after.mhz);
        if let (Some((s0, t0)), Some((s1, t1))) = (before.jiffies, after.jiffies) {
            self.steal += s1.saturating_sub(s0);
            self.total += t1.saturating_sub(t0);
        }
    }

    pub fn finish(&self) -> Conditions {
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        Conditions {
            load1_mean: mean(&self.loads).map(|x| round(x, 100.0)),
            load1_max: self.loads.iter().copied().reduce(f64::max),
            steal_share: (self.total > 0)
                .then(|| round(self.steal as f64 / self.total as f64, 10_000.0)),
            cpu_mhz_mean: mean(&self.mhz).map(|x| round(x, 1.0)),
        }
    }
}

fn round(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

/// The summary kept with a combination's samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    /// Mean and largest 1-minute load average read after its bursts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load1_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load1_max: Option<f64>,
    /// Share of all CPU time stolen by the hypervisor during its bursts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steal_share: Option<f64>,
    /// Mean reported clock; many VMs report the nominal clock only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_mhz_mean: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        assert_eq!(parse_loadavg("2.01 0.87 0.33 3/101 5117\n"), Some(2.01));
        let stat = "cpu  25165 0 2995 12206 137 0 24 14 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(
            parse_stat(stat),
            Some((14, 25165 + 2995 + 12206 + 137 + 24 + 14))
        );
        let cpuinfo =
            "processor\t: 0\ncpu MHz\t\t: 2600.000\nprocessor\t: 1\ncpu MHz\t\t: 2400.000\n";
        assert_eq!(parse_mhz(cpuinfo), Some(2500.0));
        assert_eq!(parse_mhz("Features: neon\n"), None);
    }

    #[test]
    fn steal_is_a_share_of_the_intervals_summed() {
        let at = |steal, total, load| Reading {
            load1: Some(load),
            jiffies: Some((steal, total)),
            mhz: None,
        };
        let mut acc = Accumulator::default();
        acc.add(&at(0, 0, 1.0), &at(1, 100, 1.5));
        // The gap between bursts (another configuration's) is not counted.
        acc.add(&at(50, 1000, 2.0), &at(53, 1100, 2.5));
        let c = acc.finish();
        assert_eq!(c.steal_share, Some(0.02));
        assert_eq!(c.load1_mean, Some(2.0));
        assert_eq!(c.load1_max, Some(2.5));
        assert_eq!(c.cpu_mhz_mean, None);
    }
}
