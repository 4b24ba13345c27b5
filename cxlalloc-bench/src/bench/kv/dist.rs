//! Random streams and key distributions for the KV benchmarks: a seeded SplitMix64 generator,
//! the YCSB zipfian generator (Gray et al., "Quickly generating billion-record synthetic
//! databases", as YCSB implements it), and the hash used to scramble zipfian ranks into key ids.
//!
//! Written here rather than taken from a crate so that "same seed, same operations" depends on
//! nothing but this file (the trace module's generator is private to it).

use crate::Error;

/// The SplitMix64 finalizer: a bijection on `u64` with full avalanche. Used to scramble ranks,
/// derive per-thread seeds, and finish key hashes.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of thread `thread`'s stream in a run seeded with `seed`: distinct threads get
/// unrelated streams, and the same (seed, thread) always gets the same one.
pub fn stream_seed(seed: u64, thread: usize) -> u64 {
    mix64(seed ^ mix64(thread as u64 ^ 0x6a09_e667_f3bc_c909))
}

/// SplitMix64 (Steele, Lea, Flood): one 64-bit word of state, passes BigCrush, and is fast
/// enough that drawing an operation never shows up next to the allocator.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// The stream seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 uniform bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (multiply-shift; 0 when `n == 0`).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// `Σ_{i=from+1..=to} 1 / i^θ`: the part of the generalized harmonic number between two item
/// counts.
fn zeta_range(from: u64, to: u64, theta: f64) -> f64 {
    (from + 1..=to).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// Zipfian ranks over `0..items` with constant θ (`0 ≤ θ < 1`): rank `k` is drawn with
/// probability `(k + 1)^{−θ} / ζ(items, θ)`, so rank 0 is the most popular.
///
/// This is the generator YCSB uses (Gray et al.): O(1) per draw after an O(items) sum for
/// ζ(items). [`Zipfian::grow`] extends ζ incrementally when the key range grows, as YCSB's
/// "latest" distribution does. θ = 0 is the uniform distribution.
#[derive(Clone, Debug)]
pub struct Zipfian {
    theta: f64,
    items: u64,
    /// ζ(items, θ).
    zetan: f64,
    /// ζ(2, θ), a constant of the method.
    zeta2: f64,
    /// `1 / (1 − θ)`.
    alpha: f64,
    /// `(1 − (2/items)^{1−θ}) / (1 − ζ(2)/ζ(items))`, recomputed when `items` changes.
    eta: f64,
    /// `1 + 0.5^θ`: the draw threshold below which rank 1 is returned.
    rank1_bound: f64,
}

impl Zipfian {
    /// The distribution over `items` (≥ 1) ranks with constant `theta` in `[0, 1)`.
    pub fn new(items: u64, theta: f64) -> Result<Self, Error> {
        if items == 0 {
            return Err("zipfian: needs at least one item".into());
        }
        if !(0.0..1.0).contains(&theta) {
            return Err(format!("zipfian constant must be in [0, 1), got {theta}").into());
        }
        let zeta2 = zeta_range(0, 2, theta);
        let mut z = Self {
            theta,
            items,
            zetan: zeta_range(0, items, theta),
            zeta2,
            alpha: 1.0 / (1.0 - theta),
            eta: 0.0,
            rank1_bound: 1.0 + 0.5f64.powf(theta),
        };
        z.eta = z.eta_for();
        Ok(z)
    }

    fn eta_for(&self) -> f64 {
        let n = self.items as f64;
        (1.0 - (2.0 / n).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// Ranks currently drawn from.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// Extends the range to `items` ranks, adding the new terms to ζ (O(new items)). A smaller
    /// count is ignored: YCSB's key ranges only grow.
    pub fn grow(&mut self, items: u64) {
        if items > self.items {
            self.zetan += zeta_range(self.items, items, self.theta);
            self.items = items;
            self.eta = self.eta_for();
        }
    }

    /// The next rank, in `0..items`.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        if self.items <= 2 {
            // The closed form needs at least three items (eta divides by 1 − ζ(2)/ζ(n)).
            let u = rng.next_f64() * self.zetan;
            return u64::from(u >= 1.0 && self.items == 2);
        }
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < self.rank1_bound {
            return 1;
        }
        let rank = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.items - 1)
    }

    /// The probability of rank 0 (`1 / ζ(items)`), for tests and reports.
    pub fn top_share(&self) -> f64 {
        1.0 / self.zetan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_matches_a_fresh_generator() {
        let mut grown = Zipfian::new(100, 0.99).unwrap();
        grown.grow(5000);
        let fresh = Zipfian::new(5000, 0.99).unwrap();
        assert!((grown.zetan - fresh.zetan).abs() < 1e-9);
        assert!((grown.eta - fresh.eta).abs() < 1e-12);
    }

    #[test]
    fn one_and_two_items_stay_in_range() {
        let mut rng = Rng::new(3);
        let one = Zipfian::new(1, 0.99).unwrap();
        let two = Zipfian::new(2, 0.99).unwrap();
        let mut seen = [0u32; 2];
        for _ in 0..1000 {
            assert_eq!(one.next(&mut rng), 0);
            seen[two.next(&mut rng) as usize] += 1;
        }
        assert!(seen[0] > seen[1] && seen[1] > 0, "{seen:?}");
    }

    #[test]
    fn theta_zero_is_uniform() {
        let z = Zipfian::new(10, 0.0).unwrap();
        let mut rng = Rng::new(11);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[z.next(&mut rng) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }

    #[test]
    fn bad_constants_and_empty_ranges_are_refused() {
        assert!(Zipfian::new(10, 1.0).is_err());
        assert!(Zipfian::new(10, -0.1).is_err());
        assert!(Zipfian::new(0, 0.5).is_err());
    }
}
