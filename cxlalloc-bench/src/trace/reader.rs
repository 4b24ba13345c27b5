//! Streaming reader for the Twitter cache-trace CSV format.
//!
//! Each line is `timestamp,anonymized key,key size,value size,client id,operation,TTL`, e.g.
//! `0,q:xWx8PZc33t1DDnVZYUXX,20,221,3,get,0`. The reader holds one line in memory at a time.
//!
//! Tolerated: a trailing `\r` (CRLF files), blank lines (skipped), a header line starting with
//! `timestamp,` on line 1 (skipped), operation names in any ASCII case, and commas inside the key
//! (the first field and the last five are split off and the key is whatever lies between them).
//! Everything else that does not parse is a [`ReadError`] naming the line.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::record::{Op, Request};

/// The first four bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// A numeric column of the trace, named in [`ReadError::BadNumber`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// Column 1.
    Timestamp,
    /// Column 3.
    KeySize,
    /// Column 4.
    ValueSize,
    /// Column 5.
    ClientId,
    /// Column 7.
    Ttl,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Timestamp => "timestamp",
            Field::KeySize => "key size",
            Field::ValueSize => "value size",
            Field::ClientId => "client id",
            Field::Ttl => "TTL",
        })
    }
}

/// A line of a trace that could not be read, returned by [`TraceReader`]'s iterator. `line` is
/// 1-based and counts every line of the input, including skipped blank and header lines.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The line does not have the seven comma-separated columns.
    #[error("line {line}: expected 7 comma-separated fields (timestamp,key,key size,value size,client id,operation,TTL), found {found}")]
    FieldCount {
        /// 1-based line number.
        line: u64,
        /// Fields found.
        found: usize,
    },
    /// A numeric column is empty, has a non-digit, or does not fit its type.
    #[error("line {line}: {field} {text:?} is not an unsigned integer below 2^{bits}")]
    BadNumber {
        /// 1-based line number.
        line: u64,
        /// Which column.
        field: Field,
        /// The column's text (lossily decoded).
        text: String,
        /// Width of the column's type.
        bits: u32,
    },
    /// The operation column is not one of the eleven memcached operations.
    #[error("line {line}: unknown operation {name:?} (expected get, gets, set, add, replace, cas, append, prepend, delete, incr or decr)")]
    UnknownOp {
        /// 1-based line number.
        line: u64,
        /// The column's text (lossily decoded).
        name: String,
    },
    /// The key column is empty.
    #[error("line {line}: empty key")]
    EmptyKey {
        /// 1-based line number.
        line: u64,
    },
    /// Reading from the underlying input failed; the reader stops after this.
    #[error("line {line}: read failed: {source}")]
    Io {
        /// 1-based number of the line being read.
        line: u64,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

impl ReadError {
    /// The 1-based line the error is about.
    pub fn line(&self) -> u64 {
        match self {
            ReadError::FieldCount { line, .. }
            | ReadError::BadNumber { line, .. }
            | ReadError::UnknownOp { line, .. }
            | ReadError::EmptyKey { line }
            | ReadError::Io { line, .. } => *line,
        }
    }
}

/// Returned by [`open`] when a trace file cannot be opened for reading.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Opening or first reading the file failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The file is zstd-compressed (by its `.zst` extension or its magic number). This crate does
    /// not link a zstd decoder (the `zstd` crate needs a C build); decompress the file first.
    #[error("{}: zstd-compressed trace; decompress it first (`zstd -d {}`) and read the resulting .csv", .path.display(), .path.display())]
    Compressed {
        /// The file.
        path: PathBuf,
    },
}

/// Opens a plain-text trace file for streaming. Refuses zstd files with [`OpenError::Compressed`].
pub fn open(path: &Path) -> Result<TraceReader<BufReader<File>>, OpenError> {
    let compressed = || OpenError::Compressed { path: path.to_owned() };
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("zst")) {
        return Err(compressed());
    }
    let io_err = |source| OpenError::Io { path: path.to_owned(), source };
    let mut reader = BufReader::with_capacity(1 << 16, File::open(path).map_err(io_err)?);
    if reader.fill_buf().map_err(io_err)?.starts_with(&ZSTD_MAGIC) {
        return Err(compressed());
    }
    Ok(TraceReader::new(reader))
}

/// Streams [`Request`]s out of any buffered input in the 7-column CSV format.
///
/// Yields `Err` for a malformed line and goes on with the next one (the caller chooses whether to
/// stop); after an I/O error it yields nothing more.
#[derive(Debug)]
pub struct TraceReader<R> {
    input: R,
    line: Vec<u8>,
    line_no: u64,
    done: bool,
}

impl<R: BufRead> TraceReader<R> {
    /// A reader over `input`, positioned at its first line.
    pub fn new(input: R) -> Self {
        Self { input, line: Vec::with_capacity(256), line_no: 0, done: false }
    }

    /// The number of lines consumed so far (the 1-based number of the last line read).
    pub fn line_number(&self) -> u64 {
        self.line_no
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Request, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.line.clear();
            self.line_no += 1;
            match self.input.read_until(b'\n', &mut self.line) {
                Ok(0) => {
                    self.done = true;
                    return None;
                }
                Ok(_) => {}
                Err(source) => {
                    self.done = true;
                    return Some(Err(ReadError::Io { line: self.line_no, source }));
                }
            }
            let mut text = self.line.as_slice();
            if let Some(rest) = text.strip_suffix(b"\n") {
                text = rest;
            }
            if let Some(rest) = text.strip_suffix(b"\r") {
                text = rest;
            }
            if text.is_empty() || (self.line_no == 1 && text.starts_with(b"timestamp,")) {
                continue;
            }
            return Some(parse_line(text, self.line_no));
        }
        None
    }
}

/// Parses one line (without its terminator). `line` is only used in errors.
pub fn parse_line(text: &[u8], line: u64) -> Result<Request, ReadError> {
    let field_count = || ReadError::FieldCount { line, found: text.iter().filter(|&&b| b == b',').count() + 1 };
    let (timestamp, rest) = split_first(text).ok_or_else(field_count)?;
    // The last five columns are split from the right so a key may contain commas.
    let mut tail = rest.rsplitn(6, |&b| b == b',');
    let (Some(ttl), Some(op), Some(client), Some(value_size), Some(key_size), Some(key)) =
        (tail.next(), tail.next(), tail.next(), tail.next(), tail.next(), tail.next())
    else {
        return Err(field_count());
    };
    if key.is_empty() {
        return Err(ReadError::EmptyKey { line });
    }
    let op = Op::from_name(op)
        .ok_or_else(|| ReadError::UnknownOp { line, name: String::from_utf8_lossy(op).into_owned() })?;
    Ok(Request {
        timestamp: number(timestamp, Field::Timestamp, line)?,
        key: key.to_vec(),
        key_size: number32(key_size, Field::KeySize, line)?,
        value_size: number32(value_size, Field::ValueSize, line)?,
        client_id: number32(client, Field::ClientId, line)?,
        op,
        ttl: number32(ttl, Field::Ttl, line)?,
    })
}

fn split_first(text: &[u8]) -> Option<(&[u8], &[u8])> {
    let comma = text.iter().position(|&b| b == b',')?;
    Some((&text[..comma], &text[comma + 1..]))
}

/// Parses a non-empty run of ASCII digits into a `u64`, refusing signs, spaces and overflow.
fn parse_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    text.iter().try_fold(0u64, |acc, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        acc.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

fn bad_number(text: &[u8], field: Field, line: u64, bits: u32) -> ReadError {
    ReadError::BadNumber { line, field, text: String::from_utf8_lossy(text).into_owned(), bits }
}

fn number(text: &[u8], field: Field, line: u64) -> Result<u64, ReadError> {
    parse_u64(text).ok_or_else(|| bad_number(text, field, line, 64))
}

fn number32(text: &[u8], field: Field, line: u64) -> Result<u32, ReadError> {
    parse_u64(text).and_then(|v| u32::try_from(v).ok()).ok_or_else(|| bad_number(text, field, line, 32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_u64_refuses_signs_spaces_empty_and_overflow() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"+1"), None);
        assert_eq!(parse_u64(b" 1"), None);
        assert_eq!(parse_u64(b"1a"), None);
    }

    #[test]
    fn a_key_may_contain_commas() {
        let r = parse_line(b"5,a,b,c,3,10,2,set,60", 1).unwrap();
        assert_eq!(r.key, b"a,b,c");
        assert_eq!((r.timestamp, r.key_size, r.value_size, r.client_id, r.op, r.ttl), (5, 3, 10, 2, Op::Set, 60));
    }
}
