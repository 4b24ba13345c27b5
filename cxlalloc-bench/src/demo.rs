//! The multi-process demo's parameters, its workload-file section, and the stamp written into
//! every block so a consumer in another process can verify all of its bytes.

use serde::{Deserialize, Serialize};

use crate::Error;

/// The demo's parameters: the `[demo]` table of a workload file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Worker processes (at least 2: every block is freed by a process other than its
    /// allocator's).
    pub processes: usize,
    /// Threads per worker process, each with its own thread slot.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// Blocks each worker process allocates (split over its threads).
    pub blocks: u64,
    /// Seed of the size choices.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_threads() -> usize {
    2
}

fn default_seed() -> u64 {
    1
}

impl Default for Params {
    fn default() -> Self {
        Self { processes: 3, threads: default_threads(), blocks: 20_000, seed: default_seed() }
    }
}

impl Params {
    /// Rejects parameters the demo cannot run.
    pub fn validate(&self) -> Result<(), Error> {
        if self.processes < 2 {
            return Err(format!("demo needs at least 2 processes, got {}", self.processes).into());
        }
        if self.threads == 0 {
            return Err("demo needs at least 1 thread per process".into());
        }
        // Each thread needs a slot; the parent holds one more while it sets up.
        if self.processes * self.threads >= 1024 {
            return Err(
                format!("{} threads in all is too many for the demo heap", self.processes * self.threads).into()
            );
        }
        Ok(())
    }

    /// Threads over all workers (= rings on the board).
    pub fn total_threads(&self) -> usize {
        self.processes * self.threads
    }

    /// Blocks thread `thread` of a worker allocates (the remainder goes to thread 0).
    pub fn blocks_of_thread(&self, thread: usize) -> u64 {
        let t = self.threads as u64;
        self.blocks / t + if thread == 0 { self.blocks % t } else { 0 }
    }

    /// The ring global thread `g` pushes to: the same thread index in the next process, so every
    /// pushed block is freed by another process.
    pub fn consumer_of(&self, g: usize) -> usize {
        (g + self.threads) % self.total_threads()
    }

    /// The global thread that pushes to ring `r` (inverse of [`Params::consumer_of`]).
    pub fn producer_of(&self, r: usize) -> usize {
        (r + self.total_threads() - self.threads) % self.total_threads()
    }
}

/// A workload file as far as the demo reads it: the `[demo]` table. Other tables (for the later
/// harness) are ignored.
#[derive(Debug, Deserialize)]
struct Workload {
    demo: Params,
}

/// Parses the `[demo]` table of workload file text.
pub fn parse_workload(text: &str) -> Result<Params, Error> {
    let w: Workload = toml::from_str(text)?;
    w.demo.validate()?;
    Ok(w.demo)
}

/// xorshift64*: a small deterministic generator for size choices (not for anything secret).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed` and `stream` (never the all-zero state).
    pub fn new(seed: u64, stream: u64) -> Self {
        Self((seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)).max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi` (slightly biased; fine for sizes).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.next_u64() % n == 0
    }
}

/// Smallest block the demo allocates: room for the stamp header.
pub const MIN_BLOCK: usize = STAMP_HEADER;

/// Largest block: the library's biggest supported size.
pub const MAX_BLOCK: usize = 512 << 10;

/// An assorted size: 80 % in 16 B ..= 1 KiB, 18 % up to 64 KiB, 2 % up to 512 KiB.
pub fn pick_size(rng: &mut Rng) -> usize {
    match rng.next_u64() % 100 {
        0..80 => rng.range(MIN_BLOCK, 1024),
        80..98 => rng.range(1025, 64 << 10),
        _ => rng.range((64 << 10) + 1, MAX_BLOCK),
    }
}

/// Bytes of the stamp header: producer (u32), sequence (u32), size (u64).
pub const STAMP_HEADER: usize = 16;

/// What a block's header says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Global thread id of the allocating thread.
    pub producer: u32,
    /// The producer's allocation sequence number.
    pub seq: u32,
    /// Requested size of the block.
    pub size: u64,
}

impl Stamp {
    fn fill_byte(&self) -> u8 {
        (self.producer.wrapping_mul(131) ^ self.seq.wrapping_mul(0x9e37_79b9)) as u8 | 1
    }

    /// Writes the header and the body pattern into `block` (its length is the stamp's size).
    pub fn write(&self, block: &mut [u8]) {
        block[0..4].copy_from_slice(&self.producer.to_le_bytes());
        block[4..8].copy_from_slice(&self.seq.to_le_bytes());
        block[8..16].copy_from_slice(&self.size.to_le_bytes());
        let base = self.fill_byte();
        for (j, b) in block[STAMP_HEADER..].iter_mut().enumerate() {
            *b = base.wrapping_add(j as u8);
        }
    }

    /// Reads the header of a block of at least [`STAMP_HEADER`] bytes.
    pub fn read(header: &[u8; STAMP_HEADER]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let mut size = [0u8; 8];
        size.copy_from_slice(&header[8..16]);
        Self { producer: u32_at(0), seq: u32_at(4), size: u64::from_le_bytes(size) }
    }

    /// Checks the body of `block` (header included, length = the stamp's size); returns the
    /// index of the first wrong byte.
    pub fn verify(&self, block: &[u8]) -> Result<(), usize> {
        let base = self.fill_byte();
        match block[STAMP_HEADER..].iter().enumerate().position(|(j, &b)| b != base.wrapping_add(j as u8)) {
            Some(j) => Err(STAMP_HEADER + j),
            None => Ok(()),
        }
    }
}

/// What one worker process did: one line of its output, parsed by the parent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSummary {
    /// Worker index.
    pub index: usize,
    /// Process id.
    pub pid: u32,
    /// Blocks allocated.
    pub allocs: u64,
    /// Blocks freed (local + remote).
    pub frees: u64,
    /// Blocks freed by the thread that allocated them.
    pub local_frees: u64,
    /// Blocks freed here that another process allocated.
    pub remote_frees: u64,
    /// Blocks pushed to another process.
    pub sent: u64,
    /// Bytes checked against their stamp before being freed.
    pub bytes_verified: u64,
    /// Wall-clock milliseconds from opening the heap to the last thread's detach.
    pub millis: u64,
}

impl WorkerSummary {
    /// Adds another thread's (or worker's) counts.
    pub fn add(&mut self, o: &WorkerSummary) {
        self.allocs += o.allocs;
        self.frees += o.frees;
        self.local_frees += o.local_frees;
        self.remote_frees += o.remote_frees;
        self.sent += o.sent;
        self.bytes_verified += o.bytes_verified;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_table_of_a_workload_parses_and_other_tables_are_ignored() {
        let p = parse_workload("[demo]\nprocesses = 3\nblocks = 20000\n\n[harness]\nfoo = 1\n").unwrap();
        assert_eq!(p, Params { processes: 3, threads: 2, blocks: 20000, seed: 1 });
    }

    #[test]
    fn a_misspelt_or_invalid_demo_key_is_an_error() {
        assert!(parse_workload("[demo]\nprocesses = 3\nblokcs = 1\n").is_err());
        assert!(parse_workload("[demo]\nprocesses = 1\nblocks = 10\n").is_err());
        assert!(parse_workload("processes = 3\n").is_err(), "missing [demo] table accepted");
    }

    #[test]
    fn every_ring_has_exactly_one_producer_in_another_process() {
        let p = Params { processes: 3, threads: 2, ..Params::default() };
        for g in 0..p.total_threads() {
            let r = p.consumer_of(g);
            assert_eq!(p.producer_of(r), g);
            assert_ne!(r / p.threads, g / p.threads, "thread {g} pushes to its own process");
        }
        assert_eq!((0..2).map(|t| p.blocks_of_thread(t)).sum::<u64>(), p.blocks);
    }

    #[test]
    fn a_stamp_round_trips_and_detects_a_flipped_byte() {
        let s = Stamp { producer: 5, seq: 77, size: 300 };
        let mut block = vec![0u8; 300];
        s.write(&mut block);
        assert_eq!(Stamp::read(block[..16].try_into().unwrap()), s);
        assert_eq!(s.verify(&block), Ok(()));
        block[200] ^= 1;
        assert_eq!(s.verify(&block), Err(200));
    }

    #[test]
    fn sizes_stay_within_the_supported_range() {
        let mut rng = Rng::new(1, 2);
        for _ in 0..100_000 {
            let s = pick_size(&mut rng);
            assert!((MIN_BLOCK..=MAX_BLOCK).contains(&s), "{s}");
        }
    }
}
