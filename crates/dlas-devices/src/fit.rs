//! Nonlinear least squares for the efficiency curves: Levenberg-Marquardt
//! on residuals in `ln(time)`, so that a layer of 20 µs and one of 20 ms
//! weigh alike.
//!
//! Written here rather than taken from a crate because it is small, part of
//! the device model the project studies, and must be deterministic to the
//! bit (the fitted curves decide every mocked number).

/// Residuals and their Jacobian at a parameter vector: `(r, J)` with
/// `J[i][j] = d r_i / d p_j`.
pub(crate) type Model<'a> = dyn Fn(&[f64]) -> (Vec<f64>, Vec<Vec<f64>>) + 'a;

/// Iterations at most; the fits here converge in a few dozen.
const MAX_ITERATIONS: usize = 300;

/// Minimises `sum r_i(p)^2` from `start`; returns the parameters.
pub(crate) fn levenberg_marquardt(start: &[f64], model: &Model) -> Vec<f64> {
    let cost = |r: &[f64]| r.iter().map(|x| x * x).sum::<f64>();
    let mut p = start.to_vec();
    let (mut r, mut jac) = model(&p);
    let mut current = cost(&r);
    let mut damping = 1e-3;
    for _ in 0..MAX_ITERATIONS {
        let n = p.len();
        let mut normal = vec![vec![0.0; n + 1]; n];
        for (ri, row) in r.iter().zip(&jac) {
            for i in 0..n {
                for j in 0..n {
                    normal[i][j] += row[i] * row[j];
                }
                normal[i][n] -= row[i] * ri;
            }
        }
        for (i, eq) in normal.iter_mut().enumerate() {
            eq[i] += damping * eq[i].max(1e-12);
        }
        let step = solve(normal);
        let trial: Vec<f64> = p.iter().zip(&step).map(|(p, s)| p + s).collect();
        let (tr, tj) = model(&trial);
        let trial_cost = cost(&tr);
        if trial_cost.is_finite() && trial_cost < current {
            let gain = current - trial_cost;
            (p, r, jac, current) = (trial, tr, tj, trial_cost);
            damping = (damping / 3.0).max(1e-12);
            if gain <= 1e-12 * current.max(1e-300) {
                break;
            }
        } else {
            damping *= 4.0;
            if damping > 1e12 {
                break;
            }
        }
    }
    p
}

/// Solves the augmented system `[A | b]` by Gaussian elimination with
/// partial pivoting; a singular direction gets 0.
pub(crate) fn solve(mut a: Vec<Vec<f64>>) -> Vec<f64> {
    let n = a.len();
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))
            .expect("rows");
        a.swap(col, pivot);
        let row = a[col].clone();
        if row[col].abs() < 1e-12 {
            continue;
        }
        for (r, other) in a.iter_mut().enumerate() {
            if r != col {
                let factor = other[col] / row[col];
                for (x, y) in other.iter_mut().zip(&row).skip(col) {
                    *x -= factor * y;
                }
            }
        }
    }
    (0..n)
        .map(|i| {
            if a[i][i].abs() >= 1e-12 {
                a[i][n] / a[i][i]
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_a_planted_exponential_decay() {
        // y = a exp(-b x) + c, fitted in ln(y) like the curves.
        let (a, b, c) = (3.0f64, 0.7f64, 0.2f64);
        let xs: Vec<f64> = (0..40).map(|i| i as f64 * 0.25).collect();
        let ys: Vec<f64> = xs.iter().map(|x| a * (-b * x).exp() + c).collect();
        let model = |p: &[f64]| {
            let (la, b, lc) = (p[0], p[1], p[2]);
            let mut r = Vec::new();
            let mut jac = Vec::new();
            for (x, y) in xs.iter().zip(&ys) {
                let e = la.exp() * (-b * x).exp();
                let pred = e + lc.exp();
                r.push(pred.ln() - y.ln());
                jac.push(vec![e / pred, -x * e / pred, lc.exp() / pred]);
            }
            (r, jac)
        };
        let p = levenberg_marquardt(&[0.0, 0.1, -3.0], &model);
        assert!((p[0].exp() - a).abs() < 1e-6, "{p:?}");
        assert!((p[1] - b).abs() < 1e-6, "{p:?}");
        assert!((p[2].exp() - c).abs() < 1e-6, "{p:?}");
    }

    #[test]
    fn solves_a_linear_system() {
        let x = solve(vec![vec![2.0, 1.0, 5.0], vec![1.0, 3.0, 10.0]]);
        assert!((x[0] - 1.0).abs() < 1e-12 && (x[1] - 3.0).abs() < 1e-12);
    }
}
