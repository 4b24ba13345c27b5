//! A heap on a device (docs/design.md §2.4): one fixed-size object, here a plain file in
//! `/dev/shm` of the size a pod's device would have, formatted once and opened by every process.
//! The conformance shapes run on every shared backing (a heap directory and a device): several
//! processes × several threads (more threads than cores) allocating small, large and huge
//! blocks whose bytes another process checks and frees, a holder killed mid-workload and
//! recovered. Then what only a device does: bytes at their carved places, and devices that are
//! not heaps (never formatted, too small, damaged, of another heap, not a device at all). Not a
//! benchmark.

mod common;

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{fork_child, fork_code, serial, Ctx, Pipe, CHILD_DEADLINE};
use cxlalloc::{Bracket, Coherence, Config, Heap, Offset, OpenError};
use nix::sys::wait::WaitStatus;

/// A plain file standing in for a device; removed when dropped.
struct DevFile(PathBuf);

impl DevFile {
    /// A fresh file of `bytes` bytes (sparse: only what the heap touches takes memory).
    fn new(tag: &str, bytes: u64) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(format!("/dev/shm/cxlalloc-dev-{}-{n}-{tag}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(bytes).unwrap();
        DevFile(path)
    }

    /// A file exactly as big as a heap with `config` needs.
    fn sized_for(tag: &str, config: &Config) -> Self {
        Self::new(tag, Heap::device_bytes(config).unwrap())
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DevFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A small heap with a huge range: 16 GiB of huge address space (each thread that allocates a
/// huge block claims a 1 GiB slot of it) in a sparse file.
fn config() -> Config {
    Config { thread_slots: 64, huge_capacity: 16 << 30, ..Config::with_capacity(256 << 20) }
}

/// Gives this test process (and the children it forks) host number 0: a no-HWcc heap whose
/// mCAS window lies in a device needs one (`CXLALLOC_HOST`, docs/design.md §9.2).
fn on_host_zero() {
    std::env::set_var(cxlalloc::internal::HOST_ENV, "0");
}

fn wait_ok(mut child: common::Child, what: &str) {
    match child.wait(CHILD_DEADLINE) {
        WaitStatus::Exited(_, 0) => {}
        other => panic!("{what}: {other:?}"),
    }
}

/// The sizes every process allocates: small, large and huge (above 512 KiB).
const SIZES: [usize; 6] = [24, 200, 4096, 64 << 10, 700 << 10, 3 << 20];

/// Fills a block with words derived from its offset and `salt`; the first and last words are
/// enough to tell bytes apart, the whole block is written so every page is touched.
fn fill(p: NonNull<u8>, size: usize, off: u64, salt: u64) {
    // SAFETY: a fresh block of at least `size` bytes, 8-aligned.
    unsafe { common::fill(p.as_ptr(), size / 8 * 8, off, salt) };
}

fn verify(heap: &Heap, off: u64, size: usize, salt: u64) -> Result<(), String> {
    let p = heap.pointer(Offset::<u8>::from_raw(off)).ctx("pointer")?;
    // SAFETY: a live block of `size` bytes published by its writer.
    unsafe { common::verify(p.as_ptr(), size / 8 * 8, off, salt) }
}

/// Where the conformance shapes run: every backing a shared heap can have.
enum Backing {
    /// A heap directory in /dev/shm.
    Directory(common::HeapName),
    /// A device (a plain file standing in for one).
    Device(DevFile),
}

impl Backing {
    fn all(tag: &str) -> [Backing; 2] {
        [Backing::Directory(common::HeapName::new(tag)), Backing::Device(DevFile::sized_for(tag, &config()))]
    }

    fn create(&self) -> Heap {
        match self {
            Backing::Directory(name) => Heap::create(name.as_str(), &config()).unwrap(),
            Backing::Device(dev) => Heap::format_device(dev.path(), &config()).unwrap(),
        }
    }

    fn open(&self) -> Result<Heap, OpenError> {
        match self {
            Backing::Directory(name) => Heap::open(name.as_str()),
            Backing::Device(dev) => Heap::open_device(dev.path()),
        }
    }
}

#[test]
fn blocks_of_every_size_written_by_several_processes_are_read_and_freed_by_another() {
    let _g = serial();
    for backing in Backing::all("mp") {
        blocks_of_every_size_across_processes(&backing);
    }
}

/// The conformance shape: several processes × threads write blocks of every size, another
/// process checks every byte and frees them all, and the heap checks clean and empty.
fn blocks_of_every_size_across_processes(backing: &Backing) {
    let heap = backing.create();
    // 2 processes × 5 threads (more threads than this machine's cores), each thread one block
    // of every size, published in root `(process × threads + thread) × sizes + size index`.
    const PROCS: usize = 2;
    const THREADS: usize = 5;
    const BLOCKS: usize = PROCS * THREADS * SIZES.len();
    const _: () = assert!(BLOCKS <= Heap::ROOTS);
    let mut children = Vec::new();
    for p in 0..PROCS {
        children.push(fork_child(&format!("writer {p}"), || {
            let heap = backing.open().ctx("open")?;
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let heap = heap.clone();
                        s.spawn(move || -> Result<(), String> {
                            let th = heap.attach().ctx("attach")?;
                            for (k, &size) in SIZES.iter().enumerate() {
                                let b = th.alloc(size).ctx("alloc")?;
                                let off = heap.offset_of(b.as_ptr()).ctx("offset_of")?.raw();
                                fill(b, size, off, 7);
                                let root = (p * THREADS + t) * SIZES.len() + k;
                                heap.root(root).ctx("root")?.store(off, Ordering::Release);
                            }
                            Ok(())
                        })
                    })
                    .collect();
                handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            })
        }));
    }
    for (p, c) in children.into_iter().enumerate() {
        wait_ok(c, &format!("writer {p}"));
    }
    // This process never wrote a block: huge ones are mapped here lazily.
    let t = heap.attach().unwrap();
    for root in 0..BLOCKS {
        let size = SIZES[root % SIZES.len()];
        let off = heap.root(root).unwrap().load(Ordering::Acquire);
        assert_ne!(off, 0, "root {root} empty");
        verify(&heap, off, size, 7).unwrap();
        if let (Backing::Device(dev), true) = (backing, size <= 512 << 10) {
            // Slab data sits on the device at its heap offset (the carving keeps the
            // reservation's offsets up to the end of the data region).
            let mut word = [0u8; 8];
            let file = std::fs::File::open(dev.path()).unwrap();
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut word, off).unwrap();
            assert_eq!(u64::from_ne_bytes(word), common::pattern(off, 7), "block {off:#x} is not at its place");
        }
        t.free(heap.pointer(Offset::<u8>::from_raw(off)).unwrap()).unwrap();
    }
    drop(t);
    // The writers' slots are unheld now: their freed huge blocks (and descriptors) are
    // reclaimed by a sweep.
    heap.sweep_huge();
    let report = heap.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(Bracket::ALL.iter().map(|&b| report.bracket(b).live_blocks()).sum::<u64>(), 0);
    assert_eq!(report.huge.live, 0);
}

#[test]
fn a_huge_block_lives_in_the_devices_huge_range_and_no_other_file_is_made() {
    let _g = serial();
    let dev = DevFile::sized_for("huge", &config());
    let heap = Heap::format_device(dev.path(), &config()).unwrap();
    let before: Vec<_> = std::fs::read_dir("/dev/shm").unwrap().flatten().map(|e| e.file_name()).collect();
    let ready = Pipe::new();
    let path = dev.path().to_path_buf();
    let child = fork_child("huge writer", || {
        let heap = Heap::open_device(&path).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        // Two blocks: the second sits past the first in the huge range.
        for _ in 0..2 {
            let b = t.alloc(5 << 20).ctx("alloc")?;
            let off = heap.offset_of(b.as_ptr()).ctx("offset")?.raw();
            fill(b, 5 << 20, off, 11);
            ready.send_u64(off);
        }
        // The child leaves without closing the heap: its blocks stay live for the parent.
        Ok(())
    });
    let first = ready.recv_u64(CHILD_DEADLINE).expect("child published a block");
    let second = ready.recv_u64(CHILD_DEADLINE).expect("child published a block");
    verify(&heap, first, 5 << 20, 11).unwrap();
    verify(&heap, second, 5 << 20, 11).unwrap();
    wait_ok(child, "huge writer");
    // The first huge block of a fresh heap starts its huge range, which a full-coherence heap
    // carves last: each block's bytes are the device file's at its place in that range.
    let range = Heap::device_bytes(&config()).unwrap() - config().huge_capacity;
    let file = std::fs::File::open(dev.path()).unwrap();
    for off in [first, second] {
        let mut word = [0u8; 8];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut word, range + (off - first) + 8).unwrap();
        assert_eq!(u64::from_ne_bytes(word), common::pattern(off + 8, 11), "block {off:#x} is not at its place");
    }
    let after: Vec<_> = std::fs::read_dir("/dev/shm").unwrap().flatten().map(|e| e.file_name()).collect();
    // Other tests of this binary make their device files meanwhile (`DevFile`): not huge blocks.
    let ours = format!("cxlalloc-dev-{}-", std::process::id());
    let made: Vec<_> =
        after.iter().filter(|n| !before.contains(n) && !n.to_string_lossy().starts_with(&ours)).collect();
    assert!(made.is_empty(), "a huge block made files: {made:?}");
    let t = heap.attach().unwrap();
    for off in [first, second] {
        t.free(heap.pointer(Offset::<u8>::from_raw(off)).unwrap()).unwrap();
    }
    drop(t);
    assert!(heap.check().is_clean());
}

#[test]
fn a_freed_huge_range_is_reused_from_the_device_by_the_next_allocation() {
    let dev = DevFile::sized_for("reuse", &config());
    let heap = Heap::format_device(dev.path(), &config()).unwrap();
    let t = heap.attach().unwrap();
    let a = t.alloc(4 << 20).unwrap();
    let off = heap.offset_of(a.as_ptr()).unwrap().raw();
    fill(a, 4 << 20, off, 3);
    t.free(a).unwrap();
    let b = t.alloc(4 << 20).unwrap();
    assert_eq!(heap.offset_of(b.as_ptr()).unwrap().raw(), off, "the range was not reused");
    fill(b, 4 << 20, off, 4);
    verify(&heap, off, 4 << 20, 4).unwrap();
    t.free(b).unwrap();
    drop(t);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

#[test]
fn a_holder_killed_mid_workload_is_recovered_and_the_heap_checks_clean() {
    let _g = serial();
    for backing in Backing::all("crash") {
        killed_holder_recovered(&backing);
    }
}

/// The conformance shape: a holder allocating and freeing blocks of every size is killed, and
/// another process recovers its slot.
fn killed_holder_recovered(backing: &Backing) {
    let heap = backing.create();
    let ready = Pipe::new();
    let mut child = fork_child("victim", || {
        let heap = backing.open().ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        let mut live = Vec::new();
        let mut n = 0usize;
        loop {
            let size = SIZES[n % SIZES.len()];
            live.push(t.alloc(size).ctx("alloc")?);
            if live.len() > 40 {
                t.free(live.remove(n % 40)).ctx("free")?;
            }
            n += 1;
            if n == 200 {
                ready.send_u64(1);
            }
        }
    });
    assert_eq!(ready.recv_u64(CHILD_DEADLINE), Some(1));
    nix::sys::signal::kill(child.pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(matches!(child.wait(CHILD_DEADLINE), WaitStatus::Signaled(..)));
    assert_eq!(heap.dead_slots().len(), 1);
    let reports = heap.recover_dead();
    assert_eq!(reports.len(), 1);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    assert!(heap.dead_slots().is_empty());
    // The dead holder's blocks are still live (nobody freed them) and the heap goes on.
    let t = heap.attach().unwrap();
    let b = t.alloc(3 << 20).unwrap();
    t.free(b).unwrap();
}

#[test]
fn a_limited_coherence_heap_on_a_device_is_shared_by_processes() {
    let _g = serial();
    let config = Config { coherence: Coherence::Limited, huge_capacity: 0, ..config() };
    let dev = DevFile::sized_for("limited", &config);
    let heap = Heap::format_device(dev.path(), &config).unwrap();
    let path = dev.path().to_path_buf();
    let child = fork_child("limited writer", || {
        let heap = Heap::open_device(&path).ctx("open")?;
        let t = heap.attach().ctx("attach")?;
        for i in 0..Heap::ROOTS {
            let size = SIZES[i % 4];
            let b = t.alloc(size).ctx("alloc")?;
            let off = heap.offset_of(b.as_ptr()).ctx("offset")?.raw();
            fill(b, size, off, 5);
            heap.root(i).ctx("root")?.store(off, Ordering::Release);
        }
        Ok(())
    });
    wait_ok(child, "limited writer");
    let t = heap.attach().unwrap();
    for i in 0..Heap::ROOTS {
        let off = heap.root(i).unwrap().load(Ordering::Acquire);
        verify(&heap, off, SIZES[i % 4], 5).unwrap();
        t.free(heap.pointer(Offset::<u8>::from_raw(off)).unwrap()).unwrap();
    }
    drop(t);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
}

#[test]
fn a_no_hwcc_heap_on_a_device_runs_through_the_window_carved_in_it() {
    on_host_zero();
    let config = Config { coherence: Coherence::NoHwcc, huge_capacity: 0, thread_slots: 8, ..config() };
    let dev = DevFile::sized_for("nohwcc", &config);
    let heap = Heap::format_device(dev.path(), &config).unwrap();
    let device = common::Device::serve_device(dev.path(), Duration::ZERO);
    common::remote_free_ring(&heap, 3, 200);
    let r = heap.check();
    let requests = device.stop();
    assert!(r.is_clean(), "{r}");
    assert!(requests > 0, "no CAS went through the device's window");
}

#[test]
fn a_device_window_served_from_another_host_lets_threads_attach() {
    on_host_zero();
    let config = Config { coherence: Coherence::NoHwcc, huge_capacity: 0, thread_slots: 8, ..config() };
    let dev = DevFile::sized_for("remote-server", &config);
    let heap = Heap::format_device(dev.path(), &config).unwrap();
    let device = common::Device::serve_device(dev.path(), Duration::ZERO);
    // The window's server word now names a process of another host (a pid above this host's
    // pid_max): only that host could judge it, so the word alone says the window is served.
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(dev.path()).unwrap();
    let mut magic = [0u8; 8];
    let window_at = (0..Heap::device_bytes(&config).unwrap())
        .step_by(2 << 20)
        .find(|&at| f.read_exact_at(&mut magic, at).is_ok() && &magic == b"CXLMCAS1")
        .expect("the device carries an mCAS window");
    f.write_all_at(&0x3fff_fff0u64.to_le_bytes(), window_at + 24).unwrap();
    let t = heap.attach().unwrap();
    let b = t.alloc(100).unwrap();
    t.free(b).unwrap();
    drop(t);
    assert!(device.stop() > 0, "no CAS went through the device's window");
}

#[test]
fn a_no_hwcc_device_heap_is_refused_to_a_process_without_a_host_number() {
    on_host_zero();
    let config = Config { coherence: Coherence::NoHwcc, huge_capacity: 0, thread_slots: 8, ..config() };
    let dev = DevFile::sized_for("no-host", &config);
    let _heap = Heap::format_device(dev.path(), &config).unwrap();
    let path = dev.path().to_path_buf();
    let child = fork_child("opener without a host number", move || {
        std::env::remove_var(cxlalloc::internal::HOST_ENV);
        match Heap::open_device(&path) {
            Err(e @ OpenError::HostNumber(_)) if e.to_string().contains(cxlalloc::internal::HOST_ENV) => Ok(()),
            Err(e) => Err(format!("refused for another reason: {e}")),
            Ok(_) => Err("opened without a host number".into()),
        }
    });
    wait_ok(child, "opener without a host number");
}

#[test]
fn a_device_that_was_never_formatted_holds_no_heap() {
    let dev = DevFile::new("blank", 64 << 20);
    assert!(matches!(Heap::open_device(dev.path()), Err(OpenError::NotFormatted(_))));
}

#[test]
fn format_refuses_a_device_smaller_than_the_heap_and_names_both_sizes() {
    let need = Heap::device_bytes(&config()).unwrap();
    let dev = DevFile::new("small", need - (2 << 20));
    match Heap::format_device(dev.path(), &config()) {
        Err(OpenError::DeviceTooSmall { needed, actual, .. }) => {
            assert_eq!((needed, actual), (need, need - (2 << 20)));
        }
        other => panic!("{other:?}"),
    }
    // Nothing was written: the device is still unformatted.
    assert!(matches!(Heap::open_device(dev.path()), Err(OpenError::NotFormatted(_))));
}

#[test]
fn a_device_cut_shorter_than_its_carving_is_truncated() {
    let dev = DevFile::sized_for("cut", &config());
    drop(Heap::format_device(dev.path(), &config()).unwrap());
    let f = std::fs::OpenOptions::new().write(true).open(dev.path()).unwrap();
    f.set_len(Heap::device_bytes(&config()).unwrap() - (2 << 20)).unwrap();
    assert!(matches!(Heap::open_device(dev.path()), Err(OpenError::Truncated { .. })));
}

/// Flips one bit of the byte at `at` of the device.
fn flip(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, at).unwrap();
}

#[test]
fn a_damaged_header_or_label_is_refused() {
    let dev = DevFile::sized_for("damaged", &config());
    drop(Heap::format_device(dev.path(), &config()).unwrap());
    flip(dev.path(), 100);
    assert!(matches!(Heap::open_device(dev.path()), Err(OpenError::Checksum(_))));
    flip(dev.path(), 100);
    Heap::open_device(dev.path()).unwrap();
    // The label, past the header in the first page.
    flip(dev.path(), 2048 + 40);
    assert!(matches!(Heap::open_device(dev.path()), Err(OpenError::Checksum(_))));
}

#[test]
fn a_label_of_another_heap_is_foreign() {
    use std::os::unix::fs::FileExt;
    let a = DevFile::sized_for("a", &config());
    let b = DevFile::sized_for("b", &config());
    drop(Heap::format_device(a.path(), &config()).unwrap());
    drop(Heap::format_device(b.path(), &config()).unwrap());
    let mut label = vec![0u8; 2048];
    std::fs::File::open(b.path()).unwrap().read_exact_at(&mut label, 2048).unwrap();
    std::fs::OpenOptions::new().write(true).open(a.path()).unwrap().write_all_at(&label, 2048).unwrap();
    assert!(matches!(Heap::open_device(a.path()), Err(OpenError::ForeignRegion { .. })));
}

#[test]
fn a_directory_a_heap_directorys_header_and_a_non_dax_device_are_not_devices() {
    let name = common::HeapName::new("dir");
    drop(Heap::create(name.as_str(), &Config::with_capacity(16 << 20)).unwrap());
    let dir = Heap::path_of(name.as_str()).unwrap();
    assert!(matches!(Heap::open_device(&dir), Err(OpenError::NotADevice { .. })));
    assert!(matches!(Heap::open_device(&dir.join("header")), Err(OpenError::NotADevice { .. })));
    assert!(matches!(Heap::format_device(Path::new("/dev/null"), &config()), Err(OpenError::NotADevice { .. })));
    assert!(matches!(Heap::open_device(Path::new("/nonexistent/dax9.9")), Err(OpenError::NotFound(_))));
}

#[test]
fn formatting_again_gives_a_fresh_heap() {
    let dev = DevFile::sized_for("again", &config());
    let heap = Heap::format_device(dev.path(), &config()).unwrap();
    let t = heap.attach().unwrap();
    let b = t.alloc(100).unwrap();
    heap.root(0).unwrap().store(heap.offset_of(b.as_ptr()).unwrap().raw(), Ordering::Release);
    drop(t);
    drop(heap);
    let heap = Heap::format_device(dev.path(), &config()).unwrap();
    assert_eq!(heap.root(0).unwrap().load(Ordering::Acquire), 0);
    let r = heap.check();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.bracket(Bracket::Small).live_blocks(), 0);
}

// --- Host numbers of a pod (docs/design.md §9.2) ------------------------------------------------
//
// Two kernels do not see each other's byte locks, so a window shared by kernels keeps a claim per
// host number naming the claiming kernel (its boot id, hashed). One machine has one kernel: a
// forked child that calls `pretend_kernel` plays a host of another (its byte locks still meet
// this kernel's, which only makes it lease a different requester of the number's share; what is
// tested is the claim).

/// A no-HWcc heap device, formatted and left closed (no claim held).
fn no_hwcc_device(tag: &str) -> DevFile {
    let config = Config { coherence: Coherence::NoHwcc, huge_capacity: 0, thread_slots: 8, ..config() };
    let dev = DevFile::sized_for(tag, &config);
    drop(Heap::format_device(dev.path(), &Config { host: Some(0), ..config }).unwrap());
    dev
}

/// Runs `body` in a child that plays the host of kernel `boot_id` (None: this kernel), with no
/// `CXLALLOC_HOST`; waits for it to exit 0.
fn as_kernel(what: &str, boot_id: Option<&str>, body: impl FnOnce() -> Result<(), String>) {
    let mut child = fork_child(what, || {
        std::env::remove_var(cxlalloc::internal::HOST_ENV);
        if let Some(b) = boot_id {
            cxlalloc::internal::mcas::pretend_kernel(b);
        }
        body()
    });
    child.succeeds();
}

/// The fingerprint a window records for boot id `b`, as a child that pretends it computes it.
fn kernel_of(b: &str) -> u64 {
    let pipe = Pipe::new();
    let mut child = fork_code("kernel fingerprint", || {
        cxlalloc::internal::mcas::pretend_kernel(b);
        pipe.send_u64(cxlalloc::internal::mcas::kernel());
        0
    });
    child.succeeds();
    pipe.recv_u64(CHILD_DEADLINE).expect("the child's fingerprint")
}

#[test]
fn a_second_kernel_given_a_host_number_another_kernel_holds_is_refused_naming_both() {
    let _g = serial();
    let dev = no_hwcc_device("dup-host");
    let me = cxlalloc::internal::mcas::kernel();
    let other = kernel_of("another-boot");
    // This kernel holds host number 0 while the heap is open here.
    let heap = Heap::open_device_as(dev.path(), 0).unwrap();
    let path = dev.path().to_path_buf();
    as_kernel("second kernel with number 0", Some("another-boot"), || match Heap::open_device_as(&path, 0) {
        Err(e @ OpenError::HostNumberTaken { number: 0, claimant, kernel, .. })
            if claimant == me && kernel == other =>
        {
            let msg = e.to_string();
            let names_both = msg.contains(&format!("{me:#018x}")) && msg.contains(&format!("{other:#018x}"));
            if names_both {
                Ok(())
            } else {
                Err(format!("the refusal does not name both kernels: {msg}"))
            }
        }
        Err(e) => Err(format!("refused for another reason: {e:?}")),
        Ok(_) => Err("a second kernel opened the heap with a host number this kernel holds".into()),
    });
    // The same kernel under another number is let in, and its threads run through the window.
    let device = common::Device::serve_device(dev.path(), Duration::ZERO);
    as_kernel("second kernel with number 1", Some("another-boot"), || {
        let heap = Heap::open_device_as(&path, 1).ctx("open as host 1")?;
        let t = heap.attach().ctx("attach")?;
        let b = t.alloc(64).ctx("alloc")?;
        t.free(b).ctx("free")
    });
    drop(device);
    drop(heap);
}

#[test]
fn a_host_number_is_freed_when_the_last_process_of_its_kernel_closes() {
    let _g = serial();
    let dev = no_hwcc_device("host-freed");
    let path = dev.path().to_path_buf();
    let first = Heap::open_device_as(dev.path(), 0).unwrap();
    let second = Heap::open_device_as(dev.path(), 0).unwrap();
    drop(first);
    // One process of this kernel still has it: still this kernel's.
    as_kernel("other kernel while one process remains", Some("another-boot"), || {
        match Heap::open_device_as(&path, 0) {
            Err(OpenError::HostNumberTaken { .. }) => Ok(()),
            other => Err(format!("expected HostNumberTaken, got {:?}", other.map(|_| ()))),
        }
    });
    drop(second);
    as_kernel("other kernel after the last close", Some("another-boot"), || {
        Heap::open_device_as(&path, 0).map(drop).ctx("open as host 0")
    });
}

#[test]
fn a_killed_holder_leaves_its_number_to_its_kernel_until_an_operator_frees_it() {
    let _g = serial();
    let dev = no_hwcc_device("host-stale");
    let path = dev.path().to_path_buf();
    let me = cxlalloc::internal::mcas::kernel();
    // A process of this kernel takes number 0 and is killed with the heap open.
    let ready = Pipe::new();
    let mut holder = fork_child("holder", || {
        std::env::remove_var(cxlalloc::internal::HOST_ENV);
        let _heap = Heap::open_device_as(&path, 0).ctx("open")?;
        ready.send_u64(1);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    assert_eq!(ready.recv_u64(CHILD_DEADLINE), Some(1), "the holder opened the heap");
    nix::sys::signal::kill(holder.pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    assert_eq!(holder.killed_by(), nix::sys::signal::Signal::SIGKILL);
    // A restarted process of the same kernel takes the number again (and closes, freeing it).
    as_kernel("restarted process of the same kernel", None, || Heap::open_device_as(&path, 0).map(drop).ctx("open"));
    // Killed again: the claim stays this kernel's, and another kernel cannot judge that.
    let ready = Pipe::new();
    let mut holder = fork_child("holder again", || {
        std::env::remove_var(cxlalloc::internal::HOST_ENV);
        let _heap = Heap::open_device_as(&path, 0).ctx("open")?;
        ready.send_u64(1);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    assert_eq!(ready.recv_u64(CHILD_DEADLINE), Some(1), "the holder opened the heap");
    nix::sys::signal::kill(holder.pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    assert_eq!(holder.killed_by(), nix::sys::signal::Signal::SIGKILL);
    as_kernel("rebooted host, before the operator", Some("rebooted-boot"), || match Heap::open_device_as(&path, 0) {
        Err(OpenError::HostNumberTaken { claimant, .. }) if claimant == me => Ok(()),
        other => Err(format!("expected HostNumberTaken by {me:#x}, got {:?}", other.map(|_| ()))),
    });
    // The operator, on the rebooted host itself, frees it by name: a wrong name frees nothing.
    as_kernel("operator", Some("rebooted-boot"), || {
        match Heap::free_host_number(&path, 0, me ^ 1) {
            Err(OpenError::HostNumber(_)) => {}
            other => return Err(format!("a claim named wrongly was not refused: {other:?}")),
        }
        match Heap::free_host_number(&path, 0, me) {
            Ok(true) => {}
            other => return Err(format!("freeing the stale claim: {other:?}")),
        }
        match Heap::free_host_number(&path, 0, me) {
            Ok(false) => Ok(()),
            other => Err(format!("a repeated free is not a no-op: {other:?}")),
        }
    });
    as_kernel("rebooted host, after the operator", Some("rebooted-boot"), || {
        Heap::open_device_as(&path, 0).map(drop).ctx("open")
    });
}

#[test]
fn an_operator_cannot_free_its_own_kernels_host_number() {
    let _g = serial();
    let dev = no_hwcc_device("host-own");
    let heap = Heap::open_device_as(dev.path(), 0).unwrap();
    let me = cxlalloc::internal::mcas::kernel();
    assert!(matches!(Heap::free_host_number(dev.path(), 0, me), Err(OpenError::HostNumber(_))));
    drop(heap);
}

#[test]
fn a_configured_host_number_opens_a_device_window_without_the_environment() {
    let _g = serial();
    let dev = no_hwcc_device("host-config");
    let path = dev.path().to_path_buf();
    as_kernel("configured number", None, || {
        if !matches!(Heap::open_device(&path), Err(OpenError::HostNumber(_))) {
            return Err("opened without any host number".into());
        }
        Heap::open_device_as(&path, 5).map(drop).ctx("open as host 5")
    });
}

#[test]
fn a_configured_host_number_that_differs_from_the_environments_is_refused_naming_both() {
    let _g = serial();
    let dev = no_hwcc_device("host-conflict");
    let path = dev.path().to_path_buf();
    as_kernel("conflicting numbers", None, || {
        std::env::set_var(cxlalloc::internal::HOST_ENV, "2");
        match Heap::open_device_as(&path, 3) {
            Err(e @ OpenError::HostNumber(_)) => {
                let msg = e.to_string();
                if msg.contains(cxlalloc::internal::HOST_ENV) && msg.contains('2') && msg.contains('3') {
                    Ok(())
                } else {
                    Err(format!("the refusal does not name both: {msg}"))
                }
            }
            other => Err(format!("expected HostNumber, got {:?}", other.map(|_| ()))),
        }?;
        // The same number in both is no conflict.
        Heap::open_device_as(&path, 2).map(drop).ctx("open as host 2 with CXLALLOC_HOST=2")
    });
}

#[test]
fn a_host_number_outside_the_pods_range_is_refused() {
    let dev = no_hwcc_device("host-range");
    assert!(matches!(Heap::open_device_as(dev.path(), 8), Err(OpenError::HostNumber(_))));
    let bad = Config { host: Some(8), ..config() };
    assert!(matches!(bad.validate(), Err(OpenError::HostNumber(_))));
}

#[test]
fn formatting_a_plain_file_gives_it_the_heaps_mode_whatever_it_had() {
    use std::os::unix::fs::PermissionsExt;
    for (had, mode) in [(0o644, 0o660), (0o600, 0o666), (0o666, 0o600)] {
        let dev = DevFile::sized_for("mode", &config());
        std::fs::set_permissions(dev.path(), std::fs::Permissions::from_mode(had)).unwrap();
        let heap = Heap::format_device(dev.path(), &Config { mode, ..config() }).unwrap();
        let now = std::fs::metadata(dev.path()).unwrap().permissions().mode() & 0o7777;
        assert_eq!(now, mode, "a file of mode {had:#o} formatted with mode {mode:#o}");
        assert_eq!(heap.config().mode, mode);
    }
}
