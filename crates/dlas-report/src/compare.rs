//! `dlas compare A B`: how far two results sets agree, combination by
//! combination and in the ranking of compilers per network.

use dlas_core::ResultRow;
use std::collections::BTreeMap;

/// One combination present with a timing in both sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub id: String,
    pub label: String,
    pub a_ms: f64,
    pub b_ms: f64,
}

impl Pair {
    /// B's median over A's.
    pub fn ratio(&self) -> f64 {
        self.b_ms / self.a_ms
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub pairs: Vec<Pair>,
    pub only_a: usize,
    pub only_b: usize,
    /// Groups (network, compression, batch) with at least two compilers in both sets.
    pub groups: usize,
    /// Groups whose compilers are ranked identically.
    pub same_ranking: usize,
    /// Mean Kendall tau of the compiler rankings over the groups.
    pub mean_kendall_tau: f64,
}

impl Comparison {
    /// Share of pairs whose ratio lies within ±`tolerance` (0.1 for ±10%).
    pub fn share_within(&self, tolerance: f64) -> f64 {
        if self.pairs.is_empty() {
            return 0.0;
        }
        let within = self
            .pairs
            .iter()
            .filter(|p| (p.ratio() - 1.0).abs() <= tolerance)
            .count();
        within as f64 / self.pairs.len() as f64
    }

    /// Geometric mean of the ratios.
    pub fn geomean_ratio(&self) -> f64 {
        if self.pairs.is_empty() {
            return f64::NAN;
        }
        let sum: f64 = self.pairs.iter().map(|p| p.ratio().ln()).sum();
        (sum / self.pairs.len() as f64).exp()
    }
}

fn timed(rows: &[ResultRow]) -> BTreeMap<&str, (&ResultRow, f64)> {
    rows.iter()
        .filter(|r| r.status.has_timing())
        .filter_map(|r| Some((r.id.as_str(), (r, r.median_ms?))))
        .collect()
}

fn label(r: &ResultRow) -> String {
    let tuned = if r.tuned { " tuned" } else { "" };
    format!(
        "{}/{} {} {}{tuned} {} {} {} b{}",
        r.dataset, r.model, r.compression, r.compiler, r.algorithm, r.format, r.device, r.batch
    )
}

pub fn compare(a: &[ResultRow], b: &[ResultRow]) -> Comparison {
    let (ta, tb) = (timed(a), timed(b));
    let pairs: Vec<Pair> = ta
        .iter()
        .filter_map(|(id, (row, a_ms))| {
            let (_, b_ms) = tb.get(id)?;
            Some(Pair {
                id: id.to_string(),
                label: label(row),
                a_ms: *a_ms,
                b_ms: *b_ms,
            })
        })
        .collect();
    let only_a = ta.keys().filter(|id| !tb.contains_key(*id)).count();
    let only_b = tb.keys().filter(|id| !ta.contains_key(*id)).count();
    // Group the pairs by network, compression, device and batch; rank the
    // kernels (compiler, tuning, algorithm, format) within each group.
    let mut groups: BTreeMap<String, Vec<(String, f64, f64)>> = BTreeMap::new();
    for p in &pairs {
        let row = ta[p.id.as_str()].0;
        let key = format!(
            "{}/{} {} {} b{}",
            row.dataset, row.model, row.compression, row.device, row.batch
        );
        let kernel = format!(
            "{} {} {} {}",
            row.compiler, row.tuned, row.algorithm, row.format
        );
        groups
            .entry(key)
            .or_default()
            .push((kernel, p.a_ms, p.b_ms));
    }
    let mut taus = Vec::new();
    let mut same = 0;
    for members in groups.values().filter(|m| m.len() >= 2) {
        let tau = kendall_tau(members);
        if tau >= 1.0 - 1e-12 {
            same += 1;
        }
        taus.push(tau);
    }
    Comparison {
        pairs,
        only_a,
        only_b,
        groups: taus.len(),
        same_ranking: same,
        mean_kendall_tau: if taus.is_empty() {
            f64::NAN
        } else {
            taus.iter().sum::<f64>() / taus.len() as f64
        },
    }
}

/// Kendall's tau-a between the orders of the two timings of each member.
fn kendall_tau(members: &[(String, f64, f64)]) -> f64 {
    let n = members.len();
    let mut score = 0.0;
    for i in 0..n {
        for j in i + 1..n {
            let da = members[i].1 - members[j].1;
            let db = members[i].2 - members[j].2;
            score += (da * db).signum();
        }
    }
    score / (n * (n - 1) / 2) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kendall_tau_by_hand() {
        let m = |v: &[(f64, f64)]| -> Vec<(String, f64, f64)> {
            v.iter()
                .enumerate()
                .map(|(i, (a, b))| (i.to_string(), *a, *b))
                .collect()
        };
        assert_eq!(
            kendall_tau(&m(&[(1.0, 10.0), (2.0, 20.0), (3.0, 30.0)])),
            1.0
        );
        assert_eq!(
            kendall_tau(&m(&[(1.0, 30.0), (2.0, 20.0), (3.0, 10.0)])),
            -1.0
        );
        // One discordant pair of three: (2 - 1) / 3.
        assert!(
            (kendall_tau(&m(&[(1.0, 10.0), (2.0, 30.0), (3.0, 20.0)])) - 1.0 / 3.0).abs() < 1e-12
        );
    }
}
