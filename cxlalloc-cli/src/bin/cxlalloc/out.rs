//! Standard output for the CLI: every line goes through [`Out`], which treats a closed pipe
//! (`cxlalloc check NAME | head -1`) as the reader having seen enough: output stops quietly and
//! the command still exits with its own status. (`println!` would panic there: Rust ignores
//! `SIGPIPE`, so the write fails with `EPIPE`.)

use std::fmt;
use std::io::{self, Write};

/// A line writer over standard output that stops quietly at a broken pipe.
pub struct Out {
    stdout: io::StdoutLock<'static>,
    /// Set once the reader has gone: nothing more is written.
    closed: bool,
}

impl Out {
    /// Standard output, locked for the life of the command.
    pub fn stdout() -> Self {
        Out { stdout: io::stdout().lock(), closed: false }
    }

    /// Writes one line. A broken pipe ends the output silently; any other error is returned.
    ///
    /// Control characters are written escaped (`\n`, `\u{1b}`): names and paths come from
    /// directory entries that any local user can create in `/dev/shm`, and must neither split a
    /// fact over two lines nor send escape sequences to the terminal. (JSON output has none
    /// left: its strings escape them.)
    pub fn line(&mut self, args: fmt::Arguments<'_>) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let safe = escape_controls(args.to_string());
        match self.stdout.write_all(safe.as_bytes()).and_then(|()| self.stdout.write_all(b"\n")) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }

    /// A `key: value` line, the key padded so that values line up (a longer key still gets one
    /// space).
    pub fn fact(&mut self, key: &str, value: impl fmt::Display) -> io::Result<()> {
        self.line(format_args!("{:<25} {value}", format!("{key}:")))
    }

    /// Flushes what is buffered (a broken pipe is quiet here too).
    pub fn flush(&mut self) -> io::Result<()> {
        match self.stdout.flush() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            other => other,
        }
    }
}

/// `text` with every control character escaped (`\n`, `\u{1b}`): see [`Out::line`].
fn escape_controls(text: String) -> String {
    if !text.contains(char::is_control) {
        return text;
    }
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// Writes to standard error, ignoring failure: there is nowhere left to report it. Control
/// characters are escaped as on standard output (messages name paths).
pub fn error(args: fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr(), "{}", escape_controls(args.to_string()));
}
