//! The hardware mCAS transport (`mcas::mmio`: a `movdir64b` request line, a 16-byte answer
//! load) against the in-process stand-in that traps those accesses with userfaultfd (feature
//! `mcas-standin`), its wire format against a plain register file, and no-HWcc heaps whose
//! HWcc regions live in the device's memory.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{fork_child, free_roots_and_check_empty, mcas_increment, remote_free_ring, serial, Cas, Ctx};
use cxlalloc::internal::mcas::{Device, DeviceSpec, Link, McasClient, McasError, MmioError};
use cxlalloc::{Coherence, Config, Heap, OpenError};

const PAGE: u64 = 4096;

/// A scratch directory holding a device-memory file; removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = PathBuf::from(format!("/dev/shm/cxlalloc-test-mmio-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A zeroed file of `bytes` in the directory.
    fn file(&self, name: &str, bytes: u64) -> PathBuf {
        let path = self.0.join(name);
        std::fs::File::create(&path).unwrap().set_len(bytes).unwrap();
        path
    }

    /// A stand-in device with `slots` requesters over a fresh 64 KiB memory file.
    fn stand_in(&self, slots: u32) -> DeviceSpec {
        DeviceSpec {
            registers: cxlalloc::internal::mcas::spec::STAND_IN.into(),
            spwr_offset: 0,
            sprd_offset: u64::from(slots) * PAGE,
            slot_stride: PAGE,
            slots,
            memory: self.file("memory", 64 << 10),
            memory_offset: 0,
            memory_bytes: 64 << 10,
            target_base: 0x1_0000_0000,
        }
    }

    /// A device of 4 requesters (128-byte slots, sprd one page after spwr) whose registers are
    /// a plain file of `register_bytes`, over one page of memory.
    fn register_file_device(&self, register_bytes: u64) -> DeviceSpec {
        DeviceSpec {
            registers: self.file("registers", register_bytes),
            spwr_offset: 0,
            sprd_offset: PAGE,
            slot_stride: 128,
            slots: 4,
            memory: self.file("memory", PAGE),
            memory_offset: 0,
            memory_bytes: PAGE,
            target_base: 0,
        }
    }

    /// A stand-in device for a heap with [`THREAD_SLOTS`], its memory `bytes` long from 8 KiB
    /// into a file filled with 0xff (creation must zero the heap's part), and its description
    /// file.
    fn heap_device(&self, bytes: u64) -> (DeviceSpec, PathBuf) {
        let slots = THREAD_SLOTS + cxlalloc::internal::PROCESS_REQUESTERS;
        let spec = DeviceSpec { memory_offset: 2 * PAGE, memory_bytes: bytes, ..self.stand_in(slots) };
        std::fs::write(&spec.memory, vec![0xffu8; (2 * PAGE + bytes) as usize]).unwrap();
        let description = self.0.join("device.toml");
        std::fs::write(&description, spec.to_toml()).unwrap();
        (spec, description)
    }
}

const THREAD_SLOTS: u32 = 8;

fn heap_config(coherence: Coherence, device: &std::path::Path) -> Config {
    Config {
        coherence,
        huge_capacity: 0,
        thread_slots: THREAD_SLOTS,
        mcas_device: Some(device.to_path_buf()),
        ..Config::with_capacity(64 << 20)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn client(device: &Arc<Device>, slot: u32) -> McasClient {
    McasClient::on(Link::Device(device.clone()), slot).unwrap()
}

/// The word at `off` of a memory file, read from the file itself.
fn file_word(path: &std::path::Path, off: u64) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    u64::from_le_bytes(bytes[off as usize..off as usize + 8].try_into().unwrap())
}

/// Whether this CPU can send a request (`movdir64b`), which every test that opens a device needs:
/// elsewhere `Device::open` refuses (`a_cpu_without_movdir64b_is_refused_at_open`), and the test
/// says it is skipped rather than fail for the machine it runs on.
fn cpu_can_request() -> bool {
    let can = cxlalloc::internal::mcas::has_movdir64b();
    if !can {
        eprintln!("SKIPPED: this CPU has no movdir64b, so no mCAS device can be opened here");
    }
    can
}

#[test]
fn a_cpu_without_movdir64b_is_refused_at_open() {
    if cxlalloc::internal::mcas::has_movdir64b() {
        eprintln!("SKIPPED: this CPU has movdir64b (the other tests open devices on it)");
        return;
    }
    let scratch = Scratch::new("nomovdir");
    let refused = Device::open(&scratch.stand_in(2));
    assert!(matches!(&refused, Err(MmioError::Unsupported(why)) if why.contains("movdir64b")), "{refused:?}");
}

#[test]
fn a_stand_in_cas_succeeds_on_a_match_and_reports_the_word_on_a_mismatch() {
    if !cpu_can_request() {
        return;
    }
    let scratch = Scratch::new("basic");
    let spec = scratch.stand_in(4);
    let device = Arc::new(Device::open(&spec).unwrap());
    let mut c = client(&device, 2);
    let a = c.compare_exchange_weak(64, 0, 5).unwrap();
    assert!(a.success && a.prev == 0, "{a:?}");
    let a = c.compare_exchange_weak(64, 0, 7).unwrap();
    assert!(!a.success && a.prev == 5, "{a:?}");
    assert_eq!(c.load(64).unwrap(), 5);
    assert_eq!(file_word(&spec.memory, 64), 5, "the CAS reached the shared memory file");
    assert_eq!(c.compare_exchange(64, 5, 9), Ok(5));
    assert_eq!(c.compare_exchange(64, 5, 11), Err(Ok(9)));
}

#[test]
fn targets_and_slots_outside_the_device_are_refused_before_a_request() {
    if !cpu_can_request() {
        return;
    }
    let scratch = Scratch::new("bounds");
    let spec = scratch.stand_in(2);
    let device = Arc::new(Device::open(&spec).unwrap());
    let mut c = client(&device, 1);
    assert_eq!(c.compare_exchange_weak(3, 0, 1), Err(McasError::BadTarget(3)));
    assert_eq!(c.compare_exchange_weak(64 << 10, 0, 1), Err(McasError::BadTarget(64 << 10)));
    assert!(matches!(McasClient::on(Link::Device(device), 2), Err(McasError::NoSuchSlot { slot: 2, slots: 2 })));
}

#[test]
fn threads_on_their_own_slots_lose_no_increment_of_a_shared_word() {
    if !cpu_can_request() {
        return;
    }
    let scratch = Scratch::new("threads");
    let device = Arc::new(Device::open(&scratch.stand_in(6)).unwrap());
    let per_thread = 500u64;
    std::thread::scope(|s| {
        for slot in 0..6 {
            let device = device.clone();
            s.spawn(move || {
                mcas_increment(&mut client(&device, slot), 0, per_thread, Cas::Weak).unwrap();
            });
        }
    });
    assert_eq!(client(&device, 0).load(0).unwrap(), 6 * per_thread);
}

#[test]
fn processes_each_with_a_stand_in_serialize_on_the_shared_memory() {
    if !cpu_can_request() {
        return;
    }
    let _g = serial();
    let scratch = Scratch::new("processes");
    let spec = scratch.stand_in(4);
    let per_child = 400u64;
    let mut children: Vec<_> = (0..3u32)
        .map(|slot| {
            let spec = spec.clone();
            fork_child("incrementer", move || {
                let device = Arc::new(Device::open(&spec).map_err(|e| e.to_string())?);
                mcas_increment(&mut client(&device, slot), 8, per_child, Cas::Strong)
            })
        })
        .collect();
    for c in &mut children {
        c.succeeds();
    }
    assert_eq!(file_word(&spec.memory, 8), 3 * per_child);
}

#[test]
fn a_forked_child_is_refused_the_parents_stand_in() {
    if !cpu_can_request() {
        return;
    }
    let _g = serial();
    let scratch = Scratch::new("fork");
    let device = Arc::new(Device::open(&scratch.stand_in(2)).unwrap());
    let parent = std::process::id();
    let mut child = fork_child("inheritor", move || match client(&device, 0).compare_exchange_weak(0, 0, 1) {
        Err(McasError::ForeignProcess(p)) if p == parent => Ok(()),
        other => Err(format!("expected ForeignProcess({parent}), got {other:?}")),
    });
    child.succeeds();
}

#[test]
fn a_request_is_one_line_in_the_wire_format_and_the_answer_one_load() {
    if !cpu_can_request() {
        return;
    }
    // A plain file in place of the register BAR: the request line lands in it, and the
    // "answer" is whatever the file holds in the sprd slot.
    let scratch = Scratch::new("wire");
    let spec = DeviceSpec { target_base: 0xdead_0000, ..scratch.register_file_device(2 * PAGE) };
    let registers = spec.registers.clone();
    let mut bytes = vec![0u8; 2 * PAGE as usize];
    let sprd3 = (PAGE + 3 * 128) as usize;
    bytes[sprd3..sprd3 + 8].copy_from_slice(&42u64.to_le_bytes());
    bytes[sprd3 + 8..sprd3 + 16].copy_from_slice(&1u64.to_le_bytes());
    std::fs::write(&registers, &bytes).unwrap();
    let device = Arc::new(Device::open(&spec).unwrap());
    let a = client(&device, 3).compare_exchange_weak(0x18, 7, 8).unwrap();
    assert!(a.success && a.prev == 42, "{a:?}");
    let spwr3 = 3 * 128;
    let line: Vec<u64> = (0..8).map(|i| file_word(&registers, spwr3 + 8 * i)).collect();
    assert_eq!(line, [7, 8, 0xdead_0018, 3, 0, 0, 0, 0]);
    // An error code in bits 8-15 of the answer's second word is the device's refusal.
    bytes[sprd3 + 8..sprd3 + 16].copy_from_slice(&(3u64 << 8).to_le_bytes());
    std::fs::write(&registers, &bytes).unwrap();
    assert_eq!(client(&device, 3).compare_exchange_weak(0x18, 7, 8), Err(McasError::Device(3)));
}

#[test]
fn a_register_file_shorter_than_the_slots_is_refused() {
    if !cpu_can_request() {
        return;
    }
    let scratch = Scratch::new("short");
    let spec = scratch.register_file_device(PAGE);
    assert!(matches!(Device::open(&spec), Err(MmioError::Io { .. })));
}

#[test]
fn the_stand_in_needs_a_page_per_slot() {
    let scratch = Scratch::new("stride");
    let spec = DeviceSpec { slot_stride: 128, sprd_offset: 4 * 128, ..scratch.stand_in(4) };
    assert!(matches!(Device::open(&spec), Err(MmioError::Unsupported(_))));
}

#[test]
fn a_no_hwcc_heap_on_a_device_keeps_its_hwcc_words_there_and_frees_remotely_through_it() {
    if !cpu_can_request() {
        return;
    }
    let scratch = Scratch::new("heap");
    let (spec, description) = scratch.heap_device(8 << 20);
    let dir = scratch.0.join("heap");
    let heap = Heap::create_at(&dir, &heap_config(Coherence::NoHwcc, &description)).unwrap();
    assert!(dir.join(cxlalloc::internal::DEVICE_FILE).exists() && !dir.join("mcas-window").exists());
    remote_free_ring(&heap, 4, 2000);
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    // Target 0, the small bracket's length word, was zeroed at creation and then grown through
    // the unit; the 0xff fill before the heap's part is untouched.
    let length = file_word(&spec.memory, spec.memory_offset);
    assert!(length != 0 && length & 0xffff_ffff != 0xffff_ffff, "length word {length:#x}");
    assert_eq!(file_word(&spec.memory, 0), u64::MAX);
}

#[test]
fn processes_open_a_device_heap_each_with_its_own_registers() {
    if !cpu_can_request() {
        return;
    }
    let _g = serial();
    let scratch = Scratch::new("heap-procs");
    let (_, description) = scratch.heap_device(8 << 20);
    let dir = scratch.0.join("heap");
    let heap = Heap::create_at(&dir, &heap_config(Coherence::NoHwcc, &description)).unwrap();
    let mut children: Vec<_> = (0..3usize)
        .map(|i| {
            let dir = dir.clone();
            fork_child("device heap worker", move || {
                let heap = Heap::open_at(&dir).ctx("open")?;
                let t = heap.attach().ctx("attach")?;
                let mut kept: Vec<_> =
                    (0..1500usize).map(|n| t.alloc(16 + n % 500)).collect::<Result<_, _>>().ctx("alloc")?;
                let last = kept.pop().ctx("a kept block")?;
                let offset = heap.offset_of(last.as_ptr()).ctx("offset")?.raw();
                heap.root(i).ctx("root")?.store(offset, std::sync::atomic::Ordering::Release);
                kept.into_iter().try_for_each(|p| t.free(p)).ctx("free")
            })
        })
        .collect();
    for c in &mut children {
        c.succeeds();
    }
    free_roots_and_check_empty(&heap, 3);
}

#[test]
fn a_device_too_small_for_the_heap_is_refused_and_nothing_is_created() {
    let scratch = Scratch::new("heap-small");
    let (_, description) = scratch.heap_device(PAGE);
    let dir = scratch.0.join("heap");
    let r = Heap::create_at(&dir, &heap_config(Coherence::NoHwcc, &description));
    assert!(matches!(&r, Err(OpenError::InvalidConfig(m)) if m.contains("needs")), "{r:?}");
    assert!(!dir.exists());
}

#[test]
fn a_device_serves_only_the_no_hwcc_model() {
    let scratch = Scratch::new("heap-model");
    let (_, description) = scratch.heap_device(8 << 20);
    let r = Heap::create_at(&scratch.0.join("heap"), &heap_config(Coherence::Limited, &description));
    assert!(matches!(r, Err(OpenError::InvalidConfig(_))), "{r:?}");
}
