//! The two tile sizes' transforms, written once on an abstract vector of
//! L tiles' values: [`Lanes`] arrays for the portable and AVX2 paths (the
//! compiler vectorises them), AVX-512 registers for the widest one
//! (`avx512`).
//!
//! Both use Lavin and Gray's points: 0, ±1, ±2 and ∞ for F(4x4, 3x3) (Bᵀ's
//! entries reach 5, Aᵀ's 8), 0, ±1 and ∞ for F(2x2, 3x3) (every entry of
//! Bᵀ and Aᵀ is 0 or ±1, so its transforms only add and its results carry
//! less rounding error).

/// Tiles (or columns) whose transforms run side by side, one per lane of
/// an AVX-512 register (two AVX2 ones).
pub(super) const L: usize = 16;
pub(super) type Lanes = [f32; L];

#[inline(always)]
pub(super) fn lanes(f: impl Fn(usize) -> f32) -> Lanes {
    array(f)
}

/// `std::array::from_fn` as a plain loop (N > 0): the transforms are
/// compiled with AVX-512 or AVX2 enabled, and `from_fn`'s machinery, left
/// out of line without them, spilled every vector through the stack.
#[inline(always)]
pub(super) fn array<X: Copy, const N: usize>(f: impl Fn(usize) -> X) -> [X; N] {
    let mut out = [f(0); N];
    for (i, o) in out.iter_mut().enumerate().skip(1) {
        *o = f(i);
    }
    out
}

/// What the 1-D transforms compute on: L tiles' values side by side.
pub(super) trait Vector: Copy {
    fn add(self, other: Self) -> Self;
    fn sub(self, other: Self) -> Self;
    fn scale(self, k: f32) -> Self;
}

impl Vector for Lanes {
    #[inline(always)]
    fn add(self, other: Lanes) -> Lanes {
        lanes(|l| self[l] + other[l])
    }

    #[inline(always)]
    fn sub(self, other: Lanes) -> Lanes {
        lanes(|l| self[l] - other[l])
    }

    #[inline(always)]
    fn scale(self, k: f32) -> Lanes {
        lanes(|l| k * self[l])
    }
}

/// A tile size, F(M x M, 3x3) on T x T input tiles (T = M + 2): its
/// three 1-D transforms, applied separably to rows and columns.
pub(super) trait Tile<const M: usize, const T: usize> {
    /// G g for one 3-vector g, in f64 (it runs once per weight, at load).
    fn weight_1d(g: [f64; 3]) -> [f64; T];
    /// Bᵀ d for L T-vectors d, side by side.
    fn input_1d<V: Vector>(d: [V; T]) -> [V; T];
    /// Aᵀ m for L T-vectors m, side by side.
    fn output_1d<V: Vector>(m: [V; T]) -> [V; M];
}

/// F(4x4, 3x3): 36 products per tile and channel pair for 16 outputs.
pub(super) struct F4;

impl Tile<4, 6> for F4 {
    fn weight_1d(g: [f64; 3]) -> [f64; 6] {
        [
            g[0] / 4.0,
            -(g[0] + g[1] + g[2]) / 6.0,
            -(g[0] - g[1] + g[2]) / 6.0,
            g[0] / 24.0 + g[1] / 12.0 + g[2] / 6.0,
            g[0] / 24.0 - g[1] / 12.0 + g[2] / 6.0,
            g[2],
        ]
    }

    #[inline(always)]
    fn input_1d<V: Vector>(d: [V; 6]) -> [V; 6] {
        [
            d[0].scale(4.0).sub(d[2].scale(5.0)).add(d[4]),
            d[1].add(d[2]).scale(-4.0).add(d[3]).add(d[4]),
            d[1].sub(d[2]).scale(4.0).sub(d[3]).add(d[4]),
            d[3].sub(d[1]).scale(2.0).sub(d[2]).add(d[4]),
            d[1].sub(d[3]).scale(2.0).sub(d[2]).add(d[4]),
            d[1].scale(4.0).sub(d[3].scale(5.0)).add(d[5]),
        ]
    }

    #[inline(always)]
    fn output_1d<V: Vector>(m: [V; 6]) -> [V; 4] {
        let (s12, d12) = (m[1].add(m[2]), m[1].sub(m[2]));
        let (s34, d34) = (m[3].add(m[4]), m[3].sub(m[4]));
        [
            m[0].add(s12).add(s34),
            d12.add(d34.scale(2.0)),
            s12.add(s34.scale(4.0)),
            d12.add(d34.scale(8.0)).add(m[5]),
        ]
    }
}

/// F(2x2, 3x3): 16 products per tile and channel pair for 4 outputs.
pub(super) struct F2;

impl Tile<2, 4> for F2 {
    fn weight_1d(g: [f64; 3]) -> [f64; 4] {
        [
            g[0],
            (g[0] + g[1] + g[2]) / 2.0,
            (g[0] - g[1] + g[2]) / 2.0,
            g[2],
        ]
    }

    #[inline(always)]
    fn input_1d<V: Vector>(d: [V; 4]) -> [V; 4] {
        [
            d[0].sub(d[2]),
            d[1].add(d[2]),
            d[2].sub(d[1]),
            d[1].sub(d[3]),
        ]
    }

    #[inline(always)]
    fn output_1d<V: Vector>(m: [V; 4]) -> [V; 2] {
        [m[0].add(m[1]).add(m[2]), m[1].sub(m[2]).sub(m[3])]
    }
}

/// U = G g Gᵀ of a 3x3 kernel (row-major), indexed `[i][j]`.
pub(super) fn transform_weights<const M: usize, const T: usize, F: Tile<M, T>>(
    g: &[f32],
) -> [[f32; T]; T] {
    let rows: [[f64; T]; 3] =
        std::array::from_fn(|r| F::weight_1d(std::array::from_fn(|c| g[3 * r + c] as f64)));
    let mut u = [[0.0; T]; T];
    for j in 0..T {
        let col = F::weight_1d(std::array::from_fn(|r| rows[r][j]));
        for i in 0..T {
            u[i][j] = col[i] as f32;
        }
    }
    u
}

/// Y = Aᵀ m A of L tiles' products, `m[i][j]` being point (i, j).
#[inline(always)]
pub(super) fn transform_output<const M: usize, const T: usize, F: Tile<M, T>, V: Vector>(
    m: &[[V; T]; T],
) -> [[V; M]; M] {
    let cols: [[V; M]; T] = array(|j| F::output_1d(array(|i| m[i][j])));
    array(|i| F::output_1d(array(|j| cols[j][i])))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 1-D identity each tile rests on: Aᵀ [(G g) ⊙ (Bᵀ d)] is the
    /// correlation of d with g.
    fn correlates<const M: usize, const T: usize, F: Tile<M, T>>() {
        let d: [f32; T] = std::array::from_fn(|i| [0.3, -1.2, 2.0, 0.7, -0.4, 1.1][i]);
        let g = [0.5f64, -0.25, 0.8];
        let (u, v) = (F::weight_1d(g), F::input_1d(d.map(|x| [x; L])));
        let y = F::output_1d(std::array::from_fn(|i| v[i].scale(u[i] as f32)));
        for (i, &yi) in y.iter().map(|lanes| &lanes[0]).enumerate() {
            let want: f64 = (0..3).map(|j| d[i + j] as f64 * g[j]).sum();
            assert!(
                (yi as f64 - want).abs() < 1e-5,
                "F({M}): {i}: {yi} vs {want}"
            );
        }
    }

    #[test]
    fn one_dimensional_transforms_correlate() {
        correlates::<4, 6, F4>();
        correlates::<2, 4, F2>();
    }
}
