//! The command-line interface proper (compiled out under `--cfg loom`, see `main.rs`).

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cxlalloc::internal::mcas::{DeviceSpec, Window};
use cxlalloc::internal::{DEVICE_FILE, WINDOW_FILE};
use cxlalloc::Bracket;
use cxlalloc::SlabState;
use cxlalloc::{Coherence, Config, Heap, OpenError};

#[derive(Parser)]
#[command(name = "cxlalloc", version, about = "Manage cxlalloc shared heaps")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a heap.
    Create {
        /// Heap name (in /dev/shm) or directory path.
        heap: String,
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
        /// 1T with coherence full, 0 otherwise (the huge heap needs full coherence).
        #[arg(long, value_parser = parse_bytes)]
        huge_capacity: Option<u64>,
        /// Coherence model of the device: full (hardware-coherent), limited (only the HWcc
        /// regions are coherent; the rest is flushed) or none (HWcc words through mCAS: serve
        /// the heap's window with `cxlalloc-mcasd --heap NAME` before attaching threads).
        #[arg(long, value_parser = parse_coherence, default_value = "full")]
        coherence: Coherence,
        /// With coherence none: put the HWcc words on the hardware mCAS device this TOML file
        /// describes (registers, memory; see the README, "A hardware mCAS device") instead of a window.
        #[arg(long)]
        mcas_device: Option<std::path::PathBuf>,
        /// Create without crash recovery (only to measure what recovery costs).
        #[arg(long)]
        no_recovery: bool,
    },
    /// Print a heap's configuration and a census of its slabs.
    Inspect {
        /// Heap name or directory path.
        heap: String,
    },
    /// Walk all metadata and report inconsistencies (exit status 1 if any).
    Check {
        /// Heap name or directory path.
        heap: String,
    },
    /// Print statistics: bytes by kind, operation counters, per-class occupancy.
    Stats {
        /// Heap name or directory path.
        heap: String,
    },
    /// Adopt and repair every thread slot whose holder process died, then release it
    /// (printing what each recovery did).
    Recover {
        /// Heap name or directory path.
        heap: String,
    },
    /// Remove a heap (processes that have it open keep using it).
    Unlink {
        /// Heap name or directory path.
        heap: String,
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

fn is_path(heap: &str) -> bool {
    heap.contains('/')
}

fn open(heap: &str) -> Result<Heap, OpenError> {
    if is_path(heap) {
        Heap::open_at(Path::new(heap))
    } else {
        Heap::open(heap)
    }
}

/// The heap's coherence model; for no-HWcc, its mCAS window and whether a device serves it.
fn coherence_line(heap: &Heap) -> String {
    let coherence = heap.config().coherence;
    if coherence != Coherence::NoHwcc {
        return coherence.name().to_string();
    }
    let dir = Path::new(&heap.location()).to_path_buf();
    if let Ok(spec) = DeviceSpec::load(&dir.join(DEVICE_FILE)) {
        return format!(
            "none (mCAS device: registers {}, memory {} from {:#x})",
            spec.registers.display(),
            spec.memory.display(),
            spec.memory_offset
        );
    }
    let path = dir.join(WINDOW_FILE);
    let served = match Window::open(&path) {
        Ok(w) => {
            w.served_by().map_or("not served: start cxlalloc-mcasd".to_string(), |pid| format!("served by pid {pid}"))
        }
        Err(e) => format!("unusable: {e}"),
    };
    format!("none (mCAS window {}, {served})", path.display())
}

fn print_stats(heap: &Heap, per_class: bool) {
    let s = heap.stats();
    println!("coherence model:       {}", coherence_line(heap));
    println!("data bytes:            {}", s.data_bytes);
    println!("HWcc metadata bytes:   {} ({} for recovery's help words)", s.hwcc_bytes, s.recovery_hwcc_bytes);
    println!("SWcc metadata bytes:   {}", s.swcc_metadata_bytes);
    println!("leased thread slots:   {}", s.leased_slots);
    println!("counters:              {:?}", s.counters);
    let h = &s.huge;
    println!(
        "huge:                  {}/{} slots claimed, {} live ({} bytes), {} freed awaiting reclaim, {} hazards, {} mapped here",
        h.claimed_slots, h.slots, h.live, h.live_bytes, h.freed, h.hazards, s.huge_mapped_here
    );
    for b in Bracket::ALL {
        let c = &s.brackets[b as usize];
        let states: Vec<String> = SlabState::ALL.iter().map(|&st| format!("{} {}", st.name(), c.slabs(st))).collect();
        println!(
            "{:>5} slabs {}/{}: {}; live blocks {}",
            b.name(),
            c.length,
            c.capacity,
            states.join(", "),
            c.live_blocks()
        );
        if per_class {
            for (i, k) in c.classes.iter().enumerate().filter(|(_, k)| k.slabs > 0) {
                let size = b.class_size(i as u32 + 1).unwrap_or(0);
                println!(
                    "        class {:>3} ({size:>6} B): {} slabs, {} live, {} free, {} freed remotely",
                    i + 1,
                    k.slabs,
                    k.live_blocks(),
                    k.free_blocks,
                    k.remote_freed
                );
            }
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, OpenError> {
    match cli.command {
        Command::Create {
            heap,
            small_capacity,
            large_capacity,
            slots,
            huge_capacity,
            coherence,
            mcas_device,
            no_recovery,
        } => {
            let d = Config::default();
            let config = Config {
                small_capacity: small_capacity.unwrap_or(d.small_capacity),
                large_capacity: large_capacity.unwrap_or(d.large_capacity),
                thread_slots: slots.unwrap_or(d.thread_slots),
                huge_capacity: huge_capacity_for(coherence, huge_capacity),
                coherence,
                recovery: !no_recovery,
                mcas_device: mcas_device.clone(),
                ..d
            };
            let h = if is_path(&heap) {
                Heap::create_at(Path::new(&heap), &config)?
            } else {
                Heap::create(&heap, &config)?
            };
            println!("created {} (coherence {})", h.location(), coherence.name());
            if coherence == Coherence::NoHwcc && mcas_device.is_none() {
                let which = if is_path(&heap) { format!("--heap-dir {heap}") } else { format!("--heap {heap}") };
                println!("serve its mCAS window before attaching threads: cxlalloc-mcasd {which}");
            }
        }
        Command::Inspect { heap } => {
            let h = open(&heap)?;
            println!("location:              {}", h.location());
            println!("configuration:         {:?}", h.config());
            print_stats(&h, false);
        }
        Command::Check { heap } => {
            let report = open(&heap)?.check();
            print!("{report}");
            if !report.is_clean() {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Stats { heap } => print_stats(&open(&heap)?, true),
        Command::Recover { heap } => {
            let h = open(&heap)?;
            let reports = h.recover_dead();
            for r in &reports {
                println!("{r}");
            }
            println!("{} slot(s) recovered; {} still dead", reports.len(), h.dead_slots().len());
        }
        Command::Unlink { heap } => {
            if is_path(&heap) {
                Heap::unlink_at(Path::new(&heap))?
            } else {
                Heap::unlink(&heap)?
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the command line; the exit status says how it went.
pub fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cxlalloc: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_accept_suffixes() {
        assert_eq!(parse_bytes("512"), Ok(512));
        assert_eq!(parse_bytes("4K"), Ok(4096));
        assert_eq!(parse_bytes("16G"), Ok(16 << 30));
        assert!(parse_bytes("x").is_err());
        assert!(parse_bytes("99999999999T").is_err());
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
}
