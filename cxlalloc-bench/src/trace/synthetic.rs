//! Deterministic synthetic Twitter cache traces, one profile per cluster of docs/design.md §12.2.
//!
//! # Model
//!
//! A [`Generator`] for cluster `c`, seed `s` and length `n` yields exactly `n` requests. Request
//! `i` is built from one xoshiro256** stream, drawing in this order:
//!
//! 1. **Operation** — `set` with probability [`Profile::set_share`], else `get`. No other
//!    operation is generated (the table gives only the set share; in the public traces the
//!    remainder is overwhelmingly gets).
//! 2. **Key** — with probability `q` (the *one-shot share*) a fresh key from a never-repeating
//!    counter; otherwise a key from a fixed *pool* of `N` keys. Pool keys are drawn uniformly, or
//!    for a skewed cluster from a bounded power law: index `⌊N u^{1/(1−α)}⌋` for uniform `u`, whose
//!    density `(1−α) x^{−α}` over `x = index/N` gives key rank `k` a probability `∝ k^{−α}`
//!    (Zipf with exponent α; rank 0 gets about `1/(1−α)` times the pure Zipf value).
//! 3. **Client id** — uniform in `0..`[`CLIENTS`].
//! 4. **Value size** (sets only) — `⌊min(exp(μ + σZ), max)⌋`, a log-normal clamped to the
//!    cluster's range. Gets carry value size 0: the generator does not track what is stored, and
//!    the replay takes a get's size from its store.
//!
//! Timestamps advance one second every [`REQUESTS_PER_SECOND`] requests. Sets carry TTL
//! [`SET_TTL`] and gets 0; neither is calibrated (the table says nothing about them).
//!
//! A key's bytes and size are a function of its id and the seed only (see [`key_bytes`]): the
//! id goes through a bijective 64-bit mixer salted by the seed, the first 11 characters encode
//! that 64-bit value in base64url (so distinct ids give distinct keys), and the rest is a
//! hash-derived base64url padding up to the key size, drawn uniformly from the cluster's range.
//!
//! # Calibration
//!
//! * **Set share** is a Bernoulli parameter: exact in expectation.
//! * **One-hit-wonder share** `h` (keys requested exactly once / distinct keys, over the whole
//!   trace). Pool keys are requested [`POOL_MEAN_REQUESTS`] (λ = 8) times on average, so
//!   `N = (1 − q) n / λ`; under the Poisson approximation a pool key of relative popularity
//!   `λ_k` is seen once with probability `λ_k e^{−λ_k}` and at all with `1 − e^{−λ_k}`. Averaging
//!   those over the pool ([`calibrate::pool_moments`]) and adding the `qn` one-shot keys gives
//!   the expected share as a function of `q`, which [`calibrate::one_shot_share`] inverts. The
//!   result (`q` ≈ 0.347, 0.969, 0.661, 0.019 for MC-12/15/31/37; `N` ≈ 0.082 n, 0.0039 n,
//!   0.042 n, 0.12 n) is in [`Calibration`]. Because `N` scales with `n`, the share is the same
//!   for any trace length; a *prefix* of a trace has a higher share (its pool keys have not all
//!   repeated yet).
//! * **Value-size mean**: σ is a modelling choice per cluster (heavy tail for MC-12 and MC-37,
//!   narrow for the small-value clusters); `μ` is solved by bisection
//!   ([`calibrate::solve_lognormal_mu`]) so that the *clamped and floored* mean equals
//!   [`Profile::value_mean`] exactly in expectation. σ = 2.0, 0.35, 0.5, 1.5 for
//!   MC-12/15/31/37 give medians `e^μ` ≈ 141 B, 101 B, (38 B, clamped to 15 B) and 7.1 KiB. For
//!   MC-31 (range 0–15 B, mean "~15 B") the target is 14.9 B: the mass sits at 15 B with a thin
//!   tail below.
//! * **Key size** is uniform over the cluster's range; **key popularity** is uniform for
//!   MC-12/15/31 and Zipf α = 0.43 for MC-37.
//!
//! Same cluster, seed and length → the same requests, byte for byte, on a given platform (the
//! value sizes use `f64` `exp`/`ln`/`cos`; a libm that rounds differently could move a size by
//! one byte where a draw lands on an integer boundary).

use std::fmt;
use std::str::FromStr;

use super::calibrate;
use super::record::{Op, Request};
use super::rng::{mix64, Rng};

/// Mean requests per pool key (λ). Large enough that almost every pool key repeats
/// (`P(seen once) = λe^{−λ} ≈ 0.3 %` for a uniform pool), so one-hit wonders come from the
/// one-shot keys and the share is controlled by `q` alone.
pub const POOL_MEAN_REQUESTS: f64 = 8.0;

/// Distinct client ids in a synthetic trace.
pub const CLIENTS: u64 = 64;

/// Requests per second of synthetic-trace time.
pub const REQUESTS_PER_SECOND: u64 = 10_000;

/// TTL (seconds) of every synthetic set.
pub const SET_TTL: u32 = 3600;

/// Characters used in synthetic keys (base64url: no comma, no line break).
const KEY_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Characters that encode the whole 64-bit mixed key id (11 × 6 bits ≥ 64).
const KEY_ID_CHARS: usize = 11;

/// The four clusters of docs/design.md §12.2 with a synthetic profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cluster {
    /// MC-12: mostly sets of ~1 KiB values, uniform keys, many one-hit wonders.
    Mc12,
    /// MC-15: almost only sets of ~100 B values, nearly every key a one-hit wonder.
    Mc15,
    /// MC-31: mostly sets of tiny (≤ 15 B) values.
    Mc31,
    /// MC-37: get-heavy, skewed keys (Zipf α ≈ 0.43), large (~20 KiB) values, few one-hit wonders.
    Mc37,
}

impl Cluster {
    /// All clusters, in table order.
    pub const ALL: [Cluster; 4] = [Cluster::Mc12, Cluster::Mc15, Cluster::Mc31, Cluster::Mc37];

    /// The published name, e.g. `MC-12`.
    pub const fn name(self) -> &'static str {
        self.profile().name
    }

    /// The statistics the generator is calibrated to (docs/design.md §12.2 table).
    pub const fn profile(self) -> Profile {
        match self {
            Cluster::Mc12 => Profile {
                name: "MC-12",
                set_share: 0.797,
                zipf_alpha: 0.0,
                key_size: (44, 44),
                value_max: 307 * 1024,
                value_mean: 1030.0,
                value_sigma: 2.0,
                one_hit_wonder_share: 0.81,
            },
            Cluster::Mc15 => Profile {
                name: "MC-15",
                set_share: 0.999,
                zipf_alpha: 0.0,
                key_size: (14, 19),
                value_max: 144,
                value_mean: 102.0,
                value_sigma: 0.35,
                one_hit_wonder_share: 0.996,
            },
            Cluster::Mc31 => Profile {
                name: "MC-31",
                set_share: 0.930,
                zipf_alpha: 0.0,
                key_size: (40, 46),
                value_max: 15,
                value_mean: 14.9,
                value_sigma: 0.5,
                one_hit_wonder_share: 0.94,
            },
            Cluster::Mc37 => Profile {
                name: "MC-37",
                set_share: 0.388,
                zipf_alpha: 0.43,
                key_size: (68, 82),
                value_max: 325 * 1024,
                value_mean: 20.0 * 1024.0,
                value_sigma: 1.5,
                one_hit_wonder_share: 0.15,
            },
        }
    }
}

// Every cluster's keys are long enough to hold the 11-character id encoding (uniqueness).
const _: () = {
    let mut i = 0;
    while i < Cluster::ALL.len() {
        let (lo, hi) = Cluster::ALL[i].profile().key_size;
        assert!(lo as usize >= KEY_ID_CHARS && lo <= hi);
        i += 1;
    }
};

impl fmt::Display for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Returned by [`Cluster::from_str`] for a name that is not MC-12, MC-15, MC-31 or MC-37.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cluster {0:?} (expected MC-12, MC-15, MC-31 or MC-37)")]
pub struct UnknownCluster(pub String);

impl FromStr for Cluster {
    type Err = UnknownCluster;

    /// Accepts `MC-12`, `mc12`, `MC_12`, `mc-12`, `12` (any case, `-`/`_`/space ignored), etc.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm: String =
            s.chars().filter(|c| !matches!(c, '-' | '_' | ' ')).map(|c| c.to_ascii_lowercase()).collect();
        let digits = norm.strip_prefix("mc").unwrap_or(&norm);
        match digits {
            "12" => Ok(Cluster::Mc12),
            "15" => Ok(Cluster::Mc15),
            "31" => Ok(Cluster::Mc31),
            "37" => Ok(Cluster::Mc37),
            _ => Err(UnknownCluster(s.to_owned())),
        }
    }
}

/// The published statistics of one cluster plus the modelling choices the table leaves open.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Profile {
    /// Published name.
    pub name: &'static str,
    /// Fraction of requests that are sets (the rest are gets).
    pub set_share: f64,
    /// Zipf exponent of pool-key popularity; 0 = uniform.
    pub zipf_alpha: f64,
    /// Key size range in bytes, inclusive.
    pub key_size: (u32, u32),
    /// Largest value size in bytes (the smallest is 0).
    pub value_max: u32,
    /// Target mean value size of sets, in bytes.
    pub value_mean: f64,
    /// σ of the log-normal value size (modelling choice; μ is solved from `value_mean`).
    pub value_sigma: f64,
    /// Target fraction of distinct keys requested exactly once.
    pub one_hit_wonder_share: f64,
}

/// The parameters derived from a [`Profile`] and a trace length (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    /// Fraction of requests that use a fresh, never-repeated key (`q`).
    pub one_shot_share: f64,
    /// Keys in the reusable pool (`N = max(1, round((1 − q) n / λ))`).
    pub pool_keys: u64,
    /// μ of the log-normal value size.
    pub value_mu: f64,
    /// The model's expected mean value size of sets (equals the profile's target).
    pub expected_value_mean: f64,
    /// The model's expected one-hit-wonder share (equals the profile's target unless clamped).
    pub expected_one_hit_wonder_share: f64,
}

impl Calibration {
    /// Derives the generator parameters for `profile` and a trace of `requests` requests.
    pub fn new(profile: &Profile, requests: u64) -> Self {
        let lambda = POOL_MEAN_REQUESTS;
        let (a, b) = calibrate::pool_moments(profile.zipf_alpha, lambda);
        let q = calibrate::one_shot_share(profile.one_hit_wonder_share, a, b, lambda);
        let pool_keys = ((1.0 - q) * requests as f64 / lambda).round().max(1.0) as u64;
        let value_mu = calibrate::solve_lognormal_mu(profile.value_mean, profile.value_sigma, profile.value_max);
        Self {
            one_shot_share: q,
            pool_keys,
            value_mu,
            expected_value_mean: calibrate::floored_clamped_lognormal_mean(
                value_mu,
                profile.value_sigma,
                profile.value_max,
            ),
            expected_one_hit_wonder_share: calibrate::expected_one_hit_wonder_share(q, a, b, lambda),
        }
    }
}

/// The key bytes of key `id` for a trace salted with `salt`, `len` bytes long (`len ≥ 11`).
///
/// Distinct ids give distinct keys: `mix64(id ^ salt)` is a bijection and its 64 bits are
/// encoded in full by the first 11 characters.
pub fn key_bytes(id: u64, salt: u64, len: u32) -> Vec<u8> {
    debug_assert!(len as usize >= KEY_ID_CHARS);
    let mixed = mix64(id ^ salt);
    let mut key = Vec::with_capacity(len as usize);
    key.extend((0..KEY_ID_CHARS).map(|i| KEY_ALPHABET[((mixed >> (6 * i)) & 63) as usize]));
    let mut block = 0u64;
    while key.len() < len as usize {
        let h = mix64(mixed.wrapping_add(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(block + 1)));
        let take = (len as usize - key.len()).min(10);
        key.extend((0..take).map(|i| KEY_ALPHABET[((h >> (6 * i)) & 63) as usize]));
        block += 1;
    }
    key
}

/// The size of key `id` in a trace salted with `salt`: uniform over `range` (inclusive).
pub fn key_size(id: u64, salt: u64, (lo, hi): (u32, u32)) -> u32 {
    let span = u64::from(hi - lo) + 1;
    lo + (mix64(mix64(id ^ salt) ^ 0x5851_f42d_4c95_7f2d) % span) as u32
}

/// Id bit marking one-shot keys, keeping them disjoint from pool ids `0..N`.
const ONE_SHOT_BIT: u64 = 1 << 63;

/// A deterministic synthetic trace: an iterator of exactly `requests` [`Request`]s.
#[derive(Clone, Debug)]
pub struct Generator {
    profile: Profile,
    calibration: Calibration,
    rng: Rng,
    key_salt: u64,
    /// `1 / (1 − α)`: the power applied to a uniform draw to pick a pool index.
    zipf_power: f64,
    requests: u64,
    emitted: u64,
    next_one_shot: u64,
}

impl Generator {
    /// The trace of `requests` requests of `cluster` for `seed`.
    pub fn new(cluster: Cluster, seed: u64, requests: u64) -> Self {
        // The cluster goes into the stream seed so different clusters with one seed differ.
        Self::with_profile(cluster.profile(), seed ^ mix64(cluster as u64 + 1), requests)
    }

    /// A trace from a custom profile (`key_size.0 ≥ 11`, `0 ≤ zipf_alpha < 1`).
    pub fn with_profile(profile: Profile, seed: u64, requests: u64) -> Self {
        debug_assert!((0.0..1.0).contains(&profile.zipf_alpha), "zipf_alpha must be in [0, 1)");
        debug_assert!(profile.key_size.0 as usize >= KEY_ID_CHARS && profile.key_size.0 <= profile.key_size.1);
        let mut rng = Rng::new(seed);
        let key_salt = rng.next_u64();
        Self {
            calibration: Calibration::new(&profile, requests),
            zipf_power: 1.0 / (1.0 - profile.zipf_alpha),
            profile,
            rng,
            key_salt,
            requests,
            emitted: 0,
            next_one_shot: 0,
        }
    }

    /// The profile this trace follows.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The derived parameters.
    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    fn pool_index(&mut self) -> u64 {
        let n = self.calibration.pool_keys;
        if self.profile.zipf_alpha == 0.0 {
            self.rng.below(n)
        } else {
            let x = self.rng.next_f64().powf(self.zipf_power);
            ((x * n as f64) as u64).min(n - 1)
        }
    }

    fn value_size(&mut self) -> u32 {
        let x = (self.calibration.value_mu + self.profile.value_sigma * self.rng.normal()).exp();
        let max = self.profile.value_max;
        if x >= max as f64 {
            max
        } else {
            x as u32
        }
    }
}

impl Iterator for Generator {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.emitted == self.requests {
            return None;
        }
        let i = self.emitted;
        self.emitted += 1;
        let op = if self.rng.next_f64() < self.profile.set_share { Op::Set } else { Op::Get };
        let id = if self.rng.next_f64() < self.calibration.one_shot_share {
            self.next_one_shot += 1;
            ONE_SHOT_BIT | (self.next_one_shot - 1)
        } else {
            self.pool_index()
        };
        let client_id = self.rng.below(CLIENTS) as u32;
        let (value_size, ttl) = if op == Op::Set { (self.value_size(), SET_TTL) } else { (0, 0) };
        let size = key_size(id, self.key_salt, self.profile.key_size);
        Some(Request {
            timestamp: i / REQUESTS_PER_SECOND,
            key: key_bytes(id, self.key_salt, size),
            key_size: size,
            value_size,
            client_id,
            op,
            ttl,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match usize::try_from(self.requests - self.emitted) {
            Ok(left) => (left, Some(left)),
            Err(_) => (usize::MAX, None),
        }
    }
}
