//! The crate's API as another crate sees it: the curated items are all usable by name, the crate
//! root exports nothing else (every internal module is private, `unreachable_pub` keeps it so),
//! and what the hidden `cxlalloc::internal` module hands the crate's own tools is safe with any
//! argument. (That the heap's internals, e.g. a thread record at an unchecked index, cannot be
//! named from outside is shown by the `compile_fail` examples in `src/internal.rs`.)

use std::collections::BTreeSet;
use std::path::Path;
use std::ptr::NonNull;

use cxlalloc::{
    AdoptError, AllocError, AttachError, Bracket, BracketCensus, ClassCensus, Coherence, Config, ErrorCode, FreeError,
    HandOverError, Heap, HeapInfo, Holder, HostInfo, HostRecovery, HugeCensus, InFlight, Interrupted, McasInfo,
    OffsetError, OpCounters, OpenError, Pending, PendingKind, PendingOutcome, Problem, ReallocError, Rebuilt,
    RecoverHostError, RecoveryPlan, RecoveryReport, Redo, RedoOp, RegionInfo, Report, Resolution, SlabState, SlotInfo,
    Stats, ThreadHandle,
};

/// The names the crate root may export: the curated API, the types its public fields and
/// methods expose, and the hidden module for the crate's own tools.
const CURATED: &[&str] = &[
    // Heap and threads.
    "Heap",
    "ThreadHandle",
    "HugeMaintenance",
    "Offset",
    "Config",
    "Coherence",
    // Errors.
    "OpenError",
    "AttachError",
    "AllocError",
    "FreeError",
    "HandOverError",
    "AdoptError",
    "RecoverHostError",
    "OffsetError",
    "ReallocError",
    "MaintenanceError",
    "ErrorCode",
    "MAX_ALIGN",
    // Reports, and what their fields and methods expose.
    "Report",
    "Stats",
    "RecoveryReport",
    "Bracket",
    "SlabState",
    "BracketCensus",
    "ClassCensus",
    "Problem",
    "InFlight",
    "HugeCensus",
    "OpCounters",
    "PendingOutcome",
    "Rebuilt",
    "Resolution",
    "Redo",
    "RedoOp",
    "Pending",
    "PendingKind",
    "Holder",
    // Hosts (`Heap::hosts`, `Heap::recover_host`).
    "HostInfo",
    "HostRecovery",
    // A look at a heap without opening it (`Heap::info`, `Heap::slots`, `Heap::recovery_plan`).
    "HeapInfo",
    "SlotInfo",
    "Interrupted",
    "McasInfo",
    "RecoveryPlan",
    "RegionInfo",
    // Documentation pages: the guide (README) and the design document.
    "guide",
    "design",
    // `#[doc(hidden)]`: the tools' and tests' access, safe with any argument.
    "internal",
];

/// The names a `use` tree brings in: `a::{b, c::{d as e}}` gives `b` and `e`.
fn use_leaves(tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let inner = &tree[open + 1..tree.rfind('}').expect("balanced braces")];
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    use_leaves(&inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        use_leaves(&inner[start..], out);
    } else if !tree.is_empty() {
        let leaf = tree.rsplit(" as ").next().unwrap_or(tree);
        out.push(leaf.rsplit("::").next().unwrap_or(leaf).trim().to_string());
    }
}

/// Every name `src/lib.rs` makes public at the crate root.
fn root_exports() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let mut names = Vec::new();
    let mut rest = lib.as_str();
    while let Some(at) = rest.find("\npub ") {
        rest = &rest[at + 1..];
        let item = &rest[..rest.find(['\n', ';', '{']).unwrap_or(rest.len())];
        if let Some(tree) = rest.strip_prefix("pub use ") {
            use_leaves(&tree[..tree.find(';').expect("a use ends with ;")], &mut names);
        } else {
            // `pub mod NAME`, `pub fn NAME(..)`, `pub struct NAME ..`, `pub const NAME: ..`
            let word = item.split_whitespace().nth(2).unwrap_or("");
            names.push(word.split(['(', ':', '<']).next().unwrap_or(word).to_string());
        }
    }
    names.into_iter().collect()
}

#[test]
fn the_crate_root_exports_exactly_the_curated_api() {
    let exported = root_exports();
    let curated: BTreeSet<String> = CURATED.iter().map(|s| s.to_string()).collect();
    let extra: Vec<_> = exported.difference(&curated).collect();
    let missing: Vec<_> = curated.difference(&exported).collect();
    assert!(extra.is_empty() && missing.is_empty(), "not curated: {extra:?}; curated but not exported: {missing:?}");
}

#[test]
fn the_internal_module_is_hidden_from_the_docs() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    assert!(lib.contains("#[doc(hidden)]\npub mod internal;"));
}

#[test]
fn the_crate_denies_unreachable_pub_items() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let lints = lib.lines().find(|l| l.starts_with("#![warn(")).unwrap_or("");
    assert!(lints.contains("unreachable_pub") && lints.contains("unnameable_types"), "{lints}");
}

fn small_config() -> Config {
    Config { thread_slots: 2, huge_capacity: 0, coherence: Coherence::Full, ..Config::with_capacity(32 << 20) }
}

/// Every field of a recovery report, by type: slot, dead holder, redo record and its
/// resolution, pending operation and its outcome, list rebuild counts.
type RecoveryFields = (u32, Option<Holder>, Option<(Redo, Resolution)>, Option<(Pending, PendingOutcome)>, Rebuilt);

fn recovery_fields(r: &RecoveryReport) -> RecoveryFields {
    (r.slot, r.dead_holder, r.redo, r.pending, r.rebuilt)
}

/// Every field of a check report, by type.
fn census(report: &Report) -> (&[BracketCensus], &[Problem], &[InFlight], &HugeCensus) {
    (&report.brackets, &report.problems, &report.in_flight, &report.huge)
}

#[test]
fn the_curated_api_allocates_frees_and_reports_from_another_crate() {
    let heap: Heap = Heap::anonymous(&small_config()).unwrap();
    let thread: ThreadHandle = heap.attach().unwrap();
    let block: NonNull<u8> = thread.alloc(100).unwrap();
    let offset = heap.offset_of(block.as_ptr()).unwrap();
    assert_eq!(heap.pointer(offset).unwrap(), block);

    let report: Report = heap.check();
    let (brackets, problems, in_flight, huge) = census(&report);
    assert!(problems.is_empty() && in_flight.is_empty() && huge.live == 0, "{report}");
    assert_eq!(brackets.len(), Bracket::ALL.len());
    let small: &BracketCensus = report.bracket(Bracket::Small);
    let live: Vec<(usize, &ClassCensus)> =
        small.classes.iter().enumerate().filter(|(_, c)| c.live_blocks() > 0).collect();
    assert_eq!(live.len(), 1, "one block, one class");
    assert!(Bracket::Small.class_size(live[0].0 as u32 + 1).unwrap() >= 100);
    assert_eq!(SlabState::ALL.iter().map(|&s| small.slabs(s)).sum::<u64>(), u64::from(small.length));

    let stats: Stats = heap.stats();
    let counters: OpCounters = stats.counters;
    assert_eq!(counters.remote_frees, 0);

    thread.free(block).unwrap();
    assert_eq!(thread.free(block), Err(FreeError::DoubleFree));
    assert!(thread.recovery().map(recovery_fields).is_none(), "a fresh slot recovered nothing");
}

#[test]
fn every_curated_error_is_reachable_and_has_a_c_code() {
    let heap = Heap::anonymous(&small_config()).unwrap();
    let thread = heap.attach().unwrap();
    let _second = heap.attach().unwrap();

    let open: OpenError = Heap::open("cxlalloc-public-api-no-such-heap").unwrap_err();
    assert_eq!(ErrorCode::from(&open), ErrorCode::NotFound);
    let attach: AttachError = heap.attach().unwrap_err();
    assert_eq!(ErrorCode::from(&attach), ErrorCode::SlotsExhausted);
    let alloc: AllocError = thread.alloc(0).unwrap_err();
    assert_eq!(ErrorCode::from(&alloc), ErrorCode::InvalidArgument);
    let mut local = 0u64;
    let free: FreeError = thread.free(NonNull::from(&mut local).cast()).unwrap_err();
    assert_eq!(free, FreeError::ForeignPointer);
    let realloc: ReallocError = thread.realloc(NonNull::from(&mut local).cast(), 8).unwrap_err();
    assert_eq!(realloc, ReallocError::Free(FreeError::ForeignPointer));
    let hand_over: HandOverError = thread.write_back(NonNull::from(&mut local).cast(), 8).unwrap_err();
    assert_eq!(hand_over, HandOverError::Block(FreeError::ForeignPointer));
    let adopt: AdoptError = heap.adopt(99).map(|_| ()).unwrap_err();
    assert_eq!(adopt, AdoptError::NoSuchSlot { slot: 99, slots: 2 });
    let offset: OffsetError = heap.pointer(cxlalloc::Offset::<u8>::NULL).unwrap_err();
    assert_eq!(offset, OffsetError::Null);
}

#[test]
fn the_recovery_words_round_trip_through_their_public_decoders() {
    let redo = Redo::new(RedoOp::RemoteFree, Bracket::Large, 7, 3).flagged();
    assert_eq!(Redo::unpack(redo.pack()), Some(redo));
    let pending = Pending::new(PendingKind::Free, 42);
    assert_eq!(Pending::unpack(pending.pack()), Some(pending));
    let holder = Holder { pid: 1234, host: 3, start: 5 };
    assert_eq!(Holder::unpack(holder.pack()), Some(holder));
    assert_eq!(Holder::unpack(0), None);
}

#[test]
fn internal_hazard_retract_ignores_an_index_past_the_set() {
    use cxlalloc::internal::protocol::hazard;
    use cxlalloc::internal::sync::AtomicU64;
    let set: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
    assert_eq!(hazard::publish(&set, 9, 1), Some(0));
    for index in [2, usize::MAX / 2 + 1, usize::MAX] {
        hazard::retract(&set, index);
    }
    assert!(hazard::contains(&set, 9), "an index past the set emptied nothing");
}

#[test]
fn internal_device_open_refuses_a_description_that_parse_would_refuse() {
    use cxlalloc::internal::mcas::{Device, DeviceSpec, MmioError};
    let good = DeviceSpec {
        registers: cxlalloc::internal::mcas::spec::STAND_IN.into(),
        spwr_offset: 0,
        sprd_offset: 4096,
        slot_stride: 64,
        slots: 4,
        memory: "/nonexistent/cxlalloc-public-api".into(),
        memory_offset: 0,
        memory_bytes: 4096,
        target_base: 0,
    };
    let bad = [
        DeviceSpec { slot_stride: 8, ..good.clone() },
        DeviceSpec { slot_stride: u64::MAX / 64 * 64, ..good.clone() },
        DeviceSpec { sprd_offset: 64, ..good.clone() },
        DeviceSpec { memory_offset: u64::MAX / 4096 * 4096, ..good.clone() },
    ];
    for spec in bad {
        let refused = Device::open(&spec);
        assert!(matches!(refused, Err(MmioError::Spec(_))), "{spec:?}: {refused:?}");
    }
}

type Description<'a> =
    (&'a [RegionInfo], &'a Result<Vec<SlotInfo>, String>, &'a Result<Vec<HostInfo>, String>, Option<&'a McasInfo>);

/// Every field of a heap's read-only description, by type.
fn description(info: &HeapInfo) -> Description<'_> {
    (&info.regions, &info.holders, &info.hosts, info.mcas.as_ref())
}

#[test]
fn a_heap_is_described_from_its_files_through_the_curated_api() {
    let dir = std::env::temp_dir().join(format!("cxlalloc-public-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let heap = Heap::create_at(&dir, &small_config()).unwrap();
    let thread = heap.attach().unwrap();
    let info: HeapInfo = Heap::info_at(&dir).unwrap();
    let (regions, holders, hosts, mcas) = description(&info);
    let hosts: &Vec<HostInfo> = hosts.as_ref().unwrap();
    assert!(
        hosts.len() == 1 && hosts[0].own && hosts[0].id == heap.host_id().expect("registered at open"),
        "{hosts:?}"
    );
    assert!(regions.iter().any(|r: &RegionInfo| r.hwcc) && mcas.is_none(), "{regions:?}");
    let holders: &Vec<SlotInfo> = holders.as_ref().unwrap();
    assert_eq!(holders.len(), 1, "this thread's slot");
    let slots: Vec<SlotInfo> = heap.slots();
    assert!(slots.iter().all(|s| s.alive
        && s.local
        && s.host == heap.host_id().expect("registered at open")
        && s.pid == std::process::id()));
    let me: u16 = heap.host_id().expect("registered at open");
    let my_domain: u64 = heap.hosts().iter().find(|h| h.id == me).map_or(0, |h| h.domain);
    let own: RecoverHostError = heap.recover_host(me, my_domain).unwrap_err();
    assert_eq!(own, RecoverHostError::OwnHost(heap.host_id().expect("registered at open")));
    let none: Result<HostRecovery, RecoverHostError> = heap.recover_host(63, my_domain);
    assert_eq!(none, Err(RecoverHostError::NoSuchHost(63)));
    let in_flight: Vec<&Interrupted> = slots.iter().flat_map(|s| &s.in_flight).collect();
    assert!(in_flight.is_empty());
    let plans: Vec<RecoveryPlan> = heap.recovery_plan();
    assert!(plans.is_empty(), "no dead holder, nothing to recover");
    drop(thread);
    drop(heap);
    Heap::unlink_at(&dir).unwrap();
}

#[test]
fn a_hand_over_flush_stays_within_the_slab_or_huge_block_of_its_pointer() {
    let heap = Heap::anonymous(&small_config()).unwrap();
    let thread = heap.attach().unwrap();
    let block = thread.alloc(100).unwrap();
    let size = thread.usable_size(block).unwrap();
    thread.write_back(block, size).unwrap();
    thread.invalidate(block, size).unwrap();
    // Inside the block too: a field of it.
    // SAFETY: 8 bytes into a live block of at least 100 bytes.
    let field = unsafe { NonNull::new_unchecked(block.as_ptr().add(8)) };
    thread.write_back(field, 8).unwrap();
    let past = thread.invalidate(block, 1 << 30).unwrap_err();
    assert!(matches!(past, HandOverError::PastEnd { len, room } if len == 1 << 30 && room >= size), "{past:?}");
    let mut local = 0u64;
    assert_eq!(
        thread.invalidate(NonNull::from(&mut local).cast(), 8),
        Err(HandOverError::Block(FreeError::ForeignPointer))
    );
    thread.free(block).unwrap();
}
