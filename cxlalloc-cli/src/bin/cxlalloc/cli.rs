//! The command-line interface proper (compiled out under `--cfg loom`, see `main.rs`).
//!
//! Read commands (`list`, `inspect`, `stats`, `check`) never adopt, recover or create; they and
//! `recover` take `--json` for scripts; human output is one fact a line, sizes in binary units.
//! `list` and `inspect` read a heap's files without mapping the heap ([`Heap::info_at`]).
//! `inspect` shows a heap's shape and identity (configuration, regions, slot holders); `stats` shows its use (bytes, slab census by state and class,
//! operation counters, huge heap); `check` its consistency, its dead holders and what `recover`
//! would do for each.
//!
//! Exit status: 0 success (for `check`: consistent, no dead holder); 1 `check` found
//! inconsistencies; 2 a usage error, or the heap could not be opened or read; 3 `check` found
//! the heap consistent but slots held by dead processes (run `recover`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use cxlalloc::{
    Coherence, Config, Heap, HeapInfo, HostInfo, McasInfo, OpenError, RecoverHostError, RecoveryPlan, SlotInfo,
};

use crate::json::Json;
use crate::out::{self, Out};

/// Exit status of `check` on a heap with inconsistencies.
const EXIT_INCONSISTENT: u8 = 1;
/// Exit status of a usage error or a heap that could not be opened or read.
const EXIT_ERROR: u8 = 2;
/// Exit status of `check` on a consistent heap with slots held by dead processes.
const EXIT_DEAD_HOLDERS: u8 = 3;

#[derive(Parser)]
#[command(
    name = "cxlalloc",
    version,
    about = "Manage cxlalloc shared heaps",
    after_help = "Exit status: 0 success; 1 check found inconsistencies; 2 usage error or the heap \
                  could not be opened; 3 check found the heap consistent but slots held by dead \
                  processes (run `cxlalloc recover HEAP`)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Which heap: a name (in /dev/shm), a directory given with `--at`, or a device given with
/// `--device`. A name is never read as a path, so `cxlalloc create ../x` is refused rather than
/// made relative to the current directory.
#[derive(Args)]
struct Target {
    /// Heap name: 1 to 246 characters of [A-Za-z0-9._-], the first not '.' or '-'; the heap
    /// lives in /dev/shm/cxlalloc.NAME.
    #[arg(required_unless_present_any = ["at", "device"], conflicts_with_all = ["at", "device"])]
    name: Option<String>,
    /// The heap in directory DIR (any path) instead of a named heap.
    #[arg(long, value_name = "DIR", conflicts_with = "device")]
    at: Option<PathBuf>,
    /// The heap on device PATH (a DAX device, a PCI BAR's resource file, or a plain file),
    /// formatted with `cxlalloc format PATH`.
    #[arg(long, value_name = "PATH")]
    device: Option<PathBuf>,
}

impl Target {
    fn open(&self) -> Result<Heap, Error> {
        match (&self.device, &self.at, &self.name) {
            (Some(dev), _, _) => Heap::open_device(dev),
            (None, Some(dir), _) => Heap::open_at(dir),
            (None, None, Some(name)) => Heap::open(name),
            // clap requires one of the three.
            (None, None, None) => Err(no_target()),
        }
        .map_err(Error::Open)
    }

    fn info(&self) -> Result<HeapInfo, Error> {
        match (&self.device, &self.at, &self.name) {
            (Some(dev), _, _) => Heap::info_device(dev),
            (None, Some(dir), _) => Heap::info_at(dir),
            (None, None, Some(name)) => Heap::info(name),
            (None, None, None) => Err(no_target()),
        }
        .map_err(Error::Open)
    }
}

/// As the command line names it: `NAME`, `--at DIR` or `--device PATH`.
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.device, &self.at, &self.name) {
            (Some(dev), _, _) => write!(f, "--device {}", dev.display()),
            (None, Some(dir), _) => write!(f, "--at {}", dir.display()),
            (None, None, Some(name)) => write!(f, "{name}"),
            (None, None, None) => Ok(()),
        }
    }
}

fn no_target() -> OpenError {
    OpenError::InvalidName { name: String::new(), reason: "give a heap name, --at DIR or --device PATH".into() }
}

/// The shape of a new heap, for `create` and `format`.
#[derive(Args)]
struct Shape {
    /// Permission bits of the heap's files, in octal: 0600 (the default) for this user
    /// only, 0660 to share with this user's group, 0666 with every local user. The heap
    /// directory gets the matching search bits. (On a device: recorded, not applied; the
    /// device's own permissions decide.)
    #[arg(long, value_parser = parse_mode)]
    mode: Option<u32>,
    /// Bound on small-bracket data (e.g. 16G, 512M).
    #[arg(long, value_parser = parse_bytes)]
    small_capacity: Option<u64>,
    /// Bound on large-bracket data.
    #[arg(long, value_parser = parse_bytes)]
    large_capacity: Option<u64>,
    /// Thread slots (most threads attached at once over all processes).
    #[arg(long)]
    slots: Option<u32>,
    /// Huge address space for blocks above 512 KiB (a multiple of 1G; 0 = none). Default
    /// 1T with coherence full (`format`: what the device has left, up to 1T), 0 otherwise (the
    /// huge heap needs full coherence).
    #[arg(long, value_parser = parse_bytes)]
    huge_capacity: Option<u64>,
    /// Bytes of freed huge blocks' objects each thread slot keeps for reuse (e.g. 2G, the
    /// default; 0 keeps none). Trimmed when the system runs short of memory.
    #[arg(long, value_parser = parse_bytes)]
    huge_cache: Option<u64>,
    /// Coherence model of the device: full (hardware-coherent), limited (only the HWcc
    /// regions are coherent; the rest is flushed) or none (HWcc words through mCAS: serve
    /// the heap's window with `cxlalloc-mcasd` before attaching threads).
    #[arg(long, value_parser = parse_coherence, default_value = "full")]
    coherence: Coherence,
    /// Create without crash recovery (only to measure what recovery costs).
    #[arg(long)]
    no_recovery: bool,
}

impl Shape {
    /// The configuration asked for; unset sizes from `Config::default()`.
    fn config(&self) -> Config {
        let d = Config::default();
        Config {
            small_capacity: self.small_capacity.unwrap_or(d.small_capacity),
            large_capacity: self.large_capacity.unwrap_or(d.large_capacity),
            thread_slots: self.slots.unwrap_or(d.thread_slots),
            huge_capacity: huge_capacity_for(self.coherence, self.huge_capacity),
            huge_cache_bytes: self.huge_cache.unwrap_or(d.huge_cache_bytes),
            coherence: self.coherence,
            recovery: !self.no_recovery,
            mode: self.mode.unwrap_or(d.mode),
            ..d
        }
    }

    /// The configuration for a device of `bytes` bytes: unset bracket capacities are at most a
    /// quarter of the device each, and an unset huge capacity (coherence full) is the whole
    /// GiB the device has left, up to the default.
    fn config_for_device(&self, path: &Path, bytes: u64) -> Result<Config, OpenError> {
        let mut c = self.config();
        // The smallest heap the defaults can make: one slab of each bracket.
        let smallest = Heap::device_bytes(&Config { small_capacity: 1 << 20, large_capacity: 1 << 20, ..c.clone() });
        if self.small_capacity.is_none() && self.large_capacity.is_none() && bytes / 4 < 1 << 20 {
            return Err(OpenError::DeviceTooSmall { path: path.to_path_buf(), needed: smallest?, actual: bytes });
        }
        c.small_capacity = self.small_capacity.unwrap_or(c.small_capacity.min(bytes / 4));
        c.large_capacity = self.large_capacity.unwrap_or(c.large_capacity.min(bytes / 4));
        if self.huge_capacity.is_none() && self.coherence == Coherence::Full {
            let rest = bytes.saturating_sub(Heap::device_bytes(&Config { huge_capacity: 0, ..c.clone() })?);
            c.huge_capacity = (rest >> 30 << 30).min(c.huge_capacity);
        }
        Ok(c)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Create a heap in a directory (use `format` for a device).
    Create {
        #[command(flatten)]
        heap: Target,
        #[command(flatten)]
        shape: Shape,
        /// With coherence none: put the HWcc words on the hardware mCAS device this TOML file
        /// describes (registers, memory; see the README, "A hardware mCAS device") instead of a window.
        #[arg(long)]
        mcas_device: Option<std::path::PathBuf>,
    },
    /// Format a device for a heap: a DAX device (/dev/daxX.Y), a PCI BAR's resource file
    /// (/sys/bus/pci/devices/.../resource2, e.g. a QEMU ivshmem device in a guest), or a plain
    /// file of the device's size. Every host then opens it with `--device PATH`. Whatever the
    /// device held is lost; a device that holds a heap needs --force.
    Format {
        /// The device.
        device: PathBuf,
        #[command(flatten)]
        shape: Shape,
        /// Format a device that holds a heap (no process may have it open).
        #[arg(long)]
        force: bool,
    },
    /// List the heaps in a directory (default: the named heaps in /dev/shm) with size, coherence
    /// model, slot holders (alive or dead) and whether a check is advised. Reads the heaps'
    /// files only: nothing is mapped, adopted or changed.
    List {
        /// Directory to list (every subdirectory is taken as a heap), or a heap device (listed
        /// alone).
        dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a heap's shape and identity: configuration, regions, storage, slot holders (read
    /// from its files, without mapping the heap).
    Inspect {
        #[command(flatten)]
        heap: Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Walk all metadata and report inconsistencies, dead slot holders and what `recover` would
    /// do for each (exit status 1: inconsistent; 3: consistent but dead holders).
    Check {
        #[command(flatten)]
        heap: Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a heap's use: bytes by kind, slab census by state and class, operation counters,
    /// huge heap.
    Stats {
        #[command(flatten)]
        heap: Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Adopt and repair every thread slot whose holder process died, then release it
    /// (printing what each recovery did). Only holders of this host are judged; with `--host`,
    /// declare that (other) host dead and recover everything it held. Then give back the memory
    /// of freed huge blocks that no process maps any more (`Heap::sweep_huge`).
    Recover {
        #[command(flatten)]
        heap: Target,
        /// Declare host ID:DOMAIN dead and recover all of its slots and hazard sets (run it only
        /// once the host is known to be down: fence it first). Hosts are named as `cxlalloc
        /// list` and `inspect` show them: the entry's index and its domain, so that an entry
        /// another host claimed since is refused, never declared.
        #[arg(long, value_name = "ID:DOMAIN", value_parser = parse_host_ref)]
        host: Option<(u16, u64)>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Free host number NUMBER's claim in the mCAS window of a no-HWcc heap device, held by
    /// the kernel KERNEL (as the refusal of a second host with that number names it): only once
    /// that kernel is known to be down (it crashed or rebooted with the heap open; a host whose
    /// last process closes frees its number itself). Needs no host number: run it on any host,
    /// the rebooted one included.
    FreeHostNumber {
        /// The heap device.
        device: PathBuf,
        /// NUMBER:KERNEL, the kernel's fingerprint in hexadecimal (e.g. 2:5c1e0f0a3b2d4e61).
        #[arg(value_name = "NUMBER:KERNEL", value_parser = parse_number_ref)]
        claim: (u32, u64),
    },
    /// Remove a heap (processes that have it open keep using it). A heap on a device is not
    /// removed: format the device again.
    Unlink {
        #[command(flatten)]
        heap: Target,
    },
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, shift) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 10),
        Some((i, 'm' | 'M')) => (&s[..i], 20),
        Some((i, 'g' | 'G')) => (&s[..i], 30),
        Some((i, 't' | 'T')) => (&s[..i], 40),
        _ => (s, 0),
    };
    let n: u64 = digits.parse().map_err(|_| format!("not a byte size: {s:?}"))?;
    n.checked_mul(1 << shift).ok_or_else(|| format!("byte size overflows: {s:?}"))
}

fn parse_coherence(s: &str) -> Result<Coherence, String> {
    Coherence::from_name(s).ok_or_else(|| {
        let names: Vec<_> = Coherence::ALL.iter().map(|c| c.name()).collect();
        format!("unknown coherence model {s:?} (known: {})", names.join(", "))
    })
}

/// `huge_capacity` as given, or the default for `coherence`: the huge heap exists only under
/// full coherence, so the other models default to none (an explicit size is kept, and
/// `Config::validate` refuses it with its reason).
fn huge_capacity_for(coherence: Coherence, given: Option<u64>) -> u64 {
    given.unwrap_or(if coherence == Coherence::Full { Config::default().huge_capacity } else { 0 })
}

/// An octal permission mode (`0660`, `660` or `0o660`); `Config::validate` checks its bits.
fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.trim().trim_start_matches("0o");
    u32::from_str_radix(digits, 8).map_err(|_| format!("not an octal mode: {s:?} (e.g. 0660)"))
}

/// Why a command failed (exit status 2).
#[derive(Debug)]
enum Error {
    /// The heap could not be opened, read or changed.
    Open(OpenError),
    /// A directory to list could not be read.
    List(PathBuf, std::io::Error),
    /// `recover --host` refused.
    RecoverHost(RecoverHostError),
    /// `format` without `--force` found a heap (or a damaged one) on the device.
    HoldsHeap(PathBuf),
    /// Standard output failed (other than a closed pipe, which ends output quietly).
    Output(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Open(e) => write!(f, "{e}"),
            Error::List(dir, e) => write!(f, "cannot list {}: {e}", dir.display()),
            Error::RecoverHost(e) => write!(f, "{e}"),
            Error::HoldsHeap(dev) => {
                write!(f, "{} holds a heap (or a damaged one); to lose it and format anyway: --force", dev.display())
            }
            Error::Output(e) => write!(f, "cannot write output: {e}"),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Output(e)
    }
}

/// `bytes` in the largest binary unit that keeps the number at least 1, with up to one
/// decimal: `512 B`, `4 KiB`, `1.5 GiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = 0;
    while unit + 1 < UNITS.len() && bytes >= 1 << (10 * (unit + 1)) {
        unit += 1;
    }
    if unit == 0 {
        return format!("{bytes} B");
    }
    let tenths = (u128::from(bytes) * 10 + (1 << (10 * unit)) / 2) >> (10 * unit);
    match tenths % 10 {
        0 => format!("{} {}", tenths / 10, UNITS[unit]),
        d => format!("{}.{d} {}", tenths / 10, UNITS[unit]),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// "alive" or "dead", and for a holder on another host, which host and whether it was
/// declared dead.
fn liveness(s: &SlotInfo) -> String {
    match (s.local, s.alive) {
        (true, true) => "alive".to_string(),
        (true, false) => "dead".to_string(),
        (false, true) => format!("host {}: not judged here, alive until that host is declared dead", s.host),
        (false, false) => format!("host {}: declared dead", s.host),
    }
}

/// A host silent this long while holding slots earns a line of advice (never a verdict).
const SILENT_ADVICE_SECS: u64 = 10;

/// How an operator names a host: its entry's index and its domain's fingerprint, `2:00ab…`.
fn host_ref(h: &HostInfo) -> String {
    format!("{}:{:016x}", h.id, h.domain)
}

/// Parses `recover --host`'s `ID:DOMAIN` (as [`host_ref`] prints it).
fn parse_host_ref(s: &str) -> Result<(u16, u64), String> {
    let usage = || format!("{s:?}: name the host as ID:DOMAIN, as `cxlalloc list` shows it (e.g. 2:00a1b2c3d4e5f607)");
    let (id, domain) = s.split_once(':').ok_or_else(usage)?;
    let id = id.parse::<u16>().map_err(|_| usage())?;
    let domain = u64::from_str_radix(domain, 16).map_err(|_| usage())?;
    Ok((id, domain))
}

/// A host number's claim as `cxlalloc free-host-number` takes it: NUMBER:KERNEL, the kernel in
/// hexadecimal (an `0x` prefix allowed).
fn parse_number_ref(s: &str) -> Result<(u32, u64), String> {
    let usage =
        || format!("{s:?}: name the claim as NUMBER:KERNEL, as the refusal names it (e.g. 2:0x5c1e0f0a3b2d4e61)");
    let (number, kernel) = s.split_once(':').ok_or_else(usage)?;
    let number = number.parse::<u32>().map_err(|_| usage())?;
    let kernel = u64::from_str_radix(kernel.trim_start_matches("0x"), 16).map_err(|_| usage())?;
    Ok((number, kernel))
}

/// One line about a host: its name, whether it is this one, its heartbeat.
fn host_line(h: &HostInfo) -> String {
    let name = if h.name.is_empty() { String::new() } else { format!("{} ", h.name) };
    let own = if h.own { ", this host" } else { "" };
    let state = if h.declared_dead { ", declared dead" } else { "" };
    let beat = match h.silent_for {
        Some(s) => format!("last heartbeat {s} s ago"),
        None => "heartbeat ahead of this clock".to_string(),
    };
    format!("{name}({beat}{own}{state})")
}

fn host_json(h: &HostInfo) -> Json {
    Json::object([
        ("id", h.id.into()),
        ("domain", format!("{:016x}", h.domain).into()),
        ("ref", host_ref(h).into()),
        ("name", h.name.clone().into()),
        ("own", h.own.into()),
        ("declared_dead", h.declared_dead.into()),
        ("silent_for_s", h.silent_for.into()),
    ])
}

/// Advice about other hosts that hold slots and have been silent a while (a host may be idle:
/// only the operator can tell it is down).
fn silent_hosts(hosts: &[HostInfo], holders: &[SlotInfo], heap: &str) -> Vec<String> {
    hosts
        .iter()
        .filter(|h| !h.own && !h.declared_dead && h.silent_for.is_some_and(|s| s >= SILENT_ADVICE_SECS))
        .filter_map(|h| {
            let held = holders.iter().filter(|s| s.host == h.id).count();
            (held > 0).then(|| {
                format!(
                    "host {} silent for {} s, holding {held} slot(s): if it is down, fence it and run `cxlalloc recover {heap} --host {}`",
                    h.id,
                    h.silent_for.unwrap_or(0),
                    host_ref(h)
                )
            })
        })
        .collect()
}

fn holder_json(s: &SlotInfo) -> Json {
    let in_flight = s
        .in_flight
        .iter()
        .map(|i| Json::object([("operation", i.operation.clone().into()), ("recovery", i.recovery.clone().into())]))
        .collect();
    Json::object([
        ("slot", s.slot.into()),
        ("pid", s.pid.into()),
        ("host", s.host.into()),
        ("local", s.local.into()),
        ("alive", s.alive.into()),
        ("in_flight", Json::Array(in_flight)),
    ])
}

fn mcas_line(m: &McasInfo) -> String {
    match m {
        McasInfo::Window { path, served_by: Some(pid) } => format!("window {}, served by pid {pid}", path.display()),
        McasInfo::Window { path, served_by: None } => {
            format!("window {}, not served: start cxlalloc-mcasd before attaching threads", path.display())
        }
        McasInfo::WindowUnusable { path, reason } => format!("window {} unusable: {reason}", path.display()),
        McasInfo::Device { registers, memory, memory_offset } => {
            format!("device: registers {}, memory {} from {memory_offset:#x}", registers.display(), memory.display())
        }
    }
}

fn mcas_json(m: &McasInfo) -> Json {
    match m {
        McasInfo::Window { path, served_by } => Json::object([
            ("kind", "window".into()),
            ("path", path.display().to_string().into()),
            ("served_by", (*served_by).into()),
        ]),
        McasInfo::WindowUnusable { path, reason } => Json::object([
            ("kind", "window".into()),
            ("path", path.display().to_string().into()),
            ("error", reason.clone().into()),
        ]),
        McasInfo::Device { registers, memory, memory_offset } => Json::object([
            ("kind", "device".into()),
            ("registers", registers.display().to_string().into()),
            ("memory", memory.display().to_string().into()),
            ("memory_offset", (*memory_offset).into()),
        ]),
    }
}

/// Total data capacity: small + large + huge.
fn capacity(c: &Config) -> u64 {
    c.small_capacity.saturating_add(c.large_capacity).saturating_add(c.huge_capacity)
}

/// Why a check is advised for a heap, if it is.
fn advice(info: &HeapInfo) -> Option<String> {
    match (&info.holders, info.dead_holders()) {
        (Err(e), _) => Some(format!("slot table unreadable ({e})")),
        (Ok(_), 0) => None,
        (Ok(_), 1) => Some("1 slot held by a dead process".to_string()),
        (Ok(_), n) => Some(format!("{n} slots held by dead processes")),
    }
}

/// One entry of `list`: a heap's summary, or why the entry is not a usable heap.
fn list_entry(out: &mut Out, name: &str, path: &Path, json: bool) -> std::io::Result<Json> {
    // A directory's entries are directories; a path that is not one was given as a device.
    let found = if path.is_dir() { Heap::info_at(path) } else { Heap::info_device(path) }.map_err(|e| e.to_string());
    let info = match found {
        Ok(info) => info,
        Err(reason) => {
            if !json {
                out.line(format_args!("{name}"))?;
                out.fact("  path", path.display())?;
                out.fact("  not usable", &reason)?;
            }
            return Ok(Json::object([
                ("name", name.into()),
                ("path", path.display().to_string().into()),
                ("error", reason.into()),
            ]));
        }
    };
    let c = &info.config;
    let advice = advice(&info);
    let holders = info.holders.as_ref().ok();
    if !json {
        out.line(format_args!("{name}"))?;
        out.fact("  path", path.display())?;
        out.fact("  capacity", human(capacity(c)))?;
        out.fact("  memory in use", human(info.stored_bytes))?;
        out.fact("  coherence model", c.coherence.name())?;
        match holders {
            Some(h) => out.fact("  slots leased", format_args!("{} of {}", h.len(), c.thread_slots))?,
            None => out.fact("  slots leased", "unknown")?,
        }
        for s in holders.into_iter().flatten() {
            out.fact(&format!("  slot {}", s.slot), format_args!("pid {} ({})", s.pid, liveness(s)))?;
        }
        for h in info.hosts.iter().flatten() {
            out.fact(&format!("  host {}", host_ref(h)), host_line(h))?;
        }
        for a in silent_hosts(info.hosts.as_deref().unwrap_or(&[]), holders.map_or(&[], |h| h.as_slice()), name) {
            out.fact("  advice", a)?;
        }
        match &advice {
            Some(why) => out.fact("  check advised", format_args!("yes: {why}"))?,
            None => out.fact("  check advised", "no")?,
        }
    }
    Ok(Json::object([
        ("name", name.into()),
        ("path", path.display().to_string().into()),
        ("capacity_bytes", capacity(c).into()),
        ("stored_bytes", info.stored_bytes.into()),
        ("coherence", c.coherence.name().into()),
        ("thread_slots", c.thread_slots.into()),
        ("slots_leased", holders.map(Vec::len).into()),
        ("holders", holders.map_or(Json::Null, |h| Json::Array(h.iter().map(holder_json).collect()))),
        ("hosts", info.hosts.as_ref().map_or(Json::Null, |h| Json::Array(h.iter().map(host_json).collect()))),
        ("check_advised", advice.is_some().into()),
        ("advice", advice.into()),
    ]))
}

fn list(out: &mut Out, dir: Option<PathBuf>, json: bool) -> Result<(), Error> {
    let (dir, entries) = match dir {
        None => {
            let dir = Heap::named_dir();
            let entries = Heap::named_heaps().map_err(|e| Error::List(dir.clone(), e))?;
            (dir, entries)
        }
        Some(dev) if !dev.is_dir() => {
            let name = dev.file_name().map_or_else(|| dev.display().to_string(), |n| n.to_string_lossy().into_owned());
            (dev.clone(), vec![(name, dev)])
        }
        Some(dir) => {
            let mut entries: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
                .map_err(|e| Error::List(dir.clone(), e))?
                .flatten()
                .filter(|e| e.path().is_dir())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    (!name.starts_with('.')).then(|| (name, e.path()))
                })
                .collect();
            entries.sort();
            (dir, entries)
        }
    };
    if !json && entries.is_empty() {
        out.line(format_args!("no heaps in {}", dir.display()))?;
    }
    let mut heaps = Vec::new();
    for (i, (name, path)) in entries.iter().enumerate() {
        if i > 0 && !json {
            out.line(format_args!(""))?;
        }
        heaps.push(list_entry(out, name, path, json)?);
    }
    if json {
        let doc = Json::object([("directory", dir.display().to_string().into()), ("heaps", Json::Array(heaps))]);
        out.line(format_args!("{doc}"))?;
    }
    Ok(())
}

fn inspect(out: &mut Out, heap: &Target, json: bool) -> Result<(), Error> {
    let info = heap.info()?;
    let c = &info.config;
    let holders = info.holders.as_ref().ok();
    if json {
        let regions = info
            .regions
            .iter()
            .map(|r| Json::object([("name", r.name.into()), ("bytes", r.bytes.into()), ("hwcc", r.hwcc.into())]))
            .collect();
        let doc = Json::object([
            ("path", info.path.display().to_string().into()),
            ("layout_version", info.layout_version.into()),
            ("coherence", c.coherence.name().into()),
            ("mcas", info.mcas.as_ref().map_or(Json::Null, mcas_json)),
            ("recovery", c.recovery.into()),
            ("commit_on_grow", c.commit_on_grow.into()),
            ("return_pages", c.return_pages.into()),
            ("small_capacity_bytes", c.small_capacity.into()),
            ("large_capacity_bytes", c.large_capacity.into()),
            ("huge_capacity_bytes", c.huge_capacity.into()),
            ("huge_cache_bytes", c.huge_cache_bytes.into()),
            ("thread_slots", c.thread_slots.into()),
            ("small_batch_slabs", c.small_batch.into()),
            ("large_batch_slabs", c.large_batch.into()),
            ("cached_empty_slabs", c.cache_local.into()),
            ("reserved_bytes", info.reserved_bytes.into()),
            ("stored_bytes", info.stored_bytes.into()),
            ("regions", Json::Array(regions)),
            ("holders", holders.map_or(Json::Null, |h| Json::Array(h.iter().map(holder_json).collect()))),
            ("holders_error", info.holders.as_ref().err().cloned().into()),
            ("hosts", info.hosts.as_ref().map_or(Json::Null, |h| Json::Array(h.iter().map(host_json).collect()))),
        ]);
        return Ok(out.line(format_args!("{doc}"))?);
    }
    out.fact("path", info.path.display())?;
    out.fact("layout version", info.layout_version)?;
    out.fact("coherence model", c.coherence.name())?;
    if let Some(m) = &info.mcas {
        out.fact("mCAS", mcas_line(m))?;
    }
    out.fact("crash recovery", if c.recovery { "on" } else { "off" })?;
    out.fact("commit on grow", yes_no(c.commit_on_grow))?;
    out.fact("return pages of empty slabs", yes_no(c.return_pages))?;
    out.fact("small capacity", human(c.small_capacity))?;
    out.fact("large capacity", human(c.large_capacity))?;
    out.fact("huge capacity", if c.huge_capacity == 0 { "none".to_string() } else { human(c.huge_capacity) })?;
    out.fact("huge cache per thread slot", human(c.huge_cache_bytes))?;
    out.fact("small growth batch", format_args!("{} slabs", c.small_batch))?;
    out.fact("large growth batch", format_args!("{} slabs", c.large_batch))?;
    out.fact("empty slabs per thread", c.cache_local)?;
    out.fact("address space reserved", human(info.reserved_bytes))?;
    out.fact("memory in use", human(info.stored_bytes))?;
    for r in &info.regions {
        let kind = if r.hwcc { "HWcc" } else { "SWcc" };
        out.fact(&format!("region {}", r.name), format_args!("{} ({kind})", human(r.bytes)))?;
    }
    out.fact("thread slots", c.thread_slots)?;
    match &info.holders {
        Ok(h) => {
            out.fact("slots leased", h.len())?;
            for s in h {
                out.fact(&format!("slot {}", s.slot), format_args!("pid {} ({})", s.pid, liveness(s)))?;
                for i in &s.in_flight {
                    out.fact(&format!("slot {} in flight", s.slot), &i.operation)?;
                }
            }
        }
        Err(e) => out.fact("slots leased", format_args!("unknown: {e}"))?,
    }
    match &info.hosts {
        Ok(hosts) => {
            for h in hosts {
                out.fact(&format!("host {}", host_ref(h)), host_line(h))?;
            }
            for a in silent_hosts(hosts, info.holders.as_deref().unwrap_or(&[]), &heap.to_string()) {
                out.fact("advice", a)?;
            }
        }
        Err(e) => out.fact("hosts", format_args!("unknown: {e}"))?,
    }
    if info.dead_holders() > 0 {
        out.fact("advice", format_args!("dead holders: run `cxlalloc check {heap}`, then `cxlalloc recover {heap}`"))?;
    }
    Ok(())
}

fn stats(out: &mut Out, heap: &Target, json: bool) -> Result<(), Error> {
    let s = heap.open()?.stats();
    let counters = [
        ("remote frees", "remote_frees", s.counters.remote_frees),
        ("blocks harvested from mailboxes", "harvested", s.counters.harvested),
        ("slabs bumped", "slabs_bumped", s.counters.slabs_bumped),
        ("global list pops", "global_pops", s.counters.global_pops),
        ("global list pushes", "global_pushes", s.counters.global_pushes),
        ("claims", "claims", s.counters.claims),
        ("detaches", "detaches", s.counters.detaches),
        ("disowns", "disowns", s.counters.disowns),
    ];
    let h = &s.huge;
    if json {
        let brackets = s
            .brackets
            .iter()
            .map(|b| {
                let classes = b
                    .classes
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| k.slabs > 0)
                    .map(|(i, k)| {
                        Json::object([
                            ("class", (i + 1).into()),
                            ("block_bytes", k.block_bytes.into()),
                            ("slabs", k.slabs.into()),
                            ("live_blocks", k.live_blocks().into()),
                            ("free_blocks", k.free_blocks.into()),
                            ("remote_freed_blocks", k.remote_freed.into()),
                        ])
                    })
                    .collect();
                Json::object([
                    ("name", b.name.into()),
                    ("slab_bytes", b.slab_bytes.into()),
                    ("length_slabs", b.length.into()),
                    ("capacity_slabs", b.capacity.into()),
                    ("slabs_by_state", Json::Object(b.states().map(|(n, v)| (n, v.into())).collect())),
                    ("live_blocks", b.live_blocks().into()),
                    ("classes", Json::Array(classes)),
                ])
            })
            .collect();
        let doc = Json::object([
            ("data_bytes", s.data_bytes.into()),
            ("hwcc_metadata_bytes", s.hwcc_bytes.into()),
            ("recovery_hwcc_bytes", s.recovery_hwcc_bytes.into()),
            ("swcc_metadata_bytes", s.swcc_metadata_bytes.into()),
            ("brackets", Json::Array(brackets)),
            ("counters", Json::Object(counters.iter().map(|&(_, k, v)| (k, v.into())).collect())),
            (
                "huge",
                Json::object([
                    ("slots", h.slots.into()),
                    ("claimed_slots", h.claimed_slots.into()),
                    ("live_blocks", h.live.into()),
                    ("live_bytes", h.live_bytes.into()),
                    ("freed_awaiting_reclaim", h.freed.into()),
                    ("freed_objects_released", h.released.into()),
                    ("cached_blocks", h.cached.into()),
                    ("cached_bytes", h.cached_bytes.into()),
                    ("descriptors", h.descriptors.into()),
                    ("hazards", h.hazards.into()),
                    ("mapped_here", s.huge_mapped_here.into()),
                ]),
            ),
        ]);
        return Ok(out.line(format_args!("{doc}"))?);
    }
    out.fact("data in slabs", human(s.data_bytes))?;
    out.fact("HWcc metadata", format_args!("{} ({} for recovery)", human(s.hwcc_bytes), human(s.recovery_hwcc_bytes)))?;
    out.fact("SWcc metadata", human(s.swcc_metadata_bytes))?;
    for b in &s.brackets {
        let n = b.name;
        out.fact(&format!("{n} slabs"), format_args!("{} of {} ({} each)", b.length, b.capacity, human(b.slab_bytes)))?;
        for (state, count) in b.states() {
            out.fact(&format!("{n} slabs {state}"), count)?;
        }
        out.fact(&format!("{n} live blocks"), b.live_blocks())?;
        for (i, k) in b.classes.iter().enumerate().filter(|(_, k)| k.slabs > 0) {
            out.fact(
                &format!("{n} class {}", i + 1),
                format_args!(
                    "{} blocks: {} slabs, {} live, {} free, {} freed remotely",
                    human(k.block_bytes.into()),
                    k.slabs,
                    k.live_blocks(),
                    k.free_blocks,
                    k.remote_freed
                ),
            )?;
        }
    }
    if h.slots > 0 {
        out.fact("huge slots claimed", format_args!("{} of {}", h.claimed_slots, h.slots))?;
        out.fact("huge live blocks", format_args!("{} ({})", h.live, human(h.live_bytes)))?;
        out.fact("huge freed, unreclaimed", format_args!("{} ({} objects released)", h.freed, h.released))?;
        out.fact("huge cached objects", format_args!("{} ({})", h.cached, human(h.cached_bytes)))?;
        out.fact("huge descriptors (small blocks)", h.descriptors)?;
        out.fact("huge hazards", h.hazards)?;
        out.fact("huge mapped here", s.huge_mapped_here)?;
    }
    for (label, _, v) in counters {
        out.fact(label, v)?;
    }
    Ok(())
}

fn plan_json(p: &RecoveryPlan) -> Json {
    Json::object([
        ("slot", p.slot.into()),
        ("pid", p.pid.into()),
        ("steps", p.steps.clone().into()),
        ("blocked", p.blocked.clone().into()),
    ])
}

fn check(out: &mut Out, heap: &Target, json: bool) -> Result<ExitCode, Error> {
    let h = heap.open()?;
    let report = h.check();
    let slots = h.slots();
    let plans = h.recovery_plan();
    let hosts = h.hosts();
    let silent = silent_hosts(&hosts, &slots, &heap.to_string());
    let mut problems: Vec<String> = report.huge_problems.iter().map(|p| format!("huge: {p}")).collect();
    problems.extend(report.problems.iter().map(|p| match p.slab {
        Some(s) => format!("{} slab {s}: {}", p.bracket.name(), p.what),
        None => format!("{}: {}", p.bracket.name(), p.what),
    }));
    let code = if !report.is_clean() {
        EXIT_INCONSISTENT
    } else if !plans.is_empty() {
        EXIT_DEAD_HOLDERS
    } else {
        0
    };
    let verdict = match code {
        EXIT_INCONSISTENT => "inconsistent",
        EXIT_DEAD_HOLDERS => "consistent, dead holders await recovery",
        _ => "consistent",
    };
    if json {
        let doc = Json::object([
            ("consistent", report.is_clean().into()),
            ("verdict", verdict.into()),
            ("problems", problems.into()),
            ("slabs", Json::Object(report.brackets.iter().map(|b| (b.name, b.length.into())).collect())),
            ("huge_blocks", report.huge.live.into()),
            ("live_blocks", report.live_blocks().into()),
            ("holders", Json::Array(slots.iter().map(holder_json).collect())),
            ("dead_holders", Json::Array(plans.iter().map(plan_json).collect())),
            ("hosts", Json::Array(hosts.iter().map(host_json).collect())),
            ("advice", silent.into()),
        ]);
        out.line(format_args!("{doc}"))?;
        return Ok(ExitCode::from(code));
    }
    for b in &report.brackets {
        // The walk stops at the capacity when a corrupt length word exceeds it.
        out.fact(&format!("{} slabs checked", b.name), b.length.min(b.capacity))?;
    }
    if report.huge.slots > 0 {
        out.fact("huge blocks checked", report.huge.live + report.huge.freed)?;
    }
    out.fact("live blocks", report.live_blocks())?;
    out.fact("slots leased", format_args!("{} ({} held by dead processes)", slots.len(), plans.len()))?;
    for s in &slots {
        out.fact(&format!("slot {}", s.slot), format_args!("pid {} ({})", s.pid, liveness(s)))?;
        if s.alive {
            for i in &s.in_flight {
                out.fact(&format!("slot {} in flight", s.slot), &i.operation)?;
            }
        }
    }
    for p in &plans {
        out.fact(&format!("dead holder, slot {}", p.slot), format_args!("pid {}", p.pid))?;
        match &p.blocked {
            Some(why) => out.fact("  recover cannot", why)?,
            None => {
                for step in &p.steps {
                    out.fact("  recover would", step)?;
                }
            }
        }
    }
    for host in &hosts {
        out.fact(&format!("host {}", host_ref(host)), host_line(host))?;
    }
    for a in &silent {
        out.fact("advice", a)?;
    }
    out.fact("inconsistencies", problems.len())?;
    for p in &problems {
        out.fact("  problem", p)?;
    }
    out.fact("result", verdict)?;
    if code == EXIT_DEAD_HOLDERS && plans.iter().all(|p| p.blocked.is_none()) {
        out.fact("advice", format_args!("run `cxlalloc recover {heap}`"))?;
    }
    Ok(ExitCode::from(code))
}

fn use_format(dev: &Path) -> OpenError {
    OpenError::NotADevice {
        path: dev.to_path_buf(),
        what: "a heap is made on a device with `cxlalloc format PATH`".into(),
    }
}

/// `cxlalloc format DEVICE`: refuses a device that holds a heap unless `force`.
fn format(out: &mut Out, device: &Path, shape: &Shape, force: bool) -> Result<(), Error> {
    if !force {
        match Heap::info_device(device) {
            Err(OpenError::NotFormatted(_)) => {}
            Ok(_) => return Err(Error::HoldsHeap(device.to_path_buf())),
            // A damaged or foreign header is still something a user may want kept.
            Err(e @ (OpenError::NotFound(_) | OpenError::PermissionDenied { .. } | OpenError::NotADevice { .. })) => {
                return Err(Error::Open(e))
            }
            Err(_) => return Err(Error::HoldsHeap(device.to_path_buf())),
        }
    }
    let bytes = Heap::device_capacity(device).map_err(Error::Open)?;
    let config = shape.config_for_device(device, bytes).map_err(Error::Open)?;
    let h = Heap::format_device(device, &config).map_err(Error::Open)?;
    let used = Heap::device_bytes(&config).map_err(Error::Open)?;
    out.line(format_args!(
        "formatted {}: {} of {} (coherence {}, small {}, large {}, huge {}, {} slots)",
        h.location(),
        human(used),
        human(bytes),
        config.coherence.name(),
        human(config.small_capacity),
        human(config.large_capacity),
        human(config.huge_capacity),
        config.thread_slots
    ))?;
    if config.coherence == Coherence::NoHwcc {
        out.line(format_args!(
            "serve its mCAS window before attaching threads: cxlalloc-mcasd --device {}",
            device.display()
        ))?;
    }
    Ok(())
}

fn recover(out: &mut Out, heap: &Target, host: Option<(u16, u64)>, json: bool) -> Result<(), Error> {
    let h = heap.open()?;
    let (reports, of_host) = match host {
        None => (h.recover_dead(), None),
        Some((id, domain)) => {
            let r = h.recover_host(id, domain).map_err(Error::RecoverHost)?;
            (r.reports.clone(), Some(r))
        }
    };
    let still_dead = h.dead_slots().len();
    // Freed huge blocks nobody maps any more but nobody reclaimed (their owners idle or
    // gone) give their memory back too.
    let released = h.sweep_huge();
    if json {
        let recovered = reports
            .iter()
            .map(|r| {
                Json::object([
                    ("slot", r.slot.into()),
                    ("dead_pid", r.dead_holder.map(|d| d.pid).into()),
                    ("steps", r.steps().into()),
                    ("micros", (r.duration.as_micros() as u64).into()),
                ])
            })
            .collect();
        let mut fields = vec![
            ("recovered", Json::Array(recovered)),
            ("still_dead", still_dead.into()),
            ("huge_objects_released", released.into()),
        ];
        if let Some(r) = &of_host {
            fields.push(("hosts_declared_dead", r.declared.clone().into()));
            fields.push(("hazard_sets_cleared", r.hazard_sets_cleared.into()));
            fields.push(("host_slots_remaining", r.remaining.clone().into()));
            fields.push(("hosts_released", r.released.clone().into()));
        }
        let doc = Json::object(fields);
        return Ok(out.line(format_args!("{doc}"))?);
    }
    if let Some(r) = &of_host {
        out.fact("hosts declared dead", format_args!("{:?}", r.declared))?;
    }
    for r in &reports {
        out.fact(&format!("slot {}", r.slot), format_args!("recovered in {:.1?}", r.duration))?;
        for step in r.steps() {
            out.fact("  recovery", step)?;
        }
    }
    out.fact("slots recovered", reports.len())?;
    out.fact("slots still dead", still_dead)?;
    out.fact("huge objects released", released)?;
    if let Some(r) = &of_host {
        out.fact("hazard sets cleared", r.hazard_sets_cleared)?;
        if !r.remaining.is_empty() {
            out.fact("host slots still held", format_args!("{:?} (run it again)", r.remaining))?;
        }
        out.fact("host entries freed", format_args!("{:?}", r.released))?;
    }
    Ok(())
}

fn run(cli: Cli, out: &mut Out) -> Result<ExitCode, Error> {
    match cli.command {
        Command::Create { heap, shape, mcas_device } => {
            let coherence = shape.coherence;
            let config = Config { mcas_device: mcas_device.clone(), ..shape.config() };
            let (h, which) = match (&heap.device, &heap.at, &heap.name) {
                (Some(dev), _, _) => return Err(Error::Open(use_format(dev))),
                (None, Some(dir), _) => {
                    (Heap::create_at(dir, &config).map_err(Error::Open)?, format!("--heap-dir {}", dir.display()))
                }
                (None, None, Some(name)) => {
                    (Heap::create(name, &config).map_err(Error::Open)?, format!("--heap {name}"))
                }
                (None, None, None) => return Err(Error::Open(no_target())),
            };
            out.line(format_args!(
                "created {} (coherence {}, mode {:#o})",
                h.location(),
                coherence.name(),
                config.mode
            ))?;
            if coherence == Coherence::NoHwcc && mcas_device.is_none() {
                out.line(format_args!("serve its mCAS window before attaching threads: cxlalloc-mcasd {which}"))?;
            }
        }
        Command::Format { device, shape, force } => format(out, &device, &shape, force)?,
        Command::List { dir, json } => list(out, dir, json)?,
        Command::Inspect { heap, json } => inspect(out, &heap, json)?,
        Command::Check { heap, json } => return check(out, &heap, json),
        Command::Stats { heap, json } => stats(out, &heap, json)?,
        Command::Recover { heap, host, json } => recover(out, &heap, host, json)?,
        Command::FreeHostNumber { device, claim: (number, kernel) } => {
            if Heap::free_host_number(&device, number, kernel).map_err(Error::Open)? {
                out.line(format_args!("freed host number {number} (kernel {kernel:#018x})"))?;
            } else {
                out.line(format_args!("host number {number} was free"))?;
            }
        }
        Command::Unlink { heap } => match (&heap.device, &heap.at, &heap.name) {
            (Some(dev), _, _) => {
                return Err(Error::Open(OpenError::NotADevice {
                    path: dev.clone(),
                    what: "a heap on a device is not unlinked: format the device again (`cxlalloc format --force`)"
                        .into(),
                }))
            }
            (None, Some(dir), _) => Heap::unlink_at(dir).map_err(Error::Open)?,
            (None, None, Some(name)) => Heap::unlink(name).map_err(Error::Open)?,
            (None, None, None) => return Err(Error::Open(no_target())),
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the command line; the exit status says how it went (see the module docs).
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout, usage errors to stderr; a closed pipe is ignored.
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(EXIT_ERROR) } else { ExitCode::SUCCESS };
        }
    };
    let mut out = Out::stdout();
    let result = run(cli, &mut out);
    let flushed = out.flush();
    match result.and_then(|code| flushed.map(|()| code).map_err(Error::Output)) {
        Ok(code) => code,
        Err(e) => {
            out::error(format_args!("cxlalloc: {e}"));
            ExitCode::from(EXIT_ERROR)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(id: u16, own: bool, declared_dead: bool, silent_for: Option<u64>) -> HostInfo {
        HostInfo { id, domain: 0xab00 + u64::from(id), name: format!("h{id}"), own, declared_dead, silent_for }
    }

    fn held_by(slot: u32, host: u16) -> SlotInfo {
        SlotInfo { slot, pid: 7, host, local: false, alive: true, in_flight: Vec::new() }
    }

    #[test]
    fn a_host_number_claim_is_named_as_number_colon_kernel_in_hex() {
        assert_eq!(parse_number_ref("2:0x5c1e"), Ok((2, 0x5c1e)));
        assert_eq!(parse_number_ref("0:ff"), Ok((0, 0xff)));
        for bad in ["2", "x:ff", "2:zz", ""] {
            assert!(parse_number_ref(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_silent_foreign_host_holding_slots_gets_advice_and_nothing_else_does() {
        let hosts = [
            host(0, true, false, Some(99)),  // this host: never advised about
            host(1, false, false, Some(14)), // silent and holding: advised
            host(2, false, false, Some(3)),  // recently heard from
            host(3, false, true, Some(99)),  // already declared dead
            host(4, false, false, Some(99)), // silent but holding nothing
            host(5, false, false, None),     // heartbeat ahead of this clock
        ];
        let holders = [held_by(0, 0), held_by(1, 1), held_by(2, 1), held_by(3, 2), held_by(4, 3), held_by(5, 5)];
        let advice = silent_hosts(&hosts, &holders, "pod");
        assert_eq!(advice.len(), 1, "{advice:?}");
        assert!(advice[0].starts_with("host 1 silent for 14 s, holding 2 slot(s)"), "{advice:?}");
        assert!(advice[0].contains("cxlalloc recover pod --host 1:000000000000ab01`"), "{advice:?}");
    }

    #[test]
    fn a_host_is_named_by_its_index_and_domain() {
        let h = host(2, false, false, None);
        assert_eq!(parse_host_ref(&host_ref(&h)), Ok((2, h.domain)));
        for bare in ["2", "2:", ":ab", "2:xyz", "70000:ab"] {
            assert!(parse_host_ref(bare).is_err(), "{bare:?} accepted");
        }
    }

    #[test]
    fn byte_sizes_accept_suffixes() {
        assert_eq!(parse_bytes("512"), Ok(512));
        assert_eq!(parse_bytes("4K"), Ok(4096));
        assert_eq!(parse_bytes("16G"), Ok(16 << 30));
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }

    #[test]
    fn modes_are_octal() {
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert_eq!(parse_mode("600"), Ok(0o600));
        assert_eq!(parse_mode("0o666"), Ok(0o666));
        assert!(parse_mode("0880").is_err());
        assert!(parse_mode("rw").is_err());
    }

    #[test]
    fn a_name_with_a_slash_is_not_taken_as_a_path() {
        let cli = Cli::try_parse_from(["cxlalloc", "create", "../evil"]);
        let Ok(Cli { command: Command::Create { heap, .. } }) = cli else { panic!("create ../evil did not parse") };
        assert!(heap.at.is_none());
        assert!(matches!(
            Heap::create(heap.name.as_deref().unwrap_or_default(), &Config::default()),
            Err(OpenError::InvalidName { .. })
        ));
    }

    #[test]
    fn a_name_and_a_directory_are_exclusive() {
        assert!(Cli::try_parse_from(["cxlalloc", "inspect", "h", "--at", "/tmp/h"]).is_err());
        assert!(Cli::try_parse_from(["cxlalloc", "inspect"]).is_err());
        assert!(Cli::try_parse_from(["cxlalloc", "inspect", "--at", "/tmp/h"]).is_ok());
    }

    #[test]
    fn coherence_models_are_parsed_by_name() {
        for c in Coherence::ALL {
            assert_eq!(parse_coherence(c.name()), Ok(c));
        }
        assert!(parse_coherence("partial").unwrap_err().contains("full, limited, none"));
    }

    #[test]
    fn reduced_coherence_defaults_to_no_huge_heap_but_keeps_an_explicit_size() {
        assert_eq!(huge_capacity_for(Coherence::Full, None), Config::default().huge_capacity);
        assert_eq!(huge_capacity_for(Coherence::Limited, None), 0);
        assert_eq!(huge_capacity_for(Coherence::NoHwcc, None), 0);
        assert_eq!(huge_capacity_for(Coherence::NoHwcc, Some(1 << 30)), 1 << 30);
    }

    #[test]
    fn sizes_are_shown_in_binary_units_with_one_decimal() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(4096), "4 KiB");
        assert_eq!(human(1536 << 20), "1.5 GiB");
        assert_eq!(human(16 << 30), "16 GiB");
        assert_eq!(human(1 << 40), "1 TiB");
    }
}
