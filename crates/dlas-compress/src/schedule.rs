//! The study's pruning schedules and the choice of one level per network.

use dlas_core::Compression;

/// The levels a sweep visits: weight pruning 0.5..=0.9 by 0.1, then 0.95
/// and 0.99; channel pruning 0.05..=0.95 by 0.05, then 0.99. Other
/// techniques have no level.
pub fn sweep_levels(technique: Compression) -> Vec<f64> {
    // Levels are built from integers so they print exactly (0.3, not 0.30000000000000004).
    let steps =
        |from: u32, to: u32, by: u32| (from..=to).step_by(by as usize).map(|p| p as f64 / 100.0);
    match technique {
        Compression::WeightPruning => steps(50, 90, 10).chain([0.95, 0.99]).collect(),
        Compression::ChannelPruning => steps(5, 95, 5).chain([0.99]).collect(),
        _ => Vec::new(),
    }
}

/// The level the study runs: the elbow, i.e. the highest level whose
/// recorded top-1 accuracy is at most `max_drop` (percentage points) below
/// `dense_top1`, when accuracy is recorded for the dense model and at least
/// one level; otherwise `study_level`, the level fixed in the study file.
pub fn choose_level(
    dense_top1: Option<f64>,
    recorded: &[(f64, f64)],
    max_drop: f64,
    study_level: f64,
) -> f64 {
    let Some(dense) = dense_top1 else {
        return study_level;
    };
    recorded
        .iter()
        .filter(|(_, top1)| dense - top1 <= max_drop)
        .map(|(level, _)| *level)
        .max_by(f64::total_cmp)
        .unwrap_or(study_level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_are_the_studys() {
        assert_eq!(
            sweep_levels(Compression::WeightPruning),
            [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99]
        );
        let c = sweep_levels(Compression::ChannelPruning);
        assert_eq!(c.len(), 20);
        assert_eq!((c[0], c[2], c[18], c[19]), (0.05, 0.15, 0.95, 0.99));
        assert!(sweep_levels(Compression::Int8).is_empty());
    }

    #[test]
    fn the_elbow_is_the_highest_level_within_the_drop() {
        let recorded = [(0.5, 93.0), (0.8, 92.5), (0.9, 90.0)];
        assert_eq!(choose_level(Some(93.02), &recorded, 1.0, 0.8), 0.8);
        assert_eq!(choose_level(Some(93.02), &recorded, 5.0, 0.8), 0.9);
        assert_eq!(choose_level(Some(99.0), &recorded, 1.0, 0.7), 0.7);
        assert_eq!(choose_level(None, &recorded, 1.0, 0.7), 0.7);
    }
}
