//! The HWcc pages a process of a one-host heap maps (docs/design.md §9.1, "HWcc bytes"): the
//! harness counts every resident page of the HWcc regions in a process's PSS, so a page the
//! process never needed still costs it. Checked from `/proc/self/pagemap` (present bits), in
//! processes that open a heap another process created and used, as the harness's workers do.

mod common;

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use common::{fork_child, HeapName};
use cxlalloc::{Config, Heap};

const PAGE: usize = 4096;

/// Indices of the pages of this process's mapping of `dir/file` that are present.
fn present_pages(dir: &Path, file: &str) -> Result<Vec<usize>, String> {
    let want = std::fs::canonicalize(dir).map_err(|e| e.to_string())?.join(file);
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| e.to_string())?;
    let line = maps
        .lines()
        .find(|l| l.ends_with(want.to_str().unwrap_or("?")))
        .ok_or_else(|| format!("no mapping of {}", want.display()))?;
    let range = line.split_whitespace().next().unwrap_or("");
    let (start, end) = range.split_once('-').ok_or("bad maps line")?;
    let parse = |s: &str| usize::from_str_radix(s, 16).map_err(|e| e.to_string());
    let (start, end) = (parse(start)?, parse(end)?);
    let mut pagemap = std::fs::File::open("/proc/self/pagemap").map_err(|e| e.to_string())?;
    let mut present = Vec::new();
    for (i, page) in (start..end).step_by(PAGE).enumerate() {
        let mut entry = [0u8; 8];
        pagemap.seek(SeekFrom::Start((page / PAGE * 8) as u64)).map_err(|e| e.to_string())?;
        pagemap.read_exact(&mut entry).map_err(|e| e.to_string())?;
        if u64::from_ne_bytes(entry) >> 63 == 1 {
            present.push(i);
        }
    }
    Ok(present)
}

/// Attaches `threads` threads to `heap` at once (slots 0 .. threads), each allocating and
/// freeing blocks of both brackets and freeing blocks of the others remotely, bytes checked.
fn work(heap: &Heap, threads: usize) -> Result<(), String> {
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || -> Result<Vec<usize>, String> {
                    let h = heap.attach().map_err(|e| e.to_string())?;
                    barrier.wait(); // every slot leased together
                    let mut kept = Vec::new();
                    for (i, size) in [64usize, 1000, 20_000, 64, 300_000].into_iter().enumerate() {
                        let p = h.alloc(size).map_err(|e| e.to_string())?;
                        // SAFETY: `p` is a fresh block of `size` bytes.
                        unsafe { std::ptr::write_bytes(p.as_ptr(), t as u8 + 1, size) };
                        if i % 2 == 0 {
                            kept.push(p.as_ptr() as usize);
                        } else {
                            h.free(p).map_err(|e| e.to_string())?;
                        }
                    }
                    barrier.wait(); // every thread still holds its slot
                    Ok(kept)
                })
            })
            .collect();
        let kept: Vec<Vec<usize>> = workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "thread panicked".to_string())?)
            .collect::<Result<_, _>>()?;
        // Another thread's blocks, freed remotely (through the owner's mailbox or counter).
        let h = heap.attach().map_err(|e| e.to_string())?;
        for p in kept.into_iter().flatten() {
            let p = std::ptr::NonNull::new(p as *mut u8).ok_or("null block")?;
            h.free(p).map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

fn config() -> Config {
    Config { huge_capacity: 0, ..Config::with_capacity(256 << 20) }
}

#[test]
fn a_process_of_a_one_host_heap_maps_one_page_of_the_shared_region() {
    let name = HeapName::new("hwcc-pages");
    let heap = Heap::create(name.as_str(), &config()).unwrap();
    let dir = Heap::path_of(name.as_str()).unwrap();
    work(&heap, 4).unwrap();
    // The creator too: the fixed header, host entry 0 and its slots' records.
    assert_eq!(present_pages(&dir, "shared").unwrap().len(), 1, "creator");
    drop(heap);
    // Processes that open it afterwards, each with more threads than cores: every page the
    // others touched is in the page cache, where a read fault's fault-around would map it.
    let mut children: Vec<_> = (0..2)
        .map(|p| {
            let (name, dir) = (name.as_str().to_string(), dir.clone());
            fork_child(&format!("opener {p}"), move || {
                let heap = Heap::open(&name).map_err(|e| e.to_string())?;
                work(&heap, 8)?;
                let pages = present_pages(&dir, "shared")?;
                match pages.len() {
                    1 => Ok(()),
                    _ => Err(format!("shared region pages present: {pages:?}")),
                }
            })
        })
        .collect();
    for child in &mut children {
        child.succeeds();
    }
}
