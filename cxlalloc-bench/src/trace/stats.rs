//! Statistics of a trace, real or synthetic: the quantities of the docs/design.md §12.2 table.

use std::collections::HashMap;
use std::fmt;

use super::record::{Op, Request};
use super::rng::mix64;

/// Minimum, mean and maximum of a stream of sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Values seen.
    pub count: u64,
    /// Smallest value (0 when `count == 0`).
    pub min: u64,
    /// Largest value (0 when `count == 0`).
    pub max: u64,
    /// Sum of the values.
    pub sum: u128,
}

impl Summary {
    /// Adds one value.
    pub fn add(&mut self, v: u64) {
        self.min = if self.count == 0 { v } else { self.min.min(v) };
        self.max = self.max.max(v);
        self.sum += u128::from(v);
        self.count += 1;
    }

    /// The mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }
}

/// A 64-bit hash of key bytes (length-prefixed chain of the bijective SplitMix64 finalizer). Keys are counted
/// by this hash so memory per distinct key is 12 bytes whatever the key size; two distinct keys
/// collide with probability 2⁻⁶⁴ per pair (expected collisions < 0.03 for 10⁹ distinct keys).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h = mix64(key.len() as u64 ^ 0x243f_6a88_85a3_08d3);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = mix64(h ^ u64::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix64(h ^ u64::from_le_bytes(w));
    }
    h
}

/// Accumulates the statistics of a stream of requests.
#[derive(Clone, Debug, Default)]
pub struct TraceStats {
    ops: [u64; Op::ALL.len()],
    /// Requests per distinct key, keyed by [`key_hash`].
    keys: HashMap<u64, u32>,
    /// The key-size column over all requests.
    pub key_size: Summary,
    /// The value-size column over `set` requests.
    pub set_value_size: Summary,
}

impl TraceStats {
    /// Empty statistics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Statistics of every request of `requests`.
    pub fn from_requests<'a>(requests: impl IntoIterator<Item = &'a Request>) -> Self {
        let mut s = Self::new();
        requests.into_iter().for_each(|r| s.add(r));
        s
    }

    /// Counts one request.
    pub fn add(&mut self, r: &Request) {
        self.ops[r.op.index()] += 1;
        let count = self.keys.entry(key_hash(&r.key)).or_insert(0);
        *count = count.saturating_add(1);
        self.key_size.add(u64::from(r.key_size));
        if r.op == Op::Set {
            self.set_value_size.add(u64::from(r.value_size));
        }
    }

    /// Requests counted.
    pub fn requests(&self) -> u64 {
        self.ops.iter().sum()
    }

    /// Requests of one operation.
    pub fn count(&self, op: Op) -> u64 {
        self.ops[op.index()]
    }

    fn share_of(&self, n: u64) -> f64 {
        let total = self.requests();
        if total == 0 {
            0.0
        } else {
            n as f64 / total as f64
        }
    }

    /// Fraction of requests that are `set`.
    pub fn set_share(&self) -> f64 {
        self.share_of(self.count(Op::Set))
    }

    /// Fraction of requests that are `get` or `gets`.
    pub fn get_share(&self) -> f64 {
        self.share_of(self.count(Op::Get) + self.count(Op::Gets))
    }

    /// Fraction of requests that are neither sets nor gets.
    pub fn other_share(&self) -> f64 {
        self.share_of(self.requests() - self.count(Op::Set) - self.count(Op::Get) - self.count(Op::Gets))
    }

    /// Distinct keys.
    pub fn distinct_keys(&self) -> u64 {
        self.keys.len() as u64
    }

    /// Keys requested exactly once.
    pub fn one_hit_wonders(&self) -> u64 {
        self.keys.values().filter(|&&c| c == 1).count() as u64
    }

    /// Keys requested exactly once / distinct keys (0 for an empty trace).
    pub fn one_hit_wonder_share(&self) -> f64 {
        if self.keys.is_empty() {
            0.0
        } else {
            self.one_hit_wonders() as f64 / self.keys.len() as f64
        }
    }

    /// Popularity skew among the keys requested at least twice: the share of their requests that
    /// goes to the most requested `fraction` of them (at least one key). About `fraction` for
    /// uniform popularity, much more for a skewed one. One-hit wonders are left out because they
    /// would make any trace with many of them look skewed.
    pub fn top_repeated_key_share(&self, fraction: f64) -> f64 {
        let mut counts: Vec<u32> = self.keys.values().copied().filter(|&c| c >= 2).collect();
        if counts.is_empty() {
            return 0.0;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top = ((counts.len() as f64 * fraction).ceil() as usize).clamp(1, counts.len());
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        let head: u64 = counts[..top].iter().map(|&c| u64::from(c)).sum();
        head as f64 / total as f64
    }
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |x: f64| 100.0 * x;
        writeln!(f, "requests             {}", self.requests())?;
        writeln!(
            f,
            "set / get / other    {:.2} % / {:.2} % / {:.2} %",
            pct(self.set_share()),
            pct(self.get_share()),
            pct(self.other_share())
        )?;
        let ops: Vec<String> =
            Op::ALL.iter().filter(|op| self.count(**op) > 0).map(|op| format!("{op} {}", self.count(*op))).collect();
        writeln!(f, "operations           {}", ops.join(", "))?;
        writeln!(f, "distinct keys        {}", self.distinct_keys())?;
        writeln!(
            f,
            "one-hit wonders      {} ({:.2} % of distinct keys)",
            self.one_hit_wonders(),
            pct(self.one_hit_wonder_share())
        )?;
        writeln!(f, "top 1 % repeated     {:.2} % of repeated-key requests", pct(self.top_repeated_key_share(0.01)))?;
        let k = &self.key_size;
        writeln!(f, "key size             min {} / mean {:.1} / max {} B", k.min, k.mean(), k.max)?;
        let v = &self.set_value_size;
        write!(f, "set value size       min {} / mean {:.1} / max {} B ({} sets)", v.min, v.mean(), v.max, v.count)
    }
}
