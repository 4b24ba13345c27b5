//! Heap files, owners and names (docs/design.md §2.3, §11): every file a heap creates has the
//! heap's mode whatever the umask (default private), another user's huge block is mapped, not a
//! `SIGSEGV`, an opener gets only files of the heap it opened, and heap names follow one
//! grammar.
//!
//! The tests that act as another user need root (they fork a child that calls `setuid(65534)`)
//! and say so on stderr when they cannot run. Every test here holds `serial()`: some set the
//! process-wide umask, and the others fork.
#![cfg(not(miri))]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use common::{fork_child, serial, HeapName, CHILD_DEADLINE};
use cxlalloc::{Coherence, Config, Heap, OpenError};
use nix::sys::stat::{umask, Mode};
use nix::unistd::{chown, setgid, setuid, Gid, Uid};

/// The unprivileged user the other-user tests act as.
const NOBODY: u32 = 65534;

/// A unique heap directory path under /tmp (not created), removed on drop with its parent.
struct TempHeapDir {
    parent: PathBuf,
    path: PathBuf,
}

impl TempHeapDir {
    /// A fresh parent directory (mode 0777, so another user may create in it) and the heap path
    /// `leaf` inside it.
    fn new(tag: &str, leaf: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let parent = std::env::temp_dir().join(format!("cxlalloc-perm-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&parent);
        std::fs::create_dir(&parent).unwrap();
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o777)).unwrap();
        let path = parent.join(leaf);
        TempHeapDir { parent, path }
    }
}

impl Drop for TempHeapDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.parent);
    }
}

fn small(mode: u32) -> Config {
    Config { mode, huge_capacity: 4 << 30, ..Config::with_capacity(8 << 20) }
}

/// Permission bits of `path`.
fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Every entry of the heap directory at `dir`, with its permission bits.
fn file_modes(dir: &Path) -> Vec<(String, u32)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), mode_of(&e.path())))
        .collect();
    v.sort();
    v
}

/// Sets the umask for the life of the guard.
struct Umask(Mode);

impl Umask {
    fn set(bits: u32) -> Self {
        Umask(umask(Mode::from_bits_truncate(bits)))
    }
}

impl Drop for Umask {
    fn drop(&mut self) {
        umask(self.0);
    }
}

fn is_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("skipped: acting as another user needs root");
    false
}

/// In a forked child: become `NOBODY`, then run `body`.
fn as_nobody(what: &str, body: impl FnOnce() -> Result<(), String>) -> common::Child {
    fork_child(what, move || {
        setgid(Gid::from_raw(NOBODY)).map_err(|e| format!("setgid: {e}"))?;
        setuid(Uid::from_raw(NOBODY)).map_err(|e| format!("setuid: {e}"))?;
        body()
    })
}

/// Allocates a 1 MiB huge block and stamps it; returns its offset.
fn huge_block(heap: &Heap) -> u64 {
    let t = heap.attach().unwrap();
    let p = t.alloc(1 << 20).unwrap();
    // SAFETY: a fresh 1 MiB block of ours.
    unsafe { std::ptr::write_bytes(p.as_ptr(), 0x5a, 1 << 20) };
    heap.offset_of(p.as_ptr()).unwrap().raw()
}

/// In this process: reads the stamped huge block at `off` (its first touch here faults it in).
fn read_huge_block(heap: &Heap, off: u64) -> Result<(), String> {
    let p = heap.pointer(cxlalloc::Offset::<u8>::from_raw(off)).map_err(|e| e.to_string())?;
    // SAFETY: a live 1 MiB block; read only.
    let last = unsafe { p.as_ptr().add((1 << 20) - 1).read_volatile() };
    if last == 0x5a {
        Ok(())
    } else {
        Err(format!("huge block byte is {last:#x}"))
    }
}

// ---- Item 3: modes ------------------------------------------------------------------------

#[test]
fn a_new_heap_is_private_whatever_the_umask() {
    let _serial = serial();
    let dir = TempHeapDir::new("private", "heap");
    let _umask = Umask::set(0);
    let heap = Heap::create_at(&dir.path, &small(Config::default().mode)).unwrap();
    huge_block(&heap);
    assert_eq!(mode_of(&dir.path), 0o700, "the heap directory");
    let files = file_modes(&dir.path);
    assert!(files.iter().any(|(n, _)| n.starts_with("huge-")), "a huge object was created: {files:?}");
    assert!(files.iter().all(|&(_, m)| m == 0o600), "every file 0600: {files:?}");
}

#[test]
fn a_group_mode_is_applied_to_every_file_and_the_directory() {
    let _serial = serial();
    let dir = TempHeapDir::new("group", "heap");
    let _umask = Umask::set(0o077);
    let heap = Heap::create_at(&dir.path, &small(0o660)).unwrap();
    huge_block(&heap);
    assert_eq!(mode_of(&dir.path), 0o770);
    let files = file_modes(&dir.path);
    assert!(files.iter().any(|(n, _)| n.starts_with("huge-")), "a huge object was created: {files:?}");
    assert!(files.iter().all(|&(_, m)| m == 0o660), "every file 0660: {files:?}");
    assert_eq!(heap.config().mode, 0o660, "the header records the mode");
}

#[test]
fn the_mcas_window_gets_the_heap_mode() {
    let _serial = serial();
    let dir = TempHeapDir::new("window", "heap");
    let _umask = Umask::set(0);
    let config = Config { coherence: Coherence::NoHwcc, huge_capacity: 0, mode: 0o640, ..small(0o640) };
    drop(Heap::create_at(&dir.path, &config).unwrap());
    assert_eq!(mode_of(&dir.path.join(cxlalloc::internal::WINDOW_FILE)), 0o640);
    assert_eq!(mode_of(&dir.path), 0o750);
}

#[test]
fn a_mode_other_than_read_write_with_the_owners_is_refused() {
    for bad in [0o700, 0o4600, 0o1600, 0o400, 0o200, 0o060, 0o611] {
        let r = Config { mode: bad, ..Config::default() }.validate();
        assert!(matches!(r, Err(OpenError::InvalidConfig(_))), "{bad:#o}: {r:?}");
    }
    for good in [0o600, 0o640, 0o660, 0o666] {
        assert!(Config { mode: good, ..Config::default() }.validate().is_ok(), "{good:#o}");
    }
}

#[test]
fn a_region_with_another_mode_is_refused_naming_it() {
    let _serial = serial();
    let dir = TempHeapDir::new("mixed-mode", "heap");
    drop(Heap::create_at(&dir.path, &small(0o600)).unwrap());
    let data = dir.path.join("data");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o644)).unwrap();
    match Heap::open_at(&dir.path) {
        Err(OpenError::MixedPermissions { path, .. }) => assert_eq!(path, data),
        r => panic!("expected MixedPermissions, got {r:?}"),
    }
}

#[test]
fn a_region_with_another_owner_is_refused_naming_it() {
    let _serial = serial();
    if !is_root() {
        return;
    }
    let dir = TempHeapDir::new("mixed-owner", "heap");
    drop(Heap::create_at(&dir.path, &small(0o600)).unwrap());
    let owned = dir.path.join("owned");
    chown(&owned, Some(Uid::from_raw(NOBODY)), None).unwrap();
    match Heap::open_at(&dir.path) {
        Err(OpenError::MixedPermissions { path, what }) => {
            assert_eq!(path, owned);
            assert!(what.contains(&NOBODY.to_string()), "{what}");
        }
        r => panic!("expected MixedPermissions, got {r:?}"),
    }
}

#[test]
fn a_heap_this_user_may_not_open_is_permission_denied() {
    let _serial = serial();
    if !is_root() {
        return;
    }
    let dir = TempHeapDir::new("denied", "heap");
    let _umask = Umask::set(0);
    let _heap = Heap::create_at(&dir.path, &small(0o600)).unwrap();
    let path = dir.path.clone();
    as_nobody("open a private heap", move || match Heap::open_at(&path) {
        Err(OpenError::PermissionDenied { path: p }) if p == path => Ok(()),
        r => Err(format!("expected PermissionDenied naming {}, got {r:?}", path.display())),
    })
    .succeeds();
}

#[test]
fn unlinking_a_heap_this_user_may_not_open_is_permission_denied_not_not_found() {
    let _serial = serial();
    if !is_root() {
        return;
    }
    let dir = TempHeapDir::new("unlink-denied", "heap");
    let _heap = Heap::create_at(&dir.path, &small(0o600)).unwrap();
    let path = dir.path.clone();
    as_nobody("unlink a private heap", move || match Heap::unlink_at(&path) {
        Err(OpenError::PermissionDenied { path: p }) if p == path => Ok(()),
        r => Err(format!("expected PermissionDenied naming {}, got {r:?}", path.display())),
    })
    .succeeds();
    assert!(dir.path.join("header").exists(), "the heap is still there");
}

#[test]
fn the_survey_of_a_heap_this_user_may_not_open_is_permission_denied() {
    let _serial = serial();
    if !is_root() {
        return;
    }
    let dir = TempHeapDir::new("survey-denied", "heap");
    let _heap = Heap::create_at(&dir.path, &small(0o600)).unwrap();
    let path = dir.path.clone();
    as_nobody("survey a private heap", move || match Heap::info_at(&path) {
        Err(OpenError::PermissionDenied { .. }) => Ok(()),
        r => Err(format!("expected PermissionDenied, got {:?}", r.map(|i| i.path))),
    })
    .succeeds();
}

#[test]
fn a_heap_directory_reached_through_a_symbolic_link_is_refused_by_open_and_survey_alike() {
    let _serial = serial();
    let dir = TempHeapDir::new("dir-link", "heap");
    let _heap = Heap::create_at(&dir.path, &small(0o600)).unwrap();
    let link = dir.parent.join("link");
    std::os::unix::fs::symlink(&dir.path, &link).unwrap();
    let opened = Heap::open_at(&link).map(|_| ()).unwrap_err().to_string();
    assert!(opened.contains("symbolic link"), "open says why: {opened}");
    let surveyed = Heap::info_at(&link).map(|i| i.path).unwrap_err().to_string();
    assert_eq!(surveyed, opened, "the survey refuses what an open refuses");
}

#[test]
fn unlink_leaves_a_directory_whose_header_file_is_not_a_heaps_alone() {
    let dir = TempHeapDir::new("unlink-not-heap", "project");
    std::fs::create_dir(&dir.path).unwrap();
    std::fs::write(dir.path.join("header"), "a C header, say\n").unwrap();
    std::fs::write(dir.path.join("precious.txt"), "keep me").unwrap();
    match Heap::unlink_at(&dir.path) {
        Err(OpenError::BadMagic(p)) => assert_eq!(p, dir.path.join("header")),
        r => panic!("expected BadMagic naming the header file, got {r:?}"),
    }
    assert!(dir.path.join("precious.txt").exists(), "nothing was removed");
}

// ---- Item 4: another user's huge blocks ---------------------------------------------------

#[test]
fn a_huge_block_root_makes_in_another_users_heap_is_mapped_by_that_user() {
    let _serial = serial();
    if !is_root() {
        return;
    }
    let dir = TempHeapDir::new("root-huge", "heap");
    let path = dir.path.clone();
    as_nobody("create the heap", move || Heap::create_at(&path, &small(0o600)).map(drop).map_err(|e| e.to_string()))
        .succeeds();
    // Root (this process) allocates a huge block in nobody's heap.
    let heap = Heap::open_at(&dir.path).unwrap();
    let off = huge_block(&heap);
    let object = file_modes(&dir.path).into_iter().find(|(n, _)| n.starts_with("huge-")).unwrap().0;
    let meta = std::fs::metadata(dir.path.join(&object)).unwrap();
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o7777), (NOBODY, NOBODY, 0o600), "{object}");
    let path = dir.path.clone();
    let mut child = as_nobody("touch root's huge block", move || {
        let heap = Heap::open_at(&path).map_err(|e| e.to_string())?;
        let _t = heap.attach().map_err(|e| e.to_string())?;
        read_huge_block(&heap, off)
    });
    match child.wait(CHILD_DEADLINE) {
        nix::sys::wait::WaitStatus::Exited(_, 0) => {}
        other => panic!("nobody's first touch of root's huge block: {other:?}"),
    }
}

#[test]
fn a_heap_shared_with_every_user_admits_another_users_huge_blocks() {
    let _serial = serial();
    if !is_root() {
        return;
    }
    let dir = TempHeapDir::new("shared-huge", "heap");
    let _umask = Umask::set(0o022);
    let heap = Heap::create_at(&dir.path, &small(0o666)).unwrap();
    let off = huge_block(&heap);
    let path = dir.path.clone();
    as_nobody("use a shared heap", move || {
        let heap = Heap::open_at(&path).map_err(|e| e.to_string())?;
        read_huge_block(&heap, off)?;
        let mine = huge_block(&heap);
        heap.root(0).ok_or("root 0")?.store(mine, Ordering::Release);
        Ok(())
    })
    .succeeds();
    let theirs = heap.root(0).unwrap().load(Ordering::Acquire);
    read_huge_block(&heap, theirs).unwrap();
    let files = file_modes(&dir.path);
    assert!(files.iter().all(|&(_, m)| m == 0o666), "every file 0666: {files:?}");
}

#[test]
fn the_checker_names_a_huge_object_whose_mode_was_changed() {
    let _serial = serial();
    let dir = TempHeapDir::new("check-huge", "heap");
    let heap = Heap::create_at(&dir.path, &small(0o600)).unwrap();
    let off = huge_block(&heap);
    let clean = heap.check();
    assert!(clean.is_clean(), "{clean}");
    let object = file_modes(&dir.path).into_iter().find(|(n, _)| n.starts_with("huge-")).unwrap().0;
    std::fs::set_permissions(dir.path.join(&object), std::fs::Permissions::from_mode(0o644)).unwrap();
    let report = heap.check().to_string();
    assert!(report.contains(&format!("huge block at {off:#x}: backing object")), "{report}");
    assert!(report.contains("mode 0o644"), "{report}");
}

// ---- Item 5: identity ---------------------------------------------------------------------

#[test]
fn a_region_file_of_another_heap_is_refused_naming_it() {
    let _serial = serial();
    let a = TempHeapDir::new("swap-a", "heap");
    let b = TempHeapDir::new("swap-b", "heap");
    drop(Heap::create_at(&a.path, &small(0o600)).unwrap());
    drop(Heap::create_at(&b.path, &small(0o600)).unwrap());
    let data = a.path.join("data");
    std::fs::rename(b.path.join("data"), &data).unwrap();
    match Heap::open_at(&a.path) {
        Err(OpenError::ForeignRegion { path, found, expected }) => {
            assert_eq!(path, data);
            assert_ne!(found, expected);
        }
        r => panic!("expected ForeignRegion, got {r:?}"),
    }
}

#[test]
fn a_region_file_that_is_a_symbolic_link_is_not_followed() {
    let _serial = serial();
    let a = TempHeapDir::new("link-a", "heap");
    let b = TempHeapDir::new("link-b", "heap");
    drop(Heap::create_at(&a.path, &small(0o600)).unwrap());
    drop(Heap::create_at(&b.path, &small(0o600)).unwrap());
    let local = a.path.join("local");
    std::fs::remove_file(&local).unwrap();
    std::os::unix::fs::symlink(b.path.join("local"), &local).unwrap();
    match Heap::open_at(&a.path) {
        Err(OpenError::Io { path, .. }) => assert_eq!(path, local),
        r => panic!("expected an error naming {}, got {r:?}", local.display()),
    }
}

#[test]
fn an_mcas_window_of_another_heap_is_refused_naming_it() {
    let _serial = serial();
    let config = Config { coherence: Coherence::NoHwcc, huge_capacity: 0, ..small(0o600) };
    let a = TempHeapDir::new("window-a", "heap");
    let b = TempHeapDir::new("window-b", "heap");
    drop(Heap::create_at(&a.path, &config).unwrap());
    drop(Heap::create_at(&b.path, &config).unwrap());
    let window = a.path.join(cxlalloc::internal::WINDOW_FILE);
    std::fs::rename(b.path.join(cxlalloc::internal::WINDOW_FILE), &window).unwrap();
    match Heap::open_at(&a.path) {
        Err(OpenError::ForeignRegion { path, .. }) => assert_eq!(path, window),
        r => panic!("expected ForeignRegion, got {r:?}"),
    }
}

// ---- Item 8: names ------------------------------------------------------------------------

#[test]
fn heap_names_follow_one_grammar_at_its_edges() {
    let longest = "n".repeat(246);
    for good in ["a", "A-z_0.9", "x.", longest.as_str()] {
        assert!(Heap::check_name(good).is_ok(), "{good:?}");
    }
    let too_long = "n".repeat(247);
    for bad in ["", too_long.as_str(), "a/b", "../evil", "a\nb", "..", ".x", "-x", "a b", "caf\u{e9}", "a\0b"] {
        let r = Heap::check_name(bad);
        assert!(matches!(r, Err(OpenError::InvalidName { .. })), "{bad:?}: {r:?}");
        assert!(matches!(Heap::open(bad), Err(OpenError::InvalidName { .. })), "open {bad:?}");
    }
}

#[test]
fn the_longest_heap_name_can_be_created() {
    let _serial = serial();
    let prefix = format!("perm-{}-", std::process::id());
    let name = HeapName(format!("{prefix}{}", "n".repeat(246 - prefix.len())));
    assert_eq!(name.as_str().len(), 246);
    let heap = Heap::create(name.as_str(), &small(0o600)).unwrap();
    assert_eq!(heap.location(), format!("/dev/shm/cxlalloc.{}", name.as_str()));
}

#[test]
fn a_final_component_of_255_bytes_can_be_created_at_a_path() {
    let _serial = serial();
    let dir = TempHeapDir::new("leaf", &"l".repeat(255));
    drop(Heap::create_at(&dir.path, &small(0o600)).unwrap());
    assert!(Heap::open_at(&dir.path).is_ok());
    let too_long = dir.parent.join("l".repeat(256));
    assert!(matches!(Heap::create_at(&too_long, &small(0o600)), Err(OpenError::InvalidName { .. })));
    assert!(!too_long.exists());
}

#[test]
fn a_path_without_a_final_component_is_refused() {
    let _serial = serial();
    let dir = TempHeapDir::new("noleaf", "heap");
    let up = dir.parent.join("..");
    assert!(matches!(Heap::create_at(&up, &small(0o600)), Err(OpenError::InvalidName { .. })));
}
