//! The knobs of each algorithm's schedule and the moves of the search:
//! random sampling, mutation (one knob to a nearby or random value) and
//! crossover (each knob from one of two parents).
//!
//! Knobs are read and written on [`Schedule`] values, so the space needs no
//! encoding of its own and any schedule (the default, one from a record) can
//! seed the search. GEMM's `mc` and `nc` are knobs in units of the register
//! tile, so changing the tile keeps them multiples of it; candidates that
//! are still invalid (a panel over the cache budget, a tile larger than the
//! output) are left to [`Schedule::validate`], which the search calls before
//! measuring anything.

use dlas_engine::schedule::{GEMM_TILES, SPATIAL_PACK_VC};
use dlas_engine::{ParallelLoop, Schedule, VectorAxis};
use rand::Rng;

/// `row_block` meaning "all rows of the output in one task".
const ALL_ROWS: usize = usize::MAX;
const DIRECT_OC_BLOCKS: &[usize] = &[1, 2, 3, 4, 6, 8, 12, 16, 24, 32];
const DIRECT_ROW_BLOCKS: &[usize] = &[1, 2, 4, 8, 16, 32, ALL_ROWS];
const GEMM_KC: &[usize] = &[16, 32, 48, 64, 96, 128, 192, 256, 384, 512];
/// `mc / mr` and `nc / nr`.
const GEMM_TILES_PER_BLOCK: &[usize] = &[
    1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64,
];
const SPATIAL_PACK_TILE: &[usize] = &[1, 2, 3, 4, 5, 6, 7, 8];
/// 4x4 output tiles per Winograd pass: from one up to a 64x64 map.
const WINOGRAD_TILE_BLOCKS: &[usize] = &[1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256];
/// Output blocks of 16 channels, and output rows, of a blocked task.
const BLOCKED_BLOCKS: &[usize] = &[1, 2, 3, 4, 6, 8];
const BLOCKED_ROWS: &[usize] = &[1, 2, 3, 4, 6, 7, 8, 14, 28, 56];
const PARALLEL: &[ParallelLoop] = &[ParallelLoop::OutputChannels, ParallelLoop::Spatial];
const VECTORS: &[VectorAxis] = &[VectorAxis::Spatial, VectorAxis::OutputChannels];

/// How many knobs a schedule of this algorithm has.
pub fn knobs(s: &Schedule) -> usize {
    match s {
        Schedule::Direct(_) => 2,
        Schedule::Gemm(_) => 6,
        Schedule::SpatialPack(_) => 4,
        Schedule::Winograd(_) => 4,
        Schedule::Blocked(_) => 2,
    }
}

/// The values knob `k` of `s`'s algorithm can take, as indices into its
/// list, and the index `s` holds (the nearest one when `s` holds a value
/// off the list, as a fitted default may).
fn knob(s: &Schedule, k: usize) -> (usize, usize) {
    let nearest = |list: &[usize], v: usize| {
        (
            list.len(),
            (0..list.len())
                .min_by_key(|&i| list[i].abs_diff(v))
                .expect("a non-empty list"),
        )
    };
    let parallel = |p: ParallelLoop| (2, PARALLEL.iter().position(|&q| q == p).unwrap_or(0));
    let vectors = |v: VectorAxis| {
        (
            VECTORS.len(),
            VECTORS.iter().position(|&w| w == v).unwrap_or(0),
        )
    };
    let tile = |t: (usize, usize)| {
        (
            GEMM_TILES.len(),
            GEMM_TILES.iter().position(|&u| u == t).unwrap_or(0),
        )
    };
    match (s, k) {
        (Schedule::Direct(d), 0) => nearest(DIRECT_OC_BLOCKS, d.oc_block),
        (Schedule::Direct(d), _) => nearest(DIRECT_ROW_BLOCKS, d.row_block),
        (Schedule::Gemm(g), 0) => tile((g.mr, g.nr)),
        (Schedule::Gemm(g), 1) => nearest(GEMM_KC, g.kc),
        (Schedule::Gemm(g), 2) => nearest(GEMM_TILES_PER_BLOCK, g.mc / g.mr.max(1)),
        (Schedule::Gemm(g), 3) => nearest(GEMM_TILES_PER_BLOCK, g.nc / g.nr.max(1)),
        (Schedule::Gemm(g), 4) => parallel(g.parallel),
        (Schedule::Gemm(g), _) => vectors(g.vectors),
        (Schedule::SpatialPack(p), 0) => nearest(SPATIAL_PACK_VC, p.vc),
        (Schedule::SpatialPack(p), 1) => nearest(SPATIAL_PACK_TILE, p.vh),
        (Schedule::SpatialPack(p), 2) => nearest(SPATIAL_PACK_TILE, p.vw),
        (Schedule::SpatialPack(p), _) => parallel(p.parallel),
        (Schedule::Winograd(w), 0) => tile((w.mr, w.nr)),
        (Schedule::Winograd(w), 1) => nearest(GEMM_KC, w.kc),
        (Schedule::Winograd(w), 2) => nearest(WINOGRAD_TILE_BLOCKS, w.tile_block),
        (Schedule::Winograd(w), _) => vectors(w.vectors),
        (Schedule::Blocked(b), 0) => nearest(BLOCKED_BLOCKS, b.blocks),
        (Schedule::Blocked(b), _) => nearest(BLOCKED_ROWS, b.rows),
    }
}

/// `s` with knob `k` set to the value at index `i` of its list.
fn set(s: Schedule, k: usize, i: usize) -> Schedule {
    match s {
        Schedule::Direct(mut d) => {
            match k {
                0 => d.oc_block = DIRECT_OC_BLOCKS[i],
                _ => d.row_block = DIRECT_ROW_BLOCKS[i],
            }
            Schedule::Direct(d)
        }
        Schedule::Gemm(mut g) => {
            let (mc_tiles, nc_tiles) = (g.mc / g.mr.max(1), g.nc / g.nr.max(1));
            match k {
                0 => {
                    (g.mr, g.nr) = GEMM_TILES[i];
                    g.mc = g.mr * mc_tiles.max(1);
                    g.nc = g.nr * nc_tiles.max(1);
                }
                1 => g.kc = GEMM_KC[i],
                2 => g.mc = g.mr * GEMM_TILES_PER_BLOCK[i],
                3 => g.nc = g.nr * GEMM_TILES_PER_BLOCK[i],
                4 => g.parallel = PARALLEL[i],
                _ => g.vectors = VECTORS[i],
            }
            Schedule::Gemm(g)
        }
        Schedule::SpatialPack(mut p) => {
            match k {
                0 => p.vc = SPATIAL_PACK_VC[i],
                1 => p.vh = SPATIAL_PACK_TILE[i],
                2 => p.vw = SPATIAL_PACK_TILE[i],
                _ => p.parallel = PARALLEL[i],
            }
            Schedule::SpatialPack(p)
        }
        Schedule::Winograd(mut w) => {
            match k {
                0 => (w.mr, w.nr) = GEMM_TILES[i],
                1 => w.kc = GEMM_KC[i],
                2 => w.tile_block = WINOGRAD_TILE_BLOCKS[i],
                _ => w.vectors = VECTORS[i],
            }
            Schedule::Winograd(w)
        }
        Schedule::Blocked(mut b) => {
            match k {
                0 => b.blocks = BLOCKED_BLOCKS[i],
                _ => b.rows = BLOCKED_ROWS[i],
            }
            Schedule::Blocked(b)
        }
    }
}

/// A schedule of `like`'s algorithm with every knob drawn uniformly.
pub fn random(like: Schedule, rng: &mut impl Rng) -> Schedule {
    (0..knobs(&like)).fold(like, |s, k| {
        let (n, _) = knob(&s, k);
        set(s, k, rng.random_range(0..n))
    })
}

/// `s` with one knob moved: to a neighbouring value of its list (a local
/// step, three times in four) or to any value (a jump).
pub fn mutate(s: Schedule, rng: &mut impl Rng) -> Schedule {
    let k = rng.random_range(0..knobs(&s));
    let (n, at) = knob(&s, k);
    let to = if rng.random_bool(0.75) {
        let step = rng.random_range(1..=2);
        if rng.random_bool(0.5) {
            at.saturating_sub(step)
        } else {
            (at + step).min(n - 1)
        }
    } else {
        rng.random_range(0..n)
    };
    set(s, k, to)
}

/// Each knob from `a` or `b` with equal chance (uniform crossover).
pub fn crossover(a: Schedule, b: Schedule, rng: &mut impl Rng) -> Schedule {
    if std::mem::discriminant(&a) != std::mem::discriminant(&b) {
        return a;
    }
    (0..knobs(&a)).fold(a, |s, k| {
        if rng.random_bool(0.5) {
            set(s, k, knob(&b, k).1)
        } else {
            s
        }
    })
}

/// The number of distinct schedules the knobs can express (valid or not),
/// for reporting how much of the space a search saw.
pub fn size(s: &Schedule) -> usize {
    (0..knobs(s)).map(|k| knob(s, k).0).product()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlas_engine::{
        BlockedSchedule, DirectSchedule, GemmSchedule, SpatialPackSchedule, WinogradSchedule,
    };
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn all() -> [Schedule; 5] {
        [
            Schedule::Direct(DirectSchedule::default()),
            Schedule::Gemm(GemmSchedule::default()),
            Schedule::SpatialPack(SpatialPackSchedule::default()),
            Schedule::Winograd(WinogradSchedule::default()),
            Schedule::Blocked(BlockedSchedule::default()),
        ]
    }

    #[test]
    fn moves_stay_in_the_algorithm_and_on_the_lists() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for start in all() {
            let mut s = start;
            for _ in 0..500 {
                s = match rng.random_range(0..3) {
                    0 => random(s, &mut rng),
                    1 => mutate(s, &mut rng),
                    _ => crossover(s, random(s, &mut rng), &mut rng),
                };
                assert_eq!(std::mem::discriminant(&s), std::mem::discriminant(&start));
                if let Schedule::Gemm(g) = s {
                    assert!(GEMM_TILES.contains(&(g.mr, g.nr)));
                    assert!(g.mc.is_multiple_of(g.mr) && g.nc.is_multiple_of(g.nr));
                }
                // Every knob holds a value of its list exactly.
                for k in 0..knobs(&s) {
                    let (n, i) = knob(&s, k);
                    assert!(i < n);
                    assert_eq!(set(s, k, i), s, "knob {k} of {s:?}");
                }
            }
        }
    }

    #[test]
    fn random_sampling_reaches_much_of_a_small_space() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let start = Schedule::SpatialPack(SpatialPackSchedule::default());
        let seen: std::collections::HashSet<_> =
            (0..4000).map(|_| random(start, &mut rng)).collect();
        assert_eq!(size(&start), 3 * 8 * 8 * 2);
        assert!(seen.len() > size(&start) * 9 / 10, "{}", seen.len());
    }

    #[test]
    fn mutation_changes_at_most_one_knob() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let s = Schedule::Gemm(GemmSchedule::default());
        for _ in 0..200 {
            let m = mutate(s, &mut rng);
            let changed = (0..knobs(&s)).filter(|&k| knob(&s, k).1 != knob(&m, k).1);
            assert!(changed.count() <= 1, "{s:?} -> {m:?}");
        }
    }
}
