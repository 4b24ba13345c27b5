//! The numerics behind the synthetic generator's calibration: the one-hit-wonder key model and
//! the mean of a clamped, floored log-normal. Everything here is deterministic arithmetic on the
//! profile; nothing is random.

/// `erfc(x)` by the Chebyshev fit of Numerical Recipes (`erfcc`): fractional error below
/// 1.2 × 10⁻⁷ everywhere, ample for calibrating means to a fraction of a percent.
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// `P(N(0,1) ≤ x)`.
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Largest `max` for which [`floored_clamped_lognormal_mean`] sums exactly.
const EXACT_SUM_LIMIT: u32 = 4096;

/// `E[floor(min(X, max))]` for `X = exp(μ + σZ)`, the value-size distribution of the generator.
///
/// For `max ≤ 4096` it is the exact sum `Σ_{v=1..max} P(X ≥ v)`. Above, it uses the closed form
/// `E[min(X, M)] = e^{μ+σ²/2} Φ((ln M − μ − σ²)/σ) + M (1 − Φ((ln M − μ)/σ))` minus half a byte
/// for the flooring of the unclamped part (`0.5 P(X < M)`); that correction is exact to well
/// under a byte, i.e. < 0.1 % of any mean it is used for here (≥ 1 KiB).
pub fn floored_clamped_lognormal_mean(mu: f64, sigma: f64, max: u32) -> f64 {
    if max <= EXACT_SUM_LIMIT {
        return (1..=max).map(|v| 1.0 - normal_cdf(((v as f64).ln() - mu) / sigma)).sum();
    }
    let m = max as f64;
    let below = normal_cdf((m.ln() - mu) / sigma);
    let clamped =
        (mu + sigma * sigma / 2.0).exp() * normal_cdf((m.ln() - mu - sigma * sigma) / sigma) + m * (1.0 - below);
    clamped - 0.5 * below
}

/// The `μ` for which [`floored_clamped_lognormal_mean`]`(μ, σ, max)` equals `target` (bisection;
/// the mean increases with `μ`). A target at or beyond `max` yields the upper bracket
/// `ln(max) + 10σ`, where essentially every draw clamps to `max`.
pub fn solve_lognormal_mu(target: f64, sigma: f64, max: u32) -> f64 {
    let (mut lo, mut hi) = (-20.0_f64, (max.max(1) as f64).ln() + 10.0 * sigma);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if floored_clamped_lognormal_mean(mid, sigma, max) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Points of the midpoint rule in [`pool_moments`].
const POOL_INTEGRATION_POINTS: u32 = 20_000;

/// For a key pool whose keys are drawn with density `(1 − α) x^{−α}` over `x ∈ (0, 1]` (key index
/// `⌊N x⌋`, see [`super::synthetic`]) and requested `λ` times on average, returns the per-key
/// averages `(a, b)` = (`E[λ_k e^{−λ_k}]`, `E[1 − e^{−λ_k}]`): under the Poisson approximation,
/// the expected fraction of pool keys requested exactly once, and at least once.
/// `λ_k = λ (1 − α) x^{−α}`; for `α = 0` (uniform) this is exactly `(λe^{−λ}, 1 − e^{−λ})`.
pub fn pool_moments(alpha: f64, lambda: f64) -> (f64, f64) {
    let n = POOL_INTEGRATION_POINTS;
    let (mut a, mut b) = (0.0, 0.0);
    for i in 0..n {
        let x = (i as f64 + 0.5) / n as f64;
        let l = lambda * (1.0 - alpha) * x.powf(-alpha);
        let e = (-l).exp();
        a += l * e;
        b += 1.0 - e;
    }
    (a / n as f64, b / n as f64)
}

/// The one-shot share `q` of requests that makes the expected one-hit-wonder share `h`, given the
/// pool moments `(a, b)` of [`pool_moments`] and mean pool requests per key `λ`.
///
/// With `n` requests, `qn` one-shot keys (each seen exactly once) and `N = (1 − q) n / λ` pool
/// keys, the expected share is `h = (q + (1 − q) a/λ) / (q + (1 − q) b/λ)`; solving for `q`:
/// `q / (1 − q) = (h b − a) / (λ (1 − h))`. Clamped to `[0, 1]` (for `h b ≤ a` the pool alone
/// already has too many one-hit wonders and `q = 0` is the closest one can get).
pub fn one_shot_share(h: f64, a: f64, b: f64, lambda: f64) -> f64 {
    if h >= 1.0 {
        return 1.0;
    }
    let ratio = ((h * b - a) / (lambda * (1.0 - h))).max(0.0);
    ratio / (1.0 + ratio)
}

/// The expected one-hit-wonder share of the model: the inverse of [`one_shot_share`].
pub fn expected_one_hit_wonder_share(q: f64, a: f64, b: f64, lambda: f64) -> f64 {
    let once = q + (1.0 - q) * a / lambda;
    let distinct = q + (1.0 - q) * b / lambda;
    if distinct > 0.0 {
        once / distinct
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_matches_known_values() {
        for (x, want) in [
            (0.0, 1.0),
            (0.5, 0.479_500_122_2),
            (1.0, 0.157_299_207_1),
            (2.0, 0.004_677_734_981),
            (-1.0, 1.842_700_792_9),
        ] {
            assert!((erfc(x) - want).abs() <= 1.2e-7 * want, "erfc({x}) = {} want {want}", erfc(x));
        }
    }

    #[test]
    fn closed_form_mean_agrees_with_the_exact_sum_near_the_switch() {
        // Same distribution evaluated both ways at max = 4096 (exact) vs the closed form.
        let (mu, sigma, max) = (6.0, 1.2, 4096u32);
        let exact = floored_clamped_lognormal_mean(mu, sigma, max);
        let m = max as f64;
        let below = normal_cdf((m.ln() - mu) / sigma);
        let closed = (mu + sigma * sigma / 2.0).exp() * normal_cdf((m.ln() - mu - sigma * sigma) / sigma)
            + m * (1.0 - below)
            - 0.5 * below;
        assert!((exact - closed).abs() < 0.05, "exact {exact} closed {closed}");
    }

    #[test]
    fn solved_mu_reproduces_the_target_mean() {
        for (target, sigma, max) in
            [(1030.0, 2.0, 314_368), (102.0, 0.35, 144), (14.9, 0.5, 15), (20_480.0, 1.5, 332_800)]
        {
            let mu = solve_lognormal_mu(target, sigma, max);
            let got = floored_clamped_lognormal_mean(mu, sigma, max);
            assert!((got - target).abs() < 1e-6 * target, "target {target} got {got}");
        }
    }

    #[test]
    fn one_shot_share_inverts_the_expected_share() {
        for (h, alpha) in [(0.81, 0.0), (0.996, 0.0), (0.94, 0.0), (0.15, 0.43)] {
            let (a, b) = pool_moments(alpha, 8.0);
            let q = one_shot_share(h, a, b, 8.0);
            assert!((expected_one_hit_wonder_share(q, a, b, 8.0) - h).abs() < 1e-12);
        }
    }
}
