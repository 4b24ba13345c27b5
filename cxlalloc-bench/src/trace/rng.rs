//! A small, self-contained, seeded PRNG: xoshiro256** (Blackman & Vigna) seeded through
//! SplitMix64, plus the 64-bit mixer the trace code uses to derive key bytes and key sizes.
//!
//! Written here rather than taken from a crate so the synthetic traces' byte sequence depends on
//! nothing but this file: a dependency upgrade can never silently change a "same seed" trace.

/// The SplitMix64 finalizer: a bijection on `u64` with good avalanche. Bijective matters: distinct
/// inputs give distinct outputs, which [`super::synthetic`] relies on to keep key bytes unique.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64 step: used only to expand a seed into xoshiro's 256-bit state.
#[inline]
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    mix64(*state)
}

/// xoshiro256**: 256-bit state, period 2^256 − 1, passes BigCrush; all outputs derive from the seed.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose whole output sequence is a function of `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s = [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
        // SplitMix64 outputs are a bijection of distinct counters, so at most one of them is 0;
        // the all-zero state (xoshiro's only fixed point) cannot occur.
        Self { s }
    }

    /// The next 64 uniformly distributed bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)`, 53 bits of precision.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `(0, 1]`: safe to take the logarithm of.
    #[inline]
    pub fn next_f64_nonzero(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias, below n / 2^64, is irrelevant here).
    /// Returns 0 when `n == 0`.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// A standard normal deviate (Box–Muller, cosine branch only, one per call).
    #[inline]
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next_f64_nonzero();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xoshiro_matches_the_reference_sequence_for_a_known_state() {
        // Reference: xoshiro256starstar.c with s = {1, 2, 3, 4}.
        let mut r = Rng { s: [1, 2, 3, 4] };
        let got: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
        assert_eq!(got, [11520, 0, 1509978240, 1215971899390074240]);
    }

    #[test]
    fn below_stays_in_range_and_f64_in_unit_interval() {
        let mut r = Rng::new(7);
        for _ in 0..10_000 {
            assert!(r.below(13) < 13);
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
            let y = r.next_f64_nonzero();
            assert!(y > 0.0 && y <= 1.0);
        }
        assert_eq!(r.below(0), 0);
    }
}
