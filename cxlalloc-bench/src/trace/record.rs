//! One trace request and its operation.

use std::fmt;
use std::str::FromStr;

/// A memcached operation, as named in the `operation` column of the Twitter traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `get`: look a key up.
    Get,
    /// `gets`: look a key up and return its CAS token.
    Gets,
    /// `set`: store a value unconditionally.
    Set,
    /// `add`: store only if the key is absent.
    Add,
    /// `replace`: store only if the key is present.
    Replace,
    /// `cas`: store only if the CAS token still matches.
    Cas,
    /// `append`: append bytes to an existing value.
    Append,
    /// `prepend`: prepend bytes to an existing value.
    Prepend,
    /// `delete`: remove a key.
    Delete,
    /// `incr`: increment a numeric value.
    Incr,
    /// `decr`: decrement a numeric value.
    Decr,
}

impl Op {
    /// Every operation, in declaration order (`Op::ALL[op.index()] == op`).
    pub const ALL: [Op; 11] = [
        Op::Get,
        Op::Gets,
        Op::Set,
        Op::Add,
        Op::Replace,
        Op::Cas,
        Op::Append,
        Op::Prepend,
        Op::Delete,
        Op::Incr,
        Op::Decr,
    ];

    /// The name used in the trace's `operation` column (lower case).
    pub const fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Gets => "gets",
            Op::Set => "set",
            Op::Add => "add",
            Op::Replace => "replace",
            Op::Cas => "cas",
            Op::Append => "append",
            Op::Prepend => "prepend",
            Op::Delete => "delete",
            Op::Incr => "incr",
            Op::Decr => "decr",
        }
    }

    /// Position in [`Op::ALL`], for per-operation counters.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Parses an operation name, ignoring ASCII case. `None` for anything else.
    pub fn from_name(name: &[u8]) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name().as_bytes().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Returned by [`Op::from_str`] for a name that is not one of the eleven operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown operation {0:?} (expected one of get, gets, set, add, replace, cas, append, prepend, delete, incr, decr)"
)]
pub struct UnknownOp(pub String);

impl FromStr for Op {
    type Err = UnknownOp;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Op::from_name(s.as_bytes()).ok_or_else(|| UnknownOp(s.to_owned()))
    }
}

/// One request of a cache trace: one line of the 7-column Twitter CSV
/// `timestamp,anonymized key,key size,value size,client id,operation,TTL`.
///
/// `key` holds the key bytes as they appear in the trace (the replay hashes and compares them);
/// `key_size` is the trace's key-size column. In the public traces the key is anonymized, so
/// `key.len()` need not equal `key_size`; in synthetic traces it always does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    /// Seconds since the start of the trace.
    pub timestamp: u64,
    /// The key bytes (never empty, never containing `\n` or `\r`).
    pub key: Vec<u8>,
    /// The key size column, in bytes.
    pub key_size: u32,
    /// The value size column, in bytes (for a get: the size of the value found, 0 if unknown).
    pub value_size: u32,
    /// The (anonymized) client that sent the request.
    pub client_id: u32,
    /// The operation.
    pub op: Op,
    /// Time to live in seconds; 0 means no expiry (and is what non-storing operations carry).
    pub ttl: u32,
}
