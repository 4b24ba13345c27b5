//! Writes requests in the 7-column Twitter CSV format that [`super::reader`] reads back.

use std::io::{self, Write};

use super::record::Request;

/// Writes [`Request`]s as `timestamp,key,key size,value size,client id,operation,TTL` lines.
///
/// Wrap the output in a `BufWriter` for files; call [`TraceWriter::finish`] (or `flush` the
/// inner writer) to surface the final write error.
#[derive(Debug)]
pub struct TraceWriter<W> {
    out: W,
}

impl<W: Write> TraceWriter<W> {
    /// A writer emitting to `out`. No header line is written (the public traces have none).
    pub fn new(out: W) -> Self {
        Self { out }
    }

    /// Writes one request as one line. A key that is empty or contains `\n` or `\r` could not
    /// be read back, so it is refused with [`io::ErrorKind::InvalidInput`] and nothing is written.
    pub fn write(&mut self, r: &Request) -> io::Result<()> {
        if r.key.is_empty() || r.key.iter().any(|&b| b == b'\n' || b == b'\r') {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "trace key is empty or contains a line break"));
        }
        write!(self.out, "{},", r.timestamp)?;
        self.out.write_all(&r.key)?;
        writeln!(self.out, ",{},{},{},{},{}", r.key_size, r.value_size, r.client_id, r.op.name(), r.ttl)
    }

    /// Flushes and returns the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}
