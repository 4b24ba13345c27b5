//! The memcached text protocol (docs/design.md §16.5): parses the commands in a connection's
//! input and runs them against a [`Worker`], appending the replies to its output.
//!
//! Commands: `get`/`gets` (several keys), `set`/`add`/`replace`/`append`/`prepend`/`cas`,
//! `delete`, `incr`/`decr`, `touch`, `flush_all`, `version`, `verbosity`, `stats`, `quit`;
//! `noreply` on every command that takes it. Replies and errors are memcached 1.6's.

use std::io::Write;

use crate::error::StoreError;
use crate::layout::{MAX_KEY, MAX_VALUE};
use crate::store::{self, Mode, Stored, Worker, STAT_NAMES};

/// Longest command line before the connection is refused: long enough for a `get` of a few
/// thousand keys (clients batch multi-gets on one line, as memcached accepts).
pub const MAX_LINE: usize = 1 << 20;

/// Tokens of a command line kept on the stack (memcached's MAX_TOKENS is 24 too): every
/// command but a multi-get has at most 8.
const MAX_TOKENS: usize = 24;

/// Exptimes above this many seconds are absolute unix times (memcached's rule).
const RELATIVE_MAX: i64 = 60 * 60 * 24 * 30;

/// The version `version` and `stats` report.
pub const VERSION: &str = concat!("1.6.0-cxlkv-", env!("CARGO_PKG_VERSION"));

/// Per-connection parser state.
#[derive(Debug, Default)]
pub struct Conn {
    /// Bytes of a refused value still to be discarded.
    swallow: usize,
    /// The client sent `quit` or a line too long: close once the output is written.
    pub close: bool,
}

/// Facts `stats` reports that the table does not hold.
#[derive(Clone, Copy, Debug)]
pub struct ServerInfo {
    /// Unix time the worker started.
    pub started: u64,
    /// Worker processes.
    pub workers: usize,
}

/// Runs every complete command at the start of `input`; returns the bytes consumed (the rest
/// is an incomplete command, to be completed by more input).
pub fn process(w: &mut Worker<'_>, info: &ServerInfo, conn: &mut Conn, input: &[u8], out: &mut Vec<u8>) -> usize {
    let mut pos = 0;
    while pos < input.len() && !conn.close {
        let rest = &input[pos..];
        if conn.swallow > 0 {
            let n = conn.swallow.min(rest.len());
            conn.swallow -= n;
            pos += n;
            continue;
        }
        let Some(nl) = rest.iter().take(MAX_LINE + 1).position(|&c| c == b'\n') else {
            if rest.len() > MAX_LINE {
                out.extend_from_slice(b"CLIENT_ERROR line is too long\r\n");
                conn.close = true;
                pos = input.len();
            }
            break;
        };
        let line = &rest[..nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match command(w, info, conn, line, &rest[nl + 1..], out) {
            Some(data_used) => pos += nl + 1 + data_used,
            None => break,
        }
    }
    pos
}

/// Runs one command line; `Some(bytes of data after the line it consumed)`, or `None` when
/// its data has not all arrived.
fn command(
    w: &mut Worker<'_>,
    info: &ServerInfo,
    conn: &mut Conn,
    line: &[u8],
    data: &[u8],
    out: &mut Vec<u8>,
) -> Option<usize> {
    // The tokens, on the stack for every command but a long multi-get (no allocation per
    // request on the hot path: docs/design.md §16.5).
    let mut small = [&b""[..]; MAX_TOKENS];
    let mut big: Vec<&[u8]> = Vec::new();
    let mut raw_len = 0;
    for tok in line.split(|&c| c == b' ').filter(|s| !s.is_empty()) {
        if raw_len < MAX_TOKENS {
            small[raw_len] = tok;
        } else {
            if big.is_empty() {
                big.extend_from_slice(&small);
            }
            big.push(tok);
        }
        raw_len += 1;
    }
    let mut t: &[&[u8]] = if raw_len > MAX_TOKENS { &big } else { &small[..raw_len] };
    let Some(&cmd) = t.first() else {
        out.extend_from_slice(b"ERROR\r\n");
        return Some(0);
    };
    let noreply = t.len() > 1 && t.last() == Some(&&b"noreply"[..]);
    if noreply {
        t = &t[..t.len() - 1];
    }
    // Replies go straight to `out`; a silenced one (noreply) is cut off again at the end.
    let start = out.len();
    let reply = &mut *out;
    let used = match cmd {
        b"get" | b"gets" if t.len() >= 2 => {
            for key in &t[1..] {
                if key.len() > MAX_KEY {
                    // The values already written go too: the error is the whole reply.
                    reply.truncate(start);
                    reply.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                    return Some(0);
                }
                let r = w.get(key, |it| {
                    reply.extend_from_slice(b"VALUE ");
                    reply.extend_from_slice(key);
                    push_number(reply, b' ', u64::from(it.item.flags));
                    push_number(reply, b' ', it.data.len() as u64);
                    if cmd == b"gets" {
                        push_number(reply, b' ', it.item.cas);
                    }
                    reply.extend_from_slice(b"\r\n");
                    reply.extend_from_slice(it.data);
                    reply.extend_from_slice(b"\r\n");
                });
                if let Err(e) = r {
                    server_error(reply, &e);
                }
            }
            reply.extend_from_slice(b"END\r\n");
            0
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            return storage(w, cmd, t, noreply, conn, data, reply);
        }
        b"delete" if t.len() > 2 && t.len() <= 4 && !(t.len() == 3 && t[2] == b"0") => {
            reply.extend_from_slice(b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n");
            0
        }
        b"delete" if (2..=3).contains(&t.len()) => {
            match w.delete(t[1]) {
                Ok(true) => reply.extend_from_slice(b"DELETED\r\n"),
                Ok(false) => reply.extend_from_slice(b"NOT_FOUND\r\n"),
                Err(e) => server_error(reply, &e),
            }
            0
        }
        b"incr" | b"decr" if t.len() == 3 => {
            match number::<u64>(t[2]) {
                None => reply.extend_from_slice(b"CLIENT_ERROR invalid numeric delta argument\r\n"),
                Some(delta) => match w.incr(t[1], delta, cmd == b"incr") {
                    Ok(Some(Ok(n))) => {
                        let mut buf = [0u8; 20];
                        reply.extend_from_slice(store::format_number(n, &mut buf));
                        reply.extend_from_slice(b"\r\n");
                    }
                    Ok(Some(Err(()))) => {
                        reply.extend_from_slice(b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
                    }
                    Ok(None) => reply.extend_from_slice(b"NOT_FOUND\r\n"),
                    Err(e) => server_error(reply, &e),
                },
            }
            0
        }
        b"touch" if t.len() == 3 => {
            match number::<i64>(t[2]) {
                None => reply.extend_from_slice(b"CLIENT_ERROR invalid exptime argument\r\n"),
                Some(e) => match w.touch(t[1], exptime(e)) {
                    Ok(true) => reply.extend_from_slice(b"TOUCHED\r\n"),
                    Ok(false) => reply.extend_from_slice(b"NOT_FOUND\r\n"),
                    Err(e) => server_error(reply, &e),
                },
            }
            0
        }
        b"flush_all" if t.len() <= 2 => {
            match t.get(1).map(|d| number::<i64>(d)) {
                Some(None) => reply.extend_from_slice(b"CLIENT_ERROR invalid exptime argument\r\n"),
                delay => {
                    let d = delay.flatten().unwrap_or(0);
                    // A delay is relative seconds, or an absolute unix time above 30 days.
                    let d =
                        if d > RELATIVE_MAX { (d as u64).saturating_sub(store::now()).max(1) } else { d.max(0) as u64 };
                    w.flush_all(d);
                    reply.extend_from_slice(b"OK\r\n");
                }
            }
            0
        }
        b"version" => {
            // memcached ignores version's arguments, noreply included.
            let _ = write!(reply, "VERSION {VERSION}\r\n");
            return Some(0);
        }
        b"verbosity" if t.len() == 2 || (noreply && t.len() == 1) => {
            reply.extend_from_slice(b"OK\r\n");
            0
        }
        // `stats noreply` is an error in memcached (stats takes no noreply).
        b"stats" if raw_len == 1 => {
            stats(w, info, reply);
            0
        }
        // cxlkv's own: the table's census (walks every bucket; for tests and tools).
        b"stats" if raw_len == 2 && t.get(1) == Some(&&b"cxlkv"[..]) => {
            census(w, reply);
            0
        }
        b"quit" if t.len() == 1 => {
            conn.close = true;
            0
        }
        _ => {
            // Unknown commands and wrong argument counts are errors even with noreply.
            reply.extend_from_slice(b"ERROR\r\n");
            return Some(0);
        }
    };
    if noreply && !out[start..].starts_with(b"CLIENT_ERROR") {
        out.truncate(start);
    }
    Some(used)
}

/// A storage command (`set key flags exptime bytes [cas] [noreply]` then the data).
fn storage(
    w: &mut Worker<'_>,
    cmd: &[u8],
    t: &[&[u8]],
    noreply: bool,
    conn: &mut Conn,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Option<usize> {
    let want = if cmd == b"cas" { 6 } else { 5 };
    let parsed = (t.len() == want)
        .then(|| {
            let flags = number::<u32>(t[2])?;
            let exp = number::<i64>(t[3])?;
            let bytes = number::<i64>(t[4])?;
            let unique = if want == 6 { Some(number::<u64>(t[5])?) } else { None };
            Some((flags, exp, bytes, unique))
        })
        .flatten();
    let Some((flags, exp, bytes, unique)) = parsed.filter(|p| p.2 >= 0) else {
        out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
        return Some(0);
    };
    let bytes = bytes as usize;
    let key = t[1];
    if key.len() > MAX_KEY || bytes > MAX_VALUE {
        // memcached refuses the command and discards its data.
        let msg: &[u8] = if key.len() > MAX_KEY {
            b"CLIENT_ERROR bad command line format\r\n"
        } else {
            b"SERVER_ERROR object too large for cache\r\n"
        };
        out.extend_from_slice(msg);
        conn.swallow = bytes + 2;
        return Some(0);
    }
    if data.len() < bytes + 2 {
        return None;
    }
    if &data[bytes..bytes + 2] != b"\r\n" {
        if !noreply {
            out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
        }
        return Some(bytes + 2);
    }
    let mode = match cmd {
        b"set" => Mode::Set,
        b"add" => Mode::Add,
        b"replace" => Mode::Replace,
        b"append" => Mode::Append,
        b"prepend" => Mode::Prepend,
        _ => Mode::Cas(unique.unwrap_or(0)),
    };
    let start = out.len();
    match w.store_item(mode, key, flags, exptime(exp), &data[..bytes]) {
        Ok(Stored::Stored) => out.extend_from_slice(b"STORED\r\n"),
        Ok(Stored::NotStored) => out.extend_from_slice(b"NOT_STORED\r\n"),
        Ok(Stored::Exists) => out.extend_from_slice(b"EXISTS\r\n"),
        Ok(Stored::NotFound) => out.extend_from_slice(b"NOT_FOUND\r\n"),
        Err(e) => server_error(out, &e),
    }
    if noreply {
        out.truncate(start);
    }
    Some(bytes + 2)
}

/// The absolute expiry of a client's exptime (0 = never; negative = already expired).
fn exptime(e: i64) -> u64 {
    match e {
        0 => 0,
        e if e < 0 => 1,
        e if e <= RELATIVE_MAX => store::now() + e as u64,
        e => e as u64,
    }
}

/// A command argument as a number, with `str::parse`'s rules. Plain digits that cannot
/// overflow (the common case) are summed here; anything else (signs, long or bad numbers) goes
/// through `parse`, so both paths accept exactly the same arguments.
fn number<T: std::str::FromStr + TryFrom<u64>>(s: &[u8]) -> Option<T> {
    if !s.is_empty() && s.len() <= 9 && s.iter().all(u8::is_ascii_digit) {
        let n = s.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        // Up to 9 digits fit every T used here (u32, i64, u64); the conversion cannot fail
        // for them, and a T it failed for is refused as `parse` would refuse it.
        return T::try_from(n).ok();
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Appends `sep` then `n` in decimal (the reply fields; `write!` costs a formatter per field).
fn push_number(out: &mut Vec<u8>, sep: u8, n: u64) {
    let mut buf = [0u8; 20];
    out.push(sep);
    out.extend_from_slice(store::format_number(n, &mut buf));
}

fn server_error(reply: &mut Vec<u8>, e: &StoreError) {
    let msg = match e {
        StoreError::OutOfMemory => "out of memory storing object".to_string(),
        StoreError::TooLarge(_) => "object too large for cache".to_string(),
        e => e.to_string().replace(['\r', '\n'], " "),
    };
    let _ = write!(reply, "SERVER_ERROR {msg}\r\n");
}

fn census(w: &Worker<'_>, reply: &mut Vec<u8>) {
    let s = w.store();
    match s.census().and_then(|c| Ok((c, s.owned_blocks()?))) {
        Ok(((items, live, arrays, bytes), owned)) => {
            let _ = write!(
                reply,
                "STAT table_items {items}\r\nSTAT table_live_items {live}\r\nSTAT table_arrays {arrays}\r\n\
                 STAT table_bytes {bytes}\r\nSTAT retired_pending {}\r\nSTAT owned_blocks {owned}\r\nEND\r\n",
                s.retired_pending()
            );
        }
        Err(e) => server_error(reply, &e),
    }
}

fn stats(w: &Worker<'_>, info: &ServerInfo, reply: &mut Vec<u8>) {
    let s = w.store();
    let now = store::now();
    let t = s.table();
    let mut stat = |name: &str, v: &dyn std::fmt::Display| {
        let _ = write!(reply, "STAT {name} {v}\r\n");
    };
    stat("pid", &std::process::id());
    stat("uptime", &now.saturating_sub(info.started));
    stat("time", &now);
    stat("version", &VERSION);
    stat("pointer_size", &64);
    stat("threads", &info.workers);
    stat("worker", &w.index());
    for (st, name) in STAT_NAMES {
        stat(name, &s.stat(st).max(0));
    }
    // Relaxed: statistics.
    stat("limit_maxbytes", &t.memory_limit.load(std::sync::atomic::Ordering::Relaxed));
    stat("worker_restarts", &t.restarts.load(std::sync::atomic::Ordering::Relaxed));
    stat("evictions_policy", &"sampled-lru");
    reply.extend_from_slice(b"END\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use cxlalloc::{Config, Heap};

    /// Runs `input` through a fresh table in an anonymous heap, feeding it in pieces of the
    /// sizes in `chunks` (the rest at the end), and returns everything replied.
    fn run(input: &[u8], chunks: &[usize]) -> String {
        let heap = Heap::anonymous(&Config::default()).expect("anonymous heap");
        let store = Store::on_heap(heap, 6).expect("table");
        let (mut w, _) = Worker::start(&store, 0).expect("worker");
        let info = ServerInfo { started: 0, workers: 1 };
        let (mut conn, mut buf, mut out) = (Conn::default(), Vec::new(), Vec::new());
        let mut fed = 0;
        for &n in chunks.iter().chain(std::iter::once(&usize::MAX)) {
            let end = fed + n.min(input.len() - fed);
            buf.extend_from_slice(&input[fed..end]);
            fed = end;
            let used = process(&mut w, &info, &mut conn, &buf, &mut out);
            buf.drain(..used);
        }
        String::from_utf8(out).expect("replies are text")
    }

    #[test]
    fn a_command_split_across_reads_runs_once_it_is_complete() {
        let input = b"set k 7 0 5\r\nhello\r\nget k\r\n";
        let whole = run(input, &[]);
        assert_eq!(whole, "STORED\r\nVALUE k 7 5\r\nhello\r\nEND\r\n");
        for cut in 1..input.len() {
            assert_eq!(run(input, &[cut]), whole, "split at byte {cut}");
        }
        assert_eq!(run(input, &[1; 40]), whole, "one byte at a time");
    }

    #[test]
    fn pipelined_commands_are_answered_in_order() {
        let out = run(b"add a 0 0 1\r\nx\r\nadd a 0 0 1\r\ny\r\nincr a 1\r\nappend a 0 0 1\r\nz\r\nget a b\r\n", &[]);
        assert_eq!(
            out,
            "STORED\r\nNOT_STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nSTORED\r\n\
             VALUE a 0 2\r\nxz\r\nEND\r\n"
        );
    }

    #[test]
    fn noreply_silences_replies_but_not_errors() {
        let out =
            run(b"set a 0 0 1 noreply\r\n1\r\nincr a 5 noreply\r\nincr a x noreply\r\nbogus noreply\r\nget a\r\n", &[]);
        assert_eq!(out, "CLIENT_ERROR invalid numeric delta argument\r\nERROR\r\nVALUE a 0 1\r\n6\r\nEND\r\n");
    }

    #[test]
    fn a_decremented_number_keeps_its_length_padded_with_spaces() {
        let out = run(b"set n 0 0 3\r\n100\r\ndecr n 95\r\nget n\r\nincr n 1000\r\nget n\r\n", &[]);
        assert_eq!(out, "STORED\r\n5\r\nVALUE n 0 3\r\n5  \r\nEND\r\n1005\r\nVALUE n 0 4\r\n1005\r\nEND\r\n");
    }

    #[test]
    fn a_value_above_the_item_limit_is_refused_and_its_data_skipped() {
        let mut input = format!("set big 0 0 {}\r\n", MAX_VALUE + 1).into_bytes();
        input.extend(std::iter::repeat_n(b'v', MAX_VALUE + 1));
        input.extend_from_slice(b"\r\nget big\r\n");
        assert_eq!(run(&input, &[100, 70_000]), "SERVER_ERROR object too large for cache\r\nEND\r\n");
    }

    #[test]
    fn cas_stores_only_with_the_current_unique() {
        let out = run(b"set c 0 0 1\r\na\r\ngets c\r\n", &[]);
        let unique: u64 =
            out.lines().nth(1).and_then(|l| l.rsplit(' ').next()).and_then(|u| u.parse().ok()).expect("unique");
        // Each run has a fresh table, so its first item gets the same unique again.
        let input = format!(
            "set c 0 0 1\r\na\r\ncas c 0 0 1 {unique}\r\nb\r\ncas c 0 0 1 {unique}\r\nc\r\ncas d 0 0 1 1\r\nd\r\nget c\r\n"
        );
        assert_eq!(
            run(input.as_bytes(), &[]),
            "STORED\r\nSTORED\r\nEXISTS\r\nNOT_FOUND\r\nVALUE c 0 1\r\nb\r\nEND\r\n"
        );
    }

    #[test]
    fn a_multi_get_of_more_keys_than_stack_tokens_answers_every_key() {
        let keys: Vec<String> = (0..MAX_TOKENS + 6).map(|i| format!("key{i}")).collect();
        let mut input = String::new();
        for k in &keys {
            input += &format!("set {k} 0 0 {}\r\n{k}\r\n", k.len());
        }
        input += &format!("get {}\r\n", keys.join(" "));
        let out = run(input.as_bytes(), &[]);
        let mut want = "STORED\r\n".repeat(keys.len());
        for k in &keys {
            want += &format!("VALUE {k} 0 {}\r\n{k}\r\n", k.len());
        }
        want += "END\r\n";
        assert_eq!(out, want);
    }

    #[test]
    fn a_too_long_key_in_a_multi_get_replaces_the_whole_reply_by_an_error() {
        let long = "k".repeat(MAX_KEY + 1);
        let out = run(format!("set a 0 0 1\r\nx\r\nget a {long} a\r\nget a\r\n").as_bytes(), &[]);
        assert_eq!(out, "STORED\r\nCLIENT_ERROR bad command line format\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    }

    #[test]
    fn numbers_parse_exactly_as_str_parse_does() {
        let cases = [
            "0",
            "7",
            "007",
            "999999999",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "99999999999999999999",
            "+5",
            "-1",
            "",
            "1x",
            " 1",
            "9223372036854775807",
            "9223372036854775808",
        ];
        for c in cases {
            assert_eq!(number::<u32>(c.as_bytes()), c.parse::<u32>().ok(), "u32 {c:?}");
            assert_eq!(number::<u64>(c.as_bytes()), c.parse::<u64>().ok(), "u64 {c:?}");
            assert_eq!(number::<i64>(c.as_bytes()), c.parse::<i64>().ok(), "i64 {c:?}");
        }
    }

    #[test]
    fn overwrites_and_deletes_in_crowded_buckets_leave_exactly_the_live_items() {
        // 64 buckets, 400 keys: arrays of about six items, each write copying the others.
        let mut input = String::new();
        for round in 0..3 {
            for i in 0..400 {
                input += &format!("set k{i} {round} 0 2\r\n{:02}\r\n", i % 100);
            }
        }
        for i in (0..400).step_by(2) {
            input += &format!("delete k{i}\r\n");
        }
        input += "get k1 k2 k399\r\nstats cxlkv\r\n";
        let out = run(input.as_bytes(), &[]);
        assert!(out.contains("VALUE k1 2 2\r\n01\r\nVALUE k399 2 2\r\n99\r\nEND\r\n"), "{}", &out[out.len() - 300..]);
        assert!(out.contains("STAT table_live_items 200\r\n"), "{}", &out[out.len() - 300..]);
        assert!(out.contains("STAT table_items 200\r\n"), "{}", &out[out.len() - 300..]);
    }
}
