//! The preload's configuration, read from the environment once, when the library initialises
//! (docs/design.md §17.4). A malformed variable is reported and the process runs without the
//! heap (every allocation then comes from the library's own allocator) rather than failing.

use std::path::PathBuf;

use cxlalloc::{Coherence, Config};

/// Where the heap lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// A private anonymous heap (the default): this process's alone, copied by `fork`.
    Private,
    /// A heap shared by name (`/dev/shm/cxlalloc.NAME`), created if absent.
    Named(String),
    /// A heap directory anywhere (a DAX-mounted device, for instance), created if absent.
    Dir(PathBuf),
}

/// Everything the environment says.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub place: Place,
    pub config: Config,
    /// `CXLALLOC_VERBOSE=1`: a `cxlalloc:` line on stderr at exit.
    pub verbose: bool,
    /// `CXLALLOC_UNLINK=1`: remove a named or directory heap at exit.
    pub unlink: bool,
    /// `CXLALLOC_THRESHOLD`: bytes a process may take from the bootstrap allocator before its
    /// heap opens; 0 opens it at start. Short-lived processes (the commands of a shell
    /// pipeline) then never pay for setting up a heap.
    pub threshold: usize,
}

/// The default [`Settings::threshold`] of a private heap (a shared one opens at start).
pub(crate) const THRESHOLD: usize = 256 << 10;

/// Parses `4096`, `64K`, `512M`, `16G`, `1T` (binary units, optional `B`/`iB`).
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.strip_suffix("iB").or_else(|| s.strip_suffix('B')).unwrap_or(s);
    let (digits, shift) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 10),
        (i, 'm' | 'M') => (&s[..i], 20),
        (i, 'g' | 'G') => (&s[..i], 30),
        (i, 't' | 'T') => (&s[..i], 40),
        _ => (s, 0),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn flag(get: &dyn Fn(&str) -> Option<String>, name: &str) -> bool {
    get(name).is_some_and(|v| !matches!(v.as_str(), "" | "0" | "no" | "false"))
}

/// Reads the settings through `get` (the environment, or a table in tests).
pub(crate) fn read(get: &dyn Fn(&str) -> Option<String>) -> Result<Settings, String> {
    let place = match (get("CXLALLOC_HEAP"), get("CXLALLOC_HEAP_DIR")) {
        (Some(_), Some(_)) => return Err("set CXLALLOC_HEAP or CXLALLOC_HEAP_DIR, not both".into()),
        (Some(name), None) => Place::Named(name),
        (None, Some(dir)) => Place::Dir(PathBuf::from(dir)),
        (None, None) => Place::Private,
    };
    let mut config = Config::default();
    if place == Place::Private {
        // Anonymous memory has no backing store to reserve, and reserving would make each huge
        // block populate all its pages at allocation (one `madvise`, every page resident)
        // where a program may touch few of them.
        config.commit_on_grow = false;
    }
    let size = |var: &str| -> Result<Option<u64>, String> {
        get(var).map(|v| parse_size(&v).ok_or(format!("{var}={v:?} is not a size (like 64M, 16G)"))).transpose()
    };
    if let Some(bytes) = size("CXLALLOC_CAPACITY")? {
        config.small_capacity = bytes;
        config.large_capacity = bytes;
    }
    if let Some(c) = get("CXLALLOC_COHERENCE") {
        config.coherence =
            Coherence::from_name(&c).ok_or(format!("CXLALLOC_COHERENCE={c:?}: expected full, limited or none"))?;
        if config.coherence != Coherence::Full {
            // The huge heap needs full coherence (docs/design.md §7).
            config.huge_capacity = 0;
        }
    }
    if let Some(bytes) = size("CXLALLOC_HUGE")? {
        config.huge_capacity = bytes;
    }
    if let Some(n) = get("CXLALLOC_SLOTS") {
        config.thread_slots = n.parse().map_err(|_| format!("CXLALLOC_SLOTS={n:?} is not a number"))?;
    }
    config.validate().map_err(|e| e.to_string())?;
    let threshold = match size("CXLALLOC_THRESHOLD")? {
        Some(bytes) => usize::try_from(bytes).unwrap_or(usize::MAX),
        None if place == Place::Private => THRESHOLD,
        None => 0,
    };
    Ok(Settings {
        place,
        config,
        verbose: flag(get, "CXLALLOC_VERBOSE"),
        unlink: flag(get, "CXLALLOC_UNLINK"),
        threshold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn sizes_take_binary_unit_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("16G"), Some(16 << 30));
        assert_eq!(parse_size("1t"), Some(1 << 40));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }

    #[test]
    fn no_variables_mean_a_private_heap_with_the_default_configuration() {
        let s = read(&env(&[])).unwrap();
        assert_eq!(s.place, Place::Private);
        assert_eq!(s.config, Config { commit_on_grow: false, ..Config::default() });
        assert!(!s.verbose && !s.unlink);
    }

    #[test]
    fn a_reduced_coherence_model_turns_the_huge_heap_off() {
        let s = read(&env(&[("CXLALLOC_COHERENCE", "limited"), ("CXLALLOC_CAPACITY", "64M")])).unwrap();
        assert_eq!(s.config.coherence, Coherence::Limited);
        assert_eq!(s.config.huge_capacity, 0);
        assert_eq!(s.config.small_capacity, 64 << 20);
    }

    #[test]
    fn malformed_variables_are_errors_that_name_the_variable() {
        for (k, v) in [("CXLALLOC_CAPACITY", "big"), ("CXLALLOC_COHERENCE", "some"), ("CXLALLOC_SLOTS", "x")] {
            let e = read(&env(&[(k, v)])).unwrap_err();
            assert!(e.contains(k), "{e}");
        }
        assert!(read(&env(&[("CXLALLOC_HEAP", "a"), ("CXLALLOC_HEAP_DIR", "/tmp/b")])).is_err());
    }
}
