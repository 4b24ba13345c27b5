//! The memory split (docs/design.md §12.1): smaps parsing, the explicit region table, and one live
//! measurement of a real `/dev/shm` heap.

use std::path::PathBuf;
use std::ptr::NonNull;

use cxlalloc::internal::RegionId;
use cxlalloc::{Config, Heap};
use cxlalloc_bench::memory::{self, Class, Error, MemorySplit, RegionTable};

const KB: u64 = 1024;

/// One mapping as the kernel writes it (a 6.x kernel's full field list), with `rss`/`pss` in kB.
fn block(header: &str, rss: u64, pss: u64) -> String {
    let size = rss.max(4) * 4;
    format!(
        "{header}\n\
         Size:             {size:>8} kB\n\
         KernelPageSize:          4 kB\n\
         MMUPageSize:             4 kB\n\
         Rss:              {rss:>8} kB\n\
         Pss:              {pss:>8} kB\n\
         Pss_Dirty:        {pss:>8} kB\n\
         Shared_Clean:            0 kB\n\
         Shared_Dirty:            0 kB\n\
         Private_Clean:           0 kB\n\
         Private_Dirty:    {rss:>8} kB\n\
         Referenced:       {rss:>8} kB\n\
         Anonymous:               0 kB\n\
         KSM:                     0 kB\n\
         LazyFree:                0 kB\n\
         AnonHugePages:           0 kB\n\
         ShmemPmdMapped:          0 kB\n\
         FilePmdMapped:           0 kB\n\
         Shared_Hugetlb:          0 kB\n\
         Private_Hugetlb:         0 kB\n\
         Swap:                    0 kB\n\
         SwapPss:                 0 kB\n\
         Locked:                  0 kB\n\
         THPeligible:    0\n\
         ProtectionKey:           0\n\
         VmFlags: rd wr sh mr mw me ms sd \n"
    )
}

/// The fixture: (header line, Rss kB, Pss kB, expected class).
fn fixture_rows() -> Vec<(&'static str, u64, u64, Class)> {
    use Class::{Hwcc, Other, Swcc};
    use RegionId::*;
    vec![
        ("55d0c0a00000-55d0c0a02000 r--p 00000000 fe:00 247026                     /usr/bin/micro", 8, 8, Other),
        ("7f1200000000-7f1200001000 r--s 00000000 00:1a 1001                       /dev/shm/cxlalloc.kv/header", 4, 2, Swcc(Header)),
        ("7f1200001000-7f1200011000 rw-s 00000000 00:1a 1002                       /dev/shm/cxlalloc.kv/shared", 16, 8, Hwcc(Shared)),
        ("7f1200011000-7f1200111000 rw-s 00000000 00:1a 1003                       /dev/shm/cxlalloc.kv/owned", 32, 16, Swcc(Owned)),
        ("7f1300000000-7f1300010000 rw-s 00000000 00:1a 1004                       /dev/shm/cxlalloc.kv/remote", 4, 4, Hwcc(Remote)),
        ("7f1400000000-7f1400100000 rw-s 00000000 00:1a 1005                       /dev/shm/cxlalloc.kv/local", 64, 64, Swcc(Local)),
        ("7f1500000000-7f1500800000 rw-s 00000000 00:1a 1006                       /dev/shm/cxlalloc.kv/data", 4096, 2048, Swcc(Data)),
        ("7f1500800000-7f1501000000 rw-s 00800000 00:1a 1006                       /dev/shm/cxlalloc.kv/data", 1024, 1024, Swcc(Data)),
        ("7f1600001000-7f1600011000 rw-s 00000000 00:1a 2002                       /dev/shm/cxlalloc.old/shared (deleted)", 8, 8, Hwcc(Shared)),
        ("7f1700000000-7f1700800000 rw-s 00000000 00:1a 2006                       /dev/shm/cxlalloc.old/data (deleted)", 512, 256, Swcc(Data)),
        ("7f1800000000-7f1800100000 rw-s 00000000 00:1a 3001                       /dev/shm/my-shared-cache", 128, 128, Other),
        ("7f1800100000-7f1800110000 rw-s 00000000 00:1a 3002                       /dev/shm/cxlalloc.kv-backup/shared", 32, 32, Other),
        ("7f1800110000-7f1800120000 rw-s 00000000 00:1a 3003                       /dev/shm/cxlalloc.kv/shared.bak", 16, 16, Other),
        ("7f1800120000-7f1800130000 rw-s 00000000 00:1a 3004                       /tmp/copy/dev/shm/cxlalloc.kv/remote", 4, 4, Other),
        ("7f1800130000-7f1800140000 rw-s 00000000 00:1a 3005                       /dev/shm/remote", 4, 4, Other),
        ("7f1900000000-7f1900040000 rw-p 00000000 00:00 0 ", 256, 256, Other),
        ("7f2000000000-7f3000000000 ---p 00000000 00:00 0 ", 0, 0, Other),
        ("55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]", 132, 132, Other),
        ("7f1a00000000-7f1a00010000 r-xp 00001000 fe:00 5005                       /home/u/My Files/lib thing.so", 40, 20, Other),
        ("7f1a00010000-7f1a00011000 rw-p 00000000 fe:00 5006                       /home/u/old build/lib (deleted)", 4, 4, Other),
        ("7ffd00000000-7ffd00022000 rw-p 00000000 00:00 0                          [stack]", 136, 136, Other),
        ("7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0                          [vdso]", 8, 0, Other),
    ]
}

fn fixture() -> String {
    fixture_rows().iter().map(|&(h, rss, pss, _)| block(h, rss, pss)).collect()
}

fn heap_dirs() -> Vec<PathBuf> {
    vec![PathBuf::from("/dev/shm/cxlalloc.kv"), PathBuf::from("/dev/shm/cxlalloc.old")]
}

#[test]
fn parse_reads_every_mapping_header_and_its_sizes() {
    let maps = memory::parse_smaps(&fixture()).unwrap();
    assert_eq!(maps.len(), fixture_rows().len());
    let data = &maps[7];
    assert_eq!((data.start, data.end), (0x7f1500800000, 0x7f1501000000));
    assert_eq!(data.perms, "rw-s");
    assert_eq!(data.offset, 0x800000);
    assert_eq!(data.dev, "00:1a");
    assert_eq!(data.inode, 1006);
    assert_eq!(data.pathname.as_deref(), Some("/dev/shm/cxlalloc.kv/data"));
    assert_eq!(data.rss_bytes(), 1024 * KB);
    assert_eq!(data.pss_bytes(), 1024 * KB);
    assert_eq!(data.size("Size"), Some(4096 * KB));
    assert_eq!(data.size("SwapPss"), Some(0));
    // Fields not written in kB are skipped, not errors.
    assert_eq!(data.size("THPeligible"), None);
    assert_eq!(data.size("VmFlags"), None);
}

#[test]
fn parse_keeps_pathnames_with_spaces_and_the_deleted_suffix() {
    let maps = memory::parse_smaps(&fixture()).unwrap();
    let by_inode = |i| maps.iter().find(|m| m.inode == i).unwrap();
    assert_eq!(by_inode(5005).pathname.as_deref(), Some("/home/u/My Files/lib thing.so"));
    assert_eq!(by_inode(5005).file(), Some(("/home/u/My Files/lib thing.so", false)));
    assert_eq!(by_inode(5006).file(), Some(("/home/u/old build/lib", true)));
    assert_eq!(by_inode(2006).file(), Some(("/dev/shm/cxlalloc.old/data", true)));
}

#[test]
fn parse_gives_anonymous_mappings_no_pathname() {
    let maps = memory::parse_smaps(&fixture()).unwrap();
    let anon: Vec<_> = maps.iter().filter(|m| m.pathname.is_none()).collect();
    assert_eq!(anon.len(), 2);
    assert_eq!(anon[1].perms, "---p");
    assert_eq!(anon[1].end - anon[1].start, 0x1000000000);
    let named: Vec<_> = maps.iter().filter_map(|m| m.pathname.as_deref()).filter(|p| p.starts_with('[')).collect();
    assert_eq!(named, ["[heap]", "[stack]", "[vdso]"]);
}

#[test]
fn parse_accepts_unknown_fields_and_parses_unknown_kb_fields() {
    let text = "00400000-00401000 r--p 00000000 08:01 12 /bin/x\n\
                Rss: 4 kB\n\
                Pss: 2 kB\n\
                Pss_Shmem: 1 kB\n\
                Frobnicated_Future: 12 kB\n\
                NewFlag: yes please\n\
                \n";
    let maps = memory::parse_smaps(text).unwrap();
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].size("Frobnicated_Future"), Some(12 * KB));
    assert_eq!(maps[0].size("Pss_Shmem"), Some(KB));
    assert_eq!(maps[0].size("NewFlag"), None);
}

#[test]
fn region_table_classifies_every_fixture_mapping() {
    let table = RegionTable::new(&heap_dirs());
    for (m, &(header, _, _, want)) in memory::parse_smaps(&fixture()).unwrap().iter().zip(&fixture_rows()) {
        assert_eq!(table.classify(m), want, "{header}");
    }
}

#[test]
fn region_table_takes_names_and_classes_from_the_library() {
    let table = RegionTable::new(&[PathBuf::from("/x/heap")]);
    for r in RegionId::ALL {
        let path = format!("/x/heap/{}", r.file_name());
        assert_eq!(table.region_of(&path), Some(r), "{path}");
        assert_eq!(table.region_of(&format!("{path} (deleted)")), Some(r), "{path} (deleted)");
    }
    let hwcc: Vec<_> = RegionId::ALL.into_iter().filter(|r| r.is_hwcc()).collect();
    assert_eq!(hwcc, [RegionId::Shared, RegionId::Claims, RegionId::Remote]);
}

#[test]
fn look_alike_paths_are_not_heap_regions() {
    let table = RegionTable::new(&heap_dirs());
    for path in [
        "/dev/shm/my-shared-cache",
        "/dev/shm/shared",
        "/dev/shm/cxlalloc.kv-backup/shared",
        "/dev/shm/cxlalloc.kv/shared.bak",
        "/dev/shm/cxlalloc.kv/sub/shared",
        "/tmp/copy/dev/shm/cxlalloc.kv/remote",
        "/dev/shm/cxlalloc.kv/shared (deleted) (copy)",
        "dev/shm/cxlalloc.kv/shared",
        "/dev/shm/cxlalloc.kv",
    ] {
        assert_eq!(table.region_of(path), None, "{path}");
    }
}

#[test]
fn a_trailing_slash_on_the_heap_directory_does_not_matter() {
    let table = RegionTable::new(&[PathBuf::from("/dev/shm/cxlalloc.kv/")]);
    assert_eq!(table.region_of("/dev/shm/cxlalloc.kv/remote"), Some(RegionId::Remote));
}

#[test]
fn with_no_heap_directories_everything_is_other() {
    let s = memory::split(&fixture(), &[]).unwrap();
    assert_eq!((s.hwcc_pss_bytes, s.swcc_pss_bytes), (0, 0));
    assert_eq!(s.other_pss_bytes, s.total_pss_bytes);
}

#[test]
fn split_sums_each_class_and_totals_equal_the_sum() {
    let s = memory::split(&fixture(), &heap_dirs()).unwrap();
    // shared 8 + remote 4 + deleted shared 8.
    assert_eq!(s.hwcc_pss_bytes, 20 * KB);
    assert_eq!(s.hwcc_rss_bytes, 28 * KB);
    // header 2 + owned 16 + local 64 + data 2048 + 1024 + deleted data 256.
    assert_eq!(s.swcc_pss_bytes, 3410 * KB);
    assert_eq!(s.swcc_rss_bytes, 5732 * KB);
    let rows = fixture_rows();
    let pss_total: u64 = rows.iter().map(|r| r.2 * KB).sum();
    let rss_total: u64 = rows.iter().map(|r| r.1 * KB).sum();
    let other_pss: u64 = rows.iter().filter(|r| r.3 == Class::Other).map(|r| r.2 * KB).sum();
    assert_eq!(s.other_pss_bytes, other_pss);
    assert_eq!(s.total_pss_bytes, pss_total);
    assert_eq!(s.total_rss_bytes, rss_total);
    assert_eq!(s.total_pss_bytes, s.hwcc_pss_bytes + s.swcc_pss_bytes + s.other_pss_bytes);
    assert_eq!(s.total_rss_bytes, s.hwcc_rss_bytes + s.swcc_rss_bytes + s.other_rss_bytes);
    assert_eq!(s.region_pss_bytes.iter().sum::<u64>(), s.hwcc_pss_bytes + s.swcc_pss_bytes);
    assert_eq!(s.window_pss_bytes, 0, "no window among the fixture's mappings");
    assert_eq!(s.region_pss_bytes[RegionId::Data as usize], (2048 + 1024 + 256) * KB);
    assert_eq!(s.region_pss_bytes[RegionId::Remote as usize], 4 * KB);
    assert!((s.hwcc_share() - 20.0 / (pss_total / KB) as f64).abs() < 1e-12);
    assert_eq!(MemorySplit::default().hwcc_share(), 0.0);
}

fn parse_err(text: &str) -> Error {
    memory::parse_smaps(text).unwrap_err()
}

const GOOD: &str = "00400000-00401000 r--p 00000000 08:01 12 /bin/x\nRss: 4 kB\n";

#[test]
fn a_non_numeric_size_is_an_error_with_its_line() {
    let e = parse_err(&format!("{GOOD}Pss: abc kB\n"));
    assert!(matches!(&e, Error::BadSize { line: 3, field, value } if field == "Pss" && value == "abc kB"), "{e:?}");
    assert!(e.to_string().contains("line 3"), "{e}");
}

#[test]
fn a_size_without_unit_is_an_error() {
    let e = parse_err(&format!("{GOOD}Pss: 12\n"));
    assert!(matches!(e, Error::BadSize { line: 3, .. }), "{e:?}");
}

#[test]
fn an_overflowing_size_is_an_error() {
    let e = parse_err(&format!("{GOOD}Pss: 18446744073709551615 kB\n"));
    assert!(matches!(e, Error::BadSize { line: 3, .. }), "{e:?}");
}

#[test]
fn a_field_before_any_header_is_an_error() {
    let e = parse_err("Rss: 4 kB\n");
    assert!(matches!(&e, Error::FieldBeforeHeader { line: 1, field } if field == "Rss"), "{e:?}");
}

#[test]
fn malformed_headers_are_errors_with_their_line() {
    for (bad, reason) in [
        ("hello world", "address range"),
        ("zz-10 r--p 00000000 08:01 12", "range start"),
        ("2000-1000 r--p 00000000 08:01 12", "range end below start"),
        ("1000-2000 rwzp 00000000 08:01 12 /x", "permissions"),
        ("1000-2000 r--p 0000g000 08:01 12 /x", "offset"),
        ("1000-2000 r--p 00000000 0801 12 /x", "device"),
        ("1000-2000 r--p 00000000 08:01 -1 /x", "inode"),
        ("1000-2000 r--p 00000000 08:01", "no inode"),
    ] {
        let e = parse_err(&format!("{GOOD}Pss: 4 kB\n{bad}\n"));
        match &e {
            Error::BadHeader { line: 4, reason: r, text } => {
                assert_eq!(*r, reason, "{bad}");
                assert_eq!(text, bad);
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn vm_hwm_is_parsed_from_status_text() {
    let status = "Name:\tmicro\nVmPeak:\t  123456 kB\nVmHWM:\t    8192 kB\nVmRSS:\t    4096 kB\n";
    assert_eq!(memory::parse_vm_hwm(status).unwrap(), 8192 * KB);
    assert!(matches!(memory::parse_vm_hwm("VmRSS:\t 4 kB\n"), Err(Error::NoPeak)));
    assert!(matches!(memory::parse_vm_hwm("VmHWM:\t lots\n"), Err(Error::NoPeak)));
}

/// Unlinks the heap directory when the test ends, even by panic.
struct Unlink(String);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = Heap::unlink(&self.0);
    }
}

#[test]
fn live_dev_shm_heap_is_split_into_swcc_data_and_a_small_hwcc_share() {
    const BLOCK: usize = 64;
    const BLOCKS: usize = (8 << 20) / BLOCK;
    let name = format!("memory-test-{}", std::process::id());
    let _ = Heap::unlink(&name);
    let _guard = Unlink(name.clone());
    let heap = Heap::create(&name, &Config::with_capacity(64 << 20)).unwrap();
    let dirs = [PathBuf::from(heap.location())];
    assert_eq!(dirs[0], Heap::path_of(&name).unwrap());
    let before = memory::measure(&dirs).unwrap();

    let thread = heap.attach().unwrap();
    let mut blocks: Vec<NonNull<u8>> = Vec::with_capacity(BLOCKS);
    for i in 0..BLOCKS {
        let p = thread.alloc(BLOCK).unwrap();
        // SAFETY: `p` is a fresh block of BLOCK bytes owned by this test.
        unsafe { p.as_ptr().write_bytes(i as u8 | 1, BLOCK) };
        blocks.push(p);
    }
    let as_allocated = memory::measure(&dirs).unwrap();
    // Read every block once more: the count must not change. (Growth once re-mapped chunks this
    // process had already touched, dropping their pages from its RSS/PSS until touched again;
    // `as_allocated` then showed 1 MiB of the 8 MiB written.)
    for (i, p) in blocks.iter().enumerate() {
        // SAFETY: each block is live, BLOCK bytes, written above.
        assert_eq!(unsafe { p.as_ptr().read_volatile() }, i as u8 | 1);
    }
    let after = memory::measure(&dirs).unwrap();

    // The same mappings, still counted, once the heap's files are unlinked (" (deleted)").
    Heap::unlink(&name).unwrap();
    let deleted = memory::measure(&dirs).unwrap();

    for (label, s) in
        [("before", &before), ("as allocated", &as_allocated), ("after re-reading", &after), ("unlinked", &deleted)]
    {
        println!(
            "{label}: hwcc_pss={} B swcc_pss={} B other_pss={} B total_pss={} B hwcc/total={:.6} \
             regions_pss={:?} (header, shared, owned, remote, local, data)",
            s.hwcc_pss_bytes,
            s.swcc_pss_bytes,
            s.other_pss_bytes,
            s.total_pss_bytes,
            s.hwcc_share(),
            s.region_pss_bytes
        );
    }
    let peak = memory::peak_rss_bytes().unwrap();
    println!("peak rss (VmHWM) = {peak} B");

    for s in [&as_allocated, &after, &deleted] {
        assert!(s.swcc_pss_bytes >= 7 << 20, "{s:?}");
        assert!(s.region_pss_bytes[RegionId::Data as usize] >= 7 << 20, "{s:?}");
        assert!(s.hwcc_pss_bytes > 0, "{s:?}");
        assert!(s.hwcc_pss_bytes < 1 << 20, "{s:?}");
        assert_eq!(s.total_pss_bytes, s.hwcc_pss_bytes + s.swcc_pss_bytes + s.other_pss_bytes);
    }
    assert!(after.swcc_pss_bytes >= before.swcc_pss_bytes + (7 << 20), "{before:?} {after:?}");
    assert!(peak >= after.swcc_rss_bytes, "VmHWM {peak} below heap RSS {}", after.swcc_rss_bytes);

    for p in blocks {
        thread.free(p).unwrap();
    }
}

#[test]
fn a_no_hwcc_heaps_mcas_window_is_hwcc_memory_of_no_single_region() {
    let dirs = heap_dirs();
    let table = RegionTable::new(&dirs);
    let rows = [
        // The heap's mappings of its HWcc regions, at their places in the window file, and the
        // process's own mapping of the whole window (requester slots).
        ("7f1200001000-7f1200011000 rw-s 00201000 00:1a 4001                       /dev/shm/cxlalloc.kv/mcas-window", 16, 8),
        ("7f1300000000-7f1300010000 rw-s 00000000 00:1a 4001                       /dev/shm/cxlalloc.kv/mcas-window", 8, 4),
        ("7f1300010000-7f1300020000 rw-s 00000000 00:1a 4002                       /dev/shm/cxlalloc.old/mcas-window (deleted)", 4, 4),
        ("7f1400000000-7f1400010000 rw-s 00000000 00:1a 4003                       /dev/shm/cxlalloc.kv/owned", 32, 16),
        ("7f1500000000-7f1500010000 rw-s 00000000 00:1a 4004                       /dev/shm/mcas-window", 8, 8),
        ("7f1600000000-7f1600010000 rw-s 00000000 00:1a 4005                       /dev/shm/cxlalloc.kv/mcas-window.bak", 8, 8),
    ];
    let text: String = rows.iter().map(|&(h, rss, pss)| block(h, rss, pss)).collect();
    let maps = memory::parse_smaps(&text).unwrap();
    let classes: Vec<Class> = maps.iter().map(|m| table.classify(m)).collect();
    assert_eq!(
        classes,
        [Class::Window, Class::Window, Class::Window, Class::Swcc(RegionId::Owned), Class::Other, Class::Other]
    );
    let s = memory::split(&text, &dirs).unwrap();
    assert_eq!(s.hwcc_pss_bytes, (8 + 4 + 4) * KB);
    assert_eq!(s.window_pss_bytes, s.hwcc_pss_bytes);
    assert_eq!(s.region_pss_bytes.iter().sum::<u64>() + s.window_pss_bytes, s.hwcc_pss_bytes + s.swcc_pss_bytes);
    assert_eq!(s.total_pss_bytes, s.hwcc_pss_bytes + s.swcc_pss_bytes + s.other_pss_bytes);
}

/// A read of smaps during which a mapping grew (the kernel merged a newly mapped neighbour into
/// it) prints that mapping again, whole, after its first part: the split counts its bytes once
/// and says the read was torn.
#[test]
fn a_mapping_printed_again_by_a_torn_read_is_counted_once() {
    let text = [
        block(
            "7f1500000000-7f1500800000 rw-s 00000000 00:1a 1006                       /dev/shm/cxlalloc.kv/data",
            4096,
            4096,
        ),
        block(
            "7f1500000000-7f1501000000 rw-s 00000000 00:1a 1006                       /dev/shm/cxlalloc.kv/data",
            6144,
            6144,
        ),
        block("7f1600000000-7f1600001000 rw-p 00000000 00:00 0", 4, 4),
    ]
    .concat();
    let s = memory::split(&text, &heap_dirs()).unwrap();
    assert!(s.torn);
    assert_eq!(s.swcc_pss_bytes, 4096 * KB);
    assert_eq!(s.total_pss_bytes, (4096 + 4) * KB);
    assert!(!memory::split(&fixture(), &heap_dirs()).unwrap().torn);
}

/// 2 MiB-mapped bytes (`ShmemPmdMapped`, `FilePmdMapped`) are split into the heap's region files
/// (a window file counts with them) and every other mapping, so a record shows whether the
/// region files got huge pages (a `huge=within_size` tmpfs) or only the huge blocks
/// (`huge=advise`, docs/design.md §7.6).
#[test]
fn two_mib_mapped_bytes_are_split_into_region_files_and_the_rest() {
    let with_pmd = |header: &str, shmem_kb: u64, file_kb: u64| {
        block(header, 4096, 4096)
            .replace("ShmemPmdMapped:          0 kB", &format!("ShmemPmdMapped: {shmem_kb:>8} kB"))
            .replace("FilePmdMapped:           0 kB", &format!("FilePmdMapped:  {file_kb:>8} kB"))
    };
    let text = [
        with_pmd(
            "7f1200000000-7f1200400000 rw-s 00000000 00:1a 1002                       /dev/shm/cxlalloc.kv/shared",
            2048,
            0,
        ),
        with_pmd(
            "7f1500000000-7f1500800000 rw-s 00000000 00:1a 1006                       /dev/shm/cxlalloc.kv/data",
            4096,
            0,
        ),
        with_pmd(
            "7f1300000000-7f1300400000 rw-s 00000000 00:1a 4001                       /dev/shm/cxlalloc.kv/mcas-window",
            2048,
            0,
        ),
        // A huge block's object: a file of the heap directory that is no region file.
        with_pmd(
            "7f1600000000-7f1601000000 rw-s 00000000 00:1a 5001                       /dev/shm/cxlalloc.kv/huge-0-1",
            16384,
            0,
        ),
        with_pmd("7f1700000000-7f1700400000 r--p 00000000 fe:00 5002                       /usr/lib/big.so", 0, 2048),
        block("7f1800000000-7f1800001000 rw-p 00000000 00:00 0", 4, 4),
    ]
    .concat();
    let s = memory::split(&text, &heap_dirs()).unwrap();
    assert_eq!(s.region_pmd_bytes, (2048 + 4096 + 2048) * KB);
    assert_eq!(s.other_pmd_bytes, (16384 + 2048) * KB);
    let none = memory::split(&fixture(), &heap_dirs()).unwrap();
    assert_eq!((none.region_pmd_bytes, none.other_pmd_bytes), (0, 0));
}
